"""`deepflow optimize` / `deepflow sample` as Hydra applications: Hydra's own multirun with its
launcher plugins (joblib in parallel processes, Ray, submitit), one parent MLflow run per multirun in
a real sqlite store with a complete child run per job, each job's `.hydra/` config snapshot, Hydra's
inspection flags, and a config's own declared sweep. Each test runs the command in a subprocess, as
a user does (launchers start worker processes; a Ray launcher leaves no Ray in the test process)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

BASE = ["experiment=quickstart", "strategy=random", "warm_start.samples=0", "optimum=null", "q=4", "budget=4"]


def deepflow(cwd: Path, *args: str, timeout: int = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "deepflow.cli", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=cwd)


def runs_of(tmp: Path, experiment: str):
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{tmp / 'mlflow.db'}")
    found = client.search_runs([client.get_experiment_by_name(experiment).experiment_id])
    parents = [r for r in found if "mlflow.parentRunId" not in r.data.tags]
    children = [r for r in found if "mlflow.parentRunId" in r.data.tags]
    return client, parents, children


def check_sweep(tmp: Path, out: subprocess.CompletedProcess, seeds: list[int]) -> None:
    """One FINISHED parent, a FINISHED child per seed with every evaluation logged, the job's
    .hydra/ snapshot with its own seed, and the sweep table."""
    assert out.returncode == 0, out.stderr[-3000:]
    client, parents, children = runs_of(tmp, "quickstart")
    assert len(parents) == 1 and len(children) == len(seeds)
    parent = parents[0]
    assert parent.info.status == "FINISHED" and parent.data.tags["deepflow.sweep"] == "seed"
    assert {c.data.tags["mlflow.parentRunId"] for c in children} == {parent.info.run_id}
    assert sorted(int(c.data.params["seed"]) for c in children) == seeds
    for child in children:
        assert child.info.status == "FINISHED"
        assert len(client.get_metric_history(child.info.run_id, "feasible")) == 4  # every evaluation, none lost
        snapshot = Path(child.data.tags["deepflow.hydra_dir"]) / ".hydra"
        config = yaml.safe_load((snapshot / "config.yaml").read_text())
        assert config["seed"] == int(child.data.params["seed"]) and config["budget"] == 4
        assert f"seed={config['seed']}" in yaml.safe_load((snapshot / "overrides.yaml").read_text())
    sweep_dir = Path(parent.data.tags["deepflow.sweep_dir"])
    table = pd.read_csv(sweep_dir / "sweep.csv")
    assert sorted(table["job"]) == [f"seed={s}" for s in seeds]
    assert set(table["run_id"]) == {c.info.run_id for c in children}
    assert "sweep.csv" in [a.path for a in client.list_artifacts(parent.info.run_id)]


def test_joblib_launcher_runs_jobs_in_parallel_processes_into_one_sqlite_store(tmp_path):
    out = deepflow(tmp_path, "optimize", "-m", *BASE, "seed=0,1,2", "hydra/launcher=joblib",
                   "hydra.launcher.n_jobs=2")
    check_sweep(tmp_path, out, [0, 1, 2])
    assert "sweep (parent run" in out.stdout


def test_ray_launcher_runs_each_job_as_a_ray_task(tmp_path):
    pytest.importorskip("hydra_plugins.hydra_ray_launcher", reason="pip install -e '.[ray]'")
    out = deepflow(tmp_path, "optimize", "-m", *BASE, "seed=0,1", "hydra/launcher=ray",
                   "+hydra.launcher.ray.init.num_cpus=2", "+hydra.launcher.ray.init.include_dashboard=false")
    check_sweep(tmp_path, out, [0, 1])


def test_submitit_local_launcher_and_json_output(tmp_path):
    out = deepflow(tmp_path, "optimize", "--multirun", *BASE, "seed=0,1", "hydra/launcher=submitit_local",
                   "output=json")
    check_sweep(tmp_path, out, [0, 1])
    answer = json.loads(out.stdout.strip().splitlines()[-1])  # stdout stays the answer: Hydra logs on stderr
    assert len(answer["runs"]) == 2 and answer["parent_run_id"]


def test_inspection_flags_run_nothing(tmp_path):
    out = deepflow(tmp_path, "optimize", "--cfg", "job", "experiment=gpt3-175b-h100-mapping", "mapping.vp=2")
    assert out.returncode == 0, out.stderr
    config = yaml.safe_load(out.stdout)
    assert config["name"] == "gpt3-175b-h100-mapping" and config["mapping"]["vp"] == 2  # a field the preset omits
    info = deepflow(tmp_path, "sample", "--info", "defaults")
    assert info.returncode == 0 and "Defaults List" in info.stdout
    assert not (tmp_path / "outputs").exists() and not (tmp_path / "mlflow.db").exists()


def test_a_config_that_declares_its_sweep_runs_as_a_multirun(tmp_path):
    """experiment=technology-sweep declares hydra.sweeper.params: chip.node=N7,N5,N3 -> three jobs
    under one parent without -m; the command line's sweep multiplies it."""
    out = deepflow(tmp_path, "optimize", "experiment=technology-sweep", "strategy=random", "budget=2", "q=2",
                   "warm_start.samples=0", "seed=0")
    assert out.returncode == 0, out.stderr[-3000:]
    assert "the config declares a sweep (hydra.sweeper.params): 3 jobs as a multirun" in out.stderr
    client, parents, children = runs_of(tmp_path, "technology-sweep")
    assert len(parents) == 1 and parents[0].data.tags["deepflow.sweep"] == "chip.node"
    assert sorted(c.data.params["chip.node"] for c in children) == ["N3", "N5", "N7"]


