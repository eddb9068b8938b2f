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

from dataclasses import dataclass, field, fields

import torch

from analytical import collectives as coll
from analytical.design import RECOMPUTE_CODES, DesignBatch
from analytical.efficiency import DEFAULT_EFFICIENCY, Efficiency
from analytical.feasibility import Reason, mapping_reasons, peak_for_precision
from analytical.kernels import flash_attention_time_s, gemm_time_s, memory_bound_time_s
from analytical.memory import grad_bytes_per_param, memory_breakdown, params_per_device
from analytical.workload import (GEMM_SLOTS, activation_bytes_per_element, attention_core_flops, gemm_bytes_per_element,
                                 is_kind, layer_forward_flops_per_sequence, layer_gemms, local_tokens,
                                 logit_gemm_flops,
                                 memory_bound_bytes_per_layer, model_flops_per_step)

TIME_PARTS = ("forward_compute", "backward_compute", "recompute", "tp_comm", "cp_comm", "ep_comm",
              "pipeline_bubble", "pp_p2p", "dp_comm", "optimizer")
TP_OVERLAP_SLOTS = [GEMM_SLOTS.index(n) for n in ("qkv", "attention_out", "ffn_up", "ffn_down")]
CORE_SLOTS = [GEMM_SLOTS.index(n) for n in ("attention_scores", "attention_values")]
ADAM_BYTES_PER_PARAM = 34.0  # read fp32 param, grad, m, v and write param, m, v, 16-bit copy; + grad norm


@dataclass
class StepResult:
    """Outputs for a batch of designs; every tensor is `(batch,)`."""

    step_time_s: torch.Tensor
    feasible: torch.Tensor  # bool
    reason: torch.Tensor  # int64 codes of `analytical.feasibility.Reason`
    memory_per_device_bytes: torch.Tensor
    mfu: torch.Tensor
    hfu: torch.Tensor
    tokens_per_s: torch.Tensor
    model_flops: torch.Tensor
    time_breakdown_s: dict[str, torch.Tensor] = field(default_factory=dict)
    memory_breakdown_bytes: dict[str, torch.Tensor] = field(default_factory=dict)

    @staticmethod
    def cat(parts: list["StepResult"]) -> "StepResult":
        """Concatenate results of consecutive chunks of a batch."""
        first = parts[0]
        tensors = {f.name: torch.cat([getattr(p, f.name) for p in parts]) for f in fields(first)
                   if isinstance(getattr(first, f.name), torch.Tensor)}
        dicts = {f.name: {k: torch.cat([getattr(p, f.name)[k] for p in parts]) for k in getattr(first, f.name)}
                 for f in fields(first) if isinstance(getattr(first, f.name), dict)}
        return StepResult(**tensors, **dicts)

    def row(self, i: int) -> dict:
        """Plain-Python record of design i (for reports and JSON)."""
        return {
            "step_time_s": float(self.step_time_s[i]),
            "feasible": bool(self.feasible[i]),
            "reason": Reason(int(self.reason[i])).name.lower(),
            "memory_per_device_bytes": float(self.memory_per_device_bytes[i]),
            "mfu": float(self.mfu[i]),
            "hfu": float(self.hfu[i]),
            "tokens_per_s": float(self.tokens_per_s[i]),
            "breakdown": {k: float(v[i]) for k, v in self.time_breakdown_s.items()},
            "memory_breakdown": {k: float(v[i]) for k, v in self.memory_breakdown_bytes.items()},
        }


def _col(x: torch.Tensor) -> torch.Tensor:
    return x.unsqueeze(-1)


def _gemm_table_time_s(g, d: DesignBatch, peak: torch.Tensor, eff: Efficiency, live: torch.Tensor) -> torch.Tensor:
    """`(batch, slots)` time of each GEMM slot, serial repetitions included. Only the `live` slots
    (non-empty for some design of the batch) are computed; the others cost 0."""
    t = gemm_time_s(g.m[:, live], g.n[:, live], g.k[:, live], g.count[:, live], _col(peak),
                    _col(d.compute_units), _col(d.tile_m), _col(d.tile_n), _col(d.hbm_bw_bytes_per_s),
                    _col(d.sram_bw_bytes_per_s), _col(d.kernel_launch_s), _col(gemm_bytes_per_element(d)), eff)
    out = torch.zeros_like(g.m)
    out[:, live] = t * g.serial[:, live]
    return out


