"""Read a CSV of measured runs into `Rows`: either schema of experiments/validation/README.md, a missing column or a
bad value named with its column and row, and each column a row leaves out read as its stack runs it (the framework's
defaults, the platform's NVLink domain, the named model preset's architecture) or as the run having trained implies
(`deepflow.trained`)."""

from __future__ import annotations

import dataclasses
import math
import re
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from analytical import SystemSpec
from analytical.choices import GRAD_DTYPE_PRECISIONS, NARROW_PRECISIONS
from analytical.specs import MappingSpec, ModelSpec
from analytical.stack import OVERLAP_KINDS
from deepflow.presets import ConfigError, available, load_preset, preset_dict, preset_key
from deepflow.trained import AUTO, assumed, lightest_that_fits, trained_etp
from deepflow.validation.rows import Rows, generation

PUBLISHED_REQUIRED = ("id", "seq_length", "precision",
                      "gpu", "num_gpus", "gpus_per_node", "tp", "pp", "micro_batch_size",
                      "global_batch_size", "recompute", "measured_iter_time_s")
VTRAIN_REQUIRED = ("Parameters (billion)", "# GPUs", "global batch", "micro batch", "hidden size",
                   "attention heads", "# layers", "sequence length", "tensor parallelism",
                   "data parallelism", "pipeline parallelism", "iteration time (ms)")
# the columns whose values are names (read case aside; the allowed values are lower case)
CHOICE_COLUMNS = {"precision", "recompute", "ffn_type", "ep_dispatcher", "cuda_graph", "elementwise",
                  "attention_kernel", "framework", "optimizer_state_dtype", "master_params"}
# a precision as NVIDIA's tables and scripts spell it: Megatron-Bridge's performance summaries' "FP8-CS" (per-tensor
# fp8, current scaling) and "FP8-MX" (MXFP8), their perf scripts' `fp8_cs`, `fp8_mx` and `fp8_ds` (delayed scaling)
PRECISION_SPELLINGS = {"fp8-cs": "fp8", "fp8_cs": "fp8", "fp8-ds": "fp8", "fp8_ds": "fp8",
                       "fp8-mx": "mxfp8", "fp8_mx": "mxfp8"}
# vTrain's repository states ~800 Gb/s between nodes of 8 A100s (taken as 100 Gb/s per GPU), full
# activation checkpointing, GPT vocabulary; precision and memory size are not stated. No sequence
# parallelism: its simulator prices tensor-parallel traffic as all-reduces (trace/a100/AR_GPU*_LUT); no
# distributed optimizer: its model steps a plain fused Adam (src/model/fused_adam.py).
VTRAIN_DEFAULTS = {"gpu": "a100-sxm-80gb", "scale_out_gbit_per_gpu": 100.0, "precision": "fp16",
                   "vocab_size": 51200, "gpus_per_node": 8, "recompute": "full", "sequence_parallel": 0,
                   "distributed_optimizer": 0}


def _opt(row: pd.Series, key: str, default):
    value = row.get(key, default)
    return default if value is None or (isinstance(value, float) and math.isnan(value)) else value


def _platform_domain(row: pd.Series, accelerator) -> int:
    """The NVLink domain of a row that states none: its node, or the platform's domain where the part ships in a
    larger one (`AcceleratorSpec.scale_up_domain`, e.g. GB200 NVL72), capped at the run's GPUs."""
    node, devices = int(row["gpus_per_node"]), int(row["num_gpus"])
    return max(node, min(accelerator.scale_up_domain, devices))


# the software stacks a row can name (`framework`), and the defaults each gives an unstated stack column
FRAMEWORKS = ("megatron", "torchtitan")


def framework(row: pd.Series) -> str:
    """The row's `framework`, else "torchtitan" where its `source` names it, else "megatron" (Megatron-Core's
    stacks: NeMo, Megatron-Bridge, Megatron-LM)."""
    stated = str(_opt(row, "framework", _named_framework(_opt(row, "source", ""))))
    if stated not in FRAMEWORKS:
        raise ConfigError(f"row {row['id']}: framework={stated!r} is invalid: allowed {', '.join(FRAMEWORKS)}")
    return stated


