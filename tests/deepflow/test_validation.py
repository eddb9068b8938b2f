"""Accuracy on the published runs is bounded (the figures themselves come from `deepflow validate`)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from analytical import DEFAULT_EFFICIENCY, evaluate, stack_designs
from analytical.specs import ATTENTION_KERNELS, CUDA_GRAPHS, ELEMENTWISE
from deepflow.presets import ConfigError
from deepflow.calibration import fit_efficiency
from deepflow.validation import read_rows, report

DATA = Path(__file__).resolve().parents[2] / "experiments" / "validation"


def test_published_runs_error_is_bounded():
    result = report(read_rows(str(DATA / "published_runs.csv")), DEFAULT_EFFICIENCY)
    assert result["summary"]["n"] == 30
    # one set of constants for every generation: 4.2 % here (the A100-only constants gave 3.4 %)
    assert result["summary"]["mape"] < 0.045
    assert result["summary"]["max_abs_error"] < 0.12
    assert result["summary"]["infeasible_rows"] == 0


def test_every_modern_run_is_feasible_and_bounded():
    """Every configuration of modern_runs.csv was trained: none may come out infeasible."""
    result = report(read_rows(str(DATA / "modern_runs.csv")), DEFAULT_EFFICIENCY)
    summary = result["summary"]
    assert summary["n"] >= 60 and summary["infeasible_rows"] == 0
    assert summary["mape"] < 0.13  # measured 9.4 % (README, Validation)


def test_modern_runs_software_columns_hold_allowed_values():
    """cuda_graph, fp8_attention, the gpt-oss MLP's clamp and biases and fused_expert_mlp, typed from each
    release's recipe (experiments/validation/README.md)."""
    frame = pd.read_csv(DATA / "modern_runs.csv", dtype=str, keep_default_na=False)
    assert set(frame["cuda_graph"]) <= {"", *CUDA_GRAPHS} and (frame["cuda_graph"] == "full").sum() >= 10
    fp8_attention = frame["fp8_attention"] == "1"
    assert set(frame["fp8_attention"]) <= {"", "0", "1"} and fp8_attention.sum() >= 5
    assert set(frame.loc[fp8_attention, "precision"]) <= {"fp8", "mxfp8", "nvfp4"}  # FP8 attention needs an fp8 recipe
    rows = read_rows(str(DATA / "modern_runs.csv"))
    assert sum(spec[3].cuda_graph == "full" for spec in rows.specs) == (frame["cuda_graph"] == "full").sum()
    assert sum(spec[3].fp8_attention for spec in rows.specs) == fp8_attention.sum()
    # the clamped, biased gpt-oss experts and the fused grouped MLP (analytical/step/eager_ops.py)
    oss = frame["model"] == "gpt-oss-120b"
    assert oss.sum() >= 10 and set(frame.loc[oss, "activation_clamp"]) == {"7.0"}
    assert set(frame.loc[~oss, "activation_clamp"]) == {""} and set(frame.loc[oss, "linear_bias"]) == {"1"}
    fused = frame["fused_expert_mlp"] == "1"
    assert fused.sum() >= 5 and set(frame["fused_expert_mlp"]) <= {"", "0", "1"}
    assert (frame.loc[fused, "num_experts"].astype(float) > 1).all()  # a grouped MLP is an MoE layer's
    by_id = dict(zip(rows.ids, rows.specs))
    for i in frame.loc[oss, "id"]:
        assert (by_id[i][2].activation_clamp, by_id[i][2].linear_bias, by_id[i][2].rope_mscale) == (7.0, True, 1.3466)
    assert set(frame.loc[oss, "rope_mscale"]) == {"1.3466"} and set(frame.loc[~oss, "rope_mscale"]) == {""}
    assert sum(spec[3].fused_expert_mlp for spec in rows.specs) == fused.sum()
    # torchtitan without torch.compile runs its Llama block's element-wise modules eagerly; NeMo 2.x its Nemotron
    # models' squared ReLU (and nothing else: the Nemotron rows of NeMo 24.07 compile it)
    eager = frame["elementwise"].isin(["eager", "eager_fused_norm"])
    assert set(frame["elementwise"]) <= {"", *ELEMENTWISE} and eager.sum() >= 5
    assert all(i.startswith("titan-") for i in frame.loc[eager, "id"])
    activation = frame["elementwise"] == "eager_activation"
    relu2 = frame["ffn_type"] == "squared_relu"
    assert activation.sum() == 14 and relu2.sum() == 17 and (relu2 | ~activation).all()
    assert all(i.startswith(("nemo-25.", "dgxc-v25.05.05-")) for i in frame.loc[activation, "id"])
    assert not activation[frame["id"].str.startswith("nemo-24.07-")].any()
    assert [spec[3].elementwise for spec in rows.specs] == [v or "fused" for v in frame["elementwise"]]
    # torchtitan's SDPA ran PyTorch's FlashAttention-2 backend (cuDNN opt-in from pytorch/pytorch#138522)
    fa2 = frame["attention_kernel"] == "fa2"
    assert set(frame["attention_kernel"]) <= {"", *ATTENTION_KERNELS} and fa2.sum() >= 20
    assert all(i.startswith("titan-") for i in frame.loc[fa2, "id"])
    assert [spec[3].attention_kernel for spec in rows.specs] == [v or "native" for v in frame["attention_kernel"]]
    # torchtitan's DTensor tensor parallelism keeps the gathered GEMM inputs; Transformer Engine's linears do not
    kept = frame["sp_keeps_gathered_input"] == "1"
    assert set(frame["sp_keeps_gathered_input"]) <= {"", "1"} and kept.sum() == 19
    titan_tp = frame["id"].str.startswith("titan-") & (frame["tp"].astype(int) > 1)
    assert (kept == titan_tp).all() and (frame.loc[kept, "sequence_parallel"] == "1").all()
    # an empty cell is the row's framework's default: torchtitan's plan (moot where tp is 1), else 0
    assert [spec[3].sp_keeps_gathered_input for spec in rows.specs] == list(kept | frame["id"].str.startswith("titan-"))


