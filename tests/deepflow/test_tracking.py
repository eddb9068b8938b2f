"""Tracking stores: the default sqlite file, a server that is down at start (a clear error before
any work), and a real `mlflow server` that dies mid-run (the local record keeps every evaluation)."""

from __future__ import annotations

import io
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from deepflow.cli import main
from deepflow.presets import ConfigError
from deepflow.tracking import experiment_url, resolve_uri, run_url, ui_command, ui_hint

BASE = ["experiment=quickstart", "strategy=random", "warm_start.samples=0", "optimum=null"]


def read_live(path: Path) -> pd.DataFrame:
    """A Parquet another process keeps replacing: read its bytes once (pandas may open a path twice,
    and the two opens could see different files)."""
    return pd.read_parquet(io.BytesIO(path.read_bytes()))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_unset_uri_follows_the_environment_like_mlflow(tmp_path, monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "sqlite:///elsewhere.db")
    assert resolve_uri(None, tmp_path) == f"sqlite:///{tmp_path.resolve()}/elsewhere.db"
    assert resolve_uri("http://127.0.0.1:5000", tmp_path) == "http://127.0.0.1:5000"  # the config wins
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "s3://bucket")
    with pytest.raises(ConfigError, match="MLFLOW_TRACKING_URI"):
        resolve_uri(None, tmp_path)


def test_default_store_is_sqlite_in_the_working_directory(tmp_path):
    assert resolve_uri(None, tmp_path) == f"sqlite:///{tmp_path.resolve()}/mlflow.db"
    assert resolve_uri("sqlite:///runs/m.db", tmp_path) == f"sqlite:///{tmp_path.resolve()}/runs/m.db"
    assert resolve_uri("http://127.0.0.1:5000") == "http://127.0.0.1:5000"
    assert ui_command(resolve_uri(None, tmp_path)) == f"mlflow ui --backend-store-uri sqlite:///{tmp_path.resolve()}/mlflow.db"
    with pytest.raises(ConfigError, match="tracking.uri='s3://bucket' is invalid"):
        resolve_uri("s3://bucket")


def test_run_links_open_the_model_training_view_inside_the_hash_route():
    """MLflow's UI is a hash-routed app: `workflowType` must follow the route inside the hash (before it, the UI
    never sees it and opens the GenAI view); a server's own address, `mlflow ui`'s default for a local store."""
    server = "http://tracker.example:8080/"
    assert run_url(server, "7", "abc123") == \
        "http://tracker.example:8080/#/experiments/7/runs/abc123/model-metrics?workflowType=machine_learning"
    assert experiment_url(server, "7") == \
        "http://tracker.example:8080/#/experiments/7/runs?workflowType=machine_learning&compareRunsMode=CHART"
    assert ui_hint(server, run_url(server, "7", "abc123")) == run_url(server, "7", "abc123")
    local = "sqlite:////data/mlflow.db"
    assert run_url(local, "1", "r").startswith("http://127.0.0.1:5000/#/experiments/1/runs/r/")
    assert ui_hint(local, "U") == "mlflow ui --backend-store-uri sqlite:////data/mlflow.db, then open U"


def test_the_installed_mlflow_ui_reads_the_workflow_type_and_tabs_the_links_use():
    """The links rest on the installed UI's own words: a hash router, the search parameter `workflowType` with
    the value `machine_learning`, and the run page's `model-metrics` tab (MLflow 3.17's built JavaScript)."""
    import mlflow

    build = Path(mlflow.__file__).parent / "server" / "js" / "build"
    if not build.is_dir():
        pytest.skip("this MLflow has no UI build (mlflow-skinny)")
    text = "".join(p.read_text(errors="ignore") for p in (build / "static" / "js").glob("*.js"))
    assert "createHashRouter" in text
    assert 'get("workflowType")' in text and 'MACHINE_LEARNING="machine_learning"' in text
    assert 'MODEL_METRIC_CHARTS="model-metrics"' in text and '"compareRunsMode"' in text


