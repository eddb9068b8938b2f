"""analytical.step.workload against the papers' closed forms.

Narayanan et al. 2021 ("Efficient large-scale language model training on GPU clusters using
Megatron-LM"): FLOPs per iteration (eq. 3) and the GPT parameter count; Korthikanti et al. 2022
("Reducing activation recomputation in large transformer models"), Table 2: activation memory per
layer.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

from analytical import MappingSpec, ModelSpec
from analytical.step.memory import activation_bytes_per_layer
from deepflow.presets import load_preset
from analytical.step.workload import (
    GEMM_SLOTS,
    active_params,
    attention_core_flops,
    gemm_bytes_per_element,
    layer_gemms,
    model_flops_per_step,
    total_params,
)


def rel_close(got: float, want: float, rel: float) -> bool:
    return abs(got - want) <= rel * abs(want)


GPT_SHAPES = [  # (layers, hidden, heads, vocab, seq, global batch)
    (96, 12288, 96, 51200, 2048, 1536),  # GPT-3 175B
    (24, 2048, 16, 51200, 2048, 512),  # GPT-3 XL-like
    (40, 5120, 40, 50257, 1024, 8),
    (2, 64, 4, 1000, 128, 3),
]


@pytest.mark.parametrize("L,h,a,V,s,B", GPT_SHAPES)
def test_model_flops_match_narayanan_eq3(a100, system, design, make_gpt, L, h, a, V, s, B):
    d = design(a100, system, make_gpt(L, h, a, V, s), MappingSpec(global_batch_size=B))
    want = 72.0 * B * s * L * h**2 * (1.0 + s / (6.0 * h) + V / (12.0 * L * h))
    got = float(model_flops_per_step(d)[0])
    assert rel_close(got, want, 1e-9), (got, want)


@pytest.mark.parametrize("mapping", [
    MappingSpec(tp=8, pp=4, cp=2, micro_batch_size=4, global_batch_size=64, flash_attention=True),
    MappingSpec(tp=2, micro_batch_size=2, global_batch_size=64, flash_attention=False, sequence_parallel=True,
                recompute="full"),
])
def test_model_flops_do_not_depend_on_the_mapping(a100, system, design, gpt3, mapping):
    base = model_flops_per_step(design(a100, system, gpt3, MappingSpec(global_batch_size=64)))
    other = model_flops_per_step(design(a100, system, gpt3, mapping))
    assert torch.allclose(base, other, rtol=1e-12, atol=0)


@pytest.mark.parametrize("L,h,a,V,s,B", GPT_SHAPES)
def test_gpt_params_match_narayanan(a100, system, design, make_gpt, L, h, a, V, s, B):
    d = design(a100, system, make_gpt(L, h, a, V, s), MappingSpec())
    want = 12.0 * L * h**2 * (1.0 + 13.0 / (12.0 * h) + (V + s) / (12.0 * L * h))
    got = float(total_params(d)[0])
    assert rel_close(got, want, 1e-9), (got, want)
    assert float(active_params(d)[0]) == got  # dense: every parameter is active


def test_gpt3_is_175b(a100, system, design, gpt3):
    assert rel_close(float(total_params(design(a100, system, gpt3, MappingSpec()))[0]), 175e9, 0.01)


def test_llama2_7b_params(a100, system, design, llama7b):
    assert rel_close(float(total_params(design(a100, system, llama7b, MappingSpec()))[0]), 6.74e9, 0.01)


def test_gqa_has_fewer_params_than_mha(a100, system, design, llama_gqa, replace):
    gqa = float(total_params(design(a100, system, llama_gqa, MappingSpec()))[0])
    mha = float(total_params(design(a100, system, replace(llama_gqa, num_kv_heads=None), MappingSpec()))[0])
    h, L, kv, a = 8192, 80, 8, 64
    assert gqa < mha
    # K and V projections shrink from h x h to h x (kv * h / a) each, in every layer
    assert rel_close(mha - gqa, L * 2.0 * h * (h - kv * h / a), 1e-12)
    assert rel_close(gqa, 69.0e9, 0.01)  # LLaMA-2-70B


def test_mixtral_total_and_active_params(a100, system, design, mixtral):
    d = design(a100, system, mixtral, MappingSpec())
    total, active = float(total_params(d)[0]), float(active_params(d)[0])
    assert active < total
    assert rel_close(total, 46.7e9, 0.03), total
    assert rel_close(active, 12.9e9, 0.03), active


def test_moe_with_all_experts_active_is_dense_in_params(a100, system, design, mixtral, replace):
    d = design(a100, system, replace(mixtral, top_k=8), MappingSpec())
    assert float(active_params(d)[0]) == pytest.approx(float(total_params(d)[0]), rel=1e-12)


def test_moe_flops_scale_with_top_k_not_num_experts(a100, system, design, mixtral, replace):
    f2 = float(model_flops_per_step(design(a100, system, mixtral, MappingSpec()))[0])
    f2_64 = float(model_flops_per_step(design(a100, system, replace(mixtral, num_experts=64), MappingSpec()))[0])
    f1 = float(model_flops_per_step(design(a100, system, replace(mixtral, top_k=1), MappingSpec()))[0])
    assert f1 < f2
    # the expert FFN work depends on top_k; only the (tiny) router grows with num_experts
    assert f2_64 > f2
    assert rel_close(f2_64, f2, 0.01)


def test_lstm_params_and_flops(a100, system, design, lstm):
    L, h, V, s, B = 2, 1024, 10000, 128, 32
    d = design(a100, system, lstm, MappingSpec(global_batch_size=B, precision="fp32"))
    assert float(total_params(d)[0]) == pytest.approx(L * (8 * h * h + 8 * h) + 2 * V * h, rel=1e-12)
    # 4 gates x (input and recurrent h x h matrices) per token and layer, plus the output layer
    want = 3.0 * B * (L * 16.0 * s * h * h + 2.0 * s * h * V)
    assert float(model_flops_per_step(d)[0]) == pytest.approx(want, rel=1e-12)


def test_gemm_model_forward_flops(a100, system, design, gemm_model):
    g = layer_gemms(design(a100, system, gemm_model, MappingSpec()))
    assert float(g.flops()[0]) == 2.0 * 8192**3


def test_backward_gemms_are_twice_the_forward(a100, system, design, gpt3, llama_gqa, mixtral, lstm):
    for model in (gpt3, llama_gqa, mixtral, lstm):
        g = layer_gemms(design(a100, system, model, MappingSpec(tp=1, micro_batch_size=2, flash_attention=False)))
        dgrad, wgrad = g.backward()
        assert float(dgrad.flops()[0] + wgrad.flops()[0]) == pytest.approx(2.0 * float(g.flops()[0]), rel=1e-12)
        assert g.m.shape == (1, len(GEMM_SLOTS))


def test_tensor_parallel_splits_layer_flops(a100, system, design, gpt3):
    f1 = layer_gemms(design(a100, system, gpt3, MappingSpec(tp=1, flash_attention=False))).flops()
    f8 = layer_gemms(design(a100, system, gpt3, MappingSpec(tp=8, flash_attention=False))).flops()
    assert float(f8[0]) == pytest.approx(float(f1[0]) / 8.0, rel=1e-12)


def test_causal_flash_attention_computes_half_the_square(a100, system, design, gpt3):
    full = attention_core_flops(design(a100, system, gpt3, MappingSpec(flash_attention=False)))
    flash = attention_core_flops(design(a100, system, gpt3, MappingSpec(flash_attention=True)))
    s, h = 2048, 12288
    assert float(full[0]) == 4.0 * s * s * h
    assert float(flash[0]) == 0.5 * float(full[0])


def test_explicit_head_dim_widens_attention_not_the_mlp(a100, system, design):
    """Qwen3-30B-A3B-like attention (Hugging Face config: hidden 2048, 32 heads of head_dim 128, 4 kv
    heads): QKV is 2048 x (32 + 2 x 4) x 128, the output projection 4096 x 2048, the attention core
    4 s^2 (32 x 128) per sequence; parameters follow; the MLP is untouched."""
    base = ModelSpec(name="q", num_layers=2, hidden_size=2048, num_heads=32, num_kv_heads=4, ffn_hidden_size=6144,
                     ffn_type="swiglu", vocab_size=1000, seq_length=1024)
    wide = dataclasses.replace(base, head_dim=128)
    d0, d1 = design(a100, system, base, MappingSpec()), design(a100, system, wide, MappingSpec())
    g0, g1 = layer_gemms(d0), layer_gemms(d1)
    qkv, out, up = (GEMM_SLOTS.index(n) for n in ("qkv", "attention_out", "ffn_up"))
    assert float(g1.n[0, qkv]) == (32 + 2 * 4) * 128 and float(g1.k[0, out]) == 32 * 128
    assert float(g0.n[0, qkv]) == (32 + 2 * 4) * 64
    assert float(g1.n[0, up]) == float(g0.n[0, up])
    assert float(attention_core_flops(d1)[0]) == 4.0 * 1024 * 1024 * 32 * 128 * 0.5  # causal flash
    attention_params = 2048 * (32 + 2 * 4) * 128 + 32 * 128 * 2048
    assert float(total_params(d1)[0] - total_params(d0)[0]) == 2 * (attention_params - 2048 * 40 * 64 - 2048 * 2048)


def test_head_dim_none_is_hidden_over_heads(a100, system, design, gpt3):
    explicit = dataclasses.replace(gpt3, head_dim=128)
    a, b = design(a100, system, gpt3, MappingSpec()), design(a100, system, explicit, MappingSpec())
    assert float(model_flops_per_step(a)[0]) == float(model_flops_per_step(b)[0])
    assert float(activation_bytes_per_layer(a)[0]) == float(activation_bytes_per_layer(b)[0])


@pytest.mark.parametrize("precision,nbytes", [("fp32", 4), ("tf32", 4), ("fp16", 2), ("bf16", 2), ("fp8", 1)])
def test_gemm_bytes_per_element(a100, system, design, gpt3, precision, nbytes):
    assert float(gemm_bytes_per_element(design(a100, system, gpt3, MappingSpec(precision=precision)))[0]) == nbytes


def test_nemotron4_conventions_match_the_papers_parameter_counts(h100, system, design):
    """Squared-ReLU layers follow Nemotron-4's conventions: a 2-matrix MLP, LayerNorm, no biases, untied input and
    output embeddings, no learned positions. Non-embedding parameters: "12.5 billion" for Nemotron-4 15B
    (arXiv 2402.16819, section 2), 331.6B for Nemotron-4 340B (arXiv 2406.11704, Table 1)."""
    for name, layers_b in (("nemotron4-15b", 12.5), ("nemotron4-340b", 331.6)):
        model = load_preset("model", name)
        d = design(h100, system, model, MappingSpec())
        embedding = 2 * model.vocab_size * model.hidden_size  # untied, no position table
        assert float(total_params(d)[0]) - embedding == pytest.approx(layers_b * 1e9, rel=0.005)
        # GeLU's MLP width with squared ReLU, but without GPT's biases, tied head, position table or dropout masks
        gelu = design(h100, system, dataclasses.replace(model, ffn_type="gelu"), MappingSpec())
        assert float(total_params(gelu)[0]) - float(total_params(d)[0]) == pytest.approx(
            model.num_layers * (model.hidden_size * (3 + 2 * 8 / model.num_heads) + model.ffn_hidden_size)
            + model.hidden_size * (model.seq_length - model.vocab_size), rel=1e-9)
        assert float(activation_bytes_per_layer(d)[0]) < float(activation_bytes_per_layer(gelu)[0])