def test_nemo_24_07_rows_keep_the_launchers_optimizer_state():
    """The NeMo 24.07 rows carry their launcher's Apex optimizer (bf16 weights' 16-bit remainders; Nemotron-340B
    bf16 moments, no master copy, bf16 gradients), which lets the Nemotron-340B row fit 80 GiB without recompute
    (`auto`); with fp32 master weights, moments and gradients it would have to recompute every layer."""
    frame = pd.read_csv(DATA / "modern_runs.csv", dtype=str, keep_default_na=False)
    nemo = frame["id"].str.startswith("nemo-24.07-")
    assert nemo.sum() == 12 and set(frame.loc[~nemo, "master_params"]) == {""}
    assert set(frame.loc[nemo, "master_params"]) == {"remainder", "none"}
    rows = read_rows(str(DATA / "modern_runs.csv"))
    spec = dict(zip(rows.ids, rows.specs))["nemo-24.07-h100-nemotron4-340b-fp8-128"]
    mapping = spec[3]
    assert (mapping.optimizer_state_dtype, mapping.master_params, mapping.grad_reduce_in_fp32) == ("bf16", "none", False)
    assert mapping.recompute == "none"  # the lightest recompute that fits (the row says auto)
    fp32_states = dataclasses.replace(mapping, optimizer_state_dtype="fp32", master_params="fp32",
                                      grad_reduce_in_fp32=True)
    result = evaluate(stack_designs([spec[0]] * 2, [spec[1]] * 2, [spec[2]] * 2, [mapping, fp32_states]))
    assert result.feasible.tolist() == [True, False]


def test_vtrain_rows_are_ranked_within_each_model():
    result = report(read_rows(str(DATA / "vtrain_ground_truth_multi.csv")), DEFAULT_EFFICIENCY)
    assert result["summary"]["n"] == 109
    assert result["summary"]["mape"] < 0.12
    assert all(g["kendall_tau"] > 0.4 for g in result["by_group"].values())


