"""What modern clusters add: narrow formats (fp8, mxfp8, nvfp4), FSDP, MoE expert widths and shared
experts, power limits (analytical.power_cap)."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from analytical import Efficiency, MappingSpec, ModelSpec, Reason, SpecError, evaluate
from analytical.power_cap import capped_operating_point
from analytical.step.memory import embedding_params_per_device, memory_breakdown, params_per_device
from analytical.step.kernels import gemm_peak_fraction
from analytical.step.workload import gemm_bytes_per_element, layer_gemms, layer_params, mlp_width


def test_narrow_formats_run_at_their_format_peak(h100, system, design, llama7b):
    b200_like = dataclasses.replace(h100, name="fp4-chip", peak_tflops_fp4=2.0 * h100.peak_tflops_fp8)
    from analytical.step.feasibility import peak_for_precision

    for precision, want in (("bf16", 989.4), ("fp8", 1978.9), ("mxfp8", 1978.9), ("nvfp4", 3957.8)):
        d = design(b200_like, system, llama7b, MappingSpec(precision=precision))
        assert float(peak_for_precision(d)[0]) == pytest.approx(want * 1e12, rel=1e-12)


def test_nvfp4_needs_an_fp4_datapath(h100, system, run, llama7b):
    result = run(h100, system, llama7b, MappingSpec(precision="nvfp4", global_batch_size=8))
    assert not bool(result.feasible[0]) and int(result.reason[0]) == int(Reason.PRECISION_UNSUPPORTED)


@pytest.mark.parametrize("precision, fraction_field", [("bf16", "gemm_peak_fraction"), ("fp16", "gemm_peak_fraction"),
                                                       ("fp8", "narrow_gemm_peak_fraction"),
                                                       ("mxfp8", "narrow_gemm_peak_fraction")])
def test_narrow_gemms_use_their_own_fraction(h100, system, design, llama7b, precision, fraction_field):
    eff = Efficiency(gemm_peak_fraction=0.71, narrow_gemm_peak_fraction=0.53)
    d = design(h100, system, llama7b, MappingSpec(precision=precision))
    assert float(gemm_peak_fraction(d, eff)[0]) == getattr(eff, fraction_field)


def test_narrow_gemm_efficiency_only_moves_narrow_designs(h100, system, design, llama7b):
    slow = Efficiency(narrow_gemm_peak_fraction=0.4)
    bf16 = design(h100, system, llama7b, MappingSpec(precision="bf16", global_batch_size=8))
    fp8 = design(h100, system, llama7b, MappingSpec(precision="fp8", global_batch_size=8))
    assert float(evaluate(bf16, slow).step_time_s[0]) == float(evaluate(bf16).step_time_s[0])
    assert float(evaluate(fp8, slow).step_time_s[0]) > float(evaluate(fp8).step_time_s[0])


def test_narrow_formats_bytes(h100, system, design, llama7b):
    got = [float(gemm_bytes_per_element(design(h100, system, llama7b, MappingSpec(precision=p)))[0])
           for p in ("bf16", "fp8", "mxfp8", "nvfp4")]
    assert got == [2.0, 1.0, 1.0 + 1.0 / 32.0, 0.5 + 1.0 / 16.0]


def test_fp8_adds_cast_traffic_and_keeps_attention_16bit(h100, system, run, llama7b):
    # with a narrow fraction equal to bf16's, the fp8 GEMMs take half the time but the step does not
    # halve: casts, 16-bit attention and the 16-bit output layer stay
    eff = Efficiency(narrow_gemm_peak_fraction=Efficiency().gemm_peak_fraction)
    bf16 = evaluate_one(run, h100, system, llama7b, MappingSpec(precision="bf16", global_batch_size=8), eff)
    fp8 = evaluate_one(run, h100, system, llama7b, MappingSpec(precision="fp8", global_batch_size=8), eff)
    assert 0.5 * float(bf16.step_time_s[0]) < float(fp8.step_time_s[0]) < float(bf16.step_time_s[0])


def test_fsdp_runs_zero3_at_the_collective_bound(h100, make_system, run, llama7b):
    system = make_system(64)
    eff = Efficiency(zero3_comm_fraction=0.25, overlap_compute_slowdown=1.0)
    base = dict(dp=64, zero_stage=3, global_batch_size=64, micro_batch_size=1)
    deepspeed = evaluate_one(run, h100, system, llama7b, MappingSpec(**base), eff)
    fsdp = evaluate_one(run, h100, system, llama7b, MappingSpec(**base, fsdp=True), eff)
    # the collectives themselves are 4x faster; exposed time can only shrink
    assert float(fsdp.time_breakdown_s["dp_comm"][0]) <= float(deepspeed.time_breakdown_s["dp_comm"][0])
    assert float(fsdp.step_time_s[0]) < float(deepspeed.step_time_s[0])
    assert float(fsdp.memory_per_device_bytes[0]) == float(deepspeed.memory_per_device_bytes[0])


def evaluate_one(run, accelerator, system, model, mapping, eff):
    from analytical import single_design

    return evaluate(single_design(accelerator, system, model, mapping), eff)


def test_fsdp_needs_zero_stage_3():
    with pytest.raises(SpecError) as info:
        MappingSpec(fsdp=True, zero_stage=1).validate()
    assert info.value.field == "fsdp"


def deepseek_like(shared: int) -> ModelSpec:
    return ModelSpec(name="moe", num_layers=4, hidden_size=1024, num_heads=8, ffn_hidden_size=4096, ffn_type="swiglu",
                     vocab_size=1000, seq_length=512, num_experts=16, top_k=4, moe_ffn_hidden_size=256,
                     num_shared_experts=shared)


@pytest.mark.parametrize("shared", [0, 1, 2])
def test_moe_expert_width_and_shared_experts(h100, system, design, shared):
    d = design(h100, system, deepseek_like(shared), MappingSpec(flash_attention=True))
    h, f = 1024, 256
    dense, expert = layer_params(d)
    assert float(expert[0]) == 16 * 3 * h * f  # routed experts: gate, up, down of width 256
    attention_norms = 4 * h * h + 2 * h
    router = 16 * h
    assert float(dense[0]) == attention_norms + router + shared * 3 * h * f
    assert float(mlp_width(d)[0]) == f * (4 + shared)
    # the expert GEMMs carry top_k + shared experts' worth of tokens
    g = layer_gemms(d)
    up = 4  # ffn_up slot
    assert float((g.m[0, up] * g.count[0, up])) == pytest.approx(512 * (4 + shared), rel=1e-12)
    assert float(g.n[0, up]) == 2 * f and float(g.k[0, up]) == h


def test_dense_models_ignore_moe_fields(h100, system, design, llama7b):
    wide = dataclasses.replace(llama7b, moe_ffn_hidden_size=99, num_shared_experts=3)
    a, b = design(h100, system, llama7b, MappingSpec()), design(h100, system, wide, MappingSpec())
    assert float(params_per_device(a)[0]) == float(params_per_device(b)[0])
    assert float(evaluate(a).step_time_s[0]) == float(evaluate(b).step_time_s[0])


def test_power_limit_at_or_above_tdp_changes_nothing(h100, system, run, llama7b):
    m = MappingSpec(global_batch_size=8)
    base = run(h100, system, llama7b, m)
    for limit in (700.0, 800.0):
        capped = run(dataclasses.replace(h100, power_limit_w=limit), system, llama7b, m)
        assert float(capped.step_time_s[0]) == float(base.step_time_s[0])


def test_power_limit_slows_the_clock_monotonically(h100, system, run, llama7b):
    ratios = [capped_operating_point(h100, w) for w in (300.0, 400.0, 500.0, 600.0, 699.0)]
    clocks = [r[0] for r in ratios]
    volts = [r[1] for r in ratios]
    assert clocks == sorted(clocks) and volts == sorted(volts) and all(0.0 < c < 1.0 for c in clocks)
    m = MappingSpec(global_batch_size=8)
    base = run(h100, system, llama7b, m)
    capped = run(dataclasses.replace(h100, power_limit_w=500.0), system, llama7b, m)
    assert float(capped.step_time_s[0]) > float(base.step_time_s[0])
    assert float(capped.avg_power_w[0]) < float(base.avg_power_w[0])


def test_power_limit_is_validated(h100):
    with pytest.raises(SpecError) as info:
        dataclasses.replace(h100, power_limit_w=-5.0).validate()
    assert info.value.field == "power_limit_w"


def test_fp8_memory_holds_a_cast_weight_copy(h100, system, design, llama7b):
    d8 = design(h100, system, llama7b, MappingSpec(precision="fp8"))
    d16 = design(h100, system, llama7b, MappingSpec(precision="bf16"))
    layers = float(params_per_device(d8)[0] - embedding_params_per_device(d8)[0])  # no cast of the embedding, head
    w8, w16 = float(memory_breakdown(d8)["weights"][0]), float(memory_breakdown(d16)["weights"][0])
    assert w8 - w16 == pytest.approx(layers, rel=1e-12)
    assert torch.isfinite(evaluate(d8).step_time_s).all()


def test_offloaded_layers_leave_device_memory(h100, system, design, llama7b):
    from analytical.step.memory import memory_breakdown as parts

    kept = parts(design(h100, system, llama7b, MappingSpec(global_batch_size=8)))
    off = parts(design(h100, system, llama7b, MappingSpec(global_batch_size=8, offload_layers=8)))
    logits = kept["activations"] - float(parts(design(h100, system, llama7b, MappingSpec(
        global_batch_size=8, offload_layers=32)))["activations"][0])
    # 8 of 32 layers offloaded: a quarter of the layers' activations leaves (the logits stay)
    assert float(kept["activations"][0] - off["activations"][0]) == pytest.approx(0.25 * float(logits[0]), rel=1e-9)


def test_offload_copies_cost_what_the_host_link_cannot_hide(h100, system, design, llama7b):
    """An offloaded layer's activations go to host memory behind the next layer's forward pass and come back
    behind the backward (`kernels.offload_wait_s`): over a slow host link the copy outlasts the forward pass and
    the rest shows, once per offloaded layer and micro-batch; a fast link or none (0: not priced) costs nothing."""
    from analytical.step.kernels import offload_wait_s
    from analytical.step.memory import activation_bytes_per_layer

    copy_bytes = float(activation_bytes_per_layer(design(h100, system, llama7b, MappingSpec(global_batch_size=8)))[0])

    def run(link_gb_per_s: float, offload: int):
        sys_ = dataclasses.replace(system, host_link_gb_per_s=link_gb_per_s)
        return evaluate(design(h100, sys_, llama7b, MappingSpec(global_batch_size=8, offload_layers=offload)))

    kept, unpriced = run(0.0, 0), run(0.0, 8)
    assert torch.equal(kept.step_time_s, unpriced.step_time_s)
    times = [float(run(link, 8).step_time_s[0]) for link in (8.0, 16.0, 64.0, 1e6)]
    assert times[0] > times[1] > times[2] >= times[3] == pytest.approx(float(kept.step_time_s[0]), rel=1e-12)
    # at 8 GB/s: 8 layers x 8 micro-batches of each copy's exposed part, less behind the longer backward pass
    slow = run(8.0, 8)
    extra = [float(slow.time_breakdown_s[p][0] - kept.time_breakdown_s[p][0]) for p in ("forward_compute",
                                                                                       "backward_compute")]
    assert copy_bytes / 8e9 > extra[0] / 64 > extra[1] / 64 > 0
    t = lambda *v: torch.tensor(v, dtype=torch.float64)  # noqa: E731
    fwd, bwd = offload_wait_s(t(2e9, 2e9, 2e9), t(1e9, 1e9, 0.0), t(0.5, 3.0, 0.5), t(1.0, 1.0, 1.0), t(0, 0, 0))
    assert fwd.tolist() == [1.5, 0.0, 0.0] and bwd.tolist() == [1.0, 1.0, 0.0]
    # a merged forward-and-backward unit (expert-parallel overlap) hides both copies behind the pair
    fwd, bwd = offload_wait_s(t(2e9, 2e9), t(1e9, 1e9), t(0.5, 3.0), t(1.0, 1.0), t(1, 1))
    assert fwd.tolist() == [0.0, 0.0] and bwd.tolist() == [2.5, 0.0]


def test_context_parallel_ranks_shard_the_optimizer(h100, make_system, design, llama7b):
    m = dict(tp=1, pp=1, global_batch_size=8, distributed_optimizer=True)
    two = memory_breakdown(design(h100, make_system(16), llama7b, MappingSpec(dp=8, cp=2, **m)))
    sixteen = memory_breakdown(design(h100, make_system(16), llama7b, MappingSpec(dp=16, cp=1, **m)))
    assert float(two["optimizer"][0]) == pytest.approx(float(sixteen["optimizer"][0]), rel=1e-12)


def test_experts_fold_over_tensor_parallel_ranks(h100, make_system, run):
    """Megatron-Core's MoE parallel folding: etp x ep ranks hold the experts of the tp x dp x cp ranks
    of a stage; experts split over tp (etp = tp, the default) leave ep only the dp x cp ranks."""
    moe = deepseek_like(0)
    folded = run(h100, make_system(64), moe, MappingSpec(tp=2, dp=8, pp=4, ep=16, etp=1, global_batch_size=64))
    assert int(folded.reason[0]) != int(Reason.EP_INVALID)
    for mapping in (MappingSpec(tp=2, dp=8, pp=4, ep=16, global_batch_size=64),
                    MappingSpec(tp=2, dp=8, pp=4, ep=32, etp=1, global_batch_size=64)):
        assert int(run(h100, make_system(64), moe, mapping).reason[0]) == int(Reason.EP_INVALID)


def test_fsdp_combines_with_pipeline_parallelism(h100, make_system, run, llama7b):
    m = dict(tp=1, pp=2, dp=8, zero_stage=3, global_batch_size=16)
    assert int(run(h100, make_system(16), llama7b, MappingSpec(**m)).reason[0]) == int(Reason.ZERO_WITH_PIPELINE)
    assert int(run(h100, make_system(16), llama7b, MappingSpec(**m, fsdp=True)).reason[0]) != int(Reason.ZERO_WITH_PIPELINE)


def test_fsdp_under_a_pipeline_keeps_the_stage_unsharded(h100, make_system, design, llama7b):
    """FSDP2 with pipelining (torchtitan): unsharded 16-bit weights and fp32 gradients held all step,
    no per-block prefetch buffer; without a pipeline the states stay sharded over dp."""
    m = dict(tp=1, dp=8, zero_stage=3, fsdp=True, global_batch_size=64, recompute="full")
    piped = design(h100, make_system(16), llama7b, MappingSpec(pp=2, **m))
    flat = design(h100, make_system(8), llama7b, MappingSpec(pp=1, **m))
    params = float(params_per_device(piped)[0])
    parts = {k: float(v[0]) for k, v in memory_breakdown(piped).items()}
    assert parts["weights"] == pytest.approx(params * (2.0 / 8.0 + 2.0), rel=1e-12)
    assert parts["gradients"] == pytest.approx(params * 4.0, rel=1e-12)
    flat_parts = {k: float(v[0]) for k, v in memory_breakdown(flat).items()}
    assert flat_parts["weights"] == pytest.approx(float(params_per_device(flat)[0]) * 2.0 / 8.0, rel=1e-12)
    assert parts["comm_buffers"] < flat_parts["comm_buffers"]  # no gathered-block prefetch on top


def test_fsdp_under_a_pipeline_gathers_and_scatters_once_a_step(h100, make_system, run, llama7b):
    """Doubling the micro-batches leaves the data-parallel time of the held stage unchanged, where
    FSDP without a pipeline gathers and scatters every micro-batch."""
    def dp_comm(pp, gbs):
        mapping = MappingSpec(tp=1, pp=pp, dp=8, zero_stage=3, fsdp=True, global_batch_size=gbs, recompute="full")
        return float(run(h100, make_system(8 * pp), llama7b, mapping).time_breakdown_s["dp_comm"][0])

    assert dp_comm(2, 64) == pytest.approx(dp_comm(2, 128), rel=1e-12)
    assert dp_comm(1, 128) > 1.5 * dp_comm(1, 64)


def test_full_recompute_holds_one_rebuilt_layer(h100, system, design, llama7b):
    from analytical.step.memory import activation_bytes_per_layer, recompute_transient_bytes

    none = design(h100, system, llama7b, MappingSpec(global_batch_size=8, recompute="none"))
    full = design(h100, system, llama7b, MappingSpec(global_batch_size=8, recompute="full"))
    assert float(recompute_transient_bytes(none)[0]) == 0.0
    assert float(recompute_transient_bytes(full)[0]) == float(activation_bytes_per_layer(none)[0])
    kept = float(activation_bytes_per_layer(full)[0]) * 32 + float(activation_bytes_per_layer(none)[0])
    logits = float(memory_breakdown(full)["activations"][0]) - kept
    assert 0.0 < logits == pytest.approx(float(memory_breakdown(none)["activations"][0])
                                         - 32 * float(activation_bytes_per_layer(none)[0]), rel=1e-9)


def test_fp8_primary_weights_hold_only_the_fp8_copy(h100, system, design, llama7b):
    """Megatron `fp8_param_gather`: the compute weights exist only in fp8 (1 byte a parameter instead
    of a bf16 weight and its fp8 cast; the embedding and output layer keep their bf16 weights); nothing
    changes for bf16 or mxfp8 (Megatron-Core's MoE README: "except MXFP8") or under ZeRO-3 / FSDP."""
    for precision, saved in (("fp8", 2.0), ("mxfp8", 0.0), ("bf16", 0.0)):
        m = MappingSpec(precision=precision, distributed_optimizer=True)
        plain, primary = (design(h100, system, llama7b, dataclasses.replace(m, fp8_param_gather=flag))
                          for flag in (False, True))
        p = float(params_per_device(plain)[0] - embedding_params_per_device(plain)[0])
        w, w8 = (float(memory_breakdown(x)["weights"][0]) for x in (plain, primary))
        assert w - w8 == pytest.approx(saved * p, rel=1e-12)
    zero3 = MappingSpec(precision="fp8", zero_stage=3)
    a, b = (evaluate(design(h100, system, llama7b, dataclasses.replace(zero3, fp8_param_gather=f))) for f in (False, True))
    assert float(a.memory_per_device_bytes[0]) == float(b.memory_per_device_bytes[0])
    assert float(a.step_time_s[0]) == float(b.step_time_s[0])


def test_fp8_primary_weights_halve_the_distributed_optimizers_gather(h100, make_system, design, llama7b):
    """Reduce-scatter of 16-bit gradients and all-gather of the weights, serial: the gather, half of
    the exchange, moves fp8 (1 byte) instead of bf16 (2), so the exchange takes about a quarter less."""
    m = MappingSpec(precision="fp8", dp=16, global_batch_size=16, distributed_optimizer=True,
                    grad_reduce_in_fp32=False)
    plain, primary = (evaluate(design(h100, make_system(16), llama7b, dataclasses.replace(m, fp8_param_gather=f)))
                      for f in (False, True))
    before, after = (float(r.time_breakdown_s["dp_comm"][0]) for r in (plain, primary))
    assert after < before
    assert (before - after) / before == pytest.approx(0.25, abs=0.01)  # latency terms aside


def test_fsdp_float8_all_gather_moves_fp8_layer_weights(h100, make_system, design, llama7b):
    """torchtitan's FSDP2 float8 all-gather (`fp8_param_gather` under FSDP, per-tensor fp8): the layers' weights
    gather at 1 byte, the embedding and output layer at 2; the sharded weights are held as before, the two
    prefetched blocks in fp8; the step's data-parallel time shrinks. Nothing changes in bf16, mxfp8 or under
    DeepSpeed's ZeRO-3."""
    from analytical.design import memoizing
    from analytical.step.memory import gather_buffers, shard_groups, weight_groups
    from analytical.step.workload import layer_params

    dp = 16

    def built(precision="fp8", fsdp=True, gather=False):
        m = MappingSpec(precision=precision, dp=dp, global_batch_size=dp, zero_stage=3, fsdp=fsdp,
                        fp8_param_gather=gather)
        return design(h100, make_system(dp), llama7b, m)

    d = memoizing(built(gather=True))
    p, emb = float(params_per_device(d)[0]), float(embedding_params_per_device(d)[0])
    ((buffer, group, _),) = gather_buffers(d, shard_groups(d, weight_groups(d, params_per_device(d))))
    assert float(buffer[0]) == pytest.approx((p - emb) * 1.0 + emb * 2.0, rel=1e-12) and float(group[0]) == dp
    plain, fp8 = (evaluate(built(gather=g)) for g in (False, True))
    assert float(fp8.time_breakdown_s["dp_comm"][0]) < float(plain.time_breakdown_s["dp_comm"][0])
    assert torch.equal(fp8.memory_breakdown_bytes["weights"], plain.memory_breakdown_bytes["weights"])
    prefetch = float(plain.memory_breakdown_bytes["comm_buffers"][0] - fp8.memory_breakdown_bytes["comm_buffers"][0])
    dense = float(layer_params(d)[0][0])
    assert prefetch == pytest.approx(2.0 * dense * (3.0 - 1.0), rel=1e-12)  # bf16 + fp8 cast -> fp8, two blocks
    for other in (dict(precision="bf16"), dict(precision="mxfp8"), dict(fsdp=False)):
        a, b = (evaluate(built(gather=g, **other)) for g in (False, True))
        assert torch.equal(a.step_time_s, b.step_time_s) and torch.equal(a.memory_per_device_bytes,
                                                                          b.memory_per_device_bytes)
