"""What a run having trained implies about what its row leaves out (deepflow/trained.py), through
`read_rows` on rows of experiments/validation/modern_runs.csv with a column dropped."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pandas as pd

from analytical import DEFAULT_EFFICIENCY, evaluate, stack_designs
from deepflow.validation import read_rows, report

DATA = Path(__file__).resolve().parents[2] / "experiments" / "validation"


def _write(frame: pd.DataFrame, path) -> str:
    frame.to_csv(path, index=False)
    return str(path)


def test_a_moe_row_without_etp_gets_the_expert_grid_it_trained_with(tmp_path):
    """etp unstated: Megatron-Core's default (tp) where etp * ep divides dp * cp * tp (DGX Cloud Grok-1 on GB200,
    tp 4 ep 8 dp 32); 1 where only that fits (Qwen3-235B on 256 H100, tp 2 ep 32 dp 16), so the published run
    comes out feasible, as it trained; a stated etp wins."""
    modern = pd.read_csv(DATA / "modern_runs.csv")
    ids = ["mbridge-26.04.01-h100-qwen3-235b-a22b-fp8-256", "dgxc-v25.05.05-gb200-grok1-314b-fp8-128"]
    rows = modern[modern["id"].isin(ids)].set_index("id").loc[ids].reset_index()
    plain = read_rows(_write(rows.drop(columns=["etp"]), tmp_path / "plain.csv"))
    assert [spec[3].etp for spec in plain.specs] == [1, 0]
    assert [r["assumed"].get("etp") for r in report(plain, DEFAULT_EFFICIENCY)["rows"]] == [1, None]  # both auto
    result = evaluate(stack_designs(*zip(*plain.specs)))
    assert bool(result.feasible.all())
    stated = read_rows(_write(rows.assign(etp=2), tmp_path / "stated.csv"))
    assert [spec[3].etp for spec in stated.specs] == [2, 2]
    assert not bool(evaluate(stack_designs(*zip(*stated.specs[:1]))).feasible[0])  # 2 x 32 does not divide 32


def test_an_unstated_gradient_precision_is_fp32_unless_only_bf16_fits(tmp_path):
    """grad_reduce_in_fp32 unstated on a bf16 Megatron-Core row: Megatron-LM's fp32 where the run fits with it
    (Llama 3 8B on 8 H100), bf16 (what NVIDIA's benchmark scripts set) where only that fits the stated recompute
    (gpt-oss-120b on 64 B200, micro-batch 4 with recompute none), as the run trained; reported as inferred; a
    stated value wins."""
    modern = pd.read_csv(DATA / "modern_runs.csv")
    ids = ["dgxc-v25.04.02-h100-llama3-8b-bf16-8", "mbridge-25.11-b200-gpt-oss-120b-bf16-64"]
    rows = modern[modern["id"].isin(ids)].set_index("id").loc[ids].reset_index().assign(recompute="none")
    plain = read_rows(_write(rows.drop(columns=["grad_reduce_in_fp32"]), tmp_path / "plain.csv"))
    assert [spec[3].grad_reduce_in_fp32 for spec in plain.specs] == [True, False]
    assert [spec[3].recompute for spec in plain.specs] == ["none", "none"]  # stated: kept
    assert [r.get("assumed") for r in report(plain, DEFAULT_EFFICIENCY)["rows"]] == [None, {"grad_reduce_in_fp32": 0}]
    fp32 = [(*spec[:3], dataclasses.replace(spec[3], grad_reduce_in_fp32=True)) for spec in plain.specs]
    assert evaluate(stack_designs(*zip(*fp32))).feasible.tolist() == [True, False]
    assert bool(evaluate(stack_designs(*zip(*plain.specs))).feasible.all())
    stated = read_rows(_write(rows.assign(grad_reduce_in_fp32=1), tmp_path / "stated.csv"))
    assert [spec[3].grad_reduce_in_fp32 for spec in stated.specs] == [True, True]


def test_an_unstated_gradient_precision_under_a_narrow_format_follows_the_stack(tmp_path):
    """grad_reduce_in_fp32 unstated in fp8 / mxfp8 / nvfp4: bf16 on a Megatron-Core row, FSDP or not, where it
    would fit in fp32 too (Llama 3 8B on 8 GB200; NeMo 25.04's Megatron-FSDP Llama 3 70B FP8 on 64 GB200), the
    stack's setting (NeMo 2's and Megatron-Bridge's benchmark scripts), not an inference (nothing under
    `assumed`); fp32 on a torchtitan row (FSDP2's only reduce dtype)."""
    modern = pd.read_csv(DATA / "modern_runs.csv")
    ids = ["mbridge-25.11-gb200-llama3-8b-fp8-8", "nemo-25.04-gb200-llama3-70b-fp8-64",
           "titan-2412-h100-llama3-8b-fsdp-compile-fp8-8"]
    rows = modern[modern["id"].isin(ids)].set_index("id").loc[ids].reset_index()
    assert list(rows["fsdp"]) == [0, 1, 1] and list(rows["grad_reduce_in_fp32"]) == [0, 0, 1]  # as they ran
    plain = read_rows(_write(rows.drop(columns=["grad_reduce_in_fp32"]), tmp_path / "plain.csv"))
    assert [spec[3].grad_reduce_in_fp32 for spec in plain.specs] == [False, False, True]
    assert all("grad_reduce_in_fp32" not in r.get("assumed", {}) for r in report(plain, DEFAULT_EFFICIENCY)["rows"])
    fp32 = [(*spec[:3], dataclasses.replace(spec[3], grad_reduce_in_fp32=True)) for spec in plain.specs]
    assert bool(evaluate(stack_designs(*zip(*fp32))).feasible.all())  # a default, not a fit


def test_a_row_that_fits_only_with_offloading_offloads_the_fewest_layers(tmp_path):
    """offload_layers unstated: none where the run fits without (Llama 3 8B on 8 GB200); where nothing else fits
    (Megatron-Bridge 25.09's Llama 3 70B on 64 GB200, Megatron-FSDP with recompute none, whose recipe offloads 40
    of 80 layers), the fewest layers whose activations wait in host memory, one fewer does not fit; a stated
    count wins."""
    modern = pd.read_csv(DATA / "modern_runs.csv")
    ids = ["mbridge-25.11-gb200-llama3-8b-fp8-8", "mbridge-25.09-gb200-llama3-70b-fp8-64"]
    rows = modern[modern["id"].isin(ids)].set_index("id").loc[ids].reset_index()
    plain = read_rows(_write(rows.drop(columns=["offload_layers"]), tmp_path / "plain.csv"))
    kept = plain.specs[1][3].offload_layers
    assert plain.specs[0][3].offload_layers == 0 and 0 < kept < 80
    assert [r.get("assumed") for r in report(plain, DEFAULT_EFFICIENCY)["rows"]] == [None, {"offload_layers": kept}]
    spec = plain.specs[1]
    fewer = [(*spec[:3], dataclasses.replace(spec[3], offload_layers=k)) for k in (0, kept - 1, kept)]
    assert evaluate(stack_designs(*zip(*fewer))).feasible.tolist() == [False, False, True]
    stated = read_rows(_write(rows, tmp_path / "stated.csv"))
    assert [s[3].offload_layers for s in stated.specs] == [0, 40] and stated.assumptions() == [{}, {}]


def test_auto_recompute_recomputes_the_fewest_layers_that_fit(tmp_path):
    """`recompute=auto` goes none, selective, then full on the fewest layers of each stage (Megatron's block
    method), then all: NeMo 24.07's GPT-3 20B (44 layers, tp 2, pp 1) with fp32 gradients (its yaml's default;
    its run script reduced in bf16, as the file types it, and fits with none) needs neither all nor none
    recomputed."""
    modern = pd.read_csv(DATA / "modern_runs.csv")
    fp32 = modern[modern["id"] == "nemo-24.07-h100-gpt3-20b-fp8-64"].assign(grad_reduce_in_fp32=1)
    fp32_rows = read_rows(_write(fp32, tmp_path / "fp32.csv"))
    spec = fp32_rows.specs[0]
    mapping = spec[3]
    assert mapping.recompute == "full" and 0 < mapping.recompute_layers < 44
    lighter = [dataclasses.replace(mapping, recompute="selective", recompute_layers=0),
               dataclasses.replace(mapping, recompute_layers=mapping.recompute_layers - 1), mapping]
    result = evaluate(stack_designs([spec[0]] * 3, [spec[1]] * 3, [spec[2]] * 3, lighter))
    assert result.feasible.tolist() == [False, False, True]
    # the report says what was inferred: a recompute for every `auto` row, the partial one here
    partial = report(fp32_rows, DEFAULT_EFFICIENCY)["rows"][0]["assumed"]
    assert partial == {"recompute": f"full, {mapping.recompute_layers} layers a stage"}
    rows = read_rows(str(DATA / "modern_runs.csv"))
    out = report(rows, DEFAULT_EFFICIENCY)
    assumed = {r["id"]: r.get("assumed") for r in out["rows"]}
    assert assumed["nemo-24.07-h100-gpt3-20b-fp8-64"] == {"recompute": "none"}  # bf16 gradients: fits as is
    assert assumed["dgxc-v25.05.05-h100-nemotron4-15b-bf16-16"] == {"recompute": "selective"}
    assert assumed["mbridge-26.04.01-h100-qwen3-235b-a22b-fp8-256"] == {"recompute": "none"}  # auto, fits as is
    assert assumed["titan-2412-h100-llama3-8b-fsdp-8"] == {"framework": "torchtitan"}  # its recompute is stated
    assert assumed["dgxc-v25.04.02-h100-llama3-8b-fp8-8"] == {"recompute": "none"}
    assert out["summary"]["assumed_rows"] == 139  # the 100 `auto` rows and the 39 torchtitan rows
