"""The design space: encoding, sampling with known constraints, evaluation."""

from __future__ import annotations

import pytest
import torch

from analytical import MappingSpec, single_design
from analytical.codes import RECOMPUTE_CODES
from analytical.space import DesignSpace, Parameter, parameters_from_dicts
from analytical.specs import SpecError

MAPPING_PARAMS = (
    Parameter("tp", "log2", 1, 16), Parameter("pp", "log2", 1, 16), Parameter("micro_batch_size", "log2", 1, 8),
    Parameter("recompute", "categorical", choices=("none", "selective", "full")),
    Parameter("zero_stage", "categorical", choices=(0, 1, 2, 3)),
)
HARDWARE_PARAMS = (
    Parameter("peak_bf16_flops_per_s", "continuous", 1e14, 2.5e15, log=True),
    Parameter("hbm_bw_bytes_per_s", "continuous", 9e11, 8e12),
    Parameter("scale_up_domain", "integer", 8, 16),
)


@pytest.fixture
def template(a100, make_system, gpt3):
    return single_design(a100, make_system(64), gpt3, MappingSpec(global_batch_size=128, flash_attention=True))


@pytest.fixture
def space(template):
    return DesignSpace("test", MAPPING_PARAMS + HARDWARE_PARAMS, template).validate()


