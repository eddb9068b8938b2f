"""Human-readable tables of analytical results (the edge where SI units become human units)."""

from __future__ import annotations

from collections import Counter

from analytical import REASON_TEXT, Reason, TIME_PARTS
from analytical.power_cap import operating_point
from analytical.stack import OVERLAP_KINDS
from deepflow.tables import table

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


def _overlaps(mapping) -> str:
    """' overlap=dp,tp' for the traffic kinds that overlap compute, with '(stack default)' where the mapping
    left one of them unset (`MappingSpec.overlap`); empty where none does."""
    kinds = [k for k in OVERLAP_KINDS if mapping.overlap(k)]
    if not kinds:
        return ""
    unset = any(getattr(mapping, OVERLAP_KINDS[k]) is None for k in kinds)
    return f" overlap={','.join(kinds)}" + (" (stack default)" if unset else "")


def _sustained_clock(accelerator) -> str:
    """" at 0.994x rated clock" where the part sustains less than its datasheet clock (`analytical.power_cap`)."""
    clock = operating_point(accelerator).clock
    return f" at {clock:.3f}x rated clock" if clock < 1.0 else ""


def design_line(accelerator, system, model, mapping) -> str:
    dp = mapping.dp if mapping.dp is not None else "auto"
    part = accelerator.name + _sustained_clock(accelerator)
    return (f"{model.name} on {system.num_devices} x {part} ({system.name}); "
            f"tp={mapping.tp} pp={mapping.pp} dp={dp} cp={mapping.cp} ep={mapping.ep} vp={mapping.vp} "
            f"sp={int(mapping.sequence_parallel)} mb={mapping.micro_batch_size} gb={mapping.global_batch_size} "
            f"recompute={mapping.recompute} zero={mapping.zero_stage} distopt={int(mapping.distributed_optimizer)} "
            f"precision={mapping.precision} "
            f"flash={int(mapping.flash_attention)}"
            + (" fsdp=1" if mapping.fsdp else "")
            + _overlaps(mapping)
            + (f" ep_dispatcher={mapping.ep_dispatcher}" if mapping.ep_dispatcher != "alltoall" else "")
            + (" overlap_ep=1" if mapping.overlap_ep_comm else "")
            + (f" moe_capacity_factor={mapping.moe_capacity_factor:g}" if mapping.moe_capacity_factor else "")
            + (" moe_pad_to_capacity=1" if mapping.moe_pad_to_capacity else "")
            + (f" offload_layers={mapping.offload_layers}" if mapping.offload_layers else "")
            + (f" dp_shard={mapping.dp_shard}" if mapping.dp_shard else "")
            + (f" fused_jobs={mapping.fused_jobs}" if mapping.fused_jobs > 1 else "")
            + (f" dp_mode={mapping.dp_mode} ps_shards={mapping.ps_shards}" if mapping.dp_mode != "allreduce" else "")
            + (f" staleness={mapping.staleness}" if mapping.staleness else "")
            + ("" if mapping.fused_cross_entropy else " fused_cross_entropy=0")
            + ("" if mapping.grad_reduce_in_fp32 else " grad_reduce_in_fp32=0")
            + (f" optimizer_state_dtype={mapping.optimizer_state_dtype}" if mapping.optimizer_state_dtype != "fp32" else "")
            + (f" master_params={mapping.master_params}" if mapping.master_params != "fp32" else "")
            + (f" recompute_layers={mapping.recompute_layers}" if mapping.recompute_layers else "")
            + (f" etp={mapping.etp}" if mapping.etp else "")
            + (" fp8_param_gather=1" if mapping.fp8_param_gather else "")
            + (" fp8_attention=1" if mapping.fp8_attention else "")
            + (" fused_expert_mlp=1" if mapping.fused_expert_mlp else "")
            + (" sp_keeps_gathered_input=1" if mapping.sp_keeps_gathered_input else "")
            + (f" cuda_graph={mapping.cuda_graph}" if mapping.cuda_graph != "none" else "")
            + (f" elementwise={mapping.elementwise}" if mapping.elementwise != "fused" else "")
            + (f" attention_kernel={mapping.attention_kernel}" if mapping.attention_kernel != "native" else "")
            + (f" power_limit={accelerator.power_limit_w:g}W" if accelerator.power_limit_w else ""))


