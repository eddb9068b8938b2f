"""A device run under a power limit below its TDP (`nvidia-smi -pl`): the clock and supply the
chip derivation's V/f model gives it.

A preset's datasheet peak is its rate at the node's nominal supply, drawing its TDP when running
flat out. A limit `L` < TDP takes `TDP - L` watts from the compute partition (units and their
leakage, `analytical.step.energy.units_dynamic_power_w` + `static_power_w`; memory and I/O keep theirs),
and the compute partition settles at the highest supply whose power fits what is left
(`analytical.chip.power.operating_vdd_v`: C V^2 f with the alpha-power-law clock, leakage ~ V^3).
Peak rates then scale with the clock, J per FLOP with V^2 and static power with V^3; a limit at or
above the TDP changes nothing.
"""

from __future__ import annotations

import torch

from analytical.chip.constants import DerivationConstants
from analytical.chip.power import clock_ratio, operating_vdd_v
from analytical.chip.technology import logic_node
from analytical.specs import PEAK_FORMATS, AcceleratorSpec


def capped_operating_point(accelerator: AcceleratorSpec, power_limit_w: float) -> tuple[float, float]:
    """`(clock_ratio, voltage_ratio)` (<= 1) of `accelerator` under `power_limit_w`, relative to its
    datasheet operating point."""
    from analytical.step.energy import compute_partition_scale, static_power_w, units_dynamic_power_w  # (cycle)

    if accelerator.tdp_w <= 0 or power_limit_w >= accelerator.tdp_w:
        return 1.0, 1.0
    node = logic_node(accelerator.logic_node)
    scale = compute_partition_scale(node, accelerator)
    dynamic = scale * units_dynamic_power_w(node, accelerator)
    leakage = scale * (accelerator.static_power_w if accelerator.static_power_w is not None
                       else static_power_w(node, accelerator))
    budget = dynamic + leakage - (accelerator.tdp_w - power_limit_w)
    t = lambda x: torch.tensor([float(x)], dtype=torch.float64)  # noqa: E731
    c = DerivationConstants()
    vdd, _ = operating_vdd_v(t(budget), t(0.0), t(dynamic), t(leakage), t(node.threshold_v),
                             t(node.nominal_vdd_v), c)
    vdd = torch.clamp_max(vdd, node.nominal_vdd_v)
    ratio = clock_ratio(vdd, node.threshold_v, node.nominal_vdd_v, c.alpha)
    return float(ratio[0]), float(vdd[0]) / node.nominal_vdd_v


def apply_power_limit(fields: dict[str, float], accelerator: AcceleratorSpec) -> dict[str, float]:
    """The `DesignBatch` accelerator fields of `accelerator` (as `analytical.design` builds them)
    under its `power_limit_w`, if any: peaks (tensor and special-function) x clock ratio, J/FLOP x V^2,
    static power x V^3 and the limit as the power budget."""
    if accelerator.power_limit_w is None:
        return fields
    f, v = capped_operating_point(accelerator, accelerator.power_limit_w)
    out = dict(fields)
    for fmt in PEAK_FORMATS:
        out[f"peak_{fmt}_flops_per_s"] = fields[f"peak_{fmt}_flops_per_s"] * f
        out[f"flop_energy_{fmt}_j"] = fields[f"flop_energy_{fmt}_j"] * v * v
    out["peak_exp_per_s"] = fields["peak_exp_per_s"] * f  # the special-function units share the clock
    out["static_power_w"] = fields["static_power_w"] * v ** 3
    out["tdp_w"] = min(fields["tdp_w"], accelerator.power_limit_w) if fields["tdp_w"] > 0 else accelerator.power_limit_w
    return out
