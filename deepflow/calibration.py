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

Only this module (and the commands) read YAML: analytical/ takes the resulting `Efficiency`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import os
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Optional

import numpy as np

from analytical.step.efficiency import DEFAULT_EFFICIENCY, Efficiency
from deepflow.presets import ConfigError

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
