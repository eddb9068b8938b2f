"""The enumerable chip-derived space of the time-energy Pareto benchmark (`bench_bo.py`, Pareto case).

On a fixed accelerator the fastest mapping also spends the least energy per step, so the time-energy
front is one design. Here every point derives its accelerator (`analytical.chip.derive`, around the
chip template `conf/chip/n5-hbm3e-700w.yaml`) from a package power budget and its compute / memory
split: more power buys a higher supply and clock (shorter steps) at a higher energy per FLOP (~V^2),
so the front is a real trade-off. The space is fully discrete, so its front is known exactly by
evaluating every known-feasible point in one batched pass.

Workload: Llama-3 70B on the 1,024 devices of `conf/system/dgx-h100-superpod.yaml`, global batch
1024 x 8192 tokens, sequence parallel, flash attention, distributed optimizer, bf16
(`conf/mapping/llama3-70b-1024.yaml`); the template's accelerator (`h100-sxm-80gb`) is replaced by
each point's derived chip. dp is derived (1024 / (tp pp)).

Continuous chip inputs are grids as `categorical` parameters with numeric choices (the kinds of
`analytical.space.Parameter` have no ordered grid of arbitrary numbers; BO models a categorical
with more than two choices with a categorical kernel, evolution mutates it to any other value).

    python experiments/benchmarks/pareto_space.py    # grid, known-feasible, feasible, the front; one JSON line
    python experiments/benchmarks/pareto_space.py --tiny    # the same on a 2,880-point corner (a quick check)

Measured (`python experiments/benchmarks/pareto_space.py`, under 1 s at 0562c3b): grid 311,040 points, 202,176
known-feasible, 124,416 feasible (the rest out of memory); the true front has 27 designs, step time 5.66-11.24 s
and energy per step 1.86-5.10 MJ along it (2.0x and 2.7x). Every front design has 70 % of the die in compute
units (2048 or, at the low budgets, 4096 FLOP/clk each) and a 64-device scale-up domain; all but one run without
recomputation at tp 8 pp 1 micro-batch 2 or tp 4 pp 2 micro-batch 1; along the front the power budget
(300-1200 W) and its compute / memory split move: finding the front means finding that chip and mapping, then
the right budgets and splits. (When bench_bo.py's Pareto table was measured, bcb1b39, the model's front had 23
designs, 5.51-10.70 s and 1.49-3.48 MJ, with 114,048 feasible points; later model changes moved it.)
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import time

import torch

from analytical.build import single_design
from analytical.design import DesignBatch
from analytical.space import DesignSpace, Parameter
from deepflow.presets import load_preset
from deepflow.run.objectives import make_objective

CHIP_TEMPLATE = "n5-hbm3e-700w"  # conf/chip: N5, HBM3e, NVLink4, IB-NDR, 800 mm2; its other inputs stay
PARETO_PARAMS = (
    # package power: V100 SXM2 300 W, A100 SXM4 400 W, H100 SXM5 700 W, B200 (HGX) 1000 W, B200 in
    # GB200 NVL72 1200 W (NVIDIA datasheets, as joint.yaml's 300-1200 W); 500, 600, 850: ESTIMATE,
    # fill-ins so that neighbouring levels differ by 1.17-1.33x
    Parameter("power_budget_w", "categorical", choices=(300, 400, 500, 600, 700, 850, 1000, 1200)),
    # share of the budget for compute (units, SRAM, leakage): 0.8 ~ the A100/H100 calibration 0.805
    # (conf/chip/a100-n7.yaml); 0.6, 0.7: ESTIMATE, steps of 0.1 towards joint.yaml's lower bound 0.5.
    # 0.9 is left out: with memory >= 0.1 no power would remain for the network
    Parameter("power_compute_fraction", "categorical", choices=(0.6, 0.7, 0.8)),
    # share for the HBM stacks and PHYs: 0.1 and 0.2 bracket the A100 estimate 0.155 (a100-n7.yaml);
    # 0.3: ESTIMATE, a bandwidth-heavy split inside joint.yaml's 0.05-0.4. The network gets the rest;
    # a split that leaves it nothing (0.8 + 0.2, 0.7 + 0.3) has no scale-out link: known-infeasible
    Parameter("power_memory_fraction", "categorical", choices=(0.1, 0.2, 0.3)),
    # die area for compute units: 0.5 the A100/H100 die shot (a100-n7.yaml), 0.7 joint.yaml's upper
    # bound, 0.6 between; SRAM keeps the template's 0.1, the PHYs and uncore get the rest (0.4-0.2)
    Parameter("area_compute_fraction", "categorical", choices=(0.5, 0.6, 0.7)),
    # dense FP16 FLOP/clk per unit: A100 SM 2048, H100 SM 4096 (whitepapers), 8192 one doubling more
    # (chip-mapping.yaml's range)
    Parameter("flops_per_cycle_per_unit", "log2", 2048, 8192),
    # devices per scale-up domain: DGX H100's 8 (datasheet) to 64, an NVL72-class domain as a power of
    # two (chip-mapping.yaml's range)
    Parameter("scale_up_domain", "log2", 8, 64),
    # tensor parallel: up to 8, the Megatron-LM limit in a node (Narayanan et al. 2021, Table 1) and
    # the model's 8 key-value heads (tp must divide them)
    Parameter("tp", "log2", 1, 8),
    # pipeline stages: every power of two dividing the 80 layers (up to 16 stages of 5 layers)
    Parameter("pp", "log2", 1, 16),
    # sequences per micro-batch: ESTIMATE, 1-2; 4 adds 50 % more points and no front design (an
    # exhaustive check of this space with 1-4 and a 4-level compute split: every front design had 1 or 2)
    Parameter("micro_batch_size", "log2", 1, 2),
    # activation recomputation: every option of the model
    Parameter("recompute", "categorical", choices=("none", "selective", "full")),
)


def pareto_template() -> DesignBatch:
    """The workload design every point varies (its accelerator fields are replaced by the derived chip)."""
    return single_design(load_preset("hardware", "h100-sxm-80gb"), load_preset("system", "dgx-h100-superpod"),
                         load_preset("model", "llama3-70b"), load_preset("mapping", "llama3-70b-1024"))


def pareto_space() -> DesignSpace:
    """The fully discrete chip-derived space of the module docstring (validated)."""
    return DesignSpace("bench-pareto-chip", PARETO_PARAMS, pareto_template(),
                       chip=load_preset("chip", CHIP_TEMPLATE)).validate()


# `--tiny`: the lowest and highest power budget, one split of each (the front designs' area share)
TINY = {"power_budget_w": (300, 1200), "power_compute_fraction": (0.7,), "power_memory_fraction": (0.2,),
        "area_compute_fraction": (0.7,)}


def tiny_space() -> DesignSpace:
    """`pareto_space` with the choices of `TINY` only (2,880 points)."""
    space = pareto_space()
    params = tuple(dataclasses.replace(p, choices=TINY[p.name]) if p.name in TINY else p for p in space.parameters)
    return dataclasses.replace(space, name=space.name + "-tiny", parameters=params).validate()


def summary(space: DesignSpace) -> dict:
    """Exhaustive evaluation of `space` under time_energy: sizes, the true front and its ranges
    (prints the front's designs)."""
    from bench_bo import front_2d, ground_truth  # the bench's exact front (lazy: bench_bo imports this module)

    start = time.perf_counter()
    truth = ground_truth(space, make_objective("time_energy"))
    seconds = time.perf_counter() - start
    Yf, Xf = truth["Y"][truth["feasible"]], truth["points"][truth["feasible"]]
    F = front_2d(Yf)
    rows = torch.stack([torch.nonzero((Yf == f).all(-1))[0, 0] for f in F])
    values = space.decode(Xf[rows])
    for i, f in enumerate(F):
        print(f"  {math.exp(f[0]):7.3f} s {math.exp(f[1]) / 1e6:7.3f} MJ  "
              + " ".join(f"{k}={float(v[i]):g}" for k, v in values.items()))
    time_s, energy_j = F[:, 0].exp(), F[:, 1].exp()
    return {"space": space.name, "grid": truth["num_grid"], "known_feasible": truth["num_known_feasible"],
            "feasible": truth["num_feasible"], "front_size": F.shape[0],
            "front_step_time_s": [float(time_s.min()), float(time_s.max())],
            "front_energy_j": [float(energy_j.min()), float(energy_j.max())],
            "ground_truth_s": round(seconds, 1)}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tiny", action="store_true", help="the 2,880-point corner of `TINY` (a quick check)")
    out = summary(tiny_space() if parser.parse_args().tiny else pareto_space())
    print(f"grid {out['grid']:,}, known-feasible {out['known_feasible']:,}, feasible {out['feasible']:,}, "
          f"front {out['front_size']} designs, step time {out['front_step_time_s'][0]:.2f}-"
          f"{out['front_step_time_s'][1]:.2f} s, energy {out['front_energy_j'][0] / 1e6:.2f}-"
          f"{out['front_energy_j'][1] / 1e6:.2f} MJ per step ({out['ground_truth_s']} s)")
    print(json.dumps(out))
