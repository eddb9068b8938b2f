"""The analytical model's kernel terms against the same kernels timed on this GPU.

    python experiments/benchmarks/bench_kernels.py [--hardware h200-sxm-141gb] [--json out.json]

Needs only torch, PyYAML and `analytical/` (no Hydra, no MLflow), so it runs on a bare GPU machine with
`PYTHONPATH=.`. For a few layers of published recipes (Llama 3 8B / 70B / 405B, GPT-3 175B at their
tensor-parallel widths, gpt-oss-120b and Qwen3-235B-A22B at expert-parallel 8; BF16 and FP8), it takes the
model's own GEMM table of one layer (`analytical.step.workload.layer_gemms`: forward, input-gradient and
weight-gradient products) and its fused-attention terms, and prints each kernel's predicted time
(`kernels.gemm_time_s`, `kernels.flash_attention_time_s` + `softmax_exp_time_s` + `attention_tiles_time_s`, with
the shipped `Efficiency` and the hardware preset's datasheet fields) beside the median time of the same product
on this device:
- 16-bit GEMMs: `torch.matmul` in bf16 (cuBLAS); a layer's expert products (bf16 only): `torch.bmm` over the
  rank's local experts, each with its share of tokens under balanced routing (a grouped GEMM's best case);
- FP8 GEMMs: `torch._scaled_mm` with e4m3 operands and per-tensor scales, bf16 out (cuBLASLt, the library
  Transformer Engine's FP8 GEMMs call);
- attention: `scaled_dot_product_attention`, causal, bf16, forward and forward + backward, with the cuDNN
  backend (the model's `attention_kernel=native`, Transformer Engine's fused attention) and the flash
  backend (`attention_kernel=fa2`, FlashAttention-2). K and V carry all the query heads (grouped-query
  attention's shared heads repeated). The time is the profiler's device time of the kernels (the CUDA-event
  wall time of back-to-back calls is kept in the JSON).
Then the board's power and SM clock (nvidia-smi, every 100 ms) while a large bf16 GEMM, a large FP8 GEMM, a
large copy and Llama 3 8B's attention at 8k tokens (forward + backward) each run back to back for a few seconds,
and while nothing runs, beside the energy model's board power at the rate measured (static power when idle).

Last, the attention times fitted as FLOPs at one rate plus a fixed time a (query tile, head) on an SM, per kernel
and pass, beside the shipped `Efficiency.flash_attention_fwd_tile_s` / `_bwd_tile_s` (this fit's, on one H200).
Nothing else of the model comes from these timings: they check the kernel layer of a model fitted on whole steps.
An isolated kernel has the whole GPU and a warm L2: an upper bound on a step's kernel speed. Prints a table, then
ONE JSON line (the last line of stdout).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
import yaml

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from analytical import AcceleratorSpec, MappingSpec, ModelSpec, SystemSpec, single_design  # noqa: E402
from analytical.design import per_precision  # noqa: E402
from analytical.step.attention import attention_query_tiles, head_dim  # noqa: E402
from analytical.step.efficiency import Efficiency  # noqa: E402
from analytical.step import energy  # noqa: E402
from analytical.step.kernels import (attention_peak, attention_tiles_time_s, flash_attention_time_s,  # noqa: E402
                                     gemm_hbm_bytes, gemm_peak_fraction, gemm_sram_bytes, gemm_time_s,
                                     softmax_exp_time_s)
from analytical.step.workload import (GEMM_SLOTS, activation_bytes_per_element, attention_core_flops,  # noqa: E402
                                      attention_score_elements, flash_qkvo_bytes, gemm_bytes_per_element,
                                      layer_gemms)

# (model preset, tp, micro-batch, sequence, ep): the layers of published recipes. Llama 3 8B at tp 1 and 70B at
# tp 4 as torchtitan's and NeMo's H100 tables run them, 405B at tp 8 (NeMo / DGX Cloud), GPT-3 175B at
# tp 4, mbs 2, seq 2048 (NeMo 24.12's FP8 recipe, issue 10's case). Two MoE layers at their Megatron-Bridge
# layouts (experiments/validation/modern_runs.csv): gpt-oss-120b at tp 1, mbs 4, seq 4096, ep 8 (the 26.04.01
# B200 BF16 row) and Qwen3-235B-A22B at tp 1, mbs 1, seq 4096, ep 8 (the 25.11 B200 MXFP8 row), whose expert
# products run as one batched GEMM of the rank's local experts under balanced routing.
CASES = (("llama3-8b", 1, 1, 8192, 1), ("llama3-70b", 4, 1, 8192, 1), ("llama3-405b", 8, 1, 8192, 1),
         ("gpt3-175b", 4, 2, 2048, 1), ("gpt-oss-120b", 1, 4, 4096, 8), ("qwen3-235b-a22b", 1, 1, 4096, 8))
# the preset of a GPU by its CUDA name (the first match: "NVIDIA GB200" holds "B200", so the Grace parts come first;
# a B300 names itself "NVIDIA B300 SXM6 AC", NVIDIA/cosmos-framework#114); a PCIe or NVL card has other clocks and
# power, so it names its own preset with --hardware
GPU_PRESETS = (("H200", "h200-sxm-141gb"), ("H100 80GB HBM3", "h100-sxm-80gb"), ("GB200", "gb200"), ("GB300", "gb300"),
               ("B200", "b200"), ("B300", "b300"), *((f"A100-SXM4-{m}GB", f"a100-sxm-{m}gb") for m in (40, 80)))


def preset_for_gpu(name: str) -> str | None:
    """The hardware preset of a GPU by its CUDA name (`GPU_PRESETS`); None for a PCIe or NVL card or one not listed."""
    if "PCIe" in name or "NVL" in name:
        return None
    return next((p for key, p in GPU_PRESETS if key in name), None)


def preset(group: str, name: str) -> dict:
    return yaml.safe_load((ROOT / "conf" / group / f"{name}.yaml").read_text())


def design(hardware: str, model: str, tp: int, mbs: int, seq: int, precision: str, kernel="native", ep=1, window=0):
    """One layer's design on `tp` x `ep` devices (dp = ep), attending in full (SDPA runs no window) or `window` keys."""
    accelerator = AcceleratorSpec(**preset("hardware", hardware))
    spec = ModelSpec(**{**preset("model", model), "seq_length": seq, "window_size": window, "window_attn_skip_freq": 0})
    system = SystemSpec(name="one-node", num_devices=tp * ep, devices_per_node=8, scale_up_domain=8)
    mapping = MappingSpec(name="bench", tp=tp, pp=1, dp=ep, ep=ep, micro_batch_size=mbs, global_batch_size=mbs * ep,
                          precision=precision, sequence_parallel=tp > 1, flash_attention=True,
                          attention_kernel=kernel)
    return single_design(accelerator, system, spec, mapping)


