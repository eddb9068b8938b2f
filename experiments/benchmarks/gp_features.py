"""How well BO's objective GP predicts the step time near the best-known design, with and without the
derived chip's figures as inputs (`strategy.chip_features`).

    python experiments/benchmarks/gp_features.py                          # the three chip spaces searched by candidates
    python experiments/benchmarks/gp_features.py --experiments mixtral-8x7b-n3-codesign --train 240 --test 150

Per experiment (composed as `deepflow optimize experiment=<name>` composes it): designs to train on,
half the space's scrambled Sobol points and half near the recorded best-known design
(`codesign_best_known.json`; its continuous coordinates moved by N(0, `--scale`^2), clipped to the unit
cube, known-infeasible points dropped), and `--test` more near it to predict, all verified by the
analytical model; the feasible ones count. The GP is the one BO fits (`BayesianOptimization.predictor`:
the same kernel, noise and fit), once on the points alone (`chip_features=false`) and once with the
chip's figures. Printed per experiment and GP: the median relative error of the predicted step time on
the test designs, the rank correlation (Spearman) of prediction and truth, and how far the test design
the GP ranks first is from the best test design.

Ends with one JSON line: per experiment and GP those three figures and the design counts.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import warnings
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from best_known import compose, recorded_for  # noqa: E402

EXPERIMENTS = ("llama3-70b-n5-hierarchical", "mixtral-8x7b-n3-codesign", "llama3-70b-joint")


def near(space, u: torch.Tensor, n: int, scale: float, gen: torch.Generator) -> torch.Tensor:
    """At most `n` known-feasible points: `u d` with its continuous coordinates moved by N(0, scale^2)."""
    continuous = torch.tensor([math.isinf(p.cardinality) for p in space.parameters])
    X = u.repeat(4 * n, 1) + torch.randn(4 * n, space.dim, generator=gen, dtype=torch.float64) * scale * continuous
    X = X.clamp(0.0, 1.0)
    return X[space.known_feasible(X)][:n]


def spearman(a: torch.Tensor, b: torch.Tensor) -> float:
    ra, rb = a.argsort().argsort().double(), b.argsort().argsort().double()
    return float(torch.corrcoef(torch.stack([ra, rb]))[0, 1])


def measure(experiment: str, u: list[float], train: int, test: int, scale: float, seed: int) -> dict:
    """The figures of both GPs on one experiment, around its best-known point `u` (module docstring)."""
    from deepflow.strategies.bo import BayesianOptimization

    job = compose(experiment)
    space = job.space
    u = torch.tensor(u, dtype=torch.float64)
    gen = torch.Generator().manual_seed(seed)
    X = torch.cat([space.sample(train // 2, seed=seed), near(space, u, train - train // 2, scale, gen),
                   near(space, u, test, scale, gen)])
    is_test = torch.arange(X.shape[0]) >= X.shape[0] - test
    Y, feasible, _, _ = job.objective.evaluate(space, X)
    X, y, is_test = X[feasible], Y[feasible, 0], is_test[feasible]
    out = {"train": int((~is_test).sum()), "test": int(is_test.sum())}
    truth = y[is_test]
    for name, flag in (("point", False), ("point_and_chip", True)):
        predict = BayesianOptimization(chip_features=flag).predictor(space, X[~is_test], y[~is_test])
        mean, _ = predict(X[is_test])
        out[name] = {"median_error": float((torch.exp(mean - truth) - 1.0).abs().median()),
                     "spearman": spearman(mean, truth),
                     "first_ranked_gap": float(torch.exp(truth[int(mean.argmin())] - truth.min()) - 1.0)}
    return out


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--experiments", nargs="+", default=list(EXPERIMENTS))
    parser.add_argument("--train", type=int, default=240, help="designs to fit on (half Sobol, half near the record)")
    parser.add_argument("--test", type=int, default=150, help="designs near the record to predict")
    parser.add_argument("--scale", type=float, default=0.03, help="spread of the designs near the record (unit cube)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.train < 4 or args.test < 2 or args.scale <= 0:
        parser.error("--train must be >= 4, --test >= 2, --scale > 0")
    table = recorded_for(args.experiments)  # bad names and missing records fail here, before any work
    warnings.simplefilter("ignore")
    torch.set_num_threads(1)
    out: dict = {"train": args.train, "test": args.test, "scale": args.scale, "seed": args.seed}
    for e in args.experiments:
        found = measure(e, table[e]["u"], args.train, args.test, args.scale, args.seed)
        print(f"[{e}] {found['train']} feasible designs to fit on, {found['test']} to predict")
        for name in ("point", "point_and_chip"):
            f = found[name]
            print(f"  {name:15s} median error {f['median_error']:.2%}, rank correlation {f['spearman']:.3f}, "
                  f"its first-ranked test design {f['first_ranked_gap']:+.2%} from the best", flush=True)
        out[e] = found
    print(json.dumps(out))


if __name__ == "__main__":
    main()
