"""The interface every model shares: constructors store parameters, input checks name the
argument, predict before fit is refused, and saved models load by class name without pickling."""

from __future__ import annotations

import json

import pytest
import torch

import surrogates
from analytical.specs import SpecError
from surrogates.models.base import CONFIG_FILE, STATE_FILE, NotFittedError, Surrogate, check_X, check_Y
from surrogates.models.classifier import FeasibilityClassifier
from surrogates.models.ensemble import MLPEnsemble
from surrogates.models.gp import ExactGP
from surrogates.models.svgp import SVGP

MODELS = [ExactGP, SVGP, MLPEnsemble, FeasibilityClassifier]


@pytest.mark.parametrize("cls", MODELS)
def test_constructor_only_stores_parameters(cls):
    model = cls()
    params = model.get_params()
    assert vars(model) == params  # nothing learned, nothing derived
    assert not any(name.endswith("_") for name in vars(model))
    json.dumps(params)  # what save writes into config.json
    assert cls(**params).get_params() == params
    assert repr(model).startswith(cls.__name__ + "(")


@pytest.mark.parametrize("cls", MODELS)
def test_predict_and_save_before_fit_are_refused(cls, tmp_path):
    model = cls()
    with pytest.raises(NotFittedError, match="not fitted"):
        model.predict(torch.rand(3, 2, dtype=torch.float64))
    with pytest.raises(NotFittedError, match="not fitted"):
        model.save(tmp_path)


@pytest.mark.parametrize("cls", [ExactGP, SVGP, MLPEnsemble])
def test_regression_models_follow_the_protocol(cls):
    assert isinstance(cls(), Surrogate)


def test_check_X_names_the_problem():
    with pytest.raises(SpecError, match=r"\.X = .*columns"):
        check_X(torch.rand(4, 3, dtype=torch.float64), "m.predict", d=2)
    with pytest.raises(SpecError, match=r"\.X = .*2-d"):
        check_X(torch.rand(4, dtype=torch.float64), "m.fit")
    with pytest.raises(SpecError, match=r"\.X = .*non-finite value in row 1"):
        check_X(torch.tensor([[0.1], [float("nan")]], dtype=torch.float64), "m.fit")
    with pytest.raises(SpecError, match=r"\.X = 'list'"):
        check_X([[0.1]], "m.fit")
    assert check_X(torch.rand(2, 2, dtype=torch.float32), "m.fit").dtype == torch.float64


def test_check_Y_names_the_problem():
    with pytest.raises(SpecError, match=r"m\.fit\.Y = .*non-finite value in row 2"):
        check_Y(torch.tensor([[1.0], [2.0], [float("inf")]]), "m.fit", n=3)
    with pytest.raises(SpecError, match=r"\.Y = .*n = 4 rows"):
        check_Y(torch.rand(3, 2), "m.fit", n=4)
    with pytest.raises(SpecError, match=r"\.Y = .*value <= 0 in row 0"):
        check_Y(torch.tensor([0.0, 1.0]), "m.fit", n=2, positive=True)
    assert check_Y(torch.rand(5), "m.fit", n=5).shape == (5, 1)


@pytest.mark.parametrize("cls, field, value", [(MLPEnsemble, "n_members", 0), (MLPEnsemble, "hidden", (8, 0)),
                                               (MLPEnsemble, "activation", "swish"), (SVGP, "lr", -1.0),
                                               (ExactGP, "cat_dims", [-1]), (FeasibilityClassifier, "threshold", 2.0)])
def test_bad_hyper_parameters_are_named_before_any_work(cls, field, value):
    X = torch.rand(50, 2, dtype=torch.float64)
    y = (X[:, 0] > 0.5).to(torch.float64)
    with pytest.raises(SpecError, match=rf"{cls.__name__}\.{field} = "):
        cls(**{field: value}).fit(X, y)


def test_nan_in_Y_is_refused_by_every_regression_model():
    X = torch.rand(20, 2, dtype=torch.float64)
    Y = torch.rand(20, 2, dtype=torch.float64)
    Y[7, 1] = float("nan")
    for cls in (ExactGP, SVGP, MLPEnsemble):
        with pytest.raises(SpecError, match=rf"{cls.__name__}\.fit\.Y = .*row 7"):
            cls().fit(X, Y)


def test_load_checks_the_directory_and_the_class(tmp_path):
    with pytest.raises(SpecError, match="load.directory"):
        surrogates.load_surrogate(tmp_path)
    X = torch.rand(40, 2, dtype=torch.float64)
    model = MLPEnsemble(n_members=2, hidden=(4,), max_epochs=2).fit(X, X.sum(-1, keepdim=True))
    model.save(tmp_path)
    config = json.loads((tmp_path / CONFIG_FILE).read_text())
    assert config["class"] == "MLPEnsemble" and config["n_features_in"] == 2 and config["n_outputs"] == 1
    state = torch.load(tmp_path / STATE_FILE, weights_only=True)
    assert all(isinstance(v, torch.Tensor) for v in state.values())
    with pytest.raises(SpecError, match="SVGP.load.directory"):
        SVGP.load(tmp_path)
    assert isinstance(surrogates.load_surrogate(tmp_path), MLPEnsemble)
    config["class"] = "Pickled"
    (tmp_path / CONFIG_FILE).write_text(json.dumps(config))
    with pytest.raises(SpecError, match="surrogates.class = 'Pickled'"):
        surrogates.load_surrogate(tmp_path)