def test_fit_on_one_source_and_hold_out_the_other():
    rows = read_rows(str(DATA / "published_runs.csv"))
    train = np.array([s.startswith("Narayanan") for s in rows.sources])
    eff = fit_efficiency(rows.subset(train))
    held_out = report(rows.subset(~train), eff)["summary"]
    assert held_out["n"] == int((~train).sum()) > 0
    assert held_out["mape"] < 0.10


def test_unseen_gpu_and_fp8_rows_are_predicted(tmp_path):
    frame = pd.read_csv(DATA / "published_runs.csv").head(2).copy()
    frame["gpu"] = "h100-sxm-80gb"
    frame["precision"] = ["fp8", "bf16"]
    frame["id"] = ["h100-fp8", "h100-bf16"]
    path = tmp_path / "h100.csv"
    frame.to_csv(path, index=False)
    result = report(read_rows(str(path)), DEFAULT_EFFICIENCY)
    fp8, bf16 = (r["predicted_s"] for r in result["rows"])
    assert 0 < fp8 < bf16


def test_names_spelled_in_another_case_are_read_as_theirs(tmp_path):
    """A table's spelling of a preset's name (`H100-SXM-80GB`, `H100_SXM 80GB`) reads as the preset (a name that spells
    none is an error listing them), and of a precision, a recompute or an MLP (` BF16`, `Selective`, `GELU`) as the
    allowed value; NVIDIA's precision names (FP8-CS, fp8_ds, FP8-MX) as the precisions they are."""
    frame = pd.read_csv(DATA / "published_runs.csv").head(1)
    _write(frame.assign(gpu="h100-sxm-80gb"), tmp_path / "lower.csv")
    _write(frame.assign(gpu="H100-SXM-80GB"), tmp_path / "upper.csv")
    _write(frame.assign(gpu=" H100_SXM 80GB"), tmp_path / "spaced.csv")
    lower, upper, spaced = (read_rows(str(tmp_path / f"{n}.csv")) for n in ("lower", "upper", "spaced"))
    assert upper.specs[0][0].name == "h100-sxm-80gb" and upper.specs == lower.specs == spaced.specs
    with pytest.raises(ConfigError, match=r"hardware='H100-SXM-81GB' is not a known preset: allowed .*h100-sxm-80gb"):
        read_rows(_write(frame.assign(gpu="H100-SXM-81GB"), tmp_path / "typo.csv"))
    _write(frame.assign(gpu="h100-sxm-80gb", precision=" BF16", recompute="Selective", ffn_type="GELU"),
           tmp_path / "names.csv")
    named = read_rows(str(tmp_path / "names.csv")).specs[0]
    assert (named[3].precision, named[3].recompute, named[2].ffn_type) == ("bf16", "selective", "gelu")
    tables = frame.loc[frame.index.repeat(3)].assign(gpu="b200", precision=["FP8-CS", "fp8_ds", "FP8-MX"])
    assert [spec[3].precision for spec in read_rows(_write(tables, tmp_path / "tables.csv")).specs] == [
        "fp8", "fp8", "mxfp8"]


