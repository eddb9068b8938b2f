"""The optimization loop: propose, verify with the analytical model, record; resumable.

`run(space, objective, strategy, budget, q, seed)` asks the strategy for `q` unit-cube points at a
time, verifies each with `space.evaluate` (nothing counts before it is verified), appends them to
the `History` and calls `on_evaluation(X_new, rows)` after every verified batch, so that a caller
(the MLflow tracking of `deepflow optimize`) can persist them before the next proposal. Given the
`history` of a killed run, it continues from there without evaluating those points again: the
strategies are stateless and the seed of each batch is derived from the seed and the batch's
position, so a resumed run proposes what the uninterrupted run would have.

No MLflow or Hydra here.
"""

from __future__ import annotations

from typing import Callable, Optional

import torch

from analytical.codes import DTYPE
from analytical.specs import SpecError
from deepflow.run.objectives import Objective
from deepflow.strategies.base import History, Strategy, check_q

OnEvaluation = Callable[[torch.Tensor, list[dict]], None]


def batch_seed(seed: int, n_done: int) -> int:
    """Seed of the batch proposed after `n_done` evaluations (same on resume)."""
    return int(seed) * 1_000_003 + int(n_done)


def verify(space, objective: Objective, X: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor,
                                                                  list[dict]]:
    """Evaluate `X q x d`: `(Y q x m, feasible q, C q x c, rows)`; a row is the model's
    `StepResult.row` plus the objective's outcomes, the constraint values and the decoded design."""
    Y, feasible, C, result = objective.evaluate(space, X)
    values = space.decode(X)
    rows = []
    for i, row in enumerate(result.rows()):
        row["design"] = {name: float(v[i]) for name, v in values.items()}
        row.update({name: float(Y[i, j]) for j, name in enumerate(objective.outcome_names)})
        row.update({f"constraint_{name}": float(C[i, j]) for j, name in enumerate(objective.constraint_names)})
        row["objective_feasible"] = bool(feasible[i])
        rows.append(row)
    return Y, feasible, C, rows


def run(space, objective: Objective, strategy: Strategy, budget: int, q: int = 1, seed: int = 0,
        on_evaluation: Optional[OnEvaluation] = None, history: Optional[History] = None) -> History:
    """Run `strategy` until `budget` verified evaluations (a history's rows count towards it).

    space: an `analytical.space.DesignSpace` (or anything with its `dim`, `sample`, `decode`,
    `to_batch`, `known_feasible`, `evaluate`, e.g. `deepflow.run.hierarchical.BestMappingSpace`).
    Returns the full history (given rows first). The last batch is shortened to fit the budget.
    """
    if isinstance(budget, bool) or not isinstance(budget, int) or budget < 1:
        raise SpecError("optimize", "budget", budget, "an integer >= 1")
    check_q(q)
    if not isinstance(strategy, Strategy):
        raise SpecError("optimize", "strategy", strategy, "an object with name and propose(space, history, q, seed)")
    objective.check(space)
    c = len(objective.constraint_names)
    if history is None:
        history = History.empty(space.dim, objective.num_objectives, c)
    if history.d != space.dim or history.m != objective.num_objectives:
        raise SpecError("optimize", "history", (history.d, history.m),
                        f"a history with d = {space.dim} and m = {objective.num_objectives}")
    if history.C is None or history.C.shape[1] != c:
        raise SpecError("optimize", "history.C", None if history.C is None else tuple(history.C.shape),
                        f"n x {c} constraint values ({', '.join(objective.constraint_names)})")
    while history.n < budget:
        k = min(q, budget - history.n)
        X = strategy.propose(space, history, k, batch_seed(seed, history.n)).to(DTYPE)
        if X.dim() != 2 or X.shape[1] != space.dim or not 1 <= X.shape[0] <= k:
            raise SpecError(f"strategy[{strategy.name}]", "proposal", tuple(X.shape), f"1..{k} x {space.dim} points")
        X = X.clamp(0.0, 1.0)
        Y, feasible, C, rows = verify(space, objective, X)
        history = history.append(X, Y, feasible, C)
        if on_evaluation is not None:
            on_evaluation(X, rows)
    return history
