"""One parent MLflow run per Hydra multirun, a child run per job, and the sweep's table at the end.

`SweepParent` is a Hydra callback (conf/optimize.yaml, conf/sample.yaml: `hydra.callbacks`). In
the process that launches the sweep, before any job starts, it opens the parent run (which also
creates the MLflow experiment and, for a new sqlite file, its schema, so parallel jobs never race
for them) and writes its id to `<sweep dir>/mlflow_parent.json`. Every job, wherever its launcher
runs it (a joblib worker, a Ray task, a SLURM node sharing the folder), reads that file
(`parent_of_job`) and opens its run as a child in the parent's experiment; when it finishes it
writes `summary.json` into its own Hydra folder (`record_summary`). At the end of the multirun the
callback reads those summaries, writes `sweep.csv` beside them, logs it to the parent, prints the
command's sweep table and closes the parent: FINISHED when every job left a summary, else FAILED
(the children that finished stay as they are).
"""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path
from typing import Any, Optional

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

PARENT_FILE = "mlflow_parent.json"
SUMMARY_FILE = "summary.json"
# per command: the MLflow experiment of its runs, and "module:function(summaries, parent_id, swept)"
# that prints the sweep's table and returns it as a DataFrame
EXPERIMENTS = {"optimize": lambda cfg: str(OmegaConf.select(cfg, "tracking.experiment") or cfg.name),
               "sample": lambda cfg: str(OmegaConf.select(cfg, "tracking.experiment") or "samples")}
REPORTS = {"optimize": "deepflow.run.summary:print_sweep", "sample": "deepflow.commands.sample:print_sweep",
           "best_mapping": "deepflow.commands.best_mapping:print_sweep"}
_open: dict[str, str] = {}  # parent run id -> tracking URI, for parents this process has not closed
_failed: list[int] = []  # jobs without a summary in the multiruns this process finished


def swept_keys(cfg: DictConfig) -> list[str]:
    """Keys with several values in a multirun: the config's `hydra.sweeper.params`, then the
    command line's sweeps."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    declared = list((OmegaConf.select(cfg, "hydra.sweeper.params") or {}).keys())
    parsed = OverridesParser.create().parse_overrides(list(cfg.hydra.overrides.task))
    given = [o.get_key_element().lstrip("+~") for o in parsed if o.is_sweep_override()]
    return declared + [k for k in given if k not in declared]


class SweepParent(Callback):
    """Hydra callback: the parent of a multirun of `command` (optimize | sample | best_mapping): its
    MLflow parent run (not for best-mapping, which logs nothing, nor for `mlflow=false`) and its table."""

    def __init__(self, command: str) -> None:
        self.command = command
        self.run_id: Optional[str] = None

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        from deepflow.run.mlflow_sink import client_for
        from deepflow.tracking import experiment_id_for
        from deepflow.tracking import resolve_uri

        sweep_dir = Path(str(config.hydra.sweep.dir))
        sweep_dir.mkdir(parents=True, exist_ok=True)
        if self.command not in EXPERIMENTS or OmegaConf.select(config, "mlflow") is False:
            return  # best-mapping (a query) and `deepflow sample mlflow=false`: the sweep table only
        uri = resolve_uri(OmegaConf.select(config, "tracking.uri"))
        client = client_for(uri)
        experiment_id = experiment_id_for(client, EXPERIMENTS[self.command](config))
        swept = swept_keys(config)
        name = OmegaConf.select(config, "name") or self.command
        run = client.create_run(experiment_id, run_name=f"{name}-sweep",
                                tags={"deepflow.command": f"{self.command} -m", "deepflow.sweep": " ".join(swept),
                                      "deepflow.sweep_dir": str(sweep_dir.resolve())})
        self.run_id = run.info.run_id
        _open[self.run_id] = uri
        (sweep_dir / PARENT_FILE).write_text(json.dumps({"run_id": self.run_id, "tracking_uri": uri,
                                                         "experiment_id": experiment_id, "swept": swept}))
        print(f"sweep: parent MLflow run {self.run_id}, jobs under {sweep_dir}/", file=sys.stderr, flush=True)

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        sweep_dir = Path(str(config.hydra.sweep.dir))
        jobs = sorted((p.parent for p in sweep_dir.glob("*/.hydra")), key=lambda p: (len(p.name), p.name))
        summaries = [json.loads((j / SUMMARY_FILE).read_text()) for j in jobs if (j / SUMMARY_FILE).is_file()]
        missing = [j.name for j in jobs if not (j / SUMMARY_FILE).is_file()]
        if summaries:
            module, _, function = REPORTS[self.command].partition(":")
            table = getattr(importlib.import_module(module), function)(summaries, self.run_id, swept_keys(config))
            table.to_csv(sweep_dir / "sweep.csv", index=False)
        if missing:
            print(f"deepflow: error: {len(missing)} of {len(jobs)} jobs left no result (job folders "
                  f"{', '.join(missing)} under {sweep_dir}/: see their .log)", file=sys.stderr)
            _failed.append(len(missing))
        if self.run_id is not None:
            from mlflow import MlflowClient

            client = MlflowClient(tracking_uri=_open[self.run_id])
            client.log_param(self.run_id, "jobs", len(jobs))
            if summaries:
                client.log_artifact(self.run_id, str(sweep_dir / "sweep.csv"))
            client.set_terminated(self.run_id, "FAILED" if missing else "FINISHED")
            _open.pop(self.run_id, None)


def parent_of_job() -> Optional[dict]:
    """`{"run_id", "tracking_uri", "experiment_id", "swept"}` of the multirun this Hydra job belongs
    to, or None outside a multirun."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    hc = HydraConfig.get()
    path = Path(str(hc.sweep.dir)) / PARENT_FILE
    if hc.mode != RunMode.MULTIRUN or not path.is_file():
        return None
    return json.loads(path.read_text())


def job_dir() -> str:
    """This Hydra job's folder (its .hydra/ config snapshot and log)."""
    from hydra.core.hydra_config import HydraConfig

    return str(Path(HydraConfig.get().runtime.output_dir).resolve())


def record_summary(summary: dict) -> None:
    """Write the job's summary (JSON-able values) into its Hydra folder: the mark of a job that finished."""
    path = Path(job_dir()) / SUMMARY_FILE
    path.write_text(json.dumps(summary, default=str))


def close_open_parents(status: str) -> None:
    """Close the parent runs of multiruns that died before their end (a job failed): `status`."""
    from mlflow import MlflowClient

    for run_id, uri in list(_open.items()):
        MlflowClient(tracking_uri=uri).set_terminated(run_id, status)
        _open.pop(run_id)


def failed_code() -> int:
    """1 when a multirun this process finished had a job without a result, else 0 (then forgotten)."""
    code = 1 if _failed else 0
    del _failed[:]
    return code