def _named_framework(source) -> str:
    return "torchtitan" if "torchtitan" in str(source).lower() else "megatron"


def _stack_defaults(stack: str, accelerator, precision: str, fsdp: bool) -> dict:
    """torchtitan: `F.scaled_dot_product_attention`, whose FlashAttention-2 backend runs on Hopper (cuDNN opt-in
    since pytorch/pytorch#138522; torchtitan puts cuDNN first on sm100 only, pytorch/torchtitan#1196; on Ampere
    FA2 is native), and a TP plan that keeps each column-parallel linear's gathered input (`Replicate()`).
    megatron, in an 8- or 4-bit format (fp8, mxfp8, nvfp4): gradients reduced in bf16, as NVIDIA's benchmark
    scripts set them for every such recipe (NeMo @8cfedd7203 scripts/performance/helpers.py
    `set_precision_configs`: False with fp8; Megatron-Bridge @067f987df perf_recipes/_common.py `_perf_precision`:
    always False). megatron, without FSDP: the distributed optimizer, and fp8 primary weights gathered in fp8 by it
    under per-tensor fp8, as the fp8 recipes of NeMo 2 (v2.0.0 on: `bf16_with_fp8_mixed` fp8_params=True) and
    Megatron-Bridge (`bf16_with_fp8_current_scaling_mixed`) set them; Megatron-FSDP has neither (NeMo
    scripts/performance/helpers.py `set_mcore_fsdp_configs`: no fp8 param gather)."""
    if stack == "torchtitan":
        return {"attention_kernel": "fa2" if generation(accelerator) == "hopper" else "native",
                "sp_keeps_gathered_input": 1}
    grads = {"grad_reduce_in_fp32": 0} if precision in NARROW_PRECISIONS else {}
    if fsdp:
        return grads
    # Megatron's distributed optimizer: NeMo 2's and Megatron-Bridge's recipes default use_distributed_optimizer=True
    return {"distributed_optimizer": 1, **grads, **({"fp8_param_gather": 1} if precision == "fp8" else {})}


MODEL_SHAPE = ("num_layers", "hidden_size", "num_heads")


def _shape(fields) -> tuple | None:
    """`(num_layers, hidden_size, num_heads)` of a preset or a row; None where a row leaves any of them empty."""
    values = [_opt(fields, k, None) for k in MODEL_SHAPE]
    return None if any(v is None for v in values) else tuple(int(v) for v in values)


def _family(name) -> str:
    """A model name's family, its leading letters: `llama` of "Llama3.1-405B" and of llama3-405b."""
    found = re.match(r"[a-z]+", str(name).lower())
    return found.group(0) if found else ""


def _named_model(row: pd.Series, presets: dict) -> dict:
    """The fields of the model preset (conf/model) the row's `model` names (case aside), where the row's layers,
    width and heads are the preset's; else of the one preset of the model's family with that shape, where exactly
    one has it (a table's "Llama3.1-405B" is conf/model/llama3-405b; Llama 2 7B and Llama 3 8B share theirs, so
    neither is guessed, and Nemotron-22B is not gpt-18.4b); else none: what the row's empty architecture columns
    default to. A row that leaves its layers, width and heads empty takes them from the preset its model names
    (`preset_key`), and the preset is found by name alone. `presets` caches them per file."""
    name, shape = preset_key(_opt(row, "model", "")), _shape(row)
    if ("model", name) not in presets:
        known = {preset_key(p): p for p in available("model")}
        presets["model", name] = preset_dict("model", known[name]) if name in known else {}
    arch = presets["model", name]
    if arch and (shape is None or _shape(arch) == shape):
        return arch
    if shape is None:
        return {}
    if "model-shapes" not in presets:  # every preset by its shape, loaded once a file
        by_shape: dict[tuple, list[dict]] = {}
        for preset in available("model"):
            fields = preset_dict("model", preset)
            by_shape.setdefault((_family(preset), _shape(fields)), []).append(fields)
        presets["model-shapes"] = by_shape
    same = presets["model-shapes"].get((_family(name), shape), [])
    return same[0] if len(same) == 1 else {}