def test_an_empty_time_is_the_one_the_published_tokens_per_second_imply(tmp_path):
    """A row that gives its tokens/s/GPU and no time has the time they imply, GBS x seq / (tokens/s/GPU x GPUs), as
    modern_runs.csv derives its own; an empty time without them, or a time that is not positive, is an error
    naming the row and the column (never a NaN error), from validate and calibrate alike."""
    modern = pd.read_csv(DATA / "modern_runs.csv")
    rows = modern[modern["time_derived"] == 1].head(3)
    typed = read_rows(_write(rows, tmp_path / "typed.csv"))
    derived = read_rows(_write(rows.assign(measured_iter_time_s=float("nan")), tmp_path / "derived.csv"))
    tokens_per_s = rows["measured_tokens_per_s_per_gpu"] * rows["num_gpus"]
    expected = (rows["global_batch_size"] * rows["seq_length"] / tokens_per_s).to_numpy()
    assert np.allclose(derived.measured_s, expected) and np.allclose(derived.measured_s, typed.measured_s, rtol=1e-3)
    no_column = read_rows(_write(rows.drop(columns=["measured_iter_time_s"]), tmp_path / "no_column.csv"))
    assert np.allclose(no_column.measured_s, expected)
    empty = rows.assign(measured_iter_time_s=[float("nan"), 1.0, 1.0], measured_tokens_per_s_per_gpu=float("nan"))
    for frame, name in ((empty, "empty"), (rows.assign(measured_iter_time_s=[1.0, -2.0, 1.0]), "negative")):
        with pytest.raises(ConfigError, match=rf"row {frame['id'].iloc[1 if name == 'negative' else 0]}: "
                                              r"measured_iter_time_s = .* is invalid: allowed a positive number"):
            read_rows(_write(frame, tmp_path / f"{name}.csv"))
    vtrain = pd.read_csv(DATA / "vtrain_ground_truth_multi.csv").head(2)
    vtrain.loc[1, "iteration time (ms)"] = float("nan")
    with pytest.raises(ConfigError, match=r"line 3: iteration time \(ms\) = nan is invalid"):
        read_rows(_write(vtrain, tmp_path / "vtrain.csv"))


def test_unknown_gpu_and_missing_column_name_the_problem(tmp_path):
    frame = pd.read_csv(DATA / "published_runs.csv").head(1)
    bad_gpu = frame.assign(gpu="z100")
    bad_gpu.to_csv(tmp_path / "gpu.csv", index=False)
    with pytest.raises(ConfigError, match="gpu"):
        read_rows(str(tmp_path / "gpu.csv"))
    (tmp_path / "empty.csv").write_text("")
    with pytest.raises(ConfigError, match="empty.csv': not a CSV"):
        read_rows(str(tmp_path / "empty.csv"))
    frame.drop(columns=["tp"]).to_csv(tmp_path / "col.csv", index=False)
    with pytest.raises(ConfigError, match="missing columns tp"):
        read_rows(str(tmp_path / "col.csv"))


def test_measured_memory_is_compared_where_a_row_states_it(tmp_path):
    """Rows with `measured_memory_gib` get the predicted memory and its error; the others get neither."""
    first_two = pd.read_csv(DATA / "published_runs.csv").head(2)
    frame = pd.concat([first_two, first_two.iloc[[1]]], ignore_index=True)
    frame["id"] = ["a", "b", "b-again"]
    plain = report(read_rows(_write(frame, tmp_path / "plain.csv")), DEFAULT_EFFICIENCY)
    assert "memory_n" not in plain["summary"] and "memory_error" not in plain["rows"][0]
    predicted = [None] * 3
    frame["measured_memory_gib"] = [np.nan, 40.0, 20.0]
    result = report(read_rows(_write(frame, tmp_path / "memory.csv")), DEFAULT_EFFICIENCY)
    rows = result["rows"]
    assert "memory_error" not in rows[0]
    for row, measured in zip(rows[1:], (40.0, 20.0)):
        assert row["measured_memory_gib"] == measured
        assert row["memory_error"] == pytest.approx(row["predicted_memory_gib"] / measured - 1.0)
        predicted[rows.index(row)] = row["predicted_memory_gib"]
    assert predicted[1] == predicted[2] > 0  # the same configuration twice, two readings
    summary = result["summary"]
    assert summary["memory_n"] == 2
    assert summary["memory_mape"] == pytest.approx(np.mean([abs(r["memory_error"]) for r in rows[1:]]))
    assert summary["memory_within_10pct"] == sum(abs(r["memory_error"]) <= 0.10 for r in rows[1:])


