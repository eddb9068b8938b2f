"""What the co-design searches face: the step time along each continuous coordinate of a best-known design.

    python experiments/benchmarks/landscape.py                                   # every experiment
    python experiments/benchmarks/landscape.py --experiments mixtral-8x7b-n3-codesign --points 41 --width 0.1

Per experiment (composed as `deepflow optimize experiment=<name>` composes it) and per continuous
parameter of its space (the chip's splits, the power budget): `--points` designs from the recorded
best-known design (`codesign_best_known.json`) with only that coordinate moved, evenly within
+- `--width` of the unit cube, each verified by the analytical model. Printed per slice: the step
time at each point (`x` where infeasible), its range, and its jumps: steps between neighbouring
points larger than `--jump` (relative) and than 3x the steps beside them, a discontinuity rather
than a steep slope (one compute unit more finishing a GEMM in one wave fewer; one more memory
stack fitting the shoreline). A GP with a smooth kernel cannot represent a jump of several per cent
between two points 0.005 apart; it leaves a search's best point a per cent or two above the best
design next to it.

Ends with one JSON line: per experiment and parameter the slice's values, its jumps and the largest one.
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
from best_known import EXPERIMENTS, compose, recorded_for  # noqa: E402


def slice_values(job, u: torch.Tensor, i: int, points: int, width: float) -> tuple[list[float], list[float | None]]:
    """The coordinate values and step times (None where infeasible) of `points` designs: `u d` with
    coordinate `i` moved evenly within +- `width`, clipped to the unit cube."""
    ts = torch.linspace(float(u[i]) - width, float(u[i]) + width, points, dtype=torch.float64).clamp(0.0, 1.0)
    X = u.repeat(points, 1)
    X[:, i] = ts
    Y, feasible, _, _ = job.objective.evaluate(job.space, X)
    return ts.tolist(), [math.exp(float(y)) if bool(f) else None for y, f in zip(Y[:, 0], feasible)]


def jumps(values: list[float | None], threshold: float) -> list[dict]:
    """Steps between neighbouring feasible points that change the step time by more than `threshold`
    (relative) and by more than 3x either neighbouring step: a discontinuity, not a steep slope."""
    d = [None if a is None or b is None else b / a - 1.0 for a, b in zip(values, values[1:])]
    out = []
    for k, step in enumerate(d):
        if step is None or abs(step) <= threshold:
            continue
        around = [abs(x) for x in (d[k - 1] if k else None, d[k + 1] if k + 1 < len(d) else None) if x is not None]
        if all(abs(step) > 3.0 * x for x in around):
            out.append({"after": k, "relative": step})
    return out


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--experiments", nargs="+", default=list(EXPERIMENTS))
    parser.add_argument("--points", type=int, default=41, help="designs per slice")
    parser.add_argument("--width", type=float, default=0.1, help="half-width of a slice on the unit cube")
    parser.add_argument("--jump", type=float, default=0.01,
                        help="least relative step between neighbours called a jump (and 3x the steps beside it)")
    args = parser.parse_args(argv)
    if args.points < 2 or not 0.0 < args.width <= 1.0 or args.jump <= 0.0:
        parser.error("--points must be >= 2, --width in (0, 1], --jump > 0")
    table = recorded_for(args.experiments)
    warnings.simplefilter("ignore")
    out: dict = {"points": args.points, "width": args.width, "jump": args.jump}
    for e in args.experiments:
        job = compose(e)
        u = torch.tensor(table[e]["u"], dtype=torch.float64)
        print(f"[{e}] best-known {table[e]['value']:.4f} s; step time with one coordinate moved "
              f"(+- {args.width} of the unit cube, {args.points} points)")
        for i, p in enumerate(job.space.parameters):
            if not math.isinf(p.cardinality):
                continue
            ts, values = slice_values(job, u, i, args.points, args.width)
            found = jumps(values, args.jump)
            feasible = [v for v in values if v is not None]
            largest = max((abs(j["relative"]) for j in found), default=0.0)
            print(f"  {p.name} at {float(u[i]):.3f}: {min(feasible, default=math.nan):.4f}-"
                  f"{max(feasible, default=math.nan):.4f} s, {len(found)} jumps over {args.jump:.0%} "
                  f"(largest {largest:.1%})")
            print("    " + " ".join("x" if v is None else f"{v:.4f}" for v in values))
            out[f"{e}/{p.name}"] = {"u": ts, "step_time_s": values, "jumps": found, "largest_jump": largest}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
