"""The loop: verified batches reported one by one, budget, resume without re-evaluating."""

import pytest
import torch

from analytical.specs import SpecError
from deepflow.run.loop import run
from deepflow.run.objectives import make_objective
from deepflow.strategies import make_strategy
from deepflow.strategies.base import History
from tests.deepflow.optspaces import one_thread, small_mapping_space  # noqa: F401 (autouse fixture)


class Recorder:
    def __init__(self):
        self.batches = []

    def __call__(self, X, rows):
        self.batches.append((X.clone(), rows))

    @property
    def count(self):
        return sum(X.shape[0] for X, _ in self.batches)


def test_every_batch_is_verified_and_reported():
    space, objective, rec = small_mapping_space(), make_objective("step_time"), Recorder()
    history = run(space, objective, make_strategy("random"), 10, q=4, seed=0, on_evaluation=rec)
    assert history.n == 10 and [X.shape[0] for X, _ in rec.batches] == [4, 4, 2]
    result = space.evaluate(history.X)
    assert torch.allclose(history.Y[:, 0], torch.log(result.step_time_s))
    assert torch.equal(history.feasible, result.feasible)
    row = rec.batches[0][1][0]
    assert {"step_time_s", "feasible", "design", "log_step_time_s", "constraint_memory"} <= set(row)


def test_resume_does_not_reevaluate_and_matches_an_uninterrupted_run():
    space, objective = small_mapping_space(), make_objective("step_time")
    for name in ("random", "evolution"):
        params = {"population": 4} if name == "evolution" else {}
        full = run(space, objective, make_strategy(name, **params), 15, q=3, seed=7)
        first, rec = run(space, objective, make_strategy(name, **params), 9, q=3, seed=7), Recorder()
        resumed = run(space, objective, make_strategy(name, **params), 15, q=3, seed=7, history=first,
                      on_evaluation=rec)
        assert rec.count == 6  # only the new evaluations
        assert torch.equal(resumed.X[:9], first.X)
        assert torch.equal(resumed.X, full.X)


def test_bad_arguments_name_the_field():
    space, objective = small_mapping_space(), make_objective("step_time")
    with pytest.raises(SpecError, match="budget"):
        run(space, objective, make_strategy("random"), 0)
    with pytest.raises(SpecError, match=r"\bq\b"):
        run(space, objective, make_strategy("random"), 5, q=0)
    with pytest.raises(SpecError, match="history"):
        run(space, objective, make_strategy("random"), 5, history=History.empty(3, 1, 2))
    with pytest.raises(SpecError, match=r"history\.C"):
        run(space, objective, make_strategy("random"), 5, history=History.empty(space.dim, 1, 1))
    with pytest.raises(SpecError, match="strategy"):
        run(space, objective, object(), 5)
