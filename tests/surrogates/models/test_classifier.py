"""Feasibility classifier: recovers a known feasible region, says how sure it is, snaps discrete and
one-hots categorical inputs, and survives a save/load round trip."""

from __future__ import annotations

import pytest
import torch

import surrogates
from analytical.space import Parameter
from analytical.specs import SpecError
from surrogates.columns import DesignColumns
from surrogates.inputs import snap_to_bins
from surrogates.models.classifier import FeasibilityClassifier
from surrogates.training import make_classifier


def feasible(X: torch.Tensor) -> torch.Tensor:
    """A curved boundary (like a memory limit): feasible below it."""
    return X[:, 0] + X[:, 1] ** 2 < 0.9


@pytest.fixture(scope="module")
def data():
    gen = torch.Generator().manual_seed(0)
    X, X_test = torch.rand(600, 3, generator=gen, dtype=torch.float64), torch.rand(400, 3, generator=gen,
                                                                                  dtype=torch.float64)
    return X, feasible(X), X_test, feasible(X_test)


@pytest.fixture(scope="module")
def fitted(data):
    X, y, _, _ = data
    return FeasibilityClassifier(n_members=3, hidden=(32, 32), batch_size=64, max_epochs=40, lr=1e-2).fit(X, y)


def test_recovers_a_known_region(fitted, data):
    _, _, X_test, y_test = data
    p, std = fitted.predict_proba(X_test, return_std=True)
    assert p.shape == std.shape == (400,) and p.dtype == torch.float64
    assert ((p >= 0.5) == y_test).double().mean() > 0.93
    assert fitted.predict(X_test).dtype == torch.bool
    assert torch.equal(fitted.predict(X_test), p >= 0.5)
    margin = (X_test[:, 0] + X_test[:, 1] ** 2 - 0.9).abs()
    assert p[margin > 0.3].sub(y_test[margin > 0.3].double()).abs().max() < 0.2  # sure far from the boundary
    assert std[margin < 0.05].mean() > std[margin > 0.3].mean()  # members disagree near it


def test_save_load_round_trip(fitted, data, tmp_path):
    _, _, X_test, _ = data
    fitted.save(tmp_path)
    loaded = surrogates.load_surrogate(tmp_path)
    assert isinstance(loaded, FeasibilityClassifier)
    assert torch.equal(loaded.predict_proba(X_test), fitted.predict_proba(X_test))


def test_bad_labels_are_named(data):
    X, y, _, _ = data
    with pytest.raises(SpecError, match=r"FeasibilityClassifier\.fit\.y = .*labels 0 \(infeasible\) or 1"):
        FeasibilityClassifier().fit(X, y.double() * 2)
    with pytest.raises(SpecError, match=r"FeasibilityClassifier\.fit\.y = .*\(600,\)"):
        FeasibilityClassifier().fit(X, y[:10])
    with pytest.raises(SpecError, match=r"FeasibilityClassifier\.predict\.return_std"):
        FeasibilityClassifier().predict(X, return_std=True)


def binned_feasible(X: torch.Tensor) -> torch.Tensor:
    """Feasible by the bin of column 0 (4 unordered categories, two of them always infeasible), the
    bin of column 1 (3 ordered levels) and a smooth limit on column 2."""
    cat, level = torch.floor(X[:, 0] * 4).long(), torch.floor(X[:, 1] * 3)
    allowed = torch.tensor([True, False, True, False])[cat]
    return allowed & (0.3 * level + X[:, 2] < 1.0)


def test_discrete_and_one_hot_inputs_and_save_load(data, tmp_path):
    X, _, X_test, _ = data
    y, y_test = binned_feasible(X), binned_feasible(X_test)
    dims = dict(discrete_dims=[[0, 4], [1, 3]], one_hot_dims=[[0, 4]])
    model = FeasibilityClassifier(n_members=3, hidden=(32, 32), batch_size=64, max_epochs=40, lr=1e-2,
                                  **dims).fit(X, y)
    assert tuple(model.net_.weights[0].shape) == (3, 6, 32)  # 4 indicators + 2 columns
    same_bins = X_test.clone()
    same_bins[:, :2] = snap_to_bins(X_test, dims["discrete_dims"])[:, :2]
    p = model.predict_proba(X_test)
    assert torch.equal(model.predict_proba(same_bins), p)  # within-bin offsets are ignored
    assert ((p >= 0.5) == y_test).double().mean() > 0.95
    loaded = surrogates.load_surrogate(model.save(tmp_path))
    assert loaded.one_hot_dims == [[0, 4]] and loaded.discrete_dims == [[0, 4], [1, 3]]
    assert torch.equal(loaded.predict_proba(X_test), p)


@pytest.mark.parametrize("dims", [[[0, 1]], [[-1, 3]], [[0, 3], [0, 4]], [3], "0,3", [[0.5, 3]]])
def test_bad_dims_are_named(data, dims):
    X, y, _, _ = data
    with pytest.raises(SpecError, match=r"FeasibilityClassifier\.one_hot_dims"):
        FeasibilityClassifier(one_hot_dims=dims).fit(X, y)
    with pytest.raises(SpecError, match=r"FeasibilityClassifier\.discrete_dims"):
        FeasibilityClassifier(discrete_dims=dims).fit(X, y)
    with pytest.raises(SpecError, match=r"FeasibilityClassifier\.one_hot_dims = .*columns < d = 3"):
        FeasibilityClassifier(one_hot_dims=[[3, 2]]).fit(X, y)


def test_training_fills_the_encodings_from_the_space():
    columns = DesignColumns([Parameter("tp", "log2", 1, 8), Parameter("recompute", "categorical",
                                                                          choices=("none", "selective", "full"))])
    model = make_classifier({"max_epochs": 5}, seed=3, columns=columns)
    assert model.discrete_dims == [[0, 4], [1, 3]] and model.one_hot_dims == [[1, 3]] and model.seed == 3
    assert make_classifier().discrete_dims == ()  # no space: no encoding
