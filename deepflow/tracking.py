"""Where MLflow runs go: the tracking URI of a config, a check that it answers, the UI command, and the
links that open a run's charts in the UI (`run_url`, `experiment_url`).

The default store is a sqlite file in the working directory (`sqlite:///<cwd>/mlflow.db`, MLflow's
own default since 3.7, made absolute so that the printed `mlflow ui` command works from anywhere).
`tracking.uri=http://host:port` points at an `mlflow server`; `tracking.uri=sqlite:///path.db` or
`file:///dir` at another local store. A server that does not answer fails before any work starts.

Shared by the commands that log to MLflow (optimize, and the surrogate commands). MLflow is imported
lazily, so that importing this module costs nothing.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Optional
from urllib.parse import urlparse

from deepflow.presets import ConfigError

DEFAULT_DB = "mlflow.db"
URI_SCHEMES = ("sqlite", "http", "https", "file", "postgresql", "mysql", "databricks")
# A run must not hang for minutes when its server goes away: MLflow's client retries 7 times with
# exponential backoff (about 4 minutes) and waits 120 s per request by default. A user's own
# setting of these variables wins.
HTTP_DEFAULTS = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "1", "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
                 "MLFLOW_HTTP_REQUEST_TIMEOUT": "10"}


def resolve_uri(uri: Optional[str], cwd: Optional[str | Path] = None) -> str:
    """The tracking URI of `tracking.uri`: None -> the environment's `MLFLOW_TRACKING_URI` when set
    (MLflow's own convention), else the sqlite file `mlflow.db` in `cwd`; a sqlite path relative to
    `cwd` is made absolute. Raises ConfigError for a scheme MLflow does not store to."""
    base = Path(cwd or os.getcwd()).resolve()
    field = "tracking.uri"
    if uri is None or str(uri).strip() in ("", "null", "None"):
        uri, field = os.environ.get("MLFLOW_TRACKING_URI", "").strip(), "MLFLOW_TRACKING_URI (environment)"
        if not uri:
            return f"sqlite:///{base / DEFAULT_DB}"
    uri = str(uri).strip()
    scheme = urlparse(uri).scheme
    if scheme not in URI_SCHEMES:
        raise ConfigError(f"{field}={uri!r} is invalid: allowed null (sqlite:///<cwd>/{DEFAULT_DB}), "
                          f"sqlite:///<path>.db, file:///<dir>, http(s)://<host>:<port> of an mlflow server")
    if scheme == "sqlite":
        path = uri[len("sqlite:///"):]
        if path and not path.startswith("/") and path != ":memory:":
            return f"sqlite:///{base / path}"
    return uri


def quiet_mlflow_logs() -> None:
    """MLflow's sqlite store prints its schema migrations at INFO on first use: keep them out of a
    command's output (warnings and errors still show)."""
    for name in ("mlflow.store.db.utils", "alembic", "alembic.runtime.migration"):
        logging.getLogger(name).setLevel(logging.WARNING)


def check_reachable(uri: str, timeout_s: float = 5.0) -> None:
    """For an http(s) store, GET its /health endpoint; a ConfigError naming tracking.uri when it does
    not answer. Local stores need no check (they are created on first use)."""
    if urlparse(uri).scheme not in ("http", "https"):
        return
    for key, value in HTTP_DEFAULTS.items():
        os.environ.setdefault(key, value)
    import requests

    try:
        response = requests.get(uri.rstrip("/") + "/health", timeout=timeout_s)
    except requests.RequestException as exc:
        raise ConfigError(f"tracking.uri={uri!r} does not answer ({type(exc).__name__}): start it with "
                          f"`mlflow server --host {urlparse(uri).hostname} --port {urlparse(uri).port or 80}`, "
                          f"or leave tracking.uri unset for the local sqlite store") from None
    if response.status_code != 200:
        raise ConfigError(f"tracking.uri={uri!r} answered HTTP {response.status_code} on /health: "
                          f"allowed an MLflow tracking server") from None


def ui_command(uri: str) -> str:
    """The shell command that opens the MLflow UI on the store at `uri`."""
    scheme = urlparse(uri).scheme
    if scheme in ("http", "https"):
        return f"open {uri} in a browser (the mlflow server there serves the UI)"
    return f"mlflow ui --backend-store-uri {uri}"


# Where the UI of a local store is once `mlflow ui --backend-store-uri <store>` runs: its default host and port.
LOCAL_UI = "http://127.0.0.1:5000"
# MLflow 3's UI shows an experiment's pages in one of two views, "GenAI apps & agents" (its "Evaluation runs",
# no metric charts) or "Model training", and opens a link without a view in the last one the browser used
# (GenAI on a fresh browser). The query parameter `workflowType` of the page's hash route picks the view:
# `#/experiments/1/runs/<run>?workflowType=machine_learning` (its values: the UI's WorkflowType enum, genai and
# machine_learning, read by react-router's useSearchParams from the part of the hash after `?`; MLflow 3.17).
WORKFLOW_QUERY = "workflowType=machine_learning"


def ui_address(uri: str) -> str:
    """The address of the MLflow UI that shows the store at `uri`: an http(s) tracking server serves its own;
    a local store's is `mlflow ui`'s default (`LOCAL_UI`), where `ui_command(uri)` starts it."""
    return uri.rstrip("/") if urlparse(uri).scheme in ("http", "https") else LOCAL_UI


def run_url(uri: str, experiment_id: str, run_id: str, tab: str = "model-metrics") -> str:
    """The link that opens run `run_id` (experiment `experiment_id`) of the store at `uri` on its metric charts
    (the run page's "Model metrics" tab; `tab="artifacts"`: its files, e.g. a study's table and figures), in
    MLflow 3's Model training view rather than its GenAI one."""
    return f"{ui_address(uri)}/#/experiments/{experiment_id}/runs/{run_id}/{tab}?{WORKFLOW_QUERY}"


def experiment_url(uri: str, experiment_id: str) -> str:
    """The link that opens the runs of experiment `experiment_id` charted side by side (a sweep's child runs),
    in MLflow 3's Model training view."""
    return f"{ui_address(uri)}/#/experiments/{experiment_id}/runs?{WORKFLOW_QUERY}&compareRunsMode=CHART"


def ui_hint(uri: str, url: str) -> str:
    """How a person opens `url` (a `run_url` or `experiment_url`) of the store at `uri`: the link itself on a
    tracking server; for a local store, the command that starts its UI, then the link."""
    if urlparse(uri).scheme in ("http", "https"):
        return url
    return f"{ui_command(uri)}, then open {url}"


# MLflow 3's UI opens an experiment as GenAI ("Evaluation runs", traces) or as classic model
# training by this tag; DeepFlow's runs are the latter (values: the UI's ExperimentKind enum).
EXPERIMENT_KIND_TAG = "mlflow.experimentKind"
EXPERIMENT_KIND = "custom_model_development"


def experiment_id_for(client, name: str) -> str:
    """The id of experiment `name`, created if new, tagged as a classic (model training) experiment
    so the MLflow 3 UI shows its runs, charts and params rather than its GenAI views."""
    found = client.get_experiment_by_name(name)
    if found is None:
        return client.create_experiment(name, tags={EXPERIMENT_KIND_TAG: EXPERIMENT_KIND})
    if found.tags.get(EXPERIMENT_KIND_TAG) is None:  # made by an older DeepFlow or by hand
        client.set_experiment_tag(found.experiment_id, EXPERIMENT_KIND_TAG, EXPERIMENT_KIND)
    return found.experiment_id


# MLflow infers a pandas dataset's schema (mlflow.types.utils `_infer_required`) and digest
# (mlflow.data.digest_utils `compute_pandas_digest`, `df.map(type)`) with a Python call for every cell: 24 s and
# 5.5 s of a 1e6-design `deepflow sample` whose designs take ~4 s to draw and evaluate (measured, MLflow 3.17).
# `pandas_dataset` gives MLflow both, computed a column at a time: the same schema and the same digest.
SCHEMA_ROWS = 1000  # rows whose values give the column types (a column's type is its dtype's)


def pandas_digest(df) -> str:
    """MLflow's digest of a pandas frame (`compute_pandas_digest`: the first 10,000 rows of its numeric columns and
    of those whose every value is a string, its length and its column names), with the string test run only on
    columns whose dtype can hold strings."""
    import numpy as np
    import pandas as pd
    from mlflow.data.digest_utils import MAX_ROWS, get_normalized_md5_digest

    head = df.head(MAX_ROWS)
    can_hold_text = [c for c in df.columns
                     if pd.api.types.is_object_dtype(df[c]) or pd.api.types.is_string_dtype(df[c])]
    text = [c for c in can_hold_text if bool((df[c].map(type) == str).all())]
    columns = head.columns[head.columns.isin(text)].union(head.select_dtypes(include=[np.number]).columns)
    return get_normalized_md5_digest([pd.util.hash_pandas_object(head[columns]).values, np.int64(len(df))]
                                     + [str(x).encode() for x in df.columns])


def pandas_dataset(df, source: Optional[str] = None, name: str = "samples"):
    """`mlflow.data.from_pandas(df, source, name)` with its schema and digest computed a column at a time: the
    column types from the first `SCHEMA_ROWS` rows, a column required where it has no missing value. A source
    MLflow cannot resolve (a URI of a remote artifact store) is left out."""
    import mlflow
    from mlflow.exceptions import MlflowException
    from mlflow.types import ColSpec, Schema

    kwargs = {"name": name, "digest": pandas_digest(df)}
    try:
        dataset = mlflow.data.from_pandas(df, source=source, **kwargs)
    except MlflowException:
        dataset = mlflow.data.from_pandas(df, **kwargs)
    try:
        head = mlflow.models.infer_signature(df.head(SCHEMA_ROWS)).inputs
    except Exception:  # noqa: BLE001  (as MLflow's own `schema`: no schema where none can be inferred)
        dataset.schema = None
        return dataset
    dataset.schema = Schema([ColSpec(c.type, c.name, required=not bool(df[c.name].isna().any()))
                             for c in head.inputs])  # (MLflow's `schema` is a cached property: this is its value)
    return dataset


def log_dataset(df, source: str, context: str, name: str = "samples") -> None:
    """`df` as a dataset input of the active run, its source a path or artifact URI (`pandas_dataset`)."""
    import warnings

    import mlflow

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # MLflow's notes on ambiguous sources and int columns
        mlflow.log_input(pandas_dataset(df, source=source, name=name), context=context)
