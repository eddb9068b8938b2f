"""Scale-out of `deepflow sample` on Ray: workers, per-task overhead, constant memory, lost designs.

    python experiments/benchmarks/bench_scale.py [--designs 4000000] [--large 10000000] [--space mapping-only]

The same `--designs` designs (Sobol, seed 0, blocks of `--block-size` raw draws) are sampled, in
`--repeats` interleaved rounds (medians reported, every run in `*_s_all`),
1. in this process (`executor=local`, the table in memory, one Parquet file): `plain_s`;
2. on a local Ray with 1 CPU, then with 2 CPUs (each block a task writing its own shard):
   `ray_1_worker_s`, `ray_2_workers_s`
(Ray's start-up and each worker's first import of torch and the model are timed apart, in
`ray_*_init_s`); then `--large` designs on 2 workers, in a process of its own, with that driver's peak resident
memory (`peak_rss_gib`, VmHWM; the workers hold one block each), and a run of `--kill-designs` designs in which one
worker is killed mid-block (`deepflow.scale.shards.KILL_ONCE_ENV`), checked for lost and duplicated
design ids. Figures: speedup_2_workers = ray_1_worker_s / ray_2_workers_s; overhead_fraction =
ray_1_worker_s / plain_s - 1; task_overhead_s = (ray_1_worker_s - plain_s) / tasks. Prints a
table, then ONE JSON line. Targets (issue 11): speedup >= 1.8, overhead <= 0.05, peak_rss <= 2 GiB,
0 lost, 0 duplicated.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import ray
import torch

from deepflow.allocator import retain_freed_memory
from deepflow.config import compose_config, space_from_config
from deepflow.scale.executor import ExecutorOptions, sample_in_memory, sample_to_shards
from deepflow.scale.shards import KILL_ONCE_ENV, BlockPlan, compute_block
from surrogates.columns import space_json, write_samples


def peak_rss_gib() -> float:
    """Peak resident memory of this process (VmHWM; getrusage where /proc has none)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 2**20  # kB
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def on_ray(space, plan: BlockPlan, cpus: int, directory: Path) -> tuple[float, float, dict]:
    """`(init_s, sample_s, report)` of the plan on a fresh local Ray with `cpus` CPUs."""
    start = time.perf_counter()
    ray.init(num_cpus=cpus, include_dashboard=False, logging_level="ERROR", log_to_driver=False)
    init_s = time.perf_counter() - start
    try:
        # each worker imports torch and the model once (seconds): done before the clock starts,
        # as a long sample amortises it; it is counted in the start-up (`ray_*_init_s`)
        start = time.perf_counter()
        warm = ray.remote(num_cpus=1)(compute_block)
        ray.get([warm.remote(space, "sobol", 99, b, 256, str(directory.parent), 1) for b in range(cpus)])
        init_s += time.perf_counter() - start
        start = time.perf_counter()
        report = sample_to_shards(space, plan, directory, ExecutorOptions("ray"), progress=False)
        return init_s, time.perf_counter() - start, report
    finally:
        ray.shutdown()
        shutil.rmtree(directory, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--designs", type=int, default=4_000_000)
    parser.add_argument("--large", type=int, default=10_000_000)
    parser.add_argument("--kill-designs", type=int, default=200_000)
    parser.add_argument("--block-size", type=int, default=131_072)
    parser.add_argument("--space", default="mapping-only")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--large-only", action="store_true", help="only the large run (one JSON line)")
    args = parser.parse_args()
    retain_freed_memory()  # as `deepflow sample` does in process (its Ray workers do it themselves)
    torch.set_num_threads(1)
    space = space_from_config(compose_config([f"space={args.space}"], config_name="sample"))
    work = Path(tempfile.mkdtemp(prefix="bench_scale_"))
    if args.large_only:
        large = BlockPlan(space_json(space), args.large, "sobol", 1, args.block_size)
        start_rss = peak_rss_gib()
        _, large_s, report = on_ray(space, large, 2, work / "large")
        shutil.rmtree(work, ignore_errors=True)
        print(json.dumps({"large_designs": args.large, "large_s": large_s, "large_designs_per_s": args.large / large_s,
                          "start_rss_gib": start_rss, "peak_rss_gib": peak_rss_gib(),
                          "large_lost": report["lost_designs"], "large_duplicated": report["duplicate_designs"]}))
        return
    plan = BlockPlan(space_json(space), args.designs, "sobol", 0, args.block_size)
    out: dict = {"space": space.name, "designs": args.designs, "block_size": args.block_size,
                 "cpus_on_machine": os.cpu_count(), "ray": ray.__version__, "torch": torch.__version__}

    walls: dict[str, list[float]] = {"plain": [], "ray_1_worker": [], "ray_2_workers": []}
    for repeat in range(args.repeats):  # interleaved, so that the machine's drift hits all three alike
        start = time.perf_counter()
        table = sample_in_memory(space, plan, progress=False)
        write_samples(table, space, work / "plain.parquet")
        walls["plain"].append(time.perf_counter() - start)
        del table
        print(f"[{repeat + 1}/{args.repeats}] plain (one process, in memory): {walls['plain'][-1]:.1f} s")
        for cpus, key in ((1, "ray_1_worker"), (2, "ray_2_workers")):
            init_s, sample_s, report = on_ray(space, plan, cpus, work / key)
            assert report["designs"] == args.designs and report["lost_designs"] == 0, report
            walls[key].append(sample_s)
            out[f"{key}_init_s"], out["tasks"] = init_s, report["shards"]
            print(f"[{repeat + 1}/{args.repeats}] ray, {cpus} CPU(s): {sample_s:.1f} s "
                  f"(start-up {init_s:.1f} s apart), {report['shards']} tasks")
    for key, values in walls.items():
        out[f"{key}_s"] = statistics.median(values)
        out[f"{key}_s_all"] = [round(v, 2) for v in values]
        print(f"{key}: median {out[f'{key}_s']:.1f} s ({args.designs / out[f'{key}_s']:,.0f} designs/s)")
    out["speedup_2_workers"] = out["ray_1_worker_s"] / out["ray_2_workers_s"]
    out["overhead_fraction"] = out["ray_1_worker_s"] / out["plain_s"] - 1.0
    out["task_overhead_s"] = (out["ray_1_worker_s"] - out["plain_s"]) / out["tasks"]

    # in a process of its own: the plain run above held its whole table, and freed heap stays resident
    found = subprocess.run([sys.executable, __file__, "--large-only", "--large", str(args.large), "--block-size",
                            str(args.block_size), "--space", args.space], capture_output=True, text=True, check=True)
    out.update(json.loads(found.stdout.strip().splitlines()[-1]))
    print(f"{args.large:,} designs on 2 workers: {out['large_s']:.1f} s, driver peak RSS {out['peak_rss_gib']:.2f} GiB "
          f"(at start {out['start_rss_gib']:.2f} GiB: torch, Ray and the model imported)")

    marker = work / "killed"
    os.environ[KILL_ONCE_ENV] = str(marker)
    try:
        kill = BlockPlan(space_json(space), args.kill_designs, "sobol", 2, args.block_size // 8)
        _, _, report = on_ray(space, kill, 2, work / "kill")
    finally:
        del os.environ[KILL_ONCE_ENV]
    out.update(worker_killed=marker.exists(), lost_designs=report["lost_designs"],
               duplicate_designs=report["duplicate_designs"])
    print(f"a worker killed mid-block: {'yes' if marker.exists() else 'NO'}; lost {report['lost_designs']}, "
          f"duplicated {report['duplicate_designs']} of {args.kill_designs:,}")
    shutil.rmtree(work, ignore_errors=True)
    print(f"speedup 2 workers {out['speedup_2_workers']:.2f} (target >= 1.8), overhead {out['overhead_fraction']:+.1%} "
          f"(target <= 5 %), per task {out['task_overhead_s'] * 1e3:.0f} ms")
    print(json.dumps({k: (round(v, 4) if isinstance(v, float) else v) for k, v in out.items()}))


if __name__ == "__main__":
    main()
