"""One training iteration: time with a breakdown, memory, feasibility, MFU, HFU and throughput.

`evaluate(designs)` composes the layers for a whole `DesignBatch` in one pass of tensor
operations; a single design is a batch of one. The step time is the sum of its breakdown:

    step = m * t_stage_max (split into its parts)      # steady 1F1B on the slowest stage
         + (pp - 1) / vp * t_stage_mean                # pipeline bubble
         + exposed pipeline point-to-point
         + exposed data-parallel / ZeRO communication
         + optimizer step

with m = global_batch / (dp * micro_batch) micro-batches and t_stage the forward + backward
(+ recompute, + exposed tensor/context/expert-parallel communication) of one micro-batch.
"""

from __future__ import annotations

import functools
import operator
from dataclasses import dataclass

import torch

from analytical.codes import CUDA_GRAPH_CODES, DP_MODE_CODES, RECOMPUTE_CODES, Reason
from analytical.design import DesignBatch, any_set, memoizing, sequence_parallel_divisor
from analytical.result import StepResult
from analytical.step import collectives as coll
from analytical.step import energy
from analytical.step.attention import any_mla, attention_query_tiles, head_dim, is_mla, kv_width
from analytical.step.cnn import executed_gemms
from analytical.step.eager_ops import eager_ops
from analytical.step.efficiency import DEFAULT_EFFICIENCY, Efficiency
from analytical.step.feasibility import mapping_reasons, peak_for_precision
from analytical.step.kernels import (attention_peak, attention_tiles_time_s, flash_attention_time_s, gemm_peak_fraction,
                                     gemm_time_s, host_wait_s, memory_bound_time_s, offload_wait_s, sixteen_bit_peak,
                                     softmax_exp_time_s)
from analytical.step.memory import (activation_bytes_per_layer, any_fsdp_unsharded, dp_collective_counts,
                                    eager_cross_entropy, fsdp_keeps_unsharded, full_recompute_share,
                                    memory_breakdown, micro_batches_per_step, op_recompute, optimizer_sharded,
                                    params_per_device, recomputed_module_bytes, reduce_buffers, shard_groups,
                                    sharded_params, weight_groups)
from analytical.step.param_bytes import adam_step_bytes_per_param, grad_bytes_per_param, sp_gather_bytes_per_element
from analytical.step.workload import (CORE_SLOTS, GEMM_SLOTS, Gemms, activation_bytes_per_element, any_expert_tp,
                                      any_parameter_server, attention_core_flops, attention_score_elements, expert_tp,
                                      flash_qkvo_bytes, fuse_jobs, gemm_bytes_per_element, is_kind, is_moe, is_narrow,
                                      layer_forward_flops_per_sequence, layer_gemms, local_tokens, logit_gemm_flops,
                                      memory_bound_bytes_per_layer, mlp_tp, model_flops_per_step, routed_copies,
                                      slot_sum, stage_layers)

TIME_PARTS = ("forward_compute", "backward_compute", "recompute", "tp_comm", "cp_comm", "ep_comm", "pipeline_bubble",
              "pp_p2p", "dp_comm", "optimizer")
TP_OVERLAP_SLOTS = [GEMM_SLOTS.index(n) for n in ("qkv", "attention_out", "ffn_up", "ffn_down")]


def _eager(d: DesignBatch) -> torch.Tensor:
    """1 where the host launches the kernels (no full-iteration CUDA graph), else 0, `(batch,)`."""
    return (d.cuda_graph != CUDA_GRAPH_CODES["full"]).to(d.tp.dtype)


def _gemm_table_time_s(gemms, d: DesignBatch, peak: torch.Tensor, eff: Efficiency,
                       live: torch.Tensor) -> list[torch.Tensor]:
    """`(batch, slots)` time of each GEMM slot of the forward, input-gradient and weight-gradient tables
    (`Gemms.backward`), serial repetitions included. Only the `live` slots (non-empty for some design of the batch)
    are computed, the three tables stacked in one `(3, batch, live slots)` pass; the others cost 0."""
    every = bool(live.all())
    fwd = gemms if every else Gemms(*(x[:, live] for x in (gemms.m, gemms.n, gemms.k, gemms.count, gemms.serial)))
    m, n, k = (torch.stack([getattr(g, f) for g in (fwd, *fwd.backward())]) for f in ("m", "n", "k"))
    col = lambda x: x.unsqueeze(-1)  # noqa: E731  ((batch,) -> (batch, 1), against the slots)
    t = gemm_time_s(m, n, k, fwd.count, col(peak), col(d.compute_units), col(d.tile_m), col(d.tile_n),
                    col(d.hbm_bw_bytes_per_s), col(d.sram_bw_bytes_per_s), col(d.kernel_launch_s),
                    col(gemm_bytes_per_element(d)), eff, col(gemm_peak_fraction(d, eff)),
                    traffic=(fwd.m, fwd.n, fwd.k)) * fwd.serial
    if every:
        return list(t)
    out = t.new_zeros((3, *gemms.m.shape))
    out[..., live] = t
    return list(out)


