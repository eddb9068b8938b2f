"""`deepflow optimize`: MLflow run contents, artifacts, the best design's round trip through
`deepflow evaluate`, regret, hypervolume, multirun child runs, and clear errors for bad configs.

Real sqlite MLflow stores in tmp dirs, tiny budgets on the mapping-only space (random strategy:
the optimizer core has its own tests; here the tracking and persistence around it are tested)."""

from __future__ import annotations

import contextlib
import io
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from deepflow.cli import main

# the quickstart experiment's space and presets, a cheap strategy, no warm start
BASE = ["experiment=quickstart", "strategy=random", "warm_start.samples=0", "optimum=null", "q=4"]


def optimize(*args: str) -> int:
    return main(["optimize", *BASE, *args])


def runs(tmp: Path, experiment: str = "quickstart"):
    import mlflow

    client = mlflow.MlflowClient(tracking_uri=f"sqlite:///{tmp / 'mlflow.db'}")
    exp = client.get_experiment_by_name(experiment)
    return client, client.search_runs([exp.experiment_id])


@pytest.fixture(scope="module")
def one_run(tmp_path_factory):
    """One finished run of 12 evaluations in its own working directory (what it printed: printed.txt)."""
    tmp = tmp_path_factory.mktemp("optimize")
    with pytest.MonkeyPatch.context() as mp, contextlib.redirect_stdout(io.StringIO()) as printed:
        mp.chdir(tmp)
        assert optimize("budget=12", "seed=3") == 0
    (tmp / "printed.txt").write_text(printed.getvalue())
    client, found = runs(tmp)
    assert len(found) == 1
    return tmp, client, found[0]


def test_run_has_params_and_one_metric_point_per_evaluation(one_run):
    tmp, client, run = one_run
    assert run.info.status == "FINISHED"
    assert run.data.params["budget"] == "12" and run.data.params["strategy.name"] == "random"
    assert run.data.params["model.name"] == "llama3-70b"
    feasible = client.get_metric_history(run.info.run_id, "feasible")
    assert sorted(m.step for m in feasible) == list(range(12))
    frame = pd.read_parquet(next(tmp.glob("outputs/quickstart/*/evaluations.parquet")))
    steps = {m.step: m.value for m in client.get_metric_history(run.info.run_id, "step_time_s")}
    assert steps == {int(i): pytest.approx(t) for i, t in zip(frame["index"], frame["step_time_s"])}
    best = client.get_metric_history(run.info.run_id, "best_step_time_s")
    values = [m.value for m in sorted(best, key=lambda m: m.step)]
    assert values == sorted(values, reverse=True)  # best so far never gets worse
    feasible_times = frame.loc[frame["objective_feasible"], "step_time_s"]
    assert values[-1] == pytest.approx(feasible_times.min())


def test_the_experiment_is_a_model_training_one_and_the_run_says_what_it_did(one_run):
    """MLflow 3's UI shows an experiment as classic model training by its experimentKind tag; the
    run's description (mlflow.note.content) names the objective, model, space and best design."""
    tmp, client, run = one_run
    assert client.get_experiment(run.info.experiment_id).tags["mlflow.experimentKind"] == "custom_model_development"
    note = run.data.tags["mlflow.note.content"]
    assert "minimize the step time (s) of `llama3-70b` over the space `mapping-only`" in note
    best = min(m.value for m in client.get_metric_history(run.info.run_id, "best_step_time_s"))
    assert f"Best: step time {best:.6g} s at evaluation" in note and "deepflow evaluate design=" in note
    assert not {"best_so_far", "regret", "hypervolume", "objective"} & set(run.data.metrics)  # names carry units


def test_the_printed_link_opens_the_runs_charts_in_the_model_training_view(one_run):
    """The last line starts the UI of the local store and links the run's metric charts in MLflow 3's Model
    training view (`workflowType` in the hash route), not the GenAI one a fresh browser opens."""
    tmp, client, run = one_run
    last = (tmp / "printed.txt").read_text().strip().splitlines()[-1]
    url = (f"http://127.0.0.1:5000/#/experiments/{run.info.experiment_id}/runs/{run.info.run_id}/model-metrics"
           f"?workflowType=machine_learning")
    assert last == f"open the MLflow UI: mlflow ui --backend-store-uri sqlite:///{tmp.resolve()}/mlflow.db, then open {url}"


