"""The bad-input corpus: every command, wrong types, negative and zero sizes, unknown presets,
fields and nodes, missing and malformed files, an unreachable tracking server, a corrupt surrogate
artifact, missing query columns. Each is exit status 2 and one `deepflow: error:` line that names
the field, with no traceback, and nothing written (no outputs, no MLflow store)."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from deepflow.cli import main


def unused_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def files(tmp_path):
    """Malformed inputs in a scratch folder: a YAML that is not a mapping, a CSV without the
    columns, a Parquet file that is not Parquet, a model folder whose state is corrupt."""
    (tmp_path / "list.yaml").write_text("- just\n- a list\n")
    (tmp_path / "broken.yaml").write_text("hardware: {name: [unclosed\n")
    (tmp_path / "runs.csv").write_text("model,step_s\ngpt,1.0\n")
    (tmp_path / "samples.parquet").write_bytes(b"not parquet at all")
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text('{"class": "MLPEnsemble", "params": {}}')
    (model / "state.pt").write_bytes(b"corrupt")
    (tmp_path / "designs.csv").write_text("tp,pp\n8,4\n")
    hfta = ("id,source,model,hardware,precision,baseline_precision,micro_batch_size,fused_jobs,published_speedup\n"
            "r1,paper,pointnet-cls,v99,fp32,fp32,32,4,2.0\n")
    (tmp_path / "hfta.csv").write_text(hfta)
    (tmp_path / "ps.csv").write_text("id,published_ratio,ps_shards\nr1,1.2,8\n")
    return tmp_path


CASES = [
    # evaluate: presets, fields, types, sizes, splits, files
    (["evaluate", "model=gpt5"], "model='gpt5' is not a known preset"),
    (["evaluate", "hardware=h1000"], "hardware='h1000' is not a known preset"),
    (["evaluate", "system=moon-base"], "system='moon-base' is not a known preset"),
    (["evaluate", "mapping=diagonal"], "mapping='diagonal' is not a known preset"),
    (["evaluate", "mapping.tp=0"], "mapping.tp"),
    (["evaluate", "mapping.tp=two"], "mapping.tp"),
    (["evaluate", "mapping.pp=-4"], "mapping.pp"),
    (["evaluate", "mapping.micro_batch_size=0"], "mapping.micro_batch_size"),
    (["evaluate", "mapping.precision=fp7"], "mapping.precision"),
    (["evaluate", "mapping.recompute=sometimes"], "allowed one of none, selective, full, op"),
    (["evaluate", "mapping.recompute=selective", "mapping.recompute_layers=4"], "mapping.recompute_layers"),
    (["evaluate", "mapping.fused_cross_entropy=maybe"], "mapping.fused_cross_entropy"),
    (["evaluate", "mapping.grad_reduce_in_fp32=maybe"], "mapping.grad_reduce_in_fp32"),
    (["evaluate", "mapping.colour=red"], "colour"),
    (["evaluate", "model.hidden_size=-1"], "model.hidden_size"),
    (["evaluate", "model.num_layers=0"], "model.num_layers"),
    (["evaluate", "model.kind=cnn"], "model.cnn_arch"),
    (["evaluate", "model.kind=rnn"], "model.kind"),
    (["evaluate", "model=resnet50", "model.cnn_arch=alexnet"], "model.cnn_arch"),
    (["evaluate", "mapping.fused_jobs=0"], "mapping.fused_jobs"),
    (["evaluate", "hardware.hbm_gib=lots"], "hardware.hbm_gib"),
    (["evaluate", "hardware.tdp_w=-100"], "hardware.tdp_w"),
    (["evaluate", "system.num_devices=-8"], "system.num_devices"),
    # sizes beyond any buildable system: named like a negative one (analytical.choices.MAX_DEVICES, MAX_SIZE)
    (["evaluate", "system.num_devices=99999999999999999999"],
     "system.num_devices = 99999999999999999999 is invalid: allowed an integer from 1 to 16,777,216"),
    (["evaluate", "system.devices_per_node=16777217"], "system.devices_per_node"),
    (["evaluate", "mapping.tp=33554432"], "mapping.tp"),
    (["evaluate", "mapping.global_batch_size=2000000000"], "mapping.global_batch_size"),
    (["evaluate", "model.num_layers=99999999999999999999"], "model.num_layers"),
    (["evaluate", "system.topology=ring-of-rings"], "system.topology"),
    (["evaluate", "output=xml"], "output='xml' is invalid"),
    (["evaluate", "design=/nonexistent/design.yaml"], "design"),
    (["evaluate", "design={tmp}/list.yaml"], "design"),
    (["evaluate", "design={tmp}/broken.yaml"], "design"),
    (["evaluate", "calibration=/nonexistent/calibration.yaml"], "calibration"),
    (["evaluate", "calibration={tmp}/list.yaml"], "calibration"),
    (["evaluate", "chip=n1-dream"], "chip='n1-dream' is not a known preset"),
    (["evaluate", "chip=n5-hbm3e-700w", "chip.node=N1"], "node"),
    (["evaluate", "chip=n5-hbm3e-700w", "chip.power_budget_w=-5"], "chip.power_budget_w"),
    (["evaluate", "notakeyvalue"], "is not an override"),
    # best-mapping
    (["best-mapping", "top_k=0"], "top_k=0 is invalid"),
    (["best-mapping", "top_k=ten"], "top_k='ten' is invalid"),
    (["best-mapping", "model=gpt5"], "model='gpt5' is not a known preset"),
    (["best-mapping", "output=csv"], "output='csv' is invalid"),
    # validate
    (["validate", "data=/nonexistent/runs.csv"], "no such file"),
    (["validate", "data={tmp}/runs.csv"], "data"),
    (["validate", "fit=maybe"], "fit='maybe' is invalid"),
    (["validate", "data={repo}/experiments/validation/published_runs.csv", "fit=true", "fit_on=Nobody"],
     "fit_on='Nobody' matches no row"),
    (["validate", "output=yaml"], "output='yaml' is invalid"),
    # derive
    (["derive", "chip=n1-dream"], "chip='n1-dream' is not a known preset"),
    (["derive", "chip.node=N0"], "node"),
    (["derive", "chip.area_compute_fraction=1.5"], "area"),
    (["derive", "output=xml"], "output='xml' is invalid"),
    (["validate", "data={tmp}/hfta.csv"], "row 'r1': hardware='v99'"),
    (["validate", "data={tmp}/ps.csv"], "missing columns source, model, hardware"),
    # sample
    (["sample", "n=0"], "n=0 is invalid"),
    (["sample", "n=-5"], "n=-5 is invalid"),
    (["sample", "seed=-1"], "seed=-1 is invalid"),
    (["sample", "batch_size=0"], "batch_size=0 is invalid"),
    (["sample", "sampler=halton"], "sampler='halton' is invalid"),
    (["sample", "space=nowhere"], "space='nowhere' is not a known space"),
    (["sample", "out=x.csv"], "out='x.csv' is invalid"),
    (["sample", "executor=dask"], "executor='dask' is invalid"),
    (["sample", "executor=ray", "ray.num_cpus=0"], "ray.num_cpus=0 is invalid"),
    (["sample", "mlflow=maybe"], "mlflow='maybe' is invalid"),
    (["sample", "device=tpu"], "device='tpu' is invalid: allowed cpu, cuda or cuda:<n>"),
    (["sample", "device=cuda:99"], "device='cuda:99' is invalid"),  # no GPU, or not 100 of them
    (["sample", "dtype=float16"], "dtype='float16' is invalid: allowed float64, float32"),
    (["sample", "tracking.uri=ftp://x"], "tracking.uri='ftp://x' is invalid"),
    (["sample", "tracking.uri=http://127.0.0.1:{port}"], "does not answer"),
    (["sample", "-m", "n=10", "hydra/launcher=slurmm"], "hydra/launcher='slurmm' is not a known launcher"),
    # train-surrogate
    (["train-surrogate", "data=/nonexistent/samples.parquet"], "data"),
    (["train-surrogate", "data={tmp}/samples.parquet"], "data"),
    (["train-surrogate", "surrogate=oracle", "data={tmp}/samples.parquet"], "surrogate='oracle' is not a known surrogate"),
    # query
    (["query", "model_uri=/nonexistent/model", "designs={tmp}/designs.csv"], "model_uri"),
    (["query", "model_uri={tmp}/model", "designs={tmp}/designs.csv"], "model_uri"),
    (["query", "designs={tmp}/designs.csv"], "model_uri is required"),
    (["query", "model_uri={tmp}/model", "design.tp=8", "designs={tmp}/designs.csv"], "designs"),
    # optimize
    (["optimize", "budget=0"], "budget=0 is invalid"),
    (["optimize", "q=two"], "q='two' is invalid"),
    (["optimize", "seed=-3"], "seed=-3 is invalid"),
    (["optimize", "strategy=oracle"], "strategy='oracle' is not a known strategy"),
    (["optimize", "experiment=gpt5"], "experiment='gpt5' is not a known experiment"),
    (["optimize", "objective=speed"], "objective"),
    (["optimize", "warm_start.samples=-1"], "warm_start.samples=-1 is invalid"),
    (["optimize", "device=gpu"], "device='gpu' is invalid"),
    (["optimize", "warm_start.model=oracle"], "warm_start.model='oracle' is invalid"),
    (["optimize", "name=multirun"], "name='multirun' is invalid"),
    (["optimize", "executor=ray"], "executor='ray' is invalid"),
    (["optimize", "budgett=3"], "budgett is not a key of the optimize config"),
    (["optimize", "seed=0,1"], "seed has several values (a sweep): add -m"),
    (["optimize", "-m", "seed=0,1", "q=1,0"], "q=0 is invalid"),
    (["optimize", "--cfgg"], "unrecognized arguments: --cfgg"),
    (["optimize", "resume=0123abcd"], "resume='0123abcd' is not a run"),
    (["optimize", "tracking.uri=http://127.0.0.1:{port}"], "does not answer"),
    # calibrate
    (["calibrate", "data=/nonexistent/runs.csv"], "no such file"),
    (["calibrate", "fit=everything"], "fit='everything' is invalid"),
    (["calibrate", "cv=bootstrap"], "cv='bootstrap' is invalid"),
    (["calibrate", "folds=1"], "folds=1 is invalid"),
    (["calibrate", "fields=[gemm_peak_fraction,luck]"], "luck"),
    # study
    (["study"], "name the study"),
    (["study", "nonsense"], "study 'nonsense' is not known: allowed layer-by-layer"),
    (["study", "layer-by-layer", "study.only=[gpt5]"], "study.only='gpt5' is not known"),
    (["study", "technology-levers", "study.only_levers=[wafer]"], "study.only_levers='wafer' is not known"),
    (["study", "phaze-tpuv4", "study.budget=-1"], "study.budget=-1 is invalid"),
    (["study", "retrodiction", "study.max_gain=0"], "study.max_gain=0 is invalid"),
    (["study", "layer-by-layer", "output=xml"], "output='xml' is invalid"),
    (["study", "layer-by-layer", "tracking.uri=http://127.0.0.1:{port}"], "does not answer"),
    # the command itself
    (["frobnicate"], "unknown command 'frobnicate'"),
]


@pytest.mark.parametrize("argv, needle", CASES, ids=[" ".join(a) for a, _ in CASES])
def test_bad_input_is_exit_2_and_one_line_naming_the_field(argv, needle, files, monkeypatch, capsys):
    port = unused_port()
    monkeypatch.chdir(files)
    repo = Path(__file__).resolve().parents[1]
    argv = [a.format(tmp=files, port=port, repo=repo) for a in argv]
    assert main(argv) == 2
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("deepflow: error: "), err
    assert needle.format(tmp=files, port=port) in lines[0], lines[0]
    assert "Traceback" not in err
    assert not (files / "outputs").exists() and not (files / "mlflow.db").exists()


def test_the_corpus_covers_every_command():
    from deepflow.cli import COMMANDS

    assert {argv[0] for argv, _ in CASES} >= set(COMMANDS) and len(CASES) >= 50