def _links(d: DesignBatch, eff: Efficiency):
    up_bw = d.scale_up_bw_bytes_per_s * eff.scale_up_bw_fraction
    fat_tree = (d.topology == 0).to(up_bw.dtype)
    taper = 1.0 + fat_tree * (d.oversubscription - 1.0)
    out_bw = torch.clamp_min(d.scale_out_bw_bytes_per_s, 1.0) * eff.scale_out_bw_fraction / taper
    return up_bw, d.scale_up_latency_s, out_bw, d.scale_out_latency_s


def sp_pair_bytes_per_element(d: DesignBatch, elem: torch.Tensor) -> torch.Tensor:
    """`(batch,)` mean bytes an element of a tensor-parallel all-gather + reduce-scatter pair moves: with sequence
    parallelism the gather's (`param_bytes.sp_gather_bytes_per_element`) and the scatter's 16-bit output; else
    `elem` (an all-reduce of the output), and `elem` itself where no design of the batch gathers narrow."""
    narrow_sp = (is_narrow(d) > 0) & (d.sequence_parallel > 0)
    return torch.where(narrow_sp, 0.5 * (sp_gather_bytes_per_element(d) + elem), elem) if narrow_sp.any() else elem


def _on_group(collective, d: DesignBatch, links, bytes_, size, stride) -> torch.Tensor:
    """Time of a placed collective (`collectives.group_*`) for a group of the mapping."""
    return collective(bytes_, size, stride, d.scale_up_domain, *links, placed=coll.placed_group(d, size, stride))


def _total(parts) -> torch.Tensor:
    """Sum of an iterable of tensors (one addition fewer than `sum`, which starts from 0)."""
    return functools.reduce(operator.add, parts)


def _exposed(comm_s: torch.Tensor, compute_s: torch.Tensor, eff: Efficiency) -> torch.Tensor:
    """Exposed time of a collective run beside `compute_s` of compute that it slows down by
    `eff.overlap_compute_slowdown` (s): max(comm - compute, (1 - 1/s) comm); 0-floored when s = 1."""
    if eff.overlap_compute_slowdown == 1.0:
        return torch.relu(comm_s - compute_s)
    return torch.maximum(comm_s - compute_s, (1.0 - 1.0 / eff.overlap_compute_slowdown) * comm_s)


def evaluate(d: DesignBatch, eff: Efficiency = DEFAULT_EFFICIENCY, chunk_size: int | None = None,
             device: torch.device | str | None = None) -> StepResult:
    """Time, memory and feasibility of one training step for every design of the batch.

    Batches larger than `chunk_size` (default 65,536 designs on a CPU, 1,048,576 on a GPU) are evaluated chunk by
    chunk (the temporaries of a chunk stay in cache; results are identical) and concatenated. `device` (e.g.
    `"cuda"`): each chunk is moved there, evaluated in the batch's dtype, and its result moved back to `d`'s device;
    `None` computes where `d` is. A batch with nothing to differentiate (`d.tracks_grad` false) is evaluated in
    `torch.inference_mode`, which skips autograd's dispatch (some 12 % of one design's time); its results come back
    as ordinary tensors. On a CPU with glibc, large batches run ~28 % faster in a process that keeps the memory it
    frees (`deepflow.allocator.retain_freed_memory()`, which the `deepflow` command calls)."""
    home = d.tp.device
    target = home if device is None else torch.device(device)
    chunk_size = chunk_size or (65536 if target.type == "cpu" else 1 << 20)
    chunks = [d] if d.batch_size <= chunk_size else [d.index(slice(i, i + chunk_size))
                                                     for i in range(0, d.batch_size, chunk_size)]
    with torch.inference_mode(not d.tracks_grad):
        parts = [_evaluate_chunk(chunk.to(target), eff).to(home) for chunk in chunks]
    return StepResult.cat(parts) if len(parts) > 1 else parts[0].outside_inference()


