"""`deepflow sample`: designs of a space evaluated by the analytical model, as a Parquet table.

    deepflow sample space=hardware-mapping n=100000 sampler=sobol

Draws `n` points of the space's unit cube (scrambled Sobol or uniform; points that break a known
mapping rule are dropped and more are drawn), in blocks of `batch_size` raw draws
(`deepflow.scale.shards`), evaluates them with a progress bar, and writes one row per design: its
`design_id` (its index in the sequence), the named design columns, their encodings `u_<name>`, and
every output of the analytical model (`surrogates.columns.samples_frame`). Infeasible designs are
kept, with `feasible = False` and their `reason`.

Output: with `executor=local` (the default) and `out` ending in `.parquet`, one Parquet file built
in memory. With `executor=ray`, or an `out` without that suffix, a directory of Parquet shards (one
per block, written by whichever process computed it) and a `manifest.json`, in constant memory; a
run that died is continued by the same command (its finished shards are kept). Both give the
same designs and values for the same space, n, sampler, seed and batch_size.

The Parquet output is written first (nothing is lost if MLflow is down); then an MLflow run of
experiment `samples` (or `tracking.experiment`) gets a single file as a dataset input and as an
artifact (`samples/<file>`), a shard directory as its path and manifest, with the space as
`space.json`.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from deepflow.presets import ConfigError

DEFAULT_EXPERIMENT = "samples"


def sample_options(cfg) -> tuple[int, str, int, int]:
    """`(n, sampler, seed, batch_size)` of the config, checked."""
    from deepflow.config import option

    n, seed, batch = option(cfg, "n"), option(cfg, "seed"), option(cfg, "batch_size")
    sampler = option(cfg, "sampler", ("sobol", "random"))
    for key, value, low in (("n", n, 1), ("seed", seed, 0), ("batch_size", batch, 1)):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ConfigError(f"{key}={value!r} is invalid: allowed an integer >= {low}")
    return n, sampler, seed, batch


def output_path(out, space_name: str, sampler: str, n: int, seed: int, sharded: bool) -> Path:
    """Where the sample goes: `out`, else `samples/<space>-<sampler>-n<n>-s<seed>[.parquet]`."""
    stem = f"{space_name}-{sampler}-n{n}-s{seed}"
    return Path(out) if out else Path("samples") / (stem if sharded else f"{stem}.parquet")


def log_sample_run(space, path: Path, params: dict, metrics: dict, experiment: str, calibration=None,
                   df=None, parent: Optional[dict] = None, hydra_dir: Optional[str] = None) -> tuple[str, str]:
    """Log a sample to MLflow; returns `(run id, experiment id)`. A single file (`df` given) is a dataset input and
    an artifact; a shard directory is its path (the shards stay where they are: a sample of 1e8
    designs is no artifact) and its manifest. Both get space.json and, with `calibration` (a
    `deepflow.calibration.Calibration`), its file and sha256. `parent`: the multirun's parent run
    (`deepflow.launch.sweep_runs.parent_of_job`), whose experiment the run joins as its child."""
    import mlflow

    from deepflow.scale.shards import MANIFEST
    from deepflow.tracking import experiment_id_for, log_dataset
    from surrogates.columns import space_to_dict

    tags = {"deepflow.command": "sample"}
    if df is None:
        tags["deepflow.samples_dir"] = str(path.resolve())
    if hydra_dir:
        tags["deepflow.hydra_dir"] = hydra_dir
    if parent:
        tags["mlflow.parentRunId"] = parent["run_id"]
        experiment_id = parent["experiment_id"]
    else:
        experiment_id = experiment_id_for(mlflow.MlflowClient(), experiment)
    with mlflow.start_run(run_name=path.stem, experiment_id=experiment_id, tags=tags) as run:
        mlflow.log_params(params)
        mlflow.log_metrics(metrics)
        if df is not None:
            log_dataset(df, str(path.resolve()), "samples", name=path.stem)
            mlflow.log_artifact(str(path), artifact_path="samples")
        else:
            mlflow.log_artifact(str(path / MANIFEST), artifact_path="samples")
        mlflow.log_dict(space_to_dict(space), "space.json")
        if calibration is not None:
            mlflow.log_param("calibration_sha256", calibration.sha256)
            mlflow.log_artifact(calibration.path, artifact_path="calibration")
        return run.info.run_id, experiment_id


@dataclass
class SampleJob:
    """A checked `deepflow sample` configuration: nothing drawn or logged yet."""

    cfg: Any
    n: int
    sampler: str
    seed: int
    batch_size: int
    executor: Any  # deepflow.scale.executor.ExecutorOptions
    use_mlflow: bool
    calibration: Any
    space: Any
    path: Path
    sharded: bool
    uri: str


def prepare_sample(cfg) -> SampleJob:
    """Check everything a sample needs (cheap: no evaluation, no MLflow run)."""
    from deepflow.calibration import calibration_from_config
    from deepflow.config import option, space_from_config
    from deepflow.scale.executor import executor_options
    from deepflow.tracking import resolve_uri

    n, sampler, seed, batch_size = sample_options(cfg)
    executor = executor_options(cfg)
    use_mlflow = option(cfg, "mlflow", (True, False))
    calibration = calibration_from_config(cfg)  # checked here; space_from_config takes its constants
    space = space_from_config(cfg)
    if executor.name == "ray" and space.device != "cpu":
        raise ConfigError(f"device={space.device!r} is invalid with executor=ray (Ray tasks evaluate on "
                          "their workers' CPUs): allowed device=cpu, or executor=local")
    out = option(cfg, "out")
    if out is not None and Path(str(out)).suffix not in ("", ".parquet"):
        raise ConfigError(f"out={str(out)!r} is invalid: allowed a path ending in .parquet (one file) "
                          "or a directory without a suffix (shards)")
    sharded = executor.name == "ray" or (out is not None and Path(str(out)).suffix == "")
    path = output_path(out, space.name, sampler, n, seed, sharded)
    if sharded and path.suffix == ".parquet":
        raise ConfigError(f"out={str(path)!r} is invalid with executor=ray: allowed a directory (no .parquet suffix)")
    return SampleJob(cfg=cfg, n=n, sampler=sampler, seed=seed, batch_size=batch_size, executor=executor,
                     use_mlflow=use_mlflow, calibration=calibration, space=space, path=path, sharded=sharded,
                     uri=resolve_uri(cfg.tracking.get("uri")))


def check_jobs(jobs: list[list[str]]) -> None:
    """Every job of the command line composed and checked before any of them runs; the jobs of a
    multirun write to different paths."""
    from deepflow.config import compose_config
    from deepflow.tracking import check_reachable

    prepared = [prepare_sample(compose_config(overrides, config_name="sample")) for overrides in jobs]
    paths = [str(job.path.resolve()) for job in prepared]
    if len(set(paths)) < len(paths):
        raise ConfigError(f"out={str(prepared[0].cfg.out)!r} is invalid for a multirun: every job would write "
                          f"{paths[0]}; allowed null (a path per job: samples/<space>-<sampler>-n<n>-s<seed>) or "
                          "a path that interpolates a swept key, e.g. 'out=samples/s${seed}.parquet'")
    for uri in sorted({job.uri for job in prepared if job.use_mlflow}):
        check_reachable(uri)


def cmd_sample(argv: list[str]) -> int:
    from deepflow.launch.hydra_app import launch

    return launch("sample", argv, check_jobs)


def sample_task(cfg, overrides: list[str]) -> int:
    """One Hydra job of `deepflow sample` (deepflow.launch.hydra_app): draw, evaluate, write, log."""
    from deepflow.launch import sweep_runs
    from deepflow.scale.executor import sample_in_memory, sample_to_shards
    from deepflow.scale.shards import BlockPlan
    from deepflow.tracking import quiet_mlflow_logs, run_url, ui_hint
    from surrogates.columns import space_json, write_samples

    job = prepare_sample(cfg)
    space, n, sampler, seed, path, executor = job.space, job.n, job.sampler, job.seed, job.path, job.executor
    parent = sweep_runs.parent_of_job()
    plan = BlockPlan(space_json(space), n, sampler, seed, job.batch_size)
    start = time.perf_counter()
    print(f"drawing {n:,} designs of space {space.name!r} that satisfy its known constraints "
          f"({executor.name}) ...", file=sys.stderr)
    if job.sharded:
        shards = sample_to_shards(space, plan, path, executor)
        feasible = shards["feasible"] / max(1, shards["designs"])
        df = None
    else:
        df = sample_in_memory(space, plan)
        path.parent.mkdir(parents=True, exist_ok=True)
        write_samples(df, space, path)
        feasible = float(df["feasible"].mean())
    elapsed = time.perf_counter() - start

    print(f"{n:,} designs of space {space.name!r} ({space.dim} parameters, {sampler}, seed {seed}): "
          f"drawn and evaluated in {elapsed:.1f} s ({n / elapsed:,.0f} designs/s, {executor.name})")
    if job.sharded:
        print(f"feasible: {feasible:.1%}; wrote {shards['shards']} shards to {path}/ "
              f"({shards['designs']:,} designs, {shards['lost_designs']} lost, {shards['duplicate_designs']} "
              f"duplicated" + (f", {shards['resumed_blocks']} blocks kept from an earlier run" if shards["resumed_blocks"]
                               else "") + ")")
        if shards["lost_designs"] or shards["duplicate_designs"]:
            print(f"deepflow: error: the shards under {path} are incomplete: {shards}", file=sys.stderr)
            return 1
    else:
        reasons = df["reason"].value_counts().to_dict()
        print(f"feasible: {feasible:.1%}; reasons: " + ", ".join(f"{k} {v:,}" for k, v in reasons.items()))
        print(f"wrote {path} ({len(df.columns)} columns)")
    if job.calibration is not None:
        print(f"labelled with the efficiency constants of calibration={job.calibration.path}")
    summary = {"path": str(path.resolve()), "overrides": overrides, "space": space.name, "n": n, "sampler": sampler,
               "seed": seed, "feasible_fraction": feasible, "designs_per_s": n / elapsed, "run_id": None}
    if job.use_mlflow:
        import mlflow

        quiet_mlflow_logs()
        mlflow.set_tracking_uri(job.uri)
        cfg, calibration = job.cfg, job.calibration
        params = {"space": space.name, "n": n, "sampler": sampler, "seed": seed, "dim": space.dim,
                  "hardware": _preset(cfg, "hardware"), "system": _preset(cfg, "system"),
                  "model": _preset(cfg, "model"), "path": str(path.resolve()),
                  "calibration": None if calibration is None else str(Path(calibration.path).resolve())}
        params.update(executor=executor.name, batch_size=job.batch_size)
        metrics = {"feasible_fraction": feasible, "evaluate_s": elapsed, "designs_per_s": n / elapsed}
        if job.sharded:
            metrics.update({k: float(shards[k]) for k in ("designs", "lost_designs", "duplicate_designs", "shards")})
        experiment = str(cfg.tracking.get("experiment") or DEFAULT_EXPERIMENT)
        summary["run_id"], experiment_id = log_sample_run(space, path, params, metrics, experiment, calibration,
                                                          df=df, parent=parent, hydra_dir=sweep_runs.job_dir())
        print(f"MLflow run {summary['run_id']} (train on it: deepflow train-surrogate data={summary['run_id']})")
        if parent is None:
            print(f"see it: {ui_hint(job.uri, run_url(job.uri, experiment_id, summary['run_id']))}")
    sweep_runs.record_summary(summary)
    return 0


def print_sweep(summaries: list[dict], parent_id: str, swept: list[str]):
    """The end of a multirun of samples (deepflow.launch.sweep_runs): one row per job, printed; returned."""
    import pandas as pd

    from deepflow.run.summary import job_label
    from deepflow.tables import frame_table

    table = pd.DataFrame([{"job": job_label(s["overrides"], swept),
                           **{k: s[k] for k in ("run_id", "n", "feasible_fraction", "designs_per_s", "path")}}
                          for s in summaries])
    print(f"sweep (parent run {parent_id}): {len(summaries)} sample jobs, each a child run" if parent_id
          else f"sweep: {len(summaries)} sample jobs (mlflow=false: no runs)")
    print(frame_table(table))
    return table


def _preset(cfg, group: str) -> str:
    """The name a group's preset goes by in the run's params (its `name` field when it has one)."""
    value = cfg.get(group)
    return str(value.get("name", "")) if value is not None and hasattr(value, "get") else json.dumps(value)
