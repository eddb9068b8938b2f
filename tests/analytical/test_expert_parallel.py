"""Expert-parallel communication: the dispatcher (one copy per expert, or one per remote scale-up
domain), group-limited routing and the overlap of dispatch and combine with another micro-batch."""

from __future__ import annotations

import dataclasses

import pytest

from analytical import DEFAULT_EFFICIENCY, MappingSpec, ModelSpec, Reason, SpecError, evaluate

# DeepSeek-V3-shaped MoE, small enough to evaluate quickly: 64 experts, top 8, 8 groups
MOE = ModelSpec(name="moe", num_layers=8, hidden_size=2048, num_heads=16, ffn_hidden_size=8192, ffn_type="swiglu",
                vocab_size=32000, seq_length=4096, num_experts=64, top_k=8, moe_ffn_hidden_size=1024)
GROUPED = dataclasses.replace(MOE, moe_router_num_groups=8, moe_router_group_topk=2)


def _ep_s(run, h100, system, model, mapping) -> float:
    return float(run(h100, system, model, mapping).time_breakdown_s["ep_comm"][0])


def _mapping(**changes) -> MappingSpec:
    return MappingSpec(dp=32, ep=32, global_batch_size=256, **changes)


def test_dedup_dispatch_crossing_nodes_moves_fewer_bytes(run, h100, make_system):
    """32 ranks over 4 nodes of 8: DeepEP sends a token once per remote node (at most 4) instead of
    once per remote expert (6 of 8 on average), so its exposed EP time is lower; HybridEP is
    modelled alike."""
    system = make_system(32)
    copies = _ep_s(run, h100, system, MOE, _mapping())
    deepep = _ep_s(run, h100, system, MOE, _mapping(ep_dispatcher="deepep"))
    hybridep = _ep_s(run, h100, system, MOE, _mapping(ep_dispatcher="hybridep"))
    assert 0 < deepep < copies and deepep == hybridep


def test_dedup_dispatch_inside_one_node_is_the_all_to_all(run, h100, make_system):
    system = make_system(8)
    m = MappingSpec(dp=8, ep=8, global_batch_size=64)
    assert _ep_s(run, h100, system, MOE, m) == pytest.approx(
        _ep_s(run, h100, system, MOE, dataclasses.replace(m, ep_dispatcher="deepep")), rel=1e-12)


def test_group_limited_routing_lowers_only_the_dedup_dispatch(run, h100, make_system):
    system = make_system(64)
    m = dataclasses.replace(_mapping(), dp=64, ep=64)
    dedup = dataclasses.replace(m, ep_dispatcher="deepep")
    assert _ep_s(run, h100, system, GROUPED, dedup) < _ep_s(run, h100, system, MOE, dedup)
    assert _ep_s(run, h100, system, GROUPED, m) == _ep_s(run, h100, system, MOE, m)


@pytest.mark.parametrize("slowdown", [1.0, 1.5])
def test_overlapped_ep_comm_hides_behind_the_other_micro_batch(design, h100, make_system, slowdown):
    """Overlap exposes between (1 - 1/s) of the dispatch and all of it, and never more than serial."""
    eff = dataclasses.replace(DEFAULT_EFFICIENCY, overlap_compute_slowdown=slowdown)
    system = make_system(32)
    serial = evaluate(design(h100, system, MOE, _mapping()), eff).time_breakdown_s["ep_comm"][0]
    hidden = evaluate(design(h100, system, MOE, _mapping(overlap_ep_comm=True)), eff).time_breakdown_s["ep_comm"][0]
    assert (1.0 - 1.0 / slowdown) * float(serial) * (1 - 1e-12) <= float(hidden) < float(serial)


def test_dense_models_ignore_the_dispatcher(run, h100, system, llama7b):
    base = MappingSpec(global_batch_size=8)
    for changed in (dataclasses.replace(base, ep_dispatcher="hybridep"),
                    dataclasses.replace(base, overlap_ep_comm=True)):
        assert float(run(h100, system, llama7b, changed).step_time_s[0]) == float(
            run(h100, system, llama7b, base).step_time_s[0])


