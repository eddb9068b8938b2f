"""`executor=ray` against a real local Ray instance (2 CPUs, no dashboard, shut down after): the
same table as the in-process path, and every design present once after a worker is killed."""

from __future__ import annotations

import pandas as pd
import pytest
import ray

from deepflow.cli import main
from deepflow.config import compose_config, space_from_config
from deepflow.scale.executor import ExecutorOptions, sample_in_memory, sample_to_shards
from deepflow.scale.shards import DESIGN_ID, KILL_ONCE_ENV, BlockPlan
from surrogates.columns import read_samples, space_json


@pytest.fixture(scope="module")
def local_ray():
    ray.init(num_cpus=2, include_dashboard=False, logging_level="ERROR", log_to_driver=False)
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def space():
    return space_from_config(compose_config(["space=mapping-only"], config_name="sample"))


def test_ray_sample_matches_the_single_process_one(local_ray, space, tmp_path):
    plan = BlockPlan(space_json(space), 5000, "sobol", 2, 1024)
    report = sample_to_shards(space, plan, tmp_path / "s", ExecutorOptions("ray"), progress=False)
    assert report["designs"] == 5000 and report["lost_designs"] == 0 and report["duplicate_designs"] == 0
    assert report["shards"] >= 5  # several tasks, on both workers' CPUs
    pd.testing.assert_frame_equal(read_samples(tmp_path / "s")[0], sample_in_memory(space, plan, progress=False),
                                  check_exact=True)


def test_a_worker_killed_mid_run_costs_a_retry_not_a_design(local_ray, space, tmp_path, monkeypatch):
    marker = tmp_path / "killed"
    monkeypatch.setenv(KILL_ONCE_ENV, str(marker))
    plan = BlockPlan(space_json(space), 4000, "sobol", 0, 512)
    report = sample_to_shards(space, plan, tmp_path / "s", ExecutorOptions("ray", max_retries=2), progress=False)
    assert marker.exists() and "killed pid" in marker.read_text()  # a worker died holding a block
    assert report["lost_designs"] == 0 and report["duplicate_designs"] == 0 and report["missing_blocks"] == []
    table = read_samples(tmp_path / "s")[0]
    assert len(table) == 4000 and table[DESIGN_ID].is_unique and table[DESIGN_ID].is_monotonic_increasing
    monkeypatch.delenv(KILL_ONCE_ENV)
    pd.testing.assert_frame_equal(table, sample_in_memory(space, plan, progress=False), check_exact=True)


def test_sample_command_with_the_ray_executor(local_ray, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["sample", "space=mapping-only", "n=3000", "batch_size=1024", "executor=ray",
                 "tracking.uri=sqlite:///" + str(tmp_path / "mlflow.db")]) == 0
    out = capsys.readouterr().out
    assert "3,000 designs" in out and "0 lost, 0 duplicated" in out
    directory = tmp_path / "samples" / "mapping-only-sobol-n3000-s0"
    assert len(read_samples(directory)[0]) == 3000
    import mlflow

    client = mlflow.MlflowClient(tracking_uri="sqlite:///" + str(tmp_path / "mlflow.db"))
    run = client.search_runs([client.get_experiment_by_name("samples").experiment_id])[0]
    assert run.data.tags["deepflow.samples_dir"] == str(directory.resolve())
    assert run.data.metrics["lost_designs"] == 0 and run.data.params["executor"] == "ray"
    from deepflow.commands.train_surrogate import read_data  # train-surrogate takes the directory or the run id

    mlflow.set_tracking_uri("sqlite:///" + str(tmp_path / "mlflow.db"))
    for data in (str(directory), run.info.run_id):
        frame, record, source, _ = read_data(data, str(tmp_path / "dl"))
        assert len(frame) == 3000 and record["name"] == "mapping-only" and source == str(directory.resolve())
    assert main(["sample", "space=mapping-only", "executor=ray", "out=x.parquet", "mlflow=false"]) == 2
    assert "allowed a directory" in capsys.readouterr().err


def test_inner_best_mapping_searches_on_ray_find_the_same_mappings(local_ray):
    """RayMap (the searches of a batch's outer points as Ray tasks, in chunks) gives exactly the
    mappings of the searches run one after another here."""
    import torch

    from deepflow.run.hierarchical import BestMappingSpace
    from deepflow.scale.executor import RayMap

    base = space_from_config(compose_config(["experiment=llama3-70b-n5-hierarchical"], config_name="optimize"))
    here, there = BestMappingSpace(base), BestMappingSpace(base, map_fn=RayMap(ExecutorOptions("ray")))
    u = here.sample(6, seed=3)
    u = torch.cat([u, u[:1]])  # a repeated point is searched once
    ours, theirs = here.evaluate(u), there.evaluate(u)
    assert torch.equal(ours.step_time_s, theirs.step_time_s) and torch.equal(ours.feasible, theirs.feasible)
    assert bool(ours.feasible.any())


def test_executor_ray_needs_inner_searches_to_parallelize(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["optimize", "executor=ray"]) == 2
    assert "executor='ray' is invalid: allowed local for inner=null" in capsys.readouterr().err
