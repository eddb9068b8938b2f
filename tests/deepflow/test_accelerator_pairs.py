"""experiments/validation/accelerator_pairs.py: the same workload on two accelerators in one release, paired."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "experiments" / "validation" / "accelerator_pairs.py"


@pytest.fixture(scope="module")
def probe(load_script):
    return load_script(SCRIPT)


def _frame(rows):
    columns = ("id", "model", "precision", "seq_length", "gpu", "num_gpus", "tp", "pp", "global_batch_size")
    return pd.DataFrame([dict(zip(columns, r)) for r in rows])


def test_rows_pair_within_a_release_and_workload_smaller_part_first(probe):
    frame = _frame([
        ("mbridge-26.06-gb300-a", "llama3-70b", "fp8", 8192, "gb300", 64, 1, 1, 128),
        ("mbridge-26.06-h100-a", "llama3-70b", "fp8", 8192, "h100-sxm-80gb", 64, 4, 4, 128),
        ("mbridge-26.06-gb200-a", "llama3-70b", "fp8", 8192, "gb200", 64, 1, 1, 128),
        ("mbridge-26.06-gb200-b", "llama3-70b", "fp8", 8192, "gb200", 64, 2, 1, 128),  # the gb200's second row: left
        ("mbridge-26.04-b200-a", "llama3-70b", "fp8", 8192, "b200", 64, 1, 1, 128),  # another release: no partner
        ("mbridge-26.06-b200-c", "llama3-70b", "bf16", 8192, "b200", 64, 1, 1, 128),  # another precision: none
    ])
    found = probe.accelerator_pairs(frame)
    named = {(frame.at[i, "gpu"], frame.at[j, "gpu"], same) for i, j, same in found}
    assert named == {("h100-sxm-80gb", "gb200", False), ("h100-sxm-80gb", "gb300", False), ("gb200", "gb300", True)}


def test_accelerators_rank_by_sixteen_bit_peak_then_tdp(probe):
    order = sorted(["gb300", "h100-sxm-80gb", "b300", "gb200", "b200"], key=probe.accelerator_rank)
    assert order == ["h100-sxm-80gb", "b200", "b300", "gb200", "gb300"]


def test_the_probe_prints_every_pair_and_a_summary_per_pair_of_accelerators():
    out = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True, cwd=ROOT, check=True).stdout
    summary = out.split("\n\n")[-1]
    assert "gb300 / gb200:" in summary and "model / measured" in summary
    pairs = [line for line in out.splitlines() if line.split()[3:4] in (["same"], ["other"])]
    assert len(pairs) == int(summary.split(" pairs;")[0])


def test_a_missing_csv_is_one_line_not_a_traceback():
    done = subprocess.run([sys.executable, str(SCRIPT), "data=/nonexistent.csv"], capture_output=True, text=True,
                          cwd=ROOT)
    assert done.returncode == 1
    assert "no such file" in done.stderr and "Traceback" not in done.stderr
