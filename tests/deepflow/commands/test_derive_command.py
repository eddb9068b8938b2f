"""`deepflow derive` and `deepflow evaluate chip=...`, run as real subprocesses; the chip presets
(conf/chip/) are sourced and reproduce the chips the calibration test derives."""

from __future__ import annotations

import dataclasses
import json
import re
import subprocess
import sys

import pytest

from deepflow.config import chip_from_config, compose_config, space_from_config
from deepflow.presets import CONF_DIR, ConfigError, available, load_preset

NUMBER = re.compile(r"^\s*[a-z_0-9]+:\s*-?[0-9.]+(e-?[0-9]+)?\s*(#.*)?$")


def run(*args: str) -> subprocess.CompletedProcess:
    """The console command as a user runs it (a real subprocess: slow, so used sparingly)."""
    return subprocess.run([sys.executable, "-m", "deepflow.cli", *args], capture_output=True, text=True, timeout=300)


def call(capsys, *args: str) -> tuple[int, str, str]:
    """`deepflow <args>` in this process: (exit status, stdout, stderr)."""
    from deepflow.cli import main

    status = main(list(args))
    out = capsys.readouterr()
    return status, out.out, out.err


@pytest.fixture(scope="module")
def calibrated():
    from tests.analytical.chip.test_derive import A100, H100, TPU_V4

    return {"a100-n7": A100, "h100-n4": H100, "tpu-v4-n7": TPU_V4}


@pytest.mark.parametrize("name", ["a100-n7", "h100-n4", "tpu-v4-n7"])
def test_presets_are_the_calibrated_chips(name, calibrated):
    assert load_preset("chip", name) == calibrated[name]


def test_derived_tpu_v4_reproduces_the_datasheet_preset_within_10_percent(capsys):
    """`deepflow derive chip=tpu-v4-n7` against conf/hardware/tpu-v4.yaml itself: peak bf16, HBM bandwidth,
    power (the derived TDP and the power at peak) each within 10 %."""
    from tests.analytical.chip.test_derive import TPU_V4_PRESET

    preset = load_preset("hardware", "tpu-v4")
    assert (preset.peak_tflops_bf16, preset.hbm_bw_gb_per_s, preset.hbm_gib, preset.tdp_w) == TPU_V4_PRESET
    status, stdout, _ = call(capsys, "derive", "chip=tpu-v4-n7", "output=json")
    record = json.loads(stdout)
    assert status == 0 and record["feasible"] is True
    a = record["accelerator"]
    assert a["peak_tflops_bf16"] == pytest.approx(preset.peak_tflops_bf16, rel=0.10)
    assert a["hbm_bw_gb_per_s"] == pytest.approx(preset.hbm_bw_gb_per_s, rel=0.10)
    assert a["tdp_w"] == pytest.approx(preset.tdp_w, rel=0.10)
    assert sum(record["usage"]["power_w"].values()) == pytest.approx(preset.tdp_w, rel=0.10)
    assert a["hbm_gib"] == pytest.approx(preset.hbm_gib)


def test_every_number_in_a_chip_preset_has_a_source_comment():
    assert set(available("chip")) >= {"a100-n7", "h100-n4", "n5-hbm3e-700w"}
    for path in sorted((CONF_DIR / "chip").glob("*.yaml")):
        lines = path.read_text().splitlines()
        for i, line in enumerate(lines):
            if NUMBER.match(line):
                above = lines[i - 1].strip() if i else ""
                assert "#" in line or above.startswith("#"), f"{path.name}:{i + 1} has no source: {line.strip()}"


def test_derive_table_shows_what_each_part_uses():
    out = run("derive", "chip=h100-n4")
    assert out.returncode == 0, out.stderr
    for needle in ("feasible         yes", "operating point", "compute units", "HBM3", "area", "power at peak",
                   "shoreline", "memory_phy", "static"):
        assert needle in out.stdout, needle


def test_derive_json_calibrates_on_the_presets(capsys):
    for name, (tflops, hbm_gb_per_s) in {"a100-n7": (312.0, 2039.0), "h100-n4": (989.4, 3350.0)}.items():
        status, stdout, stderr = call(capsys, "derive", f"chip={name}", "output=json")
        assert status == 0, stderr
        record = json.loads(stdout)
        assert record["feasible"] is True and record["chip"]["name"] == name
        assert record["accelerator"]["peak_tflops_bf16"] == pytest.approx(tflops, rel=0.10)
        assert record["accelerator"]["hbm_bw_gb_per_s"] == pytest.approx(hbm_gb_per_s, rel=0.10)
        assert record["accelerator"]["hbm_gib"] == pytest.approx(80.0, rel=0.10)
        power = sum(record["usage"]["power_w"].values())
        assert power <= record["chip"]["power_budget_w"] * (1 + 1e-9)