def test_breakdown_gives_each_row_its_time_and_measured_memory_by_part(tmp_path):
    """`breakdown=True`: every row's time parts add up to its predicted time (largest first), and the rows
    that state a measured memory get its parts adding up to the predicted memory; without it, neither."""
    frame = pd.read_csv(DATA / "modern_runs.csv")
    frame = frame[frame["measured_memory_gib"].notna()].head(2)
    frame = pd.concat([frame, pd.read_csv(DATA / "published_runs.csv").head(1)], ignore_index=True)
    rows = read_rows(_write(frame, tmp_path / "mixed.csv"))
    plain = report(rows, DEFAULT_EFFICIENCY)["rows"]
    assert not any("time_breakdown_s" in r or "memory_breakdown_gib" in r for r in plain)
    result = report(rows, DEFAULT_EFFICIENCY, breakdown=True)
    for row in result["rows"]:
        parts = row["time_breakdown_s"]
        assert sum(parts.values()) == pytest.approx(row["predicted_s"], rel=1e-9)
        assert list(parts.values()) == sorted(parts.values(), reverse=True) and all(v > 0 for v in parts.values())
        assert {"forward_compute", "backward_compute"} <= set(parts)
    with_memory = [r for r in result["rows"] if "memory_breakdown_gib" in r]
    assert len(with_memory) == 2 and "measured_memory_gib" not in result["rows"][2]
    for row in with_memory:
        assert sum(row["memory_breakdown_gib"].values()) == pytest.approx(row["predicted_memory_gib"], rel=1e-9)


def test_a_one_row_model_has_no_kendall_tau_and_the_report_is_strict_json(tmp_path):
    import json

    frame = pd.read_csv(DATA / "published_runs.csv").head(2).copy()
    frame["model"] = ["a", "b"]
    result = report(read_rows(_write(frame, tmp_path / "two.csv")), DEFAULT_EFFICIENCY)
    assert result["by_group"]["a"]["kendall_tau"] is None
    json.dumps(result, allow_nan=False)  # raises on NaN


def _write(frame: pd.DataFrame, path) -> str:
    frame.to_csv(path, index=False)
    return str(path)


def test_a_row_without_stack_columns_gets_the_stacks_overlaps_and_its_platforms_domain(tmp_path):
    """A measured run that states only its mapping (the published_runs.csv columns): with the distributed
    optimizer its dp / tp / pp traffic overlaps as Megatron-Core's recipes run it, and a GB200 run's NVLink
    domain is the NVL72 rack's (capped at the run's GPUs), not its 4-GPU tray; stated columns win."""
    modern = pd.read_csv(DATA / "modern_runs.csv")
    base = list(pd.read_csv(DATA / "published_runs.csv", nrows=0).columns)
    rows = modern[modern["id"].isin(["dgxc-v25.04.02-h100-gpt3-175b-fp8-128",
                                     "mbridge-25.11-gb200-llama3-8b-fp8-8",
                                     "dgxc-v25.05.05-gb200-llama3.1-405b-fp8-128"])]
    rows[base + ["flash_attention"]].to_csv(tmp_path / "plain.csv", index=False)
    rows.to_csv(tmp_path / "typed.csv", index=False)
    plain, typed = read_rows(str(tmp_path / "plain.csv")), read_rows(str(tmp_path / "typed.csv"))
    # the report names what the file leaves to the defaults
    defaulted = {"overlap_dp_comm", "scale_up_domain", "cuda_graph"}
    assert defaulted <= set(report(plain, DEFAULT_EFFICIENCY)["unstated_columns"])
    assert not defaulted & set(typed.unstated_columns)
    by_id = {i: spec for i, spec in zip(plain.ids, plain.specs)}
    _, system, _, mapping = by_id["dgxc-v25.04.02-h100-gpt3-175b-fp8-128"]
    assert (mapping.overlap("dp"), mapping.overlap("tp"), mapping.overlap("pp")) == (True, True, True)
    assert system.scale_up_domain == 8  # an HGX node
    assert by_id["mbridge-25.11-gb200-llama3-8b-fp8-8"][1].scale_up_domain == 8  # all 8 GPUs, in one rack
    assert by_id["dgxc-v25.05.05-gb200-llama3.1-405b-fp8-128"][1].scale_up_domain == 72
    for (_, sys_p, _, map_p), (_, sys_t, _, map_t) in zip(plain.specs, typed.specs):
        assert sys_p.scale_up_domain == sys_t.scale_up_domain
        assert [map_p.overlap(k) for k in ("dp", "tp", "pp")] == [map_t.overlap(k) for k in ("dp", "tp", "pp")]
    stated = rows[base + ["flash_attention"]].assign(overlap_tp_comm=0, scale_up_domain=rows["gpus_per_node"])
    stated.to_csv(tmp_path / "stated.csv", index=False)
    stated = read_rows(str(tmp_path / "stated.csv"))
    assert not any(spec[3].overlap("tp") for spec in stated.specs)
    assert [spec[1].scale_up_domain for spec in stated.specs] == list(rows["gpus_per_node"])  # 4 on GB200 trays


