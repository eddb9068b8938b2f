"""Eager PyTorch ops beside the fused kernels: a clamped GLU and biased experts (gpt-oss), and a Llama
block's element-wise modules without torch.compile (torchtitan).

Megatron-Core clamps the GLU's halves and concatenates them before its fused activation
(`fused_bias_geglu.py:424-432`), and adds each expert's output bias times the routing probability in a
Python loop over the local experts (`TEGroupedMLP._apply_bias`); a fused grouped MLP
(`MappingSpec.fused_expert_mlp`) does both inside its kernels. torchtitan's eager RMSNorm, complex RoPE,
repeat_kv and SiLU-times-gate (`MappingSpec.elementwise`) move more bytes than fused kernels."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from analytical import MappingSpec, ModelSpec, SpecError, evaluate
from analytical.search import mapping_from_batch
from analytical.step.eager_ops import (BIAS_PASSES, CLAMP_PASSES, FP32_BYTES, GLU_PASSES, MEGATRON_ROPE_PASSES,
                                       NORM_PASSES, NORM_SAVED_BYTES, ROPE_PASSES, SQUARED_RELU_KERNELS,
                                       SQUARED_RELU_PASSES, eager_ops, eager_saved_bytes)
from analytical.step.memory import layer_activation_bytes
from deepflow.presets import load_preset

MAPPING = MappingSpec(ep=8, micro_batch_size=4, global_batch_size=256, distributed_optimizer=True)


@pytest.fixture(scope="module")
def oss_preset() -> ModelSpec:
    return load_preset("model", "gpt-oss-120b")


@pytest.fixture(scope="module")
def oss(oss_preset) -> ModelSpec:
    """gpt-oss with its MLP's eager ops alone (RoPE fused: no YaRN attention factor)."""
    return dataclasses.replace(oss_preset, rope_mscale=1.0)


@pytest.fixture(scope="module")
def b200():
    return load_preset("hardware", "b200")


def plain(model: ModelSpec) -> ModelSpec:
    return dataclasses.replace(model, activation_clamp=0.0, linear_bias=False)


def test_the_preset_is_clamped_and_biased_with_a_yarn_attention_factor(oss_preset):
    assert (oss_preset.activation_clamp, oss_preset.linear_bias) == (7.0, True)
    assert oss_preset.rope_mscale == pytest.approx(0.1 * math.log(32.0) + 1.0, abs=1e-4)  # YaRN factor 32


def test_bytes_and_kernels_follow_the_op_sequence(design, b200, system, oss):
    ops = eager_ops(design(b200, system, oss, MAPPING))
    tokens = MAPPING.micro_batch_size * oss.seq_length  # tp 1, cp 1; bf16 activations: 2 bytes
    up_out = 2.0 * 2.0 * tokens * oss.top_k * oss.expert_ffn_size  # gate and linear halves
    experts_out = 2.0 * tokens * oss.top_k * oss.hidden_size
    local_experts = oss.num_experts / MAPPING.ep
    assert float(ops.forward_bytes[0]) == pytest.approx(CLAMP_PASSES[0] * up_out + BIAS_PASSES[0] * experts_out)
    assert float(ops.backward_bytes[0]) == pytest.approx(CLAMP_PASSES[1] * up_out + BIAS_PASSES[1] * experts_out)
    assert float(ops.recompute_bytes[0]) == pytest.approx(CLAMP_PASSES[0] * up_out)
    assert float(ops.forward_kernels[0]) == 3.0 + 2.0 * local_experts + 1.0
    assert float(ops.backward_kernels[0]) == 3.0 + 2.0 * local_experts