def _published_specs(row: pd.Series, flash_attention: bool, unstated: set | None = None,
                     presets: dict | None = None) -> tuple:
    """`(accelerator, system, model, mapping)` of one row; `unstated` collects the optional columns the CSV leaves
    out (read as their defaults); `presets` caches the presets already loaded, by (group, name) (loading one is
    most of a row's time)."""
    presets = {} if presets is None else presets

    def opt(key: str, default):
        if unstated is not None and key not in row.index:
            unstated.add(key)
        return _opt(row, key, default)

    where = f"row {row['id']}"
    try:
        if ("hardware", str(row["gpu"])) not in presets:
            presets["hardware", str(row["gpu"])] = load_preset("hardware", str(row["gpu"]))
        accelerator = dataclasses.replace(presets["hardware", str(row["gpu"])])  # each row its own copy
    except ConfigError as exc:
        raise ConfigError(f"{where}: gpu: {exc}") from None
    if opt("power_limit_w", None) is not None:  # the run's power cap (nvidia-smi -pl)
        accelerator = dataclasses.replace(accelerator, power_limit_w=float(row["power_limit_w"]))
    system = SystemSpec(name="cluster", num_devices=int(row["num_gpus"]),
                        devices_per_node=int(row["gpus_per_node"]),
                        scale_up_domain=int(opt("scale_up_domain", _platform_domain(row, accelerator))),
                        scale_out_gbit_per_device=float(opt("scale_out_gbit_per_gpu",
                                                             accelerator.scale_out_gbit_per_s)))
    preset = _named_model(row, presets)
    shape = {}
    for key in MODEL_SHAPE:  # a table names its model: its layers, width and heads come from the model's preset
        value = opt(key, preset.get(key))
        if value is None:
            raise ConfigError(f"{where}: {key} is empty and the row's model {str(_opt(row, 'model', ''))!r} is not a "
                              f"model preset: allowed a number, or a model of {', '.join(available('model'))}")
        shape[key] = int(value)
    heads = shape["num_heads"]

    def arch(key: str, default):  # an architecture column: the row's, else the named preset's, else `default`
        value = opt(key, preset.get(key))
        return default if value is None else value

    vocab = arch("vocab_size", None)  # what a table rarely states: the named model's, where the row leaves it empty
    if vocab is None:
        raise ConfigError(f"{where}: vocab_size is empty and the row's model {str(opt('model', ''))!r} names no model "
                          f"preset of its num_layers, hidden_size and num_heads: allowed a vocabulary size, or a model "
                          f"of {', '.join(available('model'))}")

    def width(key: str) -> int | None:  # an optional width: None where neither the row nor the preset gives one
        value = arch(key, None)
        return None if value is None else int(value)

    model = ModelSpec(name=str(opt("model", "model")), num_layers=shape["num_layers"],
                      hidden_size=shape["hidden_size"], num_heads=heads,
                      num_kv_heads=int(arch("num_kv_heads", heads)),
                      **{k: width(k) for k in ("head_dim", "v_head_dim", "moe_ffn_hidden_size")},
                      **{k: int(arch(k, 0)) for k in ("kv_lora_rank", "q_lora_rank", "qk_rope_head_dim")},
                      ffn_hidden_size=int(arch("ffn_hidden_size", 4 * shape["hidden_size"])),
                      ffn_type=str(arch("ffn_type", "gelu")), vocab_size=int(vocab),
                      seq_length=int(row["seq_length"]), num_experts=int(arch("num_experts", 1)),
                      top_k=int(arch("top_k", 1)), num_shared_experts=int(arch("num_shared_experts", 0)),
                      moe_router_num_groups=int(arch("moe_router_num_groups", 1)),
                      moe_router_group_topk=int(arch("moe_router_group_topk", 1)),
                      **{k: int(arch(k, 0)) for k in ("window_size", "window_attn_skip_freq")},
                      activation_clamp=float(arch("activation_clamp", 0.0)),
                      rope_mscale=float(arch("rope_mscale", 1.0)),
                      linear_bias=bool(int(arch("linear_bias", 0))))
    fsdp = bool(int(opt("fsdp", 0)))
    stack = _stack_defaults(framework(row), accelerator, str(row["precision"]), fsdp)
    tp, pp, ep, gpus = int(row["tp"]), int(row["pp"]), int(opt("ep", 1)), int(row["num_gpus"])
    if opt("dp", None) is None:  # as a performance table gives a mapping: dp is what fills the GPUs
        cp = int(opt("cp", 1))
        dp = gpus // max(tp * pp * cp, 1)
        if dp < 1 or dp * tp * pp * cp != gpus:
            raise ConfigError(f"{where}: dp is empty and tp x pp x cp = {tp * pp * cp} does not divide num_gpus = "
                              f"{gpus}: allowed a dp with tp x pp x dp x cp = num_gpus")
    else:
        dp = int(row["dp"])
        # context parallelism unstated: what fills the run's GPUs (tp * pp * dp * cp is the device count), else 1
        filled = gpus // max(tp * pp * dp, 1)
        cp = int(opt("cp", filled if filled > 1 and filled * tp * pp * dp == gpus else 1))
    mapping = MappingSpec(tp=tp, pp=pp, dp=dp, cp=cp, ep=ep, vp=int(opt("vp", 1)),
                          # unstated: on with tp > 1, as NeMo 2 (scripts/performance/helpers.py:476), Megatron-Bridge
                          # (scripts/performance/utils/overrides.py:478) and torchtitan (enable_sequence_parallel) run
                          sequence_parallel=bool(int(opt("sequence_parallel", int(tp > 1)))),
                          micro_batch_size=int(row["micro_batch_size"]),
                          global_batch_size=int(row["global_batch_size"]),
                          recompute=("none" if row["recompute"] == AUTO else str(row["recompute"])),
                          zero_stage=3 if fsdp else int(opt("zero_stage", 0)), fsdp=fsdp,
                          distributed_optimizer=bool(int(opt("distributed_optimizer",
                                                             stack.get("distributed_optimizer", 0)))),
                          precision=str(row["precision"]),
                          flash_attention=bool(int(opt("flash_attention", int(flash_attention)))),
                          offload_layers=int(opt("offload_layers", 0)),
                          dp_shard=int(opt("dp_shard", 0)),
                          ep_dispatcher=str(opt("ep_dispatcher", "alltoall")),
                          moe_capacity_factor=float(opt("moe_capacity_factor", 0.0)),
                          moe_pad_to_capacity=bool(int(opt("moe_pad_to_capacity", 0))),
                          cuda_graph=str(opt("cuda_graph", "none")),
                          fused_cross_entropy=bool(int(opt("fused_cross_entropy", 1))),
                          recompute_layers=int(opt("recompute_layers", 0)),
                          grad_reduce_in_fp32=bool(int(opt("grad_reduce_in_fp32",
                                                           stack.get("grad_reduce_in_fp32", 1)))),
                          optimizer_state_dtype=str(opt("optimizer_state_dtype", "fp32")),
                          master_params=str(opt("master_params", "fp32")),
                          fp8_param_gather=bool(int(opt("fp8_param_gather", stack.get("fp8_param_gather", 0)))),
                          fp8_attention=bool(int(opt("fp8_attention", 0))),
                          fused_expert_mlp=bool(int(opt("fused_expert_mlp", 0))),
                          elementwise=str(opt("elementwise", "fused")),
                          attention_kernel=str(opt("attention_kernel", stack.get("attention_kernel", "native"))),
                          sp_keeps_gathered_input=bool(int(opt("sp_keeps_gathered_input",
                                                               stack.get("sp_keeps_gathered_input", 0)))),
                          etp=int(opt("etp", trained_etp(tp, ep, dp, cp, model.num_experts))),
                          overlap_ep_comm=bool(int(opt("overlap_ep_comm", 0))),
                          # dp / tp / pp overlap a row does not state: the stack's default (MappingSpec.overlap)
                          **{field: (None if opt(field, None) is None else bool(int(row[field])))
                             for field in OVERLAP_KINDS.values()})
    for spec in (system, model, mapping):
        try:
            spec.validate()
        except ValueError as exc:
            raise ConfigError(f"{where}: {exc}") from None
    return accelerator, system, model, mapping