def test_server_down_at_start_is_a_clear_error_before_any_work(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    uri = f"http://127.0.0.1:{free_port()}"  # nobody listens there
    start = time.monotonic()
    assert main(["optimize", *BASE, "budget=4", f"tracking.uri={uri}"]) == 2
    err = capsys.readouterr().err
    assert f"tracking.uri='{uri}' does not answer" in err and "mlflow server" in err
    assert len(err.strip().splitlines()) == 1
    assert time.monotonic() - start < 30
    assert not (tmp_path / "outputs").exists()


def test_server_killed_mid_run_keeps_every_evaluation_locally(tmp_path):
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(port), "--workers", "1",
         "--backend-store-uri", f"sqlite:///{tmp_path / 'server.db'}",
         "--artifacts-destination", (tmp_path / "server-artifacts").as_uri()],
        cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    run = None
    try:
        import requests

        deadline = time.monotonic() + 90
        while True:
            try:
                if requests.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                    break
            except requests.RequestException:
                pass
            assert server.poll() is None and time.monotonic() < deadline, "mlflow server did not start"
            time.sleep(0.25)
        budget = 30
        run = subprocess.Popen([sys.executable, "-m", "deepflow.cli", "optimize", *BASE, f"budget={budget}", "q=1",
                                f"tracking.uri=http://127.0.0.1:{port}"],
                               cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 120
        path = None
        while path is None or len(read_live(path)) < 3:
            assert run.poll() is None, run.communicate()[1][-2000:]
            assert time.monotonic() < deadline
            path = next(iter(tmp_path.glob("outputs/*/*/evaluations.parquet")), None)
            time.sleep(0.05)
        os.killpg(server.pid, signal.SIGKILL)  # the server goes away mid-run
        server.wait(timeout=30)
        out, err = run.communicate(timeout=240)
        assert run.returncode == 0, err[-2000:]
        assert "MLflow failed while logging" in err and f"resume={path.parent.name}" in err
        frame = pd.read_parquet(path)
        assert list(frame["index"]) == list(range(budget))  # every evaluation kept
        state = json.loads((path.parent / "state.json").read_text())
        assert state["status"] == "finished" and 2 <= state["mlflow_synced"] < budget
        assert "MLflow did not receive everything" in out
        assert (path.parent / "best_design.yaml").is_file()
    finally:
        for proc in (run, server):
            if proc is not None and proc.poll() is None:
                if proc is server:
                    os.killpg(proc.pid, signal.SIGKILL)
                else:
                    proc.kill()
                proc.wait(timeout=30)


def test_a_pandas_dataset_gets_the_schema_digest_and_profile_mlflow_would_give_it():
    """`deepflow.tracking.pandas_dataset` computes a frame's schema and digest a column at a time (MLflow's own
    call Python for every cell: 29 s of a 1e6-row sample); what MLflow logs must not change."""
    import warnings

    import mlflow
    import numpy as np

    from deepflow.tracking import pandas_dataset

    n = 3000
    rng = np.random.default_rng(0)
    df = pd.DataFrame({"step_time_s": rng.random(n), "tp": rng.integers(1, 9, n), "feasible": rng.random(n) > 0.5,
                       "reason": pd.Series(rng.choice(["ok", "out_of_memory"], n), dtype="string"),
                       "note": pd.Series(["x"] * n, dtype=object)})
    df.loc[n - 1, "step_time_s"] = np.nan  # beyond the rows the column types are read from: not required
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # MLflow's notes on int columns, and pandas' on MLflow's own digest code
        ours, theirs = pandas_dataset(df, name="s").to_dict(), mlflow.data.from_pandas(df, name="s").to_dict()
        assert ours == theirs
        assert '"name": "step_time_s", "required": false' in ours["schema"]
        mixed = df.assign(note=["x"] * (n - 1) + [3])  # an object column that is not all strings: out of the digest
        assert pandas_dataset(mixed, name="s").digest == mlflow.data.from_pandas(mixed, name="s").digest
