"""Training report, the MLflow pyfunc round trip, the champion alias and `mlflow models serve`, against a
real sqlite-backed MLflow store in a temporary directory (never the repository's mlflow.db)."""

from __future__ import annotations

import io
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import warnings

import mlflow
import numpy as np
import pandas as pd
import pytest
from mlflow import MlflowClient

from analytical.specs import SpecError
from deepflow.config import compose_config, space_from_config
import surrogates
from surrogates import registry
from surrogates.columns import DesignColumns, ExtrapolationWarning, samples_frame, space_to_dict
from surrogates.pyfunc import SurrogatePredictor, output_columns
from surrogates.training import make_splits, train_surrogate

TINY = {"n_members": 2, "hidden": [16, 16], "max_epochs": 40, "patience": 40, "batch_size": 64, "lr": 0.01}
TINY_CLASSIFIER = {"n_members": 2, "hidden": [8], "max_epochs": 5}
NAME = "test-surrogate"


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """A fresh sqlite store with its artifacts in a temporary directory, set for this module only."""
    root = tmp_path_factory.mktemp("mlflow")
    uri = f"sqlite:///{root / 'mlflow.db'}"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MLFLOW_TRACKING_URI", uri)
        mp.setenv("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
        mlflow.set_tracking_uri(uri)
        mlflow.set_experiment(experiment_id=mlflow.create_experiment("t", artifact_location=str(root / "artifacts")))
        yield uri
        mlflow.set_tracking_uri(None)


@pytest.fixture(scope="module")
def trained():
    space = space_from_config(compose_config(["space=hardware-mapping"], config_name="sample"))
    u = space.sample(600, seed=1)  # (power budgets rule out ~1 in 5: enough feasible designs in each split)
    samples = samples_frame(space, u, space.evaluate(u))
    result = train_surrogate(samples, space_to_dict(space), "mlp_ensemble", TINY, classifier=TINY_CLASSIFIER, seed=0)
    return samples, result


@pytest.fixture(scope="module")
def registered(store, trained):
    """Version 1 of NAME, logged from a run with its held-out MAPE, set as champion."""
    _, result = trained
    with mlflow.start_run() as run:
        mlflow.log_metrics(result.metrics)
        info = registry.log_predictor(result.predictor, result.input_example, registered_name=NAME)
    assert registry.promote_if_better(NAME, info.registered_model_version, "held_out_step_time_s_mape",
                                      result.metrics["held_out_step_time_s_mape"])
    return info, run.info.run_id


def designs_of(trained, n=5):
    """n feasible designs of the training split (inside the range the regressors were trained on,
    feasible designs only: no extrapolation warning)."""
    samples, result = trained
    train = samples.loc[result.splits.train]
    return train.loc[train["feasible"].astype(bool), result.predictor.input_columns].iloc[:n].reset_index(drop=True)


def test_training_reports_every_metric_on_both_splits(trained):
    samples, result = trained
    for split in ("held_out", "extrapolation"):
        for target in ("step_time_s", "energy_j"):
            for metric in ("mape", "r2_log", "kendall_tau", "top1_recall", "coverage95", "nll"):
                assert np.isfinite(result.metrics[f"{split}_{target}_{metric}"])
        assert 0.0 <= result.metrics[f"{split}_feasible_accuracy"] <= 1.0
    # splits are disjoint; the extrapolation region (top of the peak-FLOP/s range) is never trained on
    s = result.splits
    assert not (s.train & s.held_out).any() and not (s.train & s.extrapolation).any()
    assert "peak_bf16_flops_per_s" in s.rule
    high = samples["peak_bf16_flops_per_s"].to_numpy()
    assert high[s.extrapolation].min() > high[s.train].max()
    assert result.predictor.meta["ranges"]["peak_bf16_flops_per_s"][1] <= high[s.extrapolation].min()
    # even a tiny ensemble ranks held-out designs better than chance
    assert result.metrics["held_out_step_time_s_kendall_tau"] > 0.3


def test_extrapolation_split_holds_out_the_largest_device_counts():
    space = space_from_config(compose_config(["space=joint"], config_name="sample"))
    u = space.sample(300, seed=0)
    df = samples_frame(space, u, space.evaluate(u))
    splits = make_splits(df, DesignColumns.from_space(space), seed=0)
    assert splits.rule.startswith("num_devices")
    held = df["num_devices"].to_numpy()
    assert held[splits.extrapolation].min() > held[~splits.extrapolation].max()
    with pytest.raises(SpecError, match="extrapolation.*bogus"):
        make_splits(df, DesignColumns.from_space(space), extrapolation="bogus")


def test_pyfunc_round_trip_by_alias(registered, trained, tmp_path):
    samples, result = trained
    info, run_id = registered
    designs = designs_of(trained)
    local = result.predictor.predict(designs, warn=False)
    for uri in (f"models:/{NAME}@champion", f"models:/{NAME}/1", f"runs:/{run_id}/surrogate"):
        loaded = surrogates.load(uri)
        assert isinstance(loaded, SurrogatePredictor)
        with warnings.catch_warnings():
            warnings.simplefilter("error", ExtrapolationWarning)  # training designs: no warning
            pd.testing.assert_frame_equal(loaded.predict(designs), local)
    assert list(local.columns) == output_columns(["step_time_s", "energy_j"], classifier=True)
    assert (local["step_time_s_lower"] < local["step_time_s_median"]).all()
    assert (local["step_time_s_median"] < local["step_time_s_upper"]).all()
    # the generic pyfunc (signature enforced) gives the same numbers
    generic = mlflow.pyfunc.load_model(f"models:/{NAME}@champion")
    pd.testing.assert_frame_equal(generic.predict(designs), local)
    # the signature names the design columns in and mean/std per target out
    signature = generic.metadata.signature
    assert signature.inputs.input_names() == result.predictor.input_columns
    assert {"step_time_s_mean", "step_time_s_std", "energy_j_mean", "energy_j_std"} <= set(
        signature.outputs.input_names())


def test_logged_model_needs_no_pickle_and_no_training_data(registered, trained, tmp_path):
    samples, result = trained
    info, _ = registered
    path = mlflow.artifacts.download_artifacts(artifact_uri=f"models:/{NAME}@champion", dst_path=str(tmp_path / "m"))
    files = [os.path.relpath(os.path.join(d, f), path) for d, _, fs in os.walk(path) for f in fs]
    assert not any(f.endswith((".pkl", ".pickle", ".parquet")) for f in files), files
    assert any(f.endswith("state.pt") for f in files) and "mlflow_model.py" in files
    # load from the downloaded copy alone, in a fresh process, with pickle deserialization refused
    code = ("import sys, json, mlflow, pandas as pd; m = mlflow.pyfunc.load_model(sys.argv[1]);"
            "print(m.predict(pd.DataFrame(json.loads(sys.argv[2]))).to_json())")
    designs = designs_of(trained, 2)
    env = {**os.environ, "MLFLOW_ALLOW_PICKLE_DESERIALIZATION": "false"}
    out = subprocess.run([sys.executable, "-c", code, path, designs.to_json()], capture_output=True, text=True,
                         env=env, timeout=120, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    again = pd.read_json(io.StringIO(out.stdout.strip().splitlines()[-1]))
    np.testing.assert_allclose(again["step_time_s_median"].to_numpy(),
                               result.predictor.predict(designs, warn=False)["step_time_s_median"].to_numpy(),
                               rtol=1e-6)


def test_champion_moves_only_when_better(registered, trained):
    _, result = trained
    metric = "held_out_step_time_s_mape"
    best = result.metrics[metric]
    versions = {}
    for label, value in (("worse", best * 2.0), ("better", best / 2.0)):
        with mlflow.start_run():
            mlflow.log_metric(metric, value)
            versions[label] = registry.log_predictor(result.predictor, result.input_example,
                                                     registered_name=NAME).registered_model_version
            moved = registry.promote_if_better(NAME, versions[label], metric, value)
        assert moved == (label == "better")
        champion = MlflowClient().get_model_version_by_alias(NAME, "champion")
        assert str(champion.version) == str(versions["better"] if label == "better" else 1)
    assert registry.champion(NAME, metric)[1] == pytest.approx(best / 2.0)
    assert registry.champion("no-such-model", metric) is None


def test_bad_query_input(registered, trained):
    samples, result = trained
    loaded = registry.load(f"models:/{NAME}@champion")
    designs = designs_of(trained, 2)
    with pytest.raises(SpecError, match="unknown column.*frobnicate"):
        loaded.predict(designs.assign(frobnicate=1))
    with pytest.raises(SpecError, match="missing column.*hbm_bytes"):
        loaded.predict(designs.drop(columns=["hbm_bytes"]))
    with pytest.raises(SpecError, match="recompute"):
        loaded.predict(designs.assign(recompute="always"))
    with pytest.warns(ExtrapolationWarning, match="peak_bf16_flops_per_s"):
        loaded.predict(designs.assign(peak_bf16_flops_per_s=5e15))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str, timeout: float = 2.0) -> int:
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return response.status


def test_mlflow_models_serve_answers_like_local_predict(registered, trained, store, tmp_path):
    samples, result = trained
    mlflow_exe = shutil.which("mlflow") or os.path.join(os.path.dirname(sys.executable), "mlflow")
    port = _free_port()
    env = {**os.environ, "MLFLOW_TRACKING_URI": store}
    log = open(tmp_path / "serve.log", "w")
    server = subprocess.Popen([mlflow_exe, "models", "serve", "-m", f"models:/{NAME}@champion", "--env-manager",
                               "local", "-h", "127.0.0.1", "-p", str(port)], env=env, cwd=tmp_path,
                              stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 150.0
        while True:
            try:
                if _get(f"http://127.0.0.1:{port}/ping") == 200:
                    break
            except (urllib.error.URLError, ConnectionError, OSError):
                pass
            assert server.poll() is None, (tmp_path / "serve.log").read_text()
            assert time.monotonic() < deadline, "mlflow models serve did not answer /ping in 150 s"
            time.sleep(1.0)
        designs = designs_of(trained, 3)
        body = json.dumps({"dataframe_split": json.loads(designs.to_json(orient="split", index=False))}).encode()
        request = urllib.request.Request(f"http://127.0.0.1:{port}/invocations", data=body,
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=60) as response:
            answer = pd.DataFrame(json.loads(response.read())["predictions"])
        local = result.predictor.predict(designs, warn=False)
        assert list(answer.columns) == list(local.columns)
        np.testing.assert_allclose(answer.to_numpy(dtype=float), local.to_numpy(dtype=float), rtol=1e-9)
        # a design with a column the model does not know of is refused, not silently half-read
        bad = designs.drop(columns=["tp"])
        body = json.dumps({"dataframe_split": json.loads(bad.to_json(orient="split", index=False))}).encode()
        request = urllib.request.Request(f"http://127.0.0.1:{port}/invocations", data=body,
                                         headers={"Content-Type": "application/json"})
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=60)
        assert refused.value.code == 400 and "tp" in refused.value.read().decode()
    finally:
        os.killpg(server.pid, 15)
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, 9)
            server.wait(timeout=10)
        log.close()
