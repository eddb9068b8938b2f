"""Best-known designs of the co-design experiments: the yardstick `bench_codesign.py` measures each
strategy's gap against, found by a search far larger than the benchmark's budgets.

    python experiments/benchmarks/best_known.py                                    # every experiment
    python experiments/benchmarks/best_known.py --experiments llama3-70b-n5-hierarchical \
        --evaluations 20000 --runs 4 --workers 2 --write

Per experiment (composed as `deepflow optimize experiment=<name>` composes it: its space, objective,
`inner`), `--runs` independent regularized-evolution runs (`strategy=evolution`, seeds 0 ..) share
`--evaluations` verified evaluations, in a process pool of `--workers`; the best feasible design of
all of them is the experiment's candidate. With `--write`, `codesign_best_known.json` beside this
script takes it where it beats the recorded one (or none is recorded), with the command that found
it; `bench_codesign.py` also offers every design its runs find (`--write-best-known`), so the file
holds the best design any search of ours has found. Each entry keeps the design's unit-cube point,
so the suite checks that it still evaluates to the recorded value (tests/experiments/).

`--polish` searches no more: it starts from each recorded design and moves one coordinate at a time
(`polish`: every bin of a discrete parameter; a grid of points around a continuous one, at widths of
0.1, 0.01 and 0.002 of the unit cube), taking every improvement, until no coordinate improves. The
step time is not smooth in the chip's splits (a GEMM runs in whole waves of tiles over the compute
units, so one unit more can shorten a step by several per cent and the next ones lengthen it), and
an evolution run's best point is not always the best of its own neighbourhood.

Ends with one JSON line: per experiment the best value found here and the recorded one.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
import warnings
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_bo import run_jobs  # noqa: E402  (the process pool shared with the other search benchmarks)

BEST_KNOWN = Path(__file__).resolve().parent / "codesign_best_known.json"
MAPPING = ("tp", "pp", "dp", "cp", "ep", "vp", "micro_batch_size", "sequence_parallel", "recompute", "zero_stage",
           "distributed_optimizer")
EXPERIMENTS = ("llama3-70b-n5-codesign", "llama3-70b-n5-hierarchical", "llama3-70b-joint", "mixtral-8x7b-n3-codesign")


def compose(experiment: str, budget: int = 1, overrides: tuple[str, ...] = ()):
    """The checked `Job` of `deepflow optimize experiment=<experiment> budget=<budget> <overrides>`."""
    from deepflow.config import compose_config
    from deepflow.run.job import CONFIG_NAME, prepare

    overrides = [f"experiment={experiment}", f"budget={budget}", *overrides]
    return prepare(compose_config(overrides, CONFIG_NAME), overrides)


def best_of(job, history) -> dict:
    """The best feasible row of a run's history: `{value, u, design}` (value in the objective's
    unit, e.g. s; None where nothing was feasible)."""
    y = torch.where(history.feasible, history.Y[:, 0], torch.full_like(history.Y[:, 0], math.inf))
    i = int(torch.argmin(y))
    if not math.isfinite(float(y[i])):
        return {"value": None, "u": None, "design": None}
    return {"value": math.exp(float(y[i])), "u": [float(v) for v in history.X[i]],
            "design": design_of(job, history.X[i:i + 1])}


def design_of(job, u: torch.Tensor) -> dict:
    """The decoded parameters of the point `u 1 x d` (codes for categoricals) and its mapping."""
    values = {n: float(v[0]) for n, v in job.space.decode(u).items()}
    batch = job.space.to_batch(u)
    values.update({n: float(getattr(batch, n)[0]) for n in MAPPING if n not in values})
    return values


def projections(experiment: str, table: dict) -> list[tuple[str, dict]]:
    """`(source, best_of-style dict)` for every recorded design of another experiment with the same model,
    system, chip, objective and cap whose space holds all of this experiment's parameters: that design's
    coordinates on this experiment's space, evaluated here (a chip found on the flat space is also a chip
    of the hierarchical one, where the inner search may map it better)."""
    job = compose(experiment)
    keys = ("model", "system", "chip", "hardware", "mapping", "objective", "power_cap_w")
    out = []
    for other, entry in table.items():
        if other == experiment:
            continue
        source = compose(other)
        if any(job.cfg.get(k) != source.cfg.get(k) for k in keys) or not set(job.space.names) <= set(source.space.names):
            continue
        u = torch.tensor([[entry["u"][source.space.names.index(n)] for n in job.space.names]], dtype=torch.float64)
        Y, feasible, _, _ = job.objective.evaluate(job.space, u)
        if bool(feasible[0]):
            out.append((other, {"value": math.exp(float(Y[0, 0])), "u": [float(v) for v in u[0]],
                                "design": design_of(job, u)}))
    return out


def search_job(task: dict) -> dict:
    """One evolution run in a worker: its best feasible design."""
    from deepflow.run.loop import run
    from deepflow.strategies import make_strategy

    warnings.simplefilter("ignore")
    job = compose(task["experiment"], task["budget"])
    start = time.perf_counter()
    h = run(job.space, job.objective, make_strategy(task["strategy"]), task["budget"], q=8, seed=task["seed"])
    out = best_of(job, h)
    out.update(wall_s=round(time.perf_counter() - start, 1), feasible=int(h.feasible.sum()))
    return out


POLISH_WIDTHS = ((0.1, 41), (0.01, 21), (0.002, 21))  # (half-width on the unit cube, grid points) per pass


def polish(job, u: torch.Tensor, widths=POLISH_WIDTHS) -> tuple[torch.Tensor, float, int]:
    """Coordinate search from the point `u d`: for each width in turn, sweep the coordinates (every
    other bin of a discrete one, at the first width only; `points` values within +- width of a
    continuous one), keep each improvement, until a sweep improves nothing. Returns the best point,
    its value (log objective, inf where nothing is feasible) and the evaluations spent."""
    space = job.space

    def value(X: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        X = X[space.known_feasible(X)]
        if X.shape[0] == 0:
            return X, torch.empty(0, dtype=torch.float64)
        Y, feasible, _, _ = job.objective.evaluate(space, X)
        return X, torch.where(feasible, Y[:, 0], torch.full_like(Y[:, 0], math.inf))

    u = u.clone()
    _, y = value(u[None])
    best, spent = float(y[0]) if y.numel() else math.inf, 1
    for first, (width, points) in zip((True, False, False), widths):
        improved = True
        while improved:
            improved = False
            for i, p in enumerate(space.parameters):
                if math.isinf(p.cardinality):
                    values = (u[i] + torch.linspace(-width, width, points, dtype=torch.float64)).clamp(0.0, 1.0)
                elif first and p.cardinality > 1:
                    values = (torch.arange(int(p.cardinality), dtype=torch.float64) + 0.5) / p.cardinality
                else:
                    continue
                X = u.repeat(values.numel(), 1)
                X[:, i] = values
                X, y = value(X)
                spent += X.shape[0]
                if y.numel() and float(y.min()) < best - 1e-12:
                    k = int(torch.argmin(y))
                    best, u, improved = float(y[k]), X[k].clone(), True
    return u, best, spent


def polish_job(task: dict) -> dict:
    """Polish one experiment's recorded design in a worker: its best point, as `best_of` gives it."""
    warnings.simplefilter("ignore")
    job = compose(task["experiment"])
    start = time.perf_counter()
    u, y, spent = polish(job, torch.tensor(task["u"], dtype=torch.float64))
    out = {"value": math.exp(y), "u": [float(v) for v in u], "design": design_of(job, u[None])} \
        if math.isfinite(y) else {"value": None}
    out.update(wall_s=round(time.perf_counter() - start, 1), evaluations=spent)
    return out