def test_unstated_mapping_columns_read_as_the_stacks_run_them(tmp_path):
    """sequence_parallel, distributed_optimizer and cp left out: sequence parallelism on where tp > 1 (NeMo 2's,
    Megatron-Bridge's and torchtitan's runs), the distributed optimizer on a Megatron-Core row without FSDP (their
    recipes' default), and the context parallelism that fills the run's GPUs; every row of modern_runs.csv states
    them so, and dropping the three columns changes no mapping. vTrain's rows, priced with all-reduces and a
    plain Adam by its simulator, keep both off; a stated value wins."""
    modern = pd.read_csv(DATA / "modern_runs.csv")
    typed = read_rows(str(DATA / "modern_runs.csv"))
    plain = read_rows(_write(modern.drop(columns=["sequence_parallel", "distributed_optimizer", "cp"]),
                             tmp_path / "plain.csv"))
    assert [s[3].sequence_parallel for s in plain.specs] == list(modern["tp"] > 1)
    assert [s[3].cp for s in plain.specs] == list(modern["cp"]) and max(modern["cp"]) > 1
    assert [s[3] for s in plain.specs] == [s[3] for s in typed.specs]
    vtrain = read_rows(str(DATA / "vtrain_ground_truth_multi.csv")).specs
    assert not any(s[3].sequence_parallel or s[3].distributed_optimizer for s in vtrain)
    tensor_parallel = modern[modern["tp"] > 1].head(3)
    stated = read_rows(_write(tensor_parallel.assign(sequence_parallel=0, distributed_optimizer=0),
                              tmp_path / "stated.csv"))
    assert len(stated.ids) == 3 and not any(s[3].sequence_parallel or s[3].distributed_optimizer
                                            for s in stated.specs)


def test_an_unstated_dp_fills_the_gpus_as_a_performance_table_implies(tmp_path):
    """dp left out (a performance table gives TP, PP, CP and the GPU count, not DP): num_gpus / (tp x pp x cp), which
    reads every row of modern_runs.csv as typed; a GPU count that tp x pp x cp does not divide is an error naming
    the row."""
    modern = pd.read_csv(DATA / "modern_runs.csv")
    typed = read_rows(str(DATA / "modern_runs.csv"))
    plain = read_rows(_write(modern.drop(columns=["dp"]), tmp_path / "plain.csv"))
    assert plain.specs == typed.specs and "dp" in plain.unstated_columns
    odd = modern.head(1).drop(columns=["dp"]).assign(num_gpus=modern["tp"].iloc[0] * modern["pp"].iloc[0] * 3 + 1)
    with pytest.raises(ConfigError, match=f"row {modern['id'].iloc[0]}: dp is empty and tp x pp x cp"):
        read_rows(_write(odd, tmp_path / "odd.csv"))


ARCHITECTURE_COLUMNS = ("num_kv_heads", "head_dim", "v_head_dim", "kv_lora_rank", "q_lora_rank", "qk_rope_head_dim",
                        "ffn_hidden_size", "ffn_type", "num_experts", "top_k", "moe_ffn_hidden_size",
                        "num_shared_experts", "moe_router_num_groups", "moe_router_group_topk", "window_size",
                        "window_attn_skip_freq", "activation_clamp", "rope_mscale", "linear_bias")