def _links(d: DesignBatch, eff: Efficiency):
    up_bw = d.scale_up_bw_bytes_per_s * eff.scale_up_bw_fraction
    fat_tree = (d.topology == 0).to(up_bw.dtype)
    taper = 1.0 + fat_tree * (d.oversubscription - 1.0)
    out_bw = torch.clamp_min(d.scale_out_bw_bytes_per_s, 1.0) * eff.scale_out_bw_fraction / taper
    return up_bw, d.scale_up_latency_s, out_bw, d.scale_out_latency_s


def _on_group(collective, d: DesignBatch, links, bytes_, size, stride) -> torch.Tensor:
    """Time of a placed collective (`collectives.group_*`) for a group of the mapping."""
    return collective(bytes_, size, stride, d.scale_up_domain, *links)


def _relu(x: torch.Tensor) -> torch.Tensor:
    return torch.clamp_min(x, 0.0)


def evaluate(d: DesignBatch, eff: Efficiency = DEFAULT_EFFICIENCY, chunk_size: int = 65536) -> StepResult:
    """Time, memory and feasibility of one training step for every design of the batch.

    Batches larger than `chunk_size` are evaluated chunk by chunk (the temporaries of a chunk stay
    in cache; results are identical) and concatenated.
    """
    if d.batch_size <= chunk_size:
        return _evaluate_chunk(d, eff)
    return StepResult.cat([_evaluate_chunk(d.index(slice(i, i + chunk_size)), eff)
                           for i in range(0, d.batch_size, chunk_size)])


