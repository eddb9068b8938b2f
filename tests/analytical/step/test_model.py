"""analytical.step.model.evaluate: composition, batching, robustness and monotonicity of one training step."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from analytical import TIME_PARTS, DesignBatch, MappingSpec, Reason, evaluate, single_design, stack_designs
from analytical.codes import RECOMPUTE_CODES
from analytical.step.feasibility import peak_for_precision
from analytical.step.workload import layer_gemms, logit_gemm_flops


def check_sum(result, rel=1e-12):
    parts = result.time_breakdown_s
    assert tuple(parts) == TIME_PARTS
    total = sum(parts.values())
    assert torch.allclose(total, result.step_time_s, rtol=rel, atol=0)


def mixed_cases(a100, h100, make_system, gpt3, llama7b, mixtral, lstm, gemm_model, small_gpt):
    return [
        (a100, make_system(1024), gpt3, MappingSpec(tp=8, pp=16, global_batch_size=1536, recompute="selective",
                                                    sequence_parallel=True)),
        (a100, make_system(8), llama7b, MappingSpec(tp=8, global_batch_size=64, precision="fp16",
                                                    distributed_optimizer=True, overlap_dp_comm=True)),
        (h100, make_system(64), mixtral, MappingSpec(tp=2, pp=4, ep=8, global_batch_size=512, precision="fp8",
                                                     recompute="full", vp=2)),
        (a100, make_system(1), lstm, MappingSpec(global_batch_size=64, micro_batch_size=8, precision="fp32")),
        (h100, make_system(1), gemm_model, MappingSpec(precision="tf32")),
        (h100, make_system(32), small_gpt, MappingSpec(tp=2, cp=2, global_batch_size=256, zero_stage=3,
                                                       flash_attention=False, overlap_tp_comm=True)),
        (a100, make_system(8), gpt3, MappingSpec(tp=8, global_batch_size=8)),  # out of memory
        (a100, make_system(16), lstm, MappingSpec(tp=2, global_batch_size=64)),  # unsupported mapping
    ]


@pytest.fixture
def cases(a100, h100, make_system, gpt3, llama7b, mixtral, lstm, gemm_model, small_gpt):
    return mixed_cases(a100, h100, make_system, gpt3, llama7b, mixtral, lstm, gemm_model, small_gpt)


def test_breakdown_sums_to_step_time(cases):
    result = evaluate(stack_designs(*map(list, zip(*cases))))
    check_sum(result)
    for part, value in result.time_breakdown_s.items():
        assert torch.all(value >= 0), part
    row = result.row(0)
    assert sum(row["breakdown"].values()) == pytest.approx(row["step_time_s"], rel=1e-12)


def test_batch_of_mixed_designs_equals_each_alone(cases):
    batch = evaluate(stack_designs(*map(list, zip(*cases))))
    assert batch.step_time_s.shape == (len(cases),)
    for i, case in enumerate(cases):
        alone = evaluate(single_design(*case))
        for name in ("step_time_s", "memory_per_device_bytes", "mfu", "hfu", "tokens_per_s", "model_flops"):
            torch.testing.assert_close(getattr(batch, name)[i:i + 1], getattr(alone, name), rtol=1e-12, atol=0,
                                       msg=f"design {i}: {name}")
        assert torch.equal(batch.reason[i:i + 1], alone.reason)
        assert torch.equal(batch.feasible[i:i + 1], alone.feasible)
        for part in TIME_PARTS:
            torch.testing.assert_close(batch.time_breakdown_s[part][i:i + 1], alone.time_breakdown_s[part],
                                       rtol=1e-12, atol=0, msg=f"design {i}: {part}")
        for part, value in alone.memory_breakdown_bytes.items():
            torch.testing.assert_close(batch.memory_breakdown_bytes[part][i:i + 1], value, rtol=1e-12, atol=0)
    # the mix really is mixed: every workload kind and several reasons
    assert set(batch.reason.tolist()) >= {Reason.OK, Reason.OUT_OF_MEMORY, Reason.MAPPING_UNSUPPORTED_BY_MODEL}


def test_expand_index_and_cat_preserve_results(cases):
    batch = stack_designs(*map(list, zip(*cases)))
    full = evaluate(batch)
    repeated = evaluate(batch.index(slice(0, 1)).expand(5))
    assert torch.equal(repeated.step_time_s, full.step_time_s[:1].expand(5))
    order = torch.tensor([3, 0, 2])
    assert torch.equal(evaluate(batch.index(order)).step_time_s, full.step_time_s[order])
    rebuilt = DesignBatch.cat([batch.index(slice(0, 2)), batch.index(slice(2, None))])
    assert torch.equal(evaluate(rebuilt).step_time_s, full.step_time_s)


def _all_tensors(result):
    for name, value in vars(result).items():
        yield from ((f"{name}.{k}", v) for k, v in value.items()) if isinstance(value, dict) else [(name, value)]


def test_a_batch_with_nothing_to_differentiate_skips_autograd_and_returns_ordinary_tensors(cases):
    """Without a field that requires a gradient the evaluation runs in inference mode; what it returns, in one chunk
    or in several, is the same numbers as tensors that in-place updates and autograd accept."""
    batch = stack_designs(*map(list, zip(*cases)))
    assert not batch.tracks_grad
    with torch.inference_mode(False), torch.enable_grad():
        one, chunked = evaluate(batch), evaluate(batch, chunk_size=3)
    for (name, a), (_, b) in zip(_all_tensors(one), _all_tensors(chunked)):
        assert not a.is_inference() and not b.is_inference(), name
        assert torch.equal(a, b), name
    one.step_time_s[0] = 0.0  # an in-place update outside inference mode: refused on an inference tensor
    # the same designs with autograd recording (a field that requires a gradient) give the same numbers
    tracked = batch.replace(hbm_bw_bytes_per_s=batch.hbm_bw_bytes_per_s.clone().requires_grad_(True))
    assert tracked.tracks_grad
    graded = evaluate(tracked)
    assert graded.step_time_s.requires_grad
    assert torch.equal(graded.step_time_s.detach(), chunked.step_time_s)
    graded.step_time_s[graded.feasible].sum().backward()
    assert tracked.hbm_bw_bytes_per_s.grad is not None and bool((tracked.hbm_bw_bytes_per_s.grad <= 0).all())


def test_random_designs_are_finite(random_designs_100k):
    d = random_designs_100k
    result = evaluate(d)
    outputs = {"step_time_s": result.step_time_s, "memory": result.memory_per_device_bytes, "mfu": result.mfu,
               "hfu": result.hfu, "tokens_per_s": result.tokens_per_s, "model_flops": result.model_flops}
    outputs.update({f"time:{k}": v for k, v in result.time_breakdown_s.items()})
    outputs.update({f"memory:{k}": v for k, v in result.memory_breakdown_bytes.items()})
    for name, value in outputs.items():
        assert value.shape == (d.batch_size,), name
        assert value.dtype == torch.float64, name
        bad = ~torch.isfinite(value)
        assert not bad.any(), f"{name}: {int(bad.sum())} non-finite, e.g. design {int(bad.nonzero()[0])}"
        assert torch.all(value >= 0), name
    assert torch.all(result.step_time_s > 0)
    assert torch.all(result.memory_per_device_bytes > 0)
    check_sum(result, rel=1e-9)
    # the sample covers both answers and many reasons
    feasible = result.feasible
    # (random chips often draw more than their random budget: few of the 100k are feasible)
    assert int(feasible.sum()) > 100 and float(feasible.double().mean()) < 0.99
    assert len(set(result.reason.tolist())) >= 8
    assert torch.all((result.reason >= 0) & (result.reason <= max(Reason)))


def test_random_feasible_designs_have_mfu_below_one(random_designs_100k):
    """GEMM-kind designs are left out here; `test_gemm_mfu_does_not_depend_on_micro_batch_size` covers them."""
    d = random_designs_100k
    result = evaluate(d)
    keep = result.feasible & (d.kind < 2)
    assert int(keep.sum()) > 100
    assert torch.all(result.mfu[keep] > 0)
    assert torch.all(result.mfu[keep] < 1), float(result.mfu[keep].max())
    assert torch.all(result.hfu[keep] >= result.mfu[keep] * (1 - 1e-12))


def assert_never_slower(base, changed, what, rel=1e-12):
    worse = changed.step_time_s > base.step_time_s * (1 + rel)
    assert not worse.any(), f"{what}: {int(worse.sum())} designs got slower, e.g. {int(worse.nonzero()[0])}"


def test_doubling_hbm_bandwidth_never_increases_step_time(random_designs_20k):
    d = random_designs_20k
    base = evaluate(d)
    faster = evaluate(d.replace(hbm_bw_bytes_per_s=2 * d.hbm_bw_bytes_per_s))
    assert_never_slower(base, faster, "2x HBM bandwidth")
    assert (faster.step_time_s < base.step_time_s).float().mean() > 0.5


def test_doubling_nic_bandwidth_never_increases_step_time(random_designs_20k):
    d = random_designs_20k
    base = evaluate(d)
    faster = evaluate(d.replace(scale_out_bw_bytes_per_s=2 * d.scale_out_bw_bytes_per_s))
    assert_never_slower(base, faster, "2x NIC bandwidth")
    assert (faster.step_time_s < base.step_time_s).any()


def test_doubling_scale_up_bandwidth_never_increases_step_time(random_designs_20k):
    d = random_designs_20k
    base = evaluate(d)
    faster = evaluate(d.replace(scale_up_bw_bytes_per_s=2 * d.scale_up_bw_bytes_per_s))
    assert_never_slower(base, faster, "2x scale-up bandwidth")
    assert (faster.step_time_s < base.step_time_s).any()


def test_doubling_peak_flops_never_increases_step_time(random_designs_20k):
    d = random_designs_20k
    base = evaluate(d)
    peaks = ("peak_fp32_flops_per_s", "peak_tf32_flops_per_s", "peak_fp16_flops_per_s", "peak_bf16_flops_per_s",
             "peak_fp8_flops_per_s")
    faster = evaluate(d.replace(**{p: 2 * getattr(d, p) for p in peaks}))
    assert_never_slower(base, faster, "2x peak FLOP/s")


def test_faster_memory_and_launches_never_increase_step_time(random_designs_20k):
    d = random_designs_20k
    base = evaluate(d)
    assert_never_slower(base, evaluate(d.replace(sram_bw_bytes_per_s=2 * d.sram_bw_bytes_per_s)), "2x SRAM bandwidth")
    assert_never_slower(base, evaluate(d.replace(kernel_launch_s=0.5 * d.kernel_launch_s)), "half launch latency")
    assert_never_slower(base, evaluate(d.replace(scale_out_latency_s=0.5 * d.scale_out_latency_s,
                                                 scale_up_latency_s=0.5 * d.scale_up_latency_s)), "half link latency")


def test_more_recompute_never_reduces_time(random_designs_20k):
    """Offloaded activations' copies left unpriced (host link 0): recomputing more shrinks what an offloaded
    layer copies to the host, which may then save more than the recomputation costs."""
    d = random_designs_20k
    d = d.replace(recompute_layers=torch.zeros_like(d.tp), host_link_bw_bytes_per_s=torch.zeros_like(d.tp))
    times = [evaluate(d.replace(recompute=float(RECOMPUTE_CODES[r]))).step_time_s
             for r in ("none", "selective", "full")]
    assert torch.all(times[0] <= times[1] * (1 + 1e-12))
    assert torch.all(times[1] <= times[2] * (1 + 1e-12))
    # full recompute is strictly slower unless it hides behind exposed (ZeRO-3) communication
    assert float((times[0] < times[2]).double().mean()) > 0.9


def test_recomputing_more_layers_is_never_faster_nor_holds_more_memory(random_designs_20k):
    """`recompute_layers` (full recompute of some layers of each stage) moves between none and full (offload
    copies unpriced, as in `test_more_recompute_never_reduces_time`)."""
    d = random_designs_20k.replace(recompute=torch.full_like(random_designs_20k.tp, float(RECOMPUTE_CODES["full"])),
                                   host_link_bw_bytes_per_s=torch.zeros_like(random_designs_20k.tp))
    runs = [evaluate(d.replace(recompute_layers=torch.full_like(d.tp, float(k)))) for k in (1, 4, 16, 0)]
    for fewer, more in zip(runs, runs[1:]):
        assert torch.all(fewer.step_time_s <= more.step_time_s * (1 + 1e-12))
        assert torch.all(fewer.memory_per_device_bytes >= more.memory_per_device_bytes * (1 - 1e-12))
    none = evaluate(d.replace(recompute=torch.zeros_like(d.tp)))
    assert torch.all(none.step_time_s <= runs[0].step_time_s * (1 + 1e-12))


@pytest.mark.parametrize("flash", [True, False])
def test_recompute_order_on_gpt3(a100, make_system, gpt3, run, flash):
    times, memory = [], []
    for recompute in ("none", "selective", "full"):
        result = run(a100, make_system(1024), gpt3, MappingSpec(tp=8, pp=16, global_batch_size=1536,
                                                                 recompute=recompute, flash_attention=flash))
        times.append(float(result.step_time_s[0]))
        memory.append(float(result.memory_per_device_bytes[0]))
    assert times[0] <= times[1] < times[2]
    assert memory[0] >= memory[1] > memory[2]
    if not flash:  # selective recompute redoes the unfused attention core
        assert times[0] < times[1] and memory[0] > memory[1]


def test_overlap_never_increases_step_time(random_designs_20k):
    d = random_designs_20k
    for flag in ("overlap_dp_comm", "overlap_tp_comm", "overlap_pp_comm"):
        off = evaluate(d.replace(**{flag: 0.0}))
        on = evaluate(d.replace(**{flag: 1.0}))
        assert_never_slower(off, on, flag)
        assert (on.step_time_s < off.step_time_s).any(), flag


REALISTIC = [  # (accelerator fixture, devices, model fixture, mapping)
    ("a100", 1024, "gpt3", dict(tp=8, pp=16, global_batch_size=1536, recompute="selective", sequence_parallel=True)),
    ("a100", 1024, "gpt3", dict(tp=8, pp=8, vp=2, global_batch_size=1536, recompute="full")),
    ("a100", 8, "llama7b", dict(tp=8, global_batch_size=64)),
    ("h100", 64, "llama7b", dict(tp=1, pp=1, zero_stage=1, global_batch_size=512, micro_batch_size=1)),
    ("h100", 64, "mixtral", dict(tp=2, pp=4, ep=8, global_batch_size=512, recompute="full")),
    ("h100", 512, "llama_gqa", dict(tp=8, pp=4, global_batch_size=1024, sequence_parallel=True)),
    ("a100", 16, "small_gpt", dict(tp=2, pp=2, global_batch_size=64)),
    ("a100", 8, "lstm", dict(global_batch_size=512, micro_batch_size=64, precision="fp16")),
]


@pytest.mark.parametrize("acc,devices,model,mapping", REALISTIC)
def test_mfu_of_realistic_designs(request, make_system, run, acc, devices, model, mapping):
    result = run(request.getfixturevalue(acc), make_system(devices), request.getfixturevalue(model),
                 MappingSpec(**mapping))
    assert bool(result.feasible[0]), result.row(0)["reason"]
    mfu, hfu = float(result.mfu[0]), float(result.hfu[0])
    assert 0.0 < mfu < 1.0
    assert float(result.tokens_per_s[0]) > 0
    assert mfu <= hfu < 1.0
    recomputes = mapping.get("recompute", "none") == "full" or (
        mapping.get("recompute") == "selective" and not mapping.get("flash_attention", True))
    if recomputes:
        assert hfu > mfu
    else:  # nothing, or selective recompute under flash attention (a no-op there)
        assert hfu == mfu


def test_metrics_are_consistent(cases):
    d = stack_designs(*map(list, zip(*cases)))
    result = evaluate(d)
    peak = peak_for_precision(d)
    supported = peak > 0
    want_mfu = result.model_flops / (result.step_time_s * d.num_devices * peak)
    torch.testing.assert_close(result.mfu[supported], want_mfu[supported], rtol=1e-12, atol=0)
    torch.testing.assert_close(result.tokens_per_s, d.global_batch_size * d.seq_length / result.step_time_s,
                               rtol=1e-12, atol=0)


def test_parallel_parts_vanish_without_their_parallelism(a100, make_system, small_gpt, run):
    result = run(a100, make_system(1), small_gpt, MappingSpec(global_batch_size=8))
    parts = result.row(0)["breakdown"]
    for part in ("tp_comm", "cp_comm", "ep_comm", "pipeline_bubble", "pp_p2p", "dp_comm", "recompute"):
        assert parts[part] == 0.0, part
    assert parts["forward_compute"] > 0 and parts["backward_compute"] > parts["forward_compute"]
    assert parts["optimizer"] > 0


def test_pipeline_bubble_fraction(a100, make_system, gpt3, run):
    """Narayanan et al. 2021: bubble / ideal time = (p - 1) / (v m) for balanced stages."""
    for pp, vp, gbs in ((8, 1, 64), (8, 2, 64), (16, 1, 256)):
        result = run(a100, make_system(8 * pp), gpt3, MappingSpec(tp=8, pp=pp, vp=vp, global_batch_size=gbs))
        parts = result.row(0)["breakdown"]
        steady = sum(parts[k] for k in ("forward_compute", "backward_compute", "recompute", "tp_comm"))
        m = gbs
        want = (pp - 1) / (vp * m)
        # the last stage also runs the output layer, so the steady part is a little above the mean stage
        assert 0.9 * want <= parts["pipeline_bubble"] / steady <= want * (1 + 1e-12)


def test_more_micro_batches_shrink_the_bubble_share(a100, make_system, gpt3, run):
    shares = []
    for gbs in (16, 64, 256):
        result = run(a100, make_system(64), gpt3, MappingSpec(tp=8, pp=8, global_batch_size=gbs))
        shares.append(float(result.time_breakdown_s["pipeline_bubble"][0] / result.step_time_s[0]))
    assert shares[0] > shares[1] > shares[2]


def test_bigger_tensor_parallel_group_across_nodes_costs_more(a100, make_system, gpt3, run):
    inside = run(a100, make_system(64), gpt3, MappingSpec(tp=8, pp=8, global_batch_size=64))
    across = run(a100, make_system(64), gpt3, MappingSpec(tp=16, pp=4, global_batch_size=64))
    assert float(across.time_breakdown_s["tp_comm"][0]) > float(inside.time_breakdown_s["tp_comm"][0])


def test_h100_is_faster_than_a100(a100, h100, make_system, gpt3, run):
    mapping = MappingSpec(tp=8, pp=16, global_batch_size=1536, recompute="selective", sequence_parallel=True)
    assert float(run(h100, make_system(1024), gpt3, mapping).step_time_s[0]) < float(
        run(a100, make_system(1024), gpt3, mapping).step_time_s[0])


# ---- regressions: each of these failed on an earlier version of analytical/ ------------------------

def test_single_node_without_nic_is_finite(a100, make_system, small_gpt, replace, run):
    """A device without a scale-out NIC (`scale_out_gbit_per_s = 0`, accepted by
    `AcceleratorSpec.validate`) in a single 8-device node never sends a byte over the NIC, so it
    must train exactly as fast as the same node with a NIC (was NaN: 0 * inf in single-rank
    collectives and in the pp_p2p of pp = 1 designs)."""
    no_nic = replace(a100, scale_out_gbit_per_s=0.0).validate()
    for mapping in (MappingSpec(tp=1, global_batch_size=64), MappingSpec(tp=8, global_batch_size=64),
                    MappingSpec(tp=2, pp=2, global_batch_size=64)):
        with_nic = run(a100, make_system(8), small_gpt, mapping)
        without = run(no_nic, make_system(8), small_gpt, mapping)
        assert torch.isfinite(without.step_time_s).all(), without.row(0)["breakdown"]
        torch.testing.assert_close(without.step_time_s, with_nic.step_time_s, rtol=1e-12, atol=0)
        assert bool(without.feasible[0])


@pytest.mark.parametrize("mbs", [1, 8])
def test_gemm_model_flops_match_the_executed_gemms(a100, make_system, gemm_model, design, mbs):
    """A `gemm` model's model FLOPs are 3x (forward + dgrad + wgrad) the GEMMs the step executes, so
    its MFU stays below 1 for any micro-batch size (was 6.5 at micro_batch_size = 8: the GEMM table
    ignored the micro-batch while model FLOPs counted every sample)."""
    d = design(a100, make_system(1), gemm_model, MappingSpec(micro_batch_size=mbs, global_batch_size=16))
    result = evaluate(d)
    micro_batches = 16 / mbs
    executed_forward = float(layer_gemms(d).flops()[0]) * micro_batches
    assert float(result.model_flops[0]) == pytest.approx(3.0 * executed_forward, rel=1e-12)
    assert bool(result.feasible[0])
    assert 0.0 < float(result.mfu[0]) < 1.0, float(result.mfu[0])


def test_model_flops_match_the_executed_gemms_for_lstm(a100, make_system, lstm, design):
    d = design(a100, make_system(1), lstm, MappingSpec(micro_batch_size=8, global_batch_size=64))
    forward = (float(layer_gemms(d).flops()[0]) * 2 + float(logit_gemm_flops(d)[0])) * 8  # 2 layers, 8 micro-batches
    assert float(evaluate(d).model_flops[0]) == pytest.approx(3.0 * forward, rel=1e-12)


def test_pipeline_spanning_two_nodes_pays_the_nic(a100, make_system, replace, make_gpt, run):
    """tp=4, pp=4 on two 8-device nodes: stages 0-1 sit on node 0 (ranks 0-7), stages 2-3 on node 1
    (ranks 8-15), so the activations between stages 1 and 2 cross the scale-out network for every
    micro-batch: the pipeline point-to-point time must depend on the NIC (it did not when the link
    was chosen from the stride alone)."""
    model = make_gpt(8, 4096, 32, 32000, 2048)
    mapping = MappingSpec(tp=4, pp=4, global_batch_size=16)
    fast = run(a100, make_system(16), model, mapping)
    slow = run(replace(a100, scale_out_gbit_per_s=25.0), make_system(16), model, mapping)
    assert float(slow.time_breakdown_s["pp_p2p"][0]) > float(fast.time_breakdown_s["pp_p2p"][0])
    # a pipeline inside one node does not
    inside = MappingSpec(tp=2, pp=4, global_batch_size=16)
    assert torch.equal(run(a100, make_system(8), model, inside).time_breakdown_s["pp_p2p"],
                       run(replace(a100, scale_out_gbit_per_s=25.0), make_system(8), model, inside)
                       .time_breakdown_s["pp_p2p"])


def test_faster_compute_never_slows_a_step_with_overlapped_dp_comm(a100, make_system, small_gpt, replace, run):
    """Doubling peak FLOP/s must not make a step slower. With overlap_dp_comm and overlap_tp_comm and
    the tensor-parallel all-reduces as the bottleneck (tp=16 across two nodes), faster GEMMs leave the
    backward pass as long as before; the data-parallel reduction must still hide behind that whole
    backward pass (it hid behind backward *compute* only, so the step got ~10% slower)."""
    mapping = MappingSpec(tp=16, global_batch_size=2, overlap_dp_comm=True, overlap_tp_comm=True)
    base = run(a100, make_system(32), small_gpt, mapping)
    faster = run(replace(a100, peak_tflops_fp16=624.0, peak_tflops_bf16=624.0), make_system(32), small_gpt, mapping)
    assert bool(base.feasible[0]) and bool(faster.feasible[0])
    assert float(faster.step_time_s[0]) <= float(base.step_time_s[0]), (base.row(0)["breakdown"],
                                                                          faster.row(0)["breakdown"])


def test_faster_compute_never_slows_tp_plus_cp_with_unfused_attention(a100, make_system, make_gpt, replace, run):
    """Doubling peak FLOP/s must not make a step slower. With unfused attention, the score/value GEMMs
    must not serve as an overlap window twice (for tensor-parallel overlap and for context-parallel
    ring attention): when both are exposed, shrinking those GEMMs would expose their time twice."""
    model = make_gpt(4, 4096, 32, 32000, 16384)
    system_ = make_system(4, devices_per_node=2, scale_up_domain=2)  # tp inside a node, cp across nodes
    slow_links = replace(a100, scale_up_bw_gb_per_s=2.0, scale_out_gbit_per_s=25.0)
    mapping = MappingSpec(tp=2, cp=2, global_batch_size=1, flash_attention=False, overlap_tp_comm=True)
    base = run(slow_links, system_, model, mapping)
    faster = run(replace(slow_links, peak_tflops_fp16=624.0, peak_tflops_bf16=624.0), system_, model, mapping)
    assert bool(base.feasible[0]) and bool(faster.feasible[0])
    assert float(base.time_breakdown_s["cp_comm"][0]) > 0.0  # context-parallel exchange is exposed
    assert float(faster.step_time_s[0]) <= float(base.step_time_s[0]), (base.row(0)["breakdown"],
                                                                          faster.row(0)["breakdown"])


def test_selective_recompute_with_flash_attention_claims_no_extra_hardware_flops(a100, make_system, make_gpt, run):
    """With flash attention nothing of the attention core is stored, so selective recompute re-runs
    the cheap modules instead (norms, MLP activation: memory-bound, no FLOPs counted): a little more
    time, less memory. The hardware FLOPs, and so HFU, must then be the same; HFU can never exceed 1.

    `evaluate` adds the full (unfused, non-causal) attention square to the HFU numerator for every
    selective-recompute design (`selective * core_flops_seq`), whether or not its time is charged: on
    this long-sequence model HFU comes out at ~1.03 while MFU is ~0.81."""
    model = make_gpt(8, 1024, 8, 32000, 32768)
    none = run(a100, make_system(1), model, MappingSpec(global_batch_size=1, recompute="none"))
    selective = run(a100, make_system(1), model, MappingSpec(global_batch_size=1, recompute="selective"))
    assert bool(none.feasible[0]) and bool(selective.feasible[0])
    recompute = float(selective.time_breakdown_s["recompute"][0])
    assert 0.0 < recompute < 0.05 * float(none.step_time_s[0])
    assert float(selective.step_time_s[0]) == pytest.approx(float(none.step_time_s[0]) + recompute, rel=1e-9)
    assert float(selective.memory_per_device_bytes[0]) < float(none.memory_per_device_bytes[0])
    assert float(selective.hfu[0]) <= 1.0, float(selective.hfu[0])
    # the same hardware FLOPs: HFU x step time agrees
    assert float(selective.hfu[0] * selective.step_time_s[0]) == pytest.approx(
        float(none.hfu[0] * none.step_time_s[0]), rel=1e-12)


def test_per_op_checkpointing_recomputes_half_the_matmuls_and_the_element_wise_kernels(h100, system, run, llama7b):
    """`recompute=op` (torchtitan): more recompute time than Megatron's selective with flash
    attention, less than full; its hardware FLOPs add half of the non-attention matmuls."""
    res = {r: run(h100, system, llama7b, MappingSpec(global_batch_size=8, recompute=r, flash_attention=True))
           for r in ("selective", "op", "full")}
    recompute = {r: float(v.time_breakdown_s["recompute"][0]) for r, v in res.items()}
    assert recompute["selective"] < recompute["op"] < recompute["full"]
    extra = {r: float(v.hfu[0] - v.mfu[0]) / float(v.mfu[0]) for r, v in res.items()}
    assert extra["selective"] == 0.0  # flash attention already recomputes its core
    assert 0.3 * extra["full"] < extra["op"] < 0.5 * extra["full"]


def test_gradients_reduced_in_bf16_halve_the_data_parallel_bytes(h100, make_system, llama7b, run):
    """Megatron-Bridge's grad_reduce_in_fp32=False: the all-reduce moves 2 bytes a parameter, not 4."""
    mapping = MappingSpec(global_batch_size=64, precision="fp8")
    fp32, bf16 = (run(h100, make_system(64), llama7b, dataclasses.replace(mapping, grad_reduce_in_fp32=flag))
                  for flag in (True, False))
    ratio = bf16.row(0)["breakdown"]["dp_comm"] / fp32.row(0)["breakdown"]["dp_comm"]
    assert 0.5 <= ratio < 0.55  # bandwidth-bound: half the bytes, the same latency terms
    assert float(bf16.energy_j[0]) < float(fp32.energy_j[0])


