"""A calibration file: the analytical model's efficiency constants fitted on a user's measured runs.

`deepflow calibrate data=<csv>` (deepflow/commands/calibrate.py) writes one; `calibration=<file>` makes
`evaluate`, `best-mapping`, `validate`, `sample` and `optimize` use it. The file is YAML:

    version: 1
    provenance: {command, data, data_sha256, fit, cv, folds, fields, n, cv_mape_before, cv_mape_after, date, ...}
    efficiency: {<every field of analytical.step.efficiency.Efficiency>: value}      # the global constants
    per_accelerator: {<gpu of the CSV>: {<field>: value}}                          # fit=per_accelerator only

`Calibration.efficiency_for(accelerator)` is the accelerator's own constants when the file has them
(by the CSV's `gpu` name, which is the hardware preset's name), else the global ones. `Efficiency` is
built from `dataclasses.fields(Efficiency)`, so fields added later load too: a field the file does not
give keeps its default (in `per_accelerator`, the file's global value). An unknown field or a bad
value is a `ConfigError` naming the file (as `calibration=<path>`) and the field.

`fit_efficiency` fits the constants (`FIT_FIELDS`, within `FIT_BOUNDS`) to measured rows
(`deepflow.validation.Rows`). Only this module (and the commands) read YAML: analytical/ takes the
resulting `Efficiency`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import os
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

import numpy as np
import torch

from analytical import evaluate, stack_designs
from analytical.step.efficiency import DEFAULT_EFFICIENCY, Efficiency
from deepflow.presets import ConfigError

if TYPE_CHECKING:
    from deepflow.validation import Rows

FORMAT_VERSION = 1
TOP_KEYS = ("version", "provenance", "efficiency", "per_accelerator")


def sha256_of(path: str | Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def efficiency_dict(eff: Efficiency) -> dict[str, Any]:
    """Every field of `eff`, by name (generic: fields added to Efficiency come along)."""
    return {f.name: getattr(eff, f.name) for f in dataclasses.fields(eff)}


def _allowed(name: str, default: Any) -> str:
    if isinstance(default, bool):
        return "true or false"
    if isinstance(default, int):
        return "an integer"
    if isinstance(default, str):
        return "a string"
    if name.endswith("_fraction"):
        return "a number in (0, 1]"
    if "slowdown" in name:
        return "a number >= 1"
    if name.endswith("_s"):
        return "a number of seconds >= 0"
    return "a finite number"


def _value(name: str, value: Any, default: Any) -> Any:
    """`value` checked against the kind of field `name` (its default's type and its name), or None."""
    if isinstance(default, bool):
        return value if isinstance(value, bool) else None
    if isinstance(default, int):
        return value if isinstance(value, int) and not isinstance(value, bool) else None
    if isinstance(default, str):
        return value if isinstance(value, str) else None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    value = float(value)
    if name.endswith("_fraction"):
        return value if 0.0 < value <= 1.0 else None
    if "slowdown" in name:
        return value if value >= 1.0 else None
    if name.endswith("_s"):
        return value if value >= 0.0 else None
    return value


def efficiency_from_dict(values: Any, base: Efficiency = DEFAULT_EFFICIENCY, where: str = "efficiency") -> Efficiency:
    """`base` with the fields of `values` (a mapping) replaced, each checked; ConfigError naming
    `where.<field>` otherwise (the caller prefixes the file)."""
    if values is None:
        return base
    if not isinstance(values, dict):
        raise ConfigError(f"{where} = {values!r} is invalid: allowed a mapping of Efficiency fields to values")
    defaults = efficiency_dict(base)
    for key in values:
        if key not in defaults:
            raise ConfigError(f"{where}.{key} is not a field of Efficiency: allowed {', '.join(defaults)}")
    checked = {}
    for key, value in values.items():
        ok = _value(key, value, defaults[key])
        if ok is None:
            raise ConfigError(f"{where}.{key} = {value!r} is invalid: allowed {_allowed(key, defaults[key])}")
        checked[key] = ok
    return dataclasses.replace(base, **checked)


@lru_cache(maxsize=None)
def _preset_spec_name(name: str) -> Optional[str]:
    """The `name` field of the hardware preset `name` (None when there is no such preset)."""
    from deepflow.presets import load_preset

    try:
        return load_preset("hardware", name).name
    except (ConfigError, ValueError):
        return None


@dataclass
class Calibration:
    """Global efficiency constants, optionally per accelerator, and how they were made."""

    efficiency: Efficiency = DEFAULT_EFFICIENCY
    per_accelerator: dict[str, Efficiency] = field(default_factory=dict)
    provenance: dict[str, Any] = field(default_factory=dict)
    path: Optional[str] = None  # the file it was loaded from or saved to
    sha256: Optional[str] = None  # of that file's bytes

    def efficiency_for(self, accelerator: Optional[str]) -> Efficiency:
        """The constants of `accelerator` (a CSV `gpu` / hardware preset name, or an
        `AcceleratorSpec.name`): its own when the file has them, else the global ones."""
        if accelerator is None or not self.per_accelerator:
            return self.efficiency
        if accelerator in self.per_accelerator:
            return self.per_accelerator[accelerator]
        for key, eff in self.per_accelerator.items():
            if _preset_spec_name(key) == accelerator:
                return eff
        return self.efficiency

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"version": FORMAT_VERSION, "provenance": dict(self.provenance),
                               "efficiency": efficiency_dict(self.efficiency)}
        if self.per_accelerator:
            out["per_accelerator"] = {k: efficiency_dict(v) for k, v in self.per_accelerator.items()}
        return out

    def save(self, path: str | Path) -> "Calibration":
        """Write the file (atomically: a temporary beside it, then renamed); sets `path`, `sha256`."""
        import yaml

        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        header = ("# DeepFlow calibration: efficiency constants of the analytical model (analytical/step/efficiency.py).\n"
                  "# Use it: deepflow evaluate calibration=<this file> (also best-mapping, validate, sample, optimize).\n")
        text = header + yaml.safe_dump(_plain(self.to_dict()), sort_keys=False, default_flow_style=False)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(text)
        os.replace(tmp, path)
        self.path, self.sha256 = str(path), sha256_of(path)
        return self

    @classmethod
    def load(cls, path: str | Path) -> "Calibration":
        """Read and check a calibration file; ConfigError naming `calibration=<path>` and the field."""
        import yaml

        where = f"calibration={str(path)!r}"
        p = Path(path)
        if not p.is_file():
            raise ConfigError(f"{where}: no such file (make one with `deepflow calibrate data=<csv of measured runs>`)")
        try:
            data = yaml.safe_load(p.read_text())
        except (yaml.YAMLError, UnicodeDecodeError) as exc:
            first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise ConfigError(f"{where}: not a YAML file ({first})") from None
        if not isinstance(data, dict):
            raise ConfigError(f"{where}: allowed a YAML mapping with keys {', '.join(TOP_KEYS)}")
        for key in data:
            if key not in TOP_KEYS:
                raise ConfigError(f"{where}: {key} is not a key of a calibration file: allowed {', '.join(TOP_KEYS)}")
        version = data.get("version", FORMAT_VERSION)
        if version != FORMAT_VERSION:
            raise ConfigError(f"{where}: version = {version!r} is invalid: allowed {FORMAT_VERSION}")
        provenance = data.get("provenance") or {}
        if not isinstance(provenance, dict):
            raise ConfigError(f"{where}: provenance = {provenance!r} is invalid: allowed a mapping")
        try:
            glob = efficiency_from_dict(data.get("efficiency"), DEFAULT_EFFICIENCY, "efficiency")
            per = data.get("per_accelerator") or {}
            if not isinstance(per, dict):
                raise ConfigError(f"per_accelerator = {per!r} is invalid: allowed a mapping of accelerator names "
                                  "to Efficiency fields")
            per_acc = {str(k): efficiency_from_dict(v, glob, f"per_accelerator.{k}") for k, v in per.items()}
        except ConfigError as exc:
            raise ConfigError(f"{where}: {exc}") from None
        return cls(efficiency=glob, per_accelerator=per_acc, provenance=provenance, path=str(p),
                   sha256=sha256_of(p))


