"""Memory per device: weights, gradients, optimizer state, activations, communication buffers.

Mixed-precision Adam as in Rajbhandari et al. 2020 (ZeRO, sec. 3.1): 16-bit weights, gradients
(fp32 main gradients for bf16/fp8, as Megatron-LM accumulates them, unless `grad_reduce_in_fp32`
is off), and 12 bytes per parameter of fp32 master weights, momentum and variance. ZeRO stage 1
(or Megatron's distributed optimizer) shards the optimizer state over data-parallel ranks (an
expert's over its dp x cp / ep replicas, `weight_groups`; under HSDP over a dp_shard part of
them, `shard_groups`), stage 2 also the gradients, stage 3 also the weights. Activation memory per
layer follows Korthikanti et al. 2022 (Table 2, checked in tests). All results are `(batch,)`
tensors in bytes.
"""

from __future__ import annotations

import torch

from analytical.codes import RECOMPUTE_CODES
from analytical.design import DesignBatch, any_set, sequence_parallel_divisor
from analytical.step.attention import (any_mla, attention_out_width, attention_width, latent_activation_bytes_per_token,
                                       qkv_projection_width)
from analytical.step.cnn import any_cnn, cnn_terms
from analytical.step.eager_ops import eager_saved_bytes
from analytical.step.param_bytes import (fp8_gathers, grad_bytes_per_param, optimizer_bytes_per_param,
                                         param_gather_bytes_per_param, weight_bytes_per_param)