@dataclass
class _Layer:
    """Times of one layer, one micro-batch, on one device: each `(batch,)` or `(batch, slots)`."""

    fwd_slots: torch.Tensor
    bwd_slots: torch.Tensor
    forward: torch.Tensor
    backward: torch.Tensor
    flash_fwd: torch.Tensor
    flash_bwd: torch.Tensor
    core_fwd: torch.Tensor  # unfused attention core (QK^T, AV, softmax and dropout traffic)
    # what torchtitan's per-op checkpointing (`recompute=op`) runs again: every other matmul (half of the
    # GEMM time on average), the unfused attention core and every memory-bound kernel (None: unused)
    op_fwd: torch.Tensor | None


def _layer_compute(d: DesignBatch, gemms, peak, elem, eff: Efficiency) -> _Layer:
    """GEMMs (forward, input- and weight-gradient), memory-bound kernels and fused attention."""
    live = (gemms.m * gemms.n * gemms.k * gemms.count > 0).any(0)
    fwd_slots, dgrad_slots, wgrad_slots = _gemm_table_time_s(gemms, d, peak, eff, live)
    bwd_slots = dgrad_slots + wgrad_slots
    mb_bytes, mb_kernels = memory_bound_bytes_per_layer(d)
    fwd_mem = memory_bound_time_s(mb_bytes, mb_kernels, d.hbm_bw_bytes_per_s, d.kernel_launch_s, eff)
    core_flops = attention_core_flops(d) * d.flash_attention
    qkvo_bytes = flash_qkvo_bytes(d, elem) * d.flash_attention
    attn_peak = attention_peak(d, peak)
    flash_fwd = flash_attention_time_s(core_flops, qkvo_bytes, attn_peak, d.hbm_bw_bytes_per_s,
                                       d.kernel_launch_s, eff)
    flash_bwd = flash_attention_time_s(2.5 * core_flops, 2.0 * qkvo_bytes, attn_peak, d.hbm_bw_bytes_per_s,
                                       d.kernel_launch_s, eff)  # FA2 backward: 5 of the 2 fwd matmuls
    # a GPU's tiled kernel (SMs with special-function units; a part without their rate, a TPU: its matmuls alone)
    tiles = torch.where((core_flops > 0) & (d.peak_exp_per_s > 0), attention_query_tiles(d), 0.0)
    flash_fwd = flash_fwd + attention_tiles_time_s(tiles, eff.flash_attention_fwd_tile_s, d.compute_units)
    flash_bwd = flash_bwd + attention_tiles_time_s(tiles, eff.flash_attention_bwd_tile_s, d.compute_units)
    if any_set(d, "peak_exp_per_s"):  # one softmax exponential a score forward and one backward
        exp_s = softmax_exp_time_s(attention_score_elements(d) * d.flash_attention, d.peak_exp_per_s)
        flash_fwd, flash_bwd = flash_fwd + exp_s, flash_bwd + exp_s
    unfused = (1.0 - d.flash_attention) * is_kind(d, "transformer")
    scores = d.micro_batch_size * d.num_heads / d.tp * (d.seq_length / d.cp) * d.seq_length
    core_mem = memory_bound_time_s(4.5 * scores * elem * unfused, 2.0 * unfused, d.hbm_bw_bytes_per_s,
                                   d.kernel_launch_s, eff)
    fwd_gemm = slot_sum(fwd_slots)
    eager = eager_ops(d)  # eager PyTorch ops: a clamped GLU, biased experts, unfused element-wise modules
    eager_fwd = memory_bound_time_s(eager.forward_bytes, eager.forward_kernels, d.hbm_bw_bytes_per_s,
                                    d.kernel_launch_s, eff)
    forward = fwd_gemm + flash_fwd + fwd_mem + eager_fwd
    backward = slot_sum(bwd_slots) + flash_bwd + 2.0 * fwd_mem + memory_bound_time_s(
        eager.backward_bytes, eager.backward_kernels, d.hbm_bw_bytes_per_s, d.kernel_launch_s, eff)
    if eff.layer_overhead_s != 0.0:  # framework gaps a layer pass; none under a full-iteration CUDA graph
        gaps = eff.layer_overhead_s * _eager(d)
        forward, backward = forward + gaps, backward + gaps
    core_gemm = fwd_slots[..., CORE_SLOTS].sum(-1)
    op_fwd = (0.5 * (fwd_gemm - core_gemm) + core_gemm + core_mem + fwd_mem + eager_fwd
              if op_recompute(d) is not None else None)
    return _Layer(fwd_slots=fwd_slots, bwd_slots=bwd_slots, forward=forward, backward=backward,
                  flash_fwd=flash_fwd, flash_bwd=flash_bwd, core_fwd=core_gemm + core_mem, op_fwd=op_fwd)