def step_table(row: dict, hbm_bytes: float, tdp_w: float = 0.0, token: str = "token") -> str:
    """The evaluate command's tables for one design (`StepResult.row`); `tdp_w` is the power budget;
    `token` what one token is (`image` for a CNN, whose tokens are its images)."""
    reason = Reason[row["reason"].upper()]
    summary = [
        ("feasible", "yes" if row["feasible"] else "NO: " + REASON_TEXT[reason]),
        ("step time", _fmt_time(row["step_time_s"]).strip()),
        ("MFU / HFU", f"{row['mfu'] * 100:.1f} % / {row['hfu'] * 100:.1f} %"
         + (" (of the direct algorithms' FLOPs: fast convolutions do fewer)" if row["mfu"] > 1.0 else "")),
        (f"{token}s per s", f"{row['tokens_per_s']:,.0f}"),
        ("energy per step", f"{_fmt_energy(row['energy_j']).strip()} (all devices)"),
        (f"energy per {token}", _fmt_energy(row["energy_per_token_j"]).strip()),
        ("avg power", f"{row['avg_power_w']:.0f} W per device"
         + (f" of {tdp_w:.0f} W budget" if tdp_w > 0 else " (no power budget)")),
    ]
    total = row["step_time_s"]
    parts = [table(["", ""], summary, align="ll", show_header=False), "",
             table(["part", "time", "share"],
                   [(p, _fmt_time(row["breakdown"][p]).strip(), f"{100 * row['breakdown'][p] / total:.1f} %")
                    for p in TIME_PARTS],
                   title="time breakdown (critical path)", indent=2, show_header=False), "",
             table(["part", "GiB"], [(p, f"{v / GIB:.2f} GiB") for p, v in row["memory_breakdown"].items()],
                   title=f"memory per device: {row['memory_per_device_bytes'] / GIB:.2f} GiB of "
                         f"{hbm_bytes / GIB:.0f} GiB", indent=2, show_header=False)]
    if row.get("energy_breakdown"):
        energy = row["energy_j"]
        parts += ["", table(["part", "energy", "share"],
                            [(p, _fmt_energy(v).strip(), f"{100 * v / energy if energy > 0 else 0.0:.1f} %")
                             for p, v in row["energy_breakdown"].items()],
                            title="energy breakdown (one step, all devices)", indent=2, show_header=False)]
    return "\n".join(parts)


def fused_table(fused: dict) -> str:
    """The fused jobs (`analytical.fused.fused_comparison`) against serial and one job per accelerator."""
    b = fused["fused_jobs"]
    rows = [(f"fused ({b} jobs, 1 accelerator)", _fmt_time(fused["fused_step_time_s"]).strip(),
             _fmt_energy(fused["fused_energy_per_job_j"]).strip(), f"{fused['speedup_vs_serial']:.2f} x"),
            (f"serial ({b} jobs one after another)", _fmt_time(fused["serial_step_time_s"]).strip(),
             _fmt_energy(fused["serial_energy_per_job_j"]).strip(), "1.00 x"),
            (f"one job per accelerator ({b} accelerators)", _fmt_time(fused["one_per_accelerator_step_time_s"]).strip(),
             _fmt_energy(fused["serial_energy_per_job_j"]).strip(), f"{b:.2f} x on {b} accelerators")]
    largest = fused["largest_fused_jobs"]
    fits = ("none: one job does not fit" if largest == 0 else
            f"{largest}" if largest < fused["searched_up_to"] else f">= {largest} (searched up to it)")
    return (table(["way", "one step of every job", "energy per job-step", "throughput vs serial"], rows,
                  title="fused jobs (HFTA) against running them one by one", indent=2)
            + f"\n  largest fused_jobs that fits: {fits}; MPS (concurrent processes) is not modelled")


