"""analytical.step.attention: plain heads keep their expressions; multi-head latent attention against
DeepSeek-V3's shapes (report arXiv 2412.19437 section 2.1.1 and 4.2: hidden 7168, 128 heads, query
latent 1536, key-value latent 512, per-head query-key 128 + 64 rotary, value 128)."""

from __future__ import annotations

import dataclasses

import pytest

from analytical import MappingSpec, ModelSpec, SpecError, evaluate
from analytical.step.attention import attention_params, attention_width, kv_width, qkv_projection_width
from analytical.step.workload import GEMM_SLOTS, attention_core_flops, layer_gemms

H, HEADS, Q_LORA, KV_LORA, NOPE, ROPE, V = 7168, 128, 1536, 512, 128, 64, 128
MLA = ModelSpec(name="mla", num_layers=4, hidden_size=H, num_heads=HEADS, num_kv_heads=HEADS, head_dim=NOPE,
                kv_lora_rank=KV_LORA, q_lora_rank=Q_LORA, qk_rope_head_dim=ROPE, v_head_dim=V,
                ffn_hidden_size=18432, ffn_type="swiglu", vocab_size=129280, seq_length=4096)


def test_mla_projection_weights_are_deepseek_v3s(h100, system, design):
    d = design(h100, system, MLA, MappingSpec())
    q = H * Q_LORA + Q_LORA + Q_LORA * HEADS * (NOPE + ROPE)  # down, latent norm, up
    kv = H * (KV_LORA + ROPE) + KV_LORA + KV_LORA * HEADS * (NOPE + V)
    out = HEADS * V * H
    assert float(attention_params(d)[0]) == q + kv + out == 187_107_328


@pytest.mark.parametrize("tp", [1, 2, 8])
def test_mla_projection_work_per_token_splits_only_the_up_projections(h100, make_system, design, tp):
    d = design(h100, make_system(8), MLA, MappingSpec(tp=tp))
    macs = (H * Q_LORA + Q_LORA * HEADS * (NOPE + ROPE) / tp + H * (KV_LORA + ROPE)
            + KV_LORA * HEADS * (NOPE + V) / tp)
    assert float(qkv_projection_width(d)[0]) * H == pytest.approx(macs, rel=1e-12)
    g = layer_gemms(d)
    out = GEMM_SLOTS.index("attention_out")
    assert float(g.k[0, out]) == HEADS / tp * V


def test_mla_core_uses_the_query_key_and_value_widths(h100, system, design):
    d = design(h100, system, MLA, MappingSpec(flash_attention=True))
    s = 4096
    qk_product, v_product = 2 * s * s * HEADS * (NOPE + ROPE), 2 * s * s * HEADS * V
    assert float(attention_core_flops(d)[0]) == pytest.approx(0.5 * (qk_product + v_product), rel=1e-12)
    assert float(attention_width(d)[0]) == HEADS * (NOPE + ROPE + V) / 2
    assert float(kv_width(d)[0]) == HEADS * (NOPE + ROPE + V)


def test_plain_heads_are_untouched_by_the_mla_fields_defaults(h100, system, design, llama7b):
    explicit = dataclasses.replace(llama7b, kv_lora_rank=0, q_lora_rank=0, qk_rope_head_dim=0, v_head_dim=None)
    a = evaluate(design(h100, system, llama7b, MappingSpec()))
    b = evaluate(design(h100, system, explicit, MappingSpec()))
    assert float(a.step_time_s[0]) == float(b.step_time_s[0])
    assert float(a.memory_per_device_bytes[0]) == float(b.memory_per_device_bytes[0])


@pytest.mark.parametrize("changes, field", [
    ({"q_lora_rank": 1536}, "q_lora_rank"),  # a latent field without kv_lora_rank
    ({"qk_rope_head_dim": 64}, "qk_rope_head_dim"),
    ({"v_head_dim": 128}, "v_head_dim"),
    ({"kv_lora_rank": 512}, "head_dim"),  # MLA needs the per-head query-key width
    ({"kv_lora_rank": 512, "head_dim": 128, "num_kv_heads": 8}, "num_kv_heads"),
    ({"kv_lora_rank": -1}, "kv_lora_rank"),
])
def test_bad_latent_attention_fields_name_the_field(llama7b, changes, field):
    with pytest.raises(SpecError) as info:
        dataclasses.replace(llama7b, **changes).validate()
    assert info.value.field == field