def _model_parallel_comm(d: DesignBatch, layer: _Layer, links, elem,
                         eff: Efficiency = DEFAULT_EFFICIENCY) -> dict[str, torch.Tensor]:
    """Exposed tp / cp / ep communication of one layer and micro-batch, forward and backward."""
    transformer = is_kind(d, "transformer")
    tokens = local_tokens(d)
    # tensor parallel: 2 all-reduces (or all-gather + reduce-scatter pairs) forward, 2 backward;
    # with overlap they hide behind the GEMMs they feed or follow (QKV, out-projection, MLP), the
    # attention core being left to context parallelism's ring
    sp_elem = sp_pair_bytes_per_element(d, elem)
    tp_ar = _on_group(coll.group_all_reduce_time_s, d, links, tokens * d.hidden_size * sp_elem, d.tp,
                      coll.adjacent(d)) * transformer
    # the MLP's pair: over `mlp_tp` (etp in routed-expert MoE layers, none at etp 1), there in 16 bits (bf16 dispatch)
    tp_pair = 2.0 * tp_ar
    if any_expert_tp(d) or sp_elem is not elem and bool((is_moe(d) * is_narrow(d)).any()):
        mlp_elem = torch.where(is_moe(d) > 0, elem, sp_elem)
        mlp_ar = _on_group(coll.group_all_reduce_time_s, d, links, tokens * d.hidden_size * mlp_elem, mlp_tp(d),
                           coll.adjacent(d)) * transformer
        tp_pair = tp_ar + mlp_ar
    tp_hide = d.overlap_tp_comm
    # context parallel (ring attention): K and V circulate, overlapped with the attention kernels
    kv_bytes = 2.0 * tokens * d.num_kv_heads * head_dim(d) / d.tp * elem * d.cp
    if any_mla(d):
        kv_bytes = torch.where(is_mla(d), tokens * kv_width(d) / d.tp * elem * d.cp, kv_bytes)
    cp_ag = _on_group(coll.group_all_gather_time_s, d, links, kv_bytes, d.cp, d.tp) * transformer
    # expert parallel: dispatch and combine, forward and backward, as an all-to-all of every
    # (token, expert) copy or deduplicated per scale-up domain (ep_dispatcher deepep / hybridep)
    moe = is_moe(d) * transformer
    # with sequence parallelism each tensor-parallel rank dispatches only its 1/tp of the tokens
    # (Megatron-Core MoE: the token dispatcher runs on the sequence-parallel shards)
    sp_div = sequence_parallel_divisor(d)
    token_bytes = tokens * d.hidden_size * elem / sp_div
    # the ep group: ranks etp apart (Megatron-Core's expert grid, tp-ep-dp-pp with etp in tp's place)
    ep_a2a = _on_group(coll.group_all_to_all_time_s, d, links, token_bytes * routed_copies(d), d.ep, expert_tp(d))
    if any_set(d, "ep_dispatcher"):  # (skipped where no design of the chunk deduplicates)
        dedup = coll.group_dispatch_time_s(token_bytes * routed_copies(d) / d.top_k, d.top_k, d.moe_router_num_groups,
                                           d.moe_router_group_topk, d.ep, expert_tp(d), d.scale_up_domain, *links,
                                           placed=coll.placed_group(d, d.ep, expert_tp(d)))
        ep_a2a = torch.where(d.ep_dispatcher > 0, dedup, ep_a2a)
    ep_a2a = ep_a2a * moe
    tp_fwd = _exposed(tp_pair, tp_hide * layer.fwd_slots[..., TP_OVERLAP_SLOTS].sum(-1), eff)
    tp_bwd = _exposed(tp_pair, tp_hide * layer.bwd_slots[..., TP_OVERLAP_SLOTS].sum(-1), eff)
    cp_fwd = _exposed(cp_ag, layer.flash_fwd + layer.core_fwd, eff)
    cp_bwd = _exposed(2.0 * cp_ag, layer.flash_bwd + layer.bwd_slots[..., CORE_SLOTS].sum(-1), eff)
    # overlapped (overlap_ep_comm), the forward of one micro-batch and the backward of another run as
    # one unit (Megatron-Core's combined 1F1B schedule): the dispatch and combine of each hide behind
    # the other's compute, as far as the tp and cp traffic hidden there leaves it free; what stays
    # exposed is charged to the backward, whose wall time the data-parallel reduction hides behind
    comm = {"tp_fwd": tp_fwd, "tp_bwd": tp_bwd, "cp_fwd": cp_fwd, "cp_bwd": cp_bwd,
            "ep_fwd": 2.0 * ep_a2a, "ep_bwd": 2.0 * ep_a2a}
    ep_hide = d.overlap_ep_comm
    if any_set(d, "overlap_ep_comm"):  # (skipped where no design of the chunk overlaps)
        free = (torch.relu(layer.forward - (tp_pair - tp_fwd) - (cp_ag - cp_fwd))
                + torch.relu(layer.backward - (tp_pair - tp_bwd) - (2.0 * cp_ag - cp_bwd)))
        merged = _exposed(4.0 * ep_a2a, free, eff)
        comm.update(ep_fwd=(1.0 - ep_hide) * comm["ep_fwd"], ep_bwd=torch.where(ep_hide > 0, merged, comm["ep_bwd"]))
    return comm


