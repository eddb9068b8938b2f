"""Co-design benchmark: BO against Sobol, random and evolution on the co-design experiments' own
spaces, where the optimum is NOT known (continuous chip splits), measured against each experiment's
best-known design (`codesign_best_known.json`, found by `best_known.py`'s far larger searches).

    python experiments/benchmarks/bench_codesign.py                                  # every experiment
    python experiments/benchmarks/bench_codesign.py --experiments llama3-70b-n5-hierarchical \
        --budget 100 --seeds 5 --workers 2

An experiment is a `conf/experiment/` name, composed exactly as `deepflow optimize experiment=<name>`
composes it (`deepflow.config.compose_config` and `deepflow.run.job.prepare`: space, `inner`,
objective, q, BO parameters), then run with `deepflow.run.loop.run` per (strategy, seed) without
MLflow. The experiments (`best_known.EXPERIMENTS`):

- `llama3-70b-n5-codesign`: chip splits, architecture, scale-up domain and the mapping together
  (conf/space/chip-mapping.yaml, 17 parameters, 5 continuous), time at a 700 W power cap;
- `llama3-70b-n5-hierarchical`: the same chip parameters (9), each proposal's mapping picked by the
  core's exhaustive best-mapping search (`inner=best_mapping`);
- `llama3-70b-joint`: the joint technology space (conf/space/joint.yaml: node, memory, links, die
  area, power budget, splits, architecture, devices; 20 outer parameters), mapping by the inner search;
- `mixtral-8x7b-n3-codesign`: an MoE (Mixtral 8x7B, 64 devices) on the N3 chip, mapping (ep included)
  by the inner search.

Reported per experiment and strategy, over the seeds: the median best feasible objective (step
time, s) after each mark of evaluations and its gap to the best-known design (`gap`: 0 = as good;
negative where a run beat the record, which `--write-best-known` then records), how many seeds BO's
best beats each baseline's at the full budget, and for BO the fraction of its proposals after the
initial design that were feasible and its median / largest fit + acquisition time per batch (and, with
`--overrides warm_start.samples=N warm_start.model=...`, BO's warm start: N Sobol samples labelled by the
model in one batch, apart from the budget, as `deepflow optimize` does it: `deepflow.run.warm_start`). Every
strategy uses the experiment's `q` so that budgets are comparable in rounds. Ends with one JSON line.
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
from best_known import EXPERIMENTS, best_of, compose, offer, recorded  # noqa: E402

STRATEGIES = ("bo", "sobol", "random", "evolution")


class Timed:
    """A strategy whose `propose` calls are timed: `seconds_` per call that ran a model (BO after
    its initial design: GP fits + acquisition), `n_init_` the evaluations before the first such call."""

    def __init__(self, strategy):
        self.strategy = strategy
        self.name = strategy.name
        self.seconds_: list[float] = []
        self.n_init_: int | None = None

    def propose(self, space, history, q, seed):
        start = time.perf_counter()
        X = self.strategy.propose(space, history, q, seed)
        if getattr(self.strategy, "last_fit_s_", 0.0) > 0.0:
            self.seconds_.append(time.perf_counter() - start)
            if self.n_init_ is None:
                self.n_init_ = history.n
        return X


def codesign_job(task: dict) -> dict:
    """One (experiment, strategy, seed) run in a worker: best feasible objective after each evaluation."""
    from deepflow.run.loop import run
    from deepflow.strategies import make_strategy

    warnings.simplefilter("ignore")
    job = compose(task["experiment"], task["budget"], task["overrides"])
    prior, warm = None, {}
    if task["strategy"] == "bo" and job.warm_start.get("samples"):  # BO's warm start, counted apart from the budget
        from deepflow.run.warm_start import fit_prior

        fitted = fit_prior(job, job.warm_start["samples"], seed=task["seed"] + 7919)
        prior, warm = fitted.model, {"warm_samples": job.warm_start["samples"], "warm_s": fitted.fit_s}
    inner = job.make_strategy(prior) if task["strategy"] == "bo" else make_strategy(task["strategy"])
    strategy = Timed(inner)
    start = time.perf_counter()
    h = run(job.space, job.objective, strategy, task["budget"], q=job.q, seed=task["seed"])
    best = torch.exp(h.best_so_far(0)).tolist()
    n0 = strategy.n_init_ if strategy.n_init_ is not None else h.n
    return {"best": [b if math.isfinite(b) else None for b in best], "wall_s": time.perf_counter() - start,
            "feasible": int(h.feasible.sum()), "after_init": h.n - n0, "feasible_after_init": int(h.feasible[n0:].sum()),
            "propose_s": strategy.seconds_, "best_design": best_of(job, h), **warm}


def summarize(e: str, mine: dict, marks: list[int], budget: int, out: dict, record: float | None) -> None:
    """Print and add to `out` one experiment's figures (module docstring)."""
    finals = [r["best"][-1] for rs in mine.values() for r in rs if r["best"][-1] is not None]
    overall = min(finals) if finals else math.nan
    reference = record if record is not None else overall
    out[f"{e}_best_known_s"] = record
    out[f"{e}_best_found_s"] = overall
    print(f"[{e}] best-known design: {record} s per step; best of these runs: {overall:.4f} s", flush=True)
    for s, rs in mine.items():
        for m in marks:
            values = [r["best"][m - 1] if r["best"][m - 1] is not None else math.inf for r in rs]
            median = statistics.median(values)
            out[f"{e}_{s}_median_best_at_{m}"] = median if math.isfinite(median) else None
            out[f"{e}_{s}_median_gap_at_{m}"] = median / reference - 1 if math.isfinite(median) else None
        out[f"{e}_{s}_median_wall_s"] = round(statistics.median(r["wall_s"] for r in rs), 1)
        out[f"{e}_{s}_best_by_seed"] = [r["best"][-1] for r in rs]  # at the full budget, seed by seed (None: none feasible)
        line = ", ".join(f"{m}: {out[f'{e}_{s}_median_gap_at_{m}']:+.2%}" if out[f"{e}_{s}_median_gap_at_{m}"]
                         is not None else f"{m}: none feasible" for m in marks)
        print(f"  {s:9s} median gap to the best-known after {line} ({out[f'{e}_{s}_median_wall_s']} s a run)",
              flush=True)
    if "bo" not in mine:
        return
    bo_runs = mine["bo"]
    after = sum(r["after_init"] for r in bo_runs)
    feasible = sum(r["feasible_after_init"] for r in bo_runs)
    seconds = [t for r in bo_runs for t in r["propose_s"]]
    out[f"{e}_bo_feasible_after_init"] = feasible / after if after else None
    if bo_runs and "warm_samples" in bo_runs[0]:  # the warm start's samples, labelled apart from the budget
        out[f"{e}_bo_warm_samples"] = bo_runs[0]["warm_samples"]
        out[f"{e}_bo_warm_median_s"] = statistics.median(r["warm_s"] for r in bo_runs)
        print(f"  bo: warm start on {bo_runs[0]['warm_samples']} Sobol samples labelled apart from the budget, "
              f"{out[f'{e}_bo_warm_median_s']:.1f} s a run to label and fit", flush=True)
    out[f"{e}_bo_propose_median_s"] = statistics.median(seconds) if seconds else None
    out[f"{e}_bo_propose_max_s"] = max(seconds) if seconds else None
    if after and seconds:
        print(f"  bo: {feasible}/{after} proposals after the initial design feasible ({feasible / after:.0%}); "
              f"fit + acquisition per batch median {statistics.median(seconds):.2f} s, max {max(seconds):.2f} s",
              flush=True)
    bo = [r["best"][-1] if r["best"][-1] is not None else math.inf for r in bo_runs]
    for s, rs in mine.items():
        if s == "bo":
            continue
        other = [r["best"][-1] if r["best"][-1] is not None else math.inf for r in rs]
        wins = sum(b < o for b, o in zip(bo, other))
        out[f"{e}_bo_beats_{s}_seeds"] = wins
        print(f"  bo beats {s} at {budget} evaluations in {wins}/{len(bo)} seeds", flush=True)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--experiments", nargs="+", default=list(EXPERIMENTS))
    parser.add_argument("--strategies", nargs="+", default=list(STRATEGIES), choices=STRATEGIES)
    parser.add_argument("--budget", type=int, default=100)
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--overrides", nargs="*", default=[],
                        help="Hydra overrides of every run (e.g. strategy.n_init=8 strategy.min_feasibility=0.5)")
    parser.add_argument("--write-best-known", action="store_true",
                        help="record a run's design in codesign_best_known.json where it beats the recorded one")
    args = parser.parse_args(argv)
    if args.budget < 1 or args.seeds < 1:
        parser.error("--budget and --seeds must be >= 1")
    torch.set_num_threads(1)
    warnings.simplefilter("ignore")
    marks = [m for m in (25, 50, 100, 200, 400) if m < args.budget] + [args.budget]
    out: dict = {"budget": args.budget, "seeds": args.seeds, "overrides": args.overrides, "workers": args.workers, "cpu_count": os.cpu_count()}
    seeds = range(args.first_seed, args.first_seed + args.seeds)
    tasks = [{"experiment": e, "strategy": s, "seed": seed, "budget": args.budget, "overrides": tuple(args.overrides)}
             for e in args.experiments for s in args.strategies for seed in seeds]
    for e in args.experiments:  # bad names fail here, before any work
        job = compose(e, args.budget, tuple(args.overrides))
        print(f"[{e}] space {job.space.name}: {job.space.dim} parameters, objective {job.objective.name}, "
              f"q {job.q}", flush=True)
    start = time.perf_counter()
    results = run_jobs(codesign_job, tasks, args.workers)
    out["wall_s"] = round(time.perf_counter() - start, 1)
    table = recorded()
    for e in args.experiments:
        mine = {s: [r for t, r in zip(tasks, results) if t["experiment"] == e and t["strategy"] == s]
                for s in args.strategies}
        summarize(e, mine, marks, args.budget, out, table.get(e, {}).get("value"))
        if args.write_best_known and not args.overrides:  # a record is of the experiment as shipped
            found = [(r["best_design"], t) for t, r in zip(tasks, results)
                     if t["experiment"] == e and r["best_design"]["value"] is not None]
            if found:
                design, t = min(found, key=lambda f: f[0]["value"])
                command = (f"python experiments/benchmarks/bench_codesign.py --experiments {e} --strategies "
                           f"{t['strategy']} --budget {args.budget} --first-seed {t['seed']} --seeds 1 "
                           f"--write-best-known")
                out[f"{e}_best_known_written"] = offer(e, design, command)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
