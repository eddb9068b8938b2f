"""Two-objective front and hypervolume helpers (`deepflow.plots`, and the exact ones of
experiments/benchmarks/bench_bo.py), and the chip-derived space of the benchmark's Pareto case
(experiments/benchmarks/pareto_space.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from analytical.codes import DTYPE
from deepflow.plots import hypervolume_2d, pareto_front_mask

BENCHMARKS = Path(__file__).resolve().parents[3] / "experiments" / "benchmarks"
# hand-computed: a staircase of three points under ref (4, 4): (4-1)(4-3) + (4-2)(3-2) + (4-3)(2-1) = 6
FRONT = [[1.0, 3.0], [2.0, 2.0], [3.0, 1.0]]
EXTRA = [[3.0, 3.0], [2.5, 2.0], [5.0, 0.0], [0.5, 4.0]]  # dominated, dominated (tie), beyond ref x2


@pytest.fixture(scope="module")
def bench(load_script):
    return load_script(BENCHMARKS / "bench_bo.py")  # (it imports pareto_space from its own folder)


def test_plots_hypervolume_of_a_hand_computed_front():
    assert hypervolume_2d(np.array(FRONT), (4.0, 4.0)) == pytest.approx(6.0)
    assert hypervolume_2d(np.array(FRONT + EXTRA), (4.0, 4.0)) == pytest.approx(6.0)
    assert hypervolume_2d(np.array(FRONT[:1]), (4.0, 4.0)) == pytest.approx(3.0)
    assert hypervolume_2d(np.array(EXTRA[2:]), (4.0, 4.0)) == 0.0
    mask = pareto_front_mask(np.array(FRONT + EXTRA))
    assert mask.tolist() == [True, True, True, False, False, True, True]  # outside ref is still non-dominated


def test_bench_front_and_hypervolume_match_the_hand_computed_front(bench):
    Y = torch.tensor(EXTRA + FRONT[::-1], dtype=DTYPE)
    ref = torch.tensor([4.0, 4.0], dtype=DTYPE)
    F = bench.front_2d(Y[(Y < ref).all(-1)])
    assert F.tolist() == FRONT
    assert bench.hypervolume_2d(Y, ref) == pytest.approx(6.0)


def test_bench_and_plots_hypervolumes_agree_on_random_clouds(bench):
    gen = torch.Generator().manual_seed(0)
    for n in (1, 5, 200):
        Y = torch.rand(n, 2, generator=gen, dtype=DTYPE)
        Y[:, 1] = 1.0 - Y[:, 0] ** 2 + 0.3 * Y[:, 1]  # a curved cloud with a front of several points
        ref = Y.max(0).values + 0.1
        assert bench.hypervolume_2d(Y, ref) == pytest.approx(hypervolume_2d(Y.numpy(), ref.tolist()), rel=1e-12)


def test_pareto_space_is_discrete_and_power_trades_time_for_energy(load_script):
    module = load_script(BENCHMARKS / "pareto_space.py")
    space = module.pareto_space()
    assert space.chip is not None and space.discrete_size == space.size == 311_040
    base = {"power_compute_fraction": 0.7, "power_memory_fraction": 0.2, "area_compute_fraction": 0.7,
            "flops_per_cycle_per_unit": 4096.0, "scale_up_domain": 64.0, "tp": 8.0, "pp": 1.0,
            "micro_batch_size": 2.0, "recompute": 0.0}
    values = {k: torch.full((2,), v, dtype=DTYPE) for k, v in base.items()}
    values["power_budget_w"] = torch.tensor([300.0, 1200.0], dtype=DTYPE)
    result = space.evaluate(space.encode(values))
    assert result.feasible.all()
    # 4x the power: faster (a higher supply and clock) but more energy per step (~V^2 per FLOP)
    assert result.step_time_s[1] < 0.8 * result.step_time_s[0]
    assert result.energy_j[1] > 1.5 * result.energy_j[0]