def test_empty_architecture_columns_come_from_the_model_preset_the_row_names(tmp_path):
    """A row naming a model preset (conf/model) with the preset's layers, width and heads reads its empty
    architecture columns from it: DeepSeek-V3 keeps its latent attention, 256 experts and node-limited routing,
    Llama 3 70B its grouped-query attention, as typed; a row whose shape differs from the preset's keeps the
    plain defaults; a stated value wins."""
    modern = pd.read_csv(DATA / "modern_runs.csv")
    ids = ["mbridge-26.04-b300-deepseek-v3-mxfp8-256", "mbridge-25.11-h100-llama3-70b-fp8-64"]
    rows = modern[modern["id"].isin(ids)].set_index("id").loc[ids].reset_index()
    plain = read_rows(_write(rows.drop(columns=list(ARCHITECTURE_COLUMNS)), tmp_path / "plain.csv"))
    typed = read_rows(_write(rows, tmp_path / "typed.csv"))
    assert [s[2] for s in plain.specs] == [s[2] for s in typed.specs]
    deepseek = plain.specs[0][2]
    assert (deepseek.kv_lora_rank, deepseek.num_experts, deepseek.moe_router_num_groups) == (512, 256, 8)
    assert plain.specs[1][2].num_kv_heads == 8
    other = read_rows(_write(rows.drop(columns=list(ARCHITECTURE_COLUMNS)).assign(num_layers=[60, 79]),
                             tmp_path / "other.csv"))
    assert [(s[2].num_experts, s[2].kv_heads) for s in other.specs] == [(1, 128), (1, 64)]
    stated = read_rows(_write(rows.drop(columns=list(ARCHITECTURE_COLUMNS)).assign(rope_mscale=1.5),
                              tmp_path / "stated.csv"))
    assert [(s[2].rope_mscale, s[2].num_experts) for s in stated.specs] == [(1.5, 256), (1.5, 1)]


def test_a_model_a_table_spells_its_own_way_is_the_preset_of_its_family_and_shape(tmp_path):
    """A row whose model names no preset reads its empty architecture columns and vocabulary from the one preset of
    its family (leading letters) and shape: "llama3.1-405b" is llama3-405b, as typed, and published_runs.csv's
    "gpt-1.7B" rows gpt-1.7b; Nemotron-22B shares its shape with gpt-18.4b but not its family, so its empty
    vocabulary is an error naming the column; a stated vocabulary wins."""
    modern = pd.read_csv(DATA / "modern_runs.csv")
    ids = ["mbridge-25.11-h100-llama3.1-405b-fp8-1024", "nemo-24.07-h100-nemotron-22b-fp8-64"]
    rows = modern[modern["id"].isin(ids)].set_index("id").loc[ids].reset_index()
    bare = rows.drop(columns=list(ARCHITECTURE_COLUMNS) + ["vocab_size"])
    llama = read_rows(_write(bare.head(1), tmp_path / "llama.csv"))
    assert llama.specs[0][2] == read_rows(_write(rows.head(1), tmp_path / "typed.csv")).specs[0][2]
    with pytest.raises(ConfigError, match=f"row {ids[1]}: vocab_size is empty and the row's model 'nemotron-22b'"):
        read_rows(_write(bare, tmp_path / "bare.csv"))
    assert read_rows(_write(bare.assign(vocab_size=256000), tmp_path / "stated.csv")).specs[1][2].vocab_size == 256000
    published = pd.read_csv(DATA / "published_runs.csv")
    assert read_rows(_write(published.drop(columns=["vocab_size"]), tmp_path / "gpt.csv")).specs == read_rows(
        str(DATA / "published_runs.csv")).specs