def predicted_gemm_s(d, m: int, n: int, k: int, eff: Efficiency, count: int = 1) -> float:
    """`kernels.gemm_time_s` of `count` (m x k) @ (k x n) products as `analytical.step.model` calls it."""
    t = lambda x: torch.tensor([float(x)], dtype=d.tp.dtype)  # noqa: E731
    time_s = gemm_time_s(t(m), t(n), t(k), t(count), per_precision(d, "peak_", "_flops_per_s"), d.compute_units,
                         d.tile_m, d.tile_n, d.hbm_bw_bytes_per_s, d.sram_bw_bytes_per_s, d.kernel_launch_s,
                         gemm_bytes_per_element(d), eff, gemm_peak_fraction(d, eff))
    return float(time_s)


def predicted_attention_s(d, eff: Efficiency) -> tuple[float, float]:
    """Forward and backward time of one layer's fused attention kernel, as `model._layer_compute` prices them."""
    core = attention_core_flops(d)
    qkvo = flash_qkvo_bytes(d, activation_bytes_per_element(d))
    peak = attention_peak(d, per_precision(d, "peak_", "_flops_per_s"))
    exp_s = softmax_exp_time_s(attention_score_elements(d), d.peak_exp_per_s)
    tile_s = lambda x: attention_tiles_time_s(attention_query_tiles(d), x, d.compute_units)  # noqa: E731
    fwd = flash_attention_time_s(core, qkvo, peak, d.hbm_bw_bytes_per_s, d.kernel_launch_s, eff) + exp_s
    bwd = flash_attention_time_s(2.5 * core, 2.0 * qkvo, peak, d.hbm_bw_bytes_per_s, d.kernel_launch_s, eff) + exp_s
    return float(fwd + tile_s(eff.flash_attention_fwd_tile_s)), float(bwd + tile_s(eff.flash_attention_bwd_tile_s))


