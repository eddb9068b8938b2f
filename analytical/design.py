"""A batch of designs as SI tensors: the input of every analytical function.

`DesignBatch` holds one float64 tensor of shape `(batch,)` per parameter. Categorical parameters
are integer codes stored as float64 (the `*_CODES` tables of `analytical.codes`).
`analytical.build.stack_designs` converts lists of human-unit specs (`analytical.specs`) to a
batch; `DesignBatch.expand`, `index` and `cat` build larger batches without Python loops.
`memoizing` and `per_evaluation` let one evaluation compute each term derived from a batch once.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass
from typing import Sequence

import torch

from analytical.codes import PRECISION_FORMAT_INDEX
from analytical.specs import PEAK_FORMATS, PRECISIONS


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
    peak_exp_per_s: torch.Tensor  # special-function-unit exponentials per second; 0 = not modelled
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
    # accelerator energy (analytical/step/energy.py; J per FLOP of the compute datapath with its operand
    # delivery, J per byte of SRAM/HBM traffic and per byte per link traversal, at the operating voltage;
    # static power drawn whatever the activity). Presets fill them from analytical/chip/technology.py.
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
    ps_server_bw_bytes_per_s: torch.Tensor
    ps_server_sum_bytes_per_s: torch.Tensor  # 0: no limit
    straggler_cv: torch.Tensor
    host_link_bw_bytes_per_s: torch.Tensor  # 0: offloaded activations' copies not priced
    # model
    kind: torch.Tensor
    num_layers: torch.Tensor
    hidden_size: torch.Tensor
    num_heads: torch.Tensor
    num_kv_heads: torch.Tensor
    head_dim: torch.Tensor  # 0: hidden_size / num_heads
    kv_lora_rank: torch.Tensor  # > 0: multi-head latent attention (analytical.step.attention)
    q_lora_rank: torch.Tensor
    qk_rope_head_dim: torch.Tensor
    v_head_dim: torch.Tensor  # 0: head_dim
    ffn_hidden_size: torch.Tensor
    ffn_type: torch.Tensor
    vocab_size: torch.Tensor
    seq_length: torch.Tensor
    num_experts: torch.Tensor
    top_k: torch.Tensor
    moe_ffn_hidden_size: torch.Tensor
    num_shared_experts: torch.Tensor
    moe_router_num_groups: torch.Tensor
    moe_router_group_topk: torch.Tensor
    window_size: torch.Tensor  # sliding-window attention: keys a windowed query sees (0: none)
    window_attn_skip_freq: torch.Tensor  # every N-th layer full attention (0: every layer windowed)
    activation_clamp: torch.Tensor  # clamped gated MLP's limit (0: none)
    linear_bias: torch.Tensor  # linear layers with biases
    rope_mscale: torch.Tensor  # YaRN's attention factor on RoPE (1: none)
    gemm_m: torch.Tensor
    gemm_n: torch.Tensor
    gemm_k: torch.Tensor
    cnn_arch: torch.Tensor  # CNN_ARCH_CODES (0: not a CNN)
    image_size: torch.Tensor
    num_classes: torch.Tensor
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
    dp_shard: torch.Tensor  # HSDP shard degree (0: the sharded states split over all of dp x cp)
    distributed_optimizer: torch.Tensor
    precision: torch.Tensor
    flash_attention: torch.Tensor
    overlap_dp_comm: torch.Tensor
    overlap_tp_comm: torch.Tensor
    overlap_pp_comm: torch.Tensor
    overlap_ep_comm: torch.Tensor
    ep_dispatcher: torch.Tensor  # EP_DISPATCHER_CODES
    moe_capacity_factor: torch.Tensor  # 0: dropless
    moe_pad_to_capacity: torch.Tensor
    offload_layers: torch.Tensor
    fused_jobs: torch.Tensor
    dp_mode: torch.Tensor  # DP_MODE_CODES
    ps_shards: torch.Tensor
    staleness: torch.Tensor
    fused_cross_entropy: torch.Tensor
    recompute_layers: torch.Tensor
    grad_reduce_in_fp32: torch.Tensor
    optimizer_state_dtype: torch.Tensor  # OPTIMIZER_STATE_DTYPE_CODES: Adam's moments between steps
    master_params: torch.Tensor  # MASTER_PARAMS_CODES: the optimizer's copy of 16-bit or narrower weights
    etp: torch.Tensor  # 0: as tp
    fp8_param_gather: torch.Tensor  # fp8 primary weights under per-tensor fp8
    cuda_graph: torch.Tensor  # CUDA_GRAPH_CODES
    fp8_attention: torch.Tensor  # fused attention at the fp8 peak under narrow precisions
    fused_expert_mlp: torch.Tensor  # the experts' clamp and bias inside a fused grouped MLP
    elementwise: torch.Tensor  # ELEMENTWISE_CODES: fused or eager norms, rotary embedding and activation
    attention_kernel: torch.Tensor  # ATTENTION_KERNEL_CODES: the generation's own fused attention or FlashAttention-2
    sp_keeps_gathered_input: torch.Tensor  # sequence parallelism keeping the gathered GEMM inputs (DTensor)

    @property
    def batch_size(self) -> int:
        return self.tp.shape[0]

    def fields(self) -> dict[str, torch.Tensor]:
        return {name: getattr(self, name) for name in DESIGN_FIELDS}

    @property
    def tracks_grad(self) -> bool:
        """Whether a field requires a gradient, so that autograd must record an evaluation of the batch."""
        return any(getattr(self, name).requires_grad for name in DESIGN_FIELDS)

    def replace(self, **changes: torch.Tensor | float) -> "DesignBatch":
        """A copy with some parameters changed; scalars are broadcast to the batch."""
        n = self.batch_size
        full = {k: (v if isinstance(v, torch.Tensor)
                    else torch.full((n,), float(v), dtype=self.tp.dtype, device=self.tp.device))
                for k, v in changes.items()}
        return dataclasses.replace(self, **full)

    def to(self, device: torch.device | str | None = None, dtype: torch.dtype | None = None) -> "DesignBatch":
        """The batch on `device` (e.g. `cuda`) and/or in `dtype` (e.g. `torch.float32`); itself when
        nothing changes. The analytical model computes on whatever device and dtype its batch has."""
        if (device is None or torch.device(device) == self.tp.device) and (dtype is None or dtype == self.tp.dtype):
            return self
        return DesignBatch(**{k: v.to(device=device, dtype=dtype) for k, v in self.fields().items()})

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


DESIGN_FIELDS = tuple(f.name for f in dataclasses.fields(DesignBatch))  # (read once: dataclasses.fields is slow)


def per_precision(d: DesignBatch, prefix: str, suffix: str) -> torch.Tensor:
    """`(batch,)` value of the field `<prefix><format><suffix>` (e.g. `peak_`, `_flops_per_s`) for the
    number format each design's precision runs its GEMMs in (`analytical.specs.PRECISION_FORMAT`)."""
    table = torch.stack([getattr(d, f"{prefix}{f}{suffix}") for f in PEAK_FORMATS], dim=-1)
    formats = torch.as_tensor(PRECISION_FORMAT_INDEX, dtype=torch.int64, device=d.precision.device)
    index = formats[d.precision.long().clamp(0, len(PRECISIONS) - 1)]
    return table.gather(-1, index.unsqueeze(-1)).squeeze(-1)