def test_derive_with_budget_overrides_and_an_infeasible_answer(capsys):
    small = json.loads(call(capsys, "derive", "chip=n5-hbm3e-700w", "chip.power_budget_w=400", "output=json")[1])
    large = json.loads(call(capsys, "derive", "chip=n5-hbm3e-700w", "output=json")[1])
    assert small["accelerator"]["peak_tflops_bf16"] < large["accelerator"]["peak_tflops_bf16"]
    status, stdout, stderr = call(capsys, "derive", "chip.die_area_mm2=3", "output=json")
    assert status == 0, stderr
    record = json.loads(stdout)
    assert record["feasible"] is False and record["reason"] == "no_compute_unit"


@pytest.mark.parametrize("args, needle", [
    (("derive", "chip.node=N9"), "chip.node = 'N9' is invalid: allowed one of N16, N7"),
    (("derive", "chip.die_area_mm2=-4"), "chip.die_area_mm2"),
    (("derive", "chip.area_compute_fraction=0.7"), "area_compute_fraction+area_sram_fraction+area_other_fraction"),
    (("derive", "chip.die_mm2=4"), "die_mm2"),
    (("derive", "chip=nope"), "chip='nope' is not a known preset"),
    (("derive", "output=xml"), "output='xml' is invalid"),
    (("derive", "chip=null"), "derive needs a chip preset: allowed a100-n7"),
    (("evaluate", "chip=h100-n4", "chip.memory=HBM9"), "chip.memory"),
])
def test_bad_chip_input_is_one_line_naming_the_field(capsys, args, needle):
    status, _, stderr = call(capsys, *args)
    assert status == 2
    assert needle in stderr and "Traceback" not in stderr
    assert len(stderr.strip().splitlines()) == 1


def test_bad_input_from_the_console_command():
    out = run("derive", "chip.node=N9")
    assert out.returncode == 2 and "chip.node" in out.stderr and len(out.stderr.strip().splitlines()) == 1


def test_evaluate_with_a_derived_chip_prints_energy_next_to_time(capsys):
    status, stdout, stderr = call(capsys, "evaluate", "chip=h100-n4", "model=llama3-70b", "system=dgx-h100-superpod",
                                  "mapping=llama3-70b-1024")
    assert status == 0, stderr
    assert "x h100-n4" in stdout and "step time" in stdout and "energy per step" in stdout
    result = json.loads(call(capsys, "evaluate", "chip=h100-n4", "output=json")[1])
    assert result["step_time_s"] > 0 and result["energy_j"] > 0
    infeasible = json.loads(call(capsys, "evaluate", "chip=h100-n4", "chip.power_budget_w=5", "output=json")[1])
    assert infeasible["feasible"] is False and infeasible["reason"] == "compute_power_too_low"


def test_default_config_has_no_chip_and_the_joint_space_is_large():
    assert chip_from_config(compose_config([])) is None
    space = space_from_config(compose_config(["space=joint"]))
    assert space.chip is not None and space.chip.name == "n5-hbm3e-700w"
    assert space.discrete_size >= 1e12
    override = space_from_config(compose_config(["space=joint", "chip=a100-n7"]))
    assert override.chip.name == "a100-n7"
    assert dataclasses.asdict(override.chip)["node"] == "N7"


def test_a_chip_space_without_a_chip_is_a_config_error(tmp_path):
    from omegaconf import OmegaConf

    from omegaconf import open_dict

    cfg = compose_config(["space=joint"])
    with open_dict(cfg):
        del cfg.space["chip"]
    with pytest.raises(ConfigError, match="chip=<preset>"):
        space_from_config(cfg)
    assert OmegaConf.select(cfg, "chip") is None


def test_best_mapping_on_a_derived_chip_agrees_with_evaluate(capsys):
    """`best-mapping chip=...` searches around the derived chip's own tensors (operating-point
    energies, its own NIC), so its best step time is what `evaluate chip=...` gives that mapping."""
    common = ("chip=h100-n4", "system=dgx-h100-superpod", "model=llama2-7b", "system.num_devices=64",
              "mapping.global_batch_size=256")
    status, out, _ = call(capsys, "best-mapping", *common, "top_k=2", "output=json")
    assert status == 0
    found = json.loads(out)
    assert found["feasible"] > 0 and len(found["top"]) == 2
    best = found["top"][0]
    assert best["step_time_s"] <= found["top"][1]["step_time_s"]
    fields = [f"mapping.{k}={str(v).lower() if isinstance(v, bool) else v}"
              for k, v in best["mapping"].items() if k != "name" and v is not None]
    status, out, _ = call(capsys, "evaluate", *common, *fields, "output=json")
    assert status == 0
    again = json.loads(out)
    assert again["feasible"]
    assert again["step_time_s"] == pytest.approx(best["step_time_s"], rel=1e-12)


def test_best_mapping_on_a_chip_that_cannot_be_built_is_an_answer(capsys):
    status, out, _ = call(capsys, "best-mapping", "chip=h100-n4", "chip.die_area_mm2=5")
    assert status == 1
    assert "cannot be built" in out and "compute unit" in out
