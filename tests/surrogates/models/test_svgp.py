"""Variational GP: recovers a known function from minibatches, with sensible uncertainty, predicts
through cached terms exactly as gpytorch does, snaps discrete and one-hots categorical inputs, and
survives a save/load round trip."""

from __future__ import annotations

import pytest
import torch

from analytical.space import Parameter
from analytical.specs import SpecError
from surrogates.columns import DesignColumns
from surrogates.inputs import snap_to_bins
from surrogates.metrics import coverage
from surrogates.models.base import STATE_FILE
from surrogates.models.svgp import SVGP
from surrogates.training import make_surrogate


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


def test_cached_prediction_equals_gpytorchs(fitted, data, tmp_path):
    """The cached closed form (module docstring) against gpytorch's own `likelihood(gp(x))`, on test
    points, training points and far outside the cube, fitted and after a save/load."""
    X, _, X_test, _ = data
    Xs = fitted._scale_x(torch.cat([X_test, X[:20], torch.full((1, 3), 3.0, dtype=torch.float64)]))
    loaded = SVGP.load(fitted.save(tmp_path))
    for model in (fitted, loaded):
        with torch.no_grad():
            reference = model.likelihood_(model.gp_(Xs))
        mean, variance = model._moments(Xs)
        assert mean.shape == variance.shape == (2, 321)
        assert torch.allclose(mean, reference.mean, rtol=1e-8, atol=1e-10 * reference.mean.abs().max())
        assert torch.allclose(variance, reference.variance, rtol=1e-8, atol=0)


def binned_dataset(n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """`n x 3` points and `n x 1` targets that depend on the bin of column 0 (4 bins, a categorical
    whose codes are unordered) and of column 1 (3 ordered bins), and smoothly on column 2."""
    X = torch.rand(n, 3, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    cat = torch.floor(X[:, 0] * 4).clamp(max=3).long()
    level = torch.floor(X[:, 1] * 3).clamp(max=2)
    y = torch.tensor([0.0, 1.5, -1.0, 0.5], dtype=torch.float64)[cat] + 0.5 * level + torch.sin(3 * X[:, 2])
    return X, y.unsqueeze(-1)


def test_discrete_and_one_hot_inputs_and_save_load(tmp_path):
    X, Y = binned_dataset(400, 0)
    X_test, Y_test = binned_dataset(200, 1)
    small = dict(num_inducing=32, epochs=60, batch_size=100, lr=0.05)
    model = SVGP(**small, discrete_dims=[[0, 4], [1, 3]], one_hot_dims=[[0, 4]]).fit(X, Y)
    assert model.gp_.variational_strategy.inducing_points.shape == (1, 32, 6)  # 4 indicators + 2 columns
    same_bins = X_test.clone()
    same_bins[:, :2] = snap_to_bins(X_test, [(0, 4), (1, 3)])[:, :2]  # same designs, bin centres
    mean, std = model.predict(X_test, return_std=True)
    assert torch.equal(model.predict(same_bins), mean)  # within-bin offsets are ignored
    plain = SVGP(**small).fit(X, Y)
    rmse = ((mean - Y_test) ** 2).mean().sqrt()
    assert rmse < 0.1 * Y_test.std() and rmse < 0.5 * ((plain.predict(X_test) - Y_test) ** 2).mean().sqrt()
    model.save(tmp_path)
    assert torch.load(tmp_path / STATE_FILE, weights_only=True)["x_low"].shape == (6,)
    loaded = SVGP.load(tmp_path)
    assert loaded.discrete_dims == [[0, 4], [1, 3]] and loaded.one_hot_dims == [[0, 4]]
    mean2, std2 = loaded.predict(X_test, return_std=True)
    assert torch.equal(mean2, mean) and torch.equal(std2, std)


@pytest.mark.parametrize("dims", [[[0, 1]], [[-1, 3]], [[0, 3], [0, 4]], [3], "0,3", [[0.5, 3]]])
def test_bad_dims_are_named(dims):
    X, Y = torch.rand(20, 2, dtype=torch.float64), torch.rand(20, 1, dtype=torch.float64)
    with pytest.raises(SpecError, match=r"SVGP\.one_hot_dims"):
        SVGP(one_hot_dims=dims).fit(X, Y)
    with pytest.raises(SpecError, match=r"SVGP\.discrete_dims"):
        SVGP(discrete_dims=dims).fit(X, Y)
    with pytest.raises(SpecError, match=r"SVGP\.discrete_dims = .*columns < d = 2"):
        SVGP(discrete_dims=[[2, 3]]).fit(X, Y)


def test_training_fills_the_encodings_from_the_space():
    columns = DesignColumns([Parameter("tp", "log2", 1, 8), Parameter("recompute", "categorical",
                                                                          choices=("none", "selective", "full")),
                             Parameter("hbm_bw_bytes_per_s", "continuous", 1e12, 4e12)])
    model = make_surrogate("svgp", {}, columns)
    assert model.discrete_dims == [[0, 4], [1, 3]] and model.one_hot_dims == [[1, 3]]
    assert make_surrogate("svgp", {"one_hot_dims": []}, columns).one_hot_dims == ()  # given: kept
    assert make_surrogate("gp", {}, columns).discrete_dims == [[0, 4], [1, 3]]