def test_each_feature_alone_and_the_fused_grouped_mlp(design, b200, system, oss):
    base = eager_ops(design(b200, system, oss, MAPPING))
    clamp_only = eager_ops(design(b200, system, dataclasses.replace(oss, linear_bias=False), MAPPING))
    bias_only = eager_ops(design(b200, system, dataclasses.replace(oss, activation_clamp=0.0), MAPPING))
    total = float(clamp_only.forward_bytes[0]) + float(bias_only.forward_bytes[0])
    assert 0 < float(clamp_only.forward_bytes[0]) < total
    assert float(base.forward_bytes[0]) == pytest.approx(total)
    assert float(bias_only.recompute_bytes[0]) == 0.0  # the bias follows the activation: not recomputed
    for zero in (eager_ops(design(b200, system, plain(oss), MAPPING)),
                 eager_ops(design(b200, system, oss, dataclasses.replace(MAPPING, fused_expert_mlp=True)))):
        assert all(float(getattr(zero, f.name)[0]) == 0.0 for f in dataclasses.fields(zero))
    # biases of a dense model are fused into its GEMMs and bias-activation kernels: nothing
    dense = dataclasses.replace(oss, num_experts=1, top_k=1, activation_clamp=0.0)
    assert float(eager_ops(design(b200, system, dense, MappingSpec(global_batch_size=256))).forward_bytes[0]) == 0.0


def test_the_eager_ops_lengthen_the_step_and_add_hbm_energy(run, b200, system, oss):
    eager, without = run(b200, system, oss, MAPPING), run(b200, system, plain(oss), MAPPING)
    fused = run(b200, system, oss, dataclasses.replace(MAPPING, fused_expert_mlp=True))
    assert float(eager.step_time_s[0]) > float(without.step_time_s[0])
    assert float(fused.step_time_s[0]) == float(without.step_time_s[0])
    assert eager.row(0)["energy_breakdown"]["hbm"] > without.row(0)["energy_breakdown"]["hbm"]
    # selective recompute re-runs the clamp with the activation
    selective = dataclasses.replace(MAPPING, recompute="selective")
    assert run(b200, system, oss, selective).row(0)["breakdown"]["recompute"] > \
        run(b200, system, plain(oss), selective).row(0)["breakdown"]["recompute"]


def test_a_batch_mixing_designs_prices_each_alone(b200, system, oss):
    from analytical import stack_designs
    specs = [(oss, MAPPING), (plain(oss), MAPPING), (oss, dataclasses.replace(MAPPING, fused_expert_mlp=True))]
    batch = stack_designs([b200] * 3, [system] * 3, [m for m, _ in specs], [p for _, p in specs])
    together = evaluate(batch).step_time_s
    alone = torch.cat([evaluate(stack_designs([b200], [system], [m], [p])).step_time_s for m, p in specs])
    assert torch.allclose(together, alone, rtol=1e-12)


def test_mapping_from_a_batch_keeps_the_fused_grouped_mlp(design, b200, system, oss):
    mapping = dataclasses.replace(MAPPING, dp=1, fused_expert_mlp=True)
    assert mapping_from_batch(design(b200, system, oss, mapping), 0).fused_expert_mlp is True


@pytest.mark.parametrize("spec, field, value", [("model", "activation_clamp", -1.0), ("model", "linear_bias", 2),
                                                ("mapping", "fused_expert_mlp", "yes"),
                                                ("mapping", "elementwise", "compiled"), ("model", "rope_mscale", 0.0)])
def test_bad_values_name_the_field(oss, spec, field, value):
    target = oss if spec == "model" else MAPPING
    with pytest.raises(SpecError) as err:
        dataclasses.replace(target, **{field: value}).validate()
    assert field in str(err.value)


# --- eager element-wise modules (torchtitan's Llama block without torch.compile) ---------------------

TITAN = MappingSpec(micro_batch_size=2, global_batch_size=16, dp=8, recompute="none", fsdp=True, zero_stage=3)


@pytest.fixture(scope="module")
def llama():
    return load_preset("model", "llama3-8b")


@pytest.fixture(scope="module")
def h100():
    return load_preset("hardware", "h100-sxm-80gb")


def with_elementwise(value: str, base: MappingSpec = TITAN) -> MappingSpec:
    return dataclasses.replace(base, elementwise=value)


def passes(elements: float, pair: tuple[float, float], elem: float = 2.0) -> float:
    return elements * (pair[0] * elem + pair[1] * FP32_BYTES)