def test_discrete_values_round_trip_exactly_and_continuous_closely(space):
    u = torch.rand(2000, space.dim, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    values = space.decode(u)
    again = space.decode(space.encode(values))
    for p in space.parameters:
        if p.kind == "continuous":
            torch.testing.assert_close(again[p.name], values[p.name], rtol=1e-12, atol=0)
        else:
            assert torch.equal(again[p.name], values[p.name]), p.name
    assert bool(((space.encode(values) >= 0) & (space.encode(values) <= 1)).all())


def test_decoded_values_stay_in_their_sets(space):
    u = torch.rand(5000, space.dim, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    values = space.decode(torch.cat([u, torch.zeros(1, space.dim), torch.ones(1, space.dim)]))
    assert set(values["tp"].tolist()) <= {1.0, 2.0, 4.0, 8.0, 16.0}
    assert set(values["recompute"].tolist()) == {float(RECOMPUTE_CODES[r]) for r in ("none", "selective", "full")}
    assert set(values["scale_up_domain"].tolist()) == set(float(i) for i in range(8, 17))
    peak = values["peak_bf16_flops_per_s"]
    assert float(peak.min()) >= 1e14 * (1 - 1e-12) and float(peak.max()) <= 2.5e15 * (1 + 1e-12)


@pytest.mark.parametrize("method", ["sobol", "random"])
def test_samples_respect_the_known_constraints(space, method):
    u = space.sample(3000, method=method, seed=3)
    assert u.shape == (3000, space.dim)
    batch = space.to_batch(u)
    assert bool((batch.tp * batch.pp * batch.dp * batch.cp == batch.num_devices).all())
    assert bool(space.known_feasible(u).all())
    unfiltered = space.sample(3000, method=method, seed=3, known_feasible=False)
    assert not bool(space.known_feasible(unfiltered).all())  # the filter had something to do


def test_sobol_samples_are_reproducible_and_seeded(space):
    assert torch.equal(space.sample(500, seed=7), space.sample(500, seed=7))
    assert not torch.equal(space.sample(500, seed=7), space.sample(500, seed=8))


def test_no_nan_or_inf_over_1e5_unfiltered_points(space):
    u = torch.rand(100_000, space.dim, generator=torch.Generator().manual_seed(4), dtype=torch.float64)
    result = space.evaluate(u)
    for tensor in (result.step_time_s, result.memory_per_device_bytes, result.mfu, result.tokens_per_s):
        assert bool(torch.isfinite(tensor).all())


def test_peak_scaling_keeps_the_template_ratios(space, template):
    batch = space.to_batch(space.sample(100))
    ratio = batch.peak_bf16_flops_per_s / template.peak_bf16_flops_per_s
    torch.testing.assert_close(batch.peak_fp16_flops_per_s, template.peak_fp16_flops_per_s * ratio)
    torch.testing.assert_close(batch.peak_tf32_flops_per_s, template.peak_tf32_flops_per_s * ratio)
    assert bool((batch.peak_fp32_flops_per_s == template.peak_fp32_flops_per_s).all())  # not a tensor rate


def test_a_point_evaluates_like_the_design_it_decodes_to(a100, make_system, gpt3, template):
    """Exhaustive grid of a small discrete space: its fastest feasible point, rebuilt from specs
    with `single_design`, evaluates to the same time (the space adds no modelling of its own)."""
    params = (Parameter("tp", "log2", 1, 8), Parameter("pp", "log2", 1, 8),
              Parameter("micro_batch_size", "log2", 1, 2),
              Parameter("recompute", "categorical", choices=("none", "full")))
    space = DesignSpace("small", params, template).validate()
    grid = torch.cartesian_prod(*[(torch.arange(int(p.cardinality), dtype=torch.float64) + 0.5) / p.cardinality
                                  for p in params])
    assert space.size == 4 * 4 * 2 * 2 == grid.shape[0]
    result = space.evaluate(grid)
    keep = result.feasible & space.known_feasible(grid)
    assert bool(keep.any())
    best = int(torch.where(keep, result.step_time_s, torch.inf).argmin())
    v = {k: int(x[best]) for k, x in space.decode(grid).items()}
    mapping = MappingSpec(tp=v["tp"], pp=v["pp"], dp=64 // (v["tp"] * v["pp"]), micro_batch_size=v["micro_batch_size"],
                          recompute=("none", "selective", "full")[v["recompute"]], global_batch_size=128,
                          flash_attention=True)
    from analytical import evaluate
    alone = evaluate(single_design(a100, make_system(64), gpt3, mapping))
    assert float(alone.step_time_s[0]) == pytest.approx(float(result.step_time_s[best]), rel=1e-12)


@pytest.mark.parametrize("entry, field", [
    ({"name": "tpp", "kind": "log2", "low": 1, "high": 8}, "name"),
    ({"name": "dp", "kind": "log2", "low": 1, "high": 8}, "name"),
    ({"name": "tp", "kind": "exponential", "low": 1, "high": 8}, "kind"),
    ({"name": "tp", "kind": "log2", "low": 1, "high": 6}, "low/high"),
    ({"name": "tp", "kind": "log2", "low": 8, "high": 1}, "low/high"),
    ({"name": "recompute", "kind": "categorical", "choices": ["some"]}, "choices"),
    ({"name": "hbm_bytes", "kind": "continuous", "low": 1, "high": 2, "unit": "furlongs"}, "unit"),
    ({"name": "tp", "kind": "log2", "low": 1, "high": 8, "step": 2}, "step"),
    ({"name": "num_devices", "kind": "log2", "low": 1, "high": 2**25}, "high"),  # beyond any cluster
    ({"name": "tp", "kind": "categorical", "choices": [1, 2**30]}, "choices"),
    ({"name": "global_batch_size", "kind": "integer", "low": 1, "high": 2**31}, "high"),
])
def test_bad_parameters_name_the_field(entry, field):
    with pytest.raises(SpecError) as info:
        parameters_from_dicts([entry])
    assert info.value.field == field


def test_units_convert_to_si():
    (p,) = parameters_from_dicts([{"name": "hbm_bw_bytes_per_s", "kind": "continuous", "low": 1000,
                                   "high": 2000, "unit": "GB/s"}])
    assert (p.low, p.high) == (1e12, 2e12)


def test_bad_sampler_and_duplicate_parameters_are_errors(template):
    space = DesignSpace("s", MAPPING_PARAMS, template).validate()
    with pytest.raises(SpecError, match="sampler"):
        space.sample(10, method="latin")
    with pytest.raises(SpecError, match="each field at most once"):
        DesignSpace("d", MAPPING_PARAMS + MAPPING_PARAMS[:1], template).validate()


# ---- the joint space: chip inputs derived into the accelerator --------------------------------------

from analytical.chip.spec import ChipSpec  # noqa: E402
from analytical.codes import Reason  # noqa: E402

JOINT_CHIP = ChipSpec(name="n5-test", node="N5", memory="HBM3e", die_area_mm2=800.0, power_budget_w=700.0)
JOINT_PARAMS = (
    Parameter("node", "categorical", choices=("N7", "N5", "N3", "N2")),
    Parameter("memory", "categorical", choices=("HBM2e", "HBM3", "HBM3e", "HBM4")),
    Parameter("scale_up_link", "categorical", choices=("NVLink3", "NVLink4", "NVLink5")),
    Parameter("die_area_mm2", "continuous", 300.0, 858.0),
    Parameter("power_budget_w", "continuous", 300.0, 1200.0, log=True),
    Parameter("area_compute_fraction", "continuous", 0.25, 0.7),
    Parameter("area_sram_fraction", "continuous", 0.02, 0.3),
    Parameter("power_compute_fraction", "continuous", 0.5, 0.9),
    Parameter("power_memory_fraction", "continuous", 0.05, 0.4),
    Parameter("shoreline_memory_fraction", "continuous", 0.3, 0.85),
    Parameter("flops_per_cycle_per_unit", "log2", 1024, 8192),
    Parameter("scale_up_domain", "log2", 8, 64),
) + MAPPING_PARAMS


@pytest.fixture
def joint(template):
    return DesignSpace("joint-test", JOINT_PARAMS, template, chip=JOINT_CHIP).validate()


def test_joint_round_trip_includes_technology_names(joint):
    u = torch.rand(3000, joint.dim, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    values = joint.decode(u)
    again = joint.decode(joint.encode(values))
    for p in joint.parameters:
        if p.kind == "continuous":
            torch.testing.assert_close(again[p.name], values[p.name], rtol=1e-12, atol=0)
        else:
            assert torch.equal(again[p.name], values[p.name]), p.name
    from analytical.chip.spec import NODE_CODES
    assert set(values["node"].tolist()) == {float(NODE_CODES[n]) for n in ("N7", "N5", "N3", "N2")}


@pytest.mark.parametrize("method", ["sobol", "random"])
def test_joint_samples_respect_splits_and_degrees(joint, method):
    u = joint.sample(2000, method=method, seed=2)
    chips = joint.chip_batch(u)
    assert bool((chips.fraction("power_network_fraction") >= 0).all())
    assert bool((chips.fraction("area_other_fraction") >= 0).all())
    batch = joint.to_batch(u)
    assert bool((batch.tp * batch.pp * batch.dp * batch.cp == batch.num_devices).all())
    unfiltered = joint.sample(2000, method=method, seed=2, known_feasible=False)
    assert not bool(joint.splits_hold(unfiltered).all())  # power compute + memory > 1 happens


def test_joint_points_derive_their_accelerator(joint, template):
    u = joint.sample(500, seed=3)
    batch, derived = joint.to_batch_and_chip(u)
    torch.testing.assert_close(batch.peak_bf16_flops_per_s, derived.accelerator["peak_bf16_flops_per_s"])
    torch.testing.assert_close(batch.tdp_w, joint.decode(u)["power_budget_w"])
    assert not bool((batch.hbm_bw_bytes_per_s == template.hbm_bw_bytes_per_s).any())
    result = joint.evaluate(u)
    chip_failed = derived.reason != 0
    assert bool((result.reason[chip_failed] == derived.reason[chip_failed]).all())
    assert bool((result.feasible == (result.reason == 0)).all())


def test_no_nan_over_1e5_random_joint_designs(joint):
    u = torch.rand(100_000, joint.dim, generator=torch.Generator().manual_seed(6), dtype=torch.float64)
    result = joint.evaluate(u)
    tensors = [result.step_time_s, result.memory_per_device_bytes, result.mfu, result.tokens_per_s]
    tensors += [getattr(result, name) for name in ("energy_j", "energy_per_token_j", "avg_power_w")
                if hasattr(result, name)]
    for tensor in tensors:
        assert bool(torch.isfinite(tensor).all())
    reasons = set(result.reason.unique().tolist())
    assert Reason.OK in reasons and any(r >= 14 for r in reasons)  # some chips cannot be built


def test_step_time_and_energy_gradients_wrt_the_unit_cube(joint):
    """d(step time, energy)/du of the continuous chip coordinates through decode, derivation and
    step, against central differences (one joint point whose discrete values are fixed)."""
    u0 = joint.sample(64, seed=9)
    result = joint.evaluate(u0)
    u0 = u0[result.feasible][:1]
    names = ("power_budget_w", "power_compute_fraction", "power_memory_fraction")
    columns = [joint.names.index(n) for n in names]
    x = u0.clone().requires_grad_(True)
    result = joint.evaluate(x)
    outputs = {"step_time_s": result.step_time_s}
    if hasattr(result, "energy_j"):
        outputs["energy_j"] = result.energy_j
    for key, value in outputs.items():
        (grad,) = torch.autograd.grad(value.sum(), x, retain_graph=True)
        for column in columns:
            h = 1e-6
            up, down = u0.clone(), u0.clone()
            up[0, column] += h
            down[0, column] -= h
            fd = (float(getattr(joint.evaluate(up), key)) - float(getattr(joint.evaluate(down), key))) / (2 * h)
            assert float(grad[0, column]) == pytest.approx(fd, rel=1e-4, abs=1e-9 * float(value.detach())), (key, column)


def test_chip_parameters_need_a_chip_and_exclude_derived_fields(template):
    with pytest.raises(SpecError) as info:
        DesignSpace("no-chip", JOINT_PARAMS, template).validate()
    assert info.value.field == "chip"
    with pytest.raises(SpecError, match="chip derives"):
        DesignSpace("both", JOINT_PARAMS + HARDWARE_PARAMS[:1], template, chip=JOINT_CHIP).validate()
    with pytest.raises(SpecError) as info:
        parameters_from_dicts([{"name": "node", "kind": "categorical", "choices": ["N9"]}])
    assert info.value.field == "choices" and "N7" in str(info.value)


def test_the_optimizer_precision_is_a_categorical_choice(template):
    """A space can search Adam's state dtypes by name: the point with bf16 moments and no master copy holds a
    third of the fp32 point's optimizer memory (4 bytes a parameter against 12) at the same mapping."""
    params = (Parameter("optimizer_state_dtype", "categorical", choices=("fp32", "bf16")),
              Parameter("master_params", "categorical", choices=("fp32", "none")))
    space = DesignSpace("optimizer", params, template).validate()
    grid = torch.tensor([[0.25, 0.25], [0.75, 0.75]], dtype=torch.float64)
    values = space.decode(grid)
    assert values["optimizer_state_dtype"].tolist() == [0.0, 1.0] and values["master_params"].tolist() == [0.0, 3.0]
    optimizer = space.evaluate(grid).memory_breakdown_bytes["optimizer"]
    assert float(optimizer[1]) == pytest.approx(float(optimizer[0]) * 4.0 / 12.0, rel=1e-12)
    with pytest.raises(SpecError, match="one of fp32, fp16, remainder, none"):
        Parameter("master_params", "categorical", choices=("fp64",)).validate()
