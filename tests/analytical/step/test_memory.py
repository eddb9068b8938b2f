"""analytical.step.memory: bytes per parameter (ZeRO, Rajbhandari et al. 2020), sharding, activations per layer
(Korthikanti et al. 2022) and in flight."""

from __future__ import annotations

import pytest
import torch

from analytical import MappingSpec, ModelSpec, evaluate
from analytical.specs import SpecError
from analytical.step.memory import (
    MEMORY_PARTS,
    RUNTIME_RESERVE_BYTES,
    activation_bytes_per_layer,
    dp_collective_counts,
    embedding_params_per_device,
    in_flight_micro_batches,
    memory_breakdown,
    params_per_device,
    recompute_transient_bytes,
)
from analytical.step.param_bytes import adam_step_bytes_per_param
from analytical.step.workload import total_params


def test_parts_sum_to_the_total(a100, make_system, design, gpt3, mixtral, lstm, gemm_model):
    for model, mapping in ((gpt3, MappingSpec(tp=8, pp=16, global_batch_size=1536, zero_stage=1)),
                           (mixtral, MappingSpec(tp=2, ep=4, global_batch_size=256)),
                           (lstm, MappingSpec(global_batch_size=64, precision="fp32")),
                           (gemm_model, MappingSpec(precision="tf32"))):
        d = design(a100, make_system(1024), model, mapping)
        result = evaluate(d)
        parts = result.memory_breakdown_bytes
        assert tuple(parts) == MEMORY_PARTS
        assert torch.allclose(sum(parts.values()), result.memory_per_device_bytes, rtol=1e-12, atol=0)
        assert all(float(v[0]) >= 0 for v in parts.values())
        assert float(parts["runtime_reserve"][0]) == RUNTIME_RESERVE_BYTES


@pytest.mark.parametrize("model_name", ["gpt3", "llama7b", "mixtral"])
def test_one_device_holds_every_parameter(a100, system, design, request, model_name):
    d = design(a100, system, request.getfixturevalue(model_name), MappingSpec())
    assert float(params_per_device(d)[0]) == pytest.approx(float(total_params(d)[0]), rel=1e-12)


@pytest.mark.parametrize("tp", [2, 8])
def test_tensor_parallel_splits_parameters(a100, system, design, gpt3, tp):
    d = design(a100, system, gpt3, MappingSpec(tp=tp))
    assert float(params_per_device(d)[0]) == pytest.approx(float(total_params(d)[0]) / tp, rel=1e-12)


def test_expert_parallel_splits_only_experts(a100, make_system, design, mixtral):
    one = float(params_per_device(design(a100, make_system(8), mixtral, MappingSpec(ep=1)))[0])
    eight = float(params_per_device(design(a100, make_system(8), mixtral, MappingSpec(ep=8)))[0])
    expert_params = 32 * 8 * 3 * 4096 * 14336
    assert one - eight == pytest.approx(expert_params * (1 - 1 / 8), rel=1e-12)


def test_pipeline_stage_holds_its_layers_and_an_embedding(a100, make_system, design, gpt3):
    d = design(a100, make_system(1024), gpt3, MappingSpec(tp=8, pp=16))
    L, h, V, s = 96, 12288, 51200, 2048
    layer = 12 * h * h + 13 * h
    want = (L / 16 * layer + (V + s) * h) / 8
    assert float(params_per_device(d)[0]) == pytest.approx(want, rel=1e-12)