def test_a_row_that_only_names_its_model_takes_its_layers_width_and_heads_from_the_preset(tmp_path):
    """A row that leaves num_layers, hidden_size and num_heads empty (a table names its model) takes them, and every
    other architecture column and the vocabulary, from the preset its model names, as a table spells it
    (`LLAMA3_70B`): Llama 3 70B and DeepSeek-V3 read as typed; a model that is no preset is an error naming the
    first empty column."""
    modern = pd.read_csv(DATA / "modern_runs.csv")
    ids = ["mbridge-25.11-h100-llama3-70b-fp8-64", "mbridge-26.04-b300-deepseek-v3-mxfp8-256"]
    rows = modern[modern["id"].isin(ids)].set_index("id").loc[ids].reset_index()
    bare = rows.drop(columns=list(ARCHITECTURE_COLUMNS) + ["vocab_size", "num_layers", "hidden_size", "num_heads"])
    named = read_rows(_write(bare.assign(model=["LLAMA3_70B", "DeepSeek-V3"]), tmp_path / "named.csv"))
    typed = read_rows(_write(rows, tmp_path / "typed.csv")).specs
    assert [(a, b, dataclasses.replace(m, name=t[2].name), p) for (a, b, m, p), t in zip(named.specs, typed)] == typed
    assert {"num_layers", "hidden_size", "num_heads"} <= set(named.unstated_columns)
    with pytest.raises(ConfigError, match=f"row {ids[0]}: num_layers is empty and the row's model 'llama9-1t'"):
        read_rows(_write(bare.assign(model="llama9-1t"), tmp_path / "unknown.csv"))


def test_an_unstated_fp8_param_gather_follows_nemo_2_and_megatron_bridge_fp8_recipes(tmp_path):
    """fp8_param_gather unstated on a Megatron-Core row: on under per-tensor fp8 without FSDP (NeMo 2's and
    Megatron-Bridge's fp8 recipes keep fp8 primary weights: what every such row of modern_runs.csv states but NeMo
    24.07's, whose launcher did not), off under Megatron-FSDP and in bf16; a stated 0 wins."""
    modern = pd.read_csv(DATA / "modern_runs.csv")
    ids = ["dgxc-v25.04.02-h100-gpt3-175b-fp8-128", "mbridge-25.09-gb200-llama3-70b-fp8-64",
           "dgxc-v25.04.02-h100-gpt3-175b-bf16-128", "nemo-24.07-h100-gpt3-175b-fp8-128"]
    rows = modern[modern["id"].isin(ids)].set_index("id").loc[ids].reset_index()
    assert list(rows["fp8_param_gather"].fillna(-1)) == [1, -1, -1, 0]  # as typed
    plain = read_rows(_write(rows.drop(columns=["fp8_param_gather"]), tmp_path / "plain.csv"))
    assert [spec[3].fp8_param_gather for spec in plain.specs] == [True, False, False, True]
    typed = read_rows(_write(rows, tmp_path / "typed.csv"))
    assert [spec[3].fp8_param_gather for spec in typed.specs] == [True, False, False, False]


def test_a_row_whose_source_names_torchtitan_gets_its_attention_kernel_and_tp_plan(tmp_path):
    """framework unstated: "torchtitan" where the source names it, whose SDPA runs FlashAttention-2 on Hopper and
    whose TP plan keeps the gathered inputs (a torchtitan TP row on H100 with both columns dropped predicts what
    it does typed); stated `framework=megatron` gives Transformer Engine's kernel; a bad value names the field."""
    modern = pd.read_csv(DATA / "modern_runs.csv")
    rows = modern[modern["id"] == "titan-2506-h100-llama3-8b-bf16-tp-64"]
    plain = rows.drop(columns=["attention_kernel", "sp_keeps_gathered_input"])
    typed, named = (read_rows(_write(f, tmp_path / f"{k}.csv")) for k, f in (("typed", rows), ("named", plain)))
    assert (named.specs[0][3].attention_kernel, named.specs[0][3].sp_keeps_gathered_input) == ("fa2", True)
    assert named.specs == typed.specs and named.assumptions() == [{"framework": "torchtitan"}]
    megatron = read_rows(_write(plain.assign(framework="megatron"), tmp_path / "megatron.csv"))
    assert (megatron.specs[0][3].attention_kernel, megatron.specs[0][3].sp_keeps_gathered_input) == ("native", False)
    assert megatron.assumptions() == [{}]
    slower = evaluate(stack_designs(*zip(*(named.specs + megatron.specs)))).step_time_s
    assert float(slower[0]) > float(slower[1])  # FlashAttention-2 below cuDNN's fused attention on H100
    with pytest.raises(ConfigError, match="framework='jax' is invalid: allowed megatron, torchtitan"):
        read_rows(_write(plain.assign(framework="jax"), tmp_path / "bad.csv"))


