"""The common interface of every surrogate, input checks, and save/load without pickling.

A surrogate learns targets `Y: n x t` (e.g. log step time and log energy) of unit-cube design points
`X: n x d` (float64, `analytical.space.DesignSpace` coordinates), scikit-learn style:

    model = MLPEnsemble(n_members=5).fit(X, Y)          # the constructor only stores parameters
    mean, std = model.predict(X_new, return_std=True)   # n x t each, on the scale of Y
    model.save("path/to/dir")                           # config.json + state.pt
    same = MLPEnsemble.load("path/to/dir")              # or surrogates.load_surrogate(dir)

`save` writes `config.json` (class name, constructor parameters, shapes, format version) and
`state.pt`, a flat `{name: tensor}` dict that `torch.load(path, weights_only=True)` reads: loading
never unpickles code. A model that needs its training data to predict (an exact GP) keeps it as
tensors in that dict; the others keep only learned weights.

Learned state ends in `_` (`n_features_in_`, `n_outputs_`, ...). Bad input raises
`analytical.specs.SpecError` naming the argument; predicting with an unfitted model raises
`NotFittedError`.
"""

from __future__ import annotations

import inspect
import json
import math
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import torch

from analytical.specs import SpecError

DTYPE = torch.float64
FORMAT_VERSION = 1
CONFIG_FILE = "config.json"
STATE_FILE = "state.pt"


class NotFittedError(ValueError, AttributeError):
    """The model is used before `fit` (or `load`) gave it learned state."""


@runtime_checkable
class Surrogate(Protocol):
    """What every regression surrogate offers (shapes: `n x d` in, `n x t` out)."""

    def fit(self, X: torch.Tensor, Y: torch.Tensor) -> "Surrogate": ...

    def predict(self, X: torch.Tensor, return_std: bool = False): ...

    def save(self, directory: str | Path) -> Path: ...

    @classmethod
    def load(cls, directory: str | Path) -> "Surrogate": ...


def describe(value: Any) -> str:
    """A short text for an error message: a tensor's shape and dtype, not its contents."""
    if isinstance(value, torch.Tensor):
        return f"tensor of shape {tuple(value.shape)} and dtype {value.dtype}"
    return repr(value)


def check_X(X: Any, where: str, d: int | None = None, name: str = "X") -> torch.Tensor:
    """`X` as an `n x d` float64 tensor of finite values; `d` (when given) is the width it must have."""
    if not isinstance(X, torch.Tensor):
        raise SpecError(where, name, type(X).__name__, "a torch.Tensor of shape n x d")
    if X.dim() != 2 or X.shape[0] < 1:
        raise SpecError(where, name, describe(X), "a 2-d tensor n x d with n >= 1")
    if d is not None and X.shape[1] != d:
        raise SpecError(where, name, describe(X), f"{d} columns (the width the model was fitted on)")
    if X.is_complex() or not (X.is_floating_point() or X.dtype in (torch.int32, torch.int64)):
        raise SpecError(where, name, describe(X), "a real floating-point tensor")
    X = X.to(DTYPE)
    bad = ~torch.isfinite(X)
    if bad.any():
        row = int(bad.any(1).nonzero()[0])
        raise SpecError(where, name, f"non-finite value in row {row}", "finite values")
    return X


def check_Y(Y: Any, where: str, n: int, name: str = "Y", positive: bool = False) -> torch.Tensor:
    """`Y` as an `n x t` float64 tensor of finite values (a 1-d `(n,)` tensor is one target)."""
    if not isinstance(Y, torch.Tensor):
        raise SpecError(where, name, type(Y).__name__, "a torch.Tensor of shape n x t")
    if Y.dim() == 1:
        Y = Y.unsqueeze(-1)
    if Y.dim() != 2 or Y.shape[0] != n or Y.shape[1] < 1:
        raise SpecError(where, name, describe(Y), f"a tensor n x t with n = {n} rows (as X) and t >= 1")
    Y = Y.to(DTYPE)
    bad = ~torch.isfinite(Y)
    if bad.any():
        row = int(bad.any(1).nonzero()[0])
        raise SpecError(where, name, f"non-finite value in row {row}", "finite values (drop infeasible rows)")
    if positive and (Y <= 0).any():
        row = int((Y <= 0).any(1).nonzero()[0])
        raise SpecError(where, name, f"value <= 0 in row {row}", "values > 0 (log_targets=True takes logs)")
    return Y


def check_int(value: Any, where: str, name: str, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise SpecError(where, name, value, f"an integer >= {minimum}")
    return value


def check_float(value: Any, where: str, name: str, low: float = 0.0, high: float = math.inf,
                low_open: bool = True) -> float:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) \
        and (value > low if low_open else value >= low) and value <= high
    if not ok:
        raise SpecError(where, name, value, f"a number in {'(' if low_open else '['}{low}, {high}]")
    return float(value)