def _plain(value: Any) -> Any:
    """Numpy scalars and tuples as plain YAML values."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    return value


def calibration_from_config(cfg) -> Optional[Calibration]:
    """The calibration a composed config names (`calibration=<file>`), or None (unset or null)."""
    from omegaconf import OmegaConf

    value = OmegaConf.select(cfg, "calibration", default=None)
    if value is None or str(value).strip() in ("", "null", "None"):
        return None
    return Calibration.load(str(value))


def efficiency_of(cfg, accelerator: Optional[str]) -> Efficiency:
    """The efficiency constants a command uses for `accelerator`: the config's calibration's, else
    the defaults."""
    calibration = calibration_from_config(cfg)
    return DEFAULT_EFFICIENCY if calibration is None else calibration.efficiency_for(accelerator)


def predict_calibrated(rows, calibration: Calibration) -> dict[str, np.ndarray]:
    """`deepflow.validation.predict` with each row's own constants: the rows grouped by accelerator
    (`efficiency_for(<the row's AcceleratorSpec.name>)`), one batched call per group."""
    from deepflow.validation import predict

    n = len(rows.ids)
    names = [spec[0].name for spec in rows.specs]
    out: dict[str, np.ndarray] = {}
    for name in dict.fromkeys(names):
        mask = np.array([m == name for m in names])
        part = predict(rows.subset(mask), calibration.efficiency_for(name))
        for key, value in part.items():
            if key not in out:
                out[key] = np.zeros(n, dtype=value.dtype)
            out[key][mask] = value
    return out


FIT_FIELDS = ("gemm_peak_fraction", "gemm_tile_overhead_s", "narrow_gemm_peak_fraction", "hbm_bw_fraction",
              "flash_attention_fraction", "scale_up_bw_fraction", "scale_out_bw_fraction", "zero3_comm_fraction",
              "overlap_compute_slowdown", "layer_overhead_s", "moe_layer_host_s")
FIT_BOUNDS = {"gemm_peak_fraction": (0.5, 1.0), "gemm_tile_overhead_s": (0.0, 2e-5),
              "narrow_gemm_peak_fraction": (0.3, 1.0), "hbm_bw_fraction": (0.3, 1.0),
              "flash_attention_fraction": (0.2, 1.0), "scale_up_bw_fraction": (0.3, 1.0),
              "scale_out_bw_fraction": (0.1, 1.0), "zero3_comm_fraction": (0.02, 1.0),
              "overlap_compute_slowdown": (1.0, 3.0), "layer_overhead_s": (0.0, 5e-3), "moe_layer_host_s": (0.0, 1e-2)}


# a log-time residual below this counts fully (soft-L1 loss), above it linearly: robust to a few odd rows
FIT_RESIDUAL_SCALE = 0.05


def fit_efficiency(rows: "Rows", start: Efficiency = Efficiency(), fields: tuple[str, ...] = FIT_FIELDS,
                   prior_sigma: float | None = None) -> Efficiency:
    """Least squares on log(predicted / measured) over `rows`, bounded per field.

    `prior_sigma`: a Gaussian prior on log(constant / start constant) of that width (0.2: a constant
    20 % off `start` costs as much as one row off by `FIT_RESIDUAL_SCALE`), i.e. the MAP estimate;
    what a few rows do not support stays near `start`. None: no prior (the shipped constants).
    """
    from scipy.optimize import least_squares

    batch = stack_designs(*zip(*rows.specs))
    log_measured = torch.as_tensor(np.log(rows.measured_s))
    lo = np.array([FIT_BOUNDS[f][0] for f in fields])
    hi = np.array([FIT_BOUNDS[f][1] for f in fields])
    scale = hi - lo
    start_values = np.array([getattr(start, f) for f in fields])
    with_prior = start_values > 0 if prior_sigma else np.zeros(len(fields), dtype=bool)
    prior_weight = FIT_RESIDUAL_SCALE / prior_sigma if prior_sigma else 0.0

    def residuals(z: np.ndarray) -> np.ndarray:
        values = lo + z * scale
        eff = dataclasses.replace(start, **{f: float(v) for f, v in zip(fields, values)})
        data = (torch.log(evaluate(batch, eff).step_time_s) - log_measured).numpy()
        prior = prior_weight * np.log(np.maximum(values[with_prior], 1e-300) / start_values[with_prior])
        return np.concatenate([data, prior])

    z0 = np.clip((np.array([getattr(start, f) for f in fields]) - lo) / scale, 0.0, 1.0)
    best = least_squares(residuals, z0, bounds=(0.0, 1.0), diff_step=1e-3, loss="soft_l1", f_scale=FIT_RESIDUAL_SCALE)
    return dataclasses.replace(start, **{f: float(v) for f, v in zip(fields, lo + best.x * scale)})
