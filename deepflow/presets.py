"""Presets: the YAML files of the Hydra config groups in conf/, loaded as validated specs.

A preset is data (conf/<group>/<name>.yaml); this module turns a group entry (a preset name, or a
mapping of fields) into the spec dataclass of `analytical.specs`, through an OmegaConf structured
config so that a wrong type or an unknown key fails with the field's name.
"""

from __future__ import annotations

import dataclasses
import re
import typing
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from analytical.chip.spec import ChipSpec
from analytical.specs import AcceleratorSpec, MappingSpec, ModelSpec, SpecError, SystemSpec

CONF_DIR = Path(__file__).resolve().parents[1] / "conf"
GROUP_SPECS: dict[str, type] = {
    "hardware": AcceleratorSpec,
    "system": SystemSpec,
    "model": ModelSpec,
    "mapping": MappingSpec,
    "chip": ChipSpec,  # optional (default null): derived from technology and budgets (analytical/chip/derive.py)
}


class ConfigError(ValueError):
    """Bad input in a config or on the command line; the message names the field."""


def available(group: str) -> list[str]:
    return sorted(p.stem for p in (CONF_DIR / group).glob("*.yaml"))


def preset_key(name) -> str:
    """A name as a preset file is spelled: case, surrounding spaces, and spaces or underscores for dashes aside
    (a table's `LLAMA3_70B` is llama3-70b, its `H100 SXM 80GB` h100-sxm-80gb)."""
    return re.sub(r"[\s_]+", "-", str(name).strip().lower())


def preset_dict(group: str, name: str) -> dict[str, Any]:
    """A preset's fields by name; a name spelled as a table spells it (`GB200`, `H200_SXM_141GB`: `preset_key`)
    is the one preset it spells."""
    path = CONF_DIR / group / f"{name}.yaml"
    if not path.is_file():
        same = [p for p in available(group) if preset_key(p) == preset_key(name)]
        if len(same) != 1:
            raise ConfigError(f"{group}={name!r} is not a known preset: allowed {', '.join(available(group))}")
        path = CONF_DIR / group / f"{same[0]}.yaml"
    return OmegaConf.to_container(OmegaConf.load(path), resolve=True)


def to_spec(group: str, values: dict[str, Any] | DictConfig) -> Any:
    """Validate a group's fields against its schema and return the spec dataclass."""
    cls = GROUP_SPECS[group]
    known = {f.name for f in dataclasses.fields(cls)}
    values = OmegaConf.to_container(values, resolve=True) if isinstance(values, DictConfig) else dict(values)
    for key in values:
        if key not in known:
            raise ConfigError(f"{group}.{key} is not a field of {group}: allowed {', '.join(sorted(known))}")
    _check_flags(group, cls, values)
    try:
        typed = OmegaConf.merge(OmegaConf.structured(cls), values)
        spec = OmegaConf.to_object(typed)
    except OmegaConfBaseException as exc:
        key = getattr(exc, "full_key", None) or getattr(exc, "key", "")
        raise ConfigError(f"{group}.{key}: {str(exc).splitlines()[0]}") from None
    try:
        return spec.validate()
    except SpecError as exc:
        raise ConfigError(f"{group}.{exc.field} = {exc.value!r} is invalid: allowed {exc.allowed}") from None


# what a bool field takes; OmegaConf alone would also read 2, -1 or "yes" as true
FLAG_VALUES = (True, False, 0, 1, "true", "false", "True", "False")


def _check_flags(group: str, cls: type, values: dict[str, Any]) -> None:
    """A bool field's value is true, false, 0 or 1 (a number from the command line, or its text); an optional
    one's may also be null (the stack's default, `MappingSpec.overlap`)."""
    hints = typing.get_type_hints(cls)
    for key, value in values.items():
        optional = hints.get(key) == typing.Optional[bool]
        if (hints.get(key) is bool or optional) and not (optional and value is None) and not any(
                value is v or (type(value) is type(v) and value == v) for v in FLAG_VALUES):
            allowed = "true, false, 0, 1 or null (the stack's default)" if optional else "true, false, 0 or 1"
            raise ConfigError(f"{group}.{key} = {value!r} is invalid: allowed {allowed}")


def load_preset(group: str, name: str, **overrides: Any) -> Any:
    """A preset by name, with optional field overrides, as a validated spec."""
    values = preset_dict(group, name)
    values.update(overrides)
    return to_spec(group, values)