@pytest.mark.parametrize("spec, field", [
    (MappingSpec(ep_dispatcher="nccl"), "ep_dispatcher"),
    (MappingSpec(overlap_ep_comm=True, recompute="full"), "overlap_ep_comm"),
    (MappingSpec(overlap_ep_comm=1), "overlap_ep_comm"),
    (MappingSpec(etp=-1), "etp"),
    (dataclasses.replace(MOE, moe_router_num_groups=6), "moe_router_num_groups"),
    (dataclasses.replace(MOE, moe_router_num_groups=8, moe_router_group_topk=9), "moe_router_group_topk"),
    (dataclasses.replace(MOE, moe_router_group_topk=0), "moe_router_group_topk"),
])
def test_bad_expert_parallel_settings_name_the_field(spec, field):
    with pytest.raises(SpecError) as info:
        spec.validate()
    assert info.value.field == field


def test_the_search_keeps_the_dispatcher_and_drops_full_recompute_with_overlap(h100, make_system):
    """best_mappings takes the MoE stack as given: every mapping found carries the dispatcher and the
    overlap flag, none with overlap recomputes fully, and DeepEP's best is never slower than the plain
    all-to-all's on a cross-node expert group."""
    from analytical.search import SearchOptions, best_mappings

    system = make_system(64)
    opt = SearchOptions(recompute=("full", "selective"), max_micro_batch_size=2, max_vp=2)
    plain = best_mappings(h100, system, MOE, 256, top_k=5, options=opt)
    dedup = best_mappings(h100, system, MOE, 256, top_k=5, options=opt, ep_dispatcher="deepep", overlap_ep_comm=True)
    assert plain.mappings and dedup.mappings
    assert all(m.ep_dispatcher == "deepep" and m.overlap_ep_comm and m.recompute != "full" for m in dedup.mappings)
    assert all(m.ep_dispatcher == "alltoall" and not m.overlap_ep_comm for m in plain.mappings)
    assert float(dedup.result.step_time_s[0]) <= float(plain.result.step_time_s[0])
    with pytest.raises(SpecError):
        SearchOptions(ep_dispatcher="nccl").validate()
    with pytest.raises(SpecError):
        SearchOptions(recompute=("full",), overlap_ep_comm=True).validate()


# ---- data parallelism of the experts: their gradients and states live on dp x cp / ep replicas ----

def _serial_dp(**changes) -> MappingSpec:
    """Distributed optimizer, no overlap: the data-parallel breakdown is the collectives' time."""
    return MappingSpec(**{"dp": 32, "ep": 32, "global_batch_size": 256, "distributed_optimizer": True,
                          "overlap_dp_comm": False, **changes})


def test_experts_held_once_are_not_reduced(run, h100, make_system):
    """ep = dp: every expert lives on one rank only, so wider experts add no data-parallel traffic
    (Megatron-Core reduces expert gradients over the expert-data-parallel group, here of one)."""
    system = make_system(32)
    wide = dataclasses.replace(MOE, moe_ffn_hidden_size=2048)
    one, two = (run(h100, system, m, _serial_dp()) for m in (MOE, wide))
    assert float(one.time_breakdown_s["dp_comm"][0]) == pytest.approx(float(two.time_breakdown_s["dp_comm"][0]),
                                                                       rel=1e-12)
    assert float(two.memory_breakdown_bytes["weights"][0]) > float(one.memory_breakdown_bytes["weights"][0])


def test_expert_replicas_one_per_node_reduce_through_the_nic(design, h100, make_system):
    """ep 8 inside each node of 8, dp 32: each expert shard has 4 replicas, one per node, so its
    gradients are reduce-scattered and its weights gathered across the 4 nodes through each GPU's
    NIC in full ((n-1)/n of the bytes), not first inside the node as the dense weights are."""
    from analytical.design import memoizing
    from analytical.step.memory import expert_params_per_device
    from analytical.step.param_bytes import grad_bytes_per_param
    from analytical.step.model import _links

    system = make_system(32)
    wide = dataclasses.replace(MOE, moe_ffn_hidden_size=2048)
    d64, d128 = (design(h100, system, m, _serial_dp(ep=8)) for m in (MOE, wide))
    extra_params = float(expert_params_per_device(d128)[0] - expert_params_per_device(d64)[0])
    *_, out_bw, _ = _links(memoizing(d64), DEFAULT_EFFICIENCY)
    per_byte = 0.75 / float(out_bw[0])  # (n-1)/n over 4 nodes
    expected = extra_params * (float(grad_bytes_per_param(d64)[0]) + 2.0) * per_byte  # fp32 grads, bf16 weights
    dp64, dp128 = (float(evaluate(d).time_breakdown_s["dp_comm"][0]) for d in (d64, d128))
    assert dp128 - dp64 == pytest.approx(expected, rel=1e-9)