from analytical.step.workload import (
    activation_bytes_per_element,
    any_fused,
    any_kind,
    embedding_params,
    expert_tp,
    ffn_gate_factor,
    gemm_bytes_per_element,
    has_vocabulary,
    is_gpt_style,
    is_kind,
    is_narrow,
    is_swiglu,
    layer_params,
    local_tokens,
    mlp_width,
    per_evaluation,
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

    A stage holds num_layers / pp layers, dense weights split over tp, experts over etp * ep; the
    first stage also holds the input embedding, the last the output layer (tied GPT-style
    models keep a copy of the embedding there when pp > 1).
    """
    dense, expert = layer_params(d)
    layers = stage_layers(d) * (dense / d.tp + expert / (expert_tp(d) * d.ep))
    return (layers * d.fused_jobs if any_fused(d) else layers) + embedding_params_per_device(d)


@per_evaluation
def embedding_params_per_device(d: DesignBatch) -> torch.Tensor:
    """The input embedding's and output layer's share of `params_per_device` (`(batch,)`; B fused jobs: B copies)."""
    emb_in, emb_out = embedding_params(d)
    single_stage = (d.pp == 1).to(d.tp.dtype)
    tied_copy = (emb_out == 0).to(d.tp.dtype) * (1.0 - single_stage) * emb_in
    first = emb_in + single_stage * emb_out
    last = emb_out + tied_copy + single_stage * emb_in
    per_job = torch.maximum(first, last) / d.tp
    return per_job * d.fused_jobs if any_fused(d) else per_job


@per_evaluation
def split_experts(d: DesignBatch) -> torch.Tensor:
    """Where MoE experts are split otherwise than the dense weights (ep > 1, or etp != tp); bool `(batch,)`."""
    return ((d.ep > 1) | (expert_tp(d) != d.tp)) & (d.num_experts > 1)


@per_evaluation
def any_expert_parallel(d: DesignBatch) -> bool:
    """Whether any design of the batch splits its experts otherwise than its dense weights
    (`split_experts`; `weight_groups` then tells the expert weights apart)."""
    return bool(split_experts(d).any())


@per_evaluation
def expert_params_per_device(d: DesignBatch) -> torch.Tensor:
    """The expert weights among `params_per_device` where they are split otherwise than the dense
    ones (`split_experts`; 0 elsewhere: experts then share the dense weights' data-parallel group)."""
    _, expert = layer_params(d)
    per_job = torch.where(split_experts(d), stage_layers(d) * expert / (expert_tp(d) * d.ep), 0.0)
    return per_job * d.fused_jobs if any_fused(d) else per_job


@per_evaluation
def expert_group(d: DesignBatch) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """`(params, group, stride)` of the experts' class in `weight_groups` (the part that does not
    depend on the caller's `params`, computed once per evaluation)."""
    split = expert_tp(d) * d.ep
    replicas = torch.where(split_experts(d), torch.clamp_min(d.tp * d.dp * d.cp / split, 1.0), 1.0)
    return expert_params_per_device(d), replicas, split


@per_evaluation  # (the same group tensors for every collective: `collectives.placed_group`)
def weight_groups(d: DesignBatch, params: torch.Tensor) -> tuple[tuple[torch.Tensor, torch.Tensor, torch.Tensor], ...]:
    """`(params, group, stride)` of each class of a device's weights by the data-parallel group that
    reduces their gradients and shards their optimizer state (and, under ZeRO-2/3, gradients and
    weights); each `(batch,)`.

    Dense weights: the dp x cp ranks tp apart that hold the same shard (Megatron-Core's
    data-parallel-with-context group). Experts split over etp x ep ranks: the tp dp cp / (etp ep)
    replicas of each expert shard, etp x ep ranks apart (Megatron-Core's expert-data-parallel group:
    world / (etp ep pp) ranks in the expert order tp-ep-dp-pp, parallel_state.initialize_model_parallel;
    DistributedDataParallel reduces expert gradients over it and the distributed optimizer shards
    their state over it). At least 1 rank: an expert held once is not reduced."""
    if not any_expert_parallel(d):
        return ((params, d.dp * d.cp, d.tp),)
    expert = expert_group(d)
    return (params - expert[0], d.dp * d.cp, d.tp), expert


@per_evaluation
def hsdp_replicas(d: DesignBatch) -> torch.Tensor | None:
    """Replicas of the sharded states under HSDP (`dp_shard` > 0): dp / dp_shard, else 1, `(batch,)`;
    None where no design of the batch sets dp_shard (every sharded state then splits over its whole group)."""
    if not any_set(d, "dp_shard"):
        return None
    return torch.where(d.dp_shard > 0, torch.clamp_min(d.dp / torch.clamp_min(d.dp_shard, 1.0), 1.0), 1.0)


@per_evaluation  # (the same group tensors for every collective: `collectives.placed_group`)
def shard_groups(d: DesignBatch, groups) -> tuple[tuple[torch.Tensor, ...], ...]:
    """`(params, shard, stride, replicas)` of each class of `weight_groups` as its sharded states see it: the
    class's data-parallel group of g ranks holds `replicas` copies (`hsdp_replicas`) of a shard group of
    g / replicas ranks, at least 1 (an expert group smaller than the replica count: not sharded), the shard
    ranks `stride` apart and the replicas shard x stride apart (torchtitan's mesh [dp_replicate, dp_shard, cp,
    tp]; Megatron-Core's optimizer instances are contiguous blocks of the data-parallel group)."""
    r = hsdp_replicas(d)
    if r is None:
        return tuple((p, g, s, 1.0) for p, g, s in groups)
    out = []
    for p, g, s in groups:
        shard = torch.clamp_min(g / r, 1.0)
        out.append((p, shard, s, g / shard))
    return tuple(out)


def sharded_params(d: DesignBatch, groups, shard: torch.Tensor) -> torch.Tensor:
    """Parameters a device keeps of `weight_groups` where `shard` (bool, `(batch,)`) splits each
    class over its shard group (`shard_groups`: the data-parallel group, or HSDP's dp_shard part of
    it), all of them where it does not."""
    (p, g, _, _), *rest = shard_groups(d, groups)
    kept = p / torch.where(shard, g, 1.0)
    for p, g, _, _ in rest:
        kept = kept + p / torch.where(shard, g, 1.0)
    return kept


def reduce_buffers(d: DesignBatch, shards) -> tuple[list[tuple], list[tuple] | None]:
    """`(scatter_gather, replicas)`: `(bytes, group, stride)` of each weight class over its shard group
    (`shard_groups` order), its bytes `(2, batch)`: the gradients' reduce-scatter and the weights' all-gather
    (`gather_buffers`), which run over the same group, so one call prices both; and under HSDP the all-reduce of
    each reduced shard over the replicas (shard x stride apart); replicas None where no design of the batch has HSDP."""
    grad = grad_bytes_per_param(d)
    pairs = [(torch.stack([p * grad, b]), g, s) for (p, g, s, _), (b, _, _) in zip(shards, gather_buffers(d, shards))]
    if hsdp_replicas(d) is None:
        return pairs, None
    return pairs, [(p * grad / g, r, s * g) for p, g, s, r in shards]


def gather_buffers(d: DesignBatch, shards) -> list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """`(bytes, shard, stride)` of each weight class's all-gather (`shard_groups` order): its weights at
    `param_gather_bytes_per_param`, where fp8 gathers leave the embedding and output layer (in the dense class,
    the first) at their 16-bit dtype: no fp8 GEMM runs them."""
    gather = param_gather_bytes_per_param(d)
    out = [(p * gather, g, s) for p, g, s, _ in shards]
    if fp8_gathers(d) is not None:
        out[0] = (out[0][0] + embedding_params_per_device(d) * (activation_bytes_per_element(d) - gather),) + out[0][1:]
    return out


@per_evaluation
def optimizer_sharded(d: DesignBatch) -> torch.Tensor:
    """Where the optimizer state is sharded over the data-parallel group (ZeRO >= 1 or Megatron's
    distributed optimizer); bool `(batch,)`."""
    return (d.zero_stage >= 1) | (d.distributed_optimizer > 0)


@per_evaluation
def micro_batches_per_step(d: DesignBatch) -> torch.Tensor:
    """`(batch,)` micro-batches each pipeline runs a step: global batch / (dp x micro-batch)."""
    return d.global_batch_size / (d.dp * d.micro_batch_size)


@per_evaluation
def dp_collective_counts(d: DesignBatch) -> tuple[torch.Tensor, ...]:
    """`(all_reduce, reduce_scatter, all_gather)`: how often a step runs each data-parallel collective of the
    gradients or weights, each `(batch,)`, by ZeRO stage. ZeRO-0: one all-reduce; ZeRO-1 or Megatron's
    distributed optimizer: a reduce-scatter and an all-gather; ZeRO-2: a reduce-scatter per micro-batch and one
    all-gather; ZeRO-3 / FSDP: per micro-batch a reduce-scatter and two gathers (forward and backward), once a
    step where FSDP holds the weights under a pipeline (`fsdp_keeps_unsharded`). The step time
    (`analytical.step.model`) and the energy (`analytical.step.energy`) both count from here."""
    z, sharded, micro_batches = d.zero_stage, optimizer_sharded(d).to(d.tp.dtype), micro_batches_per_step(d)
    rounds = torch.where(fsdp_keeps_unsharded(d) > 0, 1.0, micro_batches) if any_fsdp_unsharded(d) else micro_batches
    zero = torch.zeros_like(micro_batches)
    all_reduce = torch.where(z >= 2, zero, 1.0 - sharded)
    scatter = torch.where(z >= 3, rounds, torch.where(z >= 2, micro_batches, sharded))
    gather = torch.where(z >= 3, 2.0 * rounds, torch.where(z >= 2, 1.0, sharded))
    return all_reduce, scatter, gather


@per_evaluation
def full_recompute_share(d: DesignBatch) -> torch.Tensor:
    """Share of each stage's layers that full recompute rebuilds (`(batch,)`): 0 unless recompute is
    full; `recompute_layers` of the stage's layers when set, else all of them."""
    full = (d.recompute == RECOMPUTE_CODES["full"]).to(d.tp.dtype)
    if not any_set(d, "recompute_layers"):
        return full
    share = torch.where(d.recompute_layers > 0, torch.clamp_max(d.recompute_layers / stage_layers(d), 1.0), 1.0)
    return full * share


@per_evaluation
def op_recompute(d: DesignBatch) -> torch.Tensor | None:
    """1.0 where the design uses torchtitan's per-op checkpointing (`recompute=op`), else 0.0
    (`(batch,)`); None where no design of the batch does, so that its terms are computed only then
    (a few dozen tensor operations fewer per evaluation)."""
    op = (d.recompute == RECOMPUTE_CODES["op"]).to(d.tp.dtype)
    return op if bool(op.any()) else None


@per_evaluation
def eager_cross_entropy(d: DesignBatch) -> torch.Tensor | None:
    """1.0 where the loss is an eager fp32 cross-entropy (`fused_cross_entropy` false), else 0.0
    (`(batch,)`); None where no design of the batch has one."""
    eager = 1.0 - d.fused_cross_entropy
    return eager if bool((eager > 0).any()) else None


@per_evaluation
def keeps_gathered_input(d: DesignBatch) -> torch.Tensor | None:
    """1.0 where sequence parallelism keeps the column-parallel GEMMs' gathered inputs whole (PyTorch DTensor,
    `MappingSpec.sp_keeps_gathered_input`), else 0.0 (`(batch,)`); None where no design of the batch does."""
    keep = (d.sp_keeps_gathered_input > 0).to(d.tp.dtype)
    return keep if bool(keep.any()) else None


@per_evaluation
def layer_activation_bytes(d: DesignBatch) -> tuple[torch.Tensor, torch.Tensor]:
    """`(kept, transient)`: activation memory one layer keeps for backward, per micro-batch and
    device, and what full recompute holds on top while it rebuilds a layer.

    Korthikanti et al. 2022, Table 2, generalised to GQA, SwiGLU and MoE: with 16-bit
    activations, b s h (10 + 24/t + 5 a s/(h t)) bytes without sequence parallelism for GPT.
    Sequence parallelism divides the first term by t; selective recompute or flash attention drop
    the a s^2 term; full recompute keeps only the layer input.
    """
    tr = is_kind(d, "transformer")
    t = d.tp
    th = local_tokens(d) * d.hidden_size
    sp_div = sequence_parallel_divisor(d)
    replicated = 10.0 * th / sp_div  # two norm inputs, two GEMM inputs, two dropout masks
    # the QKV and fc1 inputs (4 of the 10): 1/tp shards under sequence parallelism, whole where DTensor keeps
    # them gathered (`sp_keeps_gathered_input`)
    gemm_in_div = sp_div
    if keeps_gathered_input(d) is not None:
        gemm_in_div = torch.where(keeps_gathered_input(d) > 0, 1.0, sp_div)
        replicated = replicated + 4.0 * th * (1.0 / gemm_in_div - 1.0 / sp_div)
    kv_ratio = d.num_kv_heads / d.num_heads
    ta = local_tokens(d) * attention_width(d)
    # Q, K, V, and the output-projection input (MLA: and its latents, replicated over tp)
    attention = (2.0 + 4.0 * kv_ratio + 2.0) * ta / t
    if any_mla(d):
        attention = attention + local_tokens(d) * latent_activation_bytes_per_token(d)
    ffn_tensors = 2.0 + 2.0 * ffn_gate_factor(d)  # gelu: fc1 out, fc2 in; swiglu: gate, up, product
    mlp = ffn_tensors * local_tokens(d) * mlp_width(d) / t
    # LLaMA- and Nemotron-style models train without dropout: no masks (1 byte per element each, 2 of the 10)
    replicated = replicated - 2.0 * th / sp_div * (1.0 - is_gpt_style(d))
    # narrow GEMMs save their inputs for the weight gradient already cast (Transformer Engine keeps
    # the fp8 copy, not the 16-bit one): the QKV and fc1 inputs (2 of the replicated 10), the
    # output-projection input (2 of attention's) and fc2's input (2 of the MLP's) shrink to their
    # format's bytes. Q, K, V stay 16-bit for the fused attention kernel.
    tao = local_tokens(d) * attention_out_width(d)
    saved_gemm_inputs = 4.0 * th / gemm_in_div + 2.0 * tao / t + 2.0 * local_tokens(d) * mlp_width(d) / t
    narrow_saving = is_narrow(d) * saved_gemm_inputs * (1.0 - gemm_bytes_per_element(d) / 2.0)
    square = 5.0 * d.micro_batch_size * d.num_heads * (d.seq_length / d.cp) * d.seq_length / t
    keeps_square = (d.recompute == RECOMPUTE_CODES["none"]).to(t.dtype) * (1.0 - d.flash_attention)
    softmax_stats = 4.0 * d.micro_batch_size * d.num_heads * d.seq_length / d.cp / t * d.flash_attention
    # selective recompute with fused attention (whose kernel already recomputes the core) re-runs
    # the cheap modules instead: the norms and the MLP activation (Megatron-Core recompute_modules
    # "layernorm" and "mlp"/"moe_act"; torchtitan's per-op selective checkpointing), so their
    # outputs (the QKV, fc1 and fc2 inputs) are not kept
    cheap_outputs = 4.0 * th / gemm_in_div + 2.0 * local_tokens(d) * mlp_width(d) / t
    narrow_scale = 1.0 - is_narrow(d) * (1.0 - gemm_bytes_per_element(d) / 2.0)
    selective_flash = (d.recompute == RECOMPUTE_CODES["selective"]).to(t.dtype) * d.flash_attention
    modules_saving = selective_flash * cheap_outputs * narrow_scale
    full = tr * (replicated + attention + mlp + square * keeps_square + softmax_stats - narrow_saving - modules_saving)
    kept = tr * 2.0 * th / sp_div  # full recompute keeps only the layer input
    share = full_recompute_share(d)  # partial full recompute: the other layers keep everything
    is_full = d.recompute == RECOMPUTE_CODES["full"]
    per_layer = torch.where(is_full, share * kept + (1.0 - share) * full, full)
    # full recompute rebuilds one layer's activations at a time in the backward pass: that layer's
    # whole set is live on top of the kept inputs (Korthikanti et al. 2022, sec. 4.2)
    transient = torch.where(is_full, full, 0.0)
    rebuilds = is_full  # where a recompute rebuilds the layer in the backward pass
    if op_recompute(d) is not None:
        # torchtitan's per-op checkpointing (`op`): the layer input, the attention kernel's output and
        # statistics, and every other matmul output (its policy saves aten.mm outputs alternately:
        # half of them on average, i.e. 1 byte per output element at 16 bit); column-parallel outputs
        # are split over tp, row-parallel ones (before their reduce-scatter) are not. Its backward
        # rebuilds what it did not keep.
        op = op_recompute(d) > 0
        matmul_outputs = local_tokens(d) * (qkv_projection_width(d) + ffn_gate_factor(d) * mlp_width(d) / t
                                            + 2.0 * d.hidden_size)  # (the QKV width is per device already)
        op_kept = tr * (2.0 * th / sp_div + 2.0 * tao / t + softmax_stats + matmul_outputs)
        per_layer = torch.where(op, op_kept, per_layer)
        transient = torch.where(op, torch.clamp_min(full - op_kept, 0.0), transient)
        rebuilds = is_full | op
    scale = activation_bytes_per_element(d) / 2.0
    transient = transient * scale
    if any_kind(d, "lstm"):
        per_layer = per_layer + is_kind(d, "lstm") * 2.0 * local_tokens(d) * d.hidden_size * 7.0  # gates, cell, h, x
    if any_kind(d, "gemm"):
        per_layer = per_layer + is_kind(d, "gemm") * 2.0 * d.micro_batch_size * d.gemm_m * d.gemm_k
    kept_bytes = per_layer * scale
    # eager element-wise modules keep more for their backward (analytical.step.eager_ops): held by a layer
    # that keeps its activations (selective re-runs the norms and activation instead) and by the layer full
    # or per-op recompute rebuilds
    saved, modules = eager_saved_bytes(d)
    kept_bytes = kept_bytes + torch.where(
        is_full, (1.0 - share) * saved, torch.where(rebuilds, 0.0, saved - selective_flash * modules))
    transient = transient + torch.where(rebuilds, saved, 0.0)
    if any_cnn(d):
        cnn = cnn_terms(d)
        elem = activation_bytes_per_element(d)
        kept_bytes = kept_bytes + d.micro_batch_size * (cnn.kept_elements * elem + cnn.index_bytes)
        transient = transient + d.micro_batch_size * cnn.backward_transient_elements * elem
    return kept_bytes, transient


@per_evaluation
def activation_bytes_per_layer(d: DesignBatch) -> torch.Tensor:
    """Activation memory one layer keeps for backward, per micro-batch and device
    (`layer_activation_bytes`)."""
    return layer_activation_bytes(d)[0]


@per_evaluation
def recompute_transient_bytes(d: DesignBatch) -> torch.Tensor:
    """Activations of the one layer full recompute rebuilds at a time in the backward pass (0 unless
    recompute is full)."""
    return layer_activation_bytes(d)[1]


@per_evaluation
def recomputed_module_bytes(d: DesignBatch) -> torch.Tensor:
    """HBM bytes of the forward norms and MLP activation of one layer (read + write, 16-bit): what
    selective recompute with fused attention runs again (`activation_bytes_per_layer`)."""
    norms = 2.0 * 2.0 * local_tokens(d) * d.hidden_size / sequence_parallel_divisor(d)
    act = (2.0 + is_swiglu(d)) * local_tokens(d) * mlp_width(d) / d.tp
    return is_kind(d, "transformer") * activation_bytes_per_element(d) * (norms + act)


@per_evaluation
def fsdp_keeps_unsharded(d: DesignBatch) -> torch.Tensor:
    """1.0 where FSDP runs under a pipeline schedule (`fsdp`, pp > 1), else 0.0 (`(batch,)`).

    PyTorch FSDP2 with torch.distributed.pipelining keeps each stage's weights gathered for the
    whole step: torchtitan shards with reshard_after_forward=False when pp > 1 ("to avoid
    per-microbatch all-gathers", torchtitan/models/llama3/parallelize.py, apply_fsdp), and the
    pipeline stage calls set_reshard_after_backward(False) and set_requires_gradient_sync(False)
    for every backward but the last (torch/distributed/pipelining/stage.py,
    backward_maybe_with_nosync). Gradients then accumulate unsharded, upcast to the fp32 reduce
    dtype (FSDPParam.to_accumulated_grad_if_needed), and are reduce-scattered once per step.
    """
    return ((d.fsdp > 0) & (d.pp > 1)).to(d.tp.dtype)


@per_evaluation
def any_fsdp_unsharded(d: DesignBatch) -> bool:
    """Whether any design of the batch runs FSDP under a pipeline (`fsdp_keeps_unsharded`); its
    terms are computed only then."""
    return bool((fsdp_keeps_unsharded(d) > 0).any())


def in_flight_micro_batches(d: DesignBatch) -> torch.Tensor:
    """Micro-batches whose activations the first stage holds at once under 1F1B: min(m, pp),
    times (1 + (pp-1)/(pp vp)) for the interleaved schedule (Korthikanti et al. 2022, sec. 4.2.3), and
    never more than the m micro-batches there are (an interleaved warm-up of m <= pp runs every
    micro-batch's forward through every chunk before the first backward)."""
    micro_batches = micro_batches_per_step(d)
    interleave = torch.where(d.vp > 1, 1.0 + (d.pp - 1.0) / (d.pp * d.vp), 1.0)
    return torch.minimum(micro_batches, d.pp * interleave)


def memory_breakdown(d: DesignBatch, params: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
    """Bytes per device by part (`MEMORY_PARTS`), each `(batch,)`; `params` is
    `params_per_device(d)` when the caller already has it."""
    params = params_per_device(d) if params is None else params
    groups = weight_groups(d, params)  # states shard over dp x cp (experts: dp x cp / ep) ranks
    zero = d.zero_stage
    grad_sharded = zero >= 2
    elem = activation_bytes_per_element(d)
    layers_per_stage = stage_layers(d)
    kept_layers = torch.clamp_min(layers_per_stage - d.offload_layers, 0.0)  # the rest wait in host memory
    activations = (activation_bytes_per_layer(d) * kept_layers * in_flight_micro_batches(d)
                   + recompute_transient_bytes(d))
    # the loss's logits: 16-bit ones and an fp32 copy, or an eager fp32 cross-entropy's three fp32 copies
    logit_bytes = elem + 4.0
    if eager_cross_entropy(d) is not None:
        logit_bytes = torch.where(eager_cross_entropy(d) > 0, 12.0, logit_bytes)
    logits = local_tokens(d) * d.vocab_size / d.tp * logit_bytes * has_vocabulary(d)
    message = local_tokens(d) * d.hidden_size * elem
    if keeps_gathered_input(d) is not None:  # the output layer's gathered input, whole (DTensor), 16-bit
        logits = logits + (keeps_gathered_input(d) * message * (1.0 - 1.0 / sequence_parallel_divisor(d))
                           * has_vocabulary(d))
    dense, _ = layer_params(d)
    zero3, held_bytes = zero >= 3, weight_bytes_per_param(d)
    # ZeRO-3 / FSDP prefetch: two blocks' gathered weights (fp8 where FSDP2 gathers float8)
    prefetch_bytes = held_bytes if fp8_gathers(d) is None else torch.where(
        fp8_gathers(d) > 0, param_gather_bytes_per_param(d), held_bytes)
    zero3_prefetch = zero3 * 2.0 * dense / d.tp * prefetch_bytes
    # the embedding and the output layer keep their 16-bit weights alone: they never run an fp8 GEMM (Megatron-Core's
    # output layer is a plain ColumnParallelLinear; torchtitan's float8 conversion skips `output`)
    embedding = embedding_params_per_device(d) / torch.where(zero3, shard_groups(d, groups)[0][1], 1.0)
    weights = sharded_params(d, groups, zero3) * held_bytes + embedding * (elem - held_bytes)
    if any_fsdp_unsharded(d):
        # FSDP under a pipeline: unsharded 16-bit weights and gradients for the whole step, no prefetch
        held = fsdp_keeps_unsharded(d)
        grad_sharded = grad_sharded & (held == 0)
        zero3_prefetch = zero3_prefetch * (1.0 - held)
        weights = weights + params * held * elem
    return {
        "weights": weights,
        "gradients": sharded_params(d, groups, grad_sharded) * grad_bytes_per_param(d),
        "optimizer": sharded_params(d, groups, optimizer_sharded(d)) * optimizer_bytes_per_param(d),
        "activations": activations + logits,
        "comm_buffers": 2.0 * message + zero3_prefetch,
        "runtime_reserve": torch.full_like(params, RUNTIME_RESERVE_BYTES),
    }
