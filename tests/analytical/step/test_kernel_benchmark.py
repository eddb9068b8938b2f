"""experiments/benchmarks/bench_kernels.py prices each kernel exactly as the model does, and runs without a GPU."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from analytical.codes import PRECISION_CODES
from analytical.design import memoizing, per_precision
from analytical.step.efficiency import DEFAULT_EFFICIENCY
from analytical.step.model import _layer_compute
from analytical.step.workload import GEMM_SLOTS, activation_bytes_per_element, attention_core_flops, layer_gemms

ROOT = Path(__file__).resolve().parents[3]
BENCH = ROOT / "experiments" / "benchmarks" / "bench_kernels.py"


@pytest.fixture(scope="module")
def bench(load_script):
    return load_script(BENCH)


@pytest.mark.parametrize("precision", ["bf16", "fp8"])
@pytest.mark.parametrize("kernel", ["native", "fa2"])
def test_the_benchmark_prices_a_layers_kernels_as_the_model(bench, precision, kernel):
    d = bench.design("h100-sxm-80gb", "llama3-70b", 4, 1, 8192, precision, kernel)
    assert int(d.precision[0]) == PRECISION_CODES[precision]
    eff = DEFAULT_EFFICIENCY
    m = memoizing(d)
    gemms = layer_gemms(m)
    layer = _layer_compute(m, gemms, per_precision(m, "peak_", "_flops_per_s"), activation_bytes_per_element(m), eff)
    dgrad, wgrad = gemms.backward()
    live = 0
    for slot, _ in enumerate(GEMM_SLOTS):
        shape = [int(getattr(gemms, f)[0, slot]) for f in ("m", "n", "k")]
        if shape[0] * shape[1] * shape[2] == 0:
            continue
        live += 1
        ours = bench.predicted_gemm_s(d, *shape, eff)
        assert ours == pytest.approx(float(layer.fwd_slots[0, slot]), rel=1e-12)
        backward = sum(bench.predicted_gemm_s(d, *(int(getattr(g, f)[0, slot]) for f in ("m", "n", "k")), eff)
                       for g in (dgrad, wgrad))
        assert backward == pytest.approx(float(layer.bwd_slots[0, slot]), rel=1e-12)
    assert live == 4  # qkv, attention out, MLP up and down
    fwd, bwd = bench.predicted_attention_s(d, eff)
    assert fwd == pytest.approx(float(layer.flash_fwd[0]), rel=1e-12)
    assert bwd == pytest.approx(float(layer.flash_bwd[0]), rel=1e-12)


def test_the_benchmark_prices_a_rank_s_expert_products_as_the_model(bench):
    """gpt-oss-120b at expert-parallel 8: 16 local experts of 4,096 tokens each (16,384 tokens x top-4 x 8 ranks
    over 128 experts), priced as one batched product of 16, as the model's layer prices the slot."""
    d = bench.design("h200-sxm-141gb", "gpt-oss-120b", 1, 4, 4096, "bf16", ep=8)
    m = memoizing(d)
    gemms = layer_gemms(m)
    layer = _layer_compute(m, gemms, per_precision(m, "peak_", "_flops_per_s"), activation_bytes_per_element(m),
                           DEFAULT_EFFICIENCY)
    up = GEMM_SLOTS.index("ffn_up")
    shape = [int(getattr(gemms, f)[0, up]) for f in ("m", "n", "k", "count")]
    assert shape == [4096, 2 * 2880, 2880, 16]
    ours = bench.predicted_gemm_s(d, *shape[:3], DEFAULT_EFFICIENCY, shape[3])
    assert ours == pytest.approx(float(layer.fwd_slots[0, up]), rel=1e-12)
    one = bench.predicted_gemm_s(d, *shape[:3], DEFAULT_EFFICIENCY)
    assert 14 * one < ours <= 16 * one  # 16 products, batched: fuller last waves than one alone


def test_the_tile_fit_recovers_a_rate_and_a_tile_time(bench):
    """Rows timed at FLOPs / 500 TFLOP/s + tiles x 9 us / 132 SMs forward (backward: 2.5 x the FLOPs at 400 TFLOP/s
    + 30 us a tile) give back those numbers with no error; one shape is too few."""
    rows = [{"kernel": "native", "flops_fwd": f, "query_tiles": t,
             "measured_fwd_s": f / 500e12 + t * 9e-6 / 132, "measured_bwd_s": 2.5 * f / 400e12 + t * 30e-6 / 132}
            for f, t in ((8.6e9, 256), (5.5e11, 2048), (5.5e11, 8192), (2.7e11, 2048))]
    fit = bench.fit_tile_time(rows, 132)
    assert set(fit) == {"native_fwd", "native_bwd"}
    assert fit["native_fwd"]["tflops"] == pytest.approx(500, rel=1e-9)
    assert fit["native_fwd"]["tile_s"] == pytest.approx(9e-6, rel=1e-9)
    assert fit["native_bwd"]["tflops"] == pytest.approx(400, rel=1e-9)
    assert fit["native_bwd"]["tile_s"] == pytest.approx(30e-6, rel=1e-9)
    assert fit["native_fwd"]["max_abs_error"] < 1e-9 and fit["native_fwd"]["n"] == 4
    assert bench.fit_tile_time(rows[:1], 132) == {}