def test_eager_modules_follow_the_op_sequences(design, h100, system, llama):
    ops = eager_ops(design(h100, system, llama, with_elementwise("eager")))
    tokens = TITAN.micro_batch_size * llama.seq_length  # tp 1: every token, bf16 activations
    head = llama.hidden_size // llama.num_heads
    norms = 2.0 * tokens * llama.hidden_size  # two RMSNorms a layer
    rope = tokens * (llama.num_heads + llama.kv_heads) * head
    kv_copy = 2.0 * tokens * (llama.kv_heads + llama.num_heads) * head * 2.0  # keys and values, bf16
    glu = tokens * llama.ffn_size * 2.0
    expected_fwd = passes(norms, NORM_PASSES[0]) + passes(rope, ROPE_PASSES[0]) + kv_copy + GLU_PASSES[0] * glu
    expected_bwd = passes(norms, NORM_PASSES[1]) + passes(rope, ROPE_PASSES[1]) + kv_copy + GLU_PASSES[1] * glu
    assert float(ops.forward_bytes[0]) == pytest.approx(expected_fwd)
    assert float(ops.backward_bytes[0]) == pytest.approx(expected_bwd)
    # selective recompute re-runs the norms and the activation, not the rotary embedding or the copies
    assert float(ops.recompute_bytes[0]) == pytest.approx(passes(norms, NORM_PASSES[0]) + GLU_PASSES[0] * glu)
    # a fused RMSNorm kernel removes exactly the norms' share; fused kernels remove everything
    fused_norm = eager_ops(design(h100, system, llama, with_elementwise("eager_fused_norm")))
    assert float(fused_norm.forward_bytes[0]) == pytest.approx(expected_fwd - passes(norms, NORM_PASSES[0]))
    assert float(fused_norm.forward_kernels[0]) < float(ops.forward_kernels[0])
    fused = eager_ops(design(h100, system, llama, with_elementwise("fused")))
    assert all(float(getattr(fused, f.name)[0]) == 0.0 for f in dataclasses.fields(fused))


def test_multi_head_attention_copies_no_keys(design, h100, system, llama):
    mha = dataclasses.replace(llama, num_kv_heads=llama.num_heads)
    gqa_fwd = float(eager_ops(design(h100, system, llama, with_elementwise("eager_fused_norm"))).forward_bytes[0])
    mha_fwd = float(eager_ops(design(h100, system, mha, with_elementwise("eager_fused_norm"))).forward_bytes[0])
    tokens, head = TITAN.micro_batch_size * llama.seq_length, llama.hidden_size // llama.num_heads
    rope_more = passes(tokens * (llama.num_heads - llama.kv_heads) * head, ROPE_PASSES[0])  # more rotary keys
    kv_copy = 2.0 * tokens * (llama.kv_heads + llama.num_heads) * head * 2.0
    assert mha_fwd == pytest.approx(gqa_fwd + rope_more - kv_copy)


def test_eager_modules_lengthen_the_step_and_recompute_runs_them_again(run, h100, system, llama):
    times = {v: float(run(h100, system, llama, with_elementwise(v)).step_time_s[0])
             for v in ("fused", "eager_fused_norm", "eager")}
    assert times["fused"] < times["eager_fused_norm"] < times["eager"]
    for recompute in ("full", "op", "selective"):
        base = dataclasses.replace(TITAN, recompute=recompute)
        eager = run(h100, system, llama, with_elementwise("eager", base)).row(0)["breakdown"]["recompute"]
        assert eager > run(h100, system, llama, with_elementwise("fused", base)).row(0)["breakdown"]["recompute"]
    eager, fused = (run(h100, system, llama, with_elementwise(v)).row(0) for v in ("eager", "fused"))
    assert eager["energy_breakdown"]["hbm"] > fused["energy_breakdown"]["hbm"]
    # per-op checkpointing runs the eager forward again in the energy model too, as in the step time
    op = dataclasses.replace(TITAN, recompute="op")
    eager_op, fused_op = (run(h100, system, llama, with_elementwise(v, op)).row(0) for v in ("eager", "fused"))
    assert (eager_op["energy_breakdown"]["hbm"] - fused_op["energy_breakdown"]["hbm"]
            > eager["energy_breakdown"]["hbm"] - fused["energy_breakdown"]["hbm"])