def fit_tile_time(attention: list[dict], compute_units: int) -> dict:
    """Per kernel and pass (two shapes or more), the least-squares fit (relative errors) of the measured time to
    FLOPs / rate + query tiles x tile time / SMs: the rate (TFLOP/s), one SM's time a tile and the largest |error|."""
    out = {}
    for kernel in ("native", "fa2"):
        rows = [r for r in attention if r["kernel"] == kernel]
        if len(rows) < 2:
            continue
        for pass_, scale in (("fwd", 1.0), ("bwd", 2.5)):
            x = np.array([[scale * r["flops_fwd"], r["query_tiles"]] for r in rows])
            y = np.array([r[f"measured_{pass_}_s"] for r in rows])
            (per_flop, per_tile), *_ = np.linalg.lstsq(x / y[:, None], np.ones_like(y), rcond=None)
            error = np.abs(x @ np.array([per_flop, per_tile]) / y - 1.0)
            out[f"{kernel}_{pass_}"] = {"tflops": 1e-12 / per_flop, "tile_s": per_tile * compute_units,
                                        "max_abs_error": float(error.max()), "n": len(rows)}
    return out


def timed_s(fn, device: torch.device, repeats: int) -> tuple[float, float | None]:
    """`(wall, device)` seconds of one call. Wall: the median of `repeats` trials of 5 back-to-back calls
    each (CUDA events on a GPU), after 3 warm-up calls. Device: the GPU's kernel time of one call (the
    profiler's self device time of 5 calls over 5), the time the model prices; a host slower than the
    kernels (a small attention call, Python and autograd in between) shows only in the wall. None on a CPU."""
    for _ in range(3):
        fn()
    trials = []
    for _ in range(repeats):
        if device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(5):
                fn()
            end.record()
            end.synchronize()
            trials.append(start.elapsed_time(end) / 5e3)
        else:
            begin = time.perf_counter()
            for _ in range(5):
                fn()
            trials.append((time.perf_counter() - begin) / 5)
    if device.type != "cuda":
        return statistics.median(trials), None
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(5):
            fn()
        torch.cuda.synchronize(device)
    kernel_us = sum(getattr(e, "self_device_time_total", 0.0) for e in prof.key_averages())
    return statistics.median(trials), kernel_us / 5e6


def gemm_call(m: int, n: int, k: int, fp8: bool, device: torch.device, count: int = 1):
    """One (m x k) @ (k x n) product; `count` > 1 (bf16 only): one batched GEMM of `count` of them (cuBLAS
    strided-batched, the balanced grouped GEMM of a rank's local experts)."""
    if count > 1:
        a = torch.randn(count, m, k, device=device, dtype=torch.bfloat16)
        b = torch.randn(count, n, k, device=device, dtype=torch.bfloat16).transpose(1, 2)
        return lambda: torch.bmm(a, b)
    a = torch.randn(m, k, device=device, dtype=torch.bfloat16)
    b = torch.randn(n, k, device=device, dtype=torch.bfloat16)
    if not fp8:
        bt = b.t()
        return lambda: torch.matmul(a, bt)
    a8, b8 = a.to(torch.float8_e4m3fn), b.to(torch.float8_e4m3fn).t()  # b column-major, as cuBLASLt needs
    one = torch.ones((), device=device, dtype=torch.float32)
    return lambda: torch._scaled_mm(a8, b8, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)