def _output_layer(d: DesignBatch, peak, elem, eff: Efficiency) -> dict[str, torch.Tensor]:
    """Logit GEMMs and the fp32 softmax cross-entropy of one micro-batch on the last stage."""
    not_gemm = 1.0 - is_kind(d, "gemm")
    logit_fwd = (logit_gemm_flops(d) / (sixteen_bit_peak(d, peak) * eff.gemm_peak_fraction)
                 + d.kernel_launch_s * not_gemm)
    # an eager fp32 cross-entropy (`fused_cross_entropy` false) moves some 20 more bytes a logit over forward
    # and backward: the fp32 cast, the log-softmax passes, the loss gradient and the cast back
    logit_bytes = elem + 8.0
    if eager_cross_entropy(d) is not None:
        logit_bytes = logit_bytes + 10.0 * eager_cross_entropy(d)
    loss = memory_bound_time_s(local_tokens(d) * d.vocab_size / d.tp * logit_bytes * not_gemm, 3.0 * not_gemm,
                               d.hbm_bw_bytes_per_s, d.kernel_launch_s, eff)
    return {"forward_compute": logit_fwd + loss, "backward_compute": 2.0 * logit_fwd + loss}


def _pipeline_p2p_s(d: DesignBatch, links, elem, micro_batches) -> torch.Tensor:
    """Exposed point-to-point transfers of the 1F1B (or interleaved) schedule: one forward and one
    backward per micro-batch and model chunk, plus the fill; only the fill and flush with
    `overlap_pp_comm`. With Megatron's scatter-gather each tp rank sends 1/tp of the activation."""
    pp_bw, pp_alpha = coll.p2p_link(d.pp, d.tp * d.cp * d.dp, d.scale_up_domain, *links)
    p2p_bytes = local_tokens(d) * d.hidden_size * elem / d.tp
    p2p = torch.where(d.pp > 1, coll.p2p_time_s(p2p_bytes, pp_bw, pp_alpha), 0.0)
    steady = micro_batches * d.vp * (1.0 - d.overlap_pp_comm)
    return 2.0 * p2p * (steady + d.pp - 1.0)


