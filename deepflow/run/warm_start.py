"""The warm start of BO: a surrogate fitted on Sobol samples the analytical model labels in one batch,
which becomes the GP's prior mean (`BayesianOptimization(prior=...)`).

`fit_prior(job, samples, seed)` is the whole of it, without storage: `deepflow optimize` (`deepflow.run.execute`)
saves the model and the samples beside the run; the co-design benchmark calls it per seed. The
samples are NOT verified evaluations of the run: they are counted apart (`job.warm_start.samples`)."""

from __future__ import annotations

import inspect
import time
from dataclasses import dataclass

import torch

from deepflow.run.job import Job


@dataclass
class Prior:
    """A fitted warm-start surrogate and what it learned from: `X samples x d` (unit cube), `Y samples x
    (objectives + modelled constraints)` (the objectives' logs, then the memory / power margins),
    `feasible samples`, and the seconds labelling and fitting took."""

    model: object
    X: torch.Tensor
    Y: torch.Tensor
    feasible: torch.Tensor
    names: list[str]
    fit_s: float


def fit_prior(job: Job, samples: int, seed: int) -> Prior:
    """Label `samples` scrambled Sobol points of `job.space` (seeded by `seed`) with `job.objective`
    and fit `job.warm_start`'s surrogate class on them (module docstring).

    The surrogate learns the objectives and the modelled constraint margins (memory, power) side by
    side, on every valid design (feasible, or over memory / power: their times are still the model's),
    so BO's constraint GPs get the same prior as its objective GPs."""
    from surrogates import model_class
    from surrogates.columns import DesignColumns
    from surrogates.training import fill_input_dims

    start = time.perf_counter()
    X = job.space.sample(samples, method="sobol", seed=seed)
    Y, feasible, C, _ = job.objective.evaluate(job.space, X)
    margins = C[:, job.objective.modelled_constraints]
    Y = torch.cat([Y, margins], dim=-1)
    valid = (C[:, job.objective.constraint_names.index("other")] <= 0) & torch.isfinite(Y).all(-1)
    cls = model_class(job.warm_start.get("model"))
    # the input encodings of the space (snapped bins, one-hot categoricals, ...), as training gives them
    params = fill_input_dims(dict(job.warm_start.get("params") or {}), inspect.signature(cls.__init__).parameters,
                             DesignColumns(job.space.parameters))
    rows = valid if int(valid.sum()) >= 2 else torch.ones_like(valid)
    model = cls(**params).fit(X[rows], Y[rows])
    names = job.objective.outcome_names + [f"constraint_{job.objective.constraint_names[j]}"
                                           for j in job.objective.modelled_constraints]
    return Prior(model=model, X=X, Y=Y, feasible=feasible, names=names, fit_s=time.perf_counter() - start)