def attention_call(d, backward: bool, device: torch.device):
    """SDPA on the layer's local heads (bf16, causal); with backward, forward + backward."""
    heads = int(d.num_heads.item() / d.tp.item())
    shape = (int(d.micro_batch_size.item()), heads, int(d.seq_length.item() / d.cp.item()), int(head_dim(d).item()))
    q, k, v = (torch.randn(shape, device=device, dtype=torch.bfloat16, requires_grad=backward) for _ in range(3))
    grad = torch.randn(shape, device=device, dtype=torch.bfloat16)

    def run():
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        if backward:
            torch.autograd.grad(out, (q, k, v), grad)
    return run


def guarded(fn, what: str):
    """`fn()`, or None with the error printed: one kernel this torch or GPU cannot run skips its row only."""
    try:
        return fn()
    except (RuntimeError, NotImplementedError) as exc:
        print(f"skipped {what}: {type(exc).__name__}: {str(exc).splitlines()[0]}")
        return None


def backend(kernel: str, device: torch.device):
    from torch.nn.attention import SDPBackend, sdpa_kernel
    if device.type != "cuda":
        return sdpa_kernel(SDPBackend.MATH)
    return sdpa_kernel(SDPBackend.CUDNN_ATTENTION if kernel == "native" else SDPBackend.FLASH_ATTENTION)


class PowerLog:
    """nvidia-smi's power draw (W) and SM clock (MHz) every 100 ms, in a thread, while the block runs."""

    QUERY = "power.draw,clocks.sm,temperature.gpu,power.limit"

    def __init__(self):
        self.rows: list[list[float]] = []
        self.error = ""

    def __enter__(self):
        try:
            self.proc = subprocess.Popen(["nvidia-smi", f"--query-gpu={self.QUERY}", "--format=csv,noheader,nounits",
                                          "-lms", "100"], stdout=subprocess.PIPE, text=True)
        except OSError as exc:
            self.proc, self.error = None, str(exc)
            return self
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()
        return self

    def _read(self):
        for line in self.proc.stdout:
            try:
                self.rows.append([float(x) for x in line.split(",")])
            except ValueError:
                continue

    def __exit__(self, *exc):
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait()

    def summary(self, skip_s: float = 1.0) -> dict:
        rows = self.rows[int(skip_s * 10):]  # the first second: the clocks ramping
        if not rows:
            return {"samples": 0, "error": self.error or "no readings"}
        col = lambda i: statistics.median(r[i] for r in rows)  # noqa: E731
        return {"samples": len(rows), "power_w": col(0), "power_max_w": max(r[0] for r in rows),
                "sm_clock_mhz": col(1), "temperature_c": col(2), "power_limit_w": col(3)}


def predicted_power_w(d, flops: float, sram_bytes: float, hbm_bytes: float, seconds: float) -> float:
    """The energy model's board power for one kernel running back to back for `seconds` on one device, from the
    terms `analytical.step.energy.step_energy` adds up: compute (its clocked share of the units' peak power
    while a kernel runs, the rest per FLOP), SRAM and HBM bytes, and static power."""
    one = torch.ones(1, dtype=d.tp.dtype)
    joules = (energy.compute_energy_j(flops * one, energy.flop_energy_for_precision(d),
                                      energy.units_power_at_peak_w(d), seconds * one, one)
              + energy.sram_energy_j(sram_bytes * one, d.sram_energy_j_per_byte)
              + energy.hbm_energy_j(hbm_bytes * one, d.hbm_energy_j_per_byte)
              + energy.static_energy_j(d.static_power_w, seconds * one, one))
    return float(joules / seconds)


