"""Feasibility classifier: recovers a known feasible region, says how sure it is, and survives a
save/load round trip."""

from __future__ import annotations

import pytest
import torch

import surrogates
from analytical.specs import SpecError
from surrogates.classifier import FeasibilityClassifier


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