def test_sample_multirun_gives_a_file_and_a_child_run_per_job(tmp_path):
    out = deepflow(tmp_path, "sample", "-m", "space=mapping-only", "n=64", "seed=0,1")
    assert out.returncode == 0, out.stderr[-3000:]
    client, parents, children = runs_of(tmp_path, "samples")
    assert len(parents) == 1 and len(children) == 2 and parents[0].info.status == "FINISHED"
    paths = sorted(c.data.params["path"] for c in children)
    assert [Path(p).name for p in paths] == ["mapping-only-sobol-n64-s0.parquet", "mapping-only-sobol-n64-s1.parquet"]
    frames = [pd.read_parquet(p) for p in paths]
    assert all(len(f) == 64 for f in frames) and not frames[0]["u_tp"].equals(frames[1]["u_tp"])


def test_a_bad_value_in_any_job_of_a_sweep_stops_it_before_the_first_runs(tmp_path):
    out = deepflow(tmp_path, "optimize", "-m", *BASE, "seed=0,1", "q=1,0")
    assert out.returncode == 2 and out.stderr.strip() == "deepflow: error: q=0 is invalid: allowed an integer >= 1"
    assert not (tmp_path / "outputs").exists() and not (tmp_path / "mlflow.db").exists()


def test_a_job_that_dies_fails_the_sweep_and_its_parent_and_keeps_the_finished_children(tmp_path):
    """Job 1 cannot write its samples (its folder is a file): exit 1, the parent run FAILED, job 0's
    child run and file kept."""
    (tmp_path / "blocked1").write_text("a file where job 1 wants its folder")
    out = deepflow(tmp_path, "sample", "-m", "space=mapping-only", "n=32", "seed=0,1",
                   "out=blocked${seed}/samples.parquet")
    assert out.returncode == 1 and "Error executing job with overrides: ['space=mapping-only', 'n=32', 'seed=1'" \
        in out.stderr
    client, parents, children = runs_of(tmp_path, "samples")
    assert len(parents) == 1 and parents[0].info.status == "FAILED"
    assert len(children) == 1 and children[0].info.status == "FINISHED" and children[0].data.params["seed"] == "0"
    assert len(pd.read_parquet(tmp_path / "blocked0" / "samples.parquet")) == 32


def test_best_mapping_over_many_systems_is_a_multirun_that_logs_nothing(tmp_path):
    """`deepflow best-mapping -m` searches each system in its own job (here two joblib processes),
    each job's best mapping the one a single search gives, a table at the end, no MLflow store."""
    out = deepflow(tmp_path, "best-mapping", "-m", "system.num_devices=512,1024", "model=llama3-70b",
                   "hydra/launcher=joblib", "hydra.launcher.n_jobs=2")
    assert out.returncode == 0, out.stderr[-3000:]
    assert "best mappings of 2 systems" in out.stdout and not (tmp_path / "mlflow.db").exists()
    table = pd.read_csv(next((tmp_path / "outputs" / "multirun" / "best-mapping").glob("*/*/sweep.csv")))
    assert sorted(table["devices"]) == [512, 1024] and (table["feasible"] > 0).all()
    for devices, step_s in zip(table["devices"], table["best_step_time_s"]):
        single = deepflow(tmp_path, "best-mapping", f"system.num_devices={devices}", "model=llama3-70b", "top_k=1",
                          "output=json")
        assert json.loads(single.stdout)["top"][0]["step_time_s"] == pytest.approx(step_s, rel=1e-12)
