"""The host's share of a step (CUDA graphs) and fp8 attention.

Host time: every layer pass pays the framework's gaps (`Efficiency.layer_overhead_s`) and an MoE
layer's pass takes at least `Efficiency.moe_layer_host_s` (the dispatcher's host-device
synchronization, Megatron-Core MoEAlltoAllTokenDispatcher's `cuda_sync_point`, keeps the host from
running ahead); a full-iteration CUDA graph (`MappingSpec.cuda_graph` full, Megatron-Core
cuda_graph_impl "full_iteration") replays the step without the host. fp8 attention (Megatron
`fp8_dot_product_attention`): the fused attention kernel's matmuls at the fp8 peak. A FlashAttention-2
kernel (`MappingSpec.attention_kernel` fa2, PyTorch SDPA's flash backend) on a GPU newer than Ampere: its
matmuls at 0.52 of the generation's own kernel's rate (pytorch/pytorch#142132: 329 against cuDNN's 631
TFLOP/s on an H100)."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from analytical import DEFAULT_EFFICIENCY, MappingSpec, ModelSpec, SpecError, evaluate
from analytical.search import mapping_from_batch
from analytical.specs import ATTENTION_KERNELS, CUDA_GRAPHS
from analytical.step.kernels import FA2_SHARE_ON_NEWER_GPUS, attention_peak, host_wait_s
from deepflow.presets import load_preset

# Qwen3-30B-A3B's shape (Hugging Face config): 48 layers, hidden 2048, 32 heads of 128, 4 kv heads,
# 128 experts of width 768, top-8
QWEN3_30B = ModelSpec(name="qwen3-30b-a3b", num_layers=48, hidden_size=2048, num_heads=32, num_kv_heads=4,
                      head_dim=128, ffn_hidden_size=6144, ffn_type="swiglu", vocab_size=151936, seq_length=4096,
                      num_experts=128, top_k=8, moe_ffn_hidden_size=768)
DENSE = dataclasses.replace(QWEN3_30B, name="dense", num_experts=1, top_k=1, moe_ffn_hidden_size=None)
# the 26.02 Megatron-Bridge layout on 8 B200: ep 8, micro-batch 1, 512 sequences a step
EAGER = MappingSpec(ep=8, micro_batch_size=1, global_batch_size=512, precision="mxfp8", distributed_optimizer=True)
FULL = dataclasses.replace(EAGER, cuda_graph="full")


def t(*values: float) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.float64)


@pytest.fixture(scope="module")
def b200():
    return load_preset("hardware", "b200")


def test_host_wait_is_what_a_pass_falls_short_of_the_floor():
    floor = DEFAULT_EFFICIENCY.moe_layer_host_s
    fwd, bwd = t(0.2 * floor, 2.0 * floor, 0.5 * floor), t(0.7 * floor, 0.1 * floor, 0.5 * floor)
    one, zero = torch.ones(3, dtype=torch.float64), torch.zeros(3, dtype=torch.float64)
    wait_fwd, wait_bwd = host_wait_s(fwd, bwd, one, one, zero, DEFAULT_EFFICIENCY)
    assert torch.allclose(wait_fwd, t(0.8 * floor, 0.0, 0.5 * floor), rtol=1e-12)
    assert torch.allclose(wait_bwd, t(0.3 * floor, 0.9 * floor, 0.5 * floor), rtol=1e-12)
    # merged forward and backward (1F1B expert-parallel overlap): the pair waits as one, on the backward
    wait_fwd, wait_bwd = host_wait_s(fwd, bwd, one, one, one, DEFAULT_EFFICIENCY)
    assert torch.equal(wait_fwd, zero)
    assert torch.allclose(wait_bwd, t(1.1 * floor, 0.0, 1.0 * floor), rtol=1e-12)
    for moe, eager in ((zero, one), (one, zero)):  # dense layers, or graphs replaying without the host
        assert all(torch.equal(w, zero) for w in host_wait_s(fwd, bwd, moe, eager, zero, DEFAULT_EFFICIENCY))


def test_small_eager_moe_layers_take_the_hosts_time(design, b200, system):
    d = design(b200, system, QWEN3_30B, EAGER)
    eager = evaluate(d)
    passes = 512 / 8 * QWEN3_30B.num_layers  # micro-batches x layers, forward (and as many backward)
    row = eager.row(0)["breakdown"]
    # every forward and backward pass lasts at least the floor (its exposed dispatch included)
    assert row["forward_compute"] + row["backward_compute"] + row["ep_comm"] >= (
        2 * passes * DEFAULT_EFFICIENCY.moe_layer_host_s * (1 - 1e-9))
    lighter = evaluate(d, dataclasses.replace(DEFAULT_EFFICIENCY, moe_layer_host_s=0.0))
    assert float(eager.step_time_s[0]) > 1.5 * float(lighter.step_time_s[0])  # host-bound: mb 1 of a 3B-active MoE


def test_a_full_iteration_graph_removes_the_hosts_share(design, run, b200, system):
    eager, graphed = run(b200, system, QWEN3_30B, EAGER), run(b200, system, QWEN3_30B, FULL)
    off = dataclasses.replace(DEFAULT_EFFICIENCY, moe_layer_host_s=0.0, layer_overhead_s=0.0)
    assert float(graphed.step_time_s[0]) < float(eager.step_time_s[0])
    assert float(graphed.step_time_s[0]) == pytest.approx(
        float(evaluate(design(b200, system, QWEN3_30B, EAGER), off).step_time_s[0]), rel=1e-12)


def test_the_layer_gaps_are_the_dense_models_whole_difference(design, run, b200, system):
    eager, graphed = run(b200, system, DENSE, EAGER), run(b200, system, DENSE, FULL)
    passes = 512 / 8 * DENSE.num_layers
    gap = eager.row(0)["breakdown"]["forward_compute"] - graphed.row(0)["breakdown"]["forward_compute"]
    assert gap == pytest.approx(passes * DEFAULT_EFFICIENCY.layer_overhead_s, rel=1e-9)
    # a dense model never waits on the MoE floor
    off = dataclasses.replace(DEFAULT_EFFICIENCY, moe_layer_host_s=0.0)
    assert float(evaluate(design(b200, system, DENSE, EAGER), off).step_time_s[0]) == float(eager.step_time_s[0])


@pytest.mark.parametrize("graphs", ["partial", "layer"])
def test_per_layer_graphs_keep_the_hosts_share(run, b200, system, graphs):
    """Per-layer graphs leave the schedule, and per the validation rows the per-layer gaps, to the host."""
    mapping = dataclasses.replace(EAGER, cuda_graph=graphs)
    assert float(run(b200, system, QWEN3_30B, mapping).step_time_s[0]) == float(
        run(b200, system, QWEN3_30B, EAGER).step_time_s[0])


def test_fp8_attention_runs_the_attention_matmuls_at_the_fp8_peak(design, run, b200, system):
    llama = load_preset("model", "llama3-8b")
    fp8 = MappingSpec(precision="fp8", micro_batch_size=1, global_batch_size=8)
    with_fp8 = dataclasses.replace(fp8, fp8_attention=True)
    peak = torch.tensor([b200.peak_tflops_fp8 * 1e12], dtype=torch.float64)
    assert float(attention_peak(design(b200, system, llama, with_fp8), peak)[0]) == b200.peak_tflops_fp8 * 1e12
    assert float(attention_peak(design(b200, system, llama, fp8), peak)[0]) == b200.peak_tflops_bf16 * 1e12
    faster = run(b200, system, llama, with_fp8).step_time_s[0]
    assert float(faster) < float(run(b200, system, llama, fp8).step_time_s[0])
    for unaffected in (MappingSpec(precision="bf16", global_batch_size=8),
                       MappingSpec(precision="fp8", flash_attention=False, global_batch_size=8)):
        assert float(run(b200, system, llama, dataclasses.replace(unaffected, fp8_attention=True)).step_time_s[0]) \
            == float(run(b200, system, llama, unaffected).step_time_s[0])


def test_a_flash_attention_2_kernel_runs_slower_on_hopper_and_blackwell_only(design, run, b200, system):
    llama = load_preset("model", "llama3-8b")
    a100, h100 = load_preset("hardware", "a100-sxm-80gb"), load_preset("hardware", "h100-sxm-80gb")
    native = MappingSpec(precision="bf16", micro_batch_size=1, global_batch_size=8)
    fa2 = dataclasses.replace(native, attention_kernel="fa2")
    assert FA2_SHARE_ON_NEWER_GPUS == pytest.approx(329.483 / 631.338)
    for chip in (h100, b200):
        peak = torch.tensor([chip.peak_tflops_bf16 * 1e12], dtype=torch.float64)
        assert float(attention_peak(design(chip, system, llama, fa2), peak)[0]) == pytest.approx(
            FA2_SHARE_ON_NEWER_GPUS * chip.peak_tflops_bf16 * 1e12)
        slow, fast = (run(chip, system, llama, m).row(0)["breakdown"] for m in (fa2, native))
        assert slow["forward_compute"] > fast["forward_compute"] and slow["backward_compute"] > fast["backward_compute"]
    # on Ampere FlashAttention-2 is the generation's own kernel; unfused attention has no kernel to choose
    assert float(run(a100, system, llama, fa2).step_time_s[0]) == float(run(a100, system, llama, native).step_time_s[0])
    unfused = dataclasses.replace(native, flash_attention=False)
    assert float(run(h100, system, llama, dataclasses.replace(unfused, attention_kernel="fa2")).step_time_s[0]) \
        == float(run(h100, system, llama, unfused).step_time_s[0])
    # FlashAttention-2 has no fp8 path: fp8 attention falls back to its 16-bit rate
    fp8 = dataclasses.replace(fa2, precision="fp8", fp8_attention=True)
    peak = torch.tensor([h100.peak_tflops_fp8 * 1e12], dtype=torch.float64)
    assert float(attention_peak(design(h100, system, llama, fp8), peak)[0]) == pytest.approx(
        FA2_SHARE_ON_NEWER_GPUS * h100.peak_tflops_bf16 * 1e12)
    assert mapping_from_batch(design(h100, system, llama, fa2), 0).attention_kernel == "fa2"
    with pytest.raises(SpecError) as err:
        dataclasses.replace(native, attention_kernel="fa3").validate()
    assert "attention_kernel" in str(err.value) and all(name in str(err.value) for name in ATTENTION_KERNELS)


def test_mapping_from_a_batch_keeps_the_graphs_and_the_fp8_flags(design, b200, system):
    mapping = dataclasses.replace(EAGER, dp=1, cuda_graph="partial", fp8_attention=True, fp8_param_gather=True)
    back = mapping_from_batch(design(b200, system, QWEN3_30B, mapping), 0)
    assert (back.cuda_graph, back.fp8_attention, back.fp8_param_gather) == ("partial", True, True)


@pytest.mark.parametrize("field, value", [("cuda_graph", "cudagraph"), ("cuda_graph", 2), ("fp8_attention", "maybe")])
def test_bad_graph_and_fp8_attention_values_name_the_field(field, value):
    with pytest.raises(SpecError) as err:
        dataclasses.replace(EAGER, **{field: value}).validate()
    assert field in str(err.value)
    if field == "cuda_graph":
        assert all(name in str(err.value) for name in CUDA_GRAPHS)


def test_padding_to_capacity_takes_the_dispatchers_sync_and_so_the_hosts_floor_out(design, b200, system):
    """Dropping and padding to capacity (Megatron-Core `moe_pad_expert_input_to_capacity`) gives the dispatcher
    static shapes and no host-device sync: the MoE layers' host floor goes, the per-layer gaps stay. At capacity
    factor 1 under balanced routing nothing is dropped or padded, so that is the step's whole difference."""
    padded = dataclasses.replace(EAGER, moe_capacity_factor=1.0, moe_pad_to_capacity=True)
    no_floor = dataclasses.replace(DEFAULT_EFFICIENCY, moe_layer_host_s=0.0)
    eager, pad = (evaluate(design(b200, system, QWEN3_30B, m)) for m in (EAGER, padded))
    assert float(pad.step_time_s[0]) < float(eager.step_time_s[0])
    assert float(pad.step_time_s[0]) == pytest.approx(
        float(evaluate(design(b200, system, QWEN3_30B, EAGER), no_floor).step_time_s[0]), rel=1e-12)
    dropping = dataclasses.replace(EAGER, moe_capacity_factor=1.0)  # drops without padding: the sync stays
    assert float(evaluate(design(b200, system, QWEN3_30B, dropping)).step_time_s[0]) == pytest.approx(
        float(eager.step_time_s[0]), rel=1e-12)
