"""`deepflow evaluate` prints energy next to time; `output=json` carries the energy keys."""

from __future__ import annotations

import json
import subprocess
import sys


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "deepflow.cli", *args], capture_output=True, text=True,
                          timeout=300)


def test_evaluate_json_has_the_energy_keys():
    out = run("evaluate", "output=json", "hardware=h100-sxm-80gb", "system=dgx-h100-superpod",
              "model=llama3-70b", "mapping=llama3-70b-1024")
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    for key in ("energy_j", "energy_per_token_j", "avg_power_w", "energy_breakdown"):
        assert key in result
    parts = result["energy_breakdown"]
    assert set(parts) == {"compute", "sram", "hbm", "scale_up", "scale_out", "static"}
    assert abs(sum(parts.values()) - result["energy_j"]) < 1e-9 * result["energy_j"]
    tokens = 1024 * 8192  # the preset's global batch x llama3-70b's sequence
    assert abs(result["energy_per_token_j"] * tokens - result["energy_j"]) < 1e-9 * result["energy_j"]
    assert 100.0 < result["avg_power_w"] < 700.0 and result["feasible"] is True


def test_evaluate_table_prints_energy_and_the_power_verdict():
    out = run("evaluate")
    assert out.returncode == 0, out.stderr
    for needle in ("energy per step", "energy per token", "avg power", "of 400 W budget", "energy breakdown"):
        assert needle in out.stdout
    # (a budget below what the compute needs at peak also scales its energies down: energy.compute_partition_scale)
    tight = run("evaluate", "output=json", "hardware.tdp_w=20", "hardware.static_power_w=60")
    assert tight.returncode == 0, tight.stderr
    assert json.loads(tight.stdout)["reason"] == "power_over_budget"
    bad = run("evaluate", "hardware.logic_node=N6")
    assert bad.returncode == 2 and "hardware.logic_node" in bad.stderr and "N7" in bad.stderr


def test_a_power_limit_is_the_budget_the_table_names_and_slows_the_step():
    common = ("hardware=h100-sxm-80gb", "system=dgx-h100-superpod", "model=llama3-70b", "mapping=llama3-70b-1024")
    capped = run("evaluate", *common, "hardware.power_limit_w=500")
    assert capped.returncode == 0, capped.stderr
    assert "power_limit=500W" in capped.stdout and "of 500 W budget" in capped.stdout
    free, limited = (json.loads(run("evaluate", "output=json", *common, *extra).stdout)
                     for extra in ((), ("hardware.power_limit_w=500",)))
    assert limited["step_time_s"] > free["step_time_s"] and limited["avg_power_w"] <= 500.0
