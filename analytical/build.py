"""Specs (human units, `analytical.specs`) -> a `DesignBatch` (SI tensors): `single_design`,
`stack_designs`, with each accelerator's energies (`analytical.step.energy`) and power limit
(`analytical.power_cap`)."""

from __future__ import annotations

import dataclasses
from typing import Any, Sequence

import torch

from analytical.codes import (ATTENTION_KERNEL_CODES, CNN_ARCH_CODES, CUDA_GRAPH_CODES, DP_MODE_CODES, DTYPE,
                              ELEMENTWISE_CODES, EP_DISPATCHER_CODES, FFN_CODES, GB, GIB, KIND_CODES,
                              MASTER_PARAMS_CODES, MIB, OPTIMIZER_STATE_DTYPE_CODES, PRECISION_CODES, RECOMPUTE_CODES,
                              TFLOPS, TOPOLOGY_CODES, US)
from analytical.design import DesignBatch
from analytical.power_cap import apply_operating_point
from analytical.specs import AcceleratorSpec, MappingSpec, ModelSpec, SpecError, SystemSpec
from analytical.stack import OVERLAP_KINDS
from analytical.step.energy import accelerator_energy_fields


def _accelerator_fields(accelerator: AcceleratorSpec, nic_gbit: float) -> dict[str, float]:
    fields = {
        "peak_fp32_flops_per_s": accelerator.peak_tflops_fp32 * TFLOPS,
        "peak_tf32_flops_per_s": accelerator.peak_tflops_tf32 * TFLOPS,
        "peak_fp16_flops_per_s": accelerator.peak_tflops_fp16 * TFLOPS,
        "peak_bf16_flops_per_s": accelerator.peak_tflops_bf16 * TFLOPS,
        "peak_fp8_flops_per_s": accelerator.peak_tflops_fp8 * TFLOPS,
        "peak_fp4_flops_per_s": accelerator.peak_tflops_fp4 * TFLOPS,
        "compute_units": accelerator.compute_units,
        "peak_exp_per_s": accelerator.peak_tera_exp_per_s * 1e12,
        "sram_bytes": accelerator.sram_mib * MIB,
        "sram_bw_bytes_per_s": accelerator.sram_bw_tb_per_s * 1e12,
        "hbm_bytes": accelerator.hbm_gib * GIB,
        "hbm_bw_bytes_per_s": accelerator.hbm_bw_gb_per_s * GB,
        "scale_up_bw_bytes_per_s": accelerator.scale_up_bw_gb_per_s * GB,
        "scale_out_bw_bytes_per_s": nic_gbit * GB / 8.0,
        "kernel_launch_s": accelerator.kernel_launch_us * US,
        "tile_m": accelerator.tile_m,
        "tile_n": accelerator.tile_n,
        "tdp_w": accelerator.tdp_w,
        **accelerator_energy_fields(accelerator),
    }
    return apply_operating_point(fields, accelerator)


