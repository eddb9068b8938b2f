"""`deepflow study <name>` end to end at quick=true (real MLflow store in a temporary folder): the JSON
line's rows and checks, the parent run with a child per variant and the table and figures, what each
study guarantees by construction, and bad input as one named error line before anything runs."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from mlflow.tracking import MlflowClient

from deepflow.cli import main


def study(tmp_path, name: str, *overrides: str) -> tuple[dict, str]:
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    argv = [name, "quick=true", "output=json", f"tracking.uri={uri}", f"output_dir={tmp_path / 'out'}", *overrides]
    run = subprocess.run([sys.executable, "-m", "deepflow.cli", "study", *argv], capture_output=True, text=True,
                         timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout.strip().splitlines()[-1]), uri


def check_record(result: dict, uri: str, name: str) -> None:
    client = MlflowClient(uri)
    parent = client.get_run(result["run_id"])
    assert parent.info.status == "FINISHED" and parent.data.tags["deepflow.study"] == name
    artifacts = {a.path for a in client.list_artifacts(result["run_id"])}
    assert {"table.md", "study.png", "study.html", "rows.json"} <= artifacts
    children = client.search_runs([parent.info.experiment_id], f"tags.mlflow.parentRunId = '{result['run_id']}'")
    assert {r["run_id"] for r in result["rows"]} <= {c.info.run_id for c in children}
    assert result["url"].endswith(f"/runs/{result['run_id']}/artifacts/table.md?workflowType=machine_learning")
    for row in result["rows"]:
        assert {"workload", "variant", "design", "step_time_s", "energy_j", "loss_pct"} <= set(row)
    assert result["checks"] and all(isinstance(v, bool) for v in result["checks"].values())


@pytest.fixture(scope="module")
def layer_by_layer(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("layers")
    return study(tmp, "layer-by-layer")


def test_layer_by_layer_rows_runs_and_what_holds_by_construction(layer_by_layer):
    result, uri = layer_by_layer
    check_record(result, uri, "layer-by-layer")
    rows = {(r["workload"], r["variant"]): r for r in result["rows"]}
    workloads = ("llama3-70b", "mixtral-8x7b", "resnet18")
    for workload in workloads:
        assert {v for w, v in rows if w == workload} == {"today", "fixed-mapping", "sequential", "cross-workload",
                                                         "joint"}
        today, fixed, sequential = (rows[workload, v] for v in ("today", "fixed-mapping", "sequential"))
        # b holds a's mapping and precision (the resnet's fused jobs): only the chip moved
        assert fixed["mapping"] == today["mapping"]
        # c re-maps b's chip with the exact search, which includes b's mapping: never slower
        assert sequential["objective_s"] <= fixed["objective_s"] * (1 + 1e-9)
        common = set(sequential["design"]) & set(fixed["design"]) - {"precision", "fused_jobs"}
        assert common and {k: sequential["design"][k] for k in common} == pytest.approx({k: fixed["design"][k]
                                                                                         for k in common})
        # ... and the same chip: b's space holds no chip parameter c's lacks (the resnet's fixed_space)
        assert sequential["chip"] == pytest.approx(fixed["chip"]) and (sequential["feasible"] or not fixed["feasible"])
        assert rows[workload, "joint"]["loss_pct"] == pytest.approx(0.0)
    assert set(result["checks"]) == {f"{w}: joint not worse than {v}" for w in workloads
                                     for v in ("today", "fixed-mapping", "sequential", "cross-workload")}


def test_technology_levers_binding_limits_and_best_combination(tmp_path):
    result, uri = study(tmp_path, "technology-levers", "study.only=[mixtral-8x7b,deepflow-lstm]")
    check_record(result, uri, "technology-levers")
    mixtral = [r for r in result["rows"] if r["workload"] == "mixtral-8x7b"]
    assert [r["variant"] for r in mixtral] == ["baseline", "node=N7", "node=N2", "memory=HBM2e", "memory=HBM4",
                                               "best combination"]
    for r in mixtral:
        assert r["binding"] in ("compute", "HBM bandwidth", "HBM capacity", "scale-up", "scale-out", "power", "none")
        assert set(r["gains_pct"]) == {"compute", "HBM bandwidth", "HBM capacity", "scale-up", "scale-out", "power"}
    node = {r["value"]: r["step_time_s"] for r in mixtral if r["lever"] == "node"}
    assert node["N2"] < node["N7"]  # a newer node builds a faster chip in the same budgets
    # the best combination starts from the best single-lever point: never worse than any
    assert all(ok for name, ok in result["checks"].items() if "best combination" in name)
    assert any(r["workload"] == "deepflow-lstm (dp64)" for r in result["rows"])


def test_retrodiction_ratios_and_gain_checks(tmp_path):
    result, uri = study(tmp_path, "retrodiction", "study.only=[a100-gpt3-175b]")
    check_record(result, uri, "retrodiction")
    real, designed, bounded = result["rows"]
    assert [r["variant"] for r in result["rows"]] == ["real", "co-designed", "within-real-bounds"]
    # the bounded search starts from the real chip (inside its bounds): never behind it
    assert bounded["objective_s"] <= real["objective_s"] * (1 + 1e-9)
    assert bounded["design"]["area_compute_fraction"] <= 0.5 + 1e-9 and "scale_up_domain" not in bounded["design"]
    # the real chip is the template's own derivation: A100's 312 TFLOP/s bf16 within 10 %
    assert real["chip"]["peak_bf16_flops_per_s"] == pytest.approx(312e12, rel=0.10)
    assert real["flop_per_hbm_byte"] == pytest.approx(real["chip"]["peak_bf16_flops_per_s"]
                                                      / real["chip"]["hbm_bw_bytes_per_s"], rel=1e-2)
    assert any(name.startswith("a100-gpt3-175b: claimed gain") for name in result["checks"])


@pytest.mark.parametrize("argv, needle", [
    (["nonsense"], "study 'nonsense' is not known: allowed layer-by-layer, technology-levers"),
    (["layer-by-layer", "study.only=[gpt5]"], "study.only='gpt5' is not known: allowed llama3-70b, mixtral-8x7b"),
    (["technology-levers", "study.only_levers=[wafer]"], "study.only_levers='wafer' is not known: allowed node"),
    (["layer-by-layer", "study.workloads.resnet18.fixed_space=nope"],
     "study.workloads.resnet18.fixed_space='nope' is not known: allowed chip-fused-jobs"),
    (["layer-by-layer", "study.budget=0"], "study.budget=0 is invalid: allowed an integer from 1 to 100,000"),
    (["retrodiction", "study.budget=1000000000"], "study.budget=1000000000 is invalid: allowed an integer from 1"),
    (["technology-levers", "study.levers.node.values=[N5,N9]"], "study.levers.node: chip.node = 'N9' is invalid: allowed"),
    (["technology-levers", "study.levers.die_area.values=[-5]"], "study.levers.die_area: chip.die_area_mm2"),
    (["retrodiction", "study.max_gain=0.5"], "study.max_gain=0.5 is invalid"),
    (["layer-by-layer", "quick=maybe"], "quick='maybe' is invalid: allowed true or false"),
    # a workload's own configuration, composed before the parent run opens
    (["retrodiction", "study.cases.a100-gpt3-175b.overrides=['model=gpt9']"], "model='gpt9' is not a known preset"),
    (["layer-by-layer", "study.workloads.llama3-70b.overrides=['system.num_devices=-8']"], "system.num_devices"),
    (["phaze-tpuv4", "study.models.bert-large.placement.tp=0", "study.only=[bert-large]"], "tp"),
    ([], "name the study"),
])
def test_bad_study_input_is_one_named_line(tmp_path, monkeypatch, capsys, argv, needle):
    monkeypatch.chdir(tmp_path)
    assert main(["study", *argv, f"tracking.uri=sqlite:///{tmp_path / 'm.db'}"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and needle in err[0], err
    assert not (tmp_path / "m.db").exists()  # nothing opened before the whole configuration was checked


def test_phaze_tpuv4_derived_tpu_and_throughput_ratios(tmp_path):
    result, uri = study(tmp_path, "phaze-tpuv4", "study.only=[opt-350m]")
    check_record(result, uri, "phaze-tpuv4")
    rows = {r["variant"]: r for r in result["rows"]}
    assert list(rows) == ["tpu-v4", "derived", "spotlight", "co-designed"]
    assert rows["tpu-v4"]["vs_tpu_v4"] == 1.0
    for r in rows.values():  # throughput = 4,096 sequences / step (PHAZE's global batch), also on 1,020 devices
        if r["feasible"]:
            assert r["throughput_seq_per_s"] == pytest.approx(4096 / r["step_time_s"], rel=1e-3)
    # PHAZE's OPT placement, 12 x 85 x 1 = 1,020 devices, is held in the Spotlight-style variant
    assert rows["spotlight"]["mapping"].startswith("pp12 dp85")
    derived = [name for name in result["checks"] if name.startswith("derived TPU v4")]
    assert len(derived) == 3 and all(result["checks"][name] for name in derived)
