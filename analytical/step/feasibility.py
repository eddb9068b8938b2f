"""Feasibility rules: which designs can run, and the first reason why one cannot.

A design that cannot run is an answer (`feasible=False` and a reason code), not an error. Codes
are checked in the order of `Reason`; the first rule a design breaks is its reason.
"""

from __future__ import annotations

import torch

from analytical.codes import KIND_CODES, Reason
from analytical.design import DesignBatch, any_set, per_precision
from analytical.step.cnn import any_cnn
from analytical.step.workload import any_fused, any_parameter_server, expert_tp


def _divides(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """True where integer-valued a divides integer-valued b."""
    return torch.remainder(b, a) == 0


def expert_grid_fits(etp, ep, dp, cp, tp):
    """Whether Megatron-Core's expert grid fits the mapping: etp x ep divides dp x cp x tp (MoE parallel folding:
    the experts fold over the data-, context- and tensor-parallel ranks). Integers or integer-valued tensors."""
    return (dp * cp * tp) % (etp * ep) == 0


def mapping_reasons(d: DesignBatch, peak_flops_per_s: torch.Tensor) -> torch.Tensor:
    """`(batch,)` int64 reason codes of every rule except memory (0 = all rules hold)."""
    transformer = d.kind == KIND_CODES["transformer"]
    supported = transformer | ((d.tp == 1) & (d.cp == 1) & (d.ep == 1) & (d.sequence_parallel == 0))
    if any_cnn(d):  # a CNN trains data-parallel only (one layer table: no stages, nothing to recompute)
        supported = supported & ((d.kind != KIND_CODES["cnn"]) | ((d.pp == 1) & (d.recompute == 0)))
    micro_batches = d.global_batch_size / (d.dp * d.micro_batch_size)
    checks = [
        (Reason.DEGREES_NOT_DEVICES, (d.tp * d.pp * d.dp * d.cp == d.num_devices) & (d.dp == torch.round(d.dp))),
        (Reason.TP_NOT_DIVIDING_HEADS,
         ~transformer | (_divides(d.tp, d.num_heads) & _divides(d.tp, d.num_kv_heads)
                         & ((d.sequence_parallel == 0) | _divides(d.tp * d.cp, d.seq_length)))),
        # uneven stages are allowed (Megatron-Core's first/last-stage layer counts, e.g. Llama 3.1
        # 405B's 126 layers on pp 8 x vp 4); the slowest stage holds the rounded-up share. The
        # embedding and the loss may take a chunk each (account_for_embedding/loss_in_pipeline_split:
        # 126 layers on pp 16 x vp 8)
        (Reason.PP_NOT_DIVIDING_LAYERS, d.pp * d.vp <= d.num_layers + 2.0),
        (Reason.BATCH_NOT_DIVISIBLE, _divides(d.dp * d.micro_batch_size, d.global_batch_size)),
        (Reason.CP_NOT_DIVIDING_SEQUENCE, (d.cp == 1) | _divides(2.0 * d.cp, d.seq_length)),
        # experts fold over the data-, context- and tensor-parallel ranks (Megatron-Core MoE
        # parallel folding): etp x ep divides dp x cp x tp, i.e. ep divides dp x cp unless etp < tp
        (Reason.EP_INVALID, _divides(d.ep, d.num_experts) & expert_grid_fits(expert_tp(d), d.ep, d.dp, d.cp, d.tp)),
        (Reason.VP_INVALID, (d.vp == 1) | ((d.pp > 1) & (torch.remainder(micro_batches, d.pp) == 0))),
        (Reason.MAPPING_UNSUPPORTED_BY_MODEL, supported),
        (Reason.ZERO_WITH_PIPELINE, (d.zero_stage < 2) | (d.pp == 1) | (d.fsdp > 0)),
        (Reason.PRECISION_UNSUPPORTED, peak_flops_per_s > 0),
        (Reason.NO_SCALE_OUT_LINK, (d.num_devices <= d.scale_up_domain) | (d.scale_out_bw_bytes_per_s > 0)),
    ]
    # rules of options most designs leave off, checked only where a design of the batch uses them
    # (after MAPPING_UNSUPPORTED_BY_MODEL: fused jobs first, then parameter servers)
    after = [code for code, _ in checks].index(Reason.MAPPING_UNSUPPORTED_BY_MODEL) + 1
    if any_parameter_server(d):  # parameter servers take whole (unsharded) gradients: plain data parallelism
        checks.insert(after, (Reason.PARAMETER_SERVER_INVALID, (d.dp_mode == 0) | (
            (d.ps_shards >= 1) & (d.zero_stage == 0) & (d.distributed_optimizer == 0))))
    if any_set(d, "dp_shard"):  # HSDP: dp_shard shards times dp / dp_shard replicas make dp
        checks.insert(after, (Reason.DP_SHARD_INVALID, (d.dp_shard == 0) | _divides(d.dp_shard, d.dp)))
    if any_fused(d):  # HFTA fuses jobs that each run on one device (Wang et al. MLSys 2021, sec. 3)
        single_device = (d.tp == 1) & (d.pp == 1) & (d.cp == 1) & (d.ep == 1) & (d.dp == 1)
        checks.insert(after, (Reason.FUSED_JOBS_INVALID, (d.fused_jobs == 1) | single_device))
    reason = torch.zeros(d.batch_size, dtype=torch.int64, device=d.tp.device)
    for code, holds in reversed(checks):  # earlier rules overwrite later ones
        reason = torch.where(holds, reason, int(code))
    return reason


def peak_for_precision(d: DesignBatch) -> torch.Tensor:
    """`(batch,)` dense peak FLOP/s of the accelerator at the mapping's precision (0 = unsupported)."""
    return per_precision(d, "peak_", "_flops_per_s")
