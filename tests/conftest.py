"""Shared by every test: each test starts, and ends, with no MLflow tracking URI in the environment.

`deepflow.tracking.resolve_uri` follows `MLFLOW_TRACKING_URI` when `tracking.uri` is unset, and
`mlflow.set_tracking_uri` writes that variable into the process environment; without this fixture
a store one test chose would leak into the next (module-scoped fixtures of the next module run
before its first test's setup, so the variable is removed after each test as well)."""

import importlib.util
import os
import sys
from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def _no_inherited_tracking_uri(monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    yield
    os.environ.pop("MLFLOW_TRACKING_URI", None)


def _load_script(path: Path):
    """The module a script of experiments/ defines, imported (not run as __main__); its folder goes on sys.path
    first, as running it would put it there (the benchmarks import their siblings)."""
    if str(path.parent) not in sys.path:
        sys.path.insert(0, str(path.parent))
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def load_script():
    """`load_script(path)`: the module of a script file (`_load_script`)."""
    return _load_script