def test_eager_modules_keep_more_for_the_backward_pass(design, h100, system, llama):
    tokens = TITAN.micro_batch_size * llama.seq_length  # tp 1, bf16 activations
    head = llama.hidden_size // llama.num_heads
    norms = NORM_SAVED_BYTES * 2.0 * tokens * llama.hidden_size
    kv_copies = 2.0 * tokens * (llama.num_heads - llama.kv_heads) * head * 2.0  # keys and values at every head
    silu_out = tokens * llama.ffn_size * 2.0
    saved, modules = eager_saved_bytes(design(h100, system, llama, with_elementwise("eager")))
    assert float(saved[0]) == pytest.approx(norms + kv_copies + silu_out)
    assert float(modules[0]) == pytest.approx(norms + silu_out)
    saved, _ = eager_saved_bytes(design(h100, system, llama, with_elementwise("eager_fused_norm")))
    assert float(saved[0]) == pytest.approx(kv_copies + silu_out)
    assert float(eager_saved_bytes(design(h100, system, llama, with_elementwise("fused")))[0][0]) == 0.0
    extra = norms + kv_copies + silu_out
    # kept by a layer that keeps its activations; rebuilt (transient) under full and per-op recompute;
    # Megatron-style selective with fused attention re-runs the norms and the activation instead
    for recompute, kept_extra, transient_extra in (("none", extra, 0.0), ("full", 0.0, extra), ("op", 0.0, extra),
                                                    ("selective", kv_copies, 0.0)):
        base = dataclasses.replace(TITAN, recompute=recompute)
        eager, fused = (layer_activation_bytes(design(h100, system, llama, with_elementwise(v, base)))
                        for v in ("eager", "fused"))
        assert float(eager[0][0] - fused[0][0]) == pytest.approx(kept_extra), recompute
        assert float(eager[1][0] - fused[1][0]) == pytest.approx(transient_extra), recompute


