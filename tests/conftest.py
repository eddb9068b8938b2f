"""Shared by every test: each test starts, and ends, with no MLflow tracking URI in the environment.

`deepflow.tracking.resolve_uri` follows `MLFLOW_TRACKING_URI` when `tracking.uri` is unset, and
`mlflow.set_tracking_uri` writes that variable into the process environment; without this fixture
a store one test chose would leak into the next (module-scoped fixtures of the next module run
before its first test's setup, so the variable is removed after each test as well)."""

import os

import pytest


@pytest.fixture(autouse=True)
def _no_inherited_tracking_uri(monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    yield
    os.environ.pop("MLFLOW_TRACKING_URI", None)
