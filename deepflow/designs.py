"""A design found by the optimizer as a config that `deepflow evaluate design=<file>` reads back.

The optimizer works on `DesignBatch` fields (SI units, categorical codes); a person and the CLI work
on the specs of the config groups (human units, names). `design_config` turns one design of a space
back into complete `hardware`, `system`, `model` and `mapping` sections (the run's presets with the
searched fields replaced), and `apply_design_file` puts such a file's sections into a composed
config (the `design=<path>` option of every command), command-line `group.field=value` overrides
still applying on top.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Iterable, Optional

import yaml
from omegaconf import DictConfig, OmegaConf, open_dict
from omegaconf.errors import OmegaConfBaseException

from analytical.codes import (
    ATTENTION_KERNEL_CODES,
    CNN_ARCH_CODES,
    CUDA_GRAPH_CODES,
    DP_MODE_CODES,
    ELEMENTWISE_CODES,
    EP_DISPATCHER_CODES,
    FFN_CODES,
    GB,
    GIB,
    KIND_CODES,
    MASTER_PARAMS_CODES,
    MIB,
    OPTIMIZER_STATE_DTYPE_CODES,
    PRECISION_CODES,
    RECOMPUTE_CODES,
    TFLOPS,
    TOPOLOGY_CODES,
    US,
)
from analytical.choices import PEAK_FORMATS
from analytical.power_cap import operating_point, power_budget_w
from analytical.stack import OVERLAP_KINDS
from deepflow.presets import GROUP_SPECS, ConfigError, to_spec

# DesignBatch field -> (config group, spec field, factor from SI to the spec's unit, codes or None)
SPEC_FIELDS: dict[str, tuple[str, str, float, Optional[dict]]] = {
    "peak_fp32_flops_per_s": ("hardware", "peak_tflops_fp32", 1 / TFLOPS, None),
    "peak_tf32_flops_per_s": ("hardware", "peak_tflops_tf32", 1 / TFLOPS, None),
    "peak_fp16_flops_per_s": ("hardware", "peak_tflops_fp16", 1 / TFLOPS, None),
    "peak_bf16_flops_per_s": ("hardware", "peak_tflops_bf16", 1 / TFLOPS, None),
    "peak_fp8_flops_per_s": ("hardware", "peak_tflops_fp8", 1 / TFLOPS, None),
    "peak_fp4_flops_per_s": ("hardware", "peak_tflops_fp4", 1 / TFLOPS, None),
    "compute_units": ("hardware", "compute_units", 1.0, None),
    "peak_exp_per_s": ("hardware", "peak_tera_exp_per_s", 1e-12, None),
    "sram_bytes": ("hardware", "sram_mib", 1 / MIB, None),
    "sram_bw_bytes_per_s": ("hardware", "sram_bw_tb_per_s", 1e-12, None),
    "hbm_bytes": ("hardware", "hbm_gib", 1 / GIB, None),
    "hbm_bw_bytes_per_s": ("hardware", "hbm_bw_gb_per_s", 1 / GB, None),
    "scale_up_bw_bytes_per_s": ("hardware", "scale_up_bw_gb_per_s", 1 / GB, None),
    # the system's per-device NIC setting wins over the accelerator's (analytical.design._row)
    "scale_out_bw_bytes_per_s": ("system", "scale_out_gbit_per_device", 8 / GB, None),
    "kernel_launch_s": ("hardware", "kernel_launch_us", 1 / US, None),
    "tile_m": ("hardware", "tile_m", 1.0, None),
    "tile_n": ("hardware", "tile_n", 1.0, None),
    "tdp_w": ("hardware", "tdp_w", 1.0, None),
    "num_devices": ("system", "num_devices", 1.0, None),
    "devices_per_node": ("system", "devices_per_node", 1.0, None),
    "scale_up_domain": ("system", "scale_up_domain", 1.0, None),
    "topology": ("system", "topology", 1.0, TOPOLOGY_CODES),
    "scale_up_latency_s": ("system", "scale_up_latency_us", 1 / US, None),
    "scale_out_latency_s": ("system", "scale_out_latency_us", 1 / US, None),
    "oversubscription": ("system", "oversubscription", 1.0, None),
    "ps_server_bw_bytes_per_s": ("system", "ps_server_gbit", 8.0 / GB, None),
    "ps_server_sum_bytes_per_s": ("system", "ps_server_sum_gb_per_s", 1 / GB, None),
    "straggler_cv": ("system", "straggler_cv", 1.0, None),
    "host_link_bw_bytes_per_s": ("system", "host_link_gb_per_s", 1 / GB, None),
    "kind": ("model", "kind", 1.0, KIND_CODES),
    "num_layers": ("model", "num_layers", 1.0, None),
    "hidden_size": ("model", "hidden_size", 1.0, None),
    "num_heads": ("model", "num_heads", 1.0, None),
    "num_kv_heads": ("model", "num_kv_heads", 1.0, None),
    "ffn_hidden_size": ("model", "ffn_hidden_size", 1.0, None),
    "ffn_type": ("model", "ffn_type", 1.0, FFN_CODES),
    "vocab_size": ("model", "vocab_size", 1.0, None),
    "seq_length": ("model", "seq_length", 1.0, None),
    "num_experts": ("model", "num_experts", 1.0, None),
    "top_k": ("model", "top_k", 1.0, None),
    "moe_ffn_hidden_size": ("model", "moe_ffn_hidden_size", 1.0, None),
    "num_shared_experts": ("model", "num_shared_experts", 1.0, None),
    "head_dim": ("model", "head_dim", 1.0, None),
    **{name: ("model", name, 1.0, None) for name in ("kv_lora_rank", "q_lora_rank", "qk_rope_head_dim", "v_head_dim")},
    "moe_router_num_groups": ("model", "moe_router_num_groups", 1.0, None),
    "moe_router_group_topk": ("model", "moe_router_group_topk", 1.0, None),
    "window_size": ("model", "window_size", 1.0, None),
    "window_attn_skip_freq": ("model", "window_attn_skip_freq", 1.0, None),
    "activation_clamp": ("model", "activation_clamp", 1.0, None),
    "rope_mscale": ("model", "rope_mscale", 1.0, None),
    "linear_bias": ("model", "linear_bias", 1.0, None),
    "gemm_m": ("model", "gemm_m", 1.0, None),
    "gemm_n": ("model", "gemm_n", 1.0, None),
    "gemm_k": ("model", "gemm_k", 1.0, None),
    "cnn_arch": ("model", "cnn_arch", 1.0, {None: 0, **CNN_ARCH_CODES}),
    "image_size": ("model", "image_size", 1.0, None),
    "num_classes": ("model", "num_classes", 1.0, None),
    **{name: ("mapping", name, 1.0, None) for name in
       ("tp", "pp", "dp", "cp", "ep", "vp", "sequence_parallel", "micro_batch_size", "global_batch_size",
        "zero_stage", "fsdp", "dp_shard", "distributed_optimizer", "flash_attention", "overlap_dp_comm",
        "overlap_tp_comm", "overlap_pp_comm", "overlap_ep_comm", "offload_layers", "fused_jobs", "ps_shards",
        "staleness", "fused_cross_entropy", "recompute_layers", "grad_reduce_in_fp32", "etp", "fp8_param_gather",
        "fp8_attention", "fused_expert_mlp", "moe_capacity_factor", "moe_pad_to_capacity", "sp_keeps_gathered_input")},
    "dp_mode": ("mapping", "dp_mode", 1.0, DP_MODE_CODES),
    "recompute": ("mapping", "recompute", 1.0, RECOMPUTE_CODES),
    "precision": ("mapping", "precision", 1.0, PRECISION_CODES),
    "ep_dispatcher": ("mapping", "ep_dispatcher", 1.0, EP_DISPATCHER_CODES),
    "cuda_graph": ("mapping", "cuda_graph", 1.0, CUDA_GRAPH_CODES),
    "elementwise": ("mapping", "elementwise", 1.0, ELEMENTWISE_CODES),
    "attention_kernel": ("mapping", "attention_kernel", 1.0, ATTENTION_KERNEL_CODES),
    "optimizer_state_dtype": ("mapping", "optimizer_state_dtype", 1.0, OPTIMIZER_STATE_DTYPE_CODES),
    "master_params": ("mapping", "master_params", 1.0, MASTER_PARAMS_CODES),
}
SPEC_GROUPS = ("hardware", "system", "model", "mapping")


def _typed(spec_cls: type, field: str, value: float, codes: Optional[dict]) -> Any:
    """A float from a DesignBatch as the spec field's type (name, bool, int or float)."""
    if codes is not None:
        return {code: name for name, code in codes.items()}[int(round(value))]
    default = {f.name: f for f in dataclasses.fields(spec_cls)}[field]
    kind = str(default.type)
    if "bool" in kind:  # (an Optional bool's None, the stack's default, is resolved in a batch: 0 is false)
        return bool(round(value))
    if kind.startswith("Optional") and value == 0.0:
        return None  # a batch's 0 for "derive it" (head_dim, v_head_dim)
    if "int" in kind:
        return int(round(value))
    return float(value)


