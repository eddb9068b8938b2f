"""BO's warm start (`deepflow.run.warm_start.fit_prior`): Sobol samples labelled by the model in one batch,
the objectives and the modelled constraint margins side by side, a surrogate fitted on them."""

from __future__ import annotations

import torch

from deepflow.config import compose_config
from deepflow.run.job import CONFIG_NAME, prepare
from deepflow.run.warm_start import fit_prior


def quickstart(samples: int):
    overrides = ["experiment=quickstart", f"warm_start.samples={samples}", "warm_start.params.max_epochs=2"]
    return prepare(compose_config(overrides, CONFIG_NAME), overrides)


def test_fit_prior_labels_seeded_sobol_samples_and_learns_objective_and_margins():
    job = quickstart(32)
    prior = fit_prior(job, 32, seed=3)
    assert prior.X.shape == (32, job.space.dim) and prior.names == ["log_step_time_s", "constraint_memory"]
    assert prior.Y.shape == (32, 2) and prior.feasible.dtype == torch.bool and prior.fit_s > 0.0
    # what fits in memory has a margin <= 0 (the constraint column is the model's own memory rule)
    assert bool((prior.Y[prior.feasible, 1] <= 0).all())
    mean, std = prior.model.predict(prior.X[:5], return_std=True)
    assert mean.shape == std.shape == (5, 2) and bool(torch.isfinite(mean).all())
    assert torch.equal(fit_prior(job, 32, seed=3).X, prior.X)  # the same seed, the same samples
    assert not torch.equal(fit_prior(job, 32, seed=4).X, prior.X)