def _vtrain_row(row: pd.Series) -> dict:
    v = VTRAIN_DEFAULTS
    return {"id": f"vtrain-{row['Parameters (billion)']}B-t{row['tensor parallelism']}-d{row['data parallelism']}"
                  f"-p{row['pipeline parallelism']}-mb{row['micro batch']}-gb{row['global batch']}",
            "source": "vTrain (MICRO 2024) ground truth", "model": f"gpt-{row['Parameters (billion)']}B",
            "num_layers": row["# layers"], "hidden_size": row["hidden size"], "num_heads": row["attention heads"],
            "vocab_size": v["vocab_size"], "seq_length": row["sequence length"], "precision": v["precision"],
            "gpu": v["gpu"], "num_gpus": row["# GPUs"], "gpus_per_node": v["gpus_per_node"],
            "scale_out_gbit_per_gpu": v["scale_out_gbit_per_gpu"], "tp": row["tensor parallelism"],
            "pp": row["pipeline parallelism"], "dp": row["data parallelism"], "micro_batch_size": row["micro batch"],
            "global_batch_size": row["global batch"], "recompute": v["recompute"],
            "sequence_parallel": v["sequence_parallel"], "distributed_optimizer": v["distributed_optimizer"],
            "measured_iter_time_s": row["iteration time (ms)"] / 1000.0}


