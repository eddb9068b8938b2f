"""A study in MLflow: one parent run, one child run per variant.

`StudyRuns(uri, experiment, name)` opens the parent run. A variant that is a search is a
`deepflow optimize` job run as the parent's child (`search`: the same record, artifacts and resume as
`deepflow optimize`, under `<output_dir>/<study>/`); a variant that is one evaluated design (a chip with
its exact best mapping) is a small child run of its own (`point`: params, metrics and the design as
JSON). `finish` logs the study's table and figures on the parent and closes it.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any, Optional

from deepflow.study.points import Point


def _flat(prefix: str, values: dict) -> dict[str, str]:
    return {f"{prefix}{k}": str(v)[:250] for k, v in values.items()}


class StudyRuns:
    """The MLflow record of one study (module docstring)."""

    def __init__(self, uri: str, experiment: str, name: str, output_dir: Path, params: dict[str, Any]):
        from deepflow.run.mlflow_sink import client_for
        from deepflow.tracking import experiment_id_for

        self.uri = uri
        self.client = client_for(uri)
        self.experiment_id = experiment_id_for(self.client, experiment)
        self.output_dir = Path(output_dir)
        run = self.client.create_run(self.experiment_id, run_name=f"study-{name}",
                                     tags={"deepflow.command": "study", "deepflow.study": name})
        self.run_id = run.info.run_id
        self.directory = self.output_dir / "studies" / name / self.run_id
        self.directory.mkdir(parents=True, exist_ok=True)
        for key, value in _flat("", params).items():
            self.client.log_param(self.run_id, key, value)

    @property
    def parent(self) -> dict[str, Any]:
        """The parent as `deepflow.run.execute.start_job` takes it."""
        return {"run_id": self.run_id, "experiment_id": self.experiment_id, "swept": [], "tracking_uri": self.uri}

    def search(self, job, quiet: bool = True) -> dict[str, Any]:
        """Run `job` (a `deepflow optimize` Job) as a child run; its summary."""
        from deepflow.run.execute import start_job

        return start_job(job, self.client, parent=self.parent, quiet=quiet)

    def point(self, variant: str, workload: str, point: Optional[Point], note: str = "") -> str:
        """A child run holding one evaluated design (`point`; None: nothing feasible was found)."""
        run = self.client.create_run(self.experiment_id, run_name=f"{workload}-{variant}",
                                     tags={"mlflow.parentRunId": self.run_id, "deepflow.command": "study",
                                           "deepflow.variant": variant, "deepflow.workload": workload,
                                           "mlflow.note.content": note})
        run_id = run.info.run_id
        if point is not None:
            from mlflow.entities import Metric, Param

            row, now = point.row, int(time.time() * 1000)
            metrics = {**{key: float(row[key]) for key in ("step_time_s", "energy_j", "mfu", "avg_power_w",
                                                            "tokens_per_s")},
                       "objective_feasible": float(point.objective_feasible)}
            self.client.log_batch(run_id, metrics=[Metric(k, v, now, 0) for k, v in metrics.items()],
                                  params=[Param(k, v) for k, v in _flat("design.", point.values).items()])
            self.client.log_text(run_id, json.dumps({"values": point.values, "design": point.design, "chip": point.chip,
                                                     "row": row}, indent=2, default=str), "design.json")
        self.client.set_terminated(run_id, "FINISHED")
        return run_id

    def finish(self, files: list[Path], metrics: dict[str, float]) -> None:
        for key, value in metrics.items():
            self.client.log_metric(self.run_id, key, float(value))
        for path in files:
            self.client.log_artifact(self.run_id, str(path))
        self.client.set_terminated(self.run_id, "FINISHED")

    def fail(self) -> None:
        try:
            self.client.set_terminated(self.run_id, "FAILED")
        except Exception as exc:  # the store itself failed: say so, keep the original error
            print(f"deepflow: warning: could not mark study run {self.run_id} failed ({exc})", file=sys.stderr)
