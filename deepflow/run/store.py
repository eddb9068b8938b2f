"""The local record of an optimization run: nothing verified is lost when a run or its server dies.

A run's directory is `<output_dir>/<experiment>/<run_id>/` (run_id: the MLflow run's id) and holds

- `config.yaml`: the resolved Hydra config the run was started with (a resumed run reads it back);
- `evaluations.parquet`: one row per verified evaluation, rewritten atomically (temporary file,
  fsync, `os.replace`) after every verified batch, before anything is sent to MLflow: a reader
  never sees a half-written file, and a SIGKILL loses at most the batch being evaluated;
- `state.json`: tracking URI, MLflow experiment, status, how many rows MLflow has received;
- the artifacts written at the end (plots, best design, its breakdown), also logged to MLflow.

Each Parquet row has the unit-cube point (`x.0 .. x.{d-1}`, exact float64, so `History` is rebuilt
bit for bit), the decoded design (`design.<field>`, SI units), the objectives as the strategy saw
them (e.g. `log_step_time_s`), the outcome constraints (`constraint_<name>`), `objective_feasible`,
the analytical model's record (`step_time_s`, `reason`, `memory_per_device_bytes`, `mfu`, ...,
`breakdown.<part>`, `memory_breakdown.<part>`), and bookkeeping (`index`, `batch`, `propose_s`,
`verified_at`).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Optional

import pandas as pd
import torch

from analytical.codes import DTYPE
from deepflow.presets import ConfigError

EVALUATIONS = "evaluations.parquet"
CONFIG = "config.yaml"
STATE = "state.json"


def _atomic_write(path: Path, write) -> None:
    """Write `path` through a temporary file in the same directory and `os.replace` it in."""
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "wb") as fh:
        write(fh)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def flatten_row(row: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """A nested evaluation record (`deepflow.run.loop.verify`'s rows) as flat columns `a.b`."""
    out: dict[str, Any] = {}
    for key, value in row.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(flatten_row(value, prefix=f"{name}."))
        else:
            out[name] = value
    return out


def point_columns(d: int) -> list[str]:
    return [f"x.{i}" for i in range(d)]


class RunStore:
    """The directory of one run. Constructing it only stores the path; `create` makes a new one,
    `find` locates a run's directory by its id."""

    def __init__(self, directory: str | Path):
        self.directory = Path(directory)
        self._frame: Optional[pd.DataFrame] = None

    @classmethod
    def create(cls, output_dir: str | Path, experiment: str, run_id: str, config_yaml: str,
               state: dict[str, Any]) -> "RunStore":
        store = cls(Path(output_dir) / experiment / run_id)
        store.directory.mkdir(parents=True, exist_ok=False)
        _atomic_write(store.directory / CONFIG, lambda fh: fh.write(config_yaml.encode()))
        store.write_state(state)
        return store

    @classmethod
    def find(cls, output_dir: str | Path, run_id: str) -> "RunStore":
        """The run `run_id` under `output_dir/*/`, or a ConfigError naming `resume`."""
        root = Path(output_dir)
        hits = sorted(p for p in root.glob(f"*/{run_id}") if (p / CONFIG).is_file()) if run_id else []
        if len(hits) != 1:
            known = sorted(p.parent.name for p in root.glob(f"*/*/{CONFIG}"))
            shown = ", ".join(known[-10:]) or "none"
            raise ConfigError(f"resume={run_id!r} is not a run under {root.resolve()}/<experiment>/: "
                              f"allowed the id of a run there (latest: {shown})")
        return cls(hits[0])

    # state and config -----------------------------------------------------------------------
    @property
    def run_id(self) -> str:
        return self.directory.name

    def config_yaml(self) -> str:
        return (self.directory / CONFIG).read_text()

    def state(self) -> dict[str, Any]:
        path = self.directory / STATE
        return json.loads(path.read_text()) if path.is_file() else {}

    def write_state(self, state: dict[str, Any]) -> None:
        _atomic_write(self.directory / STATE, lambda fh: fh.write(json.dumps(state, indent=2).encode()))

    def update_state(self, **changes: Any) -> dict[str, Any]:
        state = {**self.state(), **changes}
        self.write_state(state)
        return state

    # evaluations ----------------------------------------------------------------------------
    @property
    def evaluations_path(self) -> Path:
        return self.directory / EVALUATIONS

    def evaluations(self) -> pd.DataFrame:
        """Every verified evaluation so far (an empty frame before the first batch)."""
        if self._frame is None:
            path = self.evaluations_path
            self._frame = pd.read_parquet(path) if path.is_file() else pd.DataFrame()
        return self._frame

    def append(self, rows: pd.DataFrame) -> pd.DataFrame:
        """Add a verified batch and rewrite the Parquet atomically; returns the whole table."""
        old = self.evaluations()
        frame = rows.reset_index(drop=True) if old.empty else pd.concat([old, rows], ignore_index=True)
        _atomic_write(self.evaluations_path, lambda fh: frame.to_parquet(fh, index=False))
        self._frame = frame
        return frame

    def history_tensors(self, d: int, outcome_names: list[str], constraint_names: list[str]
                        ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """`(X n x d, Y n x m, feasible n, C n x c)` of the stored evaluations, bit-exact."""
        frame = self.evaluations()
        n = len(frame)
        missing = [c for c in point_columns(d) + outcome_names + ["objective_feasible"]
                   + [f"constraint_{c}" for c in constraint_names] if n and c not in frame.columns]
        if missing:
            raise ConfigError(f"resume: {self.evaluations_path} lacks columns {missing}: allowed a record "
                              f"written by this run's config")

        def cols(names: list[str]) -> torch.Tensor:
            if not n:
                return torch.zeros(0, len(names), dtype=DTYPE)
            return torch.tensor(frame[names].to_numpy(dtype="float64"), dtype=DTYPE)

        feasible = torch.tensor(frame["objective_feasible"].to_numpy(dtype=bool)) if n \
            else torch.zeros(0, dtype=torch.bool)
        return (cols(point_columns(d)), cols(outcome_names), feasible,
                cols([f"constraint_{c}" for c in constraint_names]))