def test_the_saved_bytes_are_what_autograd_keeps_in_torchtitans_modules():
    """NORM_SAVED_BYTES and the activation's extra tensor, counted on the modules themselves
    (torchtitan@d4c86e375 models/norms.py RMSNorm and models/llama/model.py FeedForward.forward)."""
    tokens, hidden, ffn = 64, 256, 512
    weight = torch.nn.Parameter(torch.ones(hidden, dtype=torch.bfloat16))
    w1, w3 = (torch.randn(ffn, hidden, dtype=torch.bfloat16, requires_grad=True) for _ in range(2))
    w2 = torch.randn(hidden, ffn, dtype=torch.bfloat16, requires_grad=True)

    def rmsnorm(x):
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6)).type_as(x) * weight

    def feed_forward(x):
        return torch.nn.functional.silu(x @ w1.t()) * (x @ w3.t()) @ w2.t()

    def saved_bytes(fn, x, *exclude):
        skip = {t.untyped_storage().data_ptr() for t in (x, *exclude)}
        storages = {}

        def pack(t):
            if t.untyped_storage().data_ptr() not in skip:
                storages[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
            return t

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            fn(x)
        return sum(storages.values())

    x = torch.randn(tokens, hidden, dtype=torch.bfloat16, requires_grad=True)
    # the eager norm keeps an fp32 copy of its input and its bf16 output (6 bytes an element, rstd aside),
    # where a fused norm keeps its 2-byte input: NORM_SAVED_BYTES more
    assert saved_bytes(rmsnorm, x, weight) == pytest.approx((2.0 + NORM_SAVED_BYTES) * tokens * hidden, rel=0.01)
    # gate output, silu output, up output, product: one bf16 tensor more than the fused activation's three
    assert saved_bytes(feed_forward, x, w1, w2, w3) == 4 * 2 * tokens * ffn

def test_mapping_from_a_batch_and_a_mixed_batch_keep_the_elementwise_choice(design, h100, system, llama):
    from analytical import stack_designs
    mapping = with_elementwise("eager_fused_norm")
    assert mapping_from_batch(design(h100, system, llama, mapping), 0).elementwise == "eager_fused_norm"
    maps = [with_elementwise(v) for v in ("eager", "fused", "eager_fused_norm")]
    together = evaluate(stack_designs([h100] * 3, [system] * 3, [llama] * 3, maps)).step_time_s
    alone = torch.cat([evaluate(stack_designs([h100], [system], [llama], [m])).step_time_s for m in maps])
    assert torch.allclose(together, alone, rtol=1e-12)


def test_search_options_take_the_elementwise_choice_as_given():
    from analytical.search import STACK_FIELDS, SearchOptions
    assert "elementwise" in STACK_FIELDS and SearchOptions().elementwise == MappingSpec().elementwise == "fused"
    with pytest.raises(SpecError) as err:
        SearchOptions(elementwise="compiled").validate()
    assert "elementwise" in str(err.value) and "eager_fused_norm" in str(err.value)


# --- Megatron-Core's unfused RoPE under YaRN (gpt-oss) --------------------------------------------------


def test_a_yarn_attention_factor_runs_megatron_rope_unfused(design, b200, system, oss, oss_preset):
    fused = eager_ops(design(b200, system, oss, MAPPING))
    unfused = eager_ops(design(b200, system, oss_preset, MAPPING))
    tokens = MAPPING.micro_batch_size * oss.seq_length  # tp 1; 64 query and 8 key heads of 64
    rotary = tokens * (oss.num_heads + oss.kv_heads) * oss.head_dim * 2.0  # bf16 bytes
    assert float(unfused.forward_bytes[0] - fused.forward_bytes[0]) == pytest.approx(MEGATRON_ROPE_PASSES[0] * rotary)
    assert float(unfused.backward_bytes[0] - fused.backward_bytes[0]) == pytest.approx(MEGATRON_ROPE_PASSES[1] * rotary)
    assert float(unfused.recompute_bytes[0]) == float(fused.recompute_bytes[0])  # attention inputs: not recomputed
    # under torchtitan's eager modules its own complex RoPE is priced instead, not both
    eager = dataclasses.replace(MAPPING, elementwise="eager")
    assert float(eager_ops(design(b200, system, oss_preset, eager)).forward_bytes[0]) == pytest.approx(
        float(eager_ops(design(b200, system, oss, eager)).forward_bytes[0]))


def test_latent_attention_rotates_its_rotary_part_only(design, b200, system):
    from analytical.step.eager_ops import rotary_elements
    dsv3 = load_preset("model", "deepseek-v3")
    mapping = MappingSpec(ep=8, micro_batch_size=1, global_batch_size=256)
    tokens = dsv3.seq_length  # one sequence, tp 1
    expected = tokens * (dsv3.num_heads + 1) * dsv3.qk_rope_head_dim
    assert float(rotary_elements(design(b200, system, dsv3, mapping))[0]) == pytest.approx(expected)
    assert dsv3.rope_mscale == 1.0  # its YaRN factors cancel (mscale = mscale_all_dim): TE's fused RoPE


@pytest.fixture(scope="module")
def nemotron():
    return load_preset("model", "nemotron4-15b")


def test_an_eager_squared_relu_costs_its_op_sequence(design, run, h100, system, nemotron):
    """NeMo 2.x's eager `torch.pow(relu(x), 2)` beside fused norms and rotary embedding (`eager_activation`):
    2 passes over the up-projection's output forward and 6 backward beyond a fused kernel, and nothing else;
    selective recompute runs its forward share again; it keeps nothing more for the backward pass."""
    megatron = MappingSpec(tp=2, sequence_parallel=True, micro_batch_size=2, global_batch_size=16, dp=8)
    ops = eager_ops(design(h100, system, nemotron, with_elementwise("eager_activation", megatron)))
    up_out = megatron.micro_batch_size * nemotron.seq_length * nemotron.ffn_hidden_size / megatron.tp * 2.0  # bf16
    assert float(ops.forward_bytes[0]) == pytest.approx(SQUARED_RELU_PASSES[0] * up_out)
    assert float(ops.backward_bytes[0]) == pytest.approx(SQUARED_RELU_PASSES[1] * up_out)
    assert (float(ops.forward_kernels[0]), float(ops.backward_kernels[0])) == SQUARED_RELU_KERNELS
    assert float(ops.recompute_bytes[0]) == pytest.approx(SQUARED_RELU_PASSES[0] * up_out)
    saved, modules = eager_saved_bytes(design(h100, system, nemotron, with_elementwise("eager_activation", megatron)))
    assert float(saved[0]) == 0.0 and float(modules[0]) == 0.0
    # a gated activation under the same mode costs as torchtitan's; a fused one nothing
    llama_ops = eager_ops(design(h100, system, load_preset("model", "llama3-8b"),
                                 with_elementwise("eager_activation", megatron)))
    glu = megatron.micro_batch_size * 8192 * 14336 / megatron.tp * 2.0  # Llama 3 8B: seq 8192, ffn 14336
    assert float(llama_ops.forward_bytes[0]) == pytest.approx(GLU_PASSES[0] * glu)
    fused = eager_ops(design(h100, system, nemotron, with_elementwise("fused", megatron)))
    assert all(float(getattr(fused, f.name)[0]) == 0.0 for f in dataclasses.fields(fused))
    slow, fast = (float(run(h100, system, nemotron, with_elementwise(v, megatron)).step_time_s[0])
                  for v in ("eager_activation", "fused"))
    assert slow > fast


DTENSOR_TP = MappingSpec(tp=8, dp=1, micro_batch_size=2, global_batch_size=16, sequence_parallel=True,
                         recompute="none", sp_keeps_gathered_input=True)


def test_dtensor_sequence_parallel_copies_what_it_gathers_and_scatters(design, h100, system, llama):
    """DTensor's batch-first collectives along the sequence copy the whole tensor after each all-gather and before
    each reduce-scatter (a read and a write; fp8 gathers under float8); async TP copies the local shard and the
    scatter GEMMs' 1/tp-wide inputs; nothing without the flag, without sequence parallelism or at tp 1."""
    tokens, h, ffn = DTENSOR_TP.micro_batch_size * llama.seq_length, llama.hidden_size, llama.ffn_size
    ops = eager_ops(design(h100, system, llama, DTENSOR_TP))
    assert float(ops.forward_bytes[0]) == pytest.approx(4.0 * tokens * h * (2.0 + 2.0))
    assert float(ops.backward_bytes[0]) == pytest.approx(4.0 * tokens * h * 4.0)
    assert float(ops.forward_kernels[0]) == float(ops.backward_kernels[0]) == 4.0
    fp8 = eager_ops(design(h100, system, llama, dataclasses.replace(DTENSOR_TP, precision="fp8")))
    assert float(fp8.forward_bytes[0]) == pytest.approx(4.0 * tokens * h * (1.0 + 2.0))
    assert float(fp8.backward_bytes[0]) == pytest.approx(float(ops.backward_bytes[0]))
    fused = eager_ops(design(h100, system, llama, dataclasses.replace(DTENSOR_TP, overlap_tp_comm=True)))
    shard, scatter_inputs = 4.0 * tokens * h / 8, 2.0 * tokens * (h + ffn) / 8
    assert float(fused.forward_bytes[0]) == pytest.approx((shard + scatter_inputs) * 2.0)
    assert float(fused.forward_bytes[0]) < float(ops.forward_bytes[0]) / 3.0
    for off in (dict(sp_keeps_gathered_input=False), dict(sequence_parallel=False), dict(tp=1, dp=8)):
        none = eager_ops(design(h100, system, llama, dataclasses.replace(DTENSOR_TP, **off)))
        assert float(none.forward_bytes[0]) == float(none.backward_bytes[0]) == 0.0, off


def test_dtensor_copies_lengthen_the_step_full_recompute_copies_again(run, h100, system, llama):
    """The copies are memory-bound kernels of the layer's passes: a longer step and more HBM energy than Megatron's
    sequence-first layout, and full recompute runs the forward's copies again."""
    megatron = dataclasses.replace(DTENSOR_TP, sp_keeps_gathered_input=False)
    dtensor, plain = (run(h100, system, llama, m).row(0) for m in (DTENSOR_TP, megatron))
    assert dtensor["step_time_s"] > plain["step_time_s"]
    assert dtensor["energy_breakdown"]["hbm"] > plain["energy_breakdown"]["hbm"]
    full = [run(h100, system, llama, dataclasses.replace(m, recompute="full")).row(0)["breakdown"]["recompute"]
            for m in (DTENSOR_TP, megatron)]
    assert full[0] > full[1]
