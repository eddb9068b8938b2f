"""analytical.power_cap: the operating point a part sustains within its power budget (a TDP above its die's
nominal rating, a power limit below its TDP) on the chip derivation's V/f model."""

from __future__ import annotations

import dataclasses

import pytest

from analytical import MappingSpec, SpecError
from analytical.chip.constants import DerivationConstants
from analytical.chip.power import compute_power_w
from analytical.chip.technology import logic_node
from analytical.power_cap import OperatingPoint, apply_operating_point, operating_point
from analytical.step.energy import compute_partition_scale, static_power_w, units_dynamic_power_w
from deepflow.presets import load_preset


@pytest.fixture(scope="module")
def parts():
    return {name: load_preset("hardware", name) for name in ("b200", "gb200", "b300", "gb300", "h100-sxm-80gb")}


def test_a_part_rated_at_its_own_nominal_point_runs_its_datasheet(parts):
    for name in ("b200", "b300", "h100-sxm-80gb"):
        spec = parts[name]
        assert operating_point(spec) == OperatingPoint()
        fields = {"peak_bf16_flops_per_s": 1.0, "flop_energy_bf16_j": 1.0}
        assert apply_operating_point(fields, spec) is fields  # untouched, not a copy


def test_the_watts_above_the_dies_rating_buy_less_clock_than_the_gb200_datasheet_claims(parts):
    gb200 = parts["gb200"]
    share = gb200.nominal_peak_tflops_bf16 / gb200.peak_tflops_bf16  # B200's rating over GB200's: 0.9
    point = operating_point(gb200)
    assert share < point.clock < 1.0 and point.vdd > 1.0  # above the die's nominal supply, short of the datasheet
    # the compute partition at the operating supply draws the nominal one's power plus the extra watts, no more
    node, c = logic_node(gb200.logic_node), DerivationConstants()
    scale = compute_partition_scale(node, gb200, tdp_w=gb200.nominal_tdp_w, peak_share=share)
    dynamic = scale * share * units_dynamic_power_w(node, gb200)
    leakage = scale * share * static_power_w(node, gb200)
    vn = node.nominal_vdd_v
    drawn = float(compute_power_w(point.vdd * vn, dynamic, leakage, node.threshold_v, vn, c))
    assert drawn == pytest.approx(dynamic + leakage + gb200.tdp_w - gb200.nominal_tdp_w, rel=1e-9)


def test_held_to_its_dies_nominal_tdp_a_gb200_runs_at_the_b200_datasheet(parts, system, design, llama7b):
    gb200, b200 = parts["gb200"], parts["b200"]
    held = dataclasses.replace(gb200, power_limit_w=b200.tdp_w)
    point = operating_point(held)
    assert point.clock == pytest.approx(b200.peak_tflops_bf16 / gb200.peak_tflops_bf16, rel=1e-9)
    assert point.vdd == pytest.approx(1.0, rel=1e-9)
    d = design(held, system, llama7b, MappingSpec())
    for fmt in ("bf16", "fp8", "fp4"):
        peak = float(getattr(d, f"peak_{fmt}_flops_per_s")[0])
        assert peak == pytest.approx(getattr(b200, f"peak_tflops_{fmt}") * 1e12, rel=1e-9)


def test_a_budget_that_affords_more_than_the_datasheet_runs_the_datasheet_clock(parts):
    gb300 = parts["gb300"]
    budgets = (1100.0, 1200.0, 1300.0, 1400.0, 1600.0)
    clocks = [operating_point(dataclasses.replace(gb300, tdp_w=w)).clock for w in budgets]
    assert clocks == sorted(clocks) and clocks[0] == pytest.approx(0.9, rel=1e-9) and clocks[-1] == 1.0
    capped = operating_point(dataclasses.replace(gb300, tdp_w=1600.0))
    assert capped.vdd < operating_point(dataclasses.replace(gb300, tdp_w=1600.0, peak_tflops_fp16=3000.0,
                                                            peak_tflops_bf16=3000.0)).vdd  # the datasheet's supply


def test_a_sustained_clock_slows_the_step_and_the_report_names_it(parts, system, run, llama7b):
    from deepflow.report import design_line

    gb200 = parts["gb200"]
    m = MappingSpec(global_batch_size=8)
    rated = dataclasses.replace(gb200, nominal_tdp_w=None, nominal_peak_tflops_bf16=None)
    assert float(run(gb200, system, llama7b, m).step_time_s[0]) > float(run(rated, system, llama7b, m).step_time_s[0])
    assert f"x gb200 at {operating_point(gb200).clock:.3f}x rated clock (" in design_line(gb200, system, llama7b, m)
    assert " at " not in design_line(parts["b200"], system, llama7b, m).split(";")[0]


@pytest.mark.parametrize("change, field", [
    ({"nominal_tdp_w": None}, "nominal_tdp_w"),
    ({"nominal_peak_tflops_bf16": None}, "nominal_peak_tflops_bf16"),
    ({"nominal_tdp_w": 0.0}, "nominal_tdp_w"),
    ({"nominal_peak_tflops_bf16": 2600.0}, "nominal_peak_tflops_bf16"),
])
def test_a_nominal_rating_is_validated_by_name(parts, change, field):
    with pytest.raises(SpecError) as info:
        dataclasses.replace(parts["gb200"], **change).validate()
    assert info.value.field == field


def test_a_part_without_a_tdp_takes_its_power_limit_as_the_budget_at_its_datasheet_clock(parts, system, design,
                                                                                         llama7b):
    h100 = parts["h100-sxm-80gb"]
    d = design(dataclasses.replace(h100, tdp_w=0.0, power_limit_w=300.0), system, llama7b, MappingSpec())
    assert float(d.tdp_w[0]) == 300.0 and float(d.peak_bf16_flops_per_s[0]) == h100.peak_tflops_bf16 * 1e12
