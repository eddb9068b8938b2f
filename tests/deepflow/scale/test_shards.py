"""Blocks of a sample (deepflow.scale.shards) and the in-process executor: the same designs whatever the
block size or the process, exactly n of them, shards written once, a dead run continued."""

from __future__ import annotations

import json

import pandas as pd
import pytest
import torch

from deepflow.config import compose_config, space_from_config
from deepflow.presets import ConfigError
from deepflow.scale.executor import ExecutorOptions, executor_options, sample_in_memory, sample_to_shards
from deepflow.scale.shards import (
    DESIGN_ID,
    MANIFEST,
    BlockPlan,
    block_frame,
    check_complete,
    draw_block,
    prepare_directory,
)
from surrogates.columns import read_samples, space_json


@pytest.fixture(scope="module")
def space():
    return space_from_config(compose_config(["space=mapping-only"], config_name="sample"))


def plan(space, n=3000, block=1024, method="sobol", seed=0) -> BlockPlan:
    return BlockPlan(space_json(space), n, method, seed, block)


def test_sobol_blocks_are_the_points_of_space_sample(space):
    """The first n kept points of the blocks in order are `space.sample(n)`, whatever the block size."""
    n = 2500
    expected = space.sample(n, method="sobol", seed=3)
    for block_size in (512, 4096):
        points = torch.cat([draw_block(space, "sobol", 3, b, block_size)[0] for b in range(40)])[:n]
        assert points.shape == expected.shape and torch.equal(points, expected)
    u, ids = draw_block(space, "sobol", 3, 2, 512)
    assert ids.min() >= 1024 and ids.max() < 1536 and bool((ids.diff() > 0).all())
    assert bool(space.known_feasible(u).all())


def test_in_memory_and_sharded_samples_are_identical(space, tmp_path):
    p = plan(space, n=3000, block=1024)
    memory = sample_in_memory(space, p, progress=False)
    assert len(memory) == 3000 and memory[DESIGN_ID].is_monotonic_increasing and memory[DESIGN_ID].is_unique
    report = sample_to_shards(space, p, tmp_path / "s", ExecutorOptions("local"), progress=False)
    assert report["designs"] == 3000 and report["lost_designs"] == 0 and report["duplicate_designs"] == 0
    shards, record = read_samples(tmp_path / "s")
    pd.testing.assert_frame_equal(memory, shards, check_exact=True)
    assert record["name"] == space.name
    # another block size draws the same designs (the Sobol sequence in order), so the same table
    other = sample_in_memory(space, plan(space, n=3000, block=700), progress=False)
    pd.testing.assert_frame_equal(memory, other, check_exact=True)
    # random draws are the same for the in-memory and sharded paths too
    rnd = plan(space, n=1500, block=1024, method="random", seed=5)
    sample_to_shards(space, rnd, tmp_path / "r", ExecutorOptions("local"), progress=False)
    pd.testing.assert_frame_equal(sample_in_memory(space, rnd, progress=False), read_samples(tmp_path / "r")[0])


def test_a_dead_runs_shards_are_kept_and_a_foreign_directory_is_refused(space, tmp_path):
    p = plan(space, n=2000, block=512)
    directory = tmp_path / "s"
    sample_to_shards(space, p, directory, ExecutorOptions("local"), progress=False)
    whole = read_samples(directory)[0]
    # a run that died: its last two shards never written, a temporary file left behind
    shards = sorted(directory.glob("part-*.parquet"))
    for shard in shards[-2:]:
        shard.unlink()
    (directory / ".part-00000099.parquet.123.tmp").write_bytes(b"half a file")
    before = {s.name: s.stat().st_mtime_ns for s in shards[:-2]}
    report = sample_to_shards(space, p, directory, ExecutorOptions("local"), progress=False)
    assert report["resumed_blocks"] == len(shards) - 2 and report["lost_designs"] == 0
    assert {s.name: s.stat().st_mtime_ns for s in shards[:-2]} == before  # kept, not recomputed
    assert not list(directory.glob(".part-*"))
    pd.testing.assert_frame_equal(read_samples(directory)[0], whole)
    with pytest.raises(ConfigError, match="another sample"):
        sample_to_shards(space, plan(space, n=2000, block=512, seed=1), directory, ExecutorOptions("local"),
                         progress=False)
    assert json.loads((directory / MANIFEST).read_text())["seed"] == 0


def test_check_complete_counts_missing_and_duplicated_designs(space, tmp_path):
    p = plan(space, n=1500, block=512)
    directory = tmp_path / "s"
    sample_to_shards(space, p, directory, ExecutorOptions("local"), progress=False)
    assert check_complete(directory, 1500, 512)["missing_blocks"] == []
    first = sorted(directory.glob("part-*.parquet"))[0]
    rows = len(pd.read_parquet(first))
    frame = block_frame(space, "sobol", 0, 0, 512)
    pd.concat([frame, frame.head(3)]).to_parquet(first)  # three designs twice
    report = check_complete(directory, 1500, 512)
    assert report["duplicate_designs"] == 3 and report["lost_designs"] == 0
    first.unlink()
    report = check_complete(directory, 1500, 512)
    assert report["missing_blocks"] == [0] and report["lost_designs"] == rows


def test_prepare_directory_refuses_shards_without_a_manifest(space, tmp_path):
    (tmp_path / "part-00000000.parquet").write_bytes(b"")
    with pytest.raises(ConfigError, match="without a manifest"):
        prepare_directory(tmp_path, plan(space))


def test_executor_options_name_the_bad_field():
    from omegaconf import OmegaConf

    with pytest.raises(ConfigError, match=r"executor='dask' is invalid: allowed one of local, ray"):
        executor_options(OmegaConf.create({"executor": "dask"}))
    with pytest.raises(ConfigError, match=r"ray.address='host:1' is invalid"):
        executor_options(OmegaConf.create({"executor": "ray", "ray": {"address": "host:1"}}))
    with pytest.raises(ConfigError, match=r"ray.num_cpus=0 is invalid"):
        executor_options(OmegaConf.create({"executor": "ray", "ray": {"num_cpus": 0}}))
    assert executor_options(OmegaConf.create({})).name == "local"
