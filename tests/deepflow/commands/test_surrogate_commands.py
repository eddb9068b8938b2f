"""`deepflow sample`, `train-surrogate` and `query` as a user runs them: real subprocesses, a real sqlite
MLflow store and its artifacts in a temporary directory (also the working directory of the commands)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import mlflow
import pandas as pd
import pytest
from mlflow import MlflowClient

TINY = ("surrogate=mlp_ensemble", "surrogate.params.n_members=2", "surrogate.params.hidden=[16]",
        "surrogate.params.max_epochs=30", "surrogate.params.patience=30", "classifier.params.max_epochs=3",
        "classifier.params.n_members=2")


def run(cwd, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "deepflow.cli", *args], capture_output=True, text=True, timeout=300,
                          cwd=cwd, env={**os.environ, "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR": "false"})


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    return tmp_path_factory.mktemp("work")


@pytest.fixture(scope="module")
def uri(workdir):
    return f"sqlite:///{workdir / 'mlflow.db'}"


@pytest.fixture(scope="module")
def sampled(workdir, uri):
    out = run(workdir, "sample", "space=hardware-mapping", "n=400", "sampler=random", "seed=3", "batch_size=150",
              f"tracking.uri={uri}")
    assert out.returncode == 0, out.stderr
    run_id = out.stdout.split("MLflow run ")[1].split()[0]
    return workdir / "samples" / "hardware-mapping-random-n400-s3.parquet", run_id, out


@pytest.fixture(scope="module")
def trained(workdir, uri, sampled):
    _, run_id, _ = sampled
    out = run(workdir, "train-surrogate", f"data={run_id}", "registered_name=cli-test", f"tracking.uri={uri}", *TINY)
    assert out.returncode == 0, out.stderr
    return out


def test_sample_writes_parquet_with_designs_encodings_outputs_and_logs_it(sampled, uri):
    path, run_id, out = sampled
    df = pd.read_parquet(path)
    assert len(df) == 400
    for column in ("tp", "recompute", "u_tp", "u_recompute", "step_time_s", "energy_j", "memory_per_device_bytes",
                   "feasible", "reason", "mfu", "time_pipeline_bubble_s", "memory_activations_bytes"):
        assert column in df.columns
    assert (~df["feasible"]).any() and set(df.loc[~df["feasible"], "reason"]).isdisjoint({"ok"})
    assert "feasible:" in out.stdout and "mlflow ui --backend-store-uri " + uri in out.stdout
    assert "400/400" in out.stderr  # the progress bar
    client = MlflowClient(tracking_uri=uri)
    run_ = client.get_run(run_id)
    assert (f"then open http://127.0.0.1:5000/#/experiments/{run_.info.experiment_id}/runs/{run_id}/model-metrics"
            "?workflowType=machine_learning") in out.stdout  # the run's charts, in the Model training view
    assert run_.data.params["n"] == "400" and run_.data.params["sampler"] == "random"
    inputs = run_.inputs.dataset_inputs
    assert len(inputs) == 1 and inputs[0].dataset.name == path.stem
    artifacts = {f.path for f in client.list_artifacts(run_id)} | {f.path for f in client.list_artifacts(run_id, "samples")}
    assert f"samples/{path.name}" in artifacts and "space.json" in artifacts


def test_train_surrogate_reports_registers_and_crowns(trained, uri):
    out = trained
    for needle in ("held_out", "extrapolation", "MAPE", "R2(log)", "tau", "top1%", "cov95", "NLL",
                   "regression on feasible rows only", "registered cli-test version 1", "now @champion"):
        assert needle in out.stdout, needle
    client = MlflowClient(tracking_uri=uri)
    version = client.get_model_version_by_alias("cli-test", "champion")
    run_ = client.get_run(version.run_id)
    assert "held_out_step_time_s_mape" in run_.data.metrics and "extrapolation_energy_j_coverage95" in run_.data.metrics
    logged = {f.path for f in client.list_artifacts(version.run_id)}
    assert {"parity.png", "calibration.png"} <= logged
    assert run_.data.tags["deepflow.samples_run"]


def test_query_prints_intervals_and_verifies(workdir, uri, trained, sampled):
    path, _, _ = sampled
    out = run(workdir, "query", "model_uri=models:/cli-test@champion", f"tracking.uri={uri}", "design.tp=8",
              "design.pp=8", "design.recompute=full", "verify=true", "output=json")
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    row = result["rows"][0]
    assert row["tp"] == 8 and row["recompute"] == "full" and "hbm_bytes" in result["from_template"]
    assert row["step_time_s_lower"] < row["step_time_s_median"] < row["step_time_s_upper"]
    assert row["step_time_s_analytical"] > 0 and "feasible_analytical" in row
    # the analytical value is the model's own answer for that design
    assert row["step_time_s_error"] == pytest.approx(row["step_time_s_median"] / row["step_time_s_analytical"] - 1)


@pytest.fixture
def cli(capsys):
    """`deepflow <args>` in this process (the same `main` as the console script, without paying a
    new interpreter per bad input): `(exit status, stdout, stderr)`. MLflow's tracking URI is reset
    afterwards."""
    from deepflow.cli import main

    def call(*args):
        status = main(list(args))
        out = capsys.readouterr()
        return status, out.out, out.err

    yield call
    mlflow.set_tracking_uri(None)


@pytest.mark.parametrize("args, needle", [
    (("sample", "sampler=halton"), "sampler='halton' is invalid"),
    (("sample", "n=0"), "n=0 is invalid"),
    (("sample", "space=nowhere"), "space"),
    (("sample", "out=x.csv"), "out='x.csv' is invalid"),
    (("sample", "tracking.uri=http://127.0.0.1:9"), "does not answer"),
    (("train-surrogate",), "data is required"),
    (("train-surrogate", "data=nothing.parquet"), "data='nothing.parquet' is neither"),
    (("train-surrogate", "surrogate=forest", "data=x"), "surrogate"),
    (("train-surrogate", "held_out_fraction=1.5", "data=x"), "held_out_fraction=1.5 is invalid"),
    (("train-surrogate", "data=x", "champion_metric=held_out_step_time_s_r2_log"), "champion_metric="),
    (("query", "design.tp=4"), "model_uri is required"),
    (("query", "model_uri=models:/x@champion"), "design.<column>=<value>"),
])
def test_bad_input_is_one_line_naming_the_field(cli, args, needle):
    status, _, err = cli(*args)
    assert status == 2
    assert needle in err
    assert len(err.strip().splitlines()) == 1


def test_bad_hyper_parameter_is_named(cli, sampled, uri):
    path, _, _ = sampled
    status, _, err = cli("train-surrogate", f"data={path}", f"tracking.uri={uri}", "surrogate=mlp_ensemble",
                         "surrogate.params.depth=3")
    assert status == 2 and "depth" in err and "n_members" in err


def test_query_reads_a_samples_file_and_prints_a_table(cli, uri, trained, sampled):
    path, _, _ = sampled
    status, out, err = cli("query", "model_uri=models:/cli-test@champion", f"tracking.uri={uri}", f"designs={path}",
                           "verify=true", "max_rows=3")
    assert status == 0, err
    assert "[95% interval]" in out and "analytical" in out and "397 more" in out


def test_bad_query_designs_name_the_columns(cli, workdir, uri, trained, sampled):
    path, _, _ = sampled
    model = ("model_uri=models:/cli-test@champion", f"tracking.uri={uri}")
    status, _, err = cli("query", *model, "design.tpp=4")
    assert status == 2 and "design.tpp is not a design column" in err
    designs = pd.read_parquet(path).head(2)[["tp", "pp"]].assign(bogus=1)
    designs.to_csv(workdir / "bad.csv", index=False)
    status, _, err = cli("query", *model, f"designs={workdir / 'bad.csv'}")
    assert status == 2 and "unknown column(s) bogus" in err and "missing column(s)" in err
    assert len(err.strip().splitlines()) == 1
    status, out, err = cli("query", *model, "design.peak_bf16_flops_per_s=9e15")
    assert status == 0 and "extrapolates" in err and "peak_bf16_flops_per_s" in err and "[95% interval]" in out
    status, _, err = cli("query", "model_uri=models:/no-such-model@champion", f"tracking.uri={uri}", "design.tp=4")
    assert status == 2 and "cannot be loaded" in err
