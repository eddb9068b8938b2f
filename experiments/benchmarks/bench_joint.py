"""Speed of the joint space end to end: unit-cube point -> technology -> derived chip -> step time and
energy (analytical/space.py, analytical/chip/derive.py, analytical/step/model.py), and its gradient.

    python experiments/benchmarks/bench_joint.py [--batch 100000] [--grad-batch 1000] [--repeats 5] [--threads 1]
                                                [--glibc-defaults]

Prints human-readable figures, then ONE JSON line (the last line of stdout) with:

- joint_designs_per_s: `--batch` uniformly random points of the `joint` space (conf/space/joint.yaml,
  unfiltered: infeasible chips and mappings included) over the wall time of ONE `space.evaluate`
  call (decode, chip derivation, step time and energy), median of `--repeats`; derive_share: the
  fraction of that time spent decoding and deriving the chips.
- grad_eval_ms: one forward and backward pass of sum(log step time + log energy) w.r.t. the
  `--grad-batch` points (feasible Sobol samples), median of `--repeats`.

The process keeps its freed memory (`deepflow.allocator.retain_freed_memory`, as the `deepflow` command does)
unless `--glibc-defaults`. Target: >= 3e5 joint designs/s on the 2-core machine.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time

import torch

from deepflow.allocator import retain_freed_memory
from deepflow.config import compose_config, space_from_config


def timed(fn, repeats: int) -> tuple[float, object]:
    times, out = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=100_000)
    parser.add_argument("--grad-batch", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--glibc-defaults", action="store_true",
                        help="leave glibc's malloc as it starts instead of retaining freed memory")
    args = parser.parse_args()
    retained = False if args.glibc_defaults else retain_freed_memory()
    torch.set_num_threads(args.threads)

    space = space_from_config(compose_config(["space=joint"]))
    print(f"space {space.name}: {space.dim} parameters, {space.discrete_size:.3g} discrete points, chip template "
          f"{space.chip.name}; torch {torch.__version__}, {args.threads} thread(s), {platform.machine()}")

    u = torch.rand(args.batch, space.dim, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    space.evaluate(u[:1000])  # warm-up
    total_s, result = timed(lambda: space.evaluate(u), args.repeats)
    derive_s, _ = timed(lambda: space.to_batch_and_chip(u), args.repeats)
    finite = bool(torch.isfinite(result.step_time_s).all() and torch.isfinite(result.energy_j).all())
    feasible = float(result.feasible.double().mean())
    chip_failed = float((result.reason >= 14).double().mean())
    print(f"evaluate {args.batch:,} joint points: {total_s:.3f} s = {args.batch / total_s:,.0f} designs/s "
          f"(decode + derive + batch {derive_s:.3f} s, {derive_s / total_s:.0%}); all finite: {finite}; "
          f"feasible {feasible:.1%}, chip cannot be built {chip_failed:.1%}")

    x0 = space.sample(args.grad_batch, seed=1)

    def forward_backward():
        x = x0.clone().requires_grad_(True)
        r = space.evaluate(x)
        (torch.log(r.step_time_s) + torch.log(r.energy_j)).sum().backward()
        return x.grad

    grad_s, grad = timed(forward_backward, args.repeats)
    print(f"forward + backward, {args.grad_batch} points: {grad_s * 1e3:.1f} ms; gradient finite: "
          f"{bool(torch.isfinite(grad).all())}")
    print(json.dumps({"joint_designs_per_s": round(args.batch / total_s), "grad_eval_ms": round(grad_s * 1e3, 2),
                      "derive_share": round(derive_s / total_s, 3), "batch": args.batch, "grad_batch": args.grad_batch,
                      "threads": args.threads, "finite": finite, "retain_freed_memory": retained}))


if __name__ == "__main__":
    main()
