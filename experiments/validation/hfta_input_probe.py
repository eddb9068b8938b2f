"""Could HFTA's fused-job speedups come from the input pipeline? A probe for issue 44 (no model change).

    python experiments/validation/hfta_input_probe.py

Stop 46's probe (`hfta_host_probe.py`) found that the host's eager dispatch cannot explain the published
speedups of `hfta_speedups.csv`: with the model's device times they need 76-163 ms of host time a step,
266-573 us for each of ~284 kernels, 60-130x a one-op eager call. HFTA's own PointNet script names a
second host cost that fused jobs share and serial ones do not (UofT-EcoSystem/hfta,
examples/pointnet/train_classification.py and dataset.py):

- each sample is read by TWO `np.loadtxt` calls (its .pts point file and its .seg label file), then
  resampled to 2,500 points, centred, scaled, rotated and jittered in numpy (`ShapeNetDataset.__getitem__`);
- a batch of 32 (`--batch_size` default) is loaded by 4 DataLoader workers (`--workers` default 4);
- fused, ONE loaded batch is expanded to all B jobs on the device (`points.unsqueeze(0).expand(B, ...)`),
  so B jobs pay one loader where B serial jobs pay B;
- the runs used NVIDIA's PyTorch 20.08 container (docker/nvidia20.08.Dockerfile), whose numpy predates
  1.23, where `np.loadtxt` moved from a Python-level parser to C (numpy 1.23.0 release notes). The
  Python-level parser numpy still ships, `np.genfromtxt`, stands in for it here.

With the loader pipelined against the device (workers prefetch), a step takes max(device, loader):

    speedup(B) = B max(d_1, L) / max(d_B, L),    L = batch x (time to read one sample) / workers,

d_1, d_B the model's device times (`hfta_host_probe.device_times`). This probe times the read of one
sample (both files, synthetic ShapeNet-part files of `--points` lines each: the files' own point counts
are not known to us, so a range) on THIS machine's CPU, not on the p3.2xlarge's or the A100 host's
vCPUs, and reports the speedups and their error against the published ones, for the C parser (today's
loadtxt) and the Python-level one. Nothing is fitted on the HFTA rows. Prints a table, then ONE JSON line.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from hfta_host_probe import device_times  # noqa: E402

BATCH = 32  # train_classification.py --batch_size default
WORKERS = 4  # train_classification.py --workers default
RESAMPLED_POINTS = 2500  # ShapeNetDataset(npoints=2500)


def write_sample(folder: Path, points: int, seed: int) -> tuple[Path, Path]:
    """A ShapeNet-part-like sample: `points` lines of 'x y z' (5 decimals) and as many integer part labels."""
    rng = np.random.default_rng(seed)
    pts, seg = folder / f"{points}.pts", folder / f"{points}.seg"
    np.savetxt(pts, rng.uniform(-0.5, 0.5, (points, 3)), fmt="%.5f")
    np.savetxt(seg, rng.integers(1, 5, points), fmt="%d")
    return pts, seg


def read_sample(pts: Path, seg: Path, parse, rng) -> np.ndarray:
    """ShapeNetDataset.__getitem__'s work on one sample (classification, with augmentation)."""
    point_set = parse(pts).astype(np.float32)
    labels = parse(seg).astype(np.int64)
    point_set = point_set[rng.choice(len(labels), RESAMPLED_POINTS, replace=True)]
    point_set = point_set - point_set.mean(0, keepdims=True)
    point_set = point_set / np.max(np.sqrt(np.sum(point_set ** 2, axis=1)))
    theta = rng.uniform(0, 2 * np.pi)
    rotation = np.array([[np.cos(theta), -np.sin(theta)], [np.sin(theta), np.cos(theta)]])
    point_set[:, [0, 2]] = point_set[:, [0, 2]].dot(rotation)
    return point_set + rng.normal(0, 0.02, size=point_set.shape)


def sample_s(pts: Path, seg: Path, parse, repeats: int) -> float:
    """Median seconds to read one sample with `parse`, over `repeats` reads."""
    rng = np.random.default_rng(0)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        read_sample(pts, seg, parse, rng)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def fused_speedup(jobs: int, d_1: float, d_b: float, loader_s: float) -> float:
    """B jobs fused over B run one at a time, a step taking max(device, loader) (module docstring); a loader of
    0 gives the device times' own speedup."""
    return jobs * max(d_1, loader_s) / max(d_b, loader_s)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=str(HERE / "hfta_speedups.csv"))
    parser.add_argument("--points", type=int, nargs="+", default=[2048, 2500, 3000],
                        help="lines of a synthetic sample file (the real files' counts are not known to us)")
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args()

    parsers = {"c_loadtxt": np.loadtxt, "python_parser": np.genfromtxt}
    reads = {}
    with tempfile.TemporaryDirectory() as tmp:
        for n in args.points:
            pts, seg = write_sample(Path(tmp), n, seed=n)
            for name, parse in parsers.items():
                reads[(name, n)] = sample_s(pts, seg, parse, args.repeats)
    devices = list(device_times(args.data))
    out = {"batch": BATCH, "workers": WORKERS, "points": args.points, "parsers": {}}
    for name in parsers:
        for n in args.points:
            loader_s = BATCH * reads[(name, n)] / WORKERS
            rows = []
            for row, d_1, d_b, _ in devices:
                jobs, published = int(row["fused_jobs"]), float(row["published_speedup"])
                speedup = fused_speedup(jobs, d_1, d_b, loader_s)
                rows.append({"id": row["id"], "fused_jobs": jobs, "published_speedup": published,
                             "predicted_speedup": speedup, "error": speedup / published - 1})
            mape = statistics.mean(abs(r["error"]) for r in rows)
            out["parsers"][f"{name}_{n}"] = {"sample_read_ms": 1e3 * reads[(name, n)], "loader_ms_per_step": 1e3 * loader_s,
                                             "mape": mape, "rows": rows}
            print(f"{name:13s} {n:5d} points: {1e3 * reads[(name, n)]:5.2f} ms a sample -> loader {1e3 * loader_s:6.1f} ms "
                  f"a step; speedups " + ", ".join(f"{r['predicted_speedup']:.2f} ({r['published_speedup']:.1f})"
                                                   for r in rows) + f"; mean error {mape:.1%}")
    model_only = statistics.mean(abs(fused_speedup(int(r["fused_jobs"]), d_1, d_b, 0.0) / float(r["published_speedup"]) - 1)
                                 for r, d_1, d_b, _ in devices)
    out["device_only_mape"] = model_only
    print(f"device times alone (no loader): mean error {model_only:.1%}")
    print(json.dumps(out))


if __name__ == "__main__":
    main()