def is_vtrain(frame: pd.DataFrame) -> bool:
    return all(c in frame.columns for c in VTRAIN_REQUIRED)


LARGE_FILE_ROWS = 10_000  # a CSV this long shows a progress bar while it is read
TOKENS_COLUMN = "measured_tokens_per_s_per_gpu"


def check_measured(frame: pd.DataFrame, path: str, column: str, unit: str) -> np.ndarray:
    """`frame[column]` as floats; a cell that is not a positive number is a ConfigError naming the row."""
    values = pd.to_numeric(frame[column], errors="coerce").to_numpy(dtype=float)
    for i, (raw, value) in enumerate(zip(frame[column], values)):
        if not (np.isfinite(value) and value > 0):
            row = f"row {frame['id'].iloc[i]}" if "id" in frame.columns else f"line {i + 2}"
            more = f", or an empty cell with a positive {TOKENS_COLUMN}" if column == "measured_iter_time_s" else ""
            raise ConfigError(f"data={path!r}: {row}: {column} = {raw!r} is invalid: allowed a positive number "
                              f"({unit} per iteration){more}")
    return values


def measured_times_s(frame: pd.DataFrame, path: str) -> np.ndarray:
    """Seconds per iteration of each row of the published schema: `measured_iter_time_s`, or where that cell is empty,
    the time the row's published tokens/s/GPU imply, global_batch_size x seq_length / (tokens_per_s_per_gpu x
    num_gpus), as modern_runs.csv derives its times (`time_derived`); anything else not a positive number is a
    ConfigError naming the row and column."""
    frame = frame.copy()
    if TOKENS_COLUMN in frame.columns:
        tokens = pd.to_numeric(frame[TOKENS_COLUMN], errors="coerce")
        derived = (pd.to_numeric(frame["global_batch_size"], errors="coerce")
                   * pd.to_numeric(frame["seq_length"], errors="coerce")
                   / (tokens * pd.to_numeric(frame["num_gpus"], errors="coerce")))
        empty = frame["measured_iter_time_s"].isna() & (tokens > 0)
        frame["measured_iter_time_s"] = frame["measured_iter_time_s"].astype(object).where(~empty, derived)
    return check_measured(frame, path, "measured_iter_time_s", "seconds")


