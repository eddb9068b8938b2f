"""A study's designs as points of a workload's co-design space: a chip is the values of the space's
outer (non-mapping) parameters, and every answer is the analytical model's evaluation of such a
point through the same space and objective, so that the variants of a study compare like with like.

`compose_job(overrides)` composes and checks an `optimize` configuration (conf/optimize.yaml + an
experiment + overrides: the same `Job` as `deepflow optimize`); with `inner=best_mapping` its space
is a `BestMappingSpace`, whose evaluation of a chip is the chip with its fastest feasible mapping
(the exact inner search). `config_values` reads a point from a configuration (the chip template's
splits, the system's scale-up domain, the mapping's precision); `evaluate_values` evaluates one.
No MLflow here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

import torch

from analytical.codes import DTYPE
from deepflow.presets import ConfigError

SECTIONS = ("chip", "system", "mapping", "model")  # where a configuration holds a parameter's value


@dataclass
class Point:
    """One evaluated design of a study. `values`: the space's parameters (names for categoricals);
    `design`: every field the design sets (`deepflow.run.best_design.design_values`: the values,
    the mapping an inner search chose, the derived chip's fields), SI units; `row`: the model's
    record (`StepResult.row`); `objective_feasible`: feasible under the job's objective (the power
    cap of `time_at_power_cap`); `objective_value`: the objective's quantity (s or J, lower is better)."""

    values: dict[str, Any]
    design: dict[str, float]
    row: dict[str, Any]
    objective_feasible: bool
    objective_value: float
    chip: dict[str, float] = field(default_factory=dict)


def compose_job(overrides: list[str]):
    """The checked `deepflow.run.job.Job` of `deepflow optimize <overrides>` (nothing run)."""
    from deepflow.config import compose_config
    from deepflow.run.job import CONFIG_NAME, prepare

    return prepare(compose_config(list(overrides), CONFIG_NAME), list(overrides))


def _codes(name: str) -> Optional[dict]:
    from analytical.space import CATEGORY_CODES

    return CATEGORY_CODES.get(name)


def config_values(job, names: Optional[list[str]] = None) -> dict[str, Any]:
    """The value of each of the job space's parameters (or of `names`) as its configuration gives it:
    the chip template's, else the system's, the mapping's or the model's. Raises ConfigError naming
    a parameter no section sets."""
    out = {}
    for name in names or job.space.names:
        for section in SECTIONS:
            group = job.cfg.get(section) or {}
            if name in group and group[name] is not None:
                out[name] = group[name]
                break
        else:
            raise ConfigError(f"study: the configuration sets no value of {name!r} (looked in "
                              f"{', '.join(SECTIONS)}): allowed a space whose parameters the chip, system, "
                              f"mapping or model config sets")
    return out


def encode_values(space, values: dict[str, Any]) -> torch.Tensor:
    """`{name: value}` (names for categoricals, numbers otherwise) to the `1 x d` unit-cube point.
    Raises ConfigError naming a missing parameter or a value outside the space."""
    point = {}
    for p in space.parameters:
        if p.name not in values:
            raise ConfigError(f"study: no value of {p.name!r} for space {space.name}: allowed values of "
                              f"{', '.join(space.names)}")
        value = values[p.name]
        if p.kind == "categorical":
            codes = _codes(p.name)
            if value not in p.choices and str(value) not in map(str, p.choices):
                raise ConfigError(f"study: {p.name}={value!r} is outside space {space.name}: allowed "
                                  f"{', '.join(map(str, p.choices))}")
            value = codes[str(value)] if codes else float(value)
        elif not p.low - 1e-9 <= float(value) <= p.high + 1e-9:
            raise ConfigError(f"study: {p.name}={value!r} is outside space {space.name}: allowed "
                              f"{p.low:g} to {p.high:g}")
        point[p.name] = torch.tensor([float(value)], dtype=DTYPE)
    return space.encode(point)


def decode_point(space, u: torch.Tensor) -> dict[str, Any]:
    """A `(d,)` point's parameter values: categoricals by name, integer and log2 parameters as ints."""
    kinds = {p.name: p.kind for p in space.parameters}
    out = {}
    for name, v in space.decode(u.reshape(1, -1)).items():
        codes, value = _codes(name), float(v[0])
        if codes:
            out[name] = {code: key for key, code in codes.items()}[int(value)]
        elif kinds[name] in ("integer", "log2") or (kinds[name] == "categorical" and value == int(value)):
            out[name] = int(value)
        else:
            out[name] = value
    return out


CHIP_KEYS = ("compute_units", "peak_bf16_flops_per_s", "peak_fp8_flops_per_s", "sram_bytes", "hbm_bytes",
             "hbm_bw_bytes_per_s", "scale_up_bw_bytes_per_s", "scale_out_bw_bytes_per_s", "tdp_w", "clock_hz")


def evaluate_point(job, u: torch.Tensor) -> Point:
    """The `Point` of the `1 x d` point `u` of `job.space` under `job.objective`."""
    from analytical.search import MAPPING_FIELDS
    from deepflow.run.best_design import design_values

    Y, feasible, _, result = job.objective.evaluate(job.space, u)
    batch = job.space.to_batch(u)
    design = {**{k: float(getattr(batch, k)[0]) for k in (*MAPPING_FIELDS, "fused_jobs", "precision")},
              **design_values(job.space, u[0])}
    chip = {k: float(getattr(batch, k)[0]) for k in CHIP_KEYS if hasattr(batch, k)}
    quantity = float(torch.exp(Y[0, 0]))
    return Point(values=decode_point(job.space, u[0]), design=design, row=result.row(0),
                 objective_feasible=bool(feasible[0]), objective_value=quantity, chip=chip)


def evaluate_values(job, values: dict[str, Any]) -> Point:
    """The `Point` of a design given by its parameter values (`encode_values`)."""
    return evaluate_point(job, encode_values(job.space, values))


def best_point(job, summary: dict) -> Optional[Point]:
    """The best feasible evaluation of a finished `deepflow optimize` run (its summary), re-evaluated,
    or None when it found nothing feasible."""
    from pathlib import Path

    import pandas as pd

    from deepflow.run.store import point_columns

    frame = pd.read_parquet(Path(summary["local_dir"]) / "evaluations.parquet")
    if "best_index" not in summary:
        return None
    row = frame[frame["index"] == summary["best_index"]].iloc[0]
    u = torch.tensor(row[point_columns(job.space.dim)].to_numpy(float), dtype=DTYPE).reshape(1, -1)
    return evaluate_point(job, u)
