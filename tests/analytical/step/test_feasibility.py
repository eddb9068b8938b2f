"""analytical.step.feasibility: one design per rule, each breaking exactly that rule."""

from __future__ import annotations

import pytest
import torch

from analytical import REASON_TEXT, MappingSpec, Reason, evaluate, stack_designs
from analytical.step.feasibility import mapping_reasons, peak_for_precision

# A GPT-1.3B-like model on 16 A100s (2 nodes): tp=2, pp=2, dp=4. Feasible; each case below changes
# one thing so that exactly one rule breaks.
BASE_MAPPING = dict(tp=2, pp=2, micro_batch_size=1, global_batch_size=64)


def reason_of(run, acc, system_, model, mapping) -> int:
    result = run(acc, system_, model, mapping)
    assert bool(result.feasible[0]) == (int(result.reason[0]) == 0)
    return int(result.reason[0])


def test_base_design_is_feasible(a100, make_system, small_gpt, run):
    result = run(a100, make_system(16), small_gpt, MappingSpec(**BASE_MAPPING))
    assert bool(result.feasible[0]) and int(result.reason[0]) == Reason.OK
    assert result.row(0)["reason"] == "ok"


@pytest.mark.parametrize("mapping", [dict(BASE_MAPPING, dp=2), dict(BASE_MAPPING, dp=8, global_batch_size=64)])
def test_degrees_not_devices(a100, make_system, small_gpt, run, mapping):
    assert reason_of(run, a100, make_system(16), small_gpt, MappingSpec(**mapping)) == Reason.DEGREES_NOT_DEVICES


def test_tp_not_dividing_heads(a100, make_system, make_gpt, run):
    model = make_gpt(24, 1536, 12, 51200, 2048)  # 12 heads, tp = 8
    mapping = MappingSpec(tp=8, pp=1, global_batch_size=64)
    assert reason_of(run, a100, make_system(16), model, mapping) == Reason.TP_NOT_DIVIDING_HEADS


def test_tp_not_dividing_kv_heads(a100, make_system, llama_gqa, replace, run):
    model = replace(llama_gqa, num_layers=8, num_kv_heads=2)  # 64 query heads, 2 key-value heads, tp = 4
    mapping = MappingSpec(tp=4, global_batch_size=64)
    assert reason_of(run, a100, make_system(16), model, mapping) == Reason.TP_NOT_DIVIDING_HEADS


def test_sequence_parallel_needs_tp_dividing_sequence(a100, make_system, small_gpt, replace, run):
    model = replace(small_gpt, seq_length=2050)
    ok = MappingSpec(**BASE_MAPPING)
    bad = MappingSpec(**dict(BASE_MAPPING, tp=4, pp=1, sequence_parallel=True))
    assert reason_of(run, a100, make_system(16), model, ok) == Reason.OK
    assert reason_of(run, a100, make_system(16), model, bad) == Reason.TP_NOT_DIVIDING_HEADS


@pytest.mark.parametrize("layers,vp", [(1, 2), (24, 16)])
def test_a_model_chunk_without_a_layer(a100, make_system, small_gpt, replace, run, layers, vp):
    model = replace(small_gpt, num_layers=layers)
    mapping = MappingSpec(**dict(BASE_MAPPING, vp=vp))
    assert reason_of(run, a100, make_system(16), model, mapping) == Reason.PP_NOT_DIVIDING_LAYERS


def test_uneven_stages_run_at_the_pace_of_the_fullest(a100, make_system, small_gpt, replace, run):
    # 25 layers on pp 2: the fullest stage holds 13, as a 26-layer model's stages do
    even = run(a100, make_system(16), replace(small_gpt, num_layers=26), MappingSpec(**BASE_MAPPING))
    uneven = run(a100, make_system(16), replace(small_gpt, num_layers=25), MappingSpec(**BASE_MAPPING))
    assert bool(uneven.feasible[0])
    for part in ("forward_compute", "backward_compute", "tp_comm"):
        assert float(uneven.time_breakdown_s[part][0]) == pytest.approx(float(even.time_breakdown_s[part][0]), rel=1e-9)