@pytest.mark.parametrize("precision,weights,grads,optimizer", [
    ("bf16", 2, 4, 12),  # Megatron: bf16 weights, fp32 main grads, fp32 master + Adam moments
    ("fp16", 2, 2, 12),  # ZeRO paper: 2 + 2 + 12 = 16 bytes/param
    ("fp32", 4, 4, 8),
    ("tf32", 4, 4, 8),
    ("fp8", 3, 4, 12),  # the layers' weights: bf16 and an fp8 cast (the embedding and output layer: bf16 alone)
    ("bf16/16-bit grads", 2, 2, 12),  # Megatron-Bridge recipes: grad_reduce_in_fp32=False
    ("fp8/16-bit grads", 3, 2, 12),
    ("fp32/16-bit grads", 4, 4, 8),  # fp32 parameters: the parameter dtype is fp32
])
def test_bytes_per_parameter(h100, system, design, llama7b, precision, weights, grads, optimizer):
    precision, _, grads16 = precision.partition("/")
    d = design(h100, system, llama7b, MappingSpec(precision=precision, grad_reduce_in_fp32=not grads16))
    parts = memory_breakdown(d)
    params, embedding = float(params_per_device(d)[0]), float(embedding_params_per_device(d)[0])
    embedding_bytes = min(weights, 2 if precision in ("fp8", "bf16", "fp16") else 4)
    want = weights * (params - embedding) + embedding_bytes * embedding
    assert float(parts["weights"][0]) == pytest.approx(want, rel=1e-12)
    assert float(parts["gradients"][0]) == pytest.approx(grads * params, rel=1e-12)
    assert float(parts["optimizer"][0]) == pytest.approx(optimizer * params, rel=1e-12)


def test_zero_stages_shard_what_they_promise(a100, make_system, design, llama7b):
    dp = 64
    parts = [memory_breakdown(design(a100, make_system(dp), llama7b, MappingSpec(zero_stage=z, global_batch_size=dp)))
             for z in range(4)]
    p = float(params_per_device(design(a100, make_system(dp), llama7b, MappingSpec()))[0])
    opt = [float(x["optimizer"][0]) for x in parts]
    grads = [float(x["gradients"][0]) for x in parts]
    weights = [float(x["weights"][0]) for x in parts]
    assert opt == pytest.approx([12 * p, 12 * p / dp, 12 * p / dp, 12 * p / dp], rel=1e-12)
    assert grads == pytest.approx([4 * p, 4 * p, 4 * p / dp, 4 * p / dp], rel=1e-12)
    assert weights == pytest.approx([2 * p, 2 * p, 2 * p, 2 * p / dp], rel=1e-12)
    totals = [float(sum(x.values())[0]) for x in parts]
    assert totals[0] > totals[1] > totals[2] > totals[3]


def test_distributed_optimizer_is_zero1(a100, make_system, design, llama7b):
    z1 = memory_breakdown(design(a100, make_system(16), llama7b, MappingSpec(zero_stage=1, global_batch_size=16)))
    do = memory_breakdown(design(a100, make_system(16), llama7b,
                                 MappingSpec(distributed_optimizer=True, global_batch_size=16)))
    for part in MEMORY_PARTS:
        assert torch.equal(z1[part], do[part]), part


@pytest.mark.parametrize("mapping, counts", [
    (dict(), (1, 0, 0)),  # ZeRO-0: one all-reduce of the gradients
    (dict(distributed_optimizer=True), (0, 1, 1)),  # a reduce-scatter and the updated weights' all-gather
    (dict(zero_stage=1), (0, 1, 1)),
    (dict(zero_stage=2), (0, 4, 1)),  # a reduce-scatter per micro-batch
    (dict(zero_stage=3), (0, 4, 8)),  # per micro-batch: a scatter and two gathers
    (dict(zero_stage=3, fsdp=True), (0, 4, 8)),
    (dict(zero_stage=3, fsdp=True, pp=2), (0, 1, 2)),  # FSDP under a pipeline holds the weights: once a step
])
def test_data_parallel_collectives_per_step_by_zero_stage(a100, make_system, design, llama7b, mapping, counts):
    spec = MappingSpec(**{"dp": 16, "global_batch_size": 64, **mapping})  # 4 micro-batches of 1 per replica
    d = design(a100, make_system(16 * spec.pp), llama7b, spec)
    assert tuple(float(c[0]) for c in dp_collective_counts(d)) == counts


def test_recompute_reduces_activation_memory(a100, make_system, design, gpt3):
    acts = []
    for recompute in ("none", "selective", "full"):
        d = design(a100, make_system(1024), gpt3, MappingSpec(tp=8, pp=16, global_batch_size=1536,
                                                                recompute=recompute, flash_attention=False))
        acts.append(float(memory_breakdown(d)["activations"][0]))
    assert acts[0] > acts[1] > acts[2] > 0


