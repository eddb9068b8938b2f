"""The MLflow side of `deepflow optimize`: the client of a store (checked reachable), the run's
params, and a sink that logs evaluations as metrics and never raises (the local record is the truth)."""

from __future__ import annotations

import json
import sys
import time

import pandas as pd
from omegaconf import DictConfig, OmegaConf

from deepflow.run.metrics import MetricContext
from deepflow.run.store import RunStore


class MlflowSink:
    """Logs to one MLflow run and never raises: the first failure is warned about once (the local
    record goes on) and later calls are skipped. The run's state.json `mlflow_synced` counts the
    evaluations MLflow has received (a resumed run sends the rest)."""

    def __init__(self, client, run_id: str, store: RunStore):
        self.client, self.run_id, self.store = client, run_id, store
        self.alive = True

    def call(self, what: str, fn, *args, **kwargs) -> bool:
        if not self.alive:
            return False
        try:
            fn(*args, **kwargs)
            return True
        except Exception as exc:  # noqa: BLE001 - any tracking failure must leave the run going
            self.alive = False
            first = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
            print(f"deepflow: warning: MLflow failed while logging {what} ({first}); the run goes on and keeps "
                  f"every evaluation in {self.store.evaluations_path}; `deepflow optimize resume={self.run_id}` "
                  f"sends MLflow what it missed", file=sys.stderr)
            return False

    def log_evaluations(self, frame: pd.DataFrame, lo: int, hi: int, context: "MetricContext") -> None:
        from mlflow.entities import Metric

        if hi <= lo:
            return
        now = int(time.time() * 1000)
        metrics = [Metric(key, value, now, step) for key, value, step in context.metrics(frame, lo, hi)]
        ok = all(self.call("metrics", self.client.log_batch, self.run_id, metrics=metrics[i:i + 1000])
                 for i in range(0, len(metrics), 1000))
        if ok and self.call("evaluations.parquet", self.client.log_artifact, self.run_id,
                            str(self.store.evaluations_path)):
            self.store.update_state(mlflow_synced=hi)


def client_for(uri: str):
    from mlflow import MlflowClient

    from deepflow.tracking import check_reachable, quiet_mlflow_logs

    check_reachable(uri)
    quiet_mlflow_logs()
    return MlflowClient(tracking_uri=uri)




def flat_params(cfg: DictConfig) -> dict[str, str]:
    flat = pd.json_normalize(OmegaConf.to_container(cfg, resolve=True), sep=".").iloc[0].to_dict()
    return {k: (json.dumps(v) if isinstance(v, (list, dict)) else str(v))[:6000] for k, v in flat.items()}


def log_params(client, run_id: str, cfg: DictConfig) -> None:
    from mlflow.entities import Param

    params = [Param(k, v) for k, v in flat_params(cfg).items()]
    for i in range(0, len(params), 100):
        client.log_batch(run_id, params=params[i:i + 100])
