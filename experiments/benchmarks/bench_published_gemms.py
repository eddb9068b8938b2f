"""The model's GEMM terms against NVIDIA's published GEMM benchmark on a B300 and an H200 NVL (CPU only).

    python experiments/benchmarks/bench_published_gemms.py [--json PATH]

Transformer Engine's "GEMM Profiling Tutorial" (NVIDIA/TransformerEngine, docs/examples/gemm_profiling/
gemm_profiling.rst, commit 8f2e635; merged with PR #2863, May 2026) times the twelve GEMMs of one layer of a
5B-parameter transformer (hidden 4096, MLP 16384 without a gate, micro-batch 31 x 512 tokens: M = 15,872) with
`benchmarks/gemm/benchmark_gemm.py` (CUDA events, 10 warm-up and 100 timed iterations) in BF16, FP8 with current
and with delayed per-tensor scaling, MXFP8 and NVFP4, two ways:

- pre-quantized: inputs quantized once before the timed loop, so the time is the GEMM kernel's alone (FP8
  delayed scaling always runs quantizing, so it has no kernel-only figure);
- autocast: what Transformer Engine does in training, each GEMM's inputs quantized before the call (both
  operands, every call: the weight's too, which training quantizes once per step), kernel + quantization.

The tables below are typed from that file (per-layer sums of the four forward, four input-gradient and four
weight-gradient GEMMs; the B300 forward also per GEMM). This benchmark prices the same GEMMs with the model's
own kernel term (`analytical.step.kernels.gemm_time_s`, called as `analytical.step.model` calls it, through
`bench_kernels.predicted_gemm_s`) and prints model / published:

- B300: the `b300` preset (HGX B300, the "NVIDIA B300 SXM6 AC" the tutorial ran on), absolute times;
- H200 NVL: no preset (the PCIe card's clocks, power and peaks differ from `h200-sxm-141gb`), so only the
  speedups over BF16 are compared, priced on `h200-sxm-141gb`: both parts are the same die with fp8 at twice
  the 16-bit rate, and a ratio of two GEMM times on one chip depends on its clock only through the
  per-tile time.

The model prices a narrow-format GEMM with one fraction of the format's peak (`Efficiency.narrow_gemm_peak_fraction`)
fitted on whole training steps, which include Transformer Engine's quantization around the GEMM; so it is expected
between the kernel-only and the autocast figures (the autocast ones also quantize the weight at every call, which
training does once a step). The benchmark also prints the fraction at which the model's kernel-only times match
the published ones. Prints a table, then ONE JSON line.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_kernels import design, predicted_gemm_s  # noqa: E402
from scipy.optimize import brentq  # noqa: E402

from analytical import DEFAULT_EFFICIENCY  # noqa: E402

SOURCE = ("NVIDIA/TransformerEngine docs/examples/gemm_profiling/gemm_profiling.rst @8f2e635 "
          "(\"GEMM Profiling Tutorial\", PR #2863): benchmarks/gemm/benchmark_gemm.py, 5B config")
TOKENS = 31 * 512  # the tutorial's M = micro-batch 31 x sequence 512 = 15,872
# (name, k, n): the forward GEMMs (M x k) @ (k x n) of the tutorial's layer (its "Shape" column is M x K x N)
LAYER = (("qkv", 4096, 12288), ("attention_out", 4096, 4096), ("mlp_up", 4096, 16384), ("mlp_down", 16384, 4096))
PASSES = ("fprop", "dgrad", "wgrad")
# the tutorial's recipe -> the model's precision (both per-tensor FP8 recipes are the model's fp8)
PRECISION = {"bf16": "bf16", "fp8_current": "fp8", "fp8_delayed": "fp8", "mxfp8": "mxfp8", "nvfp4": "nvfp4"}

# "Per-Layer GEMM Time" tables, ms: {mode: {recipe: (fprop, dgrad, wgrad)}}
PUBLISHED = {
    "b300": {  # "GEMM Benchmark (Model Config Mode) on NVIDIA B300 SXM6 AC"
        "autocast": {"bf16": (4.196, 4.290, 4.272), "fp8_current": (2.879, 3.063, 3.205),
                     "fp8_delayed": (2.486, 2.621, 2.695), "mxfp8": (2.847, 3.045, 3.092),
                     "nvfp4": (1.932, 2.189, 2.331)},
        "pre-quantized": {"bf16": (4.250, 4.434, 4.418), "fp8_current": (2.158, 2.329, 2.325),
                          "mxfp8": (2.365, 2.397, 2.400), "nvfp4": (1.254, 1.305, 1.205)},
    },
    "h200-nvl": {  # "Worked Example: 5B Model on H200" (NVIDIA H200 NVL)
        "autocast": {"bf16": (10.653, 10.813, 10.548), "fp8_current": (6.503, 6.795, 6.987),
                     "fp8_delayed": (6.188, 6.306, 6.484)},
        "pre-quantized": {"bf16": (10.632, 10.747, 10.530), "fp8_current": (5.577, 5.661, 5.547)},
    },
}
# the B300 autocast forward, per GEMM ("Fprop Shapes" table), ms
PUBLISHED_B300_FPROP = {
    "bf16": (1.071, 0.307, 1.393, 1.426), "fp8_current": (0.605, 0.317, 0.924, 1.033),
    "fp8_delayed": (0.503, 0.231, 0.850, 0.901), "mxfp8": (0.579, 0.269, 0.924, 1.076),
    "nvfp4": (0.392, 0.256, 0.635, 0.649),
}
PRICED_ON = {"b300": "b300", "h200-nvl": "h200-sxm-141gb"}
BRACKET = (0.3, 1.3)  # the narrow fractions searched for the one matching a published kernel time


def gemm_shapes(k: int, n: int, m: int = TOKENS) -> dict[str, tuple[int, int, int]]:
    """`(m, n, k)` of the forward, input-gradient and weight-gradient products of an (m x k) @ (k x n)
    forward GEMM, as `analytical.step.workload.Gemms.backward` orders them."""
    return {"fprop": (m, n, k), "dgrad": (m, k, n), "wgrad": (k, n, m)}


def predicted_layer_ms(hardware: str, precision: str, eff=DEFAULT_EFFICIENCY) -> dict[str, float]:
    """The model's time, ms, of the tutorial's layer on `hardware` in `precision`: each pass summed over
    the four GEMMs, and the forward of each GEMM (`fprop_<name>`)."""
    d = design(hardware, "llama3-8b", 1, 1, 512, precision)  # only the accelerator and precision are read
    out = {p: 0.0 for p in PASSES}
    for name, k, n in LAYER:
        for p, (m_, n_, k_) in gemm_shapes(k, n).items():
            t = 1e3 * predicted_gemm_s(d, m_, n_, k_, eff)
            out[p] += t
            if p == "fprop":
                out[f"fprop_{name}"] = t
    return out


def compare(eff=DEFAULT_EFFICIENCY) -> dict:
    """Model / published for every (chip, mode, recipe): the layer's total and each pass (B300), and the
    speedup over BF16 in the same mode (both chips)."""
    # each chip's layer priced once per precision of the model (both per-tensor FP8 recipes are its fp8)
    priced = {chip: {p: predicted_layer_ms(PRICED_ON[chip], p, eff) for p in set(PRECISION.values())}
              for chip in PUBLISHED}
    out = {}
    for chip, modes in PUBLISHED.items():
        predicted = {r: priced[chip][p] for r, p in PRECISION.items()}
        model_total = {r: sum(predicted[r][p] for p in PASSES) for r in predicted}
        for mode, table in modes.items():
            bf16 = sum(table["bf16"])
            for recipe, passes in table.items():
                row = {"published_ms": sum(passes), "model_ms": model_total[recipe],
                       "published_speedup": bf16 / sum(passes),
                       "model_speedup": model_total["bf16"] / model_total[recipe]}
                row["speedup_ratio"] = row["model_speedup"] / row["published_speedup"]
                if chip == "b300":  # absolute times only where the preset is the part that ran
                    row["ratio"] = row["model_ms"] / row["published_ms"]
                    row["pass_ratio"] = {p: predicted[recipe][p] / v for p, v in zip(PASSES, passes)}
                out[f"{chip}|{mode}|{recipe}"] = row
    for recipe, gemms in PUBLISHED_B300_FPROP.items():
        predicted = priced["b300"][PRECISION[recipe]]
        out[f"b300|autocast-fprop|{recipe}"] = {name: predicted[f"fprop_{name}"] / ms
                                                for (name, _, _), ms in zip(LAYER, gemms)}
    return out


def matching_narrow_fraction(eff=DEFAULT_EFFICIENCY) -> dict[str, float]:
    """`narrow_gemm_peak_fraction` at which the model's kernel-only GEMMs match the published pre-quantized ones:
    the B300's per-layer times (fp8 per-tensor, mxfp8, nvfp4), and the H200 NVL's fp8 speedup over BF16."""
    def layer_ms(hardware: str, precision: str, fraction: float) -> float:
        priced = predicted_layer_ms(hardware, precision, dataclasses.replace(eff, narrow_gemm_peak_fraction=fraction))
        return sum(priced[p] for p in PASSES)

    table = PUBLISHED["b300"]["pre-quantized"]
    out = {f"b300|{recipe}": brentq(lambda f, r=recipe: layer_ms("b300", PRECISION[r], f) - sum(table[r]), *BRACKET)
           for recipe in ("fp8_current", "mxfp8", "nvfp4")}
    nvl = PUBLISHED["h200-nvl"]["pre-quantized"]
    bf16 = layer_ms(PRICED_ON["h200-nvl"], "bf16", eff.narrow_gemm_peak_fraction)
    speedup = sum(nvl["bf16"]) / sum(nvl["fp8_current"])
    out["h200-nvl|fp8_current"] = brentq(lambda f: bf16 / layer_ms(PRICED_ON["h200-nvl"], "fp8", f) - speedup,
                                         *BRACKET)
    return out


def print_table(result: dict) -> None:
    print(f"source: {SOURCE}")
    print(f"{'chip':9s} {'mode':14s} {'recipe':12s} {'published':>10s} {'model':>8s} {'model/pub':>9s}  "
          f"{'speedup over bf16: published':>28s} {'model':>6s}")
    for key, row in result.items():
        chip, mode, recipe = key.split("|")
        if mode == "autocast-fprop":
            continue
        ratio = f"{row['ratio']:9.3f}" if "ratio" in row else f"{'-':>9s}"
        published = f"{row['published_ms']:8.3f}ms" if "ratio" in row else f"{'-':>10s}"
        model = f"{row['model_ms']:6.3f}ms" if "ratio" in row else f"{'-':>8s}"
        print(f"{chip:9s} {mode:14s} {recipe:12s} {published} {model} {ratio}  {row['published_speedup']:27.2f}x "
              f"{row['model_speedup']:5.2f}x")
    print("B300 autocast forward, model / published per GEMM (qkv, attention_out, mlp_up, mlp_down):")
    for recipe in PUBLISHED_B300_FPROP:
        ratios = result[f"b300|autocast-fprop|{recipe}"]
        print(f"  {recipe:12s} " + "  ".join(f"{v:.3f}" for v in ratios.values()))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", metavar="PATH", help="also write the JSON line to PATH")
    args = parser.parse_args(argv)
    result = compare()
    print_table(result)
    fractions = matching_narrow_fraction()
    print(f"narrow_gemm_peak_fraction at which the model's kernels match the published pre-quantized ones (shipped "
          f"{DEFAULT_EFFICIENCY.narrow_gemm_peak_fraction}): "
          + ", ".join(f"{k} {v:.3f}" for k, v in fractions.items()))
    line = json.dumps({"source": SOURCE, "tokens": TOKENS, "rows": result, "matching_narrow_fraction": fractions})
    if args.json:
        Path(args.json).write_text(line + "\n")
    print(line)


if __name__ == "__main__":
    main()
