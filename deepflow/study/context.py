"""What every study uses: its checked configuration, the jobs of its workloads, its searches and
points as child runs, and its rows.

A *row* is one variant of one workload: the design it ends with (`Point`), its step time, energy per
step, MFU, the objective's value, and the % it loses to the best row of its workload (or to the
reference the study names). Rows are plain dicts, so that the table, the figures and the JSON line
are made from the same data.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from omegaconf import DictConfig, OmegaConf

from deepflow.presets import ConfigError
from deepflow.study.points import Point, best_point, compose_job, evaluate_values
from deepflow.study.runs import StudyRuns

MAPPING_KEYS = ("tp", "pp", "dp", "cp", "ep", "vp", "micro_batch_size", "recompute", "sequence_parallel",
                "zero_stage", "distributed_optimizer")


MAX_BUDGET = 100_000  # evaluations of one search of a study (the co-design records took 8,000-20,000)


def positive_int(cfg: DictConfig, key: str) -> int:
    value = OmegaConf.select(cfg, key)
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_BUDGET:
        raise ConfigError(f"{key}={value!r} is invalid: allowed an integer from 1 to {MAX_BUDGET:,}")
    return value


def number(cfg: DictConfig, key: str, ok, allowed: str) -> float:
    """The number at `key`, where `ok(value)` holds; else a ConfigError naming `key` and `allowed`."""
    value = OmegaConf.select(cfg, key)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not ok(value):
        raise ConfigError(f"{key}={value!r} is invalid: allowed {allowed}")
    return float(value)


def unknown(key: str, value: Any, allowed: list[str]) -> ConfigError:
    """The error of a name `value` at `key` that is not one of `allowed`."""
    return ConfigError(f"{key}={value!r} is not known: allowed {', '.join(allowed)}")


def chosen(names: Any, allowed: list[str], key: str) -> list[str]:
    """`names` (a list, or None for all of `allowed`) checked against `allowed`."""
    if names is None:
        return list(allowed)
    names = list(names) if not isinstance(names, str) else [names]
    for name in names:
        if name not in allowed:
            raise unknown(key, name, allowed)
    if not names:
        raise ConfigError(f"{key}=[] is invalid: allowed a non-empty list of {', '.join(allowed)}")
    return names


def mapping_overrides(design: dict[str, float]) -> list[str]:
    """`++mapping.<field>=<value>` overrides that hold a design's parallel mapping."""
    from analytical.codes import RECOMPUTE_CODES

    names = {code: name for name, code in RECOMPUTE_CODES.items()}
    out = []
    for key in MAPPING_KEYS:
        if key not in design:
            continue
        value = design[key]
        if key == "recompute":
            value = names[int(value)]
        elif key in ("sequence_parallel", "distributed_optimizer"):
            value = str(bool(value)).lower()
        else:
            value = int(value)
        out.append(f"++mapping.{key}={value}")
    return out


def mapping_text(design: dict[str, float], precision: Any = None) -> str:
    """A mapping in one short line: tp / pp / dp / cp / ep, fused jobs, micro-batch, recompute, precision."""
    from analytical.codes import RECOMPUTE_CODES

    names = {code: name for name, code in RECOMPUTE_CODES.items()}
    parts = [f"{k}{int(design[k])}" for k in ("tp", "pp", "dp", "cp", "ep") if k in design and design[k] != 1]
    if design.get("fused_jobs", 1) > 1:
        parts.append(f"{int(design['fused_jobs'])} jobs fused")
    if "micro_batch_size" in design:
        parts.append(f"mb{int(design['micro_batch_size'])}")
    if "recompute" in design:
        parts.append(names[int(design["recompute"])])
    if precision is None and "precision" in design:
        from analytical.codes import PRECISION_CODES

        precision = {code: name for name, code in PRECISION_CODES.items()}[int(design["precision"])]
    if precision is not None:
        parts.append(str(precision))
    return " ".join(parts)


