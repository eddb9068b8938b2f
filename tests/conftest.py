"""Shared by every test: each test starts with no MLflow tracking URI in the environment.

`deepflow.tracking.resolve_uri` follows `MLFLOW_TRACKING_URI` when `tracking.uri` is unset, and
`mlflow.set_tracking_uri` writes that variable into the process environment; without this fixture
a store one test chose would leak into the next."""

import pytest


@pytest.fixture(autouse=True)
def _no_inherited_tracking_uri(monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    yield
