"""Multirun sweeps of the command line (`deepflow optimize -m seed=0,1,2 chip.logic_node=N7,N5,N3`).

The CLI composes configs with Hydra's compose API, which has no multirun, so the sweep is expanded
here with the semantics of Hydra's `BasicSweeper`: every comma list (`key=a,b,c`, also `choice(...)`
and `range(...)`) becomes one axis and the jobs are the cartesian product of the axes,
in the order the keys were given (the last key varies fastest). A config may also declare a sweep
(`sweep: {key: a,b,c}`, e.g. an experiment's technology sweep); the command line's axes come first
and replace the config's for the same key.
"""

from __future__ import annotations

import itertools
from typing import Any, Mapping

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import HydraException
from omegaconf.errors import OmegaConfBaseException

from deepflow.presets import ConfigError

MULTIRUN_FLAGS = ("-m", "--multirun")


def split_flags(args: list[str]) -> tuple[bool, list[str]]:
    """`(multirun, overrides)`: the -m / --multirun flag removed from the arguments."""
    return any(a in MULTIRUN_FLAGS for a in args), [a for a in args if a not in MULTIRUN_FLAGS]


def _parse(overrides: list[str]):
    try:
        return OverridesParser.create().parse_overrides(overrides)
    except (HydraException, OmegaConfBaseException) as exc:
        raise ConfigError(str(exc).splitlines()[0]) from None


def axes(overrides: list[str]) -> dict[str, list[str]]:
    """`{key: [override, ...]}` for each override: one entry for a plain one, one per value for a
    sweep (`key=a,b` -> `[key=a, key=b]`). Range and interval sweeps are rejected, as Hydra's
    BasicSweeper does."""
    out: dict[str, list[str]] = {}
    for override in _parse(overrides):
        key = override.get_key_element()
        if override.is_sweep_override():
            if not override.is_discrete_sweep():
                raise ConfigError(f"{override.input_line!r}: an interval sweep cannot be enumerated: "
                                  f"allowed comma lists, choice(...), range(...)")
            try:
                out[key] = [f"{key}={value}" for value in override.sweep_string_iterator()]
            except HydraException:  # glob(...) needs Hydra's config loader, which compose does not expose
                raise ConfigError(f"{override.input_line!r}: this sweep cannot be expanded here: allowed comma "
                                  f"lists, choice(...), range(...)") from None
        else:
            out[key] = [f"{key}={override.get_value_element_as_str()}"]
    return out


def sweep_keys(overrides: list[str]) -> list[str]:
    """Keys of the overrides that are sweeps."""
    return [o.get_key_element() for o in _parse(overrides) if o.is_sweep_override()]


def config_axes(sweep: Mapping[str, Any] | None) -> dict[str, list[str]]:
    """Axes of a config's `sweep:` mapping (`{key: "a,b,c"}` or `{key: [a, b, c]}`)."""
    out: dict[str, list[str]] = {}
    for key, values in (sweep or {}).items():
        text = ",".join(str(v) for v in values) if isinstance(values, (list, tuple)) or \
            type(values).__name__ == "ListConfig" else str(values)
        out.update(axes([f"{key}={text}"]))
    return out


def expand(overrides: list[str], config_sweep: Mapping[str, Any] | None = None) -> list[list[str]]:
    """The jobs of a multirun: one override list per point of the cartesian product of the axes of
    `overrides` and then of the config's sweep for keys the command line does not set."""
    lists = axes(overrides)
    for key, values in config_axes(config_sweep).items():
        lists.setdefault(key, values)
    return [list(job) for job in itertools.product(*lists.values())]
