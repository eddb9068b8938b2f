"""Chip derivation: calibration on A100 and H100, infeasible budgets as answers, bad specs as errors
naming the field, physics (monotone in the budgets), and gradients that match finite differences."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from analytical import MappingSpec, Reason, SpecError, evaluate, single_design
from analytical.chip.constants import DEFAULT_DERIVATION
from analytical.chip.derive import accelerator_spec, derive, derive_chip
from analytical.chip.power import compute_power_w
from analytical.chip.spec import (
    LINK_CODES,
    MEMORY_CODES,
    NODE_CODES,
    ChipSpec,
    chip_from_dict,
    stack_chips,
    supply_range_v,
)
from analytical.chip.technology import LOGIC_NODES
from analytical.codes import DTYPE
from analytical.design import DesignBatch
from analytical.step.efficiency import DEFAULT_EFFICIENCY

# The chips of conf/chip/a100-n7.yaml and h100-n4.yaml (tests/deepflow/commands/test_derive_command.py checks the
# presets match): same splits for both, so H100 is a prediction.
SPLITS = dict(area_compute_fraction=0.5, area_sram_fraction=0.1, area_other_fraction=0.4,
              power_compute_fraction=0.805, power_memory_fraction=0.155, power_network_fraction=0.04,
              shoreline_memory_fraction=0.6, shoreline_network_fraction=0.4)
A100 = ChipSpec(name="a100-n7", node="N7", memory="HBM2e", scale_up_link="NVLink3",
                scale_out_link="IB-HDR",
                die_area_mm2=826.0, power_budget_w=400.0, flops_per_cycle_per_unit=2048, fp8=False, tile_n=128,
                **SPLITS)
H100 = ChipSpec(name="h100-n4", node="N4", memory="HBM3", scale_up_link="NVLink4",
                scale_out_link="IB-NDR",
                die_area_mm2=814.0, power_budget_w=700.0, flops_per_cycle_per_unit=4096, fp8=True, tile_n=256,
                **SPLITS)
# datasheets: dense fp16/bf16 TFLOP/s, HBM GB/s, HBM GiB (conf/hardware/a100-sxm-80gb.yaml, h100-sxm-80gb.yaml)
DATASHEET = {"a100-n7": (312.0, 2039.0, 80.0), "h100-n4": (989.4, 3350.0, 80.0)}

# The chip of conf/chip/tpu-v4-n7.yaml (test_derive_command.py checks the preset matches): TPU v4's technology and
# budgets with its own splits; a unit is 2048 FLOP/clk (an A100 SM's), 1/16 of a 128 x 128 MXU.
TPU_V4 = ChipSpec(name="tpu-v4-n7", node="N7", memory="HBM2", scale_up_link="ICI", scale_out_link="ICI",
                  die_area_mm2=590.0, power_budget_w=192.0,
                  area_compute_fraction=0.8, area_sram_fraction=0.1, area_other_fraction=0.1,
                  power_compute_fraction=0.755, power_memory_fraction=0.195, power_network_fraction=0.05,
                  shoreline_memory_fraction=0.6, shoreline_network_fraction=0.4,
                  flops_per_cycle_per_unit=2048, fp8=False, scale_out_lanes=0, kernel_launch_us=1.0, tile_n=128)
# conf/hardware/tpu-v4.yaml: peak bf16 TFLOP/s, HBM GB/s, HBM GiB, TDP W (Jouppi et al. ISCA 2023 / Cloud TPU v4 page)
TPU_V4_PRESET = (275.0, 1200.0, 32.0, 192.0)


@pytest.mark.parametrize("chip", [A100, H100], ids=lambda c: c.name)
def test_calibration_within_10_percent_of_the_datasheet(chip):
    derived = derive_chip(chip)
    assert int(derived.reason[0]) == Reason.OK
    a = {k: float(v[0]) for k, v in derived.accelerator.items()}
    tflops, hbm_gb_per_s, hbm_gib = DATASHEET[chip.name]
    for precision in ("fp16", "bf16"):
        assert a[f"peak_{precision}_flops_per_s"] / 1e12 == pytest.approx(tflops, rel=0.10), precision
    assert a["hbm_bw_bytes_per_s"] / 1e9 == pytest.approx(hbm_gb_per_s, rel=0.10)
    assert a["hbm_bytes"] / 2**30 == pytest.approx(hbm_gib, rel=0.10)
    assert (a["peak_fp8_flops_per_s"] > 0) == chip.fp8
    # the operating point is a physical one: within the node's supply range, clock 1-2.5 GHz
    node = LOGIC_NODES[chip.node]
    low, high = supply_range_v(node.threshold_v, node.nominal_vdd_v)
    assert low < float(derived.operating["vdd_v"][0]) < high
    assert 1.0e9 < float(derived.operating["clock_hz"][0]) < 2.5e9


@pytest.mark.parametrize("chip", [A100, H100, TPU_V4], ids=lambda c: c.name)
def test_power_at_peak_fits_the_budget_and_usage_fits_the_die(chip):
    derived = derive_chip(chip)
    usage = {g: {k: float(v[0]) for k, v in parts.items()} for g, parts in derived.usage.items()}
    assert sum(usage["power_w"].values()) <= chip.power_budget_w * (1 + 1e-9)
    compute = usage["power_w"]["compute_dynamic"] + usage["power_w"]["sram_dynamic"] + usage["power_w"]["static"]
    assert compute == pytest.approx(chip.power_budget_w * chip.power_compute_fraction, rel=1e-9)  # solved V
    assert sum(usage["area_mm2"].values()) == pytest.approx(chip.die_area_mm2, rel=1e-9)
    assert min(usage["area_mm2"].values()) >= 0 and min(usage["shoreline_mm"].values()) >= 0
    # the energy fields are consistent with the power: FLOPs at peak x J/FLOP = the units' dynamic power
    a = {k: float(v[0]) for k, v in derived.accelerator.items()}
    assert a["peak_fp16_flops_per_s"] * a["flop_energy_fp16_j"] == pytest.approx(usage["power_w"]["compute_dynamic"])
    assert a["static_power_w"] == pytest.approx(usage["power_w"]["static"])


def test_tpu_v4_within_10_percent_of_its_preset_on_peak_hbm_bandwidth_and_power():
    """TPU v4 rebuilt from its node, memory, links, die and power (conf/chip/tpu-v4-n7.yaml), nothing fitted to
    it: peak bf16, HBM bandwidth and power within 10 % of the datasheet preset, 4 HBM2 stacks of 32 GiB."""
    derived = derive_chip(TPU_V4)
    assert int(derived.reason[0]) == Reason.OK
    a = {k: float(v[0]) for k, v in derived.accelerator.items()}
    tflops, hbm_gb_per_s, hbm_gib, tdp_w = TPU_V4_PRESET
    assert a["peak_bf16_flops_per_s"] / 1e12 == pytest.approx(tflops, rel=0.10)
    assert a["hbm_bw_bytes_per_s"] / 1e9 == pytest.approx(hbm_gb_per_s, rel=0.10)
    assert a["tdp_w"] == pytest.approx(tdp_w, rel=0.10)
    power_at_peak = sum(float(v[0]) for v in derived.usage["power_w"].values())
    assert power_at_peak == pytest.approx(tdp_w, rel=0.10) and power_at_peak <= tdp_w * (1 + 1e-9)
    assert int(derived.operating["hbm_stacks"][0]) == 4 and a["hbm_bytes"] / 2**30 == pytest.approx(hbm_gib)
    assert a["peak_fp8_flops_per_s"] == 0.0  # no FP8 on TPU v4
    # 8 MXUs of 128 x 128 (262,144 FLOP/clk) as 128 units of 2048, at a clock near TPU v4's 1.05 GHz
    assert a["compute_units"] * TPU_V4.flops_per_cycle_per_unit == 8 * 128 * 128 * 2
    assert 0.9e9 < float(derived.operating["clock_hz"][0]) < 1.1e9
    node = LOGIC_NODES[TPU_V4.node]
    low, high = supply_range_v(node.threshold_v, node.nominal_vdd_v)
    assert low < float(derived.operating["vdd_v"][0]) < node.nominal_vdd_v  # power-limited below nominal
    # 6 ICI links x 50 GB/s per direction, all scale-up (no NIC on the chip)
    assert a["scale_up_bw_bytes_per_s"] / 1e9 == pytest.approx(300.0, rel=0.10)
    assert a["scale_out_bw_bytes_per_s"] == 0.0


def test_tpu_v4_with_the_mxu_as_unit_keeps_peak_but_starves_the_sram():
    """Why conf/chip/tpu-v4-n7.yaml takes 2048 FLOP/clk units and not 8 MXUs of 32,768: the derivation's unit
    area is per FLOP/clk (same peak either way) but its SRAM ports are per unit (A100's 47.4 B/clk a SM), so the
    MXU as unit leaves 1/16 of the SRAM bandwidth: 0.37 TB/s, a tenth of what 128 x 128 GEMM tiles stream at the
    GEMM main loop's rate (`Efficiency.gemm_peak_fraction` of peak), which the 2048 FLOP/clk units carry."""
    sm, mxu = (derive_chip(dataclasses.replace(TPU_V4, flops_per_cycle_per_unit=f)) for f in (2048, 32768))
    peak = [float(d.accelerator["peak_bf16_flops_per_s"][0]) for d in (sm, mxu)]
    sram = [float(d.accelerator["sram_bw_bytes_per_s"][0]) for d in (sm, mxu)]
    assert int(mxu.accelerator["compute_units"][0]) == 8
    assert peak[1] == pytest.approx(peak[0], rel=1e-9)
    assert sram[1] == pytest.approx(8 * DEFAULT_DERIVATION.sram_bytes_per_cycle_per_unit
                                    * float(mxu.operating["clock_hz"][0]), rel=1e-9)
    streamed = peak[1] * DEFAULT_EFFICIENCY.gemm_peak_fraction * (1 / 128 + 1 / 128)  # kernels.gemm_sram_bytes
    assert sram[1] < 0.15 * streamed and streamed < sram[0]


def test_a_derived_chip_is_an_accelerator_every_function_accepts(make_system, gpt3):
    derived = derive_chip(H100)
    spec = accelerator_spec(derived, name="h100-n4", chip=H100).validate()
    assert spec.compute_units == int(derived.accelerator["compute_units"][0])
    design = single_design(spec, make_system(1024), gpt3,
                           MappingSpec(tp=8, pp=8, global_batch_size=1536, recompute="selective"))
    exact = design.replace(**{k: v for k, v in derived.accelerator.items() if k in design.fields()})
    for d in (design, exact):
        result = evaluate(d)
        assert bool(result.feasible[0]) and float(result.step_time_s[0]) > 0


def test_batch_equals_one_by_one():
    chips = [A100, H100, dataclasses.replace(H100, node="N3", memory="HBM3e", power_budget_w=900.0,
                                             vdd_v=0.7)]
    batch = derive(stack_chips(chips))
    for i, chip in enumerate(chips):
        alone = derive_chip(chip)
        for name, value in batch.accelerator.items():
            assert float(value[i]) == pytest.approx(float(alone.accelerator[name][0]), rel=1e-12), name


# ---- infeasible budgets are answers -----------------------------------------------------------------

INFEASIBLE_CHIPS = [
    (dict(die_area_mm2=2.0), Reason.NO_COMPUTE_UNIT),
    (dict(area_compute_fraction=0.001, area_other_fraction=0.899), Reason.NO_COMPUTE_UNIT),
    (dict(power_budget_w=5.0), Reason.COMPUTE_POWER_TOO_LOW),
    (dict(vdd_v=0.85, power_budget_w=300.0), Reason.COMPUTE_POWER_TOO_LOW),
    (dict(shoreline_memory_fraction=0.05, shoreline_network_fraction=0.95), Reason.NO_MEMORY_STACK),
    (dict(interposer_area_mm2=850.0), Reason.NO_MEMORY_STACK),
    (dict(die_area_mm2=900.0), Reason.PACKAGE_AREA_EXCEEDED),
    (dict(scale_out_lanes=256), Reason.SHORELINE_EXCEEDED),
    (dict(power_compute_fraction=0.84, power_network_fraction=0.005), Reason.NETWORK_POWER_TOO_LOW),
]


@pytest.mark.parametrize("changes, reason", INFEASIBLE_CHIPS)
def test_budgets_that_cannot_build_the_chip_give_a_reason(changes, reason):
    derived = derive_chip(dataclasses.replace(H100, **changes))
    assert int(derived.reason[0]) == reason
    for name, value in derived.accelerator.items():
        assert bool(torch.isfinite(value).all()), name
    assert float(derived.accelerator["compute_units"][0]) >= 1  # downstream functions stay finite


def test_every_chip_reason_is_reachable_and_described():
    from analytical.codes import REASON_TEXT

    chip_reasons = {r for r in Reason if Reason.NO_COMPUTE_UNIT <= r <= Reason.NETWORK_POWER_TOO_LOW}
    assert {reason for _, reason in INFEASIBLE_CHIPS} == chip_reasons
    assert all(REASON_TEXT[r] for r in chip_reasons)


# ---- physics -----------------------------------------------------------------------------------------

def _sweep(field: str, values) -> dict[str, torch.Tensor]:
    chips = stack_chips([H100] * len(values)).replace(**{field: torch.tensor(values, dtype=DTYPE)})
    d = derive(chips)
    assert bool((d.reason == 0).all())
    return {**d.accelerator, **d.operating}


def test_more_power_runs_faster_at_a_higher_supply():
    out = _sweep("power_budget_w", [500.0, 600.0, 700.0, 800.0])
    for name in ("peak_bf16_flops_per_s", "vdd_v", "clock_hz", "hbm_bw_bytes_per_s", "flop_energy_bf16_j"):
        assert bool((out[name].diff() > 0).all()), name


def test_a_newer_node_is_faster_and_cheaper_per_flop():
    by_node = {n: derive_chip(dataclasses.replace(H100, node=n)) for n in ("N7", "N5", "N3", "N2")}
    peaks = [float(d.accelerator["peak_bf16_flops_per_s"][0]) for d in by_node.values()]
    energies = [float(d.accelerator["flop_energy_bf16_j"][0]) for d in by_node.values()]
    assert peaks == sorted(peaks) and energies == sorted(energies, reverse=True)


def test_a_fixed_supply_sets_clock_and_energy_by_the_alpha_power_law():
    low, high = (dataclasses.replace(H100, vdd_v=v, power_budget_w=2000.0) for v in (0.65, 0.8))
    d_low, d_high = derive_chip(low), derive_chip(high)
    assert float(d_low.operating["vdd_v"][0]) == 0.65 and float(d_high.operating["vdd_v"][0]) == 0.8
    node, a = LOGIC_NODES["N4"], DEFAULT_DERIVATION.alpha
    law = ((0.8 - node.threshold_v) ** a / 0.8) / ((0.65 - node.threshold_v) ** a / 0.65)
    assert float(d_high.operating["clock_hz"][0] / d_low.operating["clock_hz"][0]) == pytest.approx(law)
    ratio = float(d_high.accelerator["flop_energy_fp16_j"][0] / d_low.accelerator["flop_energy_fp16_j"][0])
    assert ratio == pytest.approx((0.8 / 0.65) ** 2)  # C V^2


def test_the_solved_supply_meets_the_compute_budget_over_random_chips():
    n = 5000
    g = torch.Generator().manual_seed(0)
    u = lambda lo, hi: lo + (hi - lo) * torch.rand(n, generator=g, dtype=DTYPE)  # noqa: E731
    chips = stack_chips([H100]).expand(n).replace(
        node=torch.randint(len(NODE_CODES), (n,), generator=g).to(DTYPE),
        memory=torch.randint(len(MEMORY_CODES), (n,), generator=g).to(DTYPE),
        scale_up_link=torch.randint(len(LINK_CODES), (n,), generator=g).to(DTYPE),
        die_area_mm2=u(50, 858), power_budget_w=u(50, 1500), area_compute_fraction=u(0.1, 0.7),
        power_compute_fraction=u(0.3, 0.9), power_memory_fraction=u(0.05, 0.1))
    d = derive(chips)
    for name, value in {**d.accelerator, **d.operating}.items():
        assert bool(torch.isfinite(value).all()), name
    vdd = d.operating["vdd_v"]
    table = {k: torch.tensor([getattr(r, k) for r in LOGIC_NODES.values()], dtype=DTYPE)[chips.node.long()]
             for k in ("threshold_v", "nominal_vdd_v")}
    low, high = supply_range_v(table["threshold_v"], table["nominal_vdd_v"])
    interior = (vdd > low + 1e-9) & (vdd < high - 1e-9)
    assert int(interior.sum()) > n // 4
    used = d.usage["power_w"]
    compute = (used["compute_dynamic"] + used["sram_dynamic"] + used["static"])[interior]
    torch.testing.assert_close(compute, d.usage["budget"]["compute_power_w"][interior], rtol=1e-10, atol=0)
    starved = d.reason == Reason.COMPUTE_POWER_TOO_LOW
    assert bool(starved.any()) and bool((vdd[starved] <= low[starved] + 1e-12).all())


# ---- bad specs name the field ------------------------------------------------------------------------

@pytest.mark.parametrize("changes, field, needle", [
    (dict(node="N9"), "node", "N7"),
    (dict(memory="HBM9"), "memory", "HBM3e"),
    (dict(scale_up_link="warp"), "scale_up_link", "NVLink4"),
    (dict(die_area_mm2=-5.0), "die_area_mm2", "> 0"),
    (dict(power_budget_w=0.0), "power_budget_w", "> 0"),
    (dict(area_sram_fraction=0.3), "area_compute_fraction+area_sram_fraction+area_other_fraction", "sum"),
    (dict(power_memory_fraction=-0.1, power_network_fraction=0.295), "power_memory_fraction", "[0, 1]"),
    (dict(shoreline_memory_fraction=0.7), "shoreline_memory_fraction+shoreline_network_fraction", "sum"),
    (dict(vdd_v=2.0), "vdd_v", "N4"),
    (dict(flops_per_cycle_per_unit=1.5), "flops_per_cycle_per_unit", "integer"),
    (dict(fp8="yes"), "fp8", "true"),
])
def test_bad_chip_specs_name_the_field(changes, field, needle):
    with pytest.raises(SpecError) as info:
        dataclasses.replace(H100, **changes).validate()
    assert info.value.field == field and needle in str(info.value)


def test_unknown_node_lists_the_known_ones_and_unknown_keys_are_named():
    with pytest.raises(SpecError) as info:
        chip_from_dict({"node": "N1"})
    assert all(name in str(info.value) for name in LOGIC_NODES)
    with pytest.raises(SpecError) as info:
        chip_from_dict({"die_area": 600.0})
    assert info.value.field == "die_area" and "die_area_mm2" in str(info.value)


# ---- gradients ----------------------------------------------------------------------------------------

def _design(h100, make_system, llama7b) -> DesignBatch:
    return single_design(h100, make_system(64), llama7b,
                         MappingSpec(tp=2, pp=2, dp=16, global_batch_size=512, micro_batch_size=2))


def _step(design: DesignBatch, chips, relaxed: bool):
    derived = derive(chips, relaxed=relaxed)
    result = evaluate(design.replace(**{k: v for k, v in derived.accelerator.items() if k in design.fields()}))
    outputs = {"step_time_s": result.step_time_s, "peak": derived.accelerator["peak_bf16_flops_per_s"]}
    if hasattr(result, "energy_j"):
        outputs["energy_j"] = result.energy_j
    return outputs


# (field, value, relaxed): budgets and splits that feed no integer count are checked on the real
# (floored) derivation; area and shoreline, which set counts, on the relaxed one (the gradient the
# straight-through floors pass on)
GRADIENT_CASES = [("power_budget_w", None, False), ("power_compute_fraction", None, False),
                  ("power_memory_fraction", None, False), ("vdd_v", 0.7, False),
                  ("die_area_mm2", None, True), ("area_compute_fraction", None, True),
                  ("area_sram_fraction", None, True), ("shoreline_memory_fraction", None, True)]


@pytest.mark.parametrize("field, value, relaxed", GRADIENT_CASES, ids=[c[0] for c in GRADIENT_CASES])
def test_autograd_through_derivation_and_step_matches_finite_differences(h100, make_system, llama7b, field, value,
                                                                        relaxed):
    design = _design(h100, make_system, llama7b)
    chip = dataclasses.replace(H100, power_budget_w=600.0)
    if field == "vdd_v":
        chip = dataclasses.replace(chip, vdd_v=value, power_budget_w=2000.0)
    chips = stack_chips([chip])
    x0 = getattr(chips, field).clone()
    x = x0.clone().requires_grad_(True)
    outputs = _step(design, chips.replace(**{field: x}), relaxed)
    assert "energy_j" in outputs or not hasattr(evaluate(design), "energy_j")
    h = float(x0) * 1e-6
    for name, value_ in outputs.items():
        grad = (torch.autograd.grad(value_.sum(), x, retain_graph=True)[0] if value_.requires_grad
                else torch.zeros_like(x0))  # an output that does not depend on x (peak on the memory split)
        up = float(_step(design, chips.replace(**{field: x0 + h}), relaxed)[name])
        down = float(_step(design, chips.replace(**{field: x0 - h}), relaxed)[name])
        fd = (up - down) / (2 * h)
        assert float(grad) == pytest.approx(fd, rel=1e-4, abs=1e-12 * abs(float(value_.detach()))), (field, name)
        assert torch.isfinite(grad).all()
    if field == "power_budget_w":  # more power: a faster step
        (grad,) = torch.autograd.grad(_step(design, chips.replace(**{field: x}), relaxed)["step_time_s"].sum(), x)
        assert float(grad) < 0


def test_straight_through_counts_keep_a_gradient_where_the_floor_has_none():
    chips = stack_chips([H100])
    area = chips.die_area_mm2.clone().requires_grad_(True)
    derived = derive(chips.replace(die_area_mm2=area))
    units = float(derived.accelerator["compute_units"].detach()[0])
    assert units == int(units)
    (grad,) = torch.autograd.grad(derived.accelerator["compute_units"].sum(), area)
    assert float(grad) > 0  # the un-floored count's slope: more area, more units


def test_power_model_helpers_are_consistent():
    node = LOGIC_NODES["N5"]
    v = torch.tensor([0.6, 0.75, 0.85], dtype=DTYPE)
    p = compute_power_w(v, torch.tensor(300.0, dtype=DTYPE), torch.tensor(100.0, dtype=DTYPE), node.threshold_v,
                        node.nominal_vdd_v, DEFAULT_DERIVATION)
    assert float(p[1]) == pytest.approx(400.0)  # at nominal V: nominal dynamic + leakage
    assert bool((p.diff() > 0).all())