class BaseSurrogate:
    """Parameter storage, checks and persistence shared by the models.

    A subclass implements `_validate_params()`, `_fit(X, Y)`, `_predict(X) -> (mean, std)` (both
    `n x t`, float64, scale of Y), `_state() -> {name: tensor}` and `_restore(state)` (which sets the
    learned attributes from the dict `_state` wrote; `n_features_in_`/`n_outputs_` are set before).
    """

    def get_params(self) -> dict[str, Any]:
        """The constructor parameters (JSON-ready), scikit-learn style."""
        names = [p for p in inspect.signature(type(self).__init__).parameters if p != "self"]
        return {name: getattr(self, name) for name in names}

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.get_params().items())
        return f"{type(self).__name__}({args})"

    # --- the public interface -------------------------------------------------------------------
    def fit(self, X: torch.Tensor, Y: torch.Tensor) -> "BaseSurrogate":
        """Learn `Y: n x t` from `X: n x d`; returns self."""
        where = f"{type(self).__name__}.fit"
        self._validate_params()
        X = check_X(X, where)
        Y = check_Y(Y, where, X.shape[0], positive=bool(getattr(self, "log_targets", False)))
        self.n_features_in_, self.n_outputs_ = X.shape[1], Y.shape[1]
        self._fit(X, Y)
        return self

    def predict(self, X: torch.Tensor, return_std: bool = False):
        """Mean `n x t` of the targets at `X: n x d`, and their std `n x t` when `return_std`."""
        X = check_X(X, f"{type(self).__name__}.predict", d=self._fitted_width())
        mean, std = self._predict(X)
        return (mean, std) if return_std else mean

    def save(self, directory: str | Path) -> Path:
        """Write `config.json` and `state.pt` into `directory` (created); returns the directory."""
        self._fitted_width()
        path = Path(directory)
        path.mkdir(parents=True, exist_ok=True)
        state = {k: v.detach().cpu().contiguous() for k, v in self._state().items()}
        torch.save(state, path / STATE_FILE)
        config = {"class": type(self).__name__, "format_version": FORMAT_VERSION, "params": self.get_params(),
                  "n_features_in": self.n_features_in_, "n_outputs": self.n_outputs_}
        (path / CONFIG_FILE).write_text(json.dumps(config, indent=2) + "\n")
        return path

    @classmethod
    def load(cls, directory: str | Path) -> "BaseSurrogate":
        """The model `save` wrote into `directory`, rebuilt from its config and state dict."""
        config, state = read_saved(directory)
        if config["class"] != cls.__name__:
            raise SpecError(f"{cls.__name__}.load", "directory", str(directory),
                            f"a saved {cls.__name__} (it holds a {config['class']}; use surrogates.load_surrogate)")
        model = cls(**config["params"])
        model._validate_params()
        model.n_features_in_, model.n_outputs_ = int(config["n_features_in"]), int(config["n_outputs"])
        model._restore(state)
        return model

    # --- helpers for subclasses -----------------------------------------------------------------
    def _fitted_width(self) -> int:
        if not hasattr(self, "n_features_in_"):
            raise NotFittedError(f"this {type(self).__name__} is not fitted: call fit(X, Y) (or load) first")
        return self.n_features_in_

    def _validate_params(self) -> None:
        raise NotImplementedError

    def _fit(self, X: torch.Tensor, Y: torch.Tensor) -> None:
        raise NotImplementedError

    def _predict(self, X: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        raise NotImplementedError

    def _state(self) -> dict[str, torch.Tensor]:
        raise NotImplementedError

    def _restore(self, state: dict[str, torch.Tensor]) -> None:
        raise NotImplementedError


def read_config(directory: str | Path) -> dict:
    """The `config.json` of a saved model (class, params, shapes), checked."""
    path = Path(directory)
    if not (path / CONFIG_FILE).is_file() or not (path / STATE_FILE).is_file():
        raise SpecError("load", "directory", str(directory), f"a directory holding {CONFIG_FILE} and {STATE_FILE}")
    config = json.loads((path / CONFIG_FILE).read_text())
    if config.get("format_version") != FORMAT_VERSION:
        raise SpecError("load", "format_version", config.get("format_version"), str(FORMAT_VERSION))
    return config


def read_saved(directory: str | Path) -> tuple[dict, dict[str, torch.Tensor]]:
    """`(config, state)` of a saved model; state read with `weights_only=True` (no code unpickled)."""
    config = read_config(directory)
    state = torch.load(Path(directory) / STATE_FILE, map_location="cpu", weights_only=True)
    return config, state


def seeded(seed: int) -> torch.Generator:
    """A private generator (the global RNG is left alone)."""
    return torch.Generator().manual_seed(int(seed))
