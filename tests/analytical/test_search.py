"""Best-mapping search: the enumeration is complete and valid, and the answer is the true optimum of it."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from analytical import AcceleratorSpec, MappingSpec, ModelSpec, SpecError, SystemSpec, evaluate, single_design
from analytical.codes import DTYPE, RECOMPUTE_CODES, Reason
from analytical.search import (MAPPING_FIELDS, SearchOptions, best_mappings, enumerate_mappings, mapping_from_batch,
                               mappings_from_batch)

# the rules a mapping can break (everything but memory, precision support and the system's links)
MAPPING_RULES = {Reason.DEGREES_NOT_DEVICES, Reason.TP_NOT_DIVIDING_HEADS, Reason.PP_NOT_DIVIDING_LAYERS,
                 Reason.BATCH_NOT_DIVISIBLE, Reason.CP_NOT_DIVIDING_SEQUENCE, Reason.EP_INVALID,
                 Reason.VP_INVALID, Reason.MAPPING_UNSUPPORTED_BY_MODEL, Reason.ZERO_WITH_PIPELINE}


def a100() -> AcceleratorSpec:
    return AcceleratorSpec(name="a100-like", peak_tflops_fp32=19.5, peak_tflops_tf32=156.0, peak_tflops_fp16=312.0,
                           peak_tflops_bf16=312.0, peak_tflops_fp8=0.0, compute_units=108, sram_mib=40.0,
                           sram_bw_tb_per_s=7.0, hbm_gib=80.0, hbm_bw_gb_per_s=2039.0, scale_up_bw_gb_per_s=300.0,
                           scale_out_gbit_per_s=200.0, kernel_launch_us=4.0, tile_m=128, tile_n=128, tdp_w=400.0)


def h100() -> AcceleratorSpec:
    return AcceleratorSpec(name="h100-like", peak_tflops_fp32=67.0, peak_tflops_tf32=494.0, peak_tflops_fp16=989.0,
                           peak_tflops_bf16=989.0, peak_tflops_fp8=1979.0, compute_units=132, sram_mib=50.0,
                           sram_bw_tb_per_s=12.0, hbm_gib=80.0, hbm_bw_gb_per_s=3350.0, scale_up_bw_gb_per_s=450.0,
                           scale_out_gbit_per_s=400.0, kernel_launch_us=3.0, tile_m=128, tile_n=256, tdp_w=700.0)


def dgx(num_devices: int) -> SystemSpec:
    return SystemSpec(name=f"dgx-{num_devices}", num_devices=num_devices, devices_per_node=8, scale_up_domain=8,
                      topology="rail-optimized")


def gpt(name: str, layers: int, hidden: int, heads: int, seq: int = 2048, vocab: int = 51200) -> ModelSpec:
    return ModelSpec(name=name, num_layers=layers, hidden_size=hidden, num_heads=heads, vocab_size=vocab,
                     seq_length=seq)


GPT_1P3B = gpt("gpt-1.3b", 24, 2048, 16)
GPT3_13B = gpt("gpt3-13b", 40, 5120, 40)
GPT3_175B = gpt("gpt3-175b", 96, 12288, 96)
MOE = ModelSpec(name="moe", num_layers=8, hidden_size=1024, num_heads=16, num_kv_heads=4, ffn_hidden_size=2816,
                ffn_type="swiglu", vocab_size=32000, seq_length=1024, num_experts=8, top_k=2)


def mapping_rows(batch) -> set[tuple]:
    table = torch.stack([getattr(batch, f) for f in MAPPING_FIELDS], dim=-1)
    return {tuple(int(v) for v in row) for row in table.round().long().tolist()}


@pytest.fixture(scope="module")
def small_case():
    """GPT 1.3B on 8 A100s (one node), global batch 64: the search and the whole evaluated space."""
    args = (a100(), dgx(8), GPT_1P3B, 64)
    found = best_mappings(*args, top_k=10)
    space = enumerate_mappings(*args)
    return args, found, space, evaluate(space)


def test_best_is_feasible_and_no_enumerated_mapping_is_faster(small_case):
    _, found, space, everything = small_case
    assert found.num_enumerated == space.batch_size > 0
    assert found.num_feasible == int(everything.feasible.sum()) > 0
    assert found.rows[0]["feasible"] and bool(found.result.feasible.all())
    feasible_times = everything.step_time_s[everything.feasible]
    assert found.rows[0]["step_time_s"] == pytest.approx(float(feasible_times.min()), rel=1e-12)
    # the top-k are exactly the k smallest feasible times
    k = found.designs.batch_size
    assert k == min(10, found.num_feasible)
    torch.testing.assert_close(found.result.step_time_s, feasible_times.sort().values[:k], rtol=1e-12, atol=0)


def test_top_k_sorted_ascending_and_consistent(small_case):
    _, found, _, _ = small_case
    times = found.result.step_time_s
    assert bool((times[1:] >= times[:-1]).all())
    assert [r["step_time_s"] for r in found.rows] == times.tolist()
    assert len(found.mappings) == len(found.rows) == found.designs.batch_size
    assert found.best == found.mappings[0] and found.best_row == found.rows[0]


def test_every_enumerated_mapping_uses_all_devices_and_breaks_no_mapping_rule(small_case):
    _, _, space, everything = small_case
    assert bool((space.tp * space.pp * space.dp * space.cp == 8).all())
    broken = {Reason(int(r)) for r in everything.reason.unique()} & MAPPING_RULES
    assert not broken, f"enumerated mappings that break {broken}"
    assert len(mapping_rows(space)) == space.batch_size  # no duplicates


def test_enumeration_is_the_whole_valid_space():
    """Brute force: every combination of the candidate values, valid ones kept by `evaluate`'s rules
    (and the dedupes: sequence parallel only with tp > 1, distributed optimizer only with ZeRO 0 and
    standing for ZeRO-1)."""
    acc, system, model, gbs = h100(), dgx(8), GPT_1P3B, 64
    divisors = [1, 2, 4, 8]
    grid = torch.cartesian_prod(*[torch.tensor(v, dtype=DTYPE) for v in (
        divisors, divisors, divisors,  # tp, pp, cp
        [1, 2, 4, 8, 16],  # micro-batch
        [1, 2, 4, 8],  # vp
        [0, 1], [0, 1, 2], [0, 1, 2, 3], [0, 1])])  # sp, recompute, zero, distributed optimizer
    tp, pp, cp, mbs, vp, sp, rc, zero, dist = grid.unbind(-1)
    template = single_design(acc, system, model, MappingSpec(global_batch_size=gbs))
    brute = template.expand(grid.shape[0]).replace(
        tp=tp, pp=pp, cp=cp, dp=8.0 / (tp * pp * cp), micro_batch_size=mbs, vp=vp, sequence_parallel=sp,
        recompute=rc, zero_stage=zero, distributed_optimizer=dist)
    reasons = evaluate(brute).reason
    valid = torch.ones_like(reasons, dtype=torch.bool)
    for code in MAPPING_RULES:
        valid &= reasons != int(code)
    valid &= ((sp == 0) | (tp > 1)) & ((dist == 0) | (zero == 0)) & (torch.remainder(8.0, tp * pp * cp) == 0)
    valid &= zero != 1  # the equivalence dedupe: ZeRO-1 is the distributed optimizer
    # the search keeps to even pipeline stages (uneven ones are valid, and not searched)
    valid &= torch.remainder(GPT_1P3B.num_layers, pp * vp) == 0
    expected = mapping_rows(brute.index(valid))
    assert mapping_rows(enumerate_mappings(acc, system, model, gbs)) == expected


def test_mapping_from_batch_round_trips(small_case):
    (acc, system, model, gbs), found, _, _ = small_case
    for i, mapping in enumerate(found.mappings):
        assert mapping == mapping_from_batch(found.designs, i)
        again = evaluate(single_design(acc, system, model, mapping))
        assert bool(again.feasible[0])
        assert float(again.step_time_s[0]) == pytest.approx(found.rows[i]["step_time_s"], rel=1e-12)
        assert mapping.tp * mapping.pp * mapping.dp * mapping.cp == 8
        assert mapping.global_batch_size == gbs and mapping.precision == "bf16" and mapping.flash_attention


def test_small_model_needs_no_model_parallelism(small_case):
    """1.3B parameters fit on one 80 GB GPU with plain data parallelism: splitting layers (pp) only adds a
    bubble, splitting GEMMs (tp) only adds all-reduces and smaller kernels."""
    (acc, system, model, gbs), found, _, _ = small_case
    best = found.best
    assert best.tp == 1 and best.pp == 1 and best.vp == 1
    pure_dp = evaluate(single_design(acc, system, model, MappingSpec(dp=8, global_batch_size=gbs)))
    assert bool(pure_dp.feasible[0])
    assert found.rows[0]["step_time_s"] <= float(pure_dp.step_time_s[0])


def test_gpt3_175b_on_1024_a100():
    found = best_mappings(a100(), dgx(1024), GPT3_175B, 1536, top_k=3)
    assert 0 < found.num_feasible <= found.num_enumerated < 100_000  # the space stays a few seconds' work
    best = found.best
    assert found.rows[0]["feasible"]
    assert best.tp * best.pp * best.dp * best.cp == 1024
    assert best.pp > 1 or best.zero_stage >= 1  # 175B x 16 bytes of state cannot be replicated on 80 GB
    assert found.designs.batch_size == 3


def test_13b_on_64_h100_and_options():
    opts = SearchOptions(max_micro_batch_size=4, max_vp=1, recompute=("selective",), zero_stages=(0, 1),
                         distributed_optimizer=False, sequence_parallel=False, context_parallel=False)
    space = enumerate_mappings(h100(), dgx(64), GPT3_13B, 1024, options=opts)
    assert space.batch_size > 0
    assert bool((space.micro_batch_size <= 4).all() & (space.vp == 1).all() & (space.recompute == 1).all())
    assert bool((space.zero_stage <= 1).all() & (space.distributed_optimizer == 0).all())
    assert bool((space.sequence_parallel == 0).all() & (space.cp == 1).all())
    assert bool((40 % space.tp == 0).all())  # tp divides the heads
    full = best_mappings(h100(), dgx(64), GPT3_13B, 1024, top_k=5)
    restricted = best_mappings(h100(), dgx(64), GPT3_13B, 1024, top_k=5, options=opts)
    assert full.num_enumerated > restricted.num_enumerated
    assert full.rows[0]["step_time_s"] <= restricted.rows[0]["step_time_s"] * (1 + 1e-12)


def test_flags_are_given_not_searched():
    found = best_mappings(a100(), dgx(8), GPT_1P3B, 64, top_k=3, flash_attention=False, overlap_dp_comm=True)
    assert all(not m.flash_attention and m.overlap_dp_comm and not m.overlap_tp_comm for m in found.mappings)


def test_moe_expert_parallel_divides_experts_and_dp():
    space = enumerate_mappings(h100(), dgx(16), MOE, 256)
    assert bool((space.ep > 1).any())
    assert bool(((8 % space.ep == 0) & (torch.remainder(space.dp, space.ep) == 0)).all())
    assert bool((4 % space.tp == 0).all())  # tp divides the 4 key-value heads


def test_whole_experts_let_expert_parallelism_fold_over_tensor_parallel_ranks():
    """With etp 1 given, ep may span the tp (and cp) ranks: etp x ep divides dp x cp x tp; every design
    found carries etp 1 and passes the feasibility rule (EP_INVALID never its reason)."""
    space = enumerate_mappings(h100(), dgx(16), MOE, 256, options=SearchOptions(etp=1))
    folded = (space.ep > 1) & (torch.remainder(space.dp, space.ep) != 0)
    assert bool(folded.any()) and bool((space.etp == 1).all())
    assert bool((torch.remainder(space.dp * space.cp * space.tp, space.ep) == 0).all())
    found = best_mappings(h100(), dgx(16), MOE, 256, top_k=50, etp=1)
    assert found.mappings and all(m.etp == 1 for m in found.mappings)
    assert int(Reason.EP_INVALID) not in evaluate(space).reason.tolist()
    with pytest.raises(SpecError) as info:
        SearchOptions(etp=-1).validate()
    assert info.value.field == "etp"


def test_dense_and_non_transformer_models_get_no_model_split():
    assert bool((enumerate_mappings(a100(), dgx(8), GPT_1P3B, 64).ep == 1).all())
    lstm = ModelSpec(name="lstm", kind="lstm", num_layers=4, hidden_size=1024, vocab_size=10000, seq_length=64)
    space = enumerate_mappings(a100(), dgx(8), lstm, 64)
    assert space.batch_size > 0
    assert bool(((space.tp == 1) & (space.cp == 1) & (space.sequence_parallel == 0)).all())


def test_no_feasible_mapping_is_an_answer():
    too_big = best_mappings(a100(), dgx(8), GPT3_175B, 8)
    assert too_big.num_enumerated > 0 and too_big.num_feasible == 0
    assert too_big.best is None and too_big.best_row is None and too_big.designs.batch_size == 0
    no_fp8 = best_mappings(a100(), dgx(8), GPT_1P3B, 64, precision="fp8")
    assert no_fp8.num_feasible == 0
    assert best_mappings(h100(), dgx(8), GPT_1P3B, 64, precision="fp8").best.precision == "fp8"
    # a single GEMM cannot be split over 8 devices for a global batch of 3: nothing to enumerate
    gemm = ModelSpec(name="gemm", kind="gemm", gemm_m=1024, gemm_n=1024, gemm_k=1024)
    empty = best_mappings(a100(), dgx(8), gemm, 3)
    assert empty.num_enumerated == 0 and empty.best is None


def test_chunked_evaluation_matches_one_call():
    args = (a100(), dgx(8), GPT_1P3B, 64)
    one = best_mappings(*args, top_k=20)
    chunked = best_mappings(*args, top_k=20, options=SearchOptions(chunk_size=97))
    assert [m for m in chunked.mappings] == [m for m in one.mappings]
    assert chunked.num_feasible == one.num_feasible


def test_bad_input_is_an_error():
    with pytest.raises(SpecError):
        best_mappings(a100(), dgx(8), GPT_1P3B, 64, top_k=0)
    with pytest.raises(SpecError):
        enumerate_mappings(a100(), dgx(8), GPT_1P3B, 64, options=SearchOptions(recompute=("sometimes",)))
    with pytest.raises(SpecError):
        enumerate_mappings(a100(), dgx(8), GPT_1P3B, 64, precision="fp4")
    assert math.isfinite(best_mappings(a100(), dgx(8), GPT_1P3B, 64, top_k=1).search_s)


def test_search_restores_the_thread_setting():
    before = torch.get_num_threads()
    best_mappings(a100(), dgx(8), GPT_1P3B, 64, top_k=1, options=SearchOptions(num_threads=2))
    assert torch.get_num_threads() == before
    best_mappings(a100(), dgx(8), GPT_1P3B, 64, top_k=1, options=SearchOptions(num_threads=None))
    assert torch.get_num_threads() == before


def test_the_software_stack_is_taken_as_given():
    """CUDA graphs, fp8 attention and fp8 primary weights come from the options into every mapping found."""
    moe = ModelSpec(name="moe-small", num_layers=8, hidden_size=2048, num_heads=16, vocab_size=32000, seq_length=2048,
                    ffn_type="swiglu", ffn_hidden_size=768, num_experts=16, top_k=2)
    eager = best_mappings(h100(), dgx(16), moe, 256, top_k=3, precision="fp8")
    stack = SearchOptions(cuda_graph="full", fp8_attention=True, fp8_param_gather=True, attention_kernel="fa2")
    graphed = best_mappings(h100(), dgx(16), moe, 256, top_k=3, precision="fp8", options=stack)
    assert all((m.cuda_graph, m.fp8_attention, m.fp8_param_gather, m.attention_kernel) == ("full", True, True, "fa2")
               for m in graphed.mappings)
    assert all(m.cuda_graph == "none" for m in eager.mappings)
    assert graphed.rows[0]["step_time_s"] < eager.rows[0]["step_time_s"]  # no host floor, no per-layer gaps
    with pytest.raises(SpecError, match="cuda_graph"):
        SearchOptions(cuda_graph="always").validate()


def test_hsdp_shard_degree_is_taken_as_given():
    """`dp_shard` comes from the options into every mapping found; data-parallel degrees it does not divide are
    infeasible (DP_SHARD_INVALID), never found; a bad value names the field."""
    space = enumerate_mappings(a100(), dgx(32), GPT_1P3B, 256, options=SearchOptions(dp_shard=8))
    reasons = evaluate(space).reason
    uneven = torch.remainder(space.dp, 8.0) != 0
    assert bool(uneven.any()) and bool((reasons[uneven] == int(Reason.DP_SHARD_INVALID)).all())
    found = best_mappings(a100(), dgx(32), GPT_1P3B, 256, top_k=5, options=SearchOptions(dp_shard=8))
    assert found.mappings and all(m.dp_shard == 8 and m.dp % 8 == 0 for m in found.mappings)
    for bad in (-1, 2.5, True):
        with pytest.raises(SpecError) as info:
            SearchOptions(dp_shard=bad).validate()
        assert info.value.field == "dp_shard"
    with pytest.raises(SpecError) as info:
        MappingSpec(dp_shard=-8).validate()
    assert info.value.field == "dp_shard"


def test_optimizer_precision_is_taken_as_given():
    """The optimizer's state dtypes come from the options into every mapping found, whose memory then holds
    bf16 moments and no master copy; a bad value names the field."""
    lean = SearchOptions(optimizer_state_dtype="bf16", master_params="none")
    found = best_mappings(a100(), dgx(32), GPT_1P3B, 256, top_k=5, options=lean)
    assert found.mappings and all(m.optimizer_state_dtype == "bf16" and m.master_params == "none"
                                  for m in found.mappings)
    default = best_mappings(a100(), dgx(32), GPT_1P3B, 256, top_k=1)
    again = dataclasses.replace(default.mappings[0], optimizer_state_dtype="bf16", master_params="none")
    assert float(evaluate(single_design(a100(), dgx(32), GPT_1P3B, again)).memory_per_device_bytes[0]) \
        < default.rows[0]["memory_per_device_bytes"]
    for name, bad in (("optimizer_state_dtype", "fp64"), ("master_params", "bf16")):
        with pytest.raises(SpecError) as info:
            dataclasses.replace(lean, **{name: bad}).validate()
        assert info.value.field == name


def test_unset_overlaps_are_each_candidates_stack_default(small_case):
    """Overlaps given as None: every enumerated mapping carries the flags `MappingSpec.overlap` gives that mapping
    left unset (the distributed optimizer's overlapped, the others not), the same rule as `evaluate`'s."""
    (acc, system, model, gbs), *_ = small_case
    unset = SearchOptions(overlap_dp_comm=None, overlap_tp_comm=None, overlap_pp_comm=None)
    batch = enumerate_mappings(acc, system, model, gbs, options=unset)
    seen = set()
    for i in range(batch.batch_size):
        mapping = dataclasses.replace(mapping_from_batch(batch, i), overlap_dp_comm=None, overlap_tp_comm=None,
                                      overlap_pp_comm=None)
        flags = tuple(mapping.overlap(k) for k in ("dp", "tp", "pp"))
        assert flags == tuple(bool(float(getattr(batch, f"overlap_{k}_comm")[i])) for k in ("dp", "tp", "pp"))
        seen.add(flags)
    assert (False, False, False) in seen and (True, True, True) in seen  # both stacks are enumerated


def test_the_batched_readers_match_the_per_design_ones(small_case):
    _, found, _, _ = small_case
    assert found.mappings == [mapping_from_batch(found.designs, i) for i in range(found.designs.batch_size)]
    assert found.mappings == mappings_from_batch(found.designs)
    assert found.rows == [found.result.row(i) for i in range(found.result.step_time_s.shape[0])]


def test_selective_recompute_is_searched_under_flash_attention():
    """Under flash attention selective recompute still re-runs the norms and the MLP activation and
    keeps less than none (analytical.step.memory): a design of its own, which the search must not
    drop (it did, and missed the fastest mapping of a co-designed chip where none ran out of memory)."""
    acc, system, model, gbs = h100(), dgx(8), GPT_1P3B, 64
    grid = enumerate_mappings(acc, system, model, gbs)
    assert bool(grid.flash_attention.all())
    assert RECOMPUTE_CODES["selective"] in grid.recompute.unique().tolist()
    template = single_design(acc, system, model, MappingSpec(global_batch_size=gbs, micro_batch_size=8))
    none, selective = (evaluate(template.replace(recompute=torch.tensor([float(RECOMPUTE_CODES[r])], dtype=DTYPE)))
                       for r in ("none", "selective"))
    assert float(selective.memory_per_device_bytes[0]) < float(none.memory_per_device_bytes[0])