@pytest.mark.parametrize("mbs,gbs", [(1, 66), (3, 64)])
def test_batch_not_divisible(a100, make_system, small_gpt, run, mbs, gbs):
    mapping = MappingSpec(**dict(BASE_MAPPING, micro_batch_size=mbs, global_batch_size=gbs))
    assert reason_of(run, a100, make_system(16), small_gpt, mapping) == Reason.BATCH_NOT_DIVISIBLE


def test_cp_not_dividing_sequence(a100, make_system, small_gpt, replace, run):
    model = replace(small_gpt, seq_length=2050)  # 2 * cp = 4 does not divide 2050
    mapping = MappingSpec(**dict(BASE_MAPPING, cp=2))
    assert reason_of(run, a100, make_system(16), model, mapping) == Reason.CP_NOT_DIVIDING_SEQUENCE
    assert reason_of(run, a100, make_system(16), replace(small_gpt, seq_length=2048), mapping) == Reason.OK


# ep=16 does not divide dp x cp x tp = 8 (experts fold over those ranks); ep=4 does not divide 6 experts
@pytest.mark.parametrize("experts,ep", [(16, 16), (6, 4)])
def test_ep_invalid(a100, make_system, mixtral, replace, run, experts, ep):
    model = replace(mixtral, num_layers=4, num_experts=experts)
    mapping = MappingSpec(**dict(BASE_MAPPING, ep=ep))
    assert reason_of(run, a100, make_system(16), model, mapping) == Reason.EP_INVALID


def test_ep_on_a_dense_model(a100, make_system, small_gpt, run):
    mapping = MappingSpec(**dict(BASE_MAPPING, ep=2))
    assert reason_of(run, a100, make_system(16), small_gpt, mapping) == Reason.EP_INVALID


@pytest.mark.parametrize("mapping", [
    dict(BASE_MAPPING, tp=4, pp=1, vp=2),  # interleaving without a pipeline
    dict(BASE_MAPPING, vp=2, global_batch_size=12),  # 3 micro-batches, not a multiple of pp = 2
])
def test_vp_invalid(a100, make_system, small_gpt, run, mapping):
    assert reason_of(run, a100, make_system(16), small_gpt, MappingSpec(**mapping)) == Reason.VP_INVALID


def test_vp_valid(a100, make_system, small_gpt, run):
    mapping = MappingSpec(**dict(BASE_MAPPING, vp=2))
    assert reason_of(run, a100, make_system(16), small_gpt, mapping) == Reason.OK


@pytest.mark.parametrize("model_name,mapping", [
    ("lstm", dict(tp=2, global_batch_size=64, precision="fp32")),
    ("lstm", dict(cp=2, global_batch_size=64, precision="fp32")),
    ("gemm_model", dict(sequence_parallel=True)),
])
def test_mapping_unsupported_by_model(a100, make_system, request, run, model_name, mapping):
    model = request.getfixturevalue(model_name)
    devices = mapping.get("tp", 1) * mapping.get("cp", 1)
    assert reason_of(run, a100, make_system(devices), model, MappingSpec(**mapping)) \
        == Reason.MAPPING_UNSUPPORTED_BY_MODEL


@pytest.mark.parametrize("zero_stage,want", [(1, Reason.OK), (2, Reason.ZERO_WITH_PIPELINE),
                                             (3, Reason.ZERO_WITH_PIPELINE)])
def test_zero_with_pipeline(a100, make_system, small_gpt, run, zero_stage, want):
    mapping = MappingSpec(**dict(BASE_MAPPING, zero_stage=zero_stage))
    assert reason_of(run, a100, make_system(16), small_gpt, mapping) == want


