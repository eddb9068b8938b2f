"""How large the host's time per step would have to be for HFTA's published speedups: a probe for issue 44.

    python experiments/validation/hfta_host_probe.py

Issue 44 proposes that HFTA's fused-job speedups (experiments/validation/hfta_speedups.csv, 2.6-13x, where
the model predicts 1.05-3.6x) come from the host's dispatch of eager kernels: a job whose host time per
step H exceeds its device time runs at H a step alone, and B fused jobs dispatch one kernel where B did.
With the pipelined CPU-GPU queue that implies, a step takes max(device, host), so

    speedup(B) = B max(d_1, H) / max(d_B, H),

with d_1 and d_B the model's device times of one job and of B fused jobs (`deepflow.ratios`). Where
d_1 <= H <= d_B the published speedup S fixes H = S d_B / B. This probe reports, per row, the model's d_1
and d_B, that implied H, and H over the row's kernel count per step: `kernels` counts every GEMM layer of
the network (`analytical.cnns`; PointNet's transforms too) three times (forward, two backward GEMMs) and every memory-bound kernel of
`analytical.step.cnn.cnn_terms` twice (forward and backward), plus `optimizer_kernels_per_tensor` per
parameter tensor (an unfused Adam: ~4 element-wise kernels a tensor; weight and bias of each layer). Compare
the implied time a kernel with published per-operation eager overheads (microseconds: a one-op `x + 1`
takes 4.5 us in PyTorch eager, dev-discuss.pytorch.org "Micro-optimizations for the most micro of
benchmarks", 2023). Prints each row, then ONE JSON line.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

HERE = Path(__file__).resolve().parent


def gemm_layers(model_name: str) -> int:
    """GEMM layers (convolutions, linear layers, PointNet's learned transforms) of a CNN preset's network
    (`analytical.cnns.ARCHITECTURES`, by the preset's `cnn_arch`)."""
    from analytical import cnns
    from deepflow.presets import load_preset

    network = cnns.ARCHITECTURES[str(load_preset("model", model_name).cnn_arch)]
    return sum(isinstance(op, (cnns.Conv, cnns.Linear, cnns.Transform)) for op in network.ops)


def device_times(data: str):
    """Per row of an HFTA file: `(row, d_1, d_B, alone)`, the model's device step time (s) of one job alone
    (baseline precision) and of the row's B fused jobs, and the one job's design batch."""
    from analytical import evaluate, stack_designs
    from deepflow.ratios import _specs, read_hfta

    for _, row in read_hfta(data).iterrows():
        fused = stack_designs(*[[x] for x in _specs(row, str(row["precision"]), int(row["fused_jobs"]))])
        alone = stack_designs(*[[x] for x in _specs(row, str(row["baseline_precision"]), 1)])
        yield row, float(evaluate(alone).step_time_s[0]), float(evaluate(fused).step_time_s[0]), alone


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=str(HERE / "hfta_speedups.csv"))
    parser.add_argument("--optimizer-kernels-per-tensor", type=float, default=4.0)
    args = parser.parse_args()

    from analytical.step.cnn import cnn_terms

    rows = []
    for row, d_1, d_b, alone in device_times(args.data):
        jobs, published = int(row["fused_jobs"]), float(row["published_speedup"])
        gemms = gemm_layers(str(row["model"]))
        kernels = 3 * gemms + 2 * float(cnn_terms(alone).memory_bound_kernels[0]) \
            + args.optimizer_kernels_per_tensor * 2 * gemms
        host_s = published * d_b / jobs
        rows.append({"id": row["id"], "fused_jobs": jobs, "published_speedup": published,
                     "model_speedup": jobs * d_1 / d_b, "device_one_job_ms": 1e3 * d_1,
                     "device_fused_ms": 1e3 * d_b, "implied_host_ms": 1e3 * host_s,
                     "implied_host_consistent": d_1 <= host_s <= d_b, "kernels_per_step": kernels,
                     "implied_host_us_per_kernel": 1e6 * host_s / kernels})
        r = rows[-1]
        print(f"{r['id']:30s} B={jobs:3d} published {published:5.2f}x model {r['model_speedup']:4.2f}x  "
              f"device {r['device_one_job_ms']:7.2f} ms alone, {r['device_fused_ms']:7.2f} ms fused  "
              f"-> host {r['implied_host_ms']:7.2f} ms a step = {r['implied_host_us_per_kernel']:6.1f} us "
              f"x {kernels:.0f} kernels")
    per_kernel = [r["implied_host_us_per_kernel"] for r in rows]
    print(f"implied host time a kernel: {min(per_kernel):.0f}-{max(per_kernel):.0f} us (a one-op eager call: 4.5 us)")
    print(json.dumps({"rows": rows, "implied_host_us_per_kernel_min": min(per_kernel),
                      "implied_host_us_per_kernel_max": max(per_kernel)}))


if __name__ == "__main__":
    main()