def sustained(kind: str, d, device: torch.device, seconds: float, size: int) -> dict:
    """A kernel back to back for `seconds`: a size^3 GEMM (`bf16`, `fp8`), a copy of size^2 fp32 elements
    (`copy`), the fused attention forward + backward of `d` (`attention`, cuDNN) or no kernel at all (`idle`,
    priced at static power): its rate, nvidia-smi's power and clock, and the energy model's power at the measured
    rate."""
    backend_ = None
    if kind == "idle":
        call = lambda: time.sleep(0.01)  # noqa: E731
        flops, sram, hbm = 0.0, 0.0, 0.0
    elif kind == "attention":
        call, backend_ = attention_call(d, True, device), backend("native", device)
        qkvo = flash_qkvo_bytes(d, activation_bytes_per_element(d))
        flops, sram, hbm = 3.5 * float(attention_core_flops(d)), 0.0, 3.0 * float(qkvo)  # fwd + bwd (2.5 x)
    elif kind == "copy":
        src = torch.empty(size * size, device=device, dtype=torch.float32)
        dst = torch.empty_like(src)
        call = lambda: dst.copy_(src)  # noqa: E731
        flops, sram, hbm = 0.0, 0.0, 8.0 * size * size  # read and written once
    else:
        call = gemm_call(size, size, size, kind == "fp8", device)
        t = lambda x: torch.tensor([float(x)], dtype=d.tp.dtype)  # noqa: E731
        elem = gemm_bytes_per_element(d)
        flops = 2.0 * size**3
        sram = float(gemm_sram_bytes(t(size), t(size), t(size), t(1), d.tile_m, d.tile_n, elem))
        hbm = float(gemm_hbm_bytes(t(size), t(size), t(size), t(1), elem))
    with backend_ if backend_ is not None else contextlib.nullcontext():
        call()
        torch.cuda.synchronize(device)
        with PowerLog() as log:
            begin, calls = time.perf_counter(), 0
            while time.perf_counter() - begin < seconds:
                for _ in range(10):
                    call()
                torch.cuda.synchronize(device)
                calls += 10
            per_call_s = (time.perf_counter() - begin) / calls
    predicted = (float(d.static_power_w) if kind == "idle"
                 else predicted_power_w(d, flops, sram, hbm, per_call_s))
    return {"kernel": kind, "size": size, "tflops": flops / per_call_s / 1e12, "hbm_tb_per_s": hbm / per_call_s / 1e12,
            "predicted_power_w": predicted, **log.summary()}


def measure_gemms(hardware, cases, precisions, device, repeats, eff) -> list[dict]:
    rows = []
    for model, tp, mbs, seq, ep in cases:
        for precision in precisions:
            d = design(hardware, model, tp, mbs, seq, precision, ep=ep)
            table = layer_gemms(d)
            for pass_, g in zip(("fwd", "dgrad", "wgrad"), (table, *table.backward())):
                for slot, name in enumerate(GEMM_SLOTS):
                    m, n, k = (int(getattr(g, f)[0, slot]) for f in ("m", "n", "k"))
                    count = int(g.count[0, slot]) if name not in ("attention_scores", "attention_values") else 0
                    if m * n * k * count == 0 or (count > 1 and precision == "fp8"):
                        continue  # empty and attention slots (timed as fused attention); no batched fp8 path here
                    got = guarded(lambda: timed_s(gemm_call(m, n, k, precision == "fp8", device, count), device,
                                                  repeats), f"{model} {precision} {pass_} {name}")
                    if got is None:
                        continue
                    wall, kernel = got
                    measured = kernel or wall
                    rows.append({"model": model, "tp": tp, "ep": ep, "precision": precision, "pass": pass_,
                                 "slot": name, "m": m, "n": n, "k": k, "count": count,
                                 "predicted_s": predicted_gemm_s(d, m, n, k, eff, count),
                                 "measured_s": measured, "wall_s": wall,
                                 "measured_tflops": 2.0 * m * n * k * count / measured / 1e12})
    return rows