def group_sections(cfg: DictConfig) -> dict[str, dict[str, Any]]:
    """Complete, validated `{group: {field: value}}` of the spec groups of a composed config. An overlap the
    mapping leaves to the stack's default is written as the flag it resolves to (`MappingSpec.overlap`), the
    value a design built from the config carries whatever a space then changes."""
    specs = {g: to_spec(g, cfg[g]) for g in SPEC_GROUPS}
    sections = {g: dataclasses.asdict(spec) for g, spec in specs.items()}
    sections["mapping"].update({field: specs["mapping"].overlap(kind) for kind, field in OVERLAP_KINDS.items()})
    return sections


def chip_section(chip, values: dict[str, float]) -> dict[str, Any]:
    """The `chip` section of a design whose chip inputs (`analytical.chip.spec.CHIP_FIELDS`, codes
    and SI units as a space decodes them) are `values`, around the template `ChipSpec` `chip`; the
    implied last part of each split is set so that the split sums to 1."""
    from analytical.chip.spec import CHIP_CATEGORY_CODES, IMPLIED_FRACTIONS

    out = dataclasses.asdict(chip)
    for name, value in values.items():
        if name in CHIP_CATEGORY_CODES:
            out[name] = {code: n for n, code in CHIP_CATEGORY_CODES[name].items()}[int(round(value))]
        elif name == "kernel_launch_s":
            out["kernel_launch_us"] = value / US
        elif name == "vdd_v":
            out[name] = None if value == 0 else float(value)
        elif name == "fp8":
            out[name] = bool(round(value))
        elif name in ("flops_per_cycle_per_unit", "scale_out_lanes", "tile_m", "tile_n"):
            out[name] = int(round(value))
        else:
            out[name] = float(value)
    for implied, parts in IMPLIED_FRACTIONS.items():
        out[implied] = 1.0 - sum(out[part] for part in parts)
    return out


