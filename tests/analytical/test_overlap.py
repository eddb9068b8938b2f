"""Overlapped communication slows the compute beside it; per-evaluation memoization changes no result."""

from __future__ import annotations

import dataclasses

import pytest
import torch

import analytical.step.model as step
from analytical import DEFAULT_EFFICIENCY, MappingSpec, evaluate
from analytical.design import memoizing
from analytical.step.workload import layer_params


def _dp(result) -> float:
    return float(result.time_breakdown_s["dp_comm"][0])


@pytest.mark.parametrize("slowdown", [1.0, 1.3, 1.75, 3.0])
def test_overlapped_reduction_exposes_at_least_its_slowed_share(a100, make_system, small_gpt, design, slowdown):
    """With overlap on, the exposed data-parallel reduction lies between (1 - 1/s) of it and all of
    it, and never below the perfect-overlap figure; s = 1 is perfect overlap."""
    eff = dataclasses.replace(DEFAULT_EFFICIENCY, overlap_compute_slowdown=slowdown)
    serial = MappingSpec(dp=16, global_batch_size=16, zero_stage=1)
    overlapped = dataclasses.replace(serial, overlap_dp_comm=True)
    comm = _dp(evaluate(design(a100, make_system(16), small_gpt, serial), eff))
    exposed = _dp(evaluate(design(a100, make_system(16), small_gpt, overlapped), eff))
    perfect = _dp(evaluate(design(a100, make_system(16), small_gpt, overlapped),
                           dataclasses.replace(eff, overlap_compute_slowdown=1.0)))
    assert comm > 0
    assert (1.0 - 1.0 / slowdown) * comm * (1 - 1e-12) <= exposed <= comm
    assert exposed >= perfect
    if slowdown == 1.0:
        assert exposed == perfect


def test_zero3_step_near_balance_is_slower_than_max_of_compute_and_communication(a100, make_system, gpt3, design):
    """ZeRO-3 with compute about equal to its parameter traffic (175B on 384 A100s, Narayanan et al.
    2021 Table 2): contention makes the step longer than perfect overlap would, and the extra is
    the slowed share of the communication; a communication-bound run (1536 GPUs) is unaffected."""
    contended = DEFAULT_EFFICIENCY
    assert contended.overlap_compute_slowdown > 1.0
    perfect = dataclasses.replace(contended, overlap_compute_slowdown=1.0)
    for gpus, mbs, contention_matters in ((384, 4, True), (1536, 1, False)):
        d = design(a100, make_system(gpus), gpt3,
                   MappingSpec(dp=gpus, micro_batch_size=mbs, global_batch_size=1536, zero_stage=3,
                               recompute="full"))
        slow, ideal = evaluate(d, contended), evaluate(d, perfect)
        assert float(slow.step_time_s[0]) >= float(ideal.step_time_s[0])
        assert (float(slow.step_time_s[0]) > 1.002 * float(ideal.step_time_s[0])) == contention_matters


def test_memoized_evaluation_is_identical(random_designs_20k, monkeypatch):
    """Each chunk computes its derived terms once (`memo.memoizing`); every output, breakdowns
    included, is bit-for-bit what the unmemoized evaluation gives."""
    with_memo = evaluate(random_designs_20k)
    monkeypatch.setattr(step, "memoizing", lambda d: d)
    without = evaluate(random_designs_20k)
    for name, value in vars(with_memo).items():
        other = getattr(without, name)
        pairs = value.items() if isinstance(value, dict) else [(name, value)]
        for key, tensor in pairs:
            expected = other[key] if isinstance(value, dict) else other
            assert torch.equal(tensor, expected), key


def test_memo_lives_on_a_private_copy_only(random_designs_20k):
    """A caller's batch never carries a memo, so changing its fields between calls is safe."""
    d = random_designs_20k.index(slice(0, 64))
    before = evaluate(d).step_time_s
    assert not any(k.startswith("_") for k in vars(d))
    changed = d.replace(hidden_size=2.0 * d.hidden_size)
    assert not torch.equal(evaluate(changed).step_time_s, before)
    memo_batch = memoizing(d)
    first = layer_params(memo_batch)
    assert layer_params(memo_batch) is first  # computed once on the memoizing copy
    assert layer_params(d) is not layer_params(d)  # recomputed on a plain batch