def read_rows(path: str, flash_attention: bool = False) -> Rows:
    """Read a CSV of either schema; a missing column or a bad value names the column and row."""
    try:
        frame = pd.read_csv(path)
    except FileNotFoundError:
        raise ConfigError(f"data={path!r}: no such file") from None
    except (pd.errors.EmptyDataError, pd.errors.ParserError, UnicodeDecodeError) as exc:
        raise ConfigError(f"data={path!r}: not a CSV ({str(exc).splitlines()[0]})") from None
    vtrain = is_vtrain(frame)
    if vtrain:
        check_measured(frame, path, "iteration time (ms)", "milliseconds")
        frame = pd.DataFrame([_vtrain_row(r) for _, r in frame.iterrows()])
    for column in CHOICE_COLUMNS.intersection(frame.columns):  # a table's spelling: `FP8`, ` Selective`
        frame[column] = frame[column].map(lambda v: v.strip().lower() if isinstance(v, str) else v)
    if "precision" in frame.columns:
        frame["precision"] = frame["precision"].map(lambda v: PRECISION_SPELLINGS.get(v, v))
    if TOKENS_COLUMN in frame.columns and "measured_iter_time_s" not in frame.columns:
        frame["measured_iter_time_s"] = np.nan  # every time from the tokens/s/GPU (`measured_times_s`)
    missing = [c for c in PUBLISHED_REQUIRED if c not in frame.columns]
    if missing:
        raise ConfigError(f"data={path!r}: missing columns {', '.join(missing)} (the schema is in "
                          "experiments/validation/README.md, or use a vTrain CSV)")
    measured = measured_times_s(frame, path)
    from tqdm import tqdm

    # reading the rows is the slow part of a large file: a progress bar (with the time left) from 10,000 rows
    rows = tqdm(frame.iterrows(), total=len(frame), unit="row", desc=f"reading {Path(path).name}",
                file=sys.stderr, disable=len(frame) < LARGE_FILE_ROWS)
    unstated: set[str] = set()
    presets: dict = {}
    specs = [_published_specs(row, flash_attention, unstated, presets) for _, row in rows]
    stated = {c: frame[c].notna().to_numpy() if c in frame.columns else np.zeros(len(frame), dtype=bool)
              for c in ("etp", "grad_reduce_in_fp32", "offload_layers", "framework")}
    auto = {i for i, r in enumerate(frame["recompute"]) if r == AUTO}
    # an unstated gradient precision, where it matters (bf16 or narrower: `analytical.step.param_bytes`) and the
    # row's stack leaves it at fp32 (`_stack_defaults`: a Megatron-Core row in fp8 / mxfp8 / nvfp4 reduces in bf16)
    grads = {i for i, spec in enumerate(specs) if not stated["grad_reduce_in_fp32"][i]
             and spec[3].grad_reduce_in_fp32 and spec[3].precision in GRAD_DTYPE_PRECISIONS}
    offload = set(np.flatnonzero(~stated["offload_layers"]).tolist())
    specs = lightest_that_fits(specs, auto, grads, offload)
    named = [_named_framework(s) for s in (frame["source"] if "source" in frame.columns else [""] * len(frame))]
    inferred = [{**({"framework": named[i]} if named[i] != "megatron" and not stated["framework"][i] else {}),
                 **assumed(spec, i in auto, bool(stated["etp"][i]), i in grads, i in offload)}
                for i, spec in enumerate(specs)]
    groups = [str(m) for m in frame["model"]] if "model" in frame.columns else list(frame["id"])
    sources = [str(s).split(";")[0].split(" Table")[0] for s in frame.get("source", frame["id"])]
    memory = (pd.to_numeric(frame["measured_memory_gib"], errors="coerce").to_numpy(dtype=float)
              if "measured_memory_gib" in frame.columns else None)
    return Rows(list(map(str, frame["id"])), groups, sources, specs,
                measured, memory, tuple(sorted(unstated)), inferred)