@dataclass
class Context:
    """One study being run: its config, where its records go, its MLflow runs, its rows."""

    cfg: DictConfig
    runs: Optional[StudyRuns]  # None until the configurations known up front are composed and checked
    base: list[str]  # overrides every job of the study takes (tracking, output folder, seed)
    quick: bool
    reference: str = "the best"  # what a row's loss_pct is measured against (the table's column)
    rows: list[dict[str, Any]] = field(default_factory=list)
    started: float = field(default_factory=time.perf_counter)
    jobs: dict[tuple, Any] = field(default_factory=dict, repr=False)  # overrides -> its composed Job

    @property
    def study(self) -> DictConfig:
        return self.cfg.study

    @property
    def elapsed_s(self) -> float:
        return time.perf_counter() - self.started

    def say(self, text: str) -> None:
        print(f"[{self.elapsed_s:6.1f} s] {text}", file=sys.stderr, flush=True)

    def job(self, overrides: list[str]):
        """The checked `Job` of `overrides` and the study's own (composed once: the command composes the
        study's `configurations` before it opens any run, and the study gets the same jobs back)."""
        key = (*overrides, *self.base)
        if key not in self.jobs:
            self.jobs[key] = compose_job(list(key))
        return self.jobs[key]

    def search(self, job, workload: str, variant: str) -> tuple[Optional[Point], dict]:
        """Run `job` as a child run; its best point (None: nothing feasible) and summary."""
        self.say(f"{workload}: {variant}: {job.strategy_name} search, {job.budget} evaluations on {job.space.name}")
        summary = self.runs.search(job)
        return best_point(job, summary), summary

    def point(self, job, values: dict[str, Any], workload: str, variant: str, note: str = "") -> tuple[Point, str]:
        """Evaluate a design (its values in `job.space`), recorded as a child run."""
        point = evaluate_values(job, values)
        return point, self.runs.point(variant, workload, point, note)

    def add(self, workload: str, variant: str, label: str, point: Optional[Point], run_id: str,
            **extra: Any) -> dict[str, Any]:
        """A row of the study's table (see the module docstring)."""
        row: dict[str, Any] = {"workload": workload, "variant": variant, "label": label, "run_id": run_id, **extra}
        if point is None:
            row.update(feasible=False, objective_s=None, step_time_s=None, energy_j=None, mfu=None, design={},
                       mapping="", reason="no feasible design found")
        else:
            r = point.row
            row.update(feasible=point.objective_feasible, objective_s=point.objective_value,
                       step_time_s=r["step_time_s"], energy_j=r["energy_j"], mfu=r["mfu"],
                       avg_power_w=r["avg_power_w"], reason=r["reason"], design=point.values,
                       mapping=mapping_text(point.design, point.values.get("precision")), chip=point.chip)
        self.rows.append(row)
        return row


def losses(rows: list[dict[str, Any]], reference: Optional[str] = None, key: str = "objective_s") -> None:
    """Each row's `loss_pct`: the % its `key` is above the best feasible row of its workload (or above
    that workload's row of variant `reference`)."""
    for workload in dict.fromkeys(r["workload"] for r in rows):
        mine = [r for r in rows if r["workload"] == workload]
        ok = [r[key] for r in mine if r["feasible"] and r[key] is not None
              and (reference is None or r["variant"] == reference)]
        base = min(ok) if ok else None
        for r in mine:
            r["loss_pct"] = None if base is None or not r["feasible"] or r[key] is None else 100.0 * (r[key] / base - 1.0)


def not_worse(rows: list[dict[str, Any]], best_variant: str, key: str = "objective_s",
              tolerance: float = 1e-9) -> dict[str, bool]:
    """Named checks `<workload>: <best_variant> not worse than <variant>` for every other variant."""
    checks = {}
    for workload in dict.fromkeys(r["workload"] for r in rows):
        mine = {r["variant"]: r for r in rows if r["workload"] == workload}
        best = mine.get(best_variant)
        for variant, r in mine.items():
            if variant == best_variant or not r["feasible"]:
                continue
            ok = best is not None and best["feasible"] and best[key] <= r[key] * (1.0 + tolerance)
            checks[f"{workload}: {best_variant} not worse than {variant}"] = bool(ok)
    return checks


def output_path(cfg: DictConfig) -> Path:
    return Path(str(cfg.output_dir))
