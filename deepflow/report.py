"""Human-readable tables of analytical results (the edge where SI units become human units)."""

from __future__ import annotations

from analytical import REASON_TEXT, Reason, TIME_PARTS

GIB = 2.0**30


def _fmt_time(seconds: float) -> str:
    if seconds >= 1.0:
        return f"{seconds:9.3f} s "
    return f"{seconds * 1e3:9.3f} ms"


def _fmt_energy(joules: float) -> str:
    for scale, unit in ((1e9, "GJ"), (1e6, "MJ"), (1e3, "kJ"), (1.0, "J "), (1e-3, "mJ")):
        if abs(joules) >= scale:
            return f"{joules / scale:9.3f} {unit}"
    return f"{joules * 1e6:9.3f} uJ"


def design_line(accelerator, system, model, mapping) -> str:
    dp = mapping.dp if mapping.dp is not None else "auto"
    return (f"{model.name} on {system.num_devices} x {accelerator.name} ({system.name}); "
            f"tp={mapping.tp} pp={mapping.pp} dp={dp} cp={mapping.cp} ep={mapping.ep} vp={mapping.vp} "
            f"sp={int(mapping.sequence_parallel)} mb={mapping.micro_batch_size} gb={mapping.global_batch_size} "
            f"recompute={mapping.recompute} zero={mapping.zero_stage} distopt={int(mapping.distributed_optimizer)} "
            f"precision={mapping.precision} "
            f"flash={int(mapping.flash_attention)}"
            + (" fsdp=1" if mapping.fsdp else "")
            + (f" offload_layers={mapping.offload_layers}" if mapping.offload_layers else "")
            + (f" power_limit={accelerator.power_limit_w:g}W" if accelerator.power_limit_w else ""))


def step_table(row: dict, hbm_bytes: float, tdp_w: float = 0.0) -> str:
    """The evaluate command's table for one design (`StepResult.row`); `tdp_w` is the power budget."""
    reason = Reason[row["reason"].upper()]
    lines = [
        f"feasible         {'yes' if row['feasible'] else 'NO: ' + REASON_TEXT[reason]}",
        f"step time        {_fmt_time(row['step_time_s']).strip()}",
        f"MFU / HFU        {row['mfu'] * 100:.1f} % / {row['hfu'] * 100:.1f} %",
        f"tokens per s     {row['tokens_per_s']:,.0f}",
        f"energy per step  {_fmt_energy(row['energy_j']).strip()} (all devices)",
        f"energy per token {_fmt_energy(row['energy_per_token_j']).strip()}",
        f"avg power        {row['avg_power_w']:.0f} W per device"
        + (f" of {tdp_w:.0f} W budget" if tdp_w > 0 else " (no power budget)"),
        "",
        "time breakdown (critical path)",
    ]
    total = row["step_time_s"]
    for part in TIME_PARTS:
        value = row["breakdown"][part]
        lines.append(f"  {part:18s}{_fmt_time(value)}  {100 * value / total:5.1f} %")
    lines += ["", f"memory per device: {row['memory_per_device_bytes'] / GIB:.2f} GiB of {hbm_bytes / GIB:.0f} GiB"]
    for part, value in row["memory_breakdown"].items():
        lines.append(f"  {part:18s}{value / GIB:9.2f} GiB")
    if row.get("energy_breakdown"):
        lines += ["", "energy breakdown (one step, all devices)"]
        for part, value in row["energy_breakdown"].items():
            share = 100 * value / row["energy_j"] if row["energy_j"] > 0 else 0.0
            lines.append(f"  {part:18s}{_fmt_energy(value)}  {share:5.1f} %")
    return "\n".join(lines)


def validation_table(result: dict) -> str:
    lines = [f"{'id':40s} {'predicted_s':>12s} {'measured_s':>12s} {'error':>8s}"]
    for r in result["rows"]:
        flag = "" if r["feasible"] else "  (infeasible as given)"
        lines.append(f"{r['id']:40s} {r['predicted_s']:12.3f} {r['measured_s']:12.3f} {r['error']:+8.1%}{flag}")
    s = result["summary"]
    lines += ["", f"n = {s['n']}   mean |error| = {s['mape']:.1%}   max |error| = {s['max_abs_error']:.1%}   "
                  f"median |error| = {s['median_abs_error']:.1%}   mean signed error = {s['mean_signed_error']:+.1%}"]
    if "memory_n" in s:
        lines.append(f"device memory, {s['memory_n']} rows that state it: mean |error| = {s['memory_mape']:.1%}   "
                     f"max |error| = {s['memory_max_abs_error']:.1%}   within 10 %: {s['memory_within_10pct']}")
    ranked = {k: g for k, g in result["by_group"].items() if g["n"] > 2 and g["kendall_tau"] is not None}
    if ranked:
        lines.append("Kendall tau of predicted vs measured time, per model:")
        for group, g in ranked.items():
            lines.append(f"  {group:20s} n={g['n']:3d}  tau={g['kendall_tau']:+.3f}  mean |error|={g['mape']:.1%}")
    return "\n".join(lines)