def test_first_stage_holds_pp_micro_batches(a100, make_system, design, gpt3):
    """1F1B: the first stage keeps min(m, pp) micro-batches in flight (Narayanan et al. 2021)."""
    for gbs, want in ((1536, 16), (64, 8), (8, 1)):
        d = design(a100, make_system(1024), gpt3, MappingSpec(tp=8, pp=16, global_batch_size=gbs))
        assert float(in_flight_micro_batches(d)[0]) == want
        per_layer = float(activation_bytes_per_layer(d)[0])
        logits = float(memory_breakdown(d)["activations"][0]) - per_layer * 96 / 16 * want
        assert 0 < logits < per_layer  # only the output-layer buffers are left


def test_interleaving_raises_in_flight_activations(a100, make_system, design, gpt3):
    """Korthikanti et al. 2022 sec. 4.2.3: interleaving multiplies the first stage's activations by
    1 + (p - 1) / (p v)."""
    plain = design(a100, make_system(1024), gpt3, MappingSpec(tp=8, pp=16, global_batch_size=1536))
    inter = design(a100, make_system(1024), gpt3, MappingSpec(tp=8, pp=16, vp=2, global_batch_size=1536))
    ratio = float(in_flight_micro_batches(inter)[0]) / float(in_flight_micro_batches(plain)[0])
    assert ratio == pytest.approx(1 + 15 / 32, rel=1e-12)


def test_an_interleaved_stage_never_holds_more_micro_batches_than_there_are(a100, make_system, design, gpt3):
    """With m = pp micro-batches the interleaved warm-up runs them all before the first backward:
    the first stage holds m of them, as many as under plain 1F1B, not 1 + (p - 1) / (p v) times more."""
    for vp, gbs in ((1, 128), (2, 128), (2, 64)):  # dp = 1024 / (8 * 16) = 8: m = 16, 16, 8
        d = design(a100, make_system(1024), gpt3, MappingSpec(tp=8, pp=16, vp=vp, global_batch_size=gbs))
        m = gbs / 8
        want = min(m, 16 * (1 + 15 / 32)) if vp > 1 else min(m, 16)
        assert float(in_flight_micro_batches(d)[0]) == pytest.approx(want, rel=1e-12)


def test_memory_does_not_depend_on_bandwidths(a100, make_system, design, gpt3, replace):
    base = evaluate(design(a100, make_system(64), gpt3, MappingSpec(tp=8, pp=8, global_batch_size=64)))
    fast = evaluate(design(replace(a100, hbm_bw_gb_per_s=4000.0, scale_out_gbit_per_s=800.0), make_system(64),
                           gpt3, MappingSpec(tp=8, pp=8, global_batch_size=64)))
    assert torch.equal(base.memory_per_device_bytes, fast.memory_per_device_bytes)


# ---- activation memory, Korthikanti et al. 2022 Table 2 -------------------------------------


def rel_close(got: float, want: float, rel: float) -> bool:
    return abs(got - want) <= rel * abs(want)


S, H, A = 2048, 12288, 96  # GPT-3


def activations(a100, system, design, gpt3, **mapping) -> float:
    mapping.setdefault("flash_attention", False)
    return float(activation_bytes_per_layer(design(a100, system, gpt3, MappingSpec(**mapping)))[0])


@pytest.mark.parametrize("t", [1, 2, 4, 8])
@pytest.mark.parametrize("b", [1, 4])
def test_activations_no_sp_no_recompute(a100, system, design, gpt3, t, b):
    want = S * b * H * (10.0 + 24.0 / t + 5.0 * A * S / (H * t))
    got = activations(a100, system, design, gpt3, tp=t, micro_batch_size=b)
    assert rel_close(got, want, 1e-12), (got, want)