def measure_attention(hardware, cases, device, repeats, eff) -> list[dict]:
    rows = []
    for model, tp, mbs, seq, ep in cases:
        for kernel in ("native", "fa2"):
            d = design(hardware, model, tp, mbs, seq, "bf16", kernel, ep)
            fwd_p, bwd_p = predicted_attention_s(d, eff)
            with backend(kernel, device):
                fwd = guarded(lambda: timed_s(attention_call(d, False, device), device, repeats),
                              f"{model} seq {seq} attention {kernel}")
                both = guarded(lambda: timed_s(attention_call(d, True, device), device, repeats),
                               f"{model} seq {seq} attention {kernel} backward")
            if fwd is None or both is None:
                continue
            fwd_m, both_m = fwd[1] or fwd[0], both[1] or both[0]
            rows.append({"model": model, "tp": tp, "mbs": mbs, "seq": seq, "kernel": kernel,
                         "flops_fwd": float(attention_core_flops(d)), "query_tiles": float(attention_query_tiles(d)),
                         "predicted_fwd_s": fwd_p, "measured_fwd_s": fwd_m, "wall_fwd_s": fwd[0],
                         "predicted_bwd_s": bwd_p, "measured_bwd_s": both_m - fwd_m, "wall_fwd_bwd_s": both[0],
                         "measured_fwd_tflops": float(attention_core_flops(d)) / fwd_m / 1e12})
    return rows


def summarize(gemms: list[dict], attention: list[dict]) -> dict:
    """Median and range of predicted / measured for each kind of kernel; each layer's GEMMs summed."""
    def ratio(rows, predicted, measured):
        rs = [r[predicted] / r[measured] for r in rows]
        return {"median": statistics.median(rs), "min": min(rs), "max": max(rs), "n": len(rs)} if rs else None
    out = {f"gemm_{p}": ratio([r for r in gemms if r["precision"] == p and r["ep"] == 1], "predicted_s", "measured_s")
           for p in ("bf16", "fp8")}
    out["expert_gemm_bf16"] = ratio([r for r in gemms if r["count"] > 1], "predicted_s", "measured_s")
    for kernel in ("native", "fa2"):
        rows = [r for r in attention if r["kernel"] == kernel]
        out[f"attention_{kernel}_fwd"] = ratio(rows, "predicted_fwd_s", "measured_fwd_s")
        out[f"attention_{kernel}_bwd"] = ratio(rows, "predicted_bwd_s", "measured_bwd_s")
    layer = lambda r: f"{r['model']} {r['precision']}"  # noqa: E731
    total = lambda key, field: sum(r[field] for r in gemms if layer(r) == key)  # noqa: E731
    out["layer_gemms_summed"] = {k: total(k, "predicted_s") / total(k, "measured_s") for k in map(layer, gemms)}
    return {k: v for k, v in out.items() if v}


