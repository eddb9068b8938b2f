"""Defaults of the software stack that a mapping leaves unset (`MappingSpec` fields set to None).

A measured run or a command line often states the parallel mapping and not how the framework ran it; these
functions give what the stack the mapping implies does by default, from the mapping's own fields.
"""

from __future__ import annotations

# the overlap fields a MappingSpec may leave to the stack's default (None), by kind
OVERLAP_KINDS = {"dp": "overlap_dp_comm", "tp": "overlap_tp_comm", "pp": "overlap_pp_comm"}


def stack_overlap(mapping, kind: str) -> bool:
    """Whether `mapping`'s (a `MappingSpec`) `kind` traffic ("dp", "tp" or "pp") overlaps compute by default.

    With the distributed optimizer the run is Megatron-Core as NeMo 2 and Megatron-Bridge configure it: their
    communication-overlap callback turns on the data-parallel reduce-scatter and all-gather overlap with the
    distributed optimizer, the pipeline's P2P overlap where pp > 1 with virtual stages (vp > 1), and the recipes'
    tensor-parallel overlap (Transformer Engine userbuffers), which the callback keeps only with tp > 1 and
    sequence parallelism (NeMo @8cfedd7203 nemo/lightning/pytorch/callbacks/megatron_comm_overlap.py:124-188,
    270-283; NeMo docs features/optimizations/communication_overlap.rst). Without it (Megatron-LM before the
    distributed optimizer, DeepSpeed, PyTorch FSDP) nothing overlaps but FSDP's own data-parallel prefetch.
    """
    if kind not in OVERLAP_KINDS:
        raise ValueError(f"overlap kind {kind!r} is invalid: allowed {', '.join(OVERLAP_KINDS)}")
    megatron = bool(mapping.distributed_optimizer)
    if kind == "dp":
        return megatron or bool(mapping.fsdp)
    if kind == "tp":
        return megatron and mapping.tp > 1 and bool(mapping.sequence_parallel)
    return megatron and mapping.pp > 1 and mapping.vp > 1