@pytest.mark.parametrize("t", [1, 2, 4, 8])
@pytest.mark.parametrize("b", [1, 4])
def test_activations_sequence_parallel(a100, system, design, gpt3, t, b):
    want = S * b * H * (34.0 / t + 5.0 * A * S / (H * t))
    got = activations(a100, system, design, gpt3, tp=t, micro_batch_size=b, sequence_parallel=True)
    assert rel_close(got, want, 1e-12), (got, want)


@pytest.mark.parametrize("t", [1, 2, 4, 8])
@pytest.mark.parametrize("b", [1, 4])
def test_activations_selective_recompute_with_sp(a100, system, design, gpt3, t, b):
    want = 34.0 * S * b * H / t
    got = activations(a100, system, design, gpt3, tp=t, micro_batch_size=b, sequence_parallel=True,
                      recompute="selective")
    assert rel_close(got, want, 1e-12), (got, want)


@pytest.mark.parametrize("t", [1, 2, 4, 8])
@pytest.mark.parametrize("b", [1, 4])
def test_activations_selective_recompute_without_sp(a100, system, design, gpt3, t, b):
    want = S * b * H * (10.0 + 24.0 / t)
    got = activations(a100, system, design, gpt3, tp=t, micro_batch_size=b, recompute="selective")
    assert rel_close(got, want, 1e-12), (got, want)


@pytest.mark.parametrize("t", [1, 2, 4, 8])
@pytest.mark.parametrize("b", [1, 4])
def test_activations_full_recompute(a100, system, design, gpt3, t, b):
    got = activations(a100, system, design, gpt3, tp=t, micro_batch_size=b, recompute="full")
    assert rel_close(got, 2.0 * S * b * H, 1e-12), got


@pytest.mark.parametrize("t", [1, 8])
def test_flash_attention_drops_the_square(a100, system, design, gpt3, t):
    no_flash = activations(a100, system, design, gpt3, tp=t, flash_attention=False)
    flash = activations(a100, system, design, gpt3, tp=t, flash_attention=True)
    without_square = activations(a100, system, design, gpt3, tp=t, recompute="selective")
    assert flash < no_flash
    # flash keeps the non-square tensors plus small softmax statistics (<1% of the layer)
    assert without_square < flash < 1.01 * without_square


def test_fp32_activations_take_twice_the_bytes(a100, system, design, gpt3):
    assert activations(a100, system, design, gpt3, precision="fp32") == pytest.approx(
        2.0 * activations(a100, system, design, gpt3, precision="bf16"), rel=1e-12)


@pytest.mark.parametrize("t", [1, 8])
@pytest.mark.parametrize("precision, narrow_bytes", [("fp8", 1.0), ("mxfp8", 1.0 + 1.0 / 32.0),
                                                     ("nvfp4", 0.5 + 1.0 / 16.0)])
def test_narrow_formats_save_gemm_inputs_cast(a100, system, design, gpt3, t, precision, narrow_bytes):
    # Transformer Engine saves the QKV, output-projection, fc1 and fc2 inputs in the GEMM format;
    # everything else (norm inputs, Q/K/V, GeLU input, masks) stays 16-bit
    b = 1
    saved_16bit_bytes = 2.0 * S * b * H * (2.0 + 1.0 / t) + 2.0 * S * b * 4 * H / t
    want = activations(a100, system, design, gpt3, tp=t) - saved_16bit_bytes * (1.0 - narrow_bytes / 2.0)
    got = activations(a100, system, design, gpt3, tp=t, precision=precision)
    assert got == pytest.approx(want, rel=1e-12)


def test_llama_style_layers_keep_no_dropout_masks(a100, system, design):
    gelu = ModelSpec(name="g", num_layers=2, hidden_size=1024, num_heads=8, ffn_hidden_size=4096,
                     vocab_size=1000, seq_length=512)
    swiglu = ModelSpec(name="s", num_layers=2, hidden_size=1024, num_heads=8, ffn_hidden_size=4096,
                       ffn_type="swiglu", vocab_size=1000, seq_length=512)
    m = MappingSpec(flash_attention=True)
    th = 512 * 1024
    got = float(activation_bytes_per_layer(design(a100, system, swiglu, m))[0])
    gelu_bytes = float(activation_bytes_per_layer(design(a100, system, gelu, m))[0])
    # swiglu adds the gate (2 bytes x tokens x ffn) and drops two 1-byte masks
    assert got == pytest.approx(gelu_bytes + 2.0 * 512 * 4096 - 2.0 * th, rel=1e-12)


