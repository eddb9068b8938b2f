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


def _explain(exc: Exception, overrides: list[str], config_name: str) -> str:
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    unknown = re.match(r"Could not override '([^']+)'", text)
    if unknown and not unknown.group(1).startswith("hydra."):
        key = unknown.group(1)
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
            keys = sorted(compose(config_name=config_name))
        return (f"{key} is not a key of the {config_name} config: allowed {', '.join(keys)} and their fields "
                f"(e.g. mapping.tp); +{key}=... adds a new one")
    hydra_group = re.search(r"Could not find '(hydra/\w+)/([^']+)'", text)  # a launcher, sweeper, ... of Hydra
    if hydra_group:
        group, name = hydra_group.groups()
        if group == "hydra/launcher":
            return launcher_help(name)
        return f"{group}={name!r} is not a known option: allowed {', '.join(hydra_group_options(group))}"
    missing = re.search(r"Could not find '(\w+)/([^']+)'", text)
    if missing and (CONF_DIR / missing.group(1)).is_dir():  # any config group: hardware, space, strategy, ...
        group, name = missing.groups()
        return f"{group}={name!r} is not a known preset: allowed {', '.join(available(group))}"
    for group in GROUP_SPECS:
        for override in overrides:
            key, _, value = override.partition("=")
            if key.lstrip("+~") == group and value and value not in available(group):
                return f"{group}={value!r} is not a known preset: allowed {', '.join(available(group))}"
    return text


def field_override(override: str) -> str:
    """`group.field=value` may set any field of the group's spec, also one its preset leaves at the
    default: Hydra's add-or-override form (`++`). Unknown fields are rejected by `to_spec`."""
    key, _, value = override.partition("=")
    if key == "chip" and value.lower() in ("null", "none"):  # the optional group, switched off
        return "~chip"
    group, dot, _ = key.partition(".")
    return f"++{override}" if dot and group in GROUP_SPECS else override


# groups that are not specs: a wrong name is "not a known experiment" (specs' are "not a known preset")
OWN_GROUPS = ("experiment", "strategy", "tracking", "space", "surrogate")


def check_group_names(overrides: list[str]) -> None:
    """A wrong experiment / strategy / tracking / space / surrogate name, named with the allowed ones."""
    for override in overrides:
        key, _, value = override.partition("=")
        key = key.lstrip("+~")
        if key in OWN_GROUPS and value not in available(key) and value not in ("null", "none"):
            raise ConfigError(f"{key}={value!r} is not a known {key}: allowed {', '.join(available(key))}")


def hydra_group_options(group: str) -> list[str]:
    """The options of a config group Hydra can see: deepflow's conf/ and installed plugins
    (`hydra_group_options("hydra/launcher")` -> ["basic", "joblib", ...])."""
    from hydra.core.global_hydra import GlobalHydra

    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return sorted(GlobalHydra.instance().config_loader().get_group_options(group))


# the launchers deepflow's extras install, and the extra that installs each
LAUNCHER_EXTRAS = {"joblib": "joblib", "ray": "ray", "submitit_local": "slurm", "submitit_slurm": "slurm"}


def launcher_help(name: str) -> str:
    """The line that says how to get launcher `name`, and which launchers this machine has."""
    installed = hydra_group_options("hydra/launcher")
    known = sorted(set(installed) | set(LAUNCHER_EXTRAS))
    if name in LAUNCHER_EXTRAS:
        return (f"hydra/launcher={name!r} is not installed: pip install -e \".[{LAUNCHER_EXTRAS[name]}]\" "
                f"(installed: {', '.join(installed)})")
    return f"hydra/launcher={name!r} is not a known launcher: allowed {', '.join(known)} (installed: " \
           f"{', '.join(installed)})"


def compose_config(overrides: list[str], config_name: str = "config", return_hydra_config: bool = False) -> DictConfig:
    """The composed config for `overrides` (Hydra syntax), or a ConfigError naming the problem.
    `design=<file>` puts the sections of a design YAML (`deepflow.designs`) in place of the groups.
    `return_hydra_config`: with the `hydra` node (launcher, sweeper, ...) that `@hydra.main` composes."""
    from deepflow.designs import apply_design_file, split_design

    for override in overrides:
        if "=" not in override:
            raise ConfigError(f"argument {override!r} is not an override: use key=value (e.g. model=gpt3-175b)")
    check_group_names(overrides)
    design, overrides = split_design(overrides)
    try:
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
            cfg = compose(config_name=config_name, overrides=[field_override(o) for o in overrides],
                          return_hydra_config=return_hydra_config)
        return cfg if design is None else apply_design_file(cfg, design, overrides)
    except (HydraException, OmegaConfBaseException) as exc:
        raise ConfigError(_explain(exc, overrides, config_name)) from None


def specs_from_config(cfg: DictConfig) -> tuple[Any, Any, Any, Any]:
    """`(accelerator, system, model, mapping)` specs of a composed config, validated. With a `chip`
    group the accelerator is the derived chip's (`analytical.chip.derive.accelerator_spec`)."""
    specs = tuple(to_spec(group, cfg[group]) for group in ("hardware", "system", "model", "mapping"))
    chip = chip_from_config(cfg)
    if chip is None:
        return specs
    from analytical.chip.derive import accelerator_spec, derive_chip
    from analytical.codes import REASON_TEXT, Reason

    derived = derive_chip(chip)
    if int(derived.reason[0]):
        raise ConfigError(f"chip {chip.name!r} cannot be built: {REASON_TEXT[Reason(int(derived.reason[0]))]} "
                          f"(deepflow derive shows what each part uses)")
    return (accelerator_spec(derived, name=chip.name, chip=chip),) + specs[1:]


