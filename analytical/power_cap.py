"""The operating point a part sustains running flat out: the clock and supply its power budget allows on the
chip derivation's V/f model, never above its datasheet peak.

A preset's silicon runs at the node's nominal supply at its *nominal point*, drawing the TDP of that point:
by default its own datasheet peak at its own TDP, which it then sustains. A part sold as a higher-power
rating of a die that another part rates (GB200: the B200 die, rated 2,250 dense 16-bit TFLOPS at 1,000 W as
HGX B200 and 2,500 at 1,200 W in the NVL72 rack) names that point (`AcceleratorSpec.nominal_tdp_w`,
`nominal_peak_tflops_bf16`): its watts above the nominal TDP buy the clock the V/f curve gives for them, which
may fall short of its own datasheet. A power limit `L` below the TDP (`nvidia-smi -pl`) takes TDP - L away.
The budget min(TDP, L) - nominal TDP is added to (or, negative, taken from) the compute partition at the
nominal point (units and their leakage, `analytical.step.energy.units_dynamic_power_w` + `static_power_w`;
memory and I/O keep theirs), which settles at the highest supply whose power fits
(`analytical.chip.power.operating_vdd_v`: C V^2 f with the alpha-power-law clock, leakage ~ V^3), with its clock
capped at the datasheet's. Peak rates then scale with the clock over the datasheet's, J per FLOP with V^2 and
static power with V^3; a part without a nominal point and a limit at or above its TDP changes nothing.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass

import torch
from scipy.optimize import brentq

from analytical.chip.constants import DerivationConstants
from analytical.chip.power import clock_ratio, operating_vdd_v
from analytical.chip.technology import logic_node
from analytical.specs import PEAK_FORMATS, AcceleratorSpec


@dataclass(frozen=True)
class OperatingPoint:
    """Where a part runs flat out within its power budget, relative to the fields its datasheet gives."""

    clock: float = 1.0  # clock (every peak rate) over the datasheet peak's, <= 1
    vdd: float = 1.0  # supply over the node's nominal one
    energy: float = 1.0  # compute-partition energy scale of the silicon's nominal point over the datasheet's


def power_budget_w(accelerator: AcceleratorSpec) -> float:
    """The power a part may draw: its TDP, or its power limit where that is lower (the limit alone on a part that
    names no TDP)."""
    limit = accelerator.power_limit_w
    if limit is None:
        return accelerator.tdp_w
    return min(accelerator.tdp_w, limit) if accelerator.tdp_w > 0 else limit


def operating_point(accelerator: AcceleratorSpec) -> OperatingPoint:
    """The sustained `OperatingPoint` of `accelerator` under its TDP and `power_limit_w` (module docstring); a part
    without a rating or a limit below its TDP returns at once, the others are solved once per distinct spec."""
    rated = accelerator.nominal_tdp_w is not None
    limited = accelerator.power_limit_w is not None and accelerator.power_limit_w < accelerator.tdp_w
    if accelerator.tdp_w <= 0 or not (rated or limited):
        return OperatingPoint()
    return _solved_operating_point(dataclasses.astuple(accelerator))


@functools.lru_cache(maxsize=256)
def _solved_operating_point(fields: tuple) -> OperatingPoint:
    """`operating_point` of the `AcceleratorSpec` whose fields (`dataclasses.astuple`) are `fields`."""
    from analytical.step.energy import compute_partition_scale, static_power_w, units_dynamic_power_w  # (cycle)

    accelerator = AcceleratorSpec(*fields)
    budget_w = power_budget_w(accelerator)
    rated = accelerator.nominal_tdp_w is not None
    node = logic_node(accelerator.logic_node)
    peak16 = max(accelerator.peak_tflops_fp16, accelerator.peak_tflops_bf16)
    share = accelerator.nominal_peak_tflops_bf16 / peak16 if rated else 1.0  # nominal clock over the datasheet's
    nominal_tdp_w = accelerator.nominal_tdp_w if rated else accelerator.tdp_w
    scale = compute_partition_scale(node, accelerator, tdp_w=nominal_tdp_w, peak_share=share)
    dynamic = scale * share * units_dynamic_power_w(node, accelerator)
    leakage = scale * (accelerator.static_power_w if accelerator.static_power_w is not None
                       else share * static_power_w(node, accelerator))
    budget = dynamic + leakage + budget_w - nominal_tdp_w
    t = lambda x: torch.tensor([float(x)], dtype=torch.float64)  # noqa: E731
    c = DerivationConstants()
    vt, vn = node.threshold_v, node.nominal_vdd_v
    vdd = float(operating_vdd_v(t(budget), t(0.0), t(dynamic), t(leakage), t(vt), t(vn), c)[0][0])
    ratio = float(clock_ratio(t(vdd), vt, vn, c.alpha)[0])
    if share * ratio > 1.0:  # the budget affords more than the datasheet: run at its clock, on the supply it takes
        vdd = brentq(lambda v: share * float(clock_ratio(t(v), vt, vn, c.alpha)[0]) - 1.0, min(vn, vdd), vdd)
        ratio = 1.0 / share
    return OperatingPoint(clock=share * ratio, vdd=vdd / vn,
                          energy=scale / compute_partition_scale(node, accelerator))


def capped_operating_point(accelerator: AcceleratorSpec, power_limit_w: float) -> tuple[float, float]:
    """`(clock_ratio, voltage_ratio)` of `accelerator` under `power_limit_w`: its `operating_point` with that limit."""
    point = operating_point(dataclasses.replace(accelerator, power_limit_w=power_limit_w))
    return point.clock, point.vdd


def apply_operating_point(fields: dict[str, float], accelerator: AcceleratorSpec) -> dict[str, float]:
    """The `DesignBatch` accelerator fields of `accelerator` (as `analytical.design` builds them from its datasheet)
    at its `operating_point`: peaks (tensor and special-function) x clock, J/FLOP x V^2, static power x V^3 (the
    compute-partition energies at the silicon's nominal point) and the budget (min(TDP, limit)) as `tdp_w`."""
    point = operating_point(accelerator)
    if point == OperatingPoint() and accelerator.power_limit_w is None:
        return fields
    out = dict(fields)
    for fmt in PEAK_FORMATS:
        out[f"peak_{fmt}_flops_per_s"] = fields[f"peak_{fmt}_flops_per_s"] * point.clock
        out[f"flop_energy_{fmt}_j"] = fields[f"flop_energy_{fmt}_j"] * point.energy * point.vdd ** 2
    out["peak_exp_per_s"] = fields["peak_exp_per_s"] * point.clock  # the special-function units share the clock
    out["sram_energy_j_per_byte"] = fields["sram_energy_j_per_byte"] * point.energy
    out["static_power_w"] = fields["static_power_w"] * point.energy * point.vdd ** 3
    out["tdp_w"] = power_budget_w(accelerator)
    return out