def test_hsdp_data_parallel_time_is_its_shard_collectives_and_the_replicas_all_reduce(a100, make_system, small_gpt):
    """The distributed optimizer over dp 16 on two 8-GPU nodes as 2 replicas of 8-rank shard groups (dp_shard 8):
    the gradients' reduce-scatter and the weights' all-gather run inside each node, and the two replicas
    all-reduce one eighth of the gradients across the nodes (stride 8), once a step. Exposed as a whole
    (no overlap): the closed form from the placed collectives."""
    from analytical.step import collectives as coll
    from analytical.design import memoizing
    from analytical.step.memory import params_per_device
    from analytical.step.efficiency import DEFAULT_EFFICIENCY
    from analytical.step.model import _links

    mapping = MappingSpec(dp=16, distributed_optimizer=True, global_batch_size=32, dp_shard=8, overlap_dp_comm=False)
    d = single_design(a100, make_system(16), small_gpt, mapping)
    links = _links(memoizing(d), DEFAULT_EFFICIENCY)
    grads = params_per_device(d) * 4.0  # fp32 main gradients
    one = torch.ones(1, dtype=torch.float64)
    expected = (coll.group_all_gather_time_s(grads, 8 * one, one, d.scale_up_domain, *links)  # reduce-scatter
                + coll.group_all_gather_time_s(grads / 2.0, 8 * one, one, d.scale_up_domain, *links)  # bf16 weights
                + coll.group_all_reduce_time_s(grads / 8.0, 2 * one, 8 * one, d.scale_up_domain, *links))
    hsdp = evaluate(d)
    assert float(hsdp.time_breakdown_s["dp_comm"][0]) == pytest.approx(float(expected[0]), rel=1e-12)
    # dp_shard = dp is the plain distributed optimizer, every output identical
    plain, whole = (evaluate(single_design(a100, make_system(16), small_gpt, dataclasses.replace(mapping, dp_shard=s)))
                    for s in (0, 16))
    for name in TIME_PARTS:
        assert torch.equal(plain.time_breakdown_s[name], whole.time_breakdown_s[name]), name
    assert torch.equal(plain.energy_j, whole.energy_j) and torch.equal(plain.memory_per_device_bytes,
                                                                       whole.memory_per_device_bytes)


