"""`deepflow derive`: the accelerator a chip preset's technology and budgets give (analytical/chip/derive.py),
with the area, power and shoreline each part uses.

    deepflow derive chip=h100-n4
    deepflow derive chip=n5-hbm3e-700w chip.die_area_mm2=600 chip.power_budget_w=500 output=json

An infeasible chip (budgets that cannot hold one compute unit, a memory stack, ...) is an answer:
`feasible: NO` and the reason, exit status 0. Bad input (an unknown node, a split that does not sum
to 1, a negative area) exits 2 with one line naming the field.
"""

from __future__ import annotations

import json

from analytical.codes import REASON_TEXT, Reason
from deepflow.tables import table

GIB = 2.0**30
MIB = 2.0**20


def derivation_record(chip, derived) -> dict:
    """JSON-ready record of one derivation: inputs, feasibility, accelerator (human units), operating
    point and usage."""
    import dataclasses

    from analytical.chip.derive import accelerator_spec

    row = derived.row(0)
    return {"chip": dataclasses.asdict(chip), "feasible": row["feasible"], "reason": row["reason"],
            "accelerator": dataclasses.asdict(accelerator_spec(derived, name=chip.name, chip=chip)),
            "accelerator_si": row["accelerator"], "operating": row["operating"], "usage": row["usage"]}


def _share(used: float, budget: float) -> str:
    return f"{100.0 * used / budget:.1f} %" if budget > 0 else "-"


def derivation_table(record: dict) -> str:
    chip, acc, op, usage = record["chip"], record["accelerator"], record["operating"], record["usage"]
    budget = usage["budget"]
    reason = Reason[record["reason"].upper()]
    vdd = "solved" if chip["vdd_v"] is None else "fixed"
    facts = [
        ("feasible", "yes" if record["feasible"] else "NO: " + REASON_TEXT[reason]),
        ("operating point", f"{op['vdd_v']:.3f} V ({vdd}), {op['clock_hz'] / 1e9:.3f} GHz"),
        ("compute units", f"{acc['compute_units']} enabled of {op['units_on_die']:.0f} on the die, "
                          f"{chip['flops_per_cycle_per_unit']} FLOP/clk each"),
        ("peak dense", f"fp16/bf16 {acc['peak_tflops_bf16']:.1f}  fp8 {acc['peak_tflops_fp8']:.1f}  "
                       f"tf32 {acc['peak_tflops_tf32']:.1f}  fp32 {acc['peak_tflops_fp32']:.1f} TFLOP/s"),
        ("SRAM", f"{acc['sram_mib']:.1f} MiB at {acc['sram_bw_tb_per_s']:.2f} TB/s"),
        ("memory", f"{op['hbm_stacks']:.0f} x {chip['memory']}: {acc['hbm_gib']:.0f} GiB at "
                   f"{acc['hbm_bw_gb_per_s']:.0f} GB/s"),
        ("scale-up", f"{op['scale_up_lanes']:.0f} lanes: {acc['scale_up_bw_gb_per_s']:.0f} GB/s per direction"),
        ("scale-out", f"{op['scale_out_lanes']:.0f} lanes: {acc['scale_out_gbit_per_s']:.0f} Gbit/s per direction"),
        ("static power", f"{record['accelerator_si']['static_power_w']:.1f} W"),
    ]
    power = dict(usage["power_w"], total=sum(usage["power_w"].values()))
    return "\n".join([
        f"chip {chip['name']}: {chip['node']}, {chip['memory']}, scale-up {chip['scale_up_link']}, "
        f"scale-out {chip['scale_out_link']}; {chip['die_area_mm2']:g} mm2, {chip['power_budget_w']:g} W",
        table(["", ""], facts, align="ll", show_header=False), "",
        table(["area", "mm2", "of die"], [(k, f"{v:.1f}", _share(v, budget["die_area_mm2"]))
                                         for k, v in usage["area_mm2"].items()], indent=2), "",
        table(["power at peak", "W", "of budget"], [(k, f"{v:.1f}", _share(v, budget["power_w"]))
                                                    for k, v in power.items()], indent=2), "",
        table(["shoreline", "mm", "of PHY edge"], [(k, f"{v:.1f}", _share(v, budget["shoreline_mm"]))
                                                  for k, v in usage["shoreline_mm"].items()], indent=2)])


def cmd_derive(overrides: list[str]) -> int:
    from analytical.chip.derive import derive_chip
    from deepflow.config import chip_from_config, compose_config, option

    cfg = compose_config(overrides, config_name="derive")
    output = option(cfg, "output", ("table", "json"))
    chip = chip_from_config(cfg)
    if chip is None:
        from deepflow.presets import ConfigError, available

        raise ConfigError(f"chip=null: derive needs a chip preset: allowed {', '.join(available('chip'))}")
    record = derivation_record(chip, derive_chip(chip))
    print(json.dumps(record) if output == "json" else derivation_table(record))
    return 0
