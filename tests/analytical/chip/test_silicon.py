"""analytical.chip.silicon: the fit of the operand-delivery overhead on A100 and H100, and one model for both
paths: a preset and the chip derived from the same technology and budgets (conf/chip/a100-n7.yaml,
h100-n4.yaml) price a FLOP, an SRAM byte and static power the same way up to the solved supply."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
import yaml

from analytical import MappingSpec, evaluate, single_design
from analytical.chip import silicon
from analytical.step import energy
from analytical.chip.derive import derive_chip
from analytical.chip.spec import chip_from_dict
from analytical.chip.technology import LOGIC_NODES
from analytical.codes import DTYPE, MIB

CHIPS = Path(__file__).resolve().parents[3] / "conf" / "chip"
COMPUTE_SHARE = 0.805  # power_compute_fraction of conf/chip/a100-n7.yaml and h100-n4.yaml


def _anchor(spec):
    """(W per unit of overhead, W of SRAM traffic, compute budget W) of a preset at its bf16 peak."""
    node = LOGIC_NODES[spec.logic_node]
    peak = spec.peak_tflops_bf16 * 1e12
    units_and_leakage = silicon.compute_power_at_peak_w(peak, node.fp16_mac_energy_j, node.leakage_fraction, 0.0,
                                                        spec.sram_mib * MIB, spec.tile_m, spec.tile_n)
    per_k = units_and_leakage / silicon.COMPUTE_ENERGY_OVERHEAD
    sram = peak * silicon.sram_bytes_per_flop(spec.tile_m, spec.tile_n) * silicon.sram_energy_j_per_byte(
        node.sram_read_energy_j_per_bit, spec.sram_mib * MIB)
    return per_k, sram, COMPUTE_SHARE * spec.tdp_w


def test_overhead_is_the_balanced_fit_on_a100_and_h100(a100, h100):
    """Re-derives the comment of COMPUTE_ENERGY_OVERHEAD: the data, the formula, the residuals."""
    anchors = {"a100": _anchor(a100), "h100": _anchor(h100)}
    alone = {name: (budget - sram) / per_k for name, (per_k, sram, budget) in anchors.items()}
    assert alone["a100"] == pytest.approx(6.38, abs=0.01) and alone["h100"] == pytest.approx(4.75, abs=0.01)

    def log_residuals(k):
        return [math.log((per_k * k + sram) / budget) for per_k, sram, budget in anchors.values()]

    low, high = 1.0, 20.0  # bisection on the sum of log residuals (increasing in k)
    for _ in range(100):
        mid = 0.5 * (low + high)
        low, high = (mid, high) if sum(log_residuals(mid)) < 0 else (low, mid)
    assert low == pytest.approx(5.53, abs=0.005)
    assert silicon.COMPUTE_ENERGY_OVERHEAD == round(low, 1)
    a, h = (math.exp(r) - 1 for r in log_residuals(silicon.COMPUTE_ENERGY_OVERHEAD))
    assert a == pytest.approx(-0.114, abs=0.002) and h == pytest.approx(0.120, abs=0.002)
    # the closed form is what the presets' fields give
    f = energy.accelerator_energy_fields(a100)
    per_k, sram, _ = anchors["a100"]
    power = f["static_power_w"] + 312e12 * (f["flop_energy_bf16_j"] + (2 / 128) * f["sram_energy_j_per_byte"])
    assert power == pytest.approx(per_k * silicon.COMPUTE_ENERGY_OVERHEAD + sram, rel=1e-12)


def test_functions_take_floats_and_tensors():
    node = LOGIC_NODES["N5"]
    v = torch.tensor([0.9, 1.0, 1.1], dtype=DTYPE)
    sram = torch.tensor([1e3, 40 * MIB, 80 * MIB], dtype=DTYPE)
    batch = silicon.sram_energy_j_per_byte(node.sram_read_energy_j_per_bit, sram, v)
    for i in range(3):
        one = silicon.sram_energy_j_per_byte(node.sram_read_energy_j_per_bit, float(sram[i]), float(v[i]))
        assert float(batch[i]) == pytest.approx(one, rel=1e-12)
    assert float(batch[0]) == pytest.approx(8 * node.sram_read_energy_j_per_bit * 0.81)  # below one bank
    assert silicon.flop_energy_j(2.0, 1.1) == pytest.approx(silicon.COMPUTE_ENERGY_OVERHEAD * 1.21)
    assert silicon.leakage_power_w(300.0, 0.25, 1.1) == pytest.approx(100.0 * 1.1**3)


def _chip(name: str):
    return chip_from_dict(yaml.safe_load((CHIPS / f"{name}.yaml").read_text()))


@pytest.mark.parametrize("preset, chip_name", [("a100", "a100-n7"), ("h100", "h100-n4")])
def test_preset_and_derived_chip_price_the_same_silicon(request, make_system, llama7b, preset, chip_name):
    """Same technology and budgets: energy per FLOP within 6 % and static power within 13 % of the
    preset's, the whole difference being the solved supply (J/FLOP ~ V^2, leakage ~ V^3) and the
    derived unit count (leakage): A100 derives at 0.770 V (+2.7 % over nominal) with 112 units
    (datasheet 108), H100 at 0.734 V (-2.1 %) with 126 (datasheet 132)."""
    spec = request.getfixturevalue(preset)
    chip = _chip(chip_name)
    derived = derive_chip(chip)
    assert int(derived.reason[0]) == 0
    node = LOGIC_NODES[chip.node]
    a = {k: float(v[0]) for k, v in derived.accelerator.items()}
    p = energy.accelerator_energy_fields(spec)
    v = float(derived.operating["vdd_v"][0]) / node.nominal_vdd_v
    # the explanation, exactly: the supply, the SRAM size, the units
    for precision in ("fp32", "tf32", "fp16", "bf16", "fp8"):
        name = f"flop_energy_{precision}_j"
        assert a[name] / p[name] == pytest.approx(v * v, rel=1e-12), precision
    assert a["sram_energy_j_per_byte"] / p["sram_energy_j_per_byte"] == pytest.approx(
        v * v * math.sqrt(a["sram_bytes"] / (spec.sram_mib * MIB)), rel=1e-9)
    silicon_ratio = a["compute_units"] * chip.flops_per_cycle_per_unit * node.reference_clock_hz \
        / (spec.peak_tflops_fp16 * 1e12)
    assert a["static_power_w"] / p["static_power_w"] == pytest.approx(silicon_ratio * v**3, rel=1e-4)
    # the stated tolerances
    assert abs(a["flop_energy_bf16_j"] / p["flop_energy_bf16_j"] - 1) < 0.06
    assert abs(a["sram_energy_j_per_byte"] / p["sram_energy_j_per_byte"] - 1) < 0.06
    assert abs(a["static_power_w"] / p["static_power_w"] - 1) < 0.13

    # on the same design: the compute energy per FLOP and the static power the step sees, and the energy
    # per token of the whole derived chip (its own peak rates and bandwidths too) within 10 %
    design = single_design(spec, make_system(64), llama7b,
                           MappingSpec(tp=2, pp=2, dp=16, global_batch_size=512, micro_batch_size=2))
    energy_fields = {k: v_ for k, v_ in derived.accelerator.items() if "energy" in k or k == "static_power_w"}
    base, priced = evaluate(design), evaluate(design.replace(**energy_fields))
    compute_ratio = float(priced.energy_breakdown_j["compute"] / base.energy_breakdown_j["compute"])
    assert compute_ratio == pytest.approx(v * v, rel=1e-12)
    static_ratio = float(priced.energy_breakdown_j["static"] / base.energy_breakdown_j["static"])
    assert static_ratio == pytest.approx(a["static_power_w"] / p["static_power_w"], rel=1e-12)
    whole = evaluate(design.replace(**{k: v_ for k, v_ in derived.accelerator.items() if k in design.fields()}))
    assert bool(base.feasible[0]) and bool(whole.feasible[0])
    assert float(whole.energy_per_token_j / base.energy_per_token_j) == pytest.approx(1.0, abs=0.10)
