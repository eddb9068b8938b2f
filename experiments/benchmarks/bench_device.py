"""Designs/s of the analytical model on a device (a GPU where there is one), and what float32 costs.

    python experiments/benchmarks/bench_device.py [--device cuda] [--sizes 65536,1048576,4194304,16777216]

Needs only torch and `analytical/` (no Hydra, no MLflow), so it runs on a bare GPU machine with
`PYTHONPATH=.`. The designs are `bench_analytical.random_designs`: GPT-3 175B on 1024 A100 with
randomised mapping fields (every design runs every term; the model has no per-design branches).

For each dtype (float64, float32) and batch size, the median wall time of `--repeats` calls of
`evaluate` (after one warm-up call), timed two ways:
- resident: the batch already on the device and the result left there (`cuda.synchronize` before
  the clock stops): the model's own speed;
- round trip: a CPU float64 batch in and a CPU result out, what `DesignSpace.evaluate` does for
  `deepflow sample device=cuda` (transfers included).
Chunks: `evaluate`'s default (65,536 designs on a CPU, 1,048,576 on a GPU), and `--big-chunk` for
the largest size. The error of computing on the device: float64 and float32 there against float64
on this process's CPU for `--error-size` designs: the largest and median |relative error| of step
time, energy and memory over the designs feasible in both, and the designs whose feasibility or
infeasibility reason differs.

The process keeps the memory it frees (`deepflow.allocator`, as the `deepflow` command does; not with
`--glibc-defaults`): CPU tensors come from the C library's malloc. Prints a table, then ONE JSON line (the last
line of stdout), with `retain_freed_memory`.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench_analytical import random_designs  # noqa: E402
from deepflow.allocator import retain_freed_memory  # noqa: E402  (ctypes only: no Hydra, no MLflow)

from analytical import evaluate  # noqa: E402

ERROR_FIELDS = ("step_time_s", "energy_j", "memory_per_device_bytes")


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _median_s(fn, repeats: int, device: torch.device) -> float:
    fn()  # warm-up (kernels loaded, allocator primed)
    _sync(device)
    walls = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        _sync(device)
        walls.append(time.perf_counter() - start)
    return statistics.median(walls)


def _resident_s(on_device, device: torch.device, repeats: int, chunk: int | None) -> float:
    return _median_s(lambda: evaluate(on_device, chunk_size=chunk), repeats, device)


def speed(designs, device: torch.device, dtype: torch.dtype, repeats: int, chunk: int | None) -> dict:
    """Designs/s resident on `device` and for a CPU round trip, and the device's peak memory."""
    n = designs.batch_size
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    resident_s = _resident_s(designs.to(device=device, dtype=dtype), device, repeats, chunk)
    peak_gib = torch.cuda.max_memory_allocated(device) / 2**30 if device.type == "cuda" else float("nan")
    trip_s = _median_s(lambda: evaluate(designs.to(dtype=dtype), chunk_size=chunk, device=device), repeats, device)
    return {"designs": n, "dtype": str(dtype).removeprefix("torch."), "chunk": chunk,
            "resident_s": resident_s, "resident_designs_per_s": n / resident_s,
            "round_trip_s": trip_s, "round_trip_designs_per_s": n / trip_s, "peak_device_gib": peak_gib}


def error(designs, device: torch.device, dtype: torch.dtype) -> dict:
    """The device's `dtype` results against float64 on the CPU."""
    reference = evaluate(designs)
    other = evaluate(designs.to(dtype=dtype), device=device)
    both = reference.feasible & other.feasible
    out = {"dtype": str(dtype).removeprefix("torch."), "designs": designs.batch_size,
           "feasible_both": int(both.sum()),
           "feasibility_differs": int((reference.feasible != other.feasible).sum()),
           "reason_differs": int((reference.reason != other.reason).sum())}
    for name in ERROR_FIELDS:
        ref, got = getattr(reference, name)[both], getattr(other, name)[both].double()
        rel = ((got - ref) / ref).abs()
        out[f"{name}_max_rel"] = float(rel.max()) if rel.numel() else 0.0
        out[f"{name}_median_rel"] = float(rel.median()) if rel.numel() else 0.0
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--sizes", default="65536,1048576,4194304,16777216")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--big-chunk", type=int, default=1 << 22)
    parser.add_argument("--error-size", type=int, default=1 << 20)
    parser.add_argument("--glibc-defaults", action="store_true",
                        help="leave glibc's malloc as it starts instead of retaining freed memory (CPU tensors)")
    args = parser.parse_args()
    retained = False if args.glibc_defaults else retain_freed_memory()
    device = torch.device(args.device)
    sizes = [int(s) for s in args.sizes.split(",")]
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else (platform.processor() or "cpu")
    print(f"torch {torch.__version__} on {name}; {torch.get_num_threads()} CPU threads")

    designs = random_designs(max(sizes + [args.error_size]))
    rows = []
    for dtype in (torch.float64, torch.float32):
        for n in sizes:
            rows.append(speed(designs.index(slice(0, n)), device, dtype, args.repeats, None))
        rows.append(speed(designs.index(slice(0, sizes[-1])), device, dtype, args.repeats, args.big_chunk))
    print(f"\n{'dtype':8} {'designs':>11} {'chunk':>9} {'resident/s':>13} {'round trip/s':>13} {'peak GiB':>9}")
    for r in rows:
        print(f"{r['dtype']:8} {r['designs']:>11,} {str(r['chunk'] or 'default'):>9} "
              f"{r['resident_designs_per_s']:>13,.0f} {r['round_trip_designs_per_s']:>13,.0f} "
              f"{r['peak_device_gib']:>9.2f}")

    errors = [error(designs.index(slice(0, args.error_size)), device, dt) for dt in (torch.float64, torch.float32)]
    for e in errors:
        print(f"\n{e['dtype']} on {device} vs float64 on the CPU, {e['designs']:,} designs "
              f"({e['feasible_both']:,} feasible in both): feasibility differs {e['feasibility_differs']}, "
              f"reason differs {e['reason_differs']}")
        for f in ERROR_FIELDS:
            print(f"  {f}: max |rel| {e[f + '_max_rel']:.2e}, median {e[f + '_median_rel']:.2e}")

    best = max(rows, key=lambda r: r["resident_designs_per_s"])
    print(json.dumps({"device": name, "torch": torch.__version__, "speed": rows, "error": errors,
                      "best_resident_designs_per_s": round(best["resident_designs_per_s"]),
                      "best": {k: best[k] for k in ("designs", "dtype", "chunk")}, "retain_freed_memory": retained}))


if __name__ == "__main__":
    main()