def _data_parallel_time_s(d: DesignBatch, params, links, eff: Efficiency) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Data-parallel / ZeRO communication per step, before overlap: `(total, gather)`, where `gather`
    is the part of `total` that all-gathers the updated weights of Megatron's distributed optimizer
    for the next step's forward pass (DeepSpeed's ZeRO-1/2 gather them inside the optimizer step);
    None where no design of the batch has one.

    ZeRO-0: all-reduce of the gradients, or their push to and pull from parameter servers (`dp_mode` ps_*,
    `collectives.group_parameter_server_time_s`). ZeRO-1 or distributed optimizer: reduce-scatter of the gradients
    and all-gather of the updated weights. ZeRO-2: a reduce-scatter per micro-batch. ZeRO-3: per micro-batch,
    weights gathered for forward and backward and gradients scattered, at `zero3_comm_fraction` of the collective
    bound for DeepSpeed's per-module collectives, at the bound itself for FSDP's whole-block ones (`fsdp`); once
    per step under a pipeline schedule (`memory.fsdp_keeps_unsharded`). HSDP (`dp_shard`): those run over the
    shard group, and the replicas all-reduce each reduce-scattered shard of the gradients (FSDP2's HSDP after
    every backward's reduce-scatter; Megatron-Core's optimizer instances once a step)."""
    # context-parallel ranks hold the same weights: gradients are reduced and the optimizer state sharded over
    # dp x cp (Megatron-Core's data-parallel-with-context group; torchtitan's dp_shard_cp); experts over their own
    # replicas (`memory.weight_groups`), one collective per class
    groups, grad = weight_groups(d, params), grad_bytes_per_param(d)
    grads, shards = [(p * grad, g, s) for p, g, s in groups], shard_groups(d, groups)

    def over_groups(collective, buffers):
        return _total(_on_group(collective, d, links, b, g, s) for b, g, s in buffers)

    ar = over_groups(coll.group_all_reduce_time_s, grads)
    if any_parameter_server(d):  # parameter servers instead (skipped where no design uses them)
        ps = _total(coll.group_parameter_server_time_s(b, g, s, d.scale_up_domain, *links, d.ps_shards,
                                                       d.ps_server_bw_bytes_per_s * eff.scale_out_bw_fraction,
                                                       d.ps_server_sum_bytes_per_s, placed=coll.placed_group(d, g, s))
                    for b, g, s in grads)
        ar = torch.where(d.dp_mode > 0, ps, ar)
    scatter_gather, replicas = reduce_buffers(d, shards)
    rs, ag = over_groups(coll.group_all_gather_time_s, scatter_gather)  # (weights gathered in 16 bits or fp8)
    if replicas is not None:  # each reduce-scatter's shard all-reduced over the replicas (where HSDP)
        rs = rs + over_groups(coll.group_all_reduce_time_s, replicas)
    n_ar, n_rs, n_ag = dp_collective_counts(d)
    total = n_ar * ar + n_rs * rs + n_ag * ag
    z = d.zero_stage  # ZeRO-3: DeepSpeed's per-module collectives at `zero3_comm_fraction` of the bound
    total = torch.where((z >= 3) & (d.fsdp == 0), total / eff.zero3_comm_fraction, total)
    if any_fsdp_unsharded(d):
        # held unsharded: one gather beside the first forward (its interference shows) and one exposed
        # scatter, as exposed time (`_evaluate_chunk` hides no more of it)
        held = (1.0 - 1.0 / eff.overlap_compute_slowdown) * ag + rs
        total = torch.where(fsdp_keeps_unsharded(d) > 0, held, total)
    distributed = (z < 2) & (d.distributed_optimizer > 0)
    return total, (torch.where(distributed, ag, 0.0) if bool(distributed.any()) else None)


def _optimizer_time_s(d: DesignBatch, params, eff: Efficiency) -> torch.Tensor:
    """Adam over this device's (possibly sharded) parameters: a memory-bound multi-tensor kernel."""
    opt_params = sharded_params(d, weight_groups(d, params), optimizer_sharded(d))
    return memory_bound_time_s(opt_params * adam_step_bytes_per_param(d), 4.0,
                               d.hbm_bw_bytes_per_s, d.kernel_launch_s, eff)


