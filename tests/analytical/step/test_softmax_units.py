"""Sliding-window attention and the softmax's special-function-unit exponentials.

Windows against Megatron-Core (`is_layer_window_attention`: layer N windowed unless N divides by
`window_attn_skip_freq`) and Megatron-Bridge's FLOP count (`calculate_swa_context`: a causal window
of w keys averages w - w (w - 1) / (2 s) keys a query). Exponentials against FlashAttention-3's H100
figure (3.9 x 10^12 /s, sec. 3.1) and Blackwell Ultra's doubled MUFU.EX2 rate (NVIDIA blog, 2026)."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from analytical import DEFAULT_EFFICIENCY, MappingSpec, ModelSpec, SpecError, evaluate
from analytical.chip.derive import derive_chip
from analytical.chip.spec import ChipSpec
from analytical.power_cap import apply_operating_point, capped_operating_point
from analytical.step.attention import causal_keys_per_query, windowed_layer_fraction
from analytical.step.kernels import softmax_exp_time_s
from analytical.step.workload import attention_core_flops, attention_score_elements, layer_forward_flops_per_sequence
from deepflow.presets import load_preset

# gpt-oss-120b's shape (Hugging Face config; Megatron-Bridge GPTOSSProvider): 36 layers, hidden 2880,
# 64 heads of 64, 8 kv heads, 128 experts top-4, a 128-key window on every other layer
GPT_OSS = ModelSpec(name="gpt-oss-120b", num_layers=36, hidden_size=2880, num_heads=64, num_kv_heads=8, head_dim=64,
                    ffn_hidden_size=2880, ffn_type="swiglu", vocab_size=201088, seq_length=4096, num_experts=128,
                    top_k=4, window_size=128, window_attn_skip_freq=2)
FULL = dataclasses.replace(GPT_OSS, window_size=0, window_attn_skip_freq=0)
FLASH = MappingSpec(flash_attention=True, global_batch_size=8)


def t(*values: float) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.float64)


@pytest.mark.parametrize("layers, freq, windowed", [(36, 2, 18), (36, 0, 36), (36, 1, 0), (48, 4, 36), (7, 3, 5)])
def test_windowed_layers_follow_megatron_core(h100, system, design, layers, freq, windowed):
    model = dataclasses.replace(GPT_OSS, num_layers=layers, window_attn_skip_freq=freq)
    megatron = sum(1 for n in range(1, layers + 1) if freq == 0 or n % freq != 0)  # is_layer_window_attention
    assert megatron == windowed
    d = design(h100, system, model, FLASH)
    assert float(windowed_layer_fraction(d)[0]) == pytest.approx(windowed / layers, rel=1e-12)


@pytest.mark.parametrize("window", [1, 128, 1000, 4095])
def test_window_keys_are_megatron_bridges_swa_context(h100, system, design, window):
    s = 4096
    d = design(h100, system, dataclasses.replace(GPT_OSS, window_size=window, window_attn_skip_freq=0), FLASH)
    mean_min = sum(min(i + 1, window) for i in range(s)) / s  # keys of each causal query, averaged
    assert float(causal_keys_per_query(d)[0]) == pytest.approx(window - window * (window - 1) / (2 * s), rel=1e-12)
    assert float(causal_keys_per_query(d)[0]) == pytest.approx(mean_min, rel=1e-12)


def test_a_window_as_long_as_the_sequence_is_full_attention(h100, system, design, run):
    wide = dataclasses.replace(GPT_OSS, window_size=4096)
    assert float(causal_keys_per_query(design(h100, system, wide, FLASH))[0]) == 4096 / 2
    assert float(run(h100, system, wide, FLASH).step_time_s[0]) == float(run(h100, system, FULL, FLASH).step_time_s[0])


def test_window_shrinks_the_flash_core_by_its_share_of_layers(h100, system, design):
    d, full = design(h100, system, GPT_OSS, FLASH), design(h100, system, FULL, FLASH)
    w, s = 128, 4096
    keys = 0.5 * (s / 2) + 0.5 * (w - w * (w - 1) / (2 * s))  # half the 36 layers windowed
    assert float(attention_core_flops(d)[0]) == pytest.approx(float(attention_core_flops(full)[0]) * keys / (s / 2),
                                                              rel=1e-12)
    layer, core = layer_forward_flops_per_sequence(d)
    layer_full, core_full = layer_forward_flops_per_sequence(full)
    assert float(core[0]) == pytest.approx(float(core_full[0]) * keys / (s / 2), rel=1e-12)
    assert float(layer_full[0] - layer[0]) == pytest.approx(float(core_full[0] - core[0]), rel=1e-9)


def test_unfused_attention_computes_the_whole_square_whatever_the_window(h100, system, design):
    unfused = MappingSpec(flash_attention=False, global_batch_size=8)
    assert float(attention_core_flops(design(h100, system, GPT_OSS, unfused))[0]) == \
        float(attention_core_flops(design(h100, system, FULL, unfused))[0])


def test_a_window_speeds_the_step(h100, system, run):
    windowed, full = (float(run(h100, system, m, FLASH).step_time_s[0]) for m in (GPT_OSS, FULL))
    assert windowed < full


@pytest.mark.parametrize("field, value", [("window_size", -1), ("window_attn_skip_freq", -2), ("window_size", 1.5)])
def test_bad_window_fields_name_the_field(field, value):
    with pytest.raises(SpecError) as info:
        dataclasses.replace(GPT_OSS, **{field: value}).validate()
    assert info.value.field == field


def test_softmax_exponentials_at_the_special_function_units_rate():
    exps, rate = t(4e9, 4e9), t(3.87e12, 0.0)  # the second accelerator states no rate: no term
    assert float(softmax_exp_time_s(exps, rate)[0]) == pytest.approx(4e9 / 3.87e12, rel=1e-12)
    assert float(softmax_exp_time_s(exps, rate)[1]) == 0.0


def test_the_exponentials_lengthen_each_layers_forward_and_backward(h100, make_system, design):
    small = dataclasses.replace(FULL, num_layers=2, num_experts=1, top_k=1, vocab_size=32000)
    m = MappingSpec(flash_attention=True, global_batch_size=4, micro_batch_size=1)
    one = make_system(1)
    # the attention tile time, charged with the special-function units too, held out: the exponentials alone
    eff = dataclasses.replace(DEFAULT_EFFICIENCY, flash_attention_fwd_tile_s=0.0, flash_attention_bwd_tile_s=0.0)
    base = evaluate(design(h100, one, small, m), eff)
    d = design(dataclasses.replace(h100, peak_tera_exp_per_s=3.87), one, small, m)
    with_exp = evaluate(d, eff)
    per_layer = float(attention_score_elements(d)[0]) / 3.87e12  # one exponential a score, each pass
    for part in ("forward_compute", "backward_compute"):
        added = float(with_exp.time_breakdown_s[part][0] - base.time_breakdown_s[part][0])
        assert added == pytest.approx(4 * 2 * per_layer, rel=1e-9)  # 4 micro-batches x 2 layers


def test_one_exponential_a_score_of_the_causal_kernel(h100, system, design):
    d = design(h100, system, FULL, FLASH)
    s, heads = 4096, 64
    assert float(attention_score_elements(d)[0]) == s * heads * s / 2  # b = 1, tp = cp = 1
    # the matmul work per score: 2 x 64 (QK^T) + 2 x 64 (PV) FLOPs
    assert float(attention_core_flops(d)[0]) == pytest.approx(float(attention_score_elements(d)[0]) * 4 * 64, rel=1e-12)


def test_presets_state_the_sourced_exponential_rates():
    rates = {name: load_preset("hardware", name).peak_tera_exp_per_s
             for name in ("a100-sxm-80gb", "h100-sxm-80gb", "b200", "gb200", "b300", "gb300")}
    assert rates["h100-sxm-80gb"] == pytest.approx(3.9, abs=0.05)  # FlashAttention-3 sec. 3.1
    for ultra, base in (("b300", "b200"), ("gb300", "gb200")):  # Blackwell Ultra: 32 a clock per SM, not 16
        units = load_preset("hardware", ultra).compute_units / load_preset("hardware", base).compute_units
        assert rates[ultra] / rates[base] == pytest.approx(2.0 * units, rel=0.01)


def test_blackwell_ultras_doubled_exponentials_are_all_that_speeds_bf16_attention(system, run):
    b200 = load_preset("hardware", "b200")
    # B300 as its preset but with B200's HBM bandwidth (7.7 vs 8 TB/s), the one other field a bf16 step reads
    b300 = dataclasses.replace(load_preset("hardware", "b300"), hbm_bw_gb_per_s=b200.hbm_bw_gb_per_s)
    m = MappingSpec(flash_attention=True, precision="bf16", global_batch_size=8)
    t200, t300 = (float(run(a, system, FULL, m).step_time_s[0]) for a in (b200, b300))
    assert t300 < t200
    same_sfu = dataclasses.replace(b300, peak_tera_exp_per_s=b200.peak_tera_exp_per_s)
    assert float(run(same_sfu, system, FULL, m).step_time_s[0]) == pytest.approx(t200, rel=1e-12)


def test_a_power_limit_slows_the_exponentials_with_the_clock(h100):
    h = dataclasses.replace(h100, peak_tera_exp_per_s=3.87)
    fields = {"peak_exp_per_s": 3.87e12, "static_power_w": 50.0, "tdp_w": 700.0, "sram_energy_j_per_byte": 1.0,
              **{f"peak_{f}_flops_per_s": 1.0 for f in ("fp32", "tf32", "fp16", "bf16", "fp8", "fp4")},
              **{f"flop_energy_{f}_j": 1.0 for f in ("fp32", "tf32", "fp16", "bf16", "fp8", "fp4")}}
    capped = apply_operating_point(fields, dataclasses.replace(h, power_limit_w=400.0))
    clock, _ = capped_operating_point(h, 400.0)
    assert capped["peak_exp_per_s"] == pytest.approx(3.87e12 * clock, rel=1e-12) and clock < 1.0


def test_derived_chips_have_sixteen_exponentials_a_clock_per_unit():
    derived = derive_chip(ChipSpec())
    units = derived.accelerator["compute_units"]
    clock = derived.operating["clock_hz"]
    assert torch.allclose(derived.accelerator["peak_exp_per_s"], units * 16.0 * clock, rtol=1e-12)


def test_no_sfu_rate_leaves_attention_as_before(h100, system, design):
    d = design(h100, system, FULL, FLASH)
    assert float(d.peak_exp_per_s[0]) == 0.0  # the test accelerator states none
    r = evaluate(d)
    with_rate = evaluate(design(dataclasses.replace(h100, peak_tera_exp_per_s=3.87), system, FULL, FLASH))
    assert float(with_rate.step_time_s[0]) > float(r.step_time_s[0])


def test_a_design_space_can_vary_the_exponential_rate(h100, system, design):
    from analytical.space import DesignSpace, Parameter

    template = design(dataclasses.replace(h100, peak_tera_exp_per_s=3.87), system, FULL, FLASH)
    space = DesignSpace("sfu", (Parameter("peak_exp_per_s", "continuous", 2e12, 16e12, log=True),), template).validate()
    u = torch.linspace(0.0, 1.0, 5, dtype=torch.float64).unsqueeze(-1)
    times = space.evaluate(u).step_time_s
    assert torch.all(times[1:] < times[:-1])  # more exponentials a second: never slower, here faster
