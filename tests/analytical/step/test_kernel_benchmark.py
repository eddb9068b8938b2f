"""experiments/benchmarks/bench_kernels.py prices each kernel exactly as the model does, and runs without a GPU."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from analytical.codes import PRECISION_CODES
from analytical.design import memoizing, per_precision
from analytical.step.efficiency import DEFAULT_EFFICIENCY
from analytical.step.model import _layer_compute
from analytical.step.workload import GEMM_SLOTS, activation_bytes_per_element, layer_gemms

ROOT = Path(__file__).resolve().parents[3]
BENCH = ROOT / "experiments" / "benchmarks" / "bench_kernels.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("bench_kernels", BENCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


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
    assert bench.preset_for_gpu("NVIDIA H100 PCIe") is None  # other clocks and power than the SXM preset
    assert bench.preset_for_gpu("NVIDIA H200 NVL") is None
    assert bench.preset_for_gpu("NVIDIA L40S") is None