def recorded() -> dict:
    return json.loads(BEST_KNOWN.read_text()) if BEST_KNOWN.exists() else {}


def recorded_for(experiments: list[str]) -> dict:
    """The recorded table, after checking (before any work) that each experiment composes and has a design."""
    from deepflow.presets import ConfigError

    table = recorded()
    for e in experiments:  # bad names fail here, in one line
        try:
            compose(e)
        except ConfigError as error:
            raise SystemExit(str(error)) from None
        if e not in table:
            raise SystemExit(f"no best-known design recorded for {e}: run best_known.py --write first")
    return table


def offer(experiment: str, found: dict, command: str) -> bool:
    """Record `found` (a `best_of` dict) as the experiment's best-known design where it beats the
    recorded one; True if it did."""
    if found.get("value") is None:
        return False
    table = recorded()
    old = table.get(experiment)
    if old is not None and old["value"] <= found["value"]:
        return False
    table[experiment] = {"value": found["value"], "unit": "s", "u": found["u"], "design": found["design"],
                         "command": command}
    BEST_KNOWN.write_text(json.dumps(table, indent=1, sort_keys=True) + "\n")
    return True


def offer_projections(experiment: str, command: str, out: dict) -> None:
    """Offer the experiment's record every other experiment's recorded design that projects onto it."""
    for source, found in projections(experiment, recorded()):
        print(f"[{experiment}] {source}'s best-known design projected here: {found['value']}", flush=True)
        if offer(experiment, found, f"{command} (the best-known design of {source}, projected)"):
            out[f"{experiment}_written"] = f"projected from {source}"


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--experiments", nargs="+", default=list(EXPERIMENTS))
    parser.add_argument("--evaluations", type=int, default=20_000, help="verified evaluations per experiment")
    parser.add_argument("--runs", type=int, default=4, help="independent runs sharing them")
    parser.add_argument("--strategy", default="evolution", choices=["evolution", "random", "sobol"])
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--write", action="store_true", help=f"record improvements in {BEST_KNOWN.name}")
    parser.add_argument("--polish", action="store_true",
                        help="no search: a coordinate search from each recorded design (module docstring)")
    args = parser.parse_args(argv)
    if args.polish:
        return polish_main(args)
    if args.evaluations < args.runs or args.runs < 1:
        parser.error("--evaluations must be at least --runs >= 1")
    torch.set_num_threads(1)
    for e in args.experiments:  # bad names fail here, before any work
        compose(e)
    per_run = args.evaluations // args.runs
    tasks = [{"experiment": e, "strategy": args.strategy, "seed": s, "budget": per_run}
             for e in args.experiments for s in range(args.runs)]
    start = time.perf_counter()
    results = run_jobs(search_job, tasks, args.workers)
    out: dict = {"evaluations": per_run * args.runs, "runs": args.runs, "strategy": args.strategy,
                 "wall_s": round(time.perf_counter() - start, 1), "cpu_count": os.cpu_count()}
    table = recorded()
    for e in args.experiments:
        mine = [r for t, r in zip(tasks, results) if t["experiment"] == e and r["value"] is not None]
        best = min(mine, key=lambda r: r["value"]) if mine else {"value": None}
        old = table.get(e, {}).get("value")
        out[f"{e}_found"] = best["value"]
        out[f"{e}_recorded"] = old
        print(f"[{e}] best of {args.runs} {args.strategy} runs x {per_run} evaluations: "
              f"{best['value'] if best['value'] is not None else 'none feasible'} "
              f"(recorded: {old})", flush=True)
        if args.write:
            command = (f"python experiments/benchmarks/best_known.py --experiments {e} --evaluations "
                       f"{args.evaluations} --runs {args.runs} --strategy {args.strategy} --write")
            out[f"{e}_written"] = offer(e, best, command)
            offer_projections(e, command, out)
    print(json.dumps(out))


