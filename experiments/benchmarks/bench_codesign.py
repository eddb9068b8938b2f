"""Co-design benchmark: BO against Sobol, random and evolution on an experiment's own space, where
the optimum is NOT known (continuous chip splits): who finds the better design at equal budgets.

    python experiments/benchmarks/bench_codesign.py                                  # both experiments
    python experiments/benchmarks/bench_codesign.py --experiments llama3-70b-n5-hierarchical \
        --budget 100 --seeds 8 --workers 16

An experiment is a `conf/experiment/` name, composed exactly as `deepflow optimize experiment=<name>`
composes it (`deepflow.run.job.compose_jobs`: space, objective, q, BO parameters), then run
with `deepflow.run.loop.run` per (strategy, seed) without MLflow. Defaults:

- `llama3-70b-n5-codesign`: chip splits, architecture, scale-up domain and the mapping together
  (conf/space/chip-mapping.yaml, 17 parameters, 5 continuous), time at a 700 W power cap;
- `llama3-70b-n5-hierarchical`: the same chip parameters (9), each proposal's mapping picked by the
  core's exhaustive best-mapping search (`inner=best_mapping`).

Reported per experiment and strategy: the median over seeds of the best feasible objective (step
time, s) after each mark of evaluations, its ratio to the best design any run found (`gap`: 0 =
the best found), and how many seeds BO's best beats each baseline's at the full budget. Every
strategy uses the experiment's `q` (BO's batch size) so that budgets are comparable in rounds.
Ends with one JSON line.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time
import warnings
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_bo import run_jobs  # noqa: E402  (the process pool shared with the exact-regret benchmark)

EXPERIMENTS = ("llama3-70b-n5-codesign", "llama3-70b-n5-hierarchical")


def compose(experiment: str, budget: int):
    from deepflow.run.job import compose_jobs

    return compose_jobs([f"experiment={experiment}", f"budget={budget}"], multirun=False)[0]


def codesign_job(task: dict) -> dict:
    """One (experiment, strategy, seed) run in a worker: best feasible objective after each evaluation."""
    from deepflow.run.loop import run
    from deepflow.strategies import make_strategy

    job = compose(task["experiment"], task["budget"])
    strategy = job.make_strategy() if task["strategy"] == "bo" else make_strategy(task["strategy"])
    start = time.perf_counter()
    h = run(job.space, job.objective, strategy, task["budget"], q=job.q, seed=task["seed"])
    best = torch.exp(h.best_so_far(0)).tolist()
    return {"best": [b if math.isfinite(b) else None for b in best], "wall_s": time.perf_counter() - start,
            "feasible": int(h.feasible.sum())}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--experiments", nargs="+", default=list(EXPERIMENTS))
    parser.add_argument("--strategies", nargs="+", default=["bo", "sobol", "random", "evolution"])
    parser.add_argument("--budget", type=int, default=100)
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--workers", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(1)
    warnings.simplefilter("ignore")
    marks = [m for m in (25, 50, 100, 200, 400) if m < args.budget] + [args.budget]
    out: dict = {"budget": args.budget, "seeds": args.seeds, "workers": args.workers, "cpu_count": os.cpu_count()}
    tasks = [{"experiment": e, "strategy": s, "seed": seed, "budget": args.budget}
             for e in args.experiments for s in args.strategies for seed in range(args.seeds)]
    for e in args.experiments:  # bad names fail here, before any work
        job = compose(e, args.budget)
        print(f"[{e}] space {job.space.name}: {job.space.dim} parameters, objective {job.objective.name}, "
              f"q {job.q}", flush=True)
    start = time.perf_counter()
    results = run_jobs(codesign_job, tasks, args.workers)
    out["wall_s"] = round(time.perf_counter() - start, 1)
    for e in args.experiments:
        mine = {s: [r for t, r in zip(tasks, results) if t["experiment"] == e and t["strategy"] == s]
                for s in args.strategies}
        finals = [r["best"][-1] for rs in mine.values() for r in rs if r["best"][-1] is not None]
        overall = min(finals) if finals else math.nan
        out[f"{e}_best_found_s"] = overall
        print(f"[{e}] best design any run found: {overall:.4f} s per step", flush=True)
        for s, rs in mine.items():
            for m in marks:
                values = [r["best"][m - 1] if r["best"][m - 1] is not None else math.inf for r in rs]
                median = statistics.median(values)
                out[f"{e}_{s}_median_best_at_{m}"] = median if math.isfinite(median) else None
                out[f"{e}_{s}_median_gap_at_{m}"] = median / overall - 1 if math.isfinite(median) else None
            out[f"{e}_{s}_median_wall_s"] = round(statistics.median(r["wall_s"] for r in rs), 1)
            line = ", ".join(f"{m}: {out[f'{e}_{s}_median_gap_at_{m}']:+.2%}" if out[f"{e}_{s}_median_gap_at_{m}"]
                             is not None else f"{m}: none feasible" for m in marks)
            print(f"  {s:9s} median gap to the best found after {line}", flush=True)
        if "bo" in mine:
            bo = [r["best"][-1] if r["best"][-1] is not None else math.inf for r in mine["bo"]]
            for s, rs in mine.items():
                if s == "bo":
                    continue
                other = [r["best"][-1] if r["best"][-1] is not None else math.inf for r in rs]
                wins = sum(b < o for b, o in zip(bo, other))
                out[f"{e}_bo_beats_{s}_seeds"] = wins
                print(f"  bo beats {s} at {args.budget} evaluations in {wins}/{len(bo)} seeds", flush=True)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
