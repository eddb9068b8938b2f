"""Compose the Hydra configuration of a command and turn it into validated specs.

The CLI uses Hydra's compose API (no working-directory change, no log files), so
`deepflow evaluate model=llama3-70b mapping.tp=4` behaves like any Hydra app's overrides while
every error comes back as one `ConfigError` line that names the field.
"""

from __future__ import annotations

import re
from typing import Any

from hydra import compose, initialize_config_dir
from hydra.errors import HydraException
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from deepflow.presets import CONF_DIR, GROUP_SPECS, ConfigError, available, to_spec


def _explain(exc: Exception, overrides: list[str]) -> str:
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    missing = re.search(r"Could not find '(\w+)/([^']+)'", text)
    if missing and missing.group(1) in GROUP_SPECS:
        group, name = missing.groups()
        return f"{group}={name!r} is not a known preset: allowed {', '.join(available(group))}"
    for group in GROUP_SPECS:
        for override in overrides:
            key, _, value = override.partition("=")
            if key.lstrip("+~") == group and value and value not in available(group):
                return f"{group}={value!r} is not a known preset: allowed {', '.join(available(group))}"
    return text


def _field_override(override: str) -> str:
    """`group.field=value` may set any field of the group's spec, also one its preset leaves at the
    default: Hydra's add-or-override form (`++`). Unknown fields are rejected by `to_spec`."""
    key = override.partition("=")[0]
    group, dot, _ = key.partition(".")
    return f"++{override}" if dot and group in GROUP_SPECS else override


def compose_config(overrides: list[str], config_name: str = "config") -> DictConfig:
    """The composed config for `overrides` (Hydra syntax), or a ConfigError naming the problem."""
    for override in overrides:
        if "=" not in override:
            raise ConfigError(f"argument {override!r} is not an override: use key=value (e.g. model=gpt3-175b)")
    try:
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
            return compose(config_name=config_name, overrides=[_field_override(o) for o in overrides])
    except (HydraException, OmegaConfBaseException) as exc:
        raise ConfigError(_explain(exc, overrides)) from None


def specs_from_config(cfg: DictConfig) -> tuple[Any, Any, Any, Any]:
    """`(accelerator, system, model, mapping)` specs of a composed config, validated."""
    return tuple(to_spec(group, cfg[group]) for group in ("hardware", "system", "model", "mapping"))


def option(cfg: DictConfig, key: str, allowed: tuple | None = None) -> Any:
    """A top-level option of the config, checked against `allowed` values."""
    value = OmegaConf.select(cfg, key)
    if allowed is not None and value not in allowed:
        raise ConfigError(f"{key}={value!r} is invalid: allowed {', '.join(map(str, allowed))}")
    return value


def space_from_config(cfg: DictConfig):
    """The `DesignSpace` of the composed config: `space.parameters` around the design of the
    hardware, system, model and mapping groups (its mapping fields are the template's defaults)."""
    from analytical.design import single_design
    from analytical.space import DesignSpace, parameters_from_dicts
    from analytical.specs import SpecError

    space = OmegaConf.to_container(cfg.space, resolve=True)
    try:
        params = parameters_from_dicts(space.get("parameters", []))
        return DesignSpace(name=str(space.get("name", "space")), parameters=params,
                           template=single_design(*specs_from_config(cfg))).validate()
    except SpecError as exc:
        raise ConfigError(str(exc)) from None