def test_hsdp_keeps_fsdp_gathers_inside_the_node(a100, make_system, small_gpt):
    """FSDP over dp 64 on eight nodes gathers and scatters weights across the nodes every micro-batch; with
    8-rank shard groups inside each node (dp_shard 8) those stay on NVLink and only the replicas' all-reduce
    of one eighth of the gradients crosses: less data-parallel time, for more weight and state memory and a
    longer optimizer step over the bigger shard."""
    def run(**changes):
        mapping = MappingSpec(dp=64, zero_stage=3, fsdp=True, global_batch_size=256, **changes)
        return evaluate(single_design(a100, make_system(64), small_gpt, mapping))

    plain, hsdp = run(), run(dp_shard=8)
    assert bool(plain.feasible[0]) and bool(hsdp.feasible[0])
    assert float(hsdp.time_breakdown_s["dp_comm"][0]) < float(plain.time_breakdown_s["dp_comm"][0])
    launches = 4.0 * float(single_design(a100, make_system(64), small_gpt, MappingSpec()).kernel_launch_s[0])
    hsdp_adam, plain_adam = (float(r.time_breakdown_s["optimizer"][0]) - launches for r in (hsdp, plain))
    assert hsdp_adam == pytest.approx(8.0 * plain_adam, rel=1e-9)  # Adam over 8 times the parameters
    assert float(hsdp.memory_per_device_bytes[0]) > float(plain.memory_per_device_bytes[0])


@pytest.mark.parametrize("sequence_parallel", [True, False])
def test_fp8_tensor_parallel_traffic_gathers_quantized_inputs_only_under_sequence_parallelism(
        h100, make_system, gpt3, run, sequence_parallel):
    """Transformer Engine all-gathers the fp8-quantized GEMM input and reduce-scatters the 16-bit output:
    with sequence parallelism fp8 moves (1 + 2) / (2 + 2) of bf16's tensor-parallel bytes; without it the
    pair is an all-reduce of the 16-bit output, as in bf16."""
    def tp_comm(precision):
        mapping = MappingSpec(tp=8, pp=8, global_batch_size=64, precision=precision, recompute="full",
                              sequence_parallel=sequence_parallel, overlap_tp_comm=False)
        return run(h100, make_system(512), gpt3, mapping).row(0)["breakdown"]["tp_comm"]

    ratio = tp_comm("fp8") / tp_comm("bf16")
    if sequence_parallel:
        assert 0.74 < ratio < 0.78  # 0.75 of the bytes; the collectives' fixed latency keeps it a little above
    else:
        assert ratio == pytest.approx(1.0, rel=1e-12)