def test_precision_unsupported(a100, h100, make_system, small_gpt, run):
    mapping = MappingSpec(**dict(BASE_MAPPING, precision="fp8"))
    assert reason_of(run, a100, make_system(16), small_gpt, mapping) == Reason.PRECISION_UNSUPPORTED
    assert reason_of(run, h100, make_system(16), small_gpt, mapping) == Reason.OK


def test_no_scale_out_link(a100, make_system, small_gpt, replace, run):
    no_nic = replace(a100, scale_out_gbit_per_s=0.0)
    mapping = MappingSpec(**BASE_MAPPING)
    assert reason_of(run, no_nic, make_system(16), small_gpt, mapping) == Reason.NO_SCALE_OUT_LINK
    # inside one scale-up domain a device needs no NIC
    assert reason_of(run, no_nic, make_system(8), small_gpt, MappingSpec(tp=2, pp=2, global_batch_size=64)) \
        == Reason.OK
    # a system-level NIC replaces the accelerator's
    with_nic = make_system(16, scale_out_gbit_per_device=200.0)
    assert reason_of(run, no_nic, with_nic, small_gpt, mapping) == Reason.OK


def test_out_of_memory(a100, make_system, gpt3, run):
    result = run(a100, make_system(8), gpt3, MappingSpec(tp=8, global_batch_size=8))
    assert int(result.reason[0]) == Reason.OUT_OF_MEMORY and not bool(result.feasible[0])
    assert float(result.memory_per_device_bytes[0]) > 80 * 2**30
    # the step time of an infeasible design is still a finite answer
    assert torch.isfinite(result.step_time_s).all()


def test_gpt3_fits_on_1024_gpus(a100, make_system, gpt3, run):
    result = run(a100, make_system(1024), gpt3, MappingSpec(tp=8, pp=16, global_batch_size=1536,
                                                             recompute="selective", sequence_parallel=True))
    assert int(result.reason[0]) == Reason.OK and bool(result.feasible[0])
    assert float(result.memory_per_device_bytes[0]) < 80 * 2**30


def test_every_reason_is_reachable_and_described(a100, make_system, small_gpt, replace, mixtral, lstm):
    """One batch holding a design for each reason: codes come out per row, in order."""
    system16 = make_system(16)
    cases = {
        Reason.OK: (a100, system16, small_gpt, MappingSpec(**BASE_MAPPING)),
        Reason.DEGREES_NOT_DEVICES: (a100, system16, small_gpt, MappingSpec(**dict(BASE_MAPPING, dp=2))),
        Reason.TP_NOT_DIVIDING_HEADS: (a100, system16, replace(small_gpt, hidden_size=1536, num_heads=12),
                                       MappingSpec(**dict(BASE_MAPPING, tp=8, pp=1))),
        Reason.PP_NOT_DIVIDING_LAYERS: (a100, system16, replace(small_gpt, num_layers=1),
                                        MappingSpec(**dict(BASE_MAPPING, vp=2))),
        Reason.BATCH_NOT_DIVISIBLE: (a100, system16, small_gpt, MappingSpec(**dict(BASE_MAPPING, global_batch_size=66))),
        Reason.CP_NOT_DIVIDING_SEQUENCE: (a100, system16, replace(small_gpt, seq_length=2050),
                                          MappingSpec(**dict(BASE_MAPPING, cp=2))),
        Reason.EP_INVALID: (a100, system16, replace(mixtral, num_layers=4, num_experts=16),
                            MappingSpec(**dict(BASE_MAPPING, ep=16))),
        Reason.VP_INVALID: (a100, system16, small_gpt, MappingSpec(**dict(BASE_MAPPING, tp=4, pp=1, vp=2))),
        Reason.MAPPING_UNSUPPORTED_BY_MODEL: (a100, make_system(2), lstm, MappingSpec(tp=2, global_batch_size=64)),
        Reason.ZERO_WITH_PIPELINE: (a100, system16, small_gpt, MappingSpec(**dict(BASE_MAPPING, zero_stage=3))),
        Reason.PRECISION_UNSUPPORTED: (a100, system16, small_gpt, MappingSpec(**dict(BASE_MAPPING, precision="fp8"))),
        Reason.NO_SCALE_OUT_LINK: (replace(a100, scale_out_gbit_per_s=0.0), system16, small_gpt,
                                   MappingSpec(**BASE_MAPPING)),
        Reason.OUT_OF_MEMORY: (a100, make_system(8), replace(small_gpt, num_layers=400),
                               MappingSpec(global_batch_size=8)),
        Reason.POWER_OVER_BUDGET: (replace(a100, tdp_w=20.0), system16, small_gpt, MappingSpec(**BASE_MAPPING)),
        Reason.FUSED_JOBS_INVALID: (a100, make_system(2), small_gpt, MappingSpec(global_batch_size=64, fused_jobs=2)),
        Reason.PARAMETER_SERVER_INVALID: (a100, make_system(2), small_gpt,
                                          MappingSpec(global_batch_size=64, dp_mode="ps_sync", ps_shards=0)),
        Reason.DP_SHARD_INVALID: (a100, system16, small_gpt,
                                  MappingSpec(**dict(BASE_MAPPING, distributed_optimizer=True, dp_shard=3))),
    }
    # chip-derivation reasons (14-19) come from analytical.chip.derive: tests/analytical/chip/test_derive.py
    chip = range(Reason.NO_COMPUTE_UNIT, Reason.NETWORK_POWER_TOO_LOW + 1)
    assert set(cases) == {r for r in Reason if r not in chip}, "a Reason without a design here: add one"
    batch = stack_designs(*map(list, zip(*cases.values())))
    result = evaluate(batch)
    assert result.reason.tolist() == [int(r) for r in cases]
    assert set(REASON_TEXT) == set(Reason)
    assert all(isinstance(text, str) and text for text in REASON_TEXT.values())
    assert torch.equal(result.feasible, result.reason == 0)


