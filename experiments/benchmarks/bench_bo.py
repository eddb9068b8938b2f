"""Exact-regret benchmark of the optimizer: BO against random, Sobol and evolution (and gradient
descent where a space has continuous parameters) on spaces small enough to enumerate.

    python experiments/benchmarks/bench_bo.py            # 20 seeds (hours on a 2-core machine)
    python experiments/benchmarks/bench_bo.py --quick    # 3 seeds, smaller budgets
    python experiments/benchmarks/bench_bo.py --seeds 1 --budget 14 --spaces mapping --no-overhead \
        --pareto-space mapping --pareto-seeds 1 --pareto-budget 50 --pareto-strategies random    # a smoke run

Spaces (ground truth: every known-feasible point evaluated in one batched pass):

- `mapping`: GPT-3 175B on 1024 H100 (DGX H100 SuperPOD), global batch 1536: tp, pp, cp, vp,
  micro-batch, sequence parallel, recompute, ZeRO stage, flash attention, both overlap flags.
- `hw-mapping`: the same model on 1024 devices with the accelerator discretized on powers of two
  (bf16 peak, HBM bandwidth and capacity, NVLink bandwidth) and tp, pp, vp, micro-batch,
  sequence parallel, recompute, ZeRO stage.

Single objective: log step time; regret of a run after n evaluations = best feasible time found /
optimal time - 1. Reported: evaluations to reach 1 % and 0.1 % regret (median over seeds; a run that
never reaches it within its budget counts as infinite, so a median can be null: see *_reached).
Pareto case: time and energy per step (objective time_energy) on `pareto-chip`
(experiments/benchmarks/pareto_space.py: Llama-3 70B on 1024 devices, every point deriving its
chip from a 300-1200 W power budget and its compute / memory split, the die's compute share,
FLOP/clk per unit, the scale-up domain and tp, pp, micro-batch, recompute; 202,176 known-feasible
points, a true front of 27 designs at 0562c3b), the fraction of the true front's hypervolume (logs; reference
point = the front's nadir + 10 % of its range, at least 0.01) that the feasible evaluations reach
after 50/100/200/300 evaluations: BO (qLogNEHVI with that reference point), random and evolution
(NSGA-II for two objectives). `--pareto-space mapping` runs it on a fixed-chip space instead, where
the front is ONE design (the fastest mapping also spends the least energy per step).
`--pareto-only` runs just this case.

`bo_iteration_overhead_s`: median wall time of one BO proposal (GP fits + acquisition) over the
last proposals of each BO run (n <= the BO budget), on 1 torch thread; `bo_iteration_overhead_s_n500`:
the same after 500 random evaluations (`--overhead-only` measures just that). The figures are
taken on a shared, loaded machine.
Ends with one JSON line.
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing
import os
import statistics
import sys
import time
import warnings
from concurrent.futures import ProcessPoolExecutor, as_completed

import torch
from pareto_space import pareto_space

from analytical.build import single_design
from analytical.space import DesignSpace, Parameter
from deepflow.presets import load_preset
from deepflow.run.loop import run
from deepflow.run.objectives import make_objective
from deepflow.strategies import make_strategy
from deepflow.strategies.space_grid import enumerate_space

MAPPING_PARAMS = (
    Parameter("tp", "log2", 1, 64), Parameter("pp", "log2", 1, 64), Parameter("cp", "log2", 1, 16),
    Parameter("vp", "log2", 1, 8), Parameter("micro_batch_size", "log2", 1, 16),
    Parameter("sequence_parallel", "categorical", choices=(0, 1)),
    Parameter("recompute", "categorical", choices=("none", "selective", "full")),
    Parameter("zero_stage", "categorical", choices=(0, 1, 2, 3)),
    Parameter("flash_attention", "categorical", choices=(0, 1)),
    Parameter("overlap_dp_comm", "categorical", choices=(0, 1)),
    Parameter("overlap_tp_comm", "categorical", choices=(0, 1)))
# powers of two around H100-B200 class values (SI): bf16 peak 0.56-2.25 PFLOP/s, HBM 2.2-8.8 TB/s
# and 32-128 GiB, NVLink 275-1100 GB/s (ESTIMATE: a grid spanning conf/hardware); NIC: the H100's
HW_PARAMS = (
    Parameter("peak_bf16_flops_per_s", "log2", 2.0**49, 2.0**51),
    Parameter("hbm_bw_bytes_per_s", "log2", 2.0**41, 2.0**43),
    Parameter("hbm_bytes", "log2", 2.0**35, 2.0**37),
    Parameter("scale_up_bw_bytes_per_s", "log2", 2.0**38, 2.0**40),
    Parameter("tp", "log2", 1, 32), Parameter("pp", "log2", 1, 64), Parameter("vp", "log2", 1, 4),
    Parameter("micro_batch_size", "log2", 1, 16),
    Parameter("sequence_parallel", "categorical", choices=(0, 1)),
    Parameter("recompute", "categorical", choices=("none", "selective", "full")),
    Parameter("zero_stage", "categorical", choices=(0, 1, 2, 3)))


BO_PARAMS = {"max_enumerate": 300_000}  # both spaces are optimized by enumeration (<= 2.6e5 candidates)


def template():
    specs = [load_preset("hardware", "h100-sxm-80gb"), load_preset("system", "dgx-h100-superpod"),
             load_preset("model", "gpt3-175b"), load_preset("mapping", "gpt3-175b-1024")]
    return single_design(*specs)


def spaces() -> dict[str, DesignSpace]:
    t = template()
    return {"mapping": DesignSpace("bench-mapping", MAPPING_PARAMS, t).validate(),
            "hw-mapping": DesignSpace("bench-hw-mapping", HW_PARAMS, t).validate()}


def config_space(name: str) -> DesignSpace:
    """A shipped space of conf/space/ (e.g. the mixed `chip-mapping`), for the overhead figure only:
    `--overhead-only --spaces chip-mapping` (optimized by mixed alternating search, not enumeration)."""
    from deepflow.config import compose_config, space_from_config

    return space_from_config(compose_config([f"space={name}"]))


def ground_truth(space: DesignSpace, objective) -> dict:
    grid = enumerate_space(space)
    keep = torch.cat([space.known_feasible(c) for c in grid.split(1 << 16)])
    points = grid[keep]
    Y, feasible, _, _ = objective.evaluate(space, points)
    return {"points": points, "Y": Y, "feasible": feasible, "num_grid": grid.shape[0],
            "num_known_feasible": points.shape[0], "num_feasible": int(feasible.sum())}


def evals_to(history, y_opt: float, regret: float) -> float:
    """1-based number of evaluations after which the best feasible time is within `regret`."""
    best = history.best_so_far(0)
    hit = torch.nonzero(torch.exp(best - y_opt) - 1.0 <= regret + 1e-12)
    return float(hit[0, 0]) + 1.0 if hit.numel() else math.inf


def front_2d(Y: torch.Tensor) -> torch.Tensor:
    """Pareto front (minimized) of `Y n x 2`, sorted by the first objective."""
    order = torch.argsort(Y[:, 0] + 1e-12 * Y[:, 1])
    Ys = Y[order]
    running = torch.cummin(Ys[:, 1], 0).values
    keep = torch.ones(Ys.shape[0], dtype=torch.bool)
    keep[1:] = Ys[1:, 1] < running[:-1]
    return Ys[keep]


def hypervolume_2d(Y: torch.Tensor, ref: torch.Tensor) -> float:
    """Hypervolume dominated by `Y n x 2` (minimized) up to `ref`."""
    Y = Y[(Y < ref).all(-1)]
    if Y.shape[0] == 0:
        return 0.0
    F = front_2d(Y)
    widths = torch.cat([F[1:, 0], ref[:1]]) - F[:, 0]
    return float((widths * (ref[1] - F[:, 1])).sum())


def run_until(space, objective, strategy, budget: int, q: int, seed: int, stop=None):
    """Loop in steps of q, resuming the history each time; stops early when stop(history) holds."""
    history = None
    while history is None or history.n < budget:
        n = 0 if history is None else history.n
        history = run(space, objective, strategy, min(budget, n + q), q=q, seed=seed, history=history)
        if stop is not None and stop(history):
            break
    return history


def random_median_evals(num_points: int, num_good: int) -> int:
    """Exact median number of uniform draws WITHOUT replacement from num_points points until one of
    num_good is drawn: the smallest t with 1 - C(N - K, t) / C(N, t) >= 1/2."""
    log_miss, t = 0.0, 0
    while log_miss > math.log(0.5) and t < num_points:
        if num_good >= num_points - t:  # only good points left
            return t + 1
        log_miss += math.log1p(-num_good / (num_points - t))
        t += 1
    return t


def median_or_none(values: list[float]):
    m = statistics.median(values)
    return None if math.isinf(m) else m


def bo_job(job: dict) -> dict:
    """One (space, strategy, seed) run of the single-objective case, in a worker process: evaluations
    to 1 % and 0.1 % regret, and for BO the wall time of its last proposals."""
    space = spaces()[job["space"]]
    objective = make_objective("step_time")
    strat, y_opt = job["strategy"], job["y_opt"]
    strategy = make_strategy(strat, **(BO_PARAMS | {"n_init": job["n_init"]} if strat == "bo" else {}))
    times: list[float] = []
    if strat == "bo":
        original = strategy.propose

        def timed(space_, history, q_, seed_):
            t0 = time.perf_counter()
            X = original(space_, history, q_, seed_)
            times.append(time.perf_counter() - t0)
            return X

        strategy.propose = timed
    h = run_until(space, objective, strategy, job["budget"], job["q"], job["seed"],
                  lambda h: evals_to(h, y_opt, 0.001) < math.inf)
    return {"to_1pct": evals_to(h, y_opt, 0.01), "to_0.1pct": evals_to(h, y_opt, 0.001), "n": h.n,
            "overhead_s": statistics.median(times[-5:]) if times else None}


def run_jobs(fn, jobs: list[dict], workers: int) -> list:
    """`fn(job)` for every job, in `workers` processes (spawned, one torch thread each) or inline,
    under a progress bar with the time left (each job's result printed above it as it ends)."""
    from tqdm import tqdm

    results: list = [None] * len(jobs)
    bar = tqdm(total=len(jobs), unit="run", file=sys.stderr, dynamic_ncols=True)

    def done(i: int) -> None:  # progress, so that a killed run still says something
        label = " ".join(f"{k}={jobs[i][k]}" for k in ("space", "experiment", "strategy", "seed") if k in jobs[i])
        shown = results[i]
        if isinstance(shown, dict):  # the scalar figures only (a run's whole curve is too long a line)
            shown = {k: v for k, v in shown.items() if isinstance(v, (int, float, str, type(None)))}
        bar.write(f"    {label}: {shown}")
        bar.update(1)

    with bar:
        if workers <= 1:
            for i, job in enumerate(jobs):
                results[i] = fn(job)
                done(i)
            return results
        context = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(workers, mp_context=context, initializer=init_worker) as pool:
            futures = {pool.submit(fn, job): i for i, job in enumerate(jobs)}
            for future in as_completed(futures):
                results[futures[future]] = future.result()
                done(futures[future])
    return results


def init_worker() -> None:
    torch.set_num_threads(1)
    warnings.simplefilter("ignore")


def single_objective(name: str, space: DesignSpace, args, out: dict, overheads: list[float]) -> None:
    objective = make_objective("step_time")
    truth = ground_truth(space, objective)
    y_opt = float(truth["Y"][truth["feasible"], 0].min())
    print(f"[{name}] grid {truth['num_grid']:,}, known-feasible {truth['num_known_feasible']:,}, "
          f"feasible {truth['num_feasible']:,}, optimum {math.exp(y_opt):.3f} s", flush=True)
    out[f"{name}_num_known_feasible"] = truth["num_known_feasible"]
    out[f"{name}_num_feasible"] = truth["num_feasible"]
    yf = truth["Y"][truth["feasible"], 0]
    for r, tag in ((0.01, "1pct"), (0.001, "0.1pct")):
        good = int((torch.exp(yf - y_opt) - 1 <= r).sum())
        out[f"{name}_num_within_{tag}"] = good
        # uniform sampling of the known-feasible points (what `random` does): exact, no simulation
        out[f"{name}_random_exact_median_evals_to_{tag}"] = random_median_evals(truth["num_known_feasible"], good)
    plans = {"bo": (args.bo_budget, 1), "random": (args.random_budget, 100), "sobol": (args.random_budget, 100),
             "evolution": (args.evolution_budget, 1)}
    plans = {k: v for k, v in plans.items() if k in args.strategies}
    jobs = [{"space": name, "strategy": strat, "seed": seed, "budget": budget, "q": q, "y_opt": y_opt,
             "n_init": args.n_init} for strat, (budget, q) in plans.items() for seed in range(args.seeds)]
    start = time.perf_counter()
    results = run_jobs(bo_job, jobs, args.workers)
    out[f"{name}_wall_s"] = round(time.perf_counter() - start, 1)
    for strat, (budget, _) in plans.items():
        mine = [(job, r) for job, r in zip(jobs, results) if job["strategy"] == strat]
        for job, r in mine:
            print(f"  {strat:9s} seed {job['seed']}: to 1 % {r['to_1pct']}, to 0.1 % {r['to_0.1pct']} "
                  f"({r['n']} evals)", flush=True)
            if r["overhead_s"] is not None:
                overheads.append(r["overhead_s"])
        e1 = [r["to_1pct"] for _, r in mine]
        e01 = [r["to_0.1pct"] for _, r in mine]
        out[f"{name}_{strat}_median_evals_to_1pct"] = median_or_none(e1)
        out[f"{name}_{strat}_median_evals_to_0.1pct"] = median_or_none(e01)
        out[f"{name}_{strat}_reached_1pct"] = sum(math.isfinite(v) for v in e1)
        out[f"{name}_{strat}_reached_0.1pct"] = sum(math.isfinite(v) for v in e01)
        out[f"{name}_{strat}_budget"] = budget
        print(f"[{name}] {strat}: median evals to 1 % {out[f'{name}_{strat}_median_evals_to_1pct']}, "
              f"to 0.1 % {out[f'{name}_{strat}_median_evals_to_0.1pct']} "
              f"(reached {out[f'{name}_{strat}_reached_1pct']}/{args.seeds})", flush=True)


def pareto_spaces() -> dict[str, DesignSpace]:
    """Spaces of the Pareto case: the chip-derived `pareto-chip` and the fixed-chip ones (one-design fronts)."""
    return {"pareto-chip": pareto_space(), **spaces()}


def pareto_job(job: dict) -> dict:
    """One (strategy, seed) run of the Pareto case in a worker: hypervolume fraction at each mark."""
    space = pareto_spaces()[job["space"]]
    objective = make_objective("time_energy")
    strat, ref = job["strategy"], torch.tensor(job["ref"], dtype=torch.float64)
    kwargs = BO_PARAMS | {"n_init": job["n_init"], "ref_point": job["ref"]} if strat == "bo" else {}
    h = run_until(space, objective, make_strategy(strat, **kwargs), job["budget"],
                  1 if strat in ("bo", "evolution", "nsga2") else 100, job["seed"])
    fractions = {}
    for m in job["marks"]:
        part = h.slice(m)
        fractions[m] = hypervolume_2d(part.Y[part.feasible], ref) / job["hv_true"]
    return fractions


def pareto(space_name: str, space: DesignSpace, args, out: dict) -> None:
    objective = make_objective("time_energy")
    truth = ground_truth(space, objective)
    F = front_2d(truth["Y"][truth["feasible"]])
    # nadir + 10 % of the range (at least 0.01 in log units: a one-point front has no range)
    ref = F.max(0).values + (0.1 * (F.max(0).values - F.min(0).values)).clamp_min(0.01)
    hv_true = hypervolume_2d(F, ref)
    print(f"[pareto] {space_name}: grid {truth['num_grid']:,}, known-feasible {truth['num_known_feasible']:,}, "
          f"feasible {truth['num_feasible']:,}; true front {F.shape[0]} points, step time "
          f"{math.exp(F[:, 0].min()):.3f}-{math.exp(F[:, 0].max()):.3f} s, energy {math.exp(F[:, 1].min()):.4g}-"
          f"{math.exp(F[:, 1].max()):.4g} J, hypervolume {hv_true:.4g}", flush=True)
    out["pareto_space"] = space_name
    out["pareto_objectives"] = f"log step time, log energy per step ({space_name} space)"
    out["pareto_num_known_feasible"] = truth["num_known_feasible"]
    out["pareto_num_feasible"] = truth["num_feasible"]
    out["pareto_true_front_size"] = F.shape[0]
    out["pareto_budget"] = args.pareto_budget
    out["pareto_seeds"] = args.pareto_seeds
    marks = [m for m in (50, 100, 200, 300) if m <= args.pareto_budget]
    jobs = [{"space": space_name, "strategy": strat, "seed": seed, "budget": args.pareto_budget, "marks": marks,
             "ref": ref.tolist(), "hv_true": hv_true, "n_init": args.n_init}
            for strat in args.pareto_strategies
            for seed in range(args.pareto_first_seed, args.pareto_first_seed + args.pareto_seeds)]
    start = time.perf_counter()
    results = run_jobs(pareto_job, jobs, args.workers)
    out["pareto_wall_s"] = round(time.perf_counter() - start, 1)
    for strat in args.pareto_strategies:
        mine = [(job, r) for job, r in zip(jobs, results) if job["strategy"] == strat]
        for job, r in mine:
            print(f"  {strat:9s} seed {job['seed']}: " + ", ".join(f"{m}: {r[m]:.3f}" for m in marks), flush=True)
        for m in marks:
            out[f"{strat}_hv_fraction_at_{m}"] = statistics.median(r[m] for _, r in mine)


def overhead_at(space: DesignSpace, n: int, repeats: int = 3) -> float:
    """Median wall time of one BO proposal (fits + screen + acquisition) after n random evaluations."""
    objective = make_objective("step_time")
    history = run(space, objective, make_strategy("random"), n, q=n, seed=0)
    strategy = make_strategy("bo", **BO_PARAMS)
    strategy.propose(space, history.slice(n - 1), 1, 0)  # enumerates the space once (cached)
    times = []
    for seed in range(repeats):
        start = time.perf_counter()
        strategy.propose(space, history, 1, seed)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="3 seeds and smaller budgets")
    parser.add_argument("--seeds", type=int, default=None)
    parser.add_argument("--budget", type=int, default=None,
                        help="evaluations of every single-objective run (a smoke run; default per strategy)")
    parser.add_argument("--spaces", nargs="+", default=["mapping", "hw-mapping"])
    parser.add_argument("--no-pareto", action="store_true")
    parser.add_argument("--overhead-only", action="store_true", help="only bo_iteration_overhead_s_n500")
    parser.add_argument("--no-overhead", action="store_true", help="skip bo_iteration_overhead_s_n500")
    parser.add_argument("--strategies", nargs="+", default=["bo", "random", "sobol", "evolution"],
                        help="single-objective strategies to run")
    parser.add_argument("--workers", type=int, default=1,
                        help="processes running (strategy, seed) jobs in parallel, one torch thread each")
    parser.add_argument("--pareto-only", action="store_true", help="only the Pareto case (no overhead figure)")
    parser.add_argument("--pareto-space", default="pareto-chip", choices=["pareto-chip", "mapping", "hw-mapping"])
    parser.add_argument("--pareto-seeds", type=int, default=None, help="default 5 (1 with --quick)")
    parser.add_argument("--pareto-first-seed", type=int, default=0, help="seeds first .. first + pareto-seeds - 1")
    parser.add_argument("--pareto-budget", type=int, default=None,
                        help="evaluations per run, default 300 (100 with --quick)")
    parser.add_argument("--pareto-strategies", nargs="+", default=["bo", "random", "evolution"],
                        choices=["bo", "random", "sobol", "evolution", "nsga2"])
    args = parser.parse_args()
    args.seeds = args.seeds or (3 if args.quick else 20)
    args.bo_budget = args.budget or (100 if args.quick else 200)
    args.random_budget = args.budget or 20000
    args.evolution_budget = args.budget or (600 if args.quick else 2000)
    args.n_init = 12
    args.pareto_budget = args.pareto_budget or (100 if args.quick else 300)
    args.pareto_seeds = args.pareto_seeds or (1 if args.quick else 5)
    torch.set_num_threads(1)
    warnings.simplefilter("ignore")
    out: dict = {"quick": args.quick, "seeds": args.seeds, "torch_threads": 1, "workers": args.workers,
                 "cpu_count": os.cpu_count()}
    overheads: list[float] = []
    if args.pareto_only:
        pareto(args.pareto_space, pareto_spaces()[args.pareto_space], args, out)
        print(json.dumps(out))
        return
    all_spaces = spaces()
    if not args.no_overhead:
        first = args.spaces[0]
        space = all_spaces[first] if first in all_spaces else config_space(first)
        out["bo_iteration_overhead_s_n500"] = overhead_at(space, 500)
        print(f"BO proposal at n = 500 ({args.spaces[0]}): {out['bo_iteration_overhead_s_n500']:.2f} s", flush=True)
    if args.overhead_only:
        print(json.dumps(out))
        return
    for name in args.spaces:
        single_objective(name, all_spaces[name], args, out, overheads)
    first = args.spaces[0]
    for key in ("bo", "random", "sobol", "evolution"):
        out[f"{key}_median_evals_to_1pct"] = out.get(f"{first}_{key}_median_evals_to_1pct")
        out[f"{key}_median_evals_to_0.1pct"] = out.get(f"{first}_{key}_median_evals_to_0.1pct")
    out["bo_iteration_overhead_s"] = statistics.median(overheads) if overheads else None
    if not args.no_pareto:
        pareto(args.pareto_space, pareto_spaces()[args.pareto_space], args, out)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
