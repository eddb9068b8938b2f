"""The co-design benchmark and its yardstick: `bench_codesign.py` and `best_known.py` run at a tiny size and end
with their JSON line, and every recorded best-known design still evaluates to its recorded value (a change of
the model or of an experiment that moves it fails here until `best_known.py --write` is run again)."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "experiments" / "benchmarks"
sys.path.insert(0, str(BENCH))
from best_known import BEST_KNOWN, EXPERIMENTS, compose, polish  # noqa: E402


def last_json(args: list[str]) -> dict:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    line = [x for x in done.stdout.splitlines() if x.strip()][-1]
    return json.loads(line)


def test_bench_codesign_runs_every_strategy_and_measures_bo():
    e = "mixtral-8x7b-n3-codesign"
    out = last_json([str(BENCH / "bench_codesign.py"), "--experiments", e, "--budget", "12", "--seeds", "1",
                     "--overrides", "strategy.n_init=4"])
    record = json.loads(BEST_KNOWN.read_text())[e]["value"]
    assert out["overrides"] == ["strategy.n_init=4"] and out[f"{e}_best_known_s"] == record
    for s in ("bo", "sobol", "random", "evolution"):
        best = out[f"{e}_{s}_median_best_at_12"]
        assert best >= record * (1 - 1e-9)  # nothing beats the record at 12 evaluations
        assert math.isclose(out[f"{e}_{s}_median_gap_at_12"], best / record - 1)
    assert 0.0 <= out[f"{e}_bo_feasible_after_init"] <= 1.0  # 8 proposals after 4 Sobol points
    assert 0.0 < out[f"{e}_bo_propose_median_s"] <= out[f"{e}_bo_propose_max_s"]
    assert all(0 <= out[f"{e}_bo_beats_{s}_seeds"] <= 1 for s in ("sobol", "random", "evolution"))


def test_best_known_runs_a_search_and_reports_the_record():
    e = "llama3-70b-n5-codesign"
    out = last_json([str(BENCH / "best_known.py"), "--experiments", e, "--evaluations", "16", "--runs", "2",
                     "--strategy", "random"])
    assert out["evaluations"] == 16 and out[f"{e}_recorded"] == json.loads(BEST_KNOWN.read_text())[e]["value"]
    assert out[f"{e}_found"] is None or out[f"{e}_found"] > out[f"{e}_recorded"]


def test_polish_walks_back_from_a_moved_record_and_holds_the_record_itself():
    """The flat experiment (no inner search: ~1 s): its record is a fixed point of the coordinate search
    (it was polished), and a copy with the compute-area share moved 0.05 comes back to at most its value."""
    e = "llama3-70b-n5-codesign"
    entry = json.loads(BEST_KNOWN.read_text())[e]
    job = compose(e)
    u0 = torch.tensor(entry["u"], dtype=torch.float64)
    u, y, spent = polish(job, u0)
    assert torch.equal(u, u0) and math.isclose(math.exp(y), entry["value"], rel_tol=1e-9) and spent > 100
    moved = u0.clone()
    i = job.space.names.index("area_compute_fraction")
    moved[i] = moved[i] - 0.05
    Y0, _, _, _ = job.objective.evaluate(job.space, moved[None])
    u, y, _ = polish(job, moved, widths=((0.1, 41),))
    Y, feasible, _, _ = job.objective.evaluate(job.space, u[None])
    assert bool(feasible[0]) and math.isclose(float(Y[0, 0]), y, rel_tol=1e-12)
    assert y < float(Y0[0, 0]) and math.exp(y) >= entry["value"] * (1 - 1e-9)  # better than the moved copy, not the record


def test_best_known_polish_reports_without_writing():
    e = "llama3-70b-n5-codesign"
    before = BEST_KNOWN.read_text()
    out = last_json([str(BENCH / "best_known.py"), "--experiments", e, "--polish"])
    assert out["polish"] and out[f"{e}_found"] == out[f"{e}_recorded"] and out[f"{e}_evaluations"] > 100
    assert BEST_KNOWN.read_text() == before


@pytest.mark.parametrize("experiment", EXPERIMENTS)
def test_best_known_design_still_evaluates_to_its_record(experiment):
    entry = json.loads(BEST_KNOWN.read_text())[experiment]
    job = compose(experiment)
    u = torch.tensor([entry["u"]], dtype=torch.float64)
    Y, feasible, _, _ = job.objective.evaluate(job.space, u)
    assert bool(feasible[0]), f"{experiment}'s best-known design is no longer feasible: rerun best_known.py --write"
    assert math.isclose(math.exp(float(Y[0, 0])), entry["value"], rel_tol=1e-9), (
        f"{experiment}'s best-known design now evaluates to {math.exp(float(Y[0, 0]))} s, recorded {entry['value']}: "
        f"the model or the experiment changed; rerun experiments/benchmarks/best_known.py --write")
    assert entry["command"].startswith("python experiments/benchmarks/")


def test_bench_codesign_warm_starts_bo_on_samples_apart_from_the_budget():
    e = "llama3-70b-n5-codesign"
    out = last_json([str(BENCH / "bench_codesign.py"), "--experiments", e, "--budget", "8", "--seeds", "1",
                     "--strategies", "bo", "--overrides", "strategy.n_init=4", "warm_start.samples=32",
                     "warm_start.model=MLPEnsemble", "+warm_start.params={n_members:2,hidden:[8],max_epochs:2}"])
    assert out[f"{e}_bo_warm_samples"] == 32 and out[f"{e}_bo_warm_median_s"] > 0.0
    assert out[f"{e}_bo_median_best_at_8"] is None or out[f"{e}_bo_median_best_at_8"] >= out[f"{e}_best_known_s"]
