"""The best design of a run, as a reader and `deepflow evaluate` want it: its values (searched
parameters, the mapping an inner search chose, the fields it changes from the template), its chip in
one line, and the step time its written-back config evaluates to."""

from __future__ import annotations

from typing import Any

import torch
from omegaconf import OmegaConf


def base_space(space):
    """The `DesignSpace` behind `space` (the outer space of a `BestMappingSpace`): template and chip."""
    from deepflow.run.hierarchical import BestMappingSpace

    return space.outer if isinstance(space, BestMappingSpace) else space


def chosen_mapping(space, X: torch.Tensor) -> list[dict[str, float]]:
    """Per point of `X n x d`, the mapping fields the inner search chose (`inner=best_mapping`:
    `BestMappingSpace.to_batch`, cached); empty dicts for a plain space (its mapping is in X)."""
    from analytical.search import MAPPING_FIELDS
    from deepflow.run.hierarchical import BestMappingSpace

    if not isinstance(space, BestMappingSpace):
        return [{} for _ in range(X.shape[0])]
    batch = space.to_batch(X)
    return [{name: float(getattr(batch, name)[i]) for name in MAPPING_FIELDS} for i in range(X.shape[0])]


def design_values(space, x: torch.Tensor) -> dict[str, float]:
    """`{field: SI value}` of the point `x (d,)`: every searched parameter (DesignBatch fields and
    chip inputs), the mapping an inner search chose for it (`inner=best_mapping`) and the
    DesignBatch fields its design changes from the space's template (tied peaks, derived dp, a
    derived chip's accelerator)."""
    u = x.reshape(1, -1)
    out = {name: float(v[0]) for name, v in space.decode(u).items()}
    out.update(chosen_mapping(space, u)[0])
    batch, template = space.to_batch(u), base_space(space).template
    for name, value in batch.fields().items():
        v, t = float(value[0]), float(getattr(template, name)[0])
        if name == "dp" or v != t:
            out.setdefault(name, v)
    return out


def chip_summary(chip: dict, accelerator) -> dict[str, Any]:
    """The chip inputs that matter to a reader and what they derive (`AcceleratorSpec` units)."""
    keys = ("node", "memory", "scale_up_link", "scale_out_link", "die_area_mm2", "power_budget_w",
            "area_compute_fraction", "area_sram_fraction", "power_compute_fraction", "power_memory_fraction",
            "shoreline_memory_fraction", "flops_per_cycle_per_unit", "scale_out_lanes")
    derived = ("compute_units", "peak_tflops_bf16", "peak_tflops_fp8", "sram_mib", "hbm_gib", "hbm_bw_gb_per_s",
               "scale_up_bw_gb_per_s", "scale_out_gbit_per_s", "tdp_w")
    return {**{k: chip[k] for k in keys if k in chip}, **{k: getattr(accelerator, k) for k in derived}}


def chip_line(c: dict[str, Any]) -> str:
    return (f"chip: {c['node']} {c['memory']} {c['die_area_mm2']:.0f} mm2 {c['power_budget_w']:.0f} W; area "
            f"compute/sram {c['area_compute_fraction']:.2f}/{c['area_sram_fraction']:.2f}, power compute/memory "
            f"{c['power_compute_fraction']:.2f}/{c['power_memory_fraction']:.2f}, shoreline memory "
            f"{c['shoreline_memory_fraction']:.2f}, {c['flops_per_cycle_per_unit']} FLOP/clk per unit -> "
            f"{c['compute_units']} units, {c['peak_tflops_bf16']:.0f} TFLOP/s bf16, {c['sram_mib']:.0f} MiB SRAM, "
            f"{c['hbm_gib']:.0f} GiB HBM at {c['hbm_bw_gb_per_s']:.0f} GB/s, scale-up {c['scale_up_bw_gb_per_s']:.0f} "
            f"GB/s, scale-out {c['scale_out_gbit_per_s']:.0f} Gbit/s")


def roundtrip_step_time_s(sections: dict[str, dict], eff=None) -> tuple[tuple, float]:
    """`(specs, step time)` of a design config as `deepflow evaluate design=<file>` computes them
    (with the efficiency constants `eff`, e.g. a calibration's; None: the defaults)."""
    from analytical import DEFAULT_EFFICIENCY, evaluate
    from deepflow.config import design_from_config

    specs, design, _ = design_from_config(OmegaConf.create(sections))
    return specs, float(evaluate(design, DEFAULT_EFFICIENCY if eff is None else eff).step_time_s[0])