def test_context_parallel_splits_activations(a100, system, design, gpt3):
    one = activations(a100, system, design, gpt3, tp=8, sequence_parallel=True)
    two = activations(a100, system, design, gpt3, tp=8, sequence_parallel=True, cp=2)
    assert two == pytest.approx(one / 2.0, rel=1e-12)


# ---- torchtitan: per-op checkpointing, the eager fp32 cross-entropy --------------------------

@pytest.mark.parametrize("t", [1, 8])
def test_per_op_checkpointing_keeps_input_attention_output_and_half_the_matmul_outputs(a100, system, design,
                                                                                      llama_gqa, t):
    """torchtitan's `op` policy, per token: the 16-bit layer input (split over tp with sequence
    parallelism), the attention output, half of every matmul output (column-parallel ones split over
    tp: 1 byte an element), and fp32 softmax statistics per head."""
    s, h, heads, kv_heads, ffn = 4096, 8192, 64, 8, 28672
    qkv = h + 2 * kv_heads * h // heads
    mapping = MappingSpec(tp=t, sequence_parallel=t > 1, recompute="op", flash_attention=True)
    got = float(activation_bytes_per_layer(design(a100, system, llama_gqa, mapping))[0])
    per_token = 2.0 * h / t + 2.0 * h / t + (qkv + 2 * ffn) / t + 2.0 * h
    assert got == pytest.approx(s * per_token + 4.0 * heads * s / t, rel=1e-12)


def test_per_op_checkpointing_sits_between_full_and_none(a100, system, design, llama_gqa):
    kept = {r: design(a100, system, llama_gqa, MappingSpec(recompute=r, flash_attention=True))
            for r in ("none", "op", "full")}
    none, op, full = (float(activation_bytes_per_layer(kept[r])[0]) for r in ("none", "op", "full"))
    assert full < op < none
    # the backward pass rebuilds what the layer did not keep, one layer at a time
    assert float(recompute_transient_bytes(kept["op"])[0]) == pytest.approx(none - op, rel=1e-12)


def test_an_eager_fp32_cross_entropy_holds_twelve_bytes_a_logit(a100, system, design, llama7b):
    fused = design(a100, system, llama7b, MappingSpec(micro_batch_size=2, global_batch_size=2))
    eager = design(a100, system, llama7b, MappingSpec(micro_batch_size=2, global_batch_size=2,
                                                      fused_cross_entropy=False))
    logits = 2 * 4096 * 32000
    extra = float(memory_breakdown(eager)["activations"][0] - memory_breakdown(fused)["activations"][0])
    assert extra == pytest.approx(logits * (12.0 - 6.0), rel=1e-12)
    assert float(evaluate(eager).step_time_s[0]) > float(evaluate(fused).step_time_s[0])


def test_hsdp_shards_the_states_over_dp_shard_ranks_only(a100, make_system, design, llama7b):
    """HSDP: dp 64 as 8 replicas of 8-rank shard groups keeps each device's weights, gradients and optimizer
    state split 8 ways, not 64; activations and buffers are untouched; dp_shard = dp is plain sharding."""
    dp = 64

    def parts(**changes):
        mapping = MappingSpec(zero_stage=3, fsdp=True, global_batch_size=dp, **changes)
        return memory_breakdown(design(a100, make_system(dp), llama7b, mapping))

    plain, hsdp, whole = parts(), parts(dp_shard=8), parts(dp_shard=dp)
    p = float(params_per_device(design(a100, make_system(dp), llama7b, MappingSpec()))[0])
    assert float(hsdp["optimizer"][0]) == pytest.approx(12 * p / 8, rel=1e-12)
    assert float(hsdp["gradients"][0]) == pytest.approx(4 * p / 8, rel=1e-12)
    assert float(hsdp["weights"][0]) == pytest.approx(2 * p / 8, rel=1e-12)
    assert float(plain["optimizer"][0]) == pytest.approx(12 * p / dp, rel=1e-12)
    for part in ("activations", "comm_buffers", "runtime_reserve"):
        assert torch.equal(hsdp[part], plain[part]), part
    for part in MEMORY_PARTS:
        assert torch.equal(whole[part], plain[part]), part