def _evaluate_chunk(d: DesignBatch, eff: Efficiency) -> StepResult:
    peak_raw = peak_for_precision(d)
    peak = torch.clamp_min(peak_raw, 1e9)  # keeps unsupported precisions finite; flagged below
    zero = torch.zeros_like(peak)
    transformer = is_kind(d, "transformer")
    elem = activation_bytes_per_element(d)
    tokens = local_tokens(d)
    links = _links(d, eff)

    # ---- one layer, one micro-batch, on one device -------------------------------------------
    gemms = layer_gemms(d)
    dgrad, wgrad = gemms.backward()
    live = (gemms.m * gemms.n * gemms.k * gemms.count > 0).any(0)
    fwd_slots = _gemm_table_time_s(gemms, d, peak, eff, live)
    bwd_slots = _gemm_table_time_s(dgrad, d, peak, eff, live) + _gemm_table_time_s(wgrad, d, peak, eff, live)
    mb_bytes, mb_kernels = memory_bound_bytes_per_layer(d)
    fwd_mem = memory_bound_time_s(mb_bytes, mb_kernels, d.hbm_bw_bytes_per_s, d.kernel_launch_s, eff)
    core_flops = attention_core_flops(d) * d.flash_attention
    qkvo_bytes = 4.0 * tokens * d.hidden_size / d.tp * elem * d.flash_attention
    flash_fwd = flash_attention_time_s(core_flops, qkvo_bytes, peak, d.hbm_bw_bytes_per_s,
                                       d.kernel_launch_s, eff)
    flash_bwd = flash_attention_time_s(2.5 * core_flops, 2.0 * qkvo_bytes, peak, d.hbm_bw_bytes_per_s,
                                       d.kernel_launch_s, eff)  # FA2 backward: 5 of the 2 fwd matmuls
    layer_fwd = fwd_slots.sum(-1) + flash_fwd + fwd_mem + eff.layer_overhead_s
    layer_bwd = bwd_slots.sum(-1) + flash_bwd + 2.0 * fwd_mem + eff.layer_overhead_s

    # attention core of unfused attention: QK^T, AV and the a s^2 softmax/dropout traffic
    scores = d.micro_batch_size * d.num_heads / d.tp * (d.seq_length / d.cp) * d.seq_length
    core_mem = memory_bound_time_s(4.5 * scores * elem * (1.0 - d.flash_attention) * transformer,
                                   2.0 * (1.0 - d.flash_attention) * transformer, d.hbm_bw_bytes_per_s,
                                   d.kernel_launch_s, eff)
    core_fwd = fwd_slots[..., CORE_SLOTS].sum(-1) + core_mem

    # tensor parallel: 2 all-reduces (or all-gather + reduce-scatter pairs) forward, 2 backward
    tp_message = tokens * d.hidden_size * elem
    tp_ar = _on_group(coll.group_all_reduce_time_s, d, links, tp_message, d.tp, torch.ones_like(d.tp)) * transformer
    # with overlap, TP collectives hide behind the GEMMs they feed or follow (QKV, out-projection,
    # MLP); the attention core is left to context parallelism's ring
    tp_hide = d.overlap_tp_comm
    tp_fwd = _relu(2.0 * tp_ar - tp_hide * fwd_slots[..., TP_OVERLAP_SLOTS].sum(-1))
    tp_bwd = _relu(2.0 * tp_ar - tp_hide * bwd_slots[..., TP_OVERLAP_SLOTS].sum(-1))

    # context parallel (ring attention): K and V circulate, overlapped with the attention kernels
    kv_bytes = 2.0 * tokens * d.num_kv_heads * (d.hidden_size / d.num_heads) / d.tp * elem * d.cp
    cp_ag = _on_group(coll.group_all_gather_time_s, d, links, kv_bytes, d.cp, d.tp) * transformer
    attn_fwd = flash_fwd + core_fwd
    cp_fwd = _relu(cp_ag - attn_fwd)
    cp_bwd = _relu(2.0 * cp_ag - (flash_bwd + bwd_slots[..., CORE_SLOTS].sum(-1)))

    # expert parallel: dispatch and combine all-to-all, forward and backward
    moe = (d.num_experts > 1).to(peak.dtype) * transformer
    ep_bytes = tokens * d.hidden_size * d.top_k * elem
    ep_a2a = _on_group(coll.group_all_to_all_time_s, d, links, ep_bytes, d.ep, d.tp * d.cp) * moe
    ep_fwd, ep_bwd = 2.0 * ep_a2a, 2.0 * ep_a2a

    full = (d.recompute == RECOMPUTE_CODES["full"]).to(peak.dtype)
    selective = (d.recompute == RECOMPUTE_CODES["selective"]).to(peak.dtype)
    recompute = full * layer_fwd + selective * core_fwd
    layer_parts = {
        "forward_compute": layer_fwd,
        "backward_compute": layer_bwd,
        "recompute": recompute,
        "tp_comm": tp_fwd + tp_bwd + full * tp_fwd,
        "cp_comm": cp_fwd + cp_bwd + full * cp_fwd,
        "ep_comm": ep_fwd + ep_bwd + full * ep_fwd,
    }

    # output layer and loss on the last stage (logit GEMMs + fp32 softmax cross-entropy)
    not_gemm = 1.0 - is_kind(d, "gemm")
    logit_fwd_flops = logit_gemm_flops(d)
    logit_fwd = logit_fwd_flops / (peak * eff.gemm_peak_fraction) + d.kernel_launch_s * not_gemm
    loss = memory_bound_time_s(tokens * d.vocab_size / d.tp * (elem + 8.0) * not_gemm, 3.0 * not_gemm,
                               d.hbm_bw_bytes_per_s, d.kernel_launch_s, eff)
    logit_parts = {"forward_compute": logit_fwd + loss, "backward_compute": 2.0 * logit_fwd + loss}

    # ---- pipeline ------------------------------------------------------------------------------
    layers_per_stage = d.num_layers / d.pp
    micro_batches = d.global_batch_size / (d.dp * d.micro_batch_size)
    stage_parts = {k: layers_per_stage * v + logit_parts.get(k, zero) for k, v in layer_parts.items()}
    stage_max = sum(stage_parts.values())
    stage_mean = (sum(layer_parts.values()) * d.num_layers + sum(logit_parts.values())) / d.pp
    bubble = (d.pp - 1.0) / d.vp * stage_mean
    pp_stride = d.tp * d.cp * d.dp
    up_bw, up_alpha, out_bw, out_alpha = links
    pp_bw, pp_alpha = coll.p2p_link(d.pp, pp_stride, d.scale_up_domain, up_bw, up_alpha, out_bw, out_alpha)
    p2p_bytes = tokens * d.hidden_size * elem / d.tp  # scatter-gather: each tp rank sends 1/tp
    p2p = torch.where(d.pp > 1, coll.p2p_time_s(p2p_bytes, pp_bw, pp_alpha), zero)
    pp_p2p = 2.0 * p2p * (micro_batches * d.vp + d.pp - 1.0)

    # ---- data parallel / ZeRO ------------------------------------------------------------------
    params = params_per_device(d)
    grad_bytes = params * grad_bytes_per_param(d)
    weight_bytes = params * elem  # gathered in the 16-bit (fp32: 32-bit) training dtype
    dp_stride = d.tp * d.cp
    ar = _on_group(coll.group_all_reduce_time_s, d, links, grad_bytes, d.dp, dp_stride)
    rs = _on_group(coll.group_all_gather_time_s, d, links, grad_bytes, d.dp, dp_stride)
    ag = _on_group(coll.group_all_gather_time_s, d, links, weight_bytes, d.dp, dp_stride)
    z = d.zero_stage
    sharded = ((z >= 1) | (d.distributed_optimizer > 0)).to(peak.dtype)
    dp_time = torch.where(z >= 3, micro_batches * (2.0 * ag + rs) / eff.zero3_comm_fraction,
                          torch.where(z >= 2, micro_batches * rs + ag,
                                      sharded * (rs + ag) + (1.0 - sharded) * ar))
    # ZeRO-3 implementations (DeepSpeed, FSDP) always prefetch parameters: their gathers overlap
    # the whole step. Otherwise, with overlap on, the reduction hides behind the last micro-batch's
    # backward pass (its wall time: compute and exposed tp/cp/ep communication).
    backward_wall = (layers_per_stage * (layer_bwd + tp_bwd + cp_bwd + ep_bwd) + logit_parts["backward_compute"])
    overlapped = torch.relu(dp_time - torch.where(z >= 3, micro_batches * stage_max, backward_wall))
    dp_exposed = torch.where((d.overlap_dp_comm > 0) | (z >= 3), overlapped, dp_time)

    opt_params = params / torch.where(sharded > 0, d.dp, torch.ones_like(d.dp))
    optimizer = memory_bound_time_s(opt_params * ADAM_BYTES_PER_PARAM, torch.full_like(peak, 4.0),
                                    d.hbm_bw_bytes_per_s, d.kernel_launch_s, eff)

    breakdown = {k: micro_batches * v for k, v in stage_parts.items()}
    breakdown.update(pipeline_bubble=bubble, pp_p2p=pp_p2p, dp_comm=dp_exposed, optimizer=optimizer)
    breakdown = {k: breakdown[k] for k in TIME_PARTS}
    step_time = sum(breakdown.values())

    # ---- memory, feasibility, metrics --------------------------------------------------------
    memory = memory_breakdown(d, params)
    memory_total = sum(memory.values())
    reason = mapping_reasons(d, peak_raw)
    oom = memory_total > d.hbm_bytes
    reason = torch.where((reason == 0) & oom, torch.full_like(reason, int(Reason.OUT_OF_MEMORY)), reason)

    model_flops = model_flops_per_step(d, gemms)
    layer_flops, core_flops_seq = layer_forward_flops_per_sequence(d, gemms)
    # selective recompute re-runs the unfused attention core only; flash kernels already recompute inside
    recompute_flops = (full * layer_flops + selective * (1.0 - d.flash_attention) * core_flops_seq) \
        * d.num_layers * d.global_batch_size
    denominator = step_time * d.num_devices * peak
    return StepResult(
        step_time_s=step_time,
        feasible=reason == 0,
        reason=reason,
        memory_per_device_bytes=memory_total,
        mfu=model_flops / denominator,
        hfu=(model_flops + recompute_flops) / denominator,
        tokens_per_s=d.global_batch_size * d.seq_length / step_time,
        model_flops=model_flops,
        time_breakdown_s=breakdown,
        memory_breakdown_bytes=memory,
    )