# ---- per-evaluation memoization of derived terms: `evaluate` computes each derived tensor (the local
# tokens, a layer's parameters, ...) once per chunk, however many terms use it
_MEMO = "_per_evaluation_memo"
_MISSING = object()


def memoizing(d: DesignBatch) -> DesignBatch:
    """A private shallow copy of `d` on which `per_evaluation` functions compute each derived
    tensor once (same tensors, same graph; `step.evaluate` uses one per chunk, so the many terms
    that need, say, the local tokens or the layer's parameters share one computation)."""
    copy = object.__new__(type(d))
    copy.__dict__.update(d.__dict__)
    copy.__dict__[_MEMO] = {}
    return copy


def per_evaluation(fn):
    """Memoize `fn(d, *hashable_args)` on a batch made by `memoizing`; other batches compute afresh."""

    @functools.wraps(fn)
    def wrapper(d, *args, **kwargs):
        memo = d.__dict__.get(_MEMO)
        if memo is None or kwargs:
            return fn(d, *args, **kwargs)
        key = (fn, *args) if args else fn
        out = memo.get(key, _MISSING)
        if out is _MISSING:
            out = memo[key] = fn(d, *args)
        return out

    return wrapper


# fields whose value at every design of a chunk lets `evaluate` skip a term's work (their "off" value: a term
# priced only where a design sets the field above it); `any_set` reads them all in one pass over the chunk
OFF_VALUES = {"peak_exp_per_s": 0.0, "ep_dispatcher": 0.0, "overlap_ep_comm": 0.0, "offload_layers": 0.0,
              "host_link_bw_bytes_per_s": 0.0, "straggler_cv": 0.0, "fp8_param_gather": 0.0,
              "optimizer_state_dtype": 0.0, "master_params": 0.0, "dp_shard": 0.0, "recompute_layers": 0.0,
              "etp": 0.0, "fused_jobs": 1.0, "dp_mode": 0.0, "window_size": 0.0, "elementwise": 0.0,
              "activation_clamp": 0.0, "linear_bias": 0.0, "sp_keeps_gathered_input": 0.0}


@per_evaluation
def _set_fields(d: DesignBatch) -> dict[str, bool]:
    values = torch.stack([getattr(d, name) for name in OFF_VALUES], dim=-1)  # batch x fields
    off = torch.tensor(tuple(OFF_VALUES.values()), dtype=values.dtype, device=values.device)
    return dict(zip(OFF_VALUES, (values > off).any(0).tolist()))


def any_set(d: DesignBatch, name: str) -> bool:
    """Whether some design of the batch sets the field `name` above its off value (`OFF_VALUES`). One
    evaluation reads every such field in one pass and one host synchronisation, where a check per term costs
    three tensor operations and a synchronisation each (most of a single design's skip checks). A batch outside
    an evaluation (not `memoizing`, e.g. the mapping rules a space checks on its raw draws) reads the one field:
    the pass over all of them would be repeated at every check."""
    if d.__dict__.get(_MEMO) is None:
        return bool((getattr(d, name) > OFF_VALUES[name]).any())
    return _set_fields(d)[name]


@per_evaluation
def sequence_parallel_divisor(d: DesignBatch) -> torch.Tensor:
    """`(batch,)` what sequence parallelism divides the activations outside the tensor-parallel GEMMs by
    (norm inputs, residuals, dropout masks, MoE dispatch): tp where it is on, else 1."""
    return torch.where(d.sequence_parallel > 0, d.tp, 1.0)
