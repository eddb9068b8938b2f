"""analytical.step.energy: each term against its closed form, scaling, batching, robustness, the power budget,
and the technology names of AcceleratorSpec."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from analytical import MappingSpec, ModelSpec, Reason, SpecError, evaluate, single_design, stack_designs
from analytical.chip import silicon
from analytical.chip.silicon import CLOCKED_SHARE
from analytical.chip.technology import LINK_TECHS, LOGIC_NODES, MEMORY_TECHS
from analytical.step import energy
from analytical.step.memory import params_per_device, recomputed_module_bytes

PARTS = energy.ENERGY_PARTS


def check_parts(result, rel=1e-12):
    assert tuple(result.energy_breakdown_j) == PARTS
    total = sum(result.energy_breakdown_j.values())
    torch.testing.assert_close(total, result.energy_j, rtol=rel, atol=0)


# ---- per-unit energies of an accelerator -----------------------------------------------------------------

def test_accelerator_fields_are_the_technology_rows(a100, h100):
    n7, n4 = LOGIC_NODES["N7"], LOGIC_NODES["N4"]
    f = energy.accelerator_energy_fields(a100)  # defaults: N7, HBM2e, NVLink3, IB-HDR
    assert f["flop_energy_bf16_j"] == pytest.approx(n7.bf16_mac_energy_j / 2 * silicon.COMPUTE_ENERGY_OVERHEAD)
    assert f["flop_energy_fp8_j"] < f["flop_energy_bf16_j"] < f["flop_energy_tf32_j"] < f["flop_energy_fp32_j"]
    assert f["hbm_energy_j_per_byte"] == pytest.approx(8 * MEMORY_TECHS["HBM2e"].energy_j_per_bit)
    assert f["scale_up_energy_j_per_byte"] == pytest.approx(8 * LINK_TECHS["NVLink3"].energy_j_per_bit)
    assert f["scale_out_energy_j_per_byte"] == pytest.approx(8 * LINK_TECHS["IB-HDR"].energy_j_per_bit)
    # Horowitz: SRAM energy per bit grows as sqrt(size) from the 8 KB bank: 40 MiB is 71.6x the bank's
    assert f["sram_energy_j_per_byte"] == pytest.approx(8 * n7.sram_read_energy_j_per_bit * math.sqrt(5120))
    # static: the leakage of the units, the node's static share of their power at the 312 TFLOP/s peak
    leak = n7.leakage_fraction
    assert f["static_power_w"] == pytest.approx(leak / (1 - leak) * 312e12 * f["flop_energy_fp16_j"], rel=1e-12)
    # it follows the silicon, not the budget: a higher power cap on the same chip leaks the same
    assert energy.accelerator_energy_fields(dataclasses.replace(a100, tdp_w=500.0))["static_power_w"] \
        == pytest.approx(f["static_power_w"], rel=1e-12)
    g = energy.accelerator_energy_fields(h100)  # N4: less energy per FLOP than N7
    assert g["flop_energy_bf16_j"] == pytest.approx(n4.bf16_mac_energy_j / 2 * silicon.COMPUTE_ENERGY_OVERHEAD)
    assert g["flop_energy_bf16_j"] < f["flop_energy_bf16_j"]
    # the static override wins, and reaches the design batch
    d = single_design(dataclasses.replace(a100, static_power_w=55.0), *_small_rest())
    assert float(d.static_power_w) == 55.0
    assert float(single_design(a100, *_small_rest()).hbm_energy_j_per_byte) == pytest.approx(f["hbm_energy_j_per_byte"])


@pytest.mark.parametrize("name, residual", [("a100", -0.114), ("h100", 0.120)])
def test_presets_at_peak_draw_the_compute_share_of_their_tdp(a100, h100, name, residual):
    """The calibration of `silicon.COMPUTE_ENERGY_OVERHEAD`: an A100 / H100 preset at its dense bf16
    peak (units + L2 traffic of its tiles + static) draws the compute share (0.805) of its TDP, up to the
    residuals of the one-constant fit stated in its comment."""
    spec = {"a100": a100, "h100": h100}[name]
    f = energy.accelerator_energy_fields(spec)
    peak = spec.peak_tflops_bf16 * 1e12
    sram_bytes_per_flop = 2.0 * (1 / spec.tile_m + 1 / spec.tile_n) / 2.0  # gemm_sram_bytes / gemm_flops, bf16
    power = f["static_power_w"] + peak * (f["flop_energy_bf16_j"] + sram_bytes_per_flop * f["sram_energy_j_per_byte"])
    assert power / (0.805 * spec.tdp_w) - 1.0 == pytest.approx(residual, abs=0.005)


# ---- each term against its closed form -------------------------------------------------------------------

def _small_rest():
    return (_one_device(), ModelSpec(name="g", kind="gemm", gemm_m=4096, gemm_n=2048, gemm_k=1024),
            MappingSpec(global_batch_size=1, precision="bf16"))


def _one_device():
    from analytical import SystemSpec
    return SystemSpec(name="one", num_devices=1, devices_per_node=1, scale_up_domain=1)


def test_terms_of_a_single_gemm_step(a100):
    """One bf16 GEMM (M, N, K) trained for a step on one device: forward, input- and weight-gradient
    GEMMs, Adam over its K x N weights; no network."""
    system, model, mapping = _small_rest()
    d = single_design(a100, system, model, mapping)
    r = evaluate(d)
    check_parts(r)
    M, N, K = 4096.0, 2048.0, 1024.0
    elem = 2.0
    flops = 3 * 2 * M * N * K
    hbm_bytes = 3 * elem * (M * K + K * N + M * N) + 34.0 * K * N
    sram_bytes = 3 * elem * M * N * K * (1 / 128 + 1 / 128) + 34.0 * K * N
    parts = {k: float(v) for k, v in r.energy_breakdown_j.items()}
    k = CLOCKED_SHARE
    units_power_w = max(float(getattr(d, f"peak_{f}_flops_per_s")) * float(getattr(d, f"flop_energy_{f}_j"))
                        for f in ("fp32", "tf32", "fp16", "bf16", "fp8", "fp4"))
    want = (1 - k) * flops * float(d.flop_energy_bf16_j) + k * units_power_w * float(r.step_time_s)
    assert parts["compute"] == pytest.approx(want, rel=1e-12)
    assert parts["hbm"] == pytest.approx(hbm_bytes * float(d.hbm_energy_j_per_byte), rel=1e-12)
    assert parts["sram"] == pytest.approx(sram_bytes * float(d.sram_energy_j_per_byte), rel=1e-12)
    assert parts["scale_up"] == 0.0 and parts["scale_out"] == 0.0
    assert parts["static"] == pytest.approx(float(d.static_power_w * r.step_time_s), rel=1e-12)
    # totals: per token (a GEMM step is one "token" per batch row) and average power of the one device
    assert float(r.energy_per_token_j) == pytest.approx(float(r.energy_j), rel=1e-12)
    assert float(r.avg_power_w) == pytest.approx(float(r.energy_j / r.step_time_s), rel=1e-12)
    row = r.row(0)
    assert row["energy_j"] == pytest.approx(float(r.energy_j)) and set(row["energy_breakdown"]) == set(PARTS)


def test_adam_moves_the_bytes_of_its_state_dtypes(a100):
    """The single-GEMM step with bf16 moments and no master copy (the optimizer steps the bf16 weight):
    Adam's HBM and SRAM traffic is 20 bytes a weight instead of 34; the GEMMs' is unchanged."""
    system, model, mapping = _small_rest()
    default = evaluate(single_design(a100, system, model, mapping)).energy_breakdown_j
    d = single_design(a100, system, model, dataclasses.replace(mapping, optimizer_state_dtype="bf16",
                                                               master_params="none"))
    lean = evaluate(d).energy_breakdown_j
    weights = 1024.0 * 2048.0
    for part, per_byte in (("hbm", d.hbm_energy_j_per_byte), ("sram", d.sram_energy_j_per_byte)):
        assert float(default[part] - lean[part]) == pytest.approx((34.0 - 20.0) * weights * float(per_byte), rel=1e-9)


def test_network_bytes_of_tp_dp_and_pp_groups(a100, make_system, small_gpt):
    """tp = 8 inside a node rides NVLink; dp = 2 across nodes (stride 8) and a pipeline that leaves the
    node ride the NICs. Closed forms of the bytes each level carries in one step."""
    h, s, L = 2048.0, 2048.0, 24.0
    elem = 2.0
    # tp x dp: per layer and micro-batch 4 all-reduces of b s h elem inside the node (ring: 2 (n-1)/n)
    d = single_design(a100, make_system(16), small_gpt, MappingSpec(tp=8, dp=2, global_batch_size=8))
    m = 8 / 2  # micro-batches
    params = float(params_per_device(d))
    up, out = (float(x) for x in energy.network_bytes(d, params_per_device(d)))
    assert up == pytest.approx(m * L * 16 * 4 * 2 * 7 / 8 * s * h * elem, rel=1e-12)
    assert out == pytest.approx(16 * 2 * (1 / 2) * params * 4.0, rel=1e-12)  # fp32 main grads, 2-rank ring
    r = evaluate(d)
    check_parts(r)
    up_e, out_e = float(d.scale_up_energy_j_per_byte), float(d.scale_out_energy_j_per_byte)
    assert float(r.energy_breakdown_j["scale_up"]) == pytest.approx(up * 2 * up_e, rel=1e-12)  # via NVSwitch
    assert float(r.energy_breakdown_j["scale_out"]) == pytest.approx(out * 2 * out_e, rel=1e-12)  # one leaf
    # tp x pp: the pipeline crosses the node: forward activation + backward gradient per micro-batch
    d = single_design(a100, make_system(16), small_gpt, MappingSpec(tp=8, pp=2, dp=1, global_batch_size=8))
    up, out = (float(x) for x in energy.network_bytes(d, params_per_device(d)))
    assert out == pytest.approx(2 * 8 * (2 - 1) * s * h * elem, rel=1e-12)
    assert up == pytest.approx(8 * (L / 2) * 16 * 4 * 2 * 7 / 8 * s * h * elem, rel=1e-12)


def test_link_traversals_by_topology(a100, make_system, small_gpt):
    mapping = MappingSpec(tp=8, global_batch_size=8)
    cases = {"rail-optimized": (2.0, 2.0), "fat-tree": (2.0, 2.0), "torus": (1.0, 1.0)}
    for topology, expected in cases.items():
        d = single_design(a100, make_system(16, topology=topology), small_gpt, mapping)
        assert tuple(float(x) for x in energy.link_traversals(d)) == expected
    big = single_design(a100, make_system(1024), small_gpt, MappingSpec(tp=8, global_batch_size=1024))
    assert float(energy.link_traversals(big)[1]) == 4.0  # 128 nodes: through a spine


# ---- scaling ----------------------------------------------------------------------------------------------

@pytest.fixture
def llama_design(h100, make_system, llama7b):
    return single_design(h100, make_system(64), llama7b,
                         MappingSpec(tp=2, pp=2, dp=16, global_batch_size=512, micro_batch_size=2))


def test_each_term_scales_with_its_own_energy(llama_design):
    d = llama_design
    base = evaluate(d)
    check_parts(base)
    assert all(float(v) > 0 for v in base.energy_breakdown_j.values())
    flop_fields = tuple(f"flop_energy_{f}_j" for f in ("fp32", "tf32", "fp16", "bf16", "fp8", "fp4"))
    for fields, part in ((flop_fields, "compute"), (("sram_energy_j_per_byte",), "sram"),
                         (("hbm_energy_j_per_byte",), "hbm"), (("scale_up_energy_j_per_byte",), "scale_up"),
                         (("scale_out_energy_j_per_byte",), "scale_out"), (("static_power_w",), "static")):
        doubled = evaluate(d.replace(**{field: 2.0 * getattr(d, field) for field in fields}))
        for name in PARTS:
            factor = 2.0 if name == part else 1.0
            torch.testing.assert_close(doubled.energy_breakdown_j[name], factor * base.energy_breakdown_j[name],
                                       rtol=1e-12, atol=0, msg=f"{fields} -> {name}")
        torch.testing.assert_close(doubled.step_time_s, base.step_time_s, rtol=0, atol=0)
    # a bf16 step prices its FLOPs at bf16's energy: a cheaper fp32 FLOP (not the units' most
    # power-hungry format, so not their power at peak either) changes nothing
    other = evaluate(d.replace(flop_energy_fp32_j=0.5 * d.flop_energy_fp32_j))
    torch.testing.assert_close(other.energy_j, base.energy_j, rtol=0, atol=0)
    # static = static power x step time x devices
    torch.testing.assert_close(base.energy_breakdown_j["static"], d.static_power_w * base.step_time_s * 64.0,
                               rtol=1e-12, atol=0)


def test_recompute_costs_compute_energy(a100, make_system, gpt3):
    mapping = dict(tp=8, pp=16, global_batch_size=1536, sequence_parallel=True)
    plain = evaluate(single_design(a100, make_system(1024), gpt3, MappingSpec(**mapping)))
    full = evaluate(single_design(a100, make_system(1024), gpt3, MappingSpec(recompute="full", **mapping)))
    ratio = float(full.energy_breakdown_j["compute"] / plain.energy_breakdown_j["compute"])
    assert 1.25 < ratio < 1.34  # ~4/3: a second forward pass (logits not recomputed)
    assert float(full.energy_breakdown_j["scale_up"]) > float(plain.energy_breakdown_j["scale_up"])


def test_selective_recompute_with_fused_attention_moves_the_norm_and_activation_bytes_again(h100, make_system,
                                                                                            llama7b):
    # as the step time: the flash kernel recomputes its core itself, selective re-runs the norms and activation
    mapping = dict(tp=2, pp=2, global_batch_size=64, micro_batch_size=2, sequence_parallel=True, flash_attention=True)
    designs = [single_design(h100, make_system(16), llama7b, MappingSpec(recompute=r, **mapping))
               for r in ("none", "selective")]
    plain, selective = (evaluate(d) for d in designs)
    d = designs[1]
    micro_batches = d.global_batch_size / (d.dp * d.micro_batch_size)
    moved = recomputed_module_bytes(d) * d.num_layers * micro_batches * d.tp * d.cp * d.dp
    assert float(moved) > 0
    for part, j_per_byte in (("hbm", d.hbm_energy_j_per_byte), ("sram", d.sram_energy_j_per_byte)):
        extra = selective.energy_breakdown_j[part] - plain.energy_breakdown_j[part]
        torch.testing.assert_close(extra, moved * j_per_byte, rtol=1e-9, atol=0)
    assert float(selective.step_time_s) > float(plain.step_time_s)  # and the time pays for them too


# ---- batching and robustness -------------------------------------------------------------------------------

def test_batch_equals_singles(a100, h100, make_system, gpt3, llama7b, mixtral, lstm, gemm_model, small_gpt):
    cases = [
        (a100, make_system(1024), gpt3, MappingSpec(tp=8, pp=16, global_batch_size=1536, recompute="selective")),
        (h100, make_system(64), mixtral, MappingSpec(tp=2, pp=4, ep=8, global_batch_size=512, precision="fp8",
                                                     recompute="full", vp=2)),
        (a100, make_system(1), lstm, MappingSpec(global_batch_size=64, micro_batch_size=8, precision="fp32")),
        (h100, make_system(1), gemm_model, MappingSpec(precision="tf32")),
        (h100, make_system(32), small_gpt, MappingSpec(tp=2, cp=2, global_batch_size=256, zero_stage=3,
                                                       flash_attention=False)),
        (a100, make_system(8), gpt3, MappingSpec(tp=8, global_batch_size=8)),  # out of memory
    ]
    batch = evaluate(stack_designs(*map(list, zip(*cases))))
    check_parts(batch)
    for i, case in enumerate(cases):
        alone = evaluate(single_design(*case))
        for name in ("energy_j", "energy_per_token_j", "avg_power_w"):
            torch.testing.assert_close(getattr(batch, name)[i:i + 1], getattr(alone, name), rtol=1e-12, atol=0)
        for part in PARTS:
            torch.testing.assert_close(batch.energy_breakdown_j[part][i:i + 1], alone.energy_breakdown_j[part],
                                       rtol=1e-12, atol=0)
    # index / cat keep the energy fields
    again = type(batch).cat([batch.index(slice(0, 2)), batch.index(slice(2, None))])
    torch.testing.assert_close(again.energy_j, batch.energy_j, rtol=0, atol=0)
    assert set(again.energy_breakdown_j) == set(PARTS)


def test_no_nan_over_random_designs(make_random_designs):
    d = make_random_designs(20_000, seed=7)
    r = evaluate(d, chunk_size=8192)
    for name in ("energy_j", "energy_per_token_j", "avg_power_w"):
        value = getattr(r, name)
        assert value.dtype == torch.float64 and torch.isfinite(value).all() and (value > 0).all(), name
    for part, value in r.energy_breakdown_j.items():
        assert torch.isfinite(value).all() and (value >= 0).all(), part
    check_parts(r, rel=1e-10)
    over = r.reason == int(Reason.POWER_OVER_BUDGET)
    assert over.any() and (r.avg_power_w[over] > d.tdp_w[over]).all()
    ok = r.reason == 0
    assert ok.any() and (r.avg_power_w[ok] <= d.tdp_w[ok]).all()


def test_energy_is_differentiable(llama_design):
    d = llama_design
    names = ("flop_energy_bf16_j", "flop_energy_fp8_j", "hbm_energy_j_per_byte", "static_power_w",
             "hbm_bw_bytes_per_s", "peak_bf16_flops_per_s")
    leaves = {n: getattr(d, n).clone().requires_grad_(True) for n in names}
    grads = torch.autograd.grad(evaluate(d.replace(**leaves)).energy_j.sum(), list(leaves.values()))
    by_name = dict(zip(names, (float(g) for g in grads)))
    assert all(math.isfinite(g) for g in by_name.values())
    # the FLOPs' energy (per FLOP, and the units' power at peak: on H100 fp8's peak x J/FLOP is the highest)
    assert by_name["flop_energy_bf16_j"] + by_name["flop_energy_fp8_j"] > 0 and by_name["hbm_energy_j_per_byte"] > 0
    assert by_name["static_power_w"] > 0
    assert by_name["peak_bf16_flops_per_s"] < 0  # faster compute: less static energy


# ---- the power budget ---------------------------------------------------------------------------------------

def test_power_over_budget_is_a_reason(a100, make_system, small_gpt, gpt3):
    mapping = MappingSpec(tp=2, pp=2, dp=4, global_batch_size=64)
    a100 = dataclasses.replace(a100, static_power_w=100.0)  # a fixed static power, as a user may set it
    fine = evaluate(single_design(a100, make_system(16), small_gpt, mapping))
    power = float(fine.avg_power_w)
    assert bool(fine.feasible) and 100.0 < power < 400.0
    # (the budget of a batch: a spec's tdp_w also bounds the preset's compute energies, energy.compute_partition_scale)
    tight = evaluate(single_design(a100, make_system(16), small_gpt, mapping).replace(tdp_w=0.99 * power))
    assert int(tight.reason) == Reason.POWER_OVER_BUDGET and not bool(tight.feasible)
    assert tight.row(0)["reason"] == "power_over_budget"
    # the budget changes the verdict, not the numbers
    torch.testing.assert_close(tight.energy_j, fine.energy_j, rtol=0, atol=0)
    # tdp_w = 0: no budget
    free = evaluate(single_design(dataclasses.replace(a100, tdp_w=0.0), make_system(16),
                                  small_gpt, mapping))
    assert bool(free.feasible)
    # an earlier rule wins: out of memory is reported, not the power
    oom = evaluate(single_design(dataclasses.replace(a100, tdp_w=1.0), make_system(8), gpt3,
                                 MappingSpec(tp=8, global_batch_size=8)))
    assert int(oom.reason) == Reason.OUT_OF_MEMORY


# ---- specs and presets --------------------------------------------------------------------------------------

@pytest.mark.parametrize("field, value", [("logic_node", "N6"), ("memory_technology", "HBM9"),
                                          ("scale_up_link", "NVLink9"), ("scale_out_link", 7)])
def test_unknown_technology_is_a_spec_error_naming_the_field(a100, field, value):
    with pytest.raises(SpecError) as info:
        dataclasses.replace(a100, **{field: value}).validate()
    assert info.value.field == field
    assert field in str(info.value) and ("N7" in str(info.value) or "HBM3" in str(info.value)
                                         or "NVLink4" in str(info.value))


def test_technology_names_are_case_insensitive_and_static_checked(a100):
    spec = dataclasses.replace(a100, logic_node="n4", memory_technology="hbm3", scale_up_link="nvlink4")
    assert spec.validate() is spec
    assert energy.accelerator_energy_fields(spec)["hbm_energy_j_per_byte"] == 8 * MEMORY_TECHS["HBM3"].energy_j_per_bit
    with pytest.raises(SpecError) as info:
        dataclasses.replace(a100, static_power_w=-1.0).validate()
    assert info.value.field == "static_power_w"


EXPECTED_PRESETS = {
    "a100-sxm-40gb": ("N7", "HBM2", "NVLink3", "IB-HDR"),
    "a100-sxm-80gb": ("N7", "HBM2e", "NVLink3", "IB-HDR"),
    "h100-sxm-80gb": ("N4", "HBM3", "NVLink4", "IB-NDR"),
    "h200-sxm-141gb": ("N4", "HBM3e", "NVLink4", "IB-NDR"),
    "b200": ("N4", "HBM3e", "NVLink5", "IB-NDR"),
    "tpu-v4": ("N7", "HBM2", "ICI", "ICI"),
    "v100-sxm2-32gb": ("N16", "HBM2", "NVLink2", "IB-EDR"),
}


def test_hardware_presets_name_their_technologies():
    from deepflow.presets import available, load_preset

    assert set(EXPECTED_PRESETS) <= set(available("hardware"))
    for name in available("hardware"):
        spec = load_preset("hardware", name)
        names = (spec.logic_node, spec.memory_technology, spec.scale_up_link, spec.scale_out_link)
        if name in EXPECTED_PRESETS:
            assert names == EXPECTED_PRESETS[name], name
        fields = energy.accelerator_energy_fields(spec)
        assert all(math.isfinite(v) and v > 0 for v in fields.values()), name
    with pytest.raises(Exception) as info:
        load_preset("hardware", "a100-sxm-80gb", logic_node="N6")
    assert "logic_node" in str(info.value) and "N7" in str(info.value)


def test_network_bytes_of_hsdp(a100, make_system, small_gpt):
    """The distributed optimizer over dp 16 on two nodes as 2 replicas of 8-rank shard groups (dp_shard 8): the
    gradients' reduce-scatter and the weights' all-gather stay on NVLink ((n-1)/n of each), and only the
    replicas' all-reduce of one eighth of the fp32 gradients leaves the node (2 (n-1)/n over 2 ranks)."""
    d = single_design(a100, make_system(16), small_gpt,
                      MappingSpec(dp=16, distributed_optimizer=True, global_batch_size=32, dp_shard=8))
    params = float(params_per_device(d))
    up, out = (float(x) for x in energy.network_bytes(d, params_per_device(d)))
    assert up == pytest.approx(16 * 7 / 8 * params * (4.0 + 2.0), rel=1e-12)
    assert out == pytest.approx(16 * params * 4.0 / 8, rel=1e-12)


def test_fsdp_under_a_pipeline_moves_its_weights_once_a_step(a100, make_system, small_gpt):
    """FSDP under pp > 1 holds the gathered weights for the whole step (`memory.fsdp_keeps_unsharded`), as the
    step time counts it: doubling the micro-batches adds only the pipeline's point-to-point bytes (a forward
    activation and a backward gradient per micro-batch and stage boundary), no data-parallel bytes."""
    s, h, elem, dp = 2048.0, 2048.0, 2.0, 8

    def total(gbs: int) -> float:
        mapping = MappingSpec(pp=2, dp=dp, zero_stage=3, fsdp=True, global_batch_size=gbs)
        d = single_design(a100, make_system(16), small_gpt, mapping)
        return sum(float(x) for x in energy.network_bytes(d, params_per_device(d)))

    micro_batches = (16 / dp, 32 / dp)
    assert total(32) - total(16) == pytest.approx(
        2.0 * (micro_batches[1] - micro_batches[0]) * (2 - 1) * s * h * elem * dp, rel=1e-12)
