"""No benchmark can rot unseen: every script of experiments/benchmarks/ and experiments/validation/ runs at a tiny
size (`python <script> <tiny flags>` from the repository root, as its docstring runs it) and ends with ONE JSON line
holding a few of the figures its docstring promises; or another named test file runs it so. A script in neither
table fails `test_every_script_has_a_smoke_test`."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FOLDERS = ("experiments/benchmarks", "experiments/validation")
B, V = FOLDERS


def positive(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0


def fraction(value) -> bool:
    return isinstance(value, (int, float)) and 0.0 <= value <= 1.0 + 1e-9


# script -> (tiny arguments, {key of the last line's dict: what its value must satisfy})
SMOKE = {
    f"{B}/bench_analytical.py": (
        ["--batch", "1000", "--repeats", "3", "--batch-repeats", "1", "--search-repeats", "1"],
        {"batch_size": lambda v: v == 1000, "single_design_ms": positive, "batch_designs_per_s": positive,
         "mappings_feasible": positive, "best_mapping": lambda v: 0 < v["mfu"] <= 1 and positive(v["step_time_s"])}),
    f"{B}/bench_bo.py": (
        ["--seeds", "1", "--budget", "14", "--spaces", "mapping", "--no-overhead", "--pareto-space", "mapping",
         "--pareto-seeds", "1", "--pareto-budget", "50", "--pareto-strategies", "random", "evolution"],
        {"mapping_bo_budget": lambda v: v == 14, "mapping_num_feasible": positive,
         "bo_iteration_overhead_s": positive,  # BO proposed past its 12 initial points
         "pareto_true_front_size": lambda v: v == 1,  # a fixed chip: the fastest mapping spends the least energy
         "random_hv_fraction_at_50": fraction, "evolution_hv_fraction_at_50": fraction}),
    f"{B}/bench_device.py": (
        ["--device", "cpu", "--sizes", "256,512", "--repeats", "1", "--big-chunk", "256", "--error-size", "512"],
        {"device": lambda v: v == "cpu", "speed": lambda v: len(v) == 6 and all(positive(r["resident_s"]) for r in v),
         "error": lambda v: [e["dtype"] for e in v] == ["float64", "float32"] and v[1]["step_time_s_max_rel"] < 1e-3,
         "best_resident_designs_per_s": positive}),
    f"{B}/bench_energy.py": (
        [],
        {"rows": lambda v: len(v) >= 10,
         "summary": lambda v: v["compared"] >= 3 and v["bounds_respected"] is True and v["held_out"] >= 1}),
    f"{B}/bench_joint.py": (
        ["--batch", "2000", "--grad-batch", "50", "--repeats", "1"],
        {"batch": lambda v: v == 2000, "finite": lambda v: v is True, "joint_designs_per_s": positive,
         "grad_eval_ms": positive, "derive_share": fraction}),
    f"{B}/bench_preset_vs_derived.py": (
        [],
        {"rows": lambda v: len(v) == 3 and all(r["preset"]["feasible"] for r in v),
         "energy_per_token_ratios": lambda v: len(v) == 3 and all(positive(r) for r in v.values())}),
    # the full run starts Ray four times (about a minute even at 2,048 designs); its large run alone starts it once
    f"{B}/bench_scale.py": (
        ["--large-only", "--large", "1024", "--block-size", "512"],
        {"large_designs": lambda v: v == 1024, "large_lost": lambda v: v == 0, "large_duplicated": lambda v: v == 0,
         "peak_rss_gib": positive}),
    f"{B}/bench_surrogates.py": (
        ["--models", "ensemble", "classifier", "svgp", "--sizes", "200", "--n-test", "100", "--query-batch", "1000",
         "--query-repeats", "3", "--budget-s", "1"],
        {"results": lambda v: set(v) == {"ensemble@200", "classifier@200", "svgp@200"}
         and len(v["ensemble@200"]["mape_random"]) == 2,
         "targets": lambda v: v == ["log_step_time_s", "log_energy_j"], "feasible_fraction": fraction}),
    f"{B}/bench_window_attention.py": (
        ["--device", "cpu", "--hardware", "h200-sxm-141gb", "--seq", "256", "--repeats", "1"],
        {"device": lambda v: v == "cpu",
         "rows": lambda v: [r["seq"] for r in v] == [256, 256]
         and all(0 < x <= 1 for r in v for x in r["predicted_ratio"])}),  # a window of 128 keys costs no more
    f"{B}/gp_features.py": (  # the flat experiment (no inner search): 40 + 20 designs, two GP fits, a few seconds
        ["--experiments", "llama3-70b-n5-codesign", "--train", "40", "--test", "20"],
        {"train": lambda v: v == 40,
         "llama3-70b-n5-codesign": lambda v: v["train"] >= 4 and v["test"] >= 2
         and all(0 <= v[g]["median_error"] < 1 and -1 <= v[g]["spearman"] <= 1 and v[g]["first_ranked_gap"] >= 0
                 for g in ("point", "point_and_chip"))}),
    f"{B}/landscape.py": (  # the flat experiment has no inner search: 5 slices of 5 designs in about a second
        ["--experiments", "llama3-70b-n5-codesign", "--points", "5", "--width", "0.02"],
        {"points": lambda v: v == 5,
         # the record is polished (best_known.py --polish): no design on a slice through it is faster
         "llama3-70b-n5-codesign/area_compute_fraction": lambda v: len(v["step_time_s"]) == 5
         and min(x for x in v["step_time_s"] if x is not None) == v["step_time_s"][2] and v["largest_jump"] >= 0,
         "llama3-70b-n5-codesign/power_memory_fraction": lambda v: all(x is None or x > 0 for x in v["step_time_s"])}),
    f"{B}/pareto_space.py": (
        ["--tiny"],
        {"grid": lambda v: v == 2880, "feasible": positive,
         "front_size": lambda v: v >= 2,  # power buys time at the cost of energy: a front of several designs
         "front_step_time_s": lambda v: 0 < v[0] < v[1], "front_energy_j": lambda v: 0 < v[0] < v[1]}),
    f"{B}/power_measurements.py": (
        [],
        {"rows": positive, "by_kind": lambda v: v["measurement"] >= 10}),
    f"{V}/accelerator_pairs.py": (
        [],
        {"pairs": positive,
         "by_accelerators": lambda v: "gb300 / gb200" in v and all(positive(s["model_over_measured_mean"])
                                                                   for s in v.values())}),
    f"{V}/leave_one_source_out.py": (
        ["--fields", "gemm_peak_fraction"],
        {"leave_one_source_out": lambda v: len(v) == 12 and all(fraction(s["mape"]) for s in v.values()),
         "leave_one_generation_out": lambda v: any(s.get("held_out") for s in v.values())}),
    f"{V}/hfta_host_probe.py": (
        [],
        {"rows": lambda v: len(v) == 4 and all(r["implied_host_consistent"] for r in v),
         "implied_host_us_per_kernel_min": positive}),
    f"{V}/hfta_input_probe.py": (
        ["--points", "1000", "--repeats", "2"],
        {"parsers": lambda v: set(v) == {"c_loadtxt_1000", "python_parser_1000"}
         and all(p["loader_ms_per_step"] > 0 and len(p["rows"]) == 4 for p in v.values())
         # the slower (Python-level) parser's longer loader can only raise a fused speedup, never lower it
         and all(slow["predicted_speedup"] >= fast["predicted_speedup"] > 0 for fast, slow
                 in zip(v["c_loadtxt_1000"]["rows"], v["python_parser_1000"]["rows"])),
         "device_only_mape": fraction}),
    f"{V}/pipeline_split_probe.py": (
        [],
        {"rows": positive, "families": lambda v: set(v) == {"deepseek", "embedding"}}),
    f"{V}/precision_speedups.py": (
        [],
        {"pairs": positive, "model_over_measured_range": lambda v: 0 < v[0] <= v[1]}),
    f"{V}/release_spread.py": (
        [],
        {"pairs": positive, "measured_ratio_median": lambda v: v >= 1.0, "residual_max": lambda v: v >= 1.0}),
    f"{V}/sustained_clock_probe.py": (
        [],
        {"rows": lambda v: len(v) == 6 and sum(r["fitted"] for r in v) == 1
         and all(abs(r["clock_error"]) < 0.01 for r in v if r["fitted"])  # e_nom puts its own reading on the curve
         and all(r["predicted_power_w"] <= 700.0 + 1e-6 for r in v),  # nothing runs above the limit
         "h100_gemm_at_datasheet_clock_w": lambda v: v > 700.0,  # the datasheet peak does not fit the limit
         "max_abs_clock_error": fraction}),
    f"{V}/unstated_stack_probe.py": (
        [],
        {"rows": positive, "stack_columns": lambda v: len(v) > 0, "typed": lambda v: fraction(v["mape"]),
         "unstated": lambda v: fraction(v["mape"])}),
}

# script -> the test file that runs it as a subprocess and parses its last JSON line
COVERED_ELSEWHERE = {
    f"{B}/bench_codesign.py": "tests/experiments/test_bench_codesign.py",
    f"{B}/best_known.py": "tests/experiments/test_bench_codesign.py",  # bench_codesign's yardstick, written with it
    f"{B}/bench_kernels.py": "tests/analytical/step/test_kernel_benchmark.py",
    f"{B}/bench_published_gemms.py": "tests/analytical/step/test_published_gemms.py",
}


def scripts() -> set[str]:
    return {p.relative_to(ROOT).as_posix() for folder in FOLDERS for p in (ROOT / folder).glob("*.py")}


def test_every_script_has_a_smoke_test():
    found = scripts()
    assert not found - set(SMOKE) - set(COVERED_ELSEWHERE), "scripts with no smoke test: add each to SMOKE"
    assert not (set(SMOKE) | set(COVERED_ELSEWHERE)) - found, "entries of scripts that are gone"
    assert not set(SMOKE) & set(COVERED_ELSEWHERE)


@pytest.mark.parametrize("script, test_file", sorted(COVERED_ELSEWHERE.items()),
                         ids=[Path(s).stem for s in sorted(COVERED_ELSEWHERE)])
def test_the_other_test_file_runs_its_script(script, test_file):
    path = ROOT / test_file
    if not path.exists():
        pytest.skip(f"{test_file} is not written yet: {script} has no smoke test until it is")
    text = path.read_text()
    assert Path(script).stem in text and "subprocess" in text and "json.loads" in text


@pytest.mark.parametrize("script", sorted(SMOKE), ids=[Path(s).stem for s in sorted(SMOKE)])
def test_the_script_runs_tiny_and_ends_with_its_json_line(script):
    args, checks = SMOKE[script]
    run = subprocess.run([sys.executable, script, *args], capture_output=True, text=True, timeout=300, cwd=ROOT,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert run.returncode == 0, run.stderr[-3000:]
    lines = [line for line in run.stdout.splitlines() if line.strip()]
    assert lines, f"no output; stderr: {run.stderr[-2000:]}"
    result = json.loads(lines[-1])
    assert isinstance(result, dict)
    for key, ok in checks.items():
        assert key in result, f"{key} missing from {sorted(result)}"
        assert ok(result[key]), f"{key} = {json.dumps(result[key])[:500]}"
