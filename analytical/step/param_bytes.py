"""Bytes a parameter holds and moves, per precision and optimizer: the training weights (and an fp8 cast
copy), the gradients as accumulated and reduced, the optimizer state (master copy and Adam's moments), the
weights' all-gathers and the Adam step's HBM traffic. Each function returns `(batch,)` bytes per parameter;
`analytical.step.memory` multiplies them by the parameters a device holds. And the one activation that a
narrow format gathers narrow: `sp_gather_bytes_per_element`."""

from __future__ import annotations

import torch

from analytical.codes import MASTER_PARAMS_CODES, PRECISION_CODES
from analytical.design import DesignBatch, any_set, per_evaluation
from analytical.step.workload import activation_bytes_per_element, gemm_bytes_per_element, is_narrow


@per_evaluation
def fp8_gathers(d: DesignBatch) -> torch.Tensor | None:
    """1.0 where the weights' all-gathers move fp8 (`fp8_param_gather` with per-tensor fp8): the fp8 primary
    weights of Megatron's distributed optimizer (`fp8_primary_weights`) or, under FSDP, FSDP2's float8
    all-gather (torchao / torchtitan `enable_fsdp_float8_all_gather`: each rank casts its 16-bit shard to fp8
    before the gather), else 0.0; None where no design of the batch has them."""
    if not any_set(d, "fp8_param_gather"):
        return None
    on = (d.fp8_param_gather > 0) & (d.precision == PRECISION_CODES["fp8"]) & ((d.zero_stage < 3) | (d.fsdp > 0))
    return on.to(d.tp.dtype)


@per_evaluation
def fp8_primary_weights(d: DesignBatch) -> torch.Tensor | None:
    """1.0 where the compute weights exist only in fp8 (`fp8_gathers` without ZeRO-3 / FSDP: Megatron's
    distributed optimizer gathers them so), else 0.0; None where no design of the batch has them."""
    fp8 = fp8_gathers(d)
    return None if fp8 is None else fp8 * (d.zero_stage < 3)


@per_evaluation
def weight_bytes_per_param(d: DesignBatch) -> torch.Tensor:
    wide = (d.precision <= PRECISION_CODES["tf32"]).to(d.tp.dtype)
    held = 2.0 + 2.0 * wide + is_narrow(d) * gemm_bytes_per_element(d)  # narrow: a bf16 weight and its cast copy
    fp8_only = fp8_primary_weights(d)
    return held if fp8_only is None else held - 2.0 * fp8_only  # fp8 primary weights: the fp8 copy alone


@per_evaluation
def param_gather_bytes_per_param(d: DesignBatch) -> torch.Tensor:
    """Bytes a layer's weight moves in the all-gathers of the distributed optimizer, ZeRO or FSDP: the
    16-bit (fp32: 32-bit) training dtype, 1 where they gather fp8 (`fp8_gathers`); the embedding and
    output layer always gather their 16-bit weights (`memory.gather_buffers`)."""
    elem = activation_bytes_per_element(d)
    fp8 = fp8_gathers(d)
    return elem if fp8 is None else elem - (elem - 1.0) * fp8


@per_evaluation
def grad_bytes_per_param(d: DesignBatch) -> torch.Tensor:
    """Bytes of each gradient as accumulated and reduced (`(batch,)`): fp32 when training in fp32 or
    tf32; the fp16 parameter dtype under fp16; fp32 main gradients for bf16 and narrower GEMMs unless
    `grad_reduce_in_fp32` is off, then the bf16 parameter dtype."""
    half = d.precision == PRECISION_CODES["fp16"]
    if not bool((d.grad_reduce_in_fp32 > 0).all()):
        half = half | ((d.precision > PRECISION_CODES["tf32"]) & (d.grad_reduce_in_fp32 == 0))
    return 4.0 - 2.0 * half.to(d.tp.dtype)


MOMENT_BYTES = (4.0, 2.0, 2.0, 1.0)  # an Adam moment in each of OPTIMIZER_STATE_DTYPES: fp32, bf16, fp16, fp8
MASTER_BYTES = (4.0, 2.0, 2.0, 0.0)  # a weight's optimizer copy in each of MASTER_PARAMS: fp32, fp16, remainder, none


@per_evaluation
def optimizer_state_bytes(d: DesignBatch) -> tuple[torch.Tensor, torch.Tensor] | None:
    """`(master, moment)` `(batch,)` each: bytes of the optimizer's copy of a weight (none when training in fp32 or
    tf32: the weights are their own) and of each of Adam's two moments; None where every design keeps fp32 ones."""
    if not (any_set(d, "optimizer_state_dtype") or any_set(d, "master_params")):
        return None
    table = lambda codes, t: torch.tensor(t, dtype=codes.dtype, device=codes.device)[codes.long()]  # noqa: E731
    narrow = d.precision > PRECISION_CODES["tf32"]
    return narrow * table(d.master_params, MASTER_BYTES), table(d.optimizer_state_dtype, MOMENT_BYTES)


@per_evaluation
def optimizer_bytes_per_param(d: DesignBatch) -> torch.Tensor:
    """Optimizer state a parameter holds (`(batch,)`): its master copy and Adam's two moments (12 bytes
    with fp32 ones, 8 when training in fp32)."""
    state = optimizer_state_bytes(d)
    return 4.0 * (d.precision > PRECISION_CODES["tf32"]) + 8.0 if state is None else state[0] + 2.0 * state[1]


@per_evaluation
def adam_step_bytes_per_param(d: DesignBatch) -> torch.Tensor:
    """HBM bytes the Adam step moves for each parameter it updates (`(batch,)`): the fp32 gradient read
    twice (the step and the global gradient norm), the master copy and both moments read and written,
    and the training weight written from the master copy, or read and written where the optimizer
    steps it in place (fp32 training, `master_params` none) or keeps a 16-bit remainder beside it.
    34 bytes with fp32 master weights and moments under 16-bit training, 32 in fp32."""
    state = optimizer_state_bytes(d)
    if state is None:  # 8 + 2 x 4 + 4 x 4 + 2 (16-bit training) or 8 + 4 x 4 + 2 x 4 (fp32): 28 + half the state
        return 28.0 + 0.5 * optimizer_bytes_per_param(d)
    (master, moment), narrow = state, d.precision > PRECISION_CODES["tf32"]
    in_place = (master == 0) | (d.master_params == MASTER_PARAMS_CODES["remainder"])
    return 8.0 + 2.0 * master + 4.0 * moment + torch.where(narrow, 2.0, 4.0) * (1.0 + in_place.to(master.dtype))


@per_evaluation
def sp_gather_bytes_per_element(d: DesignBatch) -> torch.Tensor:
    """Bytes an element of a sequence-parallel all-gather (a GEMM's gathered input) moves, `(batch,)`: under an 8- or
    4-bit format the quantized GEMM input (Transformer Engine module/layernorm_linear.py `gather_along_first_dim(...,
    quantizer=)`, base.py "AllGather buffers use fp8 when using fp8 recipe"; torchtitan docs/float8.md), else the
    activations' dtype. The reduce-scatters move the 16-bit GEMM outputs."""
    return torch.where(is_narrow(d) > 0, gemm_bytes_per_element(d), activation_bytes_per_element(d))