def test_sharded_optimizer_gather_hides_behind_the_forward_pass(a100, make_system, small_gpt, design):
    """With overlap and a distributed optimizer, the gradient reduce-scatter hides behind the last
    micro-batch's backward and the weight all-gather behind the first one's forward (Megatron-Core
    overlap_grad_reduce / overlap_param_gather). With 16-bit gradients the two are equal halves of
    the reduction; short sequences make it longer than the backward pass."""
    eff = dataclasses.replace(DEFAULT_EFFICIENCY, overlap_compute_slowdown=1.0)
    model = dataclasses.replace(small_gpt, seq_length=128)
    serial = MappingSpec(dp=16, global_batch_size=16, distributed_optimizer=True, grad_reduce_in_fp32=False,
                         overlap_dp_comm=False)
    comm = _dp(evaluate(design(a100, make_system(16), model, serial), eff))
    result = evaluate(design(a100, make_system(16), model, dataclasses.replace(serial, overlap_dp_comm=True)), eff)
    backward = float(result.time_breakdown_s["backward_compute"][0])
    forward = float(result.time_breakdown_s["forward_compute"][0])
    assert comm > backward  # the backward pass alone could not hide it
    assert _dp(result) == pytest.approx(max(comm / 2 - backward, 0.0) + max(comm / 2 - forward, 0.0), abs=1e-12)
    assert _dp(result) < comm - backward


@pytest.mark.parametrize("fields,expected", [
    # Megatron-Core with its distributed optimizer, as NeMo / Megatron-Bridge configure it
    ({"distributed_optimizer": True, "tp": 4, "sequence_parallel": True, "pp": 8, "vp": 6}, (True, True, True)),
    ({"distributed_optimizer": True, "tp": 4, "sequence_parallel": False, "pp": 8, "vp": 1}, (True, False, False)),
    ({"distributed_optimizer": True, "tp": 1, "pp": 1}, (True, False, False)),
    # Megatron-LM before the distributed optimizer (published_runs.csv), DeepSpeed: nothing overlaps
    ({"tp": 8, "sequence_parallel": True, "pp": 8, "vp": 2, "zero_stage": 1}, (False, False, False)),
    # PyTorch FSDP prefetches its gathers and overlaps its reduce-scatters; its DTensor TP does not overlap
    ({"fsdp": True, "zero_stage": 3, "tp": 8, "sequence_parallel": True}, (True, False, False)),
])
def test_unset_overlaps_take_the_stacks_default(fields, expected):
    mapping = MappingSpec(**fields).validate()
    assert (mapping.overlap_dp_comm, mapping.overlap_tp_comm, mapping.overlap_pp_comm) == (None, None, None)
    assert tuple(mapping.overlap(kind) for kind in ("dp", "tp", "pp")) == expected


def test_a_set_overlap_wins_over_the_stacks_default(a100, make_system, gpt3, design):
    """An explicit flag is the design; None evaluates exactly as the flag the stack's default gives."""
    stack = MappingSpec(tp=8, pp=4, dp=2, vp=2, sequence_parallel=True, distributed_optimizer=True,
                        micro_batch_size=1, global_batch_size=16)
    off = dataclasses.replace(stack, overlap_dp_comm=False, overlap_tp_comm=False, overlap_pp_comm=False)
    on = dataclasses.replace(stack, overlap_dp_comm=True, overlap_tp_comm=True, overlap_pp_comm=True)
    times = [float(evaluate(design(a100, make_system(64), gpt3, m)).step_time_s[0]) for m in (stack, off, on)]
    assert times[0] == times[2] < times[1]


def test_an_overlap_flag_names_its_allowed_values():
    with pytest.raises(ValueError, match=r"overlap_tp_comm = 2 is invalid: allowed true, false or null"):
        MappingSpec(overlap_tp_comm=2).validate()
