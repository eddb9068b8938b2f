"""Which limit binds a design: the resource whose relaxation shortens its step the most.

`sensitivities(job, u)` evaluates the design of the `1 x d` point `u` (with its mapping) again with one
resource at a time `relax` times larger: the peak FLOP/s of every precision (compute), the HBM bandwidth,
the HBM capacity (the mapping searched again where the job has an inner search: capacity binds by the
mappings it rules out), the scale-up and the scale-out bandwidth, and the power budget (the chip derived
again from its template at the larger budget: the clock and supply the derivation picks). Each answer is
the % by which the step gets shorter; `binding_limit` names the largest (or "none" below `floor_pct`:
latencies and fixed overheads). A design the objective rules out names its own limit (HBM capacity for
out of memory, power for a power cap it breaks).
"""

from __future__ import annotations

import dataclasses

import torch

RESOURCES = {"compute": ("peak_fp32_flops_per_s", "peak_tf32_flops_per_s", "peak_fp16_flops_per_s",
                         "peak_bf16_flops_per_s", "peak_fp8_flops_per_s", "peak_fp4_flops_per_s", "peak_exp_per_s"),
             "HBM bandwidth": ("hbm_bw_bytes_per_s",),
             "scale-up": ("scale_up_bw_bytes_per_s",),
             "scale-out": ("scale_out_bw_bytes_per_s",)}
LIMITS = ("compute", "HBM bandwidth", "HBM capacity", "scale-up", "scale-out", "power")


def _step_time_s(batch, eff) -> float:
    from analytical.step.model import evaluate

    return float(evaluate(batch, eff).step_time_s[0])


def sensitivities(job, u: torch.Tensor, relax: float = 1.1) -> dict[str, float]:
    """`{limit: % shorter step}` of the point `u` (`1 x d`) of `job.space` (module docstring)."""
    from analytical.search import MAPPING_FIELDS
    from deepflow.run.best_design import base_space
    from deepflow.run.hierarchical import BestMappingSpace, search_best_mapping

    space, eff = job.space, base_space(job.space).efficiency
    batch = space.to_batch(u)
    base = _step_time_s(batch, eff)
    out = {}
    for limit, fields in RESOURCES.items():
        out[limit] = base / _step_time_s(batch.replace(**{f: getattr(batch, f) * relax for f in fields}), eff)
    roomy = batch.replace(hbm_bytes=batch.hbm_bytes * relax)
    if isinstance(space, BestMappingSpace):
        mapping = search_best_mapping(roomy, space.options, eff)
        out["HBM capacity"] = base / _step_time_s(roomy.replace(**{k: torch.tensor([v], dtype=batch.tp.dtype)
                                                                   for k, v in mapping.items()}), eff) \
            if mapping is not None else 1.0
    else:
        out["HBM capacity"] = 1.0  # a fixed mapping: capacity decides only whether it fits
    outer = base_space(space)
    if outer.chip is not None:
        chip = dataclasses.replace(outer.chip, power_budget_w=outer.chip.power_budget_w * relax)
        hot = dataclasses.replace(outer, chip=chip).to_batch(u)
        hot = hot.replace(**{k: getattr(batch, k) for k in MAPPING_FIELDS})
        out["power"] = base / _step_time_s(hot, eff)
    return {k: 100.0 * (v - 1.0) for k, v in out.items()}


def binding_limit(gains_pct: dict[str, float], reason: str = "feasible", floor_pct: float = 0.5) -> str:
    """The limit that binds: the design's own reason where it is infeasible, else the largest gain."""
    if reason == "out_of_memory":
        return "HBM capacity"
    if reason in ("power_over_budget", "power_cap"):
        return "power"
    limit = max(gains_pct, key=gains_pct.get)
    return limit if gains_pct[limit] >= floor_pct else "none"