def test_distributed_optimizer_shards_expert_state_over_its_replicas(design, h100, make_system):
    """Optimizer state: dense weights over dp x cp ranks, experts over dp x cp / ep (12 bytes per
    parameter of fp32 master weights, momentum and variance)."""
    from analytical.step.memory import expert_params_per_device, params_per_device

    d = design(h100, make_system(32), MOE, _serial_dp(ep=8))
    params, expert = float(params_per_device(d)[0]), float(expert_params_per_device(d)[0])
    assert 0 < expert < params
    optimizer = float(evaluate(d).memory_breakdown_bytes["optimizer"][0])
    assert optimizer == pytest.approx(12.0 * ((params - expert) / 32 + expert / 4), rel=1e-12)


# ---- expert tensor parallelism (etp): experts split over etp ranks instead of tp ----

def _etp(**changes) -> MappingSpec:
    """tp 2 x dp 16 on 32 GPUs; ep 32 needs the experts whole on each rank (etp 1)."""
    return MappingSpec(**{"tp": 2, "dp": 16, "ep": 32, "etp": 1, "sequence_parallel": True,
                          "global_batch_size": 256, "distributed_optimizer": True, **changes})


def test_whole_experts_hold_tp_times_the_expert_weights(design, h100, make_system):
    """etp 1 against etp = tp at the same ep: each rank holds its experts whole, tp times the expert
    weights; the dense weights stay split over tp."""
    from analytical.step.memory import expert_params_per_device, params_per_device

    split = design(h100, make_system(32), MOE, _etp(ep=16, etp=0))
    whole = design(h100, make_system(32), MOE, _etp(ep=16))
    e_split, e_whole = float(expert_params_per_device(split)[0]), float(expert_params_per_device(whole)[0])
    assert e_whole == pytest.approx(2.0 * e_split, rel=1e-12)
    dense = float(params_per_device(split)[0]) - e_split
    assert float(params_per_device(whole)[0]) - e_whole == pytest.approx(dense, rel=1e-12)


def test_expert_parallelism_folds_over_tensor_parallel_ranks_only_with_whole_experts(run, h100, make_system):
    assert int(run(h100, make_system(32), MOE, _etp()).reason[0]) == 0
    assert int(run(h100, make_system(32), MOE, _etp(etp=0)).reason[0]) == int(Reason.EP_INVALID)
    assert int(run(h100, make_system(32), MOE, _etp(etp=2)).reason[0]) == int(Reason.EP_INVALID)


def test_whole_experts_drop_the_mlp_tensor_parallel_pair(run, h100, make_system):
    """With etp 1 a MoE layer's MLP has no tensor-parallel collective (its tokens stay on their
    sequence-parallel shard); only the attention's pair is left, half the tp traffic. A shared
    expert, split over tp, keeps it."""
    system = make_system(32)
    split = run(h100, system, MOE, _etp(ep=16, etp=0))
    whole = run(h100, system, MOE, _etp(ep=16))
    tp_split, tp_whole = (float(r.time_breakdown_s["tp_comm"][0]) for r in (split, whole))
    assert tp_whole == pytest.approx(tp_split / 2.0, rel=1e-12)
    shared = dataclasses.replace(MOE, num_shared_experts=1)
    assert float(run(h100, system, shared, _etp(ep=16)).time_breakdown_s["tp_comm"][0]) == pytest.approx(
        float(run(h100, system, shared, _etp(ep=16, etp=0)).time_breakdown_s["tp_comm"][0]), rel=1e-12)


def test_etp_is_ignored_by_dense_models(run, h100, make_system, llama7b):
    m = MappingSpec(tp=2, dp=4, global_batch_size=64)
    one, zero = (run(h100, make_system(8), llama7b, dataclasses.replace(m, etp=e)) for e in (1, 0))
    assert float(one.step_time_s[0]) == float(zero.step_time_s[0])
    assert float(one.memory_per_device_bytes[0]) == float(zero.memory_per_device_bytes[0])


def test_expert_group_ranks_are_etp_apart(run, h100, make_system):
    """ep 8 with etp 1 on nodes of 8: the ep group is 8 consecutive ranks (Megatron-Core's expert order
    tp-ep-dp-pp), inside one node, so its dispatch costs less than ep 8 over ranks tp = 2 apart."""
    system = make_system(32)
    whole = run(h100, system, MOE, _etp(ep=8))
    split = run(h100, system, MOE, _etp(ep=8, etp=0))
    assert float(whole.time_breakdown_s["ep_comm"][0]) < float(split.time_breakdown_s["ep_comm"][0])


