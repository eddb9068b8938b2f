"""The `deepflow` command line, run as a real subprocess (console script), as a user would."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "deepflow.cli", *args], capture_output=True, text=True,
                          timeout=300)


def test_evaluate_default_prints_breakdowns():
    out = run("evaluate")
    assert out.returncode == 0, out.stderr
    for needle in ("step time", "time breakdown", "pipeline_bubble", "memory per device", "MFU"):
        assert needle in out.stdout


def test_evaluate_json_has_the_promised_keys():
    out = run("evaluate", "output=json")
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    for key in ("step_time_s", "feasible", "reason", "memory_per_device_bytes", "mfu", "tokens_per_s", "breakdown"):
        assert key in result
    assert result["feasible"] is True
    assert abs(sum(result["breakdown"].values()) - result["step_time_s"]) < 1e-9 * result["step_time_s"]


def test_evaluate_infeasible_design_is_an_answer_not_an_error():
    out = run("evaluate", "output=json", "mapping.tp=8", "mapping.pp=1", "mapping.dp=1", "system.num_devices=8")
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result["feasible"] is False and result["reason"] == "out_of_memory"


def test_evaluate_fused_cnn_jobs_compares_them_with_serial_ones():
    args = ("model=resnet18-cifar10", "hardware=a100-sxm-40gb", "mapping=single-job", "system.num_devices=1",
            "mapping.fused_jobs=8", "mapping.precision=fp16")
    out = run("evaluate", *args, "output=json")
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    fused = result["fused"]
    assert result["feasible"] is True and fused["fused_jobs"] == 8
    assert fused["fused_step_time_s"] == pytest.approx(result["step_time_s"])
    assert 1.0 < fused["speedup_vs_serial"] <= 8.0 and fused["largest_fused_jobs"] >= 8
    table = run("evaluate", *args)
    assert "fused jobs (HFTA)" in table.stdout and "largest fused_jobs that fits" in table.stdout
    assert "images per s" in table.stdout and "energy per image" in table.stdout


def test_an_fp32_vgg_says_why_its_mfu_passes_100_percent():
    """fp32 3x3 convolutions run as Winograd (fewer multiplies) while MFU counts the direct FLOPs."""
    args = ("model=vgg16", "hardware=v100-sxm2-32gb", "system=dgx-v100-cluster", "system.num_devices=8",
            "mapping=data-parallel", "mapping.micro_batch_size=64", "mapping.global_batch_size=512")
    fp32, fp16 = (run("evaluate", *args, f"mapping.precision={p}") for p in ("fp32", "fp16"))
    assert fp32.returncode == 0 and fp16.returncode == 0, fp32.stderr + fp16.stderr
    assert "of the direct algorithms' FLOPs" in fp32.stdout
    assert "of the direct algorithms' FLOPs" not in fp16.stdout


@pytest.mark.parametrize("args, needle", [
    (("evaluate", "model=gpt-nonexistent"), "model='gpt-nonexistent' is not a known preset"),
    (("evaluate", "hardware=a100"), "hardware='a100' is not a known preset"),
    (("evaluate", "model.hidden_size=-4"), "model.hidden_size"),
    (("evaluate", "mapping.precision=fp4"), "mapping.precision"),
    (("evaluate", "mapping.optimizer_state_dtype=fp64"), "mapping.optimizer_state_dtype = 'fp64' is invalid: allowed "
                                                          "one of fp32, bf16, fp16, fp8"),
    (("evaluate", "mapping.master_params=none", "mapping.precision=fp32"), "mapping.master_params = 'none'"),
    (("evaluate", "mapping.tpp=2"), "tpp"),
    (("evaluate", "mapping.overlap_tp_comm=3"), "mapping.overlap_tp_comm = 3 is invalid: allowed true, false, 0, 1 "
                                                "or null (the stack's default)"),
    (("best-mapping", "mapping.overlap_dp_comm=maybe"), "mapping.overlap_dp_comm"),
    (("evaluate", "mapping.tp=two"), "mapping.tp"),
    (("evaluate", "output=xml"), "output='xml' is invalid"),
    (("evaluate", "tp"), "not an override"),
    (("frobnicate",), "unknown command"),
    (("validate", "data=/nonexistent.csv"), "no such file"),
    (("best-mapping", "top_k=0"), "top_k"),
    (("sample", "space=jointt"), "space='jointt' is not a known space: allowed chip-fused-jobs, chip-mapping, chip-only, chip-real-bounds, chip-single-device, fused-jobs, hardware-mapping, joint"),
    (("optimize", "-m", "seed=0,1", "hydra/launcher=slurmm"), "hydra/launcher='slurmm' is not a known launcher: allowed basic,"),
    (("sample", "hydra/sweeper=optunaa"), "hydra/sweeper='optunaa' is not a known option: allowed basic"),
    (("optimize", "--cfgg"), "unrecognized arguments: --cfgg"),
    (("sample", "-m", "seed=0,1", "out=same.parquet"), "is invalid for a multirun: every job would write"),
    (("sample", "executor=dask"), "executor='dask' is invalid: allowed one of local, ray"),
    (("sample", "ray.address=head:6379", "executor=ray"), "ray.address='head:6379' is invalid"),
])
def test_bad_input_is_one_line_naming_the_field(args, needle):
    out = run(*args)
    assert out.returncode == 2
    assert needle in out.stderr
    assert "Traceback" not in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1


def test_tp_not_dividing_heads_is_reported_as_infeasible():
    out = run("evaluate", "output=json", "mapping.tp=7", "mapping.pp=1", "mapping.dp=1", "system.num_devices=7")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["reason"] == "tp_not_dividing_heads"


def test_best_mapping_json_is_sorted_and_feasible():
    out = run("best-mapping", "model=gpt-1.7b", "system.num_devices=16", "mapping.global_batch_size=64",
              "top_k=5", "output=json")
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    times = [row["step_time_s"] for row in result["top"]]
    assert 1 <= len(times) <= 5 and times == sorted(times)
    assert all(row["feasible"] for row in result["top"])
    assert result["enumerated"] >= result["feasible"] >= len(times)


def test_validate_json_schema_and_table(tmp_path):
    out = run("validate", "output=json")
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert {"n", "mape", "max_abs_error"} <= set(result["summary"])
    assert {"id", "predicted_s", "measured_s", "error"} <= set(result["rows"][0])
    table = run("validate")
    assert table.returncode == 0 and "mean |error|" in table.stdout


def test_validate_breakdown_names_the_largest_parts_of_each_row():
    out = run("validate", "breakdown=true", "output=json")
    assert out.returncode == 0, out.stderr
    rows = json.loads(out.stdout)["rows"]
    assert all(sum(r["time_breakdown_s"].values()) == pytest.approx(r["predicted_s"]) for r in rows)
    table = run("validate", "breakdown=true")
    assert table.returncode == 0 and "largest parts of the predicted time" in table.stdout
    first = rows[0]
    largest = next(iter(first["time_breakdown_s"]))  # the row's largest part, by name and share
    share = first["time_breakdown_s"][largest] / first["predicted_s"]
    assert f"{largest} {share:.0%}" in table.stdout
    bad = run("validate", "breakdown=yes")
    assert bad.returncode == 2 and "breakdown='yes' is invalid: allowed True, False" in bad.stderr


def test_any_spec_field_can_be_overridden_even_if_the_preset_omits_it():
    # conf/mapping/data-parallel.yaml does not list tp or ep: the override still sets them
    out = run("evaluate", "output=json", "model=mixtral-8x7b", "mapping=data-parallel", "system.num_devices=64",
              "mapping.tp=2", "mapping.ep=8", "mapping.global_batch_size=256", "mapping.micro_batch_size=1")
    assert out.returncode == 0, out.stderr
    assert "tp=2" in json.loads(out.stdout)["design"] and "ep=8" in json.loads(out.stdout)["design"]


def test_validate_groups_the_errors_by_row_properties():
    out = run("validate", "data=experiments/validation/modern_runs.csv", "group_by=[generation,moe]", "output=json")
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    by = result["by"]
    assert {"hopper / dense", "hopper / MoE", "blackwell / MoE"} <= set(by)
    assert sum(g["n"] for g in by.values()) == result["summary"]["n"]
    # the groups' errors are the rows' errors: their row-weighted mean is the overall mean
    mean = sum(g["n"] * g["mape"] for g in by.values()) / result["summary"]["n"]
    assert mean == pytest.approx(result["summary"]["mape"], rel=1e-12)
    assert max(g["max_abs_error"] for g in by.values()) == pytest.approx(result["summary"]["max_abs_error"])
    table = run("validate", "group_by=gpu")
    assert table.returncode == 0 and "error by group" in table.stdout and "a100-sxm-80gb" in table.stdout
    bad = run("validate", "group_by=vendor")
    assert bad.returncode == 2 and "group_by: 'vendor' is invalid: allowed model, gpu" in bad.stderr


def test_the_issues_example_reads_its_unset_overlaps_as_the_stack_default():
    """NeMo's GPT-3 175B FP8 recipe on 512 H100 (issue 10's example): with the distributed optimizer the unset
    overlaps are the NeMo / Megatron-Bridge stack's, shown on the design line, and the step is the one with
    the three flags set; setting one off is the design."""
    example = ("model=gpt3-175b", "hardware=h100-sxm-80gb", "system=dgx-h100-superpod", "system.num_devices=512",
               "mapping.tp=4", "mapping.pp=8", "mapping.dp=16", "mapping.vp=6", "mapping.micro_batch_size=2",
               "mapping.global_batch_size=2048", "mapping.precision=fp8", "mapping.recompute=none",
               "mapping.sequence_parallel=1", "mapping.distributed_optimizer=1", "mapping.flash_attention=1",
               "model.seq_length=2048")
    text = run("evaluate", *example)
    assert text.returncode == 0, text.stderr
    assert "overlap=dp,tp,pp (stack default)" in text.stdout.splitlines()[0]
    times = []
    for extra in ((), ("mapping.overlap_dp_comm=true", "mapping.overlap_tp_comm=true", "mapping.overlap_pp_comm=true"),
                  ("mapping.overlap_tp_comm=false",)):
        out = run("evaluate", *example, *extra, "output=json")
        assert out.returncode == 0, out.stderr
        times.append(json.loads(out.stdout)["step_time_s"])
    assert times[0] == times[1] < times[2]


def test_best_mapping_prices_each_candidate_as_evaluate_reads_it():
    """A mapping that leaves its overlaps unset is searched with each candidate's stack default (the distributed
    optimizer's candidates overlapped), so `evaluate` of the winner, overlaps again unset, gives the step time
    the search reported; a stated flag is searched as stated."""
    base = ("model=gpt-1.7b", "system.num_devices=16", "mapping.global_batch_size=64")
    fields = ("tp", "pp", "dp", "cp", "vp", "micro_batch_size", "recompute", "zero_stage", "distributed_optimizer")
    for stated in ((), ("mapping.overlap_dp_comm=false",)):
        out = run("best-mapping", *base, *stated, "top_k=1", "output=json")
        assert out.returncode == 0, out.stderr
        best = json.loads(out.stdout)["top"][0]
        again = run("evaluate", *base, *stated, *(f"mapping.{k}={best['mapping'][k]}" for k in fields),
                    f"mapping.sequence_parallel={best['mapping']['sequence_parallel']}", "output=json")
        assert again.returncode == 0, again.stderr
        assert json.loads(again.stdout)["step_time_s"] == pytest.approx(best["step_time_s"], rel=1e-12)
        if best["mapping"]["distributed_optimizer"]:
            assert best["mapping"]["overlap_dp_comm"] is (not stated)
