"""A batch of designs as SI tensors: the input of every analytical function.

`DesignBatch` holds one float64 tensor of shape `(batch,)` per parameter. Categorical parameters
are integer codes stored as float64 (see the `*_CODES` tables). `stack_designs` converts lists of
human-unit specs (`analytical.specs`) to a batch; `DesignBatch.expand`, `index` and `cat` build
larger batches without Python loops.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Sequence

import torch

from analytical.specs import (FFN_TYPES, MODEL_KINDS, PEAK_FORMATS, PRECISION_FORMAT, PRECISIONS, RECOMPUTE, TOPOLOGIES, AcceleratorSpec,
                              MappingSpec, ModelSpec, SystemSpec)

DTYPE = torch.float64
PRECISION_CODES = {name: i for i, name in enumerate(PRECISIONS)}
# index into PEAK_FORMATS of each precision code: which peak (and J/FLOP) field its GEMMs use
PRECISION_FORMAT_INDEX = tuple(PEAK_FORMATS.index(PRECISION_FORMAT[p]) for p in PRECISIONS)
FFN_CODES = {name: i for i, name in enumerate(FFN_TYPES)}
KIND_CODES = {name: i for i, name in enumerate(MODEL_KINDS)}
RECOMPUTE_CODES = {name: i for i, name in enumerate(RECOMPUTE)}
TOPOLOGY_CODES = {name: i for i, name in enumerate(TOPOLOGIES)}

TFLOPS = 1e12
GB = 1e9
GIB = 2.0**30
MIB = 2.0**20
US = 1e-6


@dataclass
class DesignBatch:
    """Every parameter of `batch` designs, SI units, each a `(batch,)` float64 tensor."""

    # accelerator
    peak_fp32_flops_per_s: torch.Tensor
    peak_tf32_flops_per_s: torch.Tensor
    peak_fp16_flops_per_s: torch.Tensor
    peak_bf16_flops_per_s: torch.Tensor
    peak_fp8_flops_per_s: torch.Tensor
    peak_fp4_flops_per_s: torch.Tensor
    compute_units: torch.Tensor
    sram_bytes: torch.Tensor
    sram_bw_bytes_per_s: torch.Tensor
    hbm_bytes: torch.Tensor
    hbm_bw_bytes_per_s: torch.Tensor
    scale_up_bw_bytes_per_s: torch.Tensor
    scale_out_bw_bytes_per_s: torch.Tensor
    kernel_launch_s: torch.Tensor
    tile_m: torch.Tensor
    tile_n: torch.Tensor
    tdp_w: torch.Tensor
    # accelerator energy (analytical/energy.py; J per FLOP of the compute datapath with its operand
    # delivery, J per byte of SRAM/HBM traffic and per byte per link traversal, at the operating voltage;
    # static power drawn whatever the activity). Presets fill them from analytical/technology.py.
    flop_energy_fp32_j: torch.Tensor
    flop_energy_tf32_j: torch.Tensor
    flop_energy_fp16_j: torch.Tensor
    flop_energy_bf16_j: torch.Tensor
    flop_energy_fp8_j: torch.Tensor
    flop_energy_fp4_j: torch.Tensor
    sram_energy_j_per_byte: torch.Tensor
    hbm_energy_j_per_byte: torch.Tensor
    scale_up_energy_j_per_byte: torch.Tensor
    scale_out_energy_j_per_byte: torch.Tensor
    static_power_w: torch.Tensor
    # system
    num_devices: torch.Tensor
    devices_per_node: torch.Tensor
    scale_up_domain: torch.Tensor
    topology: torch.Tensor
    scale_up_latency_s: torch.Tensor
    scale_out_latency_s: torch.Tensor
    oversubscription: torch.Tensor
    # model
    kind: torch.Tensor
    num_layers: torch.Tensor
    hidden_size: torch.Tensor
    num_heads: torch.Tensor
    num_kv_heads: torch.Tensor
    ffn_hidden_size: torch.Tensor
    ffn_type: torch.Tensor
    vocab_size: torch.Tensor
    seq_length: torch.Tensor
    num_experts: torch.Tensor
    top_k: torch.Tensor
    moe_ffn_hidden_size: torch.Tensor
    num_shared_experts: torch.Tensor
    gemm_m: torch.Tensor
    gemm_n: torch.Tensor
    gemm_k: torch.Tensor
    # mapping
    tp: torch.Tensor
    pp: torch.Tensor
    dp: torch.Tensor
    cp: torch.Tensor
    ep: torch.Tensor
    vp: torch.Tensor
    sequence_parallel: torch.Tensor
    micro_batch_size: torch.Tensor
    global_batch_size: torch.Tensor
    recompute: torch.Tensor
    zero_stage: torch.Tensor
    fsdp: torch.Tensor
    distributed_optimizer: torch.Tensor
    precision: torch.Tensor
    flash_attention: torch.Tensor
    overlap_dp_comm: torch.Tensor
    overlap_tp_comm: torch.Tensor
    overlap_pp_comm: torch.Tensor
    offload_layers: torch.Tensor

    @property
    def batch_size(self) -> int:
        return self.tp.shape[0]

    def fields(self) -> dict[str, torch.Tensor]:
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}

    def replace(self, **changes: torch.Tensor | float) -> "DesignBatch":
        """A copy with some parameters changed; scalars are broadcast to the batch."""
        n = self.batch_size
        full = {k: (v if isinstance(v, torch.Tensor) else torch.full((n,), float(v), dtype=DTYPE))
                for k, v in changes.items()}
        return dataclasses.replace(self, **full)

    def index(self, idx: torch.Tensor | slice) -> "DesignBatch":
        """Designs selected by an index tensor or slice: shapes `(k,)`."""
        return DesignBatch(**{k: v[idx] for k, v in self.fields().items()})

    def expand(self, n: int) -> "DesignBatch":
        """A batch of one repeated n times (views, no copy)."""
        if self.batch_size != 1:
            raise ValueError("expand needs a batch of one design")
        return DesignBatch(**{k: v.expand(n) for k, v in self.fields().items()})

    @staticmethod
    def cat(batches: Sequence["DesignBatch"]) -> "DesignBatch":
        names = batches[0].fields().keys()
        return DesignBatch(**{k: torch.cat([getattr(b, k) for b in batches]) for k in names})


def _energy_fields(accelerator: AcceleratorSpec) -> dict[str, float]:
    from analytical.energy import accelerator_energy_fields  # energy imports this module

    return accelerator_energy_fields(accelerator)


def _accelerator_fields(accelerator: AcceleratorSpec, nic_gbit: float) -> dict[str, float]:
    from analytical.power_cap import apply_power_limit  # power_cap imports energy, energy this module

    fields = {
        "peak_fp32_flops_per_s": accelerator.peak_tflops_fp32 * TFLOPS,
        "peak_tf32_flops_per_s": accelerator.peak_tflops_tf32 * TFLOPS,
        "peak_fp16_flops_per_s": accelerator.peak_tflops_fp16 * TFLOPS,
        "peak_bf16_flops_per_s": accelerator.peak_tflops_bf16 * TFLOPS,
        "peak_fp8_flops_per_s": accelerator.peak_tflops_fp8 * TFLOPS,
        "peak_fp4_flops_per_s": accelerator.peak_tflops_fp4 * TFLOPS,
        "compute_units": accelerator.compute_units,
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
        **_energy_fields(accelerator),
    }
    return apply_power_limit(fields, accelerator)


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
        "kind": KIND_CODES[model.kind],
        "num_layers": model.num_layers,
        "hidden_size": model.hidden_size,
        "num_heads": model.num_heads,
        "num_kv_heads": model.kv_heads,
        "ffn_hidden_size": model.ffn_size,
        "ffn_type": FFN_CODES[model.ffn_type],
        "vocab_size": model.vocab_size,
        "seq_length": model.seq_length,
        "num_experts": model.num_experts,
        "top_k": model.top_k,
        "moe_ffn_hidden_size": model.expert_ffn_size,
        "num_shared_experts": model.num_shared_experts,
        "gemm_m": model.gemm_m,
        "gemm_n": model.gemm_n,
        "gemm_k": model.gemm_k,
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
        "distributed_optimizer": float(mapping.distributed_optimizer),
        "precision": PRECISION_CODES[mapping.precision],
        "flash_attention": float(mapping.flash_attention),
        "overlap_dp_comm": float(mapping.overlap_dp_comm),
        "overlap_tp_comm": float(mapping.overlap_tp_comm),
        "overlap_pp_comm": float(mapping.overlap_pp_comm),
        "offload_layers": mapping.offload_layers,
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
    return DesignBatch(**{k: table[:, i].contiguous() for i, k in enumerate(names)})


def single_design(accelerator: AcceleratorSpec, system: SystemSpec, model: ModelSpec,
                  mapping: MappingSpec) -> DesignBatch:
    """A batch of one design."""
    return stack_designs([accelerator], [system], [model], [mapping])


def per_precision(d: DesignBatch, prefix: str, suffix: str) -> torch.Tensor:
    """`(batch,)` value of the field `<prefix><format><suffix>` (e.g. `peak_`, `_flops_per_s`) for the
    number format each design's precision runs its GEMMs in (`analytical.specs.PRECISION_FORMAT`)."""
    table = torch.stack([getattr(d, f"{prefix}{f}{suffix}") for f in PEAK_FORMATS], dim=-1)
    index = torch.as_tensor(PRECISION_FORMAT_INDEX, dtype=torch.int64)[d.precision.long().clamp(0, len(PRECISIONS) - 1)]
    return table.gather(-1, index.unsqueeze(-1)).squeeze(-1)