# ---- token dropping: a capacity factor, padded to capacity or not ----

def test_routed_copies_under_a_capacity_factor(design, h100, make_system):
    """Balanced routing: a factor below 1 drops that share of every expert's tokens, one above keeps them all;
    padded, every expert computes its whole capacity."""
    from analytical.step.workload import routed_copies

    cases = {(0.0, False): 8.0, (0.5, False): 4.0, (1.25, False): 8.0, (0.5, True): 4.0, (1.25, True): 10.0}
    for (factor, pad), copies in cases.items():
        d = design(h100, make_system(32), MOE, _mapping(moe_capacity_factor=factor, moe_pad_to_capacity=pad))
        assert float(routed_copies(d)[0]) == copies, (factor, pad)


def test_padding_to_capacity_computes_and_sends_the_padding_but_counts_the_models_flops(design, h100, make_system):
    """Padded to 1.25 x capacity: the experts' GEMMs take 1.25 x the tokens and the all-to-all sends 1.25 x the
    bytes (its time on the same links: 1.25 x its bandwidth term), while the model's FLOPs (MFU's numerator) stay
    the dropless count; the expert activations kept for backward grow, the attention's do not."""
    from analytical.step.workload import GEMM_SLOTS, layer_gemms

    system = make_system(32)
    base, padded = (design(h100, system, MOE, _mapping(**c)) for c in
                    ({}, {"moe_capacity_factor": 1.25, "moe_pad_to_capacity": True}))
    up = GEMM_SLOTS.index("ffn_up")
    assert float(layer_gemms(padded).m[0, up]) == pytest.approx(1.25 * float(layer_gemms(base).m[0, up]), rel=1e-12)
    assert float(layer_gemms(padded).m[0, 0]) == float(layer_gemms(base).m[0, 0])  # qkv: every token once
    r_base, r_pad = evaluate(base), evaluate(padded)
    assert float(r_pad.model_flops[0]) == pytest.approx(float(r_base.model_flops[0]), rel=1e-12)
    assert float(r_pad.mfu[0]) < float(r_base.mfu[0])
    for part in ("forward_compute", "backward_compute", "ep_comm"):
        assert float(r_pad.time_breakdown_s[part][0]) > float(r_base.time_breakdown_s[part][0]), part
    acts = [float(r.memory_breakdown_bytes["activations"][0]) for r in (r_pad, r_base)]
    assert acts[0] > acts[1]
    # dropping half the tokens (no padding) halves the experts' tokens and the dispatched bytes
    half = design(h100, system, MOE, _mapping(moe_capacity_factor=0.5))
    assert float(layer_gemms(half).m[0, up]) == pytest.approx(0.5 * float(layer_gemms(base).m[0, up]), rel=1e-12)
    assert float(evaluate(half).time_breakdown_s["ep_comm"][0]) < float(r_base.time_breakdown_s["ep_comm"][0])


def test_padded_dispatch_bytes_scale_with_the_capacity_factor(design, h100, make_system):
    """The energy model's all-to-all bytes follow the padded buffers: linear in the capacity factor, the dropless
    dispatch at factor 1 (every other byte of the step unchanged)."""
    from analytical.step import energy
    from analytical.step.memory import params_per_device

    def total(factor: float) -> float:
        changes = {"moe_capacity_factor": factor, "moe_pad_to_capacity": True} if factor else {}
        d = design(h100, make_system(32), MOE, _mapping(**changes))
        return sum(float(x) for x in energy.network_bytes(d, params_per_device(d)))

    dropless, quarter, half = total(0.0), total(1.25), total(1.5)
    assert total(1.0) == pytest.approx(dropless, rel=1e-12)
    assert quarter > dropless and half - quarter == pytest.approx(quarter - dropless, rel=1e-9)


@pytest.mark.parametrize("mapping, field", [
    (MappingSpec(moe_pad_to_capacity=True), "moe_pad_to_capacity"),
    (MappingSpec(moe_capacity_factor=1.0, moe_pad_to_capacity=True, ep_dispatcher="deepep"), "moe_pad_to_capacity"),
    (MappingSpec(moe_capacity_factor=-1.0), "moe_capacity_factor"),
    (MappingSpec(moe_capacity_factor="1.25"), "moe_capacity_factor"),
])
def test_bad_capacity_settings_name_the_field(mapping, field):
    with pytest.raises(SpecError) as info:
        mapping.validate()
    assert info.value.field == field
