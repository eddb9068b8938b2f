"""Defaults of the software stack that a mapping leaves unset (`MappingSpec` fields set to None).

A measured run or a command line often states the parallel mapping and not how the framework ran it; these
functions give what the stack the mapping implies does by default, from the mapping's own fields.
"""

from __future__ import annotations

# the overlap fields a MappingSpec may leave to the stack's default (None), by kind
OVERLAP_KINDS = {"dp": "overlap_dp_comm", "tp": "overlap_tp_comm", "pp": "overlap_pp_comm"}


def stack_overlaps(distributed_optimizer, fsdp, tp, pp, vp, sequence_parallel) -> dict:
    """`{kind: overlapped}` for "dp", "tp" and "pp" by default, from a mapping's fields: Python scalars (bools
    and ints, giving 0 / 1) or `(batch,)` tensors of 0 / 1 (an enumerated search's columns).

    With the distributed optimizer the run is Megatron-Core as NeMo 2 and Megatron-Bridge configure it: their
    communication-overlap callback turns on the data-parallel reduce-scatter and all-gather overlap with the
    distributed optimizer, the pipeline's P2P overlap where pp > 1 with virtual stages (vp > 1), and the recipes'
    tensor-parallel overlap (Transformer Engine userbuffers), which the callback keeps only with tp > 1 and
    sequence parallelism (NeMo @8cfedd7203 nemo/lightning/pytorch/callbacks/megatron_comm_overlap.py:124-188,
    270-283; NeMo docs features/optimizations/communication_overlap.rst). Megatron-LM's own H100 scaling benchmarks
    ran the same three (its README @d98e8a64dd:104: `--overlap-grad-reduce`, `--overlap-param-gather`,
    `--tp-comm-overlap`, PP overlap on by default), though its command-line defaults leave dp and tp off (the
    `llama3-70b-1024` mapping preset states those). Without the distributed optimizer (Megatron-LM before it,
    DeepSpeed, PyTorch FSDP) nothing overlaps but FSDP's own data-parallel prefetch.
    """
    megatron = distributed_optimizer * 1
    return {"dp": megatron + fsdp * (1 - megatron), "tp": megatron * (tp > 1) * sequence_parallel,
            "pp": megatron * (pp > 1) * (vp > 1)}


def stack_overlap(mapping, kind: str) -> bool:
    """Whether `mapping`'s (a `MappingSpec`) `kind` traffic ("dp", "tp" or "pp") overlaps compute by default
    (`stack_overlaps`)."""
    if kind not in OVERLAP_KINDS:
        raise ValueError(f"overlap kind {kind!r} is invalid: allowed {', '.join(OVERLAP_KINDS)}")
    return bool(stack_overlaps(mapping.distributed_optimizer, mapping.fsdp, mapping.tp, mapping.pp, mapping.vp,
                               mapping.sequence_parallel)[kind])