def print_tables(gemms: list[dict], attention: list[dict], power: list[dict]) -> None:
    print(f"\n{'model':15} {'tp':>2} {'prec':4} {'pass':5} {'slot':14} {'m':>6} {'n':>6} {'k':>6} {'count':>5} "
          f"{'pred ms':>8} {'meas ms':>8} {'pred/meas':>9} {'TFLOP/s':>8}")
    for r in gemms:
        print(f"{r['model']:15} {r['tp']:>2} {r['precision']:4} {r['pass']:5} {r['slot']:14} {r['m']:>6} {r['n']:>6} "
              f"{r['k']:>6} {r['count']:>5} {r['predicted_s'] * 1e3:>8.3f} {r['measured_s'] * 1e3:>8.3f} "
              f"{r['predicted_s'] / r['measured_s']:>9.3f} {r['measured_tflops']:>8.1f}")
    print(f"\n{'model':15} {'tp':>2} {'mbs':>3} {'seq':>6} {'kernel':6} {'pred fwd':>9} {'meas fwd':>9} {'ratio':>6} "
          f"{'pred bwd':>9} {'meas bwd':>9} {'ratio':>6} {'fwd TFLOP/s':>11}  (ms; wall fwd, fwd+bwd)")
    for r in attention:
        print(f"{r['model']:15} {r['tp']:>2} {r['mbs']:>3} {r['seq']:>6} {r['kernel']:6} "
              f"{r['predicted_fwd_s'] * 1e3:>9.3f} {r['measured_fwd_s'] * 1e3:>9.3f} "
              f"{r['predicted_fwd_s'] / r['measured_fwd_s']:>6.3f} {r['predicted_bwd_s'] * 1e3:>9.3f} "
              f"{r['measured_bwd_s'] * 1e3:>9.3f} {r['predicted_bwd_s'] / r['measured_bwd_s']:>6.3f} "
              f"{r['measured_fwd_tflops']:>11.1f}  ({r['wall_fwd_s'] * 1e3:.3f}, {r['wall_fwd_bwd_s'] * 1e3:.3f})")
    for p in power:
        print(f"sustained {p['kernel']} (size {p['size']}): {p['tflops']:.0f} TFLOP/s, {p['hbm_tb_per_s']:.2f} TB/s; "
              f"measured {p.get('power_w', float('nan')):.0f} W at {p.get('sm_clock_mhz', float('nan')):.0f} MHz "
              f"(limit {p.get('power_limit_w', float('nan')):.0f} W), the energy model {p['predicted_power_w']:.0f} W")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--hardware", default=None, help="hardware preset (default: from the GPU's name)")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--seq", type=int, default=None, help="every case's sequence length (a quick CPU try)")
    parser.add_argument("--cases", default=",".join(c[0] for c in CASES))
    parser.add_argument("--attention-seqs", default="1024,2048,4096,8192,16384",
                        help="Llama 3 8B's attention (tp 1, mbs 1) also at these sequence lengths")
    parser.add_argument("--power-seconds", type=float, default=6.0)
    parser.add_argument("--json", default=None, help="also write the JSON line to this file")
    args = parser.parse_args()
    device = torch.device(args.device)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    hardware = args.hardware or preset_for_gpu(name)
    known = sorted(f.stem for f in (ROOT / "conf" / "hardware").glob("*.yaml"))
    if hardware is None or hardware not in known:
        what = f"{hardware!r} is not a preset" if hardware else f"no preset known for {name!r}"
        parser.error(f"--hardware: {what}; allowed {', '.join(known)}")
    fp8_ok = device.type == "cuda" and torch.cuda.get_device_capability(device) >= (8, 9)
    eff = Efficiency()
    print(f"torch {torch.__version__} on {name}; model preset {hardware}")
    cases = [(m, tp, mbs, args.seq or seq, ep) for m, tp, mbs, seq, ep in CASES if m in args.cases.split(",")]
    gemms = measure_gemms(hardware, cases, ("bf16", "fp8") if fp8_ok else ("bf16",), device, args.repeats, eff)
    sweep = [("llama3-8b", 1, 1, int(s), 1) for s in args.attention_seqs.split(",") if s]
    attention = measure_attention(hardware, cases + [c for c in sweep if c not in cases], device, args.repeats, eff)
    power = []
    if device.type == "cuda" and args.power_seconds > 0:
        kinds = ("bf16", "fp8", "copy", "attention", "idle") if fp8_ok else ("bf16", "copy", "attention", "idle")
        power = [sustained(k, design(hardware, "llama3-8b", 1, 1, 8192, "fp8" if k == "fp8" else "bf16"), device,
                           args.power_seconds, 8192 if k != "copy" else 32768) for k in kinds]
    print_tables(gemms, attention, power)
    summary = summarize(gemms, attention)
    print("\npredicted / measured:", json.dumps(summary))
    tiles = fit_tile_time(attention, int(design(hardware, "llama3-8b", 1, 1, 1024, "bf16").compute_units))
    for key, fit in tiles.items():
        shipped = getattr(eff, f"flash_attention_{key.split('_')[1]}_tile_s")
        print(f"attention {key}: {fit['tflops']:.0f} TFLOP/s + {fit['tile_s'] * 1e6:.2f} us an SM a (query tile, head) "
              f"(shipped {shipped * 1e6:.1f} us; {fit['n']} shapes, largest error {100 * fit['max_abs_error']:.0f} %)")
    out = json.dumps({"device": name, "torch": torch.__version__, "hardware": hardware, "gemms": gemms,
                      "attention": attention, "summary": summary, "attention_tile_fit": tiles, "power": power})
    if args.json:
        Path(args.json).write_text(out + "\n")
    print(out)


if __name__ == "__main__":
    main()
