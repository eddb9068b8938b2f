"""Every shipped preset loads, validates and evaluates; bad presets name the field."""

from __future__ import annotations

import re

import pytest
import torch

from analytical import evaluate, single_design
from deepflow.config import compose_config, specs_from_config
from deepflow.presets import CONF_DIR, ConfigError, available, load_preset, to_spec

NUMBER = re.compile(r"^\s*[a-z_0-9]+:\s*-?[0-9.]+(e-?[0-9]+)?\s*(#.*)?$")


@pytest.mark.parametrize("group", ["hardware", "system", "model", "mapping"])
def test_group_has_presets(group):
    assert available(group)


@pytest.mark.parametrize("group, name", [(g, n) for g in ("hardware", "system", "model", "mapping")
                                         for n in available(g)])
def test_every_preset_loads_and_evaluates(group, name):
    cfg = compose_config([f"{group}={name}"])
    specs = specs_from_config(cfg)
    result = evaluate(single_design(*specs))
    assert torch.isfinite(result.step_time_s).all() and (result.step_time_s > 0).all()


@pytest.mark.parametrize("group", ["hardware", "system", "model"])
def test_every_number_in_a_preset_has_a_source_comment(group):
    for path in sorted((CONF_DIR / group).glob("*.yaml")):
        lines = path.read_text().splitlines()
        for i, line in enumerate(lines):
            if NUMBER.match(line) and not line.strip().startswith("name"):
                above = lines[i - 1].strip() if i else ""
                assert "#" in line or above.startswith("#"), f"{path.name}:{i + 1} has no source: {line.strip()}"


def test_unknown_field_and_wrong_type_are_named():
    with pytest.raises(ConfigError, match="hardware.hbm_tb"):
        to_spec("hardware", {"hbm_tb": 1.0})
    with pytest.raises(ConfigError, match="mapping.tp"):
        to_spec("mapping", {"tp": "eight"})
    with pytest.raises(ConfigError, match="model.num_layers"):
        load_preset("model", available("model")[0], num_layers=0)


@pytest.mark.parametrize("value", [2, -1, "yes", "on", 1.0])
def test_a_flag_takes_only_true_false_0_or_1(value):
    """OmegaConf alone reads any non-zero number or "yes" as true; a flag names its allowed values."""
    with pytest.raises(ConfigError, match=r"mapping.sequence_parallel = .* allowed true, false, 0 or 1"):
        to_spec("mapping", {"sequence_parallel": value})


@pytest.mark.parametrize("value, expected", [(1, True), (0, False), (True, True), ("false", False)])
def test_a_flag_reads_true_false_0_and_1(value, expected):
    assert to_spec("mapping", {"sequence_parallel": value, "tp": 2}).sequence_parallel is expected


# the system a space is meant for where the default one cannot run its chips: a TPU-like chip has no
# scale-out NIC (its ICI is one scale-up network, conf/chip/tpu-v4-n7.yaml): it runs on a TPU pod, with a
# model its 32 GiB holds (the phaze-tpuv4 study's Llama 2 7B)
SPACE_CONTEXT = {"tpu-chip": ["system=tpu-v4-pod", "system.num_devices=1024", "model=llama2-7b", "mapping=llama3-70b-1024"]}


@pytest.mark.parametrize("name", available("space"))
def test_every_space_config_samples_and_evaluates(name):
    from deepflow.config import space_from_config

    space = space_from_config(compose_config([f"space={name}", *SPACE_CONTEXT.get(name, [])]))
    u = space.sample(2000, seed=1)
    assert bool(space.known_feasible(u).all())
    result = space.evaluate(u)
    assert bool(torch.isfinite(result.step_time_s).all()) and bool(result.feasible.any())


def test_bad_space_parameter_is_a_config_error_naming_it():
    from deepflow.config import space_from_config

    cfg = compose_config(["space=mapping-only", "space.parameters.0.kind=exponential"])
    with pytest.raises(ConfigError, match="kind"):
        space_from_config(cfg)
