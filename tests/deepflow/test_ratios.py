"""`deepflow validate` on published fused-job speedups (HFTA): the ratio of two evaluations per row."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from analytical import evaluate, single_design
from deepflow.presets import ConfigError
from deepflow.ratios import _specs, hfta_report, read_hfta

CSV = "experiments/validation/hfta_speedups.csv"


def test_a_speedup_is_b_times_one_jobs_step_over_the_fused_step():
    frame = read_hfta(CSV)
    row = frame.iloc[1]  # V100, AMP fused, fp32 baseline
    fused = evaluate(single_design(*_specs(row, str(row["precision"]), int(row["fused_jobs"]))))
    alone = evaluate(single_design(*_specs(row, "fp32", 1)))
    expected = int(row["fused_jobs"]) * float(alone.step_time_s[0]) / float(fused.step_time_s[0])
    result = hfta_report(CSV)
    assert result["rows"][1]["predicted_speedup"] == pytest.approx(expected)
    assert result["summary"]["n"] == len(frame) == len(result["rows"])
    errors = [r["predicted_speedup"] / r["published_speedup"] - 1.0 for r in result["rows"]]
    assert result["summary"]["mape"] == pytest.approx(sum(map(abs, errors)) / len(errors))


def test_validate_prints_the_summary_as_its_last_json_line():
    out = subprocess.run([sys.executable, "-m", "deepflow.cli", "validate", f"data={CSV}", "output=json"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    summary = json.loads(out.stdout.strip().splitlines()[-1])["summary"]
    for key in ("n", "mape", "max_abs_error", "max_jobs_n", "max_jobs_within_one"):
        assert key in summary


def test_a_row_no_preset_accepts_is_named(tmp_path):
    bad = tmp_path / "bad.csv"
    text = open(CSV).read().replace("v100-sxm2-32gb", "v99", 1)
    bad.write_text(text)
    with pytest.raises(ConfigError, match="hfta-pointnet-cls-v100-fp32"):
        read_hfta(str(bad))


PS_CSV = "experiments/validation/ps_vs_allreduce.csv"


def test_a_ps_ratio_is_all_reduce_time_over_parameter_server_time():
    from deepflow.ratios import _ps_specs, ps_report, read_ps

    frame = read_ps(PS_CSV)
    row = frame.iloc[-1]
    ar, ps = (float(evaluate(single_design(*_ps_specs(row, mode))).step_time_s[0]) for mode in ("allreduce", "ps_sync"))
    result = ps_report(PS_CSV)
    assert result["rows"][-1]["predicted_ratio"] == pytest.approx(ar / ps)
    assert result["rows"][-1]["winner_right"] == ((ar / ps > 1.0) == (float(row["published_ratio"]) > 1.0))
    assert result["summary"]["winner_right"] == sum(r["winner_right"] for r in result["rows"])
    out = subprocess.run([sys.executable, "-m", "deepflow.cli", "validate", f"data={PS_CSV}", "output=json"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout.strip().splitlines()[-1])["summary"]["n"] == len(frame)