def _evaluate_chunk(d: DesignBatch, eff: Efficiency) -> StepResult:
    d = memoizing(d)  # derived terms (local tokens, layer parameters, ...) computed once per chunk
    fused = fuse_jobs(d)
    d = d if fused is d else memoizing(fused)
    peak_raw = peak_for_precision(d)
    peak = torch.clamp_min(peak_raw, 1e9)  # keeps unsupported precisions finite; flagged below
    elem = activation_bytes_per_element(d)
    links = _links(d, eff)
    gemms = layer_gemms(d)  # the direct algorithms' table: model FLOPs (MFU)
    executed = executed_gemms(d, gemms)  # as the kernels run it (Winograd convolutions): time and energy
    layer = _layer_compute(d, executed, peak, elem, eff)
    comm = _model_parallel_comm(d, layer, links, elem, eff)
    # a layer's forward and backward wall times: compute and exposed tp / cp / ep traffic (and host waits, below)
    pass_fwd = layer.forward + comm["tp_fwd"] + comm["cp_fwd"] + comm["ep_fwd"]
    pass_bwd = layer.backward + comm["tp_bwd"] + comm["cp_bwd"] + comm["ep_bwd"]
    if eff.moe_layer_host_s != 0.0 and bool(is_moe(d).any()):  # MoE layer passes waiting on the host
        wait_fwd, wait_bwd = host_wait_s(pass_fwd, pass_bwd, is_moe(d) * (1.0 - d.moe_pad_to_capacity), _eager(d),
                                         d.overlap_ep_comm, eff)
        layer.forward, layer.backward = layer.forward + wait_fwd, layer.backward + wait_bwd
        pass_fwd, pass_bwd = pass_fwd + wait_fwd, pass_bwd + wait_bwd

    selective = (d.recompute == RECOMPUTE_CODES["selective"]).to(peak.dtype)
    full = full_recompute_share(d)  # 1 where full recompute rebuilds every layer, the share where fewer
    # selective with fused attention: the norms and MLP activation again (memory.activation_bytes_per_layer)
    fused_selective = d.flash_attention * is_kind(d, "transformer")
    modules = recomputed_module_bytes(d) + eager_ops(d).recompute_bytes  # with the eager ops' share
    modules_fwd = fused_selective * memory_bound_time_s(modules, 3.0 * fused_selective, d.hbm_bw_bytes_per_s,
                                                        d.kernel_launch_s, eff)
    layer_parts = {
        "forward_compute": layer.forward,
        "backward_compute": layer.backward,
        "recompute": full * layer.forward + selective * (layer.core_fwd + modules_fwd),
        "tp_comm": comm["tp_fwd"] + comm["tp_bwd"] + full * comm["tp_fwd"],
        "cp_comm": comm["cp_fwd"] + comm["cp_bwd"] + full * comm["cp_fwd"],
        "ep_comm": comm["ep_fwd"] + comm["ep_bwd"] + full * comm["ep_fwd"],
    }
    op = op_recompute(d)
    if op is not None:
        # per-op checkpointing; it also gathers the sequence-parallel input again (half the forward's tp traffic)
        layer_parts["recompute"] = layer_parts["recompute"] + op * layer.op_fwd
        layer_parts["tp_comm"] = layer_parts["tp_comm"] + 0.5 * op * comm["tp_fwd"]
    logit_parts = _output_layer(d, peak, elem, eff)

    # pipeline: the last stage holds num_layers / pp layers and the output layer
    layers_per_stage = stage_layers(d)
    micro_batches = micro_batches_per_step(d)
    stage_parts = {k: layers_per_stage * v + logit_parts[k] if k in logit_parts else layers_per_stage * v
                   for k, v in layer_parts.items()}
    offload = (0.0, 0.0)  # the offloaded layers' copies to the host and back (`offload_wait_s`) that show
    if any_set(d, "offload_layers") and any_set(d, "host_link_bw_bytes_per_s"):
        waits = offload_wait_s(activation_bytes_per_layer(d), d.host_link_bw_bytes_per_s, pass_fwd, pass_bwd,
                               d.overlap_ep_comm)
        offload = tuple(torch.minimum(d.offload_layers, layers_per_stage) * wait for wait in waits)
        stage_parts.update(forward_compute=stage_parts["forward_compute"] + offload[0],
                           backward_compute=stage_parts["backward_compute"] + offload[1])
    backward_wall = layers_per_stage * pass_bwd + logit_parts["backward_compute"] + offload[1]
    stage_max = _total(stage_parts.values())
    stage_mean = (_total(layer_parts.values()) * d.num_layers + _total(logit_parts.values())) / d.pp

    # ZeRO-3 implementations (DeepSpeed, FSDP) always prefetch parameters: their gathers overlap the whole step.
    # Otherwise, with overlap on, the reduction hides behind the last micro-batch's backward pass and the distributed
    # optimizer's weight gather behind the first one's forward (`backward_wall`, `forward_wall`; overlap_grad_reduce,
    # overlap_param_gather), slowing the compute beside it (`_exposed`, `Efficiency.overlap_compute_slowdown`).
    params = params_per_device(d)
    dp_time, dp_gather = _data_parallel_time_s(d, params, links, eff)
    zero3 = d.zero_stage >= 3
    hidden = (d.overlap_dp_comm > 0) | zero3  # overlapped dp traffic; not FSDP's held once-a-step traffic
    if any_fsdp_unsharded(d):
        hidden = hidden & (fsdp_keeps_unsharded(d) == 0)
    window = torch.where(zero3, micro_batches * stage_max, backward_wall)
    forward_wall = layers_per_stage * pass_fwd + logit_parts["forward_compute"] + offload[0]
    if any_set(d, "overlap_ep_comm"):
        # a merged forward-and-backward unit of the 1F1B expert-parallel overlap (`overlap_ep_comm`) hides the
        # reduction and the weight gather as one (its exposed dispatch is charged to the backward half), with or
        # without a distributed optimizer's gather
        merged = (d.overlap_ep_comm > 0) & ~zero3
        window = torch.where(merged, window + forward_wall, window)
        dp_gather = None if dp_gather is None else torch.where(merged, 0.0, dp_gather)
    if dp_gather is None:
        overlapped = _exposed(dp_time, window, eff)
    else:
        overlapped = _exposed(dp_time - dp_gather, window, eff) + _exposed(dp_gather, forward_wall, eff)

    breakdown = {k: micro_batches * v for k, v in stage_parts.items()}
    breakdown.update(pipeline_bubble=(d.pp - 1.0) / d.vp * stage_mean,
                     pp_p2p=_pipeline_p2p_s(d, links, elem, micro_batches),
                     dp_comm=torch.where(hidden, overlapped, dp_time),
                     optimizer=_optimizer_time_s(d, params, eff))
    breakdown = {k: breakdown[k] for k in TIME_PARTS}
    step_time = _total(breakdown.values())
    if any_set(d, "straggler_cv"):  # the synchronous step waits for its slowest worker
        wait = coll.straggler_wait_s(d.num_devices, d.straggler_cv, d.staleness,
                                     (d.dp_mode != DP_MODE_CODES["ps_async"]).to(step_time.dtype), step_time)
        breakdown["dp_comm"] = breakdown["dp_comm"] + wait
        step_time = step_time + wait

    memory = memory_breakdown(d, params)
    memory_total = _total(memory.values())
    reason = mapping_reasons(d, peak_raw)
    oom = memory_total > d.hbm_bytes
    reason = torch.where((reason == 0) & oom, int(Reason.OUT_OF_MEMORY), reason)
    energy_parts = energy.step_energy(d, executed, params, step_time, step_time - breakdown["pipeline_bubble"])
    energy_totals = energy.energy_summary(d, energy_parts, step_time)
    reason = energy.power_reason(reason, energy_totals["avg_power_w"], d.tdp_w)

    layer_flops, core_flops_seq = layer_forward_flops_per_sequence(d, gemms)
    model_flops = model_flops_per_step(d, gemms, layer_flops)
    # selective recompute re-runs the unfused attention core only (flash kernels already recompute inside),
    # `op` also half the other matmuls
    unfused_core = (1.0 - d.flash_attention) * core_flops_seq
    recompute_per_layer = full * layer_flops + selective * unfused_core
    if op is not None:
        recompute_per_layer = recompute_per_layer + op * (0.5 * (layer_flops - core_flops_seq) + unfused_core)
    recompute_flops = recompute_per_layer * d.num_layers * d.global_batch_size
    denominator = step_time * d.num_devices * peak
    return StepResult(
        step_time_s=step_time, feasible=reason == 0, reason=reason, memory_per_device_bytes=memory_total,
        mfu=model_flops / denominator, hfu=(model_flops + recompute_flops) / denominator,
        tokens_per_s=d.global_batch_size * d.seq_length / step_time, model_flops=model_flops, **energy_totals,
        time_breakdown_s=breakdown, memory_breakdown_bytes=memory, energy_breakdown_j=energy_parts)
