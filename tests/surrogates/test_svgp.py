"""Variational GP: recovers a known function from minibatches, with sensible uncertainty, and
survives a save/load round trip."""

from __future__ import annotations

import pytest
import torch

from analytical.specs import SpecError
from surrogates.base import STATE_FILE
from surrogates.metrics import coverage
from surrogates.svgp import SVGP


@pytest.fixture(scope="module")
def data(make_dataset):
    return make_dataset(400)


@pytest.fixture(scope="module")
def fitted(data):
    X, Y, _, _ = data
    return SVGP(num_inducing=32, epochs=40, batch_size=100, lr=0.05).fit(X, Y)


def test_recovers_a_known_function_with_sensible_std(fitted, data):
    _, Y, X_test, Y_test = data
    mean, std = fitted.predict(X_test, return_std=True)
    assert mean.shape == std.shape == (300, 2) and std.dtype == torch.float64
    assert fitted.gp_.variational_strategy.inducing_points.shape == (2, 32, 3)  # one GP per output
    rmse = ((mean - Y_test) ** 2).mean(0).sqrt()
    assert (rmse < 0.1 * Y_test.std(0)).all(), rmse
    assert (coverage(Y_test, mean, std) > 0.85).all()
    assert (std < 0.5 * Y_test.std(0)).all()


def test_inducing_points_move(fitted, data):
    X, _, _, _ = data
    inducing = fitted.gp_.variational_strategy.inducing_points  # initialised on training rows
    distance = torch.cdist(inducing.reshape(-1, 3), fitted._scale_x(X)).min(1).values
    assert (distance > 1e-4).all()  # learn_inducing_locations=True moved every one of them


def test_save_load_round_trip(fitted, data, tmp_path):
    _, _, X_test, _ = data
    fitted.save(tmp_path)
    state = torch.load(tmp_path / STATE_FILE, weights_only=True)
    assert "train_X" not in state and state["gp.variational_strategy.inducing_points"].shape == (2, 32, 3)
    loaded = SVGP.load(tmp_path)
    mean, std = fitted.predict(X_test, return_std=True)
    mean2, std2 = loaded.predict(X_test, return_std=True)
    assert torch.equal(mean2, mean) and torch.equal(std2, std)


def test_bad_input_is_named(fitted):
    with pytest.raises(SpecError, match=r"SVGP\.predict\.X = .*3 columns"):
        fitted.predict(torch.rand(2, 5, dtype=torch.float64))
    with pytest.raises(SpecError, match=r"SVGP\.num_inducing = 0"):
        SVGP(num_inducing=0).fit(torch.rand(10, 2, dtype=torch.float64), torch.rand(10, 1, dtype=torch.float64))
