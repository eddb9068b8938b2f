"""A trained surrogate as something that answers named designs: locally and as an MLflow pyfunc.

`SurrogatePredictor` joins a fitted model (unit cube in, log targets out), the space's parameter
list (named design columns -> unit cube, `surrogates.columns`) and the range it was trained on:

    predictor.predict(designs)  # DataFrame with the design columns -> DataFrame, one row per design

Its output has, per target (e.g. `step_time_s`), the log-normal predictive of the original-scale
value: `<target>_mean`, `<target>_std`, `<target>_median` (exp of the log-scale mean, the point
prediction the metrics use) and the central 95 % interval `<target>_lower`, `<target>_upper`; with
a feasibility classifier also `feasible_prob`.

On disk (`save_predictor`) it is three things, none of them pickled: the model's directory
(`config.json` + `state.pt`, read with `torch.load(weights_only=True)`), an optional classifier
directory of the same form, and `surrogate.json` (space, targets, trained range). MLflow logs it as
a models-from-code pyfunc: `surrogates/mlflow_model.py` is the model's code (MLflow copies the file,
pickles nothing) and `SurrogatePyfunc.load_context` rebuilds the predictor from those artifacts.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
import pandas as pd
import torch

from analytical.specs import SpecError
from surrogates.columns import DesignColumns

META_FILE = "surrogate.json"
MODEL_ARTIFACT = "model"
CLASSIFIER_ARTIFACT = "classifier"
META_ARTIFACT = "meta"
META_FORMAT_VERSION = 1
INTERVAL_Z = 1.959963984540054  # two-sided 95 % quantile of the standard normal
OUTPUT_SUFFIXES = ("mean", "std", "median", "lower", "upper")


def load_saved_model(directory: str | Path):
    """A model `save` wrote, rebuilt by the class its `config.json` names (no pickling)."""
    from surrogates.models import load_surrogate

    return load_surrogate(directory)


def output_columns(targets: Sequence[str], classifier: bool = False) -> list[str]:
    return [f"{t}_{s}" for t in targets for s in OUTPUT_SUFFIXES] + (["feasible_prob"] if classifier else [])


def lognormal_frame(targets: Sequence[str], mean: torch.Tensor, std: torch.Tensor) -> dict[str, np.ndarray]:
    """Original-scale columns of a Gaussian `N(mean, std^2)` of log y (`n x t` each)."""
    m, s = mean.detach().numpy(), std.detach().clamp_min(0.0).numpy()
    out = {}
    for j, t in enumerate(targets):
        mj, sj = m[:, j], s[:, j]
        out[f"{t}_mean"] = np.exp(mj + 0.5 * sj**2)
        out[f"{t}_std"] = out[f"{t}_mean"] * np.sqrt(np.expm1(sj**2))
        out[f"{t}_median"] = np.exp(mj)
        out[f"{t}_lower"] = np.exp(mj - INTERVAL_Z * sj)
        out[f"{t}_upper"] = np.exp(mj + INTERVAL_Z * sj)
    return out


class SurrogatePredictor:
    """Named designs in, predicted targets with intervals out (see the module docstring).

    Args:
        model: a fitted regression surrogate over the unit cube, targets log(target) (`n x t`).
        meta: `{"space": space record, "targets": [...], "ranges": {name: [low, high]}, ...}`.
        classifier: optional fitted feasibility classifier with `predict_proba(X) -> (n,)`.
    """

    def __init__(self, model, meta: Mapping[str, Any], classifier=None):
        self.model = model
        self.meta = dict(meta)
        self.classifier = classifier
        self.targets = list(meta["targets"])
        self.columns = DesignColumns.from_space(meta["space"], meta.get("ranges"))

    @property
    def input_columns(self) -> list[str]:
        return self.columns.names

    def predict_log(self, designs: pd.DataFrame, warn: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
        """`(mean, std)` of log targets, `n x t` each, for the designs of a DataFrame."""
        X = self.columns.encode(_as_frame(designs), warn=warn)
        mean, std = self.model.predict(X, return_std=True)
        return mean.reshape(X.shape[0], -1), std.reshape(X.shape[0], -1)

    def predict(self, designs: pd.DataFrame, warn: bool = True) -> pd.DataFrame:
        """A DataFrame of `output_columns(targets)`, one row per design (same index)."""
        designs = _as_frame(designs)
        mean, std = self.predict_log(designs, warn=warn)
        out = lognormal_frame(self.targets, mean, std)
        if self.classifier is not None:
            X = self.columns.encode(designs, warn=False)
            out["feasible_prob"] = _proba(self.classifier, X)
        return pd.DataFrame(out, index=designs.index)

    def save(self, directory: str | Path) -> Path:
        """Write the model (and classifier) directories and `surrogate.json` under `directory`."""
        path = Path(directory)
        self.model.save(path / MODEL_ARTIFACT)
        if self.classifier is not None:
            self.classifier.save(path / CLASSIFIER_ARTIFACT)
        (path / META_FILE).write_text(json.dumps({"format_version": META_FORMAT_VERSION, **self.meta}, indent=1))
        return path

    @classmethod
    def load(cls, directory: str | Path) -> "SurrogatePredictor":
        path = Path(directory)
        classifier = path / CLASSIFIER_ARTIFACT
        return cls.from_paths(path / MODEL_ARTIFACT, path / META_FILE, classifier if classifier.is_dir() else None)

    @classmethod
    def from_paths(cls, model_dir, meta_file, classifier_dir=None) -> "SurrogatePredictor":
        meta = json.loads(Path(meta_file).read_text())
        if meta.get("format_version") != META_FORMAT_VERSION:
            raise SpecError("surrogate.json", "format_version", meta.get("format_version"), str(META_FORMAT_VERSION))
        classifier = load_saved_model(classifier_dir) if classifier_dir else None
        return cls(load_saved_model(model_dir), meta, classifier)

    def artifacts(self, directory: str | Path) -> dict[str, str]:
        """`save` into `directory` and return the pyfunc `artifacts` mapping of its parts."""
        path = self.save(directory)
        out = {MODEL_ARTIFACT: str(path / MODEL_ARTIFACT), META_ARTIFACT: str(path / META_FILE)}
        if self.classifier is not None:
            out[CLASSIFIER_ARTIFACT] = str(path / CLASSIFIER_ARTIFACT)
        return out


def _as_frame(designs) -> pd.DataFrame:
    if isinstance(designs, pd.DataFrame):
        return designs
    if isinstance(designs, Mapping):
        return pd.DataFrame({k: v if isinstance(v, (list, tuple, np.ndarray)) else [v] for k, v in designs.items()})
    raise SpecError("designs", "type", type(designs).__name__, "a pandas DataFrame with the design columns")


def _proba(classifier, X: torch.Tensor) -> np.ndarray:
    p = classifier.predict_proba(X)
    p = p.detach().numpy() if hasattr(p, "detach") else np.asarray(p)
    return p.reshape(X.shape[0], -1)[:, -1] if p.ndim == 2 and p.shape[-1] > 1 else p.reshape(-1)


try:  # the MLflow side: imported only where MLflow is installed (it is a dependency of deepflow)
    from mlflow.pyfunc import PythonModel
except ImportError:  # pragma: no cover
    PythonModel = object


class SurrogatePyfunc(PythonModel):
    """The MLflow pyfunc of a `SurrogatePredictor`, logged as models-from-code
    (`surrogates/mlflow_model.py`): `load_context` reads the artifacts, nothing is unpickled."""

    def load_context(self, context) -> None:
        artifacts = context.artifacts
        self.predictor = SurrogatePredictor.from_paths(artifacts[MODEL_ARTIFACT], artifacts[META_ARTIFACT],
                                                       artifacts.get(CLASSIFIER_ARTIFACT))

    def predict(self, context, model_input: pd.DataFrame, params: dict | None = None) -> pd.DataFrame:
        # a DataFrame type hint: MLflow validates the input against the logged signature only
        return self.predictor.predict(model_input)

