"""Memory per device: weights, gradients, optimizer state, activations, communication buffers.

Mixed-precision Adam as in Rajbhandari et al. 2020 (ZeRO, sec. 3.1): 16-bit weights, gradients
(fp32 main gradients for bf16/fp8, as Megatron-LM accumulates them), and 12 bytes per parameter
of fp32 master weights, momentum and variance. ZeRO stage 1 (or Megatron's distributed optimizer)
shards the optimizer state over data-parallel ranks, stage 2 also the gradients, stage 3 also the
weights. All results are `(batch,)` tensors in bytes.
"""

from __future__ import annotations

import torch

from analytical.codes import PRECISION_CODES
from analytical.design import DesignBatch
from analytical.step.workload import (
    activation_bytes_per_element,
    activation_bytes_per_layer,
    any_fused,
    embedding_params,
    gemm_bytes_per_element,
    has_vocabulary,
    is_narrow,
    layer_params,
    local_tokens,
    per_evaluation,
    recompute_transient_bytes,
    stage_layers,
)

GIB = 2.0**30
# CUDA context, cuBLAS workspaces and allocator fragmentation that no tensor of the model holds:
# ~0.5-1 GiB of context on A100/H100 (PyTorch CUDA-semantics notes) plus NCCL and cuBLAS
# workspaces; an estimate.
RUNTIME_RESERVE_BYTES = 2.0 * GIB
MEMORY_PARTS = ("weights", "gradients", "optimizer", "activations", "comm_buffers", "runtime_reserve")


@per_evaluation
def params_per_device(d: DesignBatch) -> torch.Tensor:
    """Parameters held by the most loaded pipeline stage before any ZeRO sharding.

    A stage holds num_layers / pp layers, dense weights split over tp, experts over tp * ep; the
    first stage also holds the input embedding, the last the output layer (tied GPT-style
    models keep a copy of the embedding there when pp > 1).
    """
    dense, expert = layer_params(d)
    emb_in, emb_out = embedding_params(d)
    layers = stage_layers(d) * (dense / d.tp + expert / (d.tp * d.ep))
    single_stage = (d.pp == 1).to(d.tp.dtype)
    tied_copy = (emb_out == 0).to(d.tp.dtype) * (1.0 - single_stage) * emb_in
    first = emb_in + single_stage * emb_out
    last = emb_out + tied_copy + single_stage * emb_in
    per_job = layers + torch.maximum(first, last) / d.tp
    return per_job * d.fused_jobs if any_fused(d) else per_job  # B fused jobs: B copies


@per_evaluation
def weight_bytes_per_param(d: DesignBatch) -> torch.Tensor:
    wide = (d.precision <= PRECISION_CODES["tf32"]).to(d.tp.dtype)
    return 2.0 + 2.0 * wide + is_narrow(d) * gemm_bytes_per_element(d)  # narrow: a bf16 weight and its cast copy


@per_evaluation
def grad_bytes_per_param(d: DesignBatch) -> torch.Tensor:
    fp16 = (d.precision == PRECISION_CODES["fp16"]).to(d.tp.dtype)
    return 4.0 - 2.0 * fp16


@per_evaluation
def optimizer_bytes_per_param(d: DesignBatch) -> torch.Tensor:
    wide = (d.precision <= PRECISION_CODES["tf32"]).to(d.tp.dtype)
    return 12.0 - 4.0 * wide  # no separate fp32 master copy when training in fp32


def in_flight_micro_batches(d: DesignBatch) -> torch.Tensor:
    """Micro-batches whose activations the first stage holds at once under 1F1B: min(m, pp),
    times (1 + (pp-1)/(pp vp)) for the interleaved schedule (Korthikanti et al. 2022, sec. 4.2.3)."""
    micro_batches = d.global_batch_size / (d.dp * d.micro_batch_size)
    interleave = torch.where(d.vp > 1, 1.0 + (d.pp - 1.0) / (d.pp * d.vp), 1.0)
    return torch.minimum(micro_batches, d.pp) * interleave


def memory_breakdown(d: DesignBatch, params: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
    """Bytes per device by part (`MEMORY_PARTS`), each `(batch,)`; `params` is
    `params_per_device(d)` when the caller already has it."""
    params = params_per_device(d) if params is None else params
    dp = d.dp * d.cp  # context-parallel ranks share weights: states shard over dp x cp
    zero = d.zero_stage
    shard_opt = torch.where((zero >= 1) | (d.distributed_optimizer > 0), dp, 1.0)
    shard_grad = torch.where(zero >= 2, dp, 1.0)
    shard_weight = torch.where(zero >= 3, dp, 1.0)
    elem = activation_bytes_per_element(d)
    layers_per_stage = stage_layers(d)
    kept_layers = torch.clamp_min(layers_per_stage - d.offload_layers, 0.0)  # the rest wait in host memory
    activations = (activation_bytes_per_layer(d) * kept_layers * in_flight_micro_batches(d)
                   + recompute_transient_bytes(d))
    logits = local_tokens(d) * d.vocab_size / d.tp * (elem + 4.0) * has_vocabulary(d)
    message = local_tokens(d) * d.hidden_size * elem
    dense, _ = layer_params(d)
    zero3_prefetch = (zero >= 3).to(dp.dtype) * 2.0 * dense / d.tp * weight_bytes_per_param(d)
    return {
        "weights": params * weight_bytes_per_param(d) / shard_weight,
        "gradients": params * grad_bytes_per_param(d) / shard_grad,
        "optimizer": params * optimizer_bytes_per_param(d) / shard_opt,
        "activations": activations + logits,
        "comm_buffers": 2.0 * message + zero3_prefetch,
        "runtime_reserve": torch.full_like(dp, RUNTIME_RESERVE_BYTES),
    }