def chip_from_config(cfg: DictConfig):
    """The validated `ChipSpec` of the config's `chip` group, or None where it has none (null)."""
    value = OmegaConf.select(cfg, "chip")
    return None if value is None else to_spec("chip", value)


def design_from_config(cfg: DictConfig):
    """`(specs, design, derived)`: the specs as `specs_from_config`, the `DesignBatch` of one and,
    with a `chip` group, its derivation (`analytical.chip.derive.DerivedChips`, whose accelerator fields,
    energies at the operating voltage included, are the design's), else None."""
    import dataclasses

    from analytical.build import single_design
    from analytical.chip.derive import accelerator_spec, derive_chip
    from analytical.design import DesignBatch

    specs = tuple(to_spec(group, cfg[group]) for group in ("hardware", "system", "model", "mapping"))
    chip = chip_from_config(cfg)
    design = single_design(*specs)
    if chip is None:
        return specs, design, None
    derived = derive_chip(chip)  # an infeasible chip still has finite fields: its reason is the answer
    names = {f.name for f in dataclasses.fields(DesignBatch)}
    specs = (accelerator_spec(derived, name=chip.name, chip=chip),) + specs[1:]
    return specs, design.replace(**{k: v for k, v in derived.accelerator.items() if k in names}), derived


def option(cfg: DictConfig, key: str, allowed: tuple | None = None) -> Any:
    """A top-level option of the config, checked against `allowed` values."""
    value = OmegaConf.select(cfg, key)
    if allowed is not None and value not in allowed:
        raise ConfigError(f"{key}={value!r} is invalid: allowed {', '.join(map(str, allowed))}")
    return value


DTYPES = ("float64", "float32")


def device_from_config(cfg: DictConfig) -> tuple[str, Any]:
    """`(device, torch dtype)` the analytical model computes on: the config's `device` (cpu, cuda,
    cuda:<n>) and `dtype` (float64, float32), checked; a GPU that is not there is a named error."""
    import torch

    device = str(cfg.get("device", "cpu") or "cpu")
    dtype = str(cfg.get("dtype", "float64") or "float64")
    if dtype not in DTYPES:
        raise ConfigError(f"dtype={dtype!r} is invalid: allowed {', '.join(DTYPES)}")
    if device == "cpu":
        return device, getattr(torch, dtype)
    index = device.removeprefix("cuda").removeprefix(":")
    if not device.startswith("cuda") or (index and not index.isdigit()) or device == "cuda:":
        raise ConfigError(f"device={device!r} is invalid: allowed cpu, cuda or cuda:<n>")
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if count == 0:
        raise ConfigError(f"device={device!r} is invalid: this machine has no CUDA device "
                          f"(torch {torch.__version__}, cuda available: False); allowed cpu")
    if index and int(index) >= count:
        raise ConfigError(f"device={device!r} is invalid: allowed cpu or cuda:0..cuda:{count - 1}")
    return device, getattr(torch, dtype)


def space_from_config(cfg: DictConfig):
    """The `DesignSpace` of the composed config: `space.parameters` around the design of the
    hardware, system, model and mapping groups (its mapping fields are the template's defaults).
    Its chip template is the `chip` group, else the preset the space config names under `chip:`
    (spaces that vary chip inputs need one); with a chip template every point's accelerator is
    derived (so `chip=<preset> space=mapping-only` searches mappings on the derived chip). Its
    efficiency constants are the config's calibration's (`calibration=<file>`, for the template's
    accelerator or chip), else the defaults."""
    from analytical.build import single_design
    from analytical.space import DesignSpace, parameters_from_dicts
    from analytical.specs import SpecError
    from deepflow.calibration import efficiency_of

    space = OmegaConf.to_container(cfg.space, resolve=True)
    chip = chip_from_config(cfg)
    if chip is None and space.get("chip") is not None:  # the space's own chip template (a conf/chip/ preset)
        from deepflow.presets import load_preset

        chip = load_preset("chip", str(space["chip"]))
    try:
        params = parameters_from_dicts(space.get("parameters", []))
        specs = tuple(to_spec(g, cfg[g]) for g in ("hardware", "system", "model", "mapping"))
        template = single_design(*specs)
        efficiency = efficiency_of(cfg, chip.name if chip is not None else specs[0].name)
        device, dtype = device_from_config(cfg)
        return DesignSpace(name=str(space.get("name", "space")), parameters=params, template=template,
                           chip=chip, efficiency=efficiency, device=device, dtype=dtype).validate()
    except SpecError as exc:
        if exc.field == "chip":
            from deepflow.presets import available

            raise ConfigError(f"space {space.get('name')!r} varies chip inputs: give chip=<preset> (allowed "
                              f"{', '.join(available('chip'))}) or a `chip:` preset in the space config") from None
        raise ConfigError(str(exc)) from None
