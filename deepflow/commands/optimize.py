"""`deepflow optimize`: a tracked, resumable optimization run (or a multirun sweep of them).

    deepflow optimize                                   # the quickstart experiment
    deepflow optimize experiment=gpt3-175b-h100-mapping strategy=random budget=100
    deepflow optimize -m seed=0,1,2                     # Hydra's multirun: a parent MLflow run, a child per job
    deepflow optimize -m seed=0,1 hydra/launcher=joblib # ... its jobs in parallel (any Hydra launcher)
    deepflow optimize resume=<run id>                   # continue a killed run
    deepflow optimize experiment=llama3-70b-n5-hierarchical   # inner=best_mapping: BO proposes the chip,
                                                        # an exhaustive search each proposal's mapping

The command is a Hydra application (`deepflow.launch.hydra_app`: every job checked first, then Hydra runs
`optimize_task` once, or once per job of a multirun with the launcher the config names). One job:
check the config (conf/optimize.yaml + an experiment), open the MLflow run (a child of the
multirun's parent, `deepflow.launch.sweep_runs`), and
run `deepflow.run.loop.run` with a callback that, after every verified batch, (1) rewrites the local
`evaluations.parquet` atomically (`deepflow.run.store`), then (2) logs one metric point per evaluation
to MLflow (step = evaluation index) and the Parquet as an artifact. MLflow failing mid-run is warned
about once and the local record goes on; `resume=<run id>` later reloads the Parquet, rebuilds the
`History` (no evaluation is repeated), sends MLflow what it missed, and continues the SAME MLflow
run. At the end: convergence and Pareto plots (PNG + offline HTML), the best design as a YAML that
`deepflow evaluate design=<file>` reads back (checked here: same step time), and its breakdown.

Metrics per evaluation (named with their unit; `<q>` is the first objective with its unit,
step_time_s or energy_j): `feasible`, `step_time_s`, `energy_j` (when the model has it),
`objective_<q>` (feasible evaluations, one objective), `best_<q>` (lower is better), `regret_pct`
(100 (best / optimum - 1), when `optimum=enumerate`, beside `optimum_<q>`), `hypervolume_log_units`
(two objectives; higher is better), and per batch `propose_s`, `gp_fit_s`, `acquisition_s` (BO),
`verify_s`. The experiment is tagged as a model-training one for MLflow 3's UI and the run's
description says what was optimized over which space, and where the best design is.

This module is the command: it checks every job (`check_jobs`) and hands the command line to
Hydra (`deepflow.launch.hydra_app`), which calls `optimize_task` per job. The run itself lives in
`deepflow.run`: `job` (config -> checked `Job`), `execute` (start, resume, the loop's callback,
artifacts), `metrics` (Parquet rows, metric series, timings, enumerated optimum), `mlflow_sink`
(client, params, the never-raising sink), `best_design` and `summary` (what is printed).
"""

from __future__ import annotations

from deepflow.config import compose_config
from deepflow.presets import ConfigError
from deepflow.run.execute import resume_job, start_job
from deepflow.run.job import CONFIG_NAME, invalid, prepare
from deepflow.run.mlflow_sink import client_for
from deepflow.run.summary import jsonable, print_summaries


def optimize_task(cfg, overrides: list[str]) -> int:
    """One Hydra job of `deepflow optimize` (deepflow.launch.hydra_app): its run, a child of the multirun's
    parent MLflow run when it is one, its summary in its Hydra folder."""
    from deepflow.launch import sweep_runs

    job = prepare(cfg, overrides)
    parent = sweep_runs.parent_of_job()
    if parent is not None and parent["tracking_uri"] != job.uri:
        raise invalid("tracking.uri", job.uri, f"the same store for every job of a multirun ({parent['tracking_uri']})")
    summary = start_job(job, client_for(job.uri), parent=parent, hydra_dir=sweep_runs.job_dir())
    sweep_runs.record_summary(jsonable(summary))
    return 0 if parent is not None else print_summaries([summary], None)


def check_jobs(jobs: list[list[str]]) -> None:
    """Every job of the command line composed and checked (`prepare`) before any of them runs."""
    from deepflow.tracking import check_reachable

    uris = {prepare(compose_config(overrides, CONFIG_NAME), overrides).uri for overrides in jobs}
    if len(uris) > 1:
        raise invalid("tracking.uri", sorted(uris)[1], f"the same store for every job of a multirun ({sorted(uris)[0]})")
    check_reachable(uris.pop())  # a server that does not answer, before any job starts


def cmd_optimize(argv: list[str]) -> int:
    from deepflow.launch.hydra_app import launch

    resume = [o.partition("=")[2] for o in argv if o.partition("=")[0] == "resume"]
    if resume and resume[0] not in ("", "null"):
        if any(a in ("-m", "--multirun") for a in argv):
            raise ConfigError("resume= continues one run: allowed without -m (--multirun)")
        summary = resume_job(resume[0], [o for o in argv if not o.startswith("resume=")])
        return print_summaries([summary], None)
    return launch("optimize", argv, check_jobs)