@pytest.mark.parametrize("state, master, optimizer_bytes, step_bytes", [
    ("fp32", "fp32", 12.0, 34.0),  # fp32 master weights and moments (Megatron's and ZeRO's default)
    ("fp32", "remainder", 10.0, 32.0),  # NeMo 1.x / Apex: 16-bit remainders beside the bf16 weights
    ("bf16", "fp32", 8.0, 26.0),  # Megatron-Core precision-aware optimizer, bf16 moments (DeepSeek-V3)
    ("bf16", "fp16", 6.0, 22.0),
    ("bf16", "none", 4.0, 20.0),  # Apex with bf16 states: the optimizer steps the bf16 weights themselves
    ("fp8", "fp32", 6.0, 22.0),
])
def test_optimizer_state_takes_its_dtypes_bytes(a100, make_system, design, llama7b, state, master, optimizer_bytes,
                                                step_bytes):
    """Optimizer memory = master copy + two moments, sharded by the distributed optimizer; the Adam step
    moves 8 bytes of fp32 gradient, the master copy and both moments twice, and the bf16 weight once
    (twice where the optimizer steps it in place); nothing else of the design moves."""
    dp = 8

    def run(**changes):
        mapping = MappingSpec(dp=dp, global_batch_size=dp, distributed_optimizer=True, **changes)
        d = design(a100, make_system(dp), llama7b, mapping)
        return d, evaluate(d)

    d, result = run(optimizer_state_dtype=state, master_params=master)
    _, default = run()
    p = float(params_per_device(d)[0])
    assert float(result.memory_breakdown_bytes["optimizer"][0]) == pytest.approx(optimizer_bytes * p / dp, rel=1e-12)
    assert float(adam_step_bytes_per_param(d)[0]) == step_bytes
    for part in MEMORY_PARTS:
        if part != "optimizer":
            assert torch.equal(result.memory_breakdown_bytes[part], default.memory_breakdown_bytes[part]), part
    for part, seconds in result.time_breakdown_s.items():
        if part != "optimizer":
            assert torch.equal(seconds, default.time_breakdown_s[part]), part
    assert (float(result.time_breakdown_s["optimizer"][0]) < float(default.time_breakdown_s["optimizer"][0])) \
        == (step_bytes < 34.0)


def test_fp32_training_has_no_separate_master_copy(a100, system, design, llama7b):
    """fp32 weights are their own master copy: 8 bytes of moments a parameter, and the step reads and
    writes the fp32 weight (32 bytes) instead of writing a 16-bit copy."""
    d = design(a100, system, llama7b, MappingSpec(precision="fp32", optimizer_state_dtype="fp32"))
    p = float(params_per_device(d)[0])
    assert float(memory_breakdown(d)["optimizer"][0]) == pytest.approx(8.0 * p, rel=1e-12)
    assert float(adam_step_bytes_per_param(d)[0]) == 32.0
    bf16_moments = design(a100, system, llama7b, MappingSpec(precision="fp32", optimizer_state_dtype="bf16"))
    assert float(memory_breakdown(bf16_moments)["optimizer"][0]) == pytest.approx(4.0 * p, rel=1e-12)


@pytest.mark.parametrize("changes, field", [
    ({"optimizer_state_dtype": "fp64"}, "optimizer_state_dtype"),
    ({"master_params": "fp8"}, "master_params"),
    ({"master_params": "none", "precision": "fp32"}, "master_params"),
    ({"master_params": "remainder", "precision": "tf32"}, "master_params"),
])
def test_bad_optimizer_precision_names_the_field(changes, field):
    with pytest.raises(SpecError) as info:
        MappingSpec(**changes).validate()
    assert info.value.field == field


