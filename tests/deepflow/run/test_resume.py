"""Never lose an evaluation: an optimization killed with SIGKILL mid-run is resumed with
`deepflow optimize resume=<run id>`, finishes with exactly `budget` evaluations, repeats none and
keeps every row it had; MLflow ends with one metric point per evaluation."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd

from deepflow.cli import main

BASE = ["experiment=quickstart", "strategy=random", "warm_start.samples=0", "optimum=null"]


def read_live(path: Path) -> pd.DataFrame:
    """A Parquet another process keeps replacing: read its bytes once (pandas may open a path twice,
    and the two opens could see different files)."""
    return pd.read_parquet(io.BytesIO(path.read_bytes()))


def wait_for_rows(root: Path, k: int, proc: subprocess.Popen, timeout_s: float = 120.0) -> Path:
    """The evaluations.parquet under root once it has >= k rows (fails if the process ends first)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for path in root.glob("outputs/*/*/evaluations.parquet"):
            if len(read_live(path)) >= k:
                return path
        assert proc.poll() is None, proc.communicate()[1][-2000:]
        time.sleep(0.05)
    raise AssertionError(f"no {k} evaluations within {timeout_s} s")


def test_sigkill_mid_run_then_resume_loses_and_repeats_nothing(tmp_path):
    import mlflow

    budget = 40
    proc = subprocess.Popen([sys.executable, "-m", "deepflow.cli", "optimize", *BASE, f"budget={budget}", "q=1"],
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        path = wait_for_rows(tmp_path, 3, proc)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == -signal.SIGKILL
    before = pd.read_parquet(path)
    assert 3 <= len(before) < budget, "the run finished before it could be killed"
    run_id = path.parent.name
    assert json.loads((path.parent / "state.json").read_text())["status"] == "running"

    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        assert main(["optimize", f"resume={run_id}"]) == 0
        assert main(["optimize", f"resume={run_id}"]) == 0  # resuming a finished run changes nothing
    finally:
        os.chdir(cwd)
    after = pd.read_parquet(path)
    assert len(after) == budget and list(after["index"]) == list(range(budget))
    pd.testing.assert_frame_equal(after.iloc[:len(before)], before)  # the rows on record are kept as they were
    points = after[[c for c in after.columns if c.startswith("x.")]]
    designs = after[[c for c in after.columns if c.startswith("design.")]]
    assert not designs.duplicated().any() and not points.duplicated().any()  # no evaluation repeated
    state = json.loads((path.parent / "state.json").read_text())
    assert state["status"] == "finished" and state["mlflow_synced"] == budget and state["resumed"] == 2

    client = mlflow.MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
    run = client.get_run(run_id)  # the same MLflow run, continued
    assert run.info.status == "FINISHED"
    steps = [m.step for m in client.get_metric_history(run_id, "feasible")]
    assert sorted(steps) == list(range(budget))  # every evaluation once: killed-batch gaps were back-filled
    assert (path.parent / "best_design.yaml").is_file()


def test_resume_reloads_the_history_bit_for_bit(tmp_path, monkeypatch):
    """The History a resumed run continues from is exactly the one the run had in memory."""
    from deepflow.run.store import RunStore

    monkeypatch.chdir(tmp_path)
    assert main(["optimize", *BASE, "budget=6", "q=3"]) == 0
    store = RunStore.find("outputs", next(tmp_path.glob("outputs/quickstart/*")).name)
    X, Y, feasible, C = store.history_tensors(9, ["log_step_time_s"], ["memory", "other"])
    frame = store.evaluations()
    assert X.shape == (6, 9) and Y.shape == (6, 1) and C.shape == (6, 2)
    assert (X.numpy() == frame[[f"x.{i}" for i in range(9)]].to_numpy()).all()
    from deepflow.config import compose_config, space_from_config
    from deepflow.run.objectives import make_objective

    space = space_from_config(compose_config(["experiment=quickstart"], config_name="optimize"))
    Y2, feasible2, C2, _ = make_objective("step_time").evaluate(space, X)
    assert (Y2 == Y).all() and (feasible2 == feasible).all() and (C2 == C).all()


def test_resume_refuses_changes_and_unknown_runs(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["optimize", "resume=nosuchrun"]) == 2
    assert "resume='nosuchrun' is not a run" in capsys.readouterr().err
    assert main(["optimize", "resume=nosuchrun", "strategy=bo"]) == 2
    assert "strategy cannot be changed when resuming" in capsys.readouterr().err
    assert main(["optimize", "-m", "resume=nosuchrun"]) == 2
    assert "resume= continues one run" in capsys.readouterr().err
