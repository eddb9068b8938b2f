"""Exact GP (BoTorch SingleTaskGP / MixedSingleTaskGP): recovers a known function with sensible
uncertainty, its transforms invert, it snaps discrete inputs to their bins, and it survives a
save/load round trip."""

from __future__ import annotations

import pytest
import torch
from botorch.models import MixedSingleTaskGP, SingleTaskGP

from analytical.specs import SpecError
from surrogates.inputs import snap_to_bins
from surrogates.metrics import coverage
from surrogates.models.base import STATE_FILE
from surrogates.models.gp import ExactGP


@pytest.fixture(scope="module")
def data(make_dataset):
    return make_dataset(60)


@pytest.fixture(scope="module")
def fitted(data):
    X, Y, _, _ = data
    return ExactGP(max_iter=60).fit(X, Y)


def test_recovers_a_known_function_with_sensible_std(fitted, data):
    _, _, X_test, Y_test = data
    mean, std = fitted.predict(X_test, return_std=True)
    assert isinstance(fitted.model_, SingleTaskGP) and fitted.model_.num_outputs == 2
    assert mean.shape == std.shape == (300, 2) and mean.dtype == torch.float64
    rmse = ((mean - Y_test) ** 2).mean(0).sqrt()
    assert (rmse < 0.02 * Y_test.std(0)).all(), rmse
    assert (coverage(Y_test, mean, std) > 0.85).all()
    assert (std < 0.1 * Y_test.std(0)).all()  # confident where it has data...
    far = fitted.predict(torch.full((1, 3), 3.0, dtype=torch.float64), return_std=True)[1]
    assert (far > 10 * std.mean(0)).all()  # ...and not far outside the cube
    assert torch.equal(fitted.predict(X_test), mean)


def test_transforms_invert(fitted, data):
    X, Y, _, _ = data
    model = fitted.model_
    tf_Y, _ = model.outcome_transform(Y)
    assert tf_Y.mean(0).abs().max() < 1e-9  # Standardize learned the training moments
    assert torch.allclose(model.outcome_transform.untransform(tf_Y)[0], Y, atol=1e-12)
    normalize = model.input_transform
    assert torch.allclose(normalize.untransform(normalize.transform(X)), X, atol=1e-12)


def test_log_targets_model_the_log_and_return_the_raw_scale(make_dataset):
    X, Y, X_test, Y_test = make_dataset(60)
    model = ExactGP(log_targets=True, max_iter=60).fit(X, torch.exp(Y))
    tf_Y, _ = model.model_.outcome_transform(torch.exp(Y))
    assert torch.allclose(model.model_.outcome_transform.untransform(tf_Y)[0], torch.exp(Y), rtol=1e-10)
    mean, std = model.predict(X_test, return_std=True)
    assert ((mean - torch.exp(Y_test)).abs() / torch.exp(Y_test)).mean() < 0.02
    assert (std > 0).all()
    with pytest.raises(SpecError, match=r"ExactGP\.fit\.Y = .*<= 0"):
        ExactGP(log_targets=True).fit(X, Y)


def test_categorical_dims_give_a_mixed_model(make_dataset):
    X, _, X_test, _ = make_dataset(60)

    def f(X):  # column 2 holds the bin centres of 3 categories with unrelated offsets
        return (torch.sin(3 * X[:, 0]) + X[:, 1] + torch.tensor([0.0, 2.0, -1.0], dtype=X.dtype)[
            (X[:, 2] * 3).long()]).unsqueeze(-1)

    for Z in (X, X_test):
        Z[:, 2] = (torch.floor(Z[:, 2] * 3) + 0.5) / 3
    model = ExactGP(cat_dims=[2], max_iter=60).fit(X, f(X))
    assert isinstance(model.model_, MixedSingleTaskGP)
    assert ((model.predict(X_test) - f(X_test)) ** 2).mean().sqrt() < 0.05
    with pytest.raises(SpecError, match=r"ExactGP\.cat_dims"):
        ExactGP(cat_dims=[5]).fit(X, f(X))


def test_save_load_round_trip(fitted, data, tmp_path):
    _, _, X_test, _ = data
    fitted.save(tmp_path)
    state = torch.load(tmp_path / STATE_FILE, weights_only=True)
    assert torch.equal(state["train_X"], fitted.train_X_)  # a GP predicts from its data
    loaded = ExactGP.load(tmp_path)
    mean, std = fitted.predict(X_test, return_std=True)
    mean2, std2 = loaded.predict(X_test, return_std=True)
    assert torch.allclose(mean2, mean, rtol=0, atol=1e-9) and torch.allclose(std2, std, rtol=0, atol=1e-9)
    with pytest.raises(SpecError, match=r"ExactGP\.predict\.X = .*3 columns"):
        loaded.predict(torch.rand(2, 4, dtype=torch.float64))


def test_discrete_dims_snap_inputs_for_a_mixed_model_and_survive_save_load(tmp_path):
    """Column 0 a categorical with 4 unordered codes, column 1 3 ordered bins, given as raw cube
    coordinates (within-bin offsets): snapped, the categorical kernel sees 4 categories, not one per row."""
    gen = torch.Generator().manual_seed(0)
    X, X_test = torch.rand(80, 3, generator=gen, dtype=torch.float64), torch.rand(200, 3, generator=gen,
                                                                                  dtype=torch.float64)

    def f(X):
        cat, level = torch.floor(X[:, 0] * 4).long(), torch.floor(X[:, 1] * 3)
        return (torch.tensor([0.0, 1.5, -1.0, 0.5], dtype=X.dtype)[cat] + 0.5 * level
                + torch.sin(3 * X[:, 2])).unsqueeze(-1)

    dims = [[0, 4], [1, 3]]
    model = ExactGP(cat_dims=[0], discrete_dims=dims, max_iter=60).fit(X, f(X))
    assert isinstance(model.model_, MixedSingleTaskGP) and torch.equal(model.train_X_, X)  # kept as given
    same_bins = X_test.clone()
    same_bins[:, :2] = snap_to_bins(X_test, dims)[:, :2]
    mean, std = model.predict(X_test, return_std=True)
    assert torch.equal(model.predict(same_bins), mean)  # within-bin offsets are ignored
    assert ((mean - f(X_test)) ** 2).mean().sqrt() < 0.05 * f(X_test).std()
    loaded = ExactGP.load(model.save(tmp_path))
    assert loaded.discrete_dims == dims
    mean2, std2 = loaded.predict(X_test, return_std=True)
    assert torch.allclose(mean2, mean, rtol=0, atol=1e-9) and torch.allclose(std2, std, rtol=0, atol=1e-9)


@pytest.mark.parametrize("dims", [[[0, 1]], [[-1, 3]], [[0, 3], [0, 4]], [3], "0,3", [[0.5, 3]]])
def test_bad_discrete_dims_are_named(dims):
    X, Y = torch.rand(10, 2, dtype=torch.float64), torch.rand(10, 1, dtype=torch.float64)
    with pytest.raises(SpecError, match=r"ExactGP\.discrete_dims"):
        ExactGP(discrete_dims=dims).fit(X, Y)
    with pytest.raises(SpecError, match=r"ExactGP\.discrete_dims = .*columns < d = 2"):
        ExactGP(discrete_dims=[[2, 3]]).fit(X, Y)