def _largest_parts(parts: dict[str, float], total: float, n: int = 3) -> str:
    """The `n` largest of a row's `parts` (largest first) with their share of `total`."""
    return ", ".join(f"{k} {v / total:.0%}" for k, v in list(parts.items())[:n]) if total else ""


def validation_table(result: dict) -> str:
    parts = any("time_breakdown_s" in r for r in result["rows"])  # validate breakdown=true
    rows = [(r["id"], f"{r['predicted_s']:.3f}", f"{r['measured_s']:.3f}", f"{r['error']:+.1%}",
             "" if r["feasible"] else "(infeasible as given)")
            + ((_largest_parts(r["time_breakdown_s"], r["predicted_s"]),) if parts else ()) for r in result["rows"]]
    lines = [table(["id", "predicted_s", "measured_s", "error", ""]
                   + (["largest parts of the predicted time"] if parts else []), rows,
                   align="lrrrl" + ("l" if parts else ""))]
    memory = [r for r in result["rows"] if "memory_breakdown_gib" in r]
    if memory:
        lines.append(table(["id", "predicted GiB", "measured GiB", "error", "largest parts of the predicted memory"],
                           [(r["id"], f"{r['predicted_memory_gib']:.1f}", f"{r['measured_memory_gib']:.1f}",
                             f"{r['memory_error']:+.1%}",
                             _largest_parts(r["memory_breakdown_gib"], r["predicted_memory_gib"]))
                            for r in memory], align="lrrrl", title="device memory by part:"))
    s = result["summary"]
    counts = Counter(f"{k} {v}" for r in result.get("rows", []) for k, v in r.get("assumed", {}).items())
    if counts:  # what the reader inferred: from the run having trained (recompute=auto, etp, ...), from its source
        lines += ["", "inferred from the run having trained or from its source (output=json: rows[].assumed): "
                      + "; ".join(f"{k} on {n} row{'s' * (n != 1)}" for k, n in sorted(counts.items()))]
    unstated = result.get("unstated_columns", [])
    if unstated:  # what the file leaves to the reader's defaults (experiments/validation/README.md, per column)
        lines += ["", f"{len(unstated)} optional columns not in the file, read as their defaults: "
                      + ", ".join(unstated[:6]) + (", ... (output=json lists all)" if len(unstated) > 6 else "")]
    lines += ["", f"n = {s['n']}   mean |error| = {s['mape']:.1%}   max |error| = {s['max_abs_error']:.1%}   "
                  f"median |error| = {s['median_abs_error']:.1%}   mean signed error = {s['mean_signed_error']:+.1%}"]
    if "memory_n" in s:
        lines.append(f"device memory, {s['memory_n']} rows that state it: mean |error| = {s['memory_mape']:.1%}   "
                     f"max |error| = {s['memory_max_abs_error']:.1%}   within 10 %: {s['memory_within_10pct']}")
    ranked = {k: g for k, g in result["by_group"].items() if g["n"] > 2 and g["kendall_tau"] is not None}
    if ranked:
        lines.append(table(["model", "n", "tau", "mean |error|"],
                           [(group, g["n"], f"{g['kendall_tau']:+.3f}", f"{g['mape']:.1%}")
                            for group, g in ranked.items()],
                           title="Kendall tau of predicted vs measured time, per model:", indent=2))
    if result.get("by"):
        lines.append(table(["group", "n", "mean |error|", "max |error|"],
                           [(label, g["n"], f"{g['mape']:.1%}", f"{g['max_abs_error']:.1%}")
                            for label, g in result["by"].items()],
                           title="error by group:", indent=2))
    return "\n".join(lines)
