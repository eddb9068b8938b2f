"""Surrogates in the MLflow Model Registry: log and register, promote to `champion`, load by URI.

    info = log_predictor(predictor, input_example, registered_name="deepflow-hardware-mapping")
    promoted = promote_if_better("deepflow-hardware-mapping", info.registered_model_version,
                                 "held_out_step_time_s_mape", 0.041)
    surrogate = load("models:/deepflow-hardware-mapping@champion")   # or runs:/<id>/surrogate
    surrogate.predict(designs_dataframe)

The model is a models-from-code pyfunc (`surrogates/mlflow_model.py`): MLflow stores that source
file, the `MLmodel` description and the artifacts of `SurrogatePredictor.artifacts` (state dicts and
JSON); it pickles nothing, so loading never runs `pickle` (MLflow 3 refuses pickled pyfuncs by
default anyway). Loading needs the `surrogates` package installed, not the training data.

The tracking URI is whatever MLflow is set to (`MLFLOW_TRACKING_URI` or `mlflow.set_tracking_uri`).
"""

from __future__ import annotations

import math
import tempfile
import warnings
from pathlib import Path
from typing import Optional

import pandas as pd

from surrogates.pyfunc import SurrogatePredictor

MODEL_NAME = "surrogate"  # the model's name inside its run (runs:/<run id>/surrogate)
CHAMPION = "champion"
CODE_FILE = Path(__file__).resolve().parent / "mlflow_model.py"


def _requirements() -> list[str]:
    """Pinned pip requirements of the served model (given, so MLflow need not infer them by loading
    the model in a subprocess). The `deepflow` package itself must be installed where it is served."""
    from importlib.metadata import PackageNotFoundError, version

    out = []
    for name in ("mlflow", "torch", "gpytorch", "botorch", "pandas", "numpy", "scipy"):
        try:
            out.append(f"{name}=={version(name)}")
        except PackageNotFoundError:  # pragma: no cover
            continue
    return out


def signature_for(predictor: SurrogatePredictor, input_example: pd.DataFrame):
    """Named design columns in (long for integer grids such as tp, double for continuous values,
    string for categorical names), `output_columns` out (double)."""
    from mlflow.models import infer_signature

    example = _typed_example(predictor, input_example)
    with warnings.catch_warnings():  # MLflow's hint about integer columns with missing values: designs have none
        warnings.filterwarnings("ignore", message=".*integer column", category=UserWarning)
        return infer_signature(example, predictor.predict(example, warn=False)), example


def _typed_example(predictor: SurrogatePredictor, example: pd.DataFrame) -> pd.DataFrame:
    """The input example typed as the samples table types the design columns: categorical names as
    strings, integer grids (and integer categoricals) as int64, continuous values as float64."""
    out = {}
    for p in predictor.columns.parameters:
        column = example[p.name]
        if predictor.columns.is_named(p.name):
            out[p.name] = column.astype(str)
        elif p.kind in ("integer", "log2") or (p.kind == "categorical" and all(float(c) == int(c) for c in p.choices)):
            out[p.name] = column.astype("int64")
        else:
            out[p.name] = column.astype("float64")
    return pd.DataFrame(out).reset_index(drop=True)


def log_predictor(predictor: SurrogatePredictor, input_example: pd.DataFrame,
                  registered_name: Optional[str] = None, name: str = MODEL_NAME):
    """Log the predictor as a pyfunc model of the active run (one is started if none is) and register
    it under `registered_name` (a new version; None: not registered). Returns MLflow's `ModelInfo`
    (`.model_uri`, `.registered_model_version`)."""
    import mlflow

    signature, example = signature_for(predictor, input_example)
    with tempfile.TemporaryDirectory() as tmp, warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*integer column", category=UserWarning)
        artifacts = predictor.artifacts(tmp)
        return mlflow.pyfunc.log_model(name=name, python_model=str(CODE_FILE), artifacts=artifacts,
                                       signature=signature, input_example=example,
                                       registered_model_name=registered_name, pip_requirements=_requirements())


def champion(registered_name: str, metric: str):
    """`(version, metric value)` of the current champion of `registered_name` (its run's logged
    `metric`), or None when there is no champion (or no such registered model)."""
    from mlflow import MlflowClient
    from mlflow.exceptions import MlflowException

    client = MlflowClient()
    try:
        version = client.get_model_version_by_alias(registered_name, CHAMPION)
    except MlflowException:
        return None
    value = client.get_run(version.run_id).data.metrics.get(metric) if version.run_id else None
    return version.version, (math.inf if value is None or math.isnan(value) else float(value))


def promote_if_better(registered_name: str, version: str | int, metric: str, value: float) -> bool:
    """Point the `champion` alias at `version` when its `metric` (lower is better, e.g. held-out
    MAPE) beats the champion's, or when there is no champion. Returns whether it moved."""
    from mlflow import MlflowClient

    current = champion(registered_name, metric)
    if current is not None and not value < current[1]:
        return False
    MlflowClient().set_registered_model_alias(registered_name, CHAMPION, str(version))
    return True


def load(uri: str) -> SurrogatePredictor:
    """The surrogate at an MLflow model URI (`models:/<name>@champion`, `models:/<name>/<version>`,
    `runs:/<run id>/surrogate`) or a local directory `SurrogatePredictor.save` wrote, as an object
    with `.predict(designs DataFrame) -> DataFrame` (see `surrogates.pyfunc`)."""
    if Path(uri).is_dir() and (Path(uri) / "surrogate.json").is_file():
        return SurrogatePredictor.load(uri)
    import mlflow

    return mlflow.pyfunc.load_model(uri).unwrap_python_model().predictor