# the accelerator fields a part's operating point scales with its clock (analytical.power_cap)
CLOCKED_FIELDS = tuple(f"peak_tflops_{f}" for f in PEAK_FORMATS) + ("peak_tera_exp_per_s",)


def at_operating_point(section: dict[str, Any]) -> dict[str, Any]:
    """The hardware section of a part whose clock-scaled fields (`CLOCKED_FIELDS`) are the rates its operating point
    runs (`analytical.power_cap`: a power limit, a nominal rating) and that names neither: the section a searched
    peak, already such a rate, is written into, so that `deepflow evaluate` runs it as written. A power limit stays
    the power budget (`tdp_w`)."""
    spec = to_spec("hardware", section)
    clock = operating_point(spec).clock
    return {**section, **{f: section[f] * clock for f in CLOCKED_FIELDS}, "tdp_w": power_budget_w(spec),
            "power_limit_w": None, "nominal_tdp_w": None, "nominal_peak_tflops_bf16": None}


def design_config(cfg: DictConfig, values: dict[str, float], chip=None) -> tuple[dict[str, dict[str, Any]], list[str]]:
    """The spec sections of one design: the config's groups with `values` (`{DesignBatch field or
    chip input: SI value}`, e.g. a space's decoded point plus the derived dp) put in; with a
    template `chip` (`ChipSpec`, a joint space's), a `chip` section too, and the accelerator fields
    the chip derives are left to `deepflow evaluate` to derive again. Returns the sections and the
    fields that have no spec field (they cannot be written back; empty for the shipped spaces)."""
    from analytical.chip.spec import CHIP_FIELDS
    from analytical.space import DERIVED_FIELDS

    sections = group_sections(cfg)
    unmapped = []
    if chip is not None:
        sections["chip"] = chip_section(chip, {k: v for k, v in values.items() if k in CHIP_FIELDS})
        values = {k: v for k, v in values.items() if k not in CHIP_FIELDS and k not in DERIVED_FIELDS}
    if any(SPEC_FIELDS.get(name, ("",))[0] == "hardware" and SPEC_FIELDS[name][1] in CLOCKED_FIELDS for name in values):
        sections["hardware"] = at_operating_point(sections["hardware"])
    for name, value in values.items():
        if name not in SPEC_FIELDS:
            unmapped.append(name)
            continue
        group, field, factor, codes = SPEC_FIELDS[name]
        scaled = value if codes is not None else value * factor
        sections[group][field] = _typed(GROUP_SPECS[group], field, scaled, codes)
    for group, fields in sections.items():
        if group != "chip":
            to_spec(group, fields)  # the result must be a valid design: fail here, not in a user's evaluate
    if "chip" in sections:
        from analytical.chip.spec import chip_from_dict

        chip_from_dict(sections["chip"])
    return sections, unmapped