def test_artifacts_are_present_and_loadable(one_run, tmp_path):
    import mlflow

    tmp, client, run = one_run
    mlflow.set_tracking_uri(f"sqlite:///{tmp / 'mlflow.db'}")
    try:
        local = Path(mlflow.artifacts.download_artifacts(run_id=run.info.run_id, dst_path=str(tmp_path)))
    finally:
        mlflow.set_tracking_uri(None)
    frame = pd.read_parquet(local / "evaluations.parquet")
    assert len(frame) == 12 and list(frame["index"]) == list(range(12))
    assert frame["step_time_s"].notna().all()
    for png in ("convergence.png", "pareto.png"):
        assert (local / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    html = (local / "pareto.html").read_text()
    assert "Plotly.newPlot" in html and len(html) > 1_000_000  # plotly.js embedded: works offline
    assert '<script src="http' not in html and "<script src='http" not in html
    design = yaml.safe_load((local / "best_design.yaml").read_text())
    assert set(design) == {"hardware", "system", "model", "mapping"}
    breakdown = json.loads((local / "best_breakdown.json").read_text())
    assert breakdown["feasible"] is True
    assert sum(breakdown["breakdown"].values()) == pytest.approx(breakdown["step_time_s"], rel=1e-9)
    assert breakdown["step_time_s"] == pytest.approx(frame.loc[frame["objective_feasible"], "step_time_s"].min())


def test_best_design_round_trips_through_evaluate(one_run, capsys):
    tmp, client, run = one_run
    design = next(tmp.glob("outputs/quickstart/*/best_design.yaml"))
    recorded = json.loads(design.with_name("best_breakdown.json").read_text())["step_time_s"]
    capsys.readouterr()
    assert main(["evaluate", f"design={design}", "output=json"]) == 0
    again = json.loads(capsys.readouterr().out)
    assert again["step_time_s"] == pytest.approx(recorded, rel=1e-12)
    # a field override still applies on top of the design file
    assert main(["evaluate", f"design={design}", "mapping.micro_batch_size=64", "output=json"]) == 0
    assert json.loads(capsys.readouterr().out)["step_time_s"] != pytest.approx(recorded, rel=1e-6)


@pytest.mark.parametrize("hardware, budget_w", [(["hardware=gb200"], 1200.0),
                                              (["hardware.power_limit_w=500"], 500.0)])
def test_a_searched_peak_is_written_back_as_the_rate_the_part_runs(tmp_path, monkeypatch, capsys, hardware, budget_w):
    """A hardware space samples sustained rates (a GB200's operating point, a power-limited H100's): the best design
    writes them as a part with neither rating nor limit, the limit kept as its TDP, and evaluates to the same time."""
    monkeypatch.chdir(tmp_path)
    assert optimize("budget=8", "space=hardware-mapping", *hardware) == 0
    design = next(tmp_path.glob("outputs/quickstart/*/best_design.yaml"))
    section = yaml.safe_load(design.read_text())["hardware"]
    assert section["nominal_tdp_w"] is None and section["power_limit_w"] is None and section["tdp_w"] == budget_w
    recorded = json.loads(design.with_name("best_breakdown.json").read_text())["step_time_s"]
    capsys.readouterr()
    assert main(["evaluate", f"design={design}", "output=json"]) == 0
    assert json.loads(capsys.readouterr().out)["step_time_s"] == pytest.approx(recorded, rel=1e-12)


def test_regret_against_the_enumerated_optimum(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert optimize("budget=8", "optimum=enumerate", "output=json") == 0
    out = json.loads(capsys.readouterr().out)["runs"][0]
    optimum = out["optimum"]["optimum"]
    assert out["optimum"]["points"] > 1000 and optimum <= out["best_step_time_s"]
    assert out["regret"] == pytest.approx(out["best_step_time_s"] / optimum - 1.0)
    client, (run,) = runs(tmp_path)
    regret = sorted(client.get_metric_history(run.info.run_id, "regret_pct"), key=lambda m: m.step)
    assert regret[-1].value == pytest.approx(100 * out["regret"]) and all(m.value >= 0 for m in regret)
    assert client.get_run(run.info.run_id).data.metrics["optimum_step_time_s"] == pytest.approx(optimum)


def test_two_objectives_log_hypervolume_and_a_pareto_front(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert optimize("budget=8", "objective=time_energy") == 0
    client, (run,) = runs(tmp_path)
    hv = [m.value for m in sorted(client.get_metric_history(run.info.run_id, "hypervolume_log_units"), key=lambda m: m.step)]
    assert len(hv) == 8 and hv[-1] > 0 and np.all(np.diff(hv) >= 0)
    front = pd.read_csv(next(tmp_path.glob("outputs/quickstart/*/pareto_front.csv")))
    assert len(front) >= 1 and front["energy_j"].is_monotonic_decreasing


def test_multirun_creates_child_runs_under_one_parent(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["optimize", "-m", *BASE, "budget=4", "seed=0,1"]) == 0
    client, found = runs(tmp_path)
    parents = [r for r in found if "mlflow.parentRunId" not in r.data.tags]
    children = [r for r in found if "mlflow.parentRunId" in r.data.tags]
    assert len(parents) == 1 and len(children) == 2
    assert {r.data.tags["mlflow.parentRunId"] for r in children} == {parents[0].info.run_id}
    assert sorted(r.data.params["seed"] for r in children) == ["0", "1"]
    assert all(r.info.status == "FINISHED" for r in found)
    out = capsys.readouterr().out
    assert "sweep (parent run" in out and out.strip().splitlines()[-1].startswith("open the MLflow UI: mlflow ui")
    charts = (f"then open http://127.0.0.1:5000/#/experiments/{parents[0].info.experiment_id}/runs"
              f"?workflowType=machine_learning&compareRunsMode=CHART")  # the children's charts side by side
    assert out.strip().endswith(charts)


def test_inner_best_mapping_records_and_round_trips_the_chosen_mapping(tmp_path, monkeypatch, capsys):
    """inner=best_mapping on the chip co-design: the strategy's space is the chip's, every verified row
    carries the fastest mapping of its chip (the core search agrees), and best_design.yaml
    evaluates again to the recorded step time."""
    import torch

    from analytical.codes import DTYPE
    from analytical.search import MAPPING_FIELDS, best_mappings_of
    from deepflow.config import compose_config, design_from_config, space_from_config
    from deepflow.run.hierarchical import BestMappingSpace

    monkeypatch.chdir(tmp_path)
    args = ["experiment=llama3-70b-n5-codesign", "inner=best_mapping", "strategy=random", "budget=4", "q=4",
            "warm_start.samples=0", "optimum=null"]
    assert main(["optimize", *args, "output=json"]) == 0
    captured = capsys.readouterr()
    assert "warning" not in captured.err  # no best_design.yaml round-trip mismatch
    out = json.loads(captured.out)["runs"][0]
    assert out["feasible"] >= 1
    local = Path(out["local_dir"])
    frame = pd.read_parquet(local / "evaluations.parquet")
    outer = BestMappingSpace(space_from_config(compose_config(args, config_name="optimize")))
    assert frame.filter(like="x.").shape[1] == outer.dim == 9  # the chip's parameters and precision only
    X = torch.tensor(frame[[f"x.{i}" for i in range(outer.dim)]].to_numpy(), dtype=DTYPE)
    again = outer.to_batch(X)  # a fresh search of every row's outer point
    for name in MAPPING_FIELDS:
        assert frame[f"design.{name}"].tolist() == getattr(again, name).tolist(), name
    # the best design's file: its mapping is the chosen one, and the core search finds it fastest
    design = yaml.safe_load((local / "best_design.yaml").read_text())
    best = frame.loc[frame["index"] == out["best_index"]].iloc[0]
    assert design["mapping"]["tp"] == best["design.tp"] and design["mapping"]["pp"] == best["design.pp"]
    assert design["mapping"]["dp"] == best["design.dp"] and design["mapping"]["cp"] == best["design.cp"]
    assert design["mapping"]["micro_batch_size"] == best["design.micro_batch_size"]
    _, chip_design, _ = design_from_config(compose_config([f"design={local / 'best_design.yaml'}"]))
    # on the derived chip itself (an AcceleratorSpec lacks its own scale-out bandwidth and its energies at the
    # operating voltage, which can reorder near-equal mappings): the core search of the file's design agrees
    found = best_mappings_of(chip_design, top_k=1)
    assert {k: getattr(found.best, k) for k in MAPPING_FIELDS} == {k: design["mapping"][k] for k in MAPPING_FIELDS}
    # ... and `deepflow evaluate design=` gives the recorded step time
    assert main(["evaluate", f"design={local / 'best_design.yaml'}", "output=json"]) == 0
    assert json.loads(capsys.readouterr().out)["step_time_s"] == pytest.approx(out["best_step_time_s"], rel=1e-12)


@pytest.mark.parametrize("args, needle", [
    (["experiment=nope"], "experiment='nope' is not a known experiment: allowed"),
    (["strategy=nope"], "strategy='nope' is not a known strategy: allowed"),
    (["budget=0"], "budget=0 is invalid: allowed an integer >= 1"),
    (["budgett=3"], "budgett is not a key of the optimize config: allowed budget,"),
    (["q=two"], "q='two' is invalid"),
    (["objective=speed"], "objective.name = 'speed' is invalid: allowed one of step_time"),
    (["strategy.num_restarts=0"], "strategy.num_restarts = 0 is invalid: allowed an integer >= 1"),
    (["+strategy.colour=red"], "unexpected keyword argument 'colour'"),
    (["tracking.uri=ftp://x"], "tracking.uri='ftp://x' is invalid"),
    (["seed=0,1"], "seed has several values (a sweep): add -m"),
    (["optimum=always"], "optimum='always' is invalid"),
    (["inner=bogus"], "inner='bogus' is invalid: allowed null (the space as given) or best_mapping"),
    (["resume=0123abcd"], "resume='0123abcd' is not a run"),
    (["resume=0123abcd", "budget=4"], "budget cannot be changed when resuming"),
])
def test_bad_config_is_exit_2_naming_the_field(args, needle, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["optimize", *args]) == 2
    err = capsys.readouterr().err
    assert needle in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "outputs").exists() and not (tmp_path / "mlflow.db").exists()  # before any work


def test_bad_experiment_from_the_shell_is_one_line_and_exit_2(tmp_path):
    out = subprocess.run([sys.executable, "-m", "deepflow.cli", "optimize", "experiment=gpt5-on-a-toaster"],
                         capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert "experiment='gpt5-on-a-toaster' is not a known experiment: allowed" in out.stderr
    assert "gpt3-175b-h100-mapping" in out.stderr


def test_jobs_are_hydras_basic_sweeper_expansion_with_the_configs_declared_sweep_first():
    from deepflow.launch.hydra_app import jobs_of

    jobs, multirun = jobs_of("optimize", ["experiment=technology-sweep", "seed=0,1", "budget=3",
                                          "hydra/launcher=basic"], True)
    assert multirun and jobs == [[f"chip.node={n}", "experiment=technology-sweep", f"seed={s}", "budget=3"]
                                 for n in ("N7", "N5", "N3") for s in (0, 1)]
    assert jobs_of("optimize", ["experiment=technology-sweep"], False)[1]  # a declared sweep is a multirun
    assert jobs_of("optimize", ["seed=3"], False) == ([["seed=3"]], False)


def test_warm_start_learns_the_memory_margin_beside_the_objective(tmp_path, monkeypatch):
    """bo-warm's surrogate is fitted on [log step time, memory margin] of its Sobol samples."""
    monkeypatch.chdir(tmp_path)
    assert main(["optimize", "experiment=quickstart", "optimum=null", "budget=8", "q=4", "seed=1",
                 "warm_start.samples=64", "warm_start.params.max_epochs=5"]) == 0
    samples = pd.read_parquet(next(tmp_path.glob("outputs/quickstart/*/warm_start_samples.parquet")))
    assert {"log_step_time_s", "constraint_memory"} <= set(samples.columns) and len(samples) == 64
    assert samples["constraint_memory"].gt(0).any() and samples["constraint_memory"].lt(0).any()
    assert (samples.loc[samples["feasible"], "constraint_memory"] <= 0).all()  # what fits has a margin <= 0