def test_the_benchmark_runs_on_a_cpu_and_ends_with_its_json_line(tmp_path):
    out = tmp_path / "kernels.json"
    run = subprocess.run([sys.executable, str(BENCH), "--device", "cpu", "--hardware", "h100-sxm-80gb", "--seq", "128",
                          "--repeats", "1", "--cases", "llama3-8b", "--attention-seqs", "256", "--json", str(out)],
                         capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert run.returncode == 0, run.stderr
    result = json.loads(run.stdout.strip().splitlines()[-1])
    assert result == json.loads(out.read_text())
    assert len(result["gemms"]) == 12 and {g["pass"] for g in result["gemms"]} == {"fwd", "dgrad", "wgrad"}
    assert {(a["seq"], a["kernel"]) for a in result["attention"]} == {(128, "native"), (128, "fa2"),
                                                                      (256, "native"), (256, "fa2")}
    for g in result["gemms"]:
        assert g["predicted_s"] > 0 and g["measured_s"] > 0
    assert result["power"] == []  # nvidia-smi readings only on a GPU
    assert "gemm_bf16" in result["summary"]


@pytest.mark.parametrize("extra, named", [([], "'cpu'"), (["--hardware", "h100-sxm-80gbx"], "'h100-sxm-80gbx'")])
def test_an_unknown_gpu_or_preset_is_one_named_error(extra, named):
    run = subprocess.run([sys.executable, str(BENCH), "--device", "cpu", *extra], capture_output=True, text=True,
                         timeout=120, cwd=ROOT)
    assert run.returncode == 2 and "--hardware" in run.stderr and named in run.stderr
    assert "h200-sxm-141gb" in run.stderr  # the allowed presets
    assert "Traceback" not in run.stderr


def test_the_benchmarks_power_is_the_energy_models_sum(bench):
    """A kernel that moves nothing draws the compute units' clocked power and static power; each FLOP and byte
    adds its energy over the kernel's time."""
    from analytical.chip.silicon import CLOCKED_SHARE
    from analytical.step.energy import units_power_at_peak_w

    d = bench.design("h100-sxm-80gb", "llama3-8b", 1, 1, 8192, "bf16")
    idle = CLOCKED_SHARE * float(units_power_at_peak_w(d)) + float(d.static_power_w)
    assert bench.predicted_power_w(d, 0.0, 0.0, 0.0, 2.0) == pytest.approx(idle, rel=1e-12)
    hbm = bench.predicted_power_w(d, 0.0, 0.0, 3e12, 1.0) - idle
    assert hbm == pytest.approx(3e12 * float(d.hbm_energy_j_per_byte), rel=1e-9)
    sram = bench.predicted_power_w(d, 0.0, 1e13, 0.0, 1.0) - idle
    assert sram == pytest.approx(1e13 * float(d.sram_energy_j_per_byte), rel=1e-9)


def test_a_gpu_takes_its_own_preset_by_name_and_a_pcie_card_none(bench):
    assert bench.preset_for_gpu("NVIDIA H100 80GB HBM3") == "h100-sxm-80gb"
    assert bench.preset_for_gpu("NVIDIA H200") == "h200-sxm-141gb"
    assert bench.preset_for_gpu("NVIDIA A100-SXM4-40GB") == "a100-sxm-40gb"
    assert bench.preset_for_gpu("NVIDIA A100-SXM4-80GB") == "a100-sxm-80gb"
    assert bench.preset_for_gpu("NVIDIA B200") == "b200"
    assert bench.preset_for_gpu("NVIDIA GB200") == "gb200"  # holds "B200": the Grace part is matched first
    assert bench.preset_for_gpu("NVIDIA GB300") == "gb300"
    assert bench.preset_for_gpu("NVIDIA B300 SXM6 AC") == "b300"
    assert bench.preset_for_gpu("NVIDIA H100 PCIe") is None  # other clocks and power than the SXM preset
    assert bench.preset_for_gpu("NVIDIA H200 NVL") is None
    assert bench.preset_for_gpu("NVIDIA L40S") is None


WINDOW_BENCH = ROOT / "experiments" / "benchmarks" / "bench_window_attention.py"


def test_the_window_benchmark_prices_a_windowed_layer_as_the_model(load_script):
    """Every layer of its windowed design attends through 128 keys: the model's fused attention there costs less
    than the full layer's, and more than its FLOPs' share (as many query tiles, each with its fixed time)."""
    bench = load_script(WINDOW_BENCH)
    from analytical.step.attention import attention_query_tiles, windowed_layer_fraction
    full = bench.design("h200-sxm-141gb", "gpt-oss-120b", 1, 4, 4096, "bf16")
    window = bench.windowed("h200-sxm-141gb", "gpt-oss-120b", 4, 4096)
    assert float(windowed_layer_fraction(window)[0]) == 1.0 and float(windowed_layer_fraction(full)[0]) == 0.0
    assert float(attention_query_tiles(window)[0]) == float(attention_query_tiles(full)[0])
    (full_fwd, full_bwd), (win_fwd, win_bwd) = (bench.predicted_attention_s(d, DEFAULT_EFFICIENCY)
                                                for d in (full, window))
    flops_share = float(attention_core_flops(window)[0] / attention_core_flops(full)[0])
    assert flops_share < 0.07
    assert flops_share < win_fwd / full_fwd < 0.5 and flops_share < win_bwd / full_bwd < 0.5


def test_the_window_benchmark_needs_a_gpu_and_says_so():
    run = subprocess.run([sys.executable, str(WINDOW_BENCH)], capture_output=True, text=True, timeout=120, cwd=ROOT,
                         env={**os.environ, "CUDA_VISIBLE_DEVICES": ""})
    assert run.returncode == 2 and "needs a CUDA GPU" in run.stderr and "Traceback" not in run.stderr