def design_yaml(sections: dict[str, dict[str, Any]], header: str) -> str:
    """The YAML text of a design config, with `header` as comment lines on top."""
    comment = "".join(f"# {line}\n" for line in header.splitlines())
    return comment + OmegaConf.to_yaml(OmegaConf.create(sections))


def split_design(overrides: list[str]) -> tuple[Optional[str], list[str]]:
    """`(path or None, other overrides)`: the `design=<path>` option taken out of the overrides."""
    paths = [o.partition("=")[2] for o in overrides if o.partition("=")[0] == "design"]
    rest = [o for o in overrides if o.partition("=")[0] != "design"]
    if len(paths) > 1:
        raise ConfigError(f"design= is given {len(paths)} times: allowed once")
    return (paths[0] if paths else None), rest


DESIGN_HELP = "a design YAML (e.g. the best_design.yaml of a deepflow optimize run)"


def read_design_file(path: str, other_keys: Iterable[str] = ()) -> DictConfig:
    """The top level of the design file at `path`: sections named for config groups (`GROUP_SPECS`),
    each a mapping of its fields, and maybe other keys of the command's config (`other_keys`); else a
    ConfigError that names what is wrong with the file and never quotes it (a path given by mistake
    may be any file: its lines, keys and values stay out of the message)."""
    file = Path(path)
    if not file.is_file():
        raise ConfigError(f"design={path!r}: no such file: allowed {DESIGN_HELP}")
    not_design = f"design={path!r} is not a design file"
    sections = ", ".join(GROUP_SPECS)
    try:
        text = file.read_text()
        raw = yaml.safe_load(text)
        loaded = OmegaConf.load(file) if isinstance(raw, dict) else None
    except UnicodeDecodeError:
        raise ConfigError(f"{not_design}: it is not text: allowed {DESIGN_HELP}") from None
    except yaml.YAMLError as exc:  # its message may quote the file (an alias, a duplicate key): where only
        mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
        where = f" (the parser stops at line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        raise ConfigError(f"{not_design}: it is not valid YAML{where}: allowed {DESIGN_HELP}") from None
    except (OmegaConfBaseException, ValueError, TypeError):  # keys or values a config cannot hold
        raise ConfigError(f"{not_design}: its YAML mapping is not a config: allowed {DESIGN_HELP}") from None
    if loaded is None:
        kind = {list: "a list", type(None): "nothing"}.get(type(raw), "one value")
        raise ConfigError(f"{not_design}: it holds {kind}, not a YAML mapping of the sections {sections}")
    keys = [str(k) for k in loaded]
    unknown = [i for i, k in enumerate(keys) if k not in GROUP_SPECS and k not in other_keys]
    if not any(k in GROUP_SPECS for k in keys):
        raise ConfigError(f"{not_design}: none of its {len(keys)} top-level keys is a section: allowed {sections}")
    if unknown:
        lines = _key_lines(text)
        at = (f" (line{'s' if len(unknown) > 1 else ''} {', '.join(str(lines[i]) for i in unknown)})"
              if len(lines) == len(keys) else "")
        raise ConfigError(f"design={path!r} has {len(unknown)} top-level key(s) that are no section{at}: "
                          f"allowed {sections}")
    for key in (k for k in keys if k in GROUP_SPECS):
        if not isinstance(loaded[key], DictConfig) and not (key == "chip" and loaded[key] is None):
            raise ConfigError(f"design={path!r}: section {key} is not a mapping of {key} fields (field: value "
                              f"lines indented under `{key}:`)")
    return loaded


def _key_lines(text: str) -> list[int]:
    """The line (from 1) of each top-level key of the YAML mapping `text`, in order."""
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError:
        return []
    return [key.start_mark.line + 1 for key, _ in node.value] if isinstance(node, yaml.MappingNode) else []


def apply_design_file(cfg: DictConfig, path: str, overrides: list[str]) -> DictConfig:
    """`cfg` with the sections of the design file at `path` in place of its groups; the
    `group.field=value` overrides among `overrides` are applied again on top."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    loaded = read_design_file(path, other_keys=list(cfg))
    with open_dict(cfg):
        for key in loaded:
            cfg[key] = loaded[key]
        for override in OverridesParser.create().parse_overrides(overrides):
            key = override.key_or_group
            if "." in key and key.split(".", 1)[0] in loaded:
                OmegaConf.update(cfg, key, override.value(), force_add=True)
    return cfg
