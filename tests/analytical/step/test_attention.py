"""analytical.step.attention: plain heads keep their expressions; multi-head latent attention against
DeepSeek-V3's shapes (report arXiv 2412.19437 section 2.1.1 and 4.2: hidden 7168, 128 heads, query
latent 1536, key-value latent 512, per-head query-key 128 + 64 rotary, value 128)."""

from __future__ import annotations

import dataclasses

import pytest

from analytical import DEFAULT_EFFICIENCY, MappingSpec, ModelSpec, SpecError, evaluate
from analytical.step.attention import (FLASH_QUERY_TILE, attention_params, attention_query_tiles, attention_width,
                                       kv_width, qkv_projection_width)
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


@pytest.mark.parametrize("seq, cp, tiles_a_pass", [(4096, 1, 32), (4100, 1, 33), (8192, 4, 16), (65536, 2, 256)])
def test_query_tiles_are_128_row_tiles_of_every_local_head(h100, make_system, design, llama7b, seq, cp,
                                                            tiles_a_pass):
    """b x heads / tp x ceil((s / cp) / 128) a pass, (3 cp + 1) / 4 passes of the load-balanced causal ring."""
    model = dataclasses.replace(llama7b, seq_length=seq)
    d = design(h100, make_system(8), model, MappingSpec(tp=2, cp=cp, dp=4 // cp, micro_batch_size=3,
                                                         global_batch_size=12 * 4 // cp))
    assert FLASH_QUERY_TILE == 128
    expected = 3 * llama7b.num_heads / 2 * tiles_a_pass * (3 * cp + 1) / 4
    assert float(attention_query_tiles(d)[0]) == pytest.approx(expected, rel=1e-12)


def test_a_windowed_layer_runs_as_many_tiles_as_a_full_one_and_narrow_heads_more(h100, system, design, llama7b):
    """A sliding window shortens each tile's keys, not the tiles; heads of half the width, twice as many for the
    same attention width (gpt-oss-120b's 64-wide heads), double the tiles at the same FLOPs."""
    full = design(h100, system, llama7b, MappingSpec())
    windowed = design(h100, system, dataclasses.replace(llama7b, window_size=128, window_attn_skip_freq=2),
                      MappingSpec())
    narrow = design(h100, system, dataclasses.replace(llama7b, num_heads=2 * llama7b.num_heads,
                                                      num_kv_heads=2 * llama7b.num_kv_heads,
                                                      head_dim=llama7b.hidden_size // llama7b.num_heads // 2),
                    MappingSpec())
    assert float(attention_query_tiles(windowed)[0]) == float(attention_query_tiles(full)[0])
    assert float(attention_core_flops(windowed)[0]) < 0.6 * float(attention_core_flops(full)[0])
    assert float(attention_query_tiles(narrow)[0]) == 2 * float(attention_query_tiles(full)[0])
    assert float(attention_core_flops(narrow)[0]) == pytest.approx(float(attention_core_flops(full)[0]), rel=1e-12)


def test_the_tiles_time_lengthens_each_layer_pass_by_tiles_x_tile_time_over_sms(h100, system, design, llama7b):
    """One micro-batch through 32 layers at tp 8, no recompute: the step is longer by 32 x tiles x (forward +
    backward tile time) / 132 SMs than with the tile times set to zero, and by nothing else."""
    gpu = dataclasses.replace(h100, peak_tera_exp_per_s=3.87)  # special-function units (the h100 preset's rate)
    d = design(gpu, system, llama7b, MappingSpec(tp=8, dp=1, micro_batch_size=1, global_batch_size=1,
                                                    recompute="none"))
    eff = DEFAULT_EFFICIENCY
    untimed = dataclasses.replace(eff, flash_attention_fwd_tile_s=0.0, flash_attention_bwd_tile_s=0.0)
    extra = float(evaluate(d, eff).step_time_s[0] - evaluate(d, untimed).step_time_s[0])
    tiles = 1 * 32 / 8 * 4096 / 128
    expected = 32 * tiles * (eff.flash_attention_fwd_tile_s + eff.flash_attention_bwd_tile_s) / 132
    assert extra == pytest.approx(expected, rel=1e-9)


def test_a_part_without_special_function_units_runs_no_tile_time(h100, system, design, llama7b):
    """The tile time is a GPU's tiled kernel's, as the softmax's exponentials are: a part naming no rate for its
    special-function units (the TPU preset) prices fused attention by its matmuls alone."""
    gpu, tpu_like = (dataclasses.replace(h100, peak_tera_exp_per_s=rate) for rate in (3.87, 0.0))
    untimed = dataclasses.replace(DEFAULT_EFFICIENCY, flash_attention_fwd_tile_s=0.0, flash_attention_bwd_tile_s=0.0)
    for accelerator, charged in ((gpu, True), (tpu_like, False)):
        d = design(accelerator, system, llama7b, MappingSpec())
        gap = float(evaluate(d).step_time_s[0] - evaluate(d, untimed).step_time_s[0])
        assert (gap > 0) == charged