def polish_command(experiment: str, table: dict) -> str:
    """The command recorded with a polished design: the polish and the search its start came from."""
    return (f"python experiments/benchmarks/best_known.py --experiments {experiment} --polish --write "
            f"(from: {table[experiment]['command']})")


def polish_main(args) -> None:
    """`--polish`: each recorded design's coordinate search, offered to the record with `--write`."""
    torch.set_num_threads(1)
    table = recorded_for(args.experiments)
    start = time.perf_counter()
    results = run_jobs(polish_job, [{"experiment": e, "u": table[e]["u"]} for e in args.experiments], args.workers)
    out: dict = {"polish": True, "wall_s": round(time.perf_counter() - start, 1), "cpu_count": os.cpu_count()}
    for e, found in zip(args.experiments, results):
        old = table[e]["value"]
        out[f"{e}_found"], out[f"{e}_recorded"], out[f"{e}_evaluations"] = found["value"], old, found["evaluations"]
        print(f"[{e}] polished from {old}: {found['value']} ({found['evaluations']} evaluations, "
              f"{found['wall_s']} s)", flush=True)
        if args.write:
            out[f"{e}_written"] = offer(e, found, polish_command(e, table))
    if args.write:  # a design polished on one space may map onto another's
        for e in args.experiments:
            offer_projections(e, polish_command(e, table), out)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