@pytest.mark.parametrize("changes, layer_bytes", [
    ({"precision": "fp8"}, 3.0),  # a bf16 weight and its fp8 cast
    ({"precision": "fp8", "fp8_param_gather": True, "distributed_optimizer": True}, 1.0),  # fp8 primary weights
    ({"precision": "bf16"}, 2.0),
])
def test_embedding_and_output_layer_keep_16_bit_weights_alone(h100, make_system, design, llama7b, changes,
                                                               layer_bytes):
    """Only the layers' GEMM weights get an fp8 copy (or exist in fp8 alone): the embedding and the output
    layer never run an fp8 GEMM and hold their bf16 weights, here over one device and sharded 8 ways by FSDP."""
    d = design(h100, make_system(1), llama7b, MappingSpec(**changes))
    p, emb = float(params_per_device(d)[0]), float(embedding_params_per_device(d)[0])
    assert emb == pytest.approx(2 * 32000 * 4096, rel=1e-12)  # Llama 2 7B: untied 32k x 4096 embedding and head
    want = (p - emb) * layer_bytes + emb * 2.0
    assert float(memory_breakdown(d)["weights"][0]) == pytest.approx(want, rel=1e-12)
    if "fp8_param_gather" not in changes:
        sharded = design(h100, make_system(8), llama7b, MappingSpec(zero_stage=3, fsdp=True, global_batch_size=8,
                                                                     **changes))
        assert float(memory_breakdown(sharded)["weights"][0]) == pytest.approx(want / 8, rel=1e-12)


@pytest.mark.parametrize("t", [2, 8])
@pytest.mark.parametrize("precision, gemm_bytes", [("bf16", 2.0), ("fp8", 1.0)])
def test_dtensor_sequence_parallel_keeps_the_gathered_gemm_inputs(h100, system, design, gpt3, t, precision,
                                                                  gemm_bytes):
    """`sp_keeps_gathered_input` (torchtitan's DTensor TP): the QKV and fc1 inputs are kept whole instead of
    as 1/tp shards, at their GEMM format's bytes; a layer rebuilt by full recompute holds them so too; without
    sequence parallelism nothing changes (they were whole already)."""

    def per_layer(recompute, sp, keep):
        d = design(h100, system, gpt3, MappingSpec(tp=t, sequence_parallel=sp, precision=precision, recompute=recompute,
                                                   sp_keeps_gathered_input=keep))
        return float(activation_bytes_per_layer(d)[0]), float(recompute_transient_bytes(d)[0])

    extra = 2.0 * gemm_bytes * S * H * (1.0 - 1.0 / t)  # two inputs of s x h, whole instead of 1/t
    shard, gathered = per_layer("none", True, False), per_layer("none", True, True)
    assert gathered[0] - shard[0] == pytest.approx(extra, rel=1e-12)
    full_shard, full_gathered = per_layer("full", True, False), per_layer("full", True, True)
    assert full_gathered[0] == full_shard[0]  # full recompute keeps only the layer input
    assert full_gathered[1] - full_shard[1] == pytest.approx(extra, rel=1e-12)
    assert per_layer("none", False, True) == per_layer("none", False, False)


def test_dtensor_sequence_parallel_keeps_the_output_layers_gathered_input(h100, system, design, gpt3):
    """The output layer is a column-parallel GEMM too: under `sp_keeps_gathered_input` its input (the final
    norm's output, 16-bit: no fp8 GEMM runs it) is kept whole, on top of what the layers keep."""
    t, b = 8, 2

    def parts(keep):
        d = design(h100, system, gpt3, MappingSpec(tp=t, sequence_parallel=True, micro_batch_size=b, precision="fp8",
                                                   recompute="full", sp_keeps_gathered_input=keep))
        layers = float(activation_bytes_per_layer(d)[0]) * gpt3.num_layers * float(in_flight_micro_batches(d)[0])
        return float(memory_breakdown(d)["activations"][0]) - layers - float(recompute_transient_bytes(d)[0])

    assert parts(True) - parts(False) == pytest.approx(b * S * H * 2.0 * (1.0 - 1.0 / t), rel=1e-12)