def test_first_broken_rule_wins(a100, make_system, gpt3, run):
    # breaks DEGREES_NOT_DEVICES (8 * 1 * 2 != 8), PRECISION_UNSUPPORTED and memory: the first is reported
    mapping = MappingSpec(tp=8, dp=2, global_batch_size=8, precision="fp8")
    assert reason_of(run, a100, make_system(8), gpt3, mapping) == Reason.DEGREES_NOT_DEVICES
    # memory is checked last: an unsupported precision on a model that also does not fit
    mapping = MappingSpec(tp=8, global_batch_size=8, precision="fp8")
    assert reason_of(run, a100, make_system(8), gpt3, mapping) == Reason.PRECISION_UNSUPPORTED


def test_peak_for_precision(a100, h100, system, small_gpt, design):
    for precision, a100_peak, h100_peak in (("fp32", 19.5e12, 67e12), ("tf32", 156e12, 494.7e12),
                                            ("fp16", 312e12, 989.4e12), ("bf16", 312e12, 989.4e12),
                                            ("fp8", 0.0, 1978.9e12)):
        mapping = MappingSpec(precision=precision)
        assert float(peak_for_precision(design(a100, system, small_gpt, mapping))[0]) == pytest.approx(a100_peak)
        assert float(peak_for_precision(design(h100, system, small_gpt, mapping))[0]) == pytest.approx(h100_peak)


def test_mapping_reasons_ignores_memory(a100, make_system, gpt3, design):
    d = design(a100, make_system(8), gpt3, MappingSpec(tp=8, global_batch_size=8))
    assert int(mapping_reasons(d, peak_for_precision(d))[0]) == Reason.OK


def test_gemm_and_lstm_designs_are_feasible(a100, make_system, gemm_model, lstm, run):
    assert reason_of(run, a100, make_system(1), gemm_model, MappingSpec(precision="fp16")) == Reason.OK
    assert reason_of(run, a100, make_system(8), lstm, MappingSpec(global_batch_size=64)) == Reason.OK