def _row(accelerator: AcceleratorSpec, system: SystemSpec, model: ModelSpec,
         mapping: MappingSpec) -> dict[str, float]:
    nic_gbit = (system.scale_out_gbit_per_device if system.scale_out_gbit_per_device is not None
                else accelerator.scale_out_gbit_per_s)
    dp = mapping.dp if mapping.dp is not None else max(
        1, system.num_devices // (mapping.tp * mapping.pp * mapping.cp))
    return {
        **_accelerator_fields(accelerator, nic_gbit),
        "num_devices": system.num_devices,
        "devices_per_node": system.devices_per_node,
        "scale_up_domain": system.scale_up_domain,
        "topology": TOPOLOGY_CODES[system.topology],
        "scale_up_latency_s": system.scale_up_latency_us * US,
        "scale_out_latency_s": system.scale_out_latency_us * US,
        "oversubscription": system.oversubscription,
        "ps_server_bw_bytes_per_s": system.ps_server_gbit * GB / 8.0,
        "ps_server_sum_bytes_per_s": system.ps_server_sum_gb_per_s * GB,
        "straggler_cv": system.straggler_cv,
        "host_link_bw_bytes_per_s": system.host_link_gb_per_s * GB,
        "kind": KIND_CODES[model.kind],
        "num_layers": model.num_layers,
        "hidden_size": model.hidden_size,
        "num_heads": model.num_heads,
        "num_kv_heads": model.kv_heads,
        "head_dim": model.head_dim or 0,
        "kv_lora_rank": model.kv_lora_rank,
        "q_lora_rank": model.q_lora_rank,
        "qk_rope_head_dim": model.qk_rope_head_dim,
        "v_head_dim": model.v_head_dim or 0,
        "ffn_hidden_size": model.ffn_size,
        "ffn_type": FFN_CODES[model.ffn_type],
        "vocab_size": model.vocab_size,
        "seq_length": model.seq_length,
        "num_experts": model.num_experts,
        "top_k": model.top_k,
        "moe_ffn_hidden_size": model.expert_ffn_size,
        "num_shared_experts": model.num_shared_experts,
        "moe_router_num_groups": model.moe_router_num_groups,
        "moe_router_group_topk": model.moe_router_group_topk,
        "window_size": model.window_size,
        "window_attn_skip_freq": model.window_attn_skip_freq,
        "activation_clamp": model.activation_clamp,
        "linear_bias": float(model.linear_bias),
        "rope_mscale": model.rope_mscale,
        "gemm_m": model.gemm_m,
        "gemm_n": model.gemm_n,
        "gemm_k": model.gemm_k,
        "cnn_arch": CNN_ARCH_CODES[model.cnn_arch] if model.cnn_arch is not None else 0,
        "image_size": model.image_size,
        "num_classes": model.num_classes,
        "tp": mapping.tp,
        "pp": mapping.pp,
        "dp": dp,
        "cp": mapping.cp,
        "ep": mapping.ep,
        "vp": mapping.vp,
        "sequence_parallel": float(mapping.sequence_parallel),
        "micro_batch_size": mapping.micro_batch_size,
        "global_batch_size": mapping.global_batch_size,
        "recompute": RECOMPUTE_CODES[mapping.recompute],
        "zero_stage": mapping.zero_stage,
        "fsdp": float(mapping.fsdp),
        "dp_shard": mapping.dp_shard,
        "distributed_optimizer": float(mapping.distributed_optimizer),
        "precision": PRECISION_CODES[mapping.precision],
        "flash_attention": float(mapping.flash_attention),
        **{field: float(mapping.overlap(kind)) for kind, field in OVERLAP_KINDS.items()},
        "overlap_ep_comm": float(mapping.overlap_ep_comm),
        "ep_dispatcher": EP_DISPATCHER_CODES[mapping.ep_dispatcher],
        "moe_capacity_factor": mapping.moe_capacity_factor,
        "moe_pad_to_capacity": float(mapping.moe_pad_to_capacity),
        "offload_layers": mapping.offload_layers,
        "fused_jobs": mapping.fused_jobs,
        "dp_mode": DP_MODE_CODES[mapping.dp_mode],
        "ps_shards": mapping.ps_shards,
        "staleness": mapping.staleness,
        "fused_cross_entropy": float(mapping.fused_cross_entropy),
        "recompute_layers": mapping.recompute_layers,
        "grad_reduce_in_fp32": float(mapping.grad_reduce_in_fp32),
        "optimizer_state_dtype": OPTIMIZER_STATE_DTYPE_CODES[mapping.optimizer_state_dtype],
        "master_params": MASTER_PARAMS_CODES[mapping.master_params],
        "etp": mapping.etp,
        "fp8_param_gather": float(mapping.fp8_param_gather),
        "cuda_graph": CUDA_GRAPH_CODES[mapping.cuda_graph],
        "fp8_attention": float(mapping.fp8_attention),
        "fused_expert_mlp": float(mapping.fused_expert_mlp),
        "elementwise": ELEMENTWISE_CODES[mapping.elementwise],
        "attention_kernel": ATTENTION_KERNEL_CODES[mapping.attention_kernel],
        "sp_keeps_gathered_input": float(mapping.sp_keeps_gathered_input),
    }


def stack_designs(accelerators: Sequence[AcceleratorSpec], systems: Sequence[SystemSpec],
                  models: Sequence[ModelSpec], mappings: Sequence[MappingSpec]) -> DesignBatch:
    """Validate equally long lists of specs and stack them into a `DesignBatch` of that length."""
    n = len(mappings)
    if not (len(accelerators) == len(systems) == len(models) == n) or n == 0:
        raise ValueError("stack_designs needs non-empty lists of equal length")
    rows = []
    for acc, sys_, mod, mp in zip(accelerators, systems, models, mappings):
        acc.validate(), sys_.validate(), mod.validate(), mp.validate()
        rows.append(_row(acc, sys_, mod, mp))
    names = list(rows[0])
    table = torch.tensor([[r[k] for k in names] for r in rows], dtype=DTYPE)
    return DesignBatch(**dict(zip(names, table.t().contiguous().unbind(0))))  # each field a contiguous row


def single_design(accelerator: AcceleratorSpec, system: SystemSpec, model: ModelSpec,
                  mapping: MappingSpec) -> DesignBatch:
    """A batch of one design."""
    return stack_designs([accelerator], [system], [model], [mapping])


def spec_from_dict(cls: type, values: dict[str, Any], spec_name: str) -> Any:
    """Build a spec from a plain mapping, rejecting unknown keys with the list of known ones."""
    known = {f.name for f in dataclasses.fields(cls)}
    for key in values:
        if key not in known:
            raise SpecError(spec_name, key, values[key], "fields " + ", ".join(sorted(known)))
    return cls(**values).validate()
