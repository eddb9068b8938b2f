"""The parts every study uses: a point's values through its space and back, a mapping held by overrides,
losses and the joint-not-worse checks, which limit binds, and the exact inner enumeration of a flat space."""

from __future__ import annotations

import math

import pytest

from deepflow.presets import ConfigError
from deepflow.study.context import losses, mapping_overrides, mapping_text, not_worse
from deepflow.study.limits import binding_limit, sensitivities
from deepflow.study.points import compose_job, config_values, encode_values, evaluate_values
from deepflow.study.retrodiction import ratios


@pytest.fixture(scope="module")
def hierarchical():
    return compose_job(["experiment=llama3-70b-n5-hierarchical"])


def test_the_template_point_round_trips_and_gets_its_best_mapping(hierarchical):
    values = config_values(hierarchical)
    assert values["area_compute_fraction"] == 0.5 and values["precision"] == "bf16"  # conf/chip/n5-hbm3e-700w.yaml
    point = evaluate_values(hierarchical, values)
    assert point.values["precision"] == "bf16"
    assert point.values["area_compute_fraction"] == pytest.approx(0.5)
    assert point.design["tp"] * point.design["pp"] * point.design["dp"] * point.design["cp"] == 2048
    assert point.objective_feasible and point.objective_value == pytest.approx(point.row["step_time_s"])
    # the mapping held by overrides reproduces the same design on a flat space
    held = compose_job(["experiment=llama3-70b-n5-hierarchical", "inner=null", "space=chip-only",
                        "++mapping.precision=bf16", *mapping_overrides(point.design)])
    again = evaluate_values(held, config_values(held))
    assert again.row["step_time_s"] == pytest.approx(point.row["step_time_s"], rel=1e-12)
    assert mapping_text(again.design) == mapping_text(point.design)


def test_values_outside_the_space_are_named(hierarchical):
    with pytest.raises(ConfigError, match="area_compute_fraction=0.95 is outside space"):
        encode_values(hierarchical.space, {**config_values(hierarchical), "area_compute_fraction": 0.95})
    with pytest.raises(ConfigError, match="precision='fp4' is outside space .*: allowed bf16, fp8"):
        encode_values(hierarchical.space, {**config_values(hierarchical), "precision": "fp4"})


def test_losses_and_checks_compare_within_a_workload():
    rows = [{"workload": "w", "variant": "a", "feasible": True, "objective_s": 2.0},
            {"workload": "w", "variant": "joint", "feasible": True, "objective_s": 1.0},
            {"workload": "w", "variant": "b", "feasible": False, "objective_s": 0.5},
            {"workload": "v", "variant": "joint", "feasible": True, "objective_s": 3.0},
            {"workload": "v", "variant": "a", "feasible": True, "objective_s": 2.9}]
    losses(rows, reference="joint")
    assert [r["loss_pct"] for r in rows] == [pytest.approx(100.0), pytest.approx(0.0), None, pytest.approx(0.0),
                                             pytest.approx(-100 / 30)]
    assert not_worse(rows, "joint") == {"w: joint not worse than a": True, "v: joint not worse than a": False}


def test_binding_limit_names_the_largest_gain_or_the_reason():
    gains = {"compute": 4.0, "HBM bandwidth": 1.0, "HBM capacity": 0.0, "scale-up": 0.2, "scale-out": 6.0, "power": 3.0}
    assert binding_limit(gains) == "scale-out"
    assert binding_limit({k: 0.1 for k in gains}) == "none"
    assert binding_limit(gains, "out_of_memory") == "HBM capacity"
    assert binding_limit(gains, "power_cap") == "power"


def test_sensitivities_of_a_compute_bound_design(hierarchical):
    u = encode_values(hierarchical.space, config_values(hierarchical))
    gains = sensitivities(hierarchical, u)
    assert set(gains) == {"compute", "HBM bandwidth", "HBM capacity", "scale-up", "scale-out", "power"}
    # 10 % more FLOP/s shortens a large LLM step by a few %, never by more than 10 %
    assert 0.5 < gains["compute"] < 10.0 + 1e-9
    assert all(math.isfinite(v) and v > -1.0 for v in gains.values())


def test_fused_jobs_best_mapping_is_the_exhaustive_best():
    from deepflow.study.layer_by_layer import best_inner

    job = compose_job(["experiment=hfta-resnet18-sweep", "chip=n5-hbm3e-700w", "space=chip-fused-jobs",
                       "inner=null", "optimum=null"])
    chip = config_values(job, [n for n in job.space.names if n not in ("fused_jobs", "precision")])
    best = best_inner(job, chip, ["fused_jobs", "precision"])
    for fused in (1, 8, 32, 64):
        for precision in ("fp32", "fp16"):
            other = evaluate_values(job, {**chip, "fused_jobs": fused, "precision": precision})
            assert not other.objective_feasible or best.objective_value <= other.objective_value * (1 + 1e-12)


def test_ratios_of_a_chip():
    chip = {"peak_bf16_flops_per_s": 1e15, "hbm_bw_bytes_per_s": 4e12, "sram_bytes": 50 * 2**20,
            "compute_units": 100, "scale_up_bw_bytes_per_s": 4.5e11}
    assert ratios(chip) == {"flop_per_hbm_byte": 250.0, "sram_kib_per_unit": 512.0, "scale_up_byte_per_kflop": 0.45}
