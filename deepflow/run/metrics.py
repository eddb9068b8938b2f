"""What a `deepflow optimize` run records per evaluation: the Parquet rows of a verified batch, the
derived series (objective, best so far, regret, hypervolume) sent to MLflow as metrics, the timing of
each proposal, and the enumerated optimum that regret is measured against."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any, Optional

import numpy as np
import pandas as pd
import torch

from deepflow.run.store import flatten_row

HV_MARGIN = 0.1  # hypervolume reference: nadir of the first feasible batch + this, in log units


@dataclass
class MetricContext:
    """What the per-evaluation metrics need besides the evaluations table."""

    outcomes: list[str]  # objective columns (logs), e.g. ["log_step_time_s"]
    optimum: Optional[float] = None  # best feasible objective of the space, natural units

    def reference_point(self, frame: pd.DataFrame) -> Optional[np.ndarray]:
        """Hypervolume reference (log units): nadir of the feasible rows of the batches up to the
        first one with a feasible row, plus HV_MARGIN; None before any feasible row. A function of
        the table alone, so a resumed run computes the same."""
        feasible = frame["objective_feasible"].to_numpy(dtype=bool)
        if not feasible.any():
            return None
        first_batch = frame["batch"].to_numpy()[np.argmax(feasible)]
        rows = feasible & (frame["batch"].to_numpy() <= first_batch)
        return frame.loc[rows, self.outcomes].to_numpy(dtype=float).max(0) + HV_MARGIN

    def columns(self, frame: pd.DataFrame) -> dict[str, np.ndarray]:
        """Per-row derived series of the whole table: objective, best so far, regret, hypervolume."""
        feasible = frame["objective_feasible"].to_numpy(dtype=bool)
        y0 = frame[self.outcomes[0]].to_numpy(dtype=float)
        value = np.where(feasible, np.exp(y0), np.nan)
        best = np.minimum.accumulate(np.where(feasible, value, np.inf))
        out = {"objective": value, "best_so_far": np.where(np.isfinite(best), best, np.nan)}
        if self.optimum is not None:
            out["regret"] = out["best_so_far"] / self.optimum - 1.0
        if len(self.outcomes) == 2:
            from deepflow.plots import hypervolume_2d

            ref = self.reference_point(frame)
            Y = frame[self.outcomes].to_numpy(dtype=float)
            out["hypervolume"] = np.array([hypervolume_2d(Y[:i + 1][feasible[:i + 1]], ref) if ref is not None
                                           else 0.0 for i in range(len(frame))])
            del out["objective"]
        return out

    @property
    def quantity(self) -> str:
        """The first objective with its unit: step_time_s or energy_j."""
        return self.outcomes[0].removeprefix("log_")

    def metric_name(self, key: str) -> str:
        """The MLflow name of a derived series: its unit and direction in the name
        (`best_step_time_s`: lower is better; `regret_pct`; `hypervolume_log_units`: higher is better)."""
        return {"objective": f"objective_{self.quantity}", "best_so_far": f"best_{self.quantity}",
                "regret": "regret_pct", "hypervolume": "hypervolume_log_units"}.get(key, key)

    def metrics(self, frame: pd.DataFrame, lo: int, hi: int) -> list[tuple[str, float, int]]:
        """`(key, value, step)` of rows lo..hi-1 (finite values only; step = evaluation index), named
        by `metric_name` (regret in percent)."""
        derived = {self.metric_name(k): v * (100.0 if k == "regret" else 1.0) for k, v in self.columns(frame).items()}
        per_row = ["step_time_s"] + (["energy_j"] if "energy_j" in frame.columns else [])
        per_batch = [c for c in ("propose_s", "gp_fit_s", "acquisition_s", "verify_s") if c in frame.columns]
        out = []
        for i in range(lo, hi):
            row = frame.iloc[i]
            step = int(row["index"])
            values = {"feasible": float(row["objective_feasible"]), **{c: float(row[c]) for c in per_row},
                      **{k: float(v[i]) for k, v in derived.items()}}
            if i == 0 or frame["batch"].iloc[i - 1] != row["batch"]:
                values.update({c: float(row[c]) for c in per_batch})
            out += [(k, v, step) for k, v in values.items() if math.isfinite(v)]
        return out


class TimedStrategy:
    """A strategy with the wall time of each `propose` measured; a strategy that fits models (BO)
    reports their seconds as `last_fit_s_`, so `acquisition_s = propose_s - gp_fit_s`."""

    def __init__(self, strategy):
        self.strategy = strategy
        self.name = strategy.name
        self.last: dict[str, float] = {}
        self.proposed_at = time.perf_counter()

    def propose(self, space, history, q, seed):
        start = time.perf_counter()
        X = self.strategy.propose(space, history, q, seed)
        self.proposed_at = time.perf_counter()
        propose_s = self.proposed_at - start
        fit_s = getattr(self.strategy, "last_fit_s_", 0.0)
        self.last = {"propose_s": propose_s}
        if fit_s > 0:
            self.last.update(gp_fit_s=fit_s, acquisition_s=propose_s - fit_s)
        return X


def enumerate_optimum(space, objective) -> dict[str, Any]:
    """Best feasible first objective over every point of a finite space (bin centres), in chunks."""
    from deepflow.strategies.space_grid import enumerate_space

    grid = enumerate_space(space)
    grid = grid[space.known_feasible(grid)]
    best, best_x, n_feasible = math.inf, None, 0
    for lo in range(0, grid.shape[0], 65536):
        X = grid[lo:lo + 65536]
        Y, feasible, _, _ = objective.evaluate(space, X)
        n_feasible += int(feasible.sum())
        y = torch.where(feasible, Y[:, 0], torch.full_like(Y[:, 0], math.inf))
        i = int(torch.argmin(y))
        if float(y[i]) < best:
            best, best_x = float(y[i]), X[i]
    return {"optimum": math.exp(best) if math.isfinite(best) else None, "points": int(grid.shape[0]),
            "feasible": n_feasible, "x": None if best_x is None else best_x.tolist()}


def evaluation_frame(X: torch.Tensor, rows: list[dict], start: int, batch: int, timings: dict) -> pd.DataFrame:
    """The Parquet rows of one verified batch."""
    records = []
    for i, row in enumerate(rows):
        flat = {"index": start + i, "batch": batch, **{f"x.{j}": float(v) for j, v in enumerate(X[i].tolist())},
                **flatten_row(row), **timings, "verified_at": time.time()}
        records.append(flat)
    return pd.DataFrame.from_records(records)
