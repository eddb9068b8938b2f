"""HBM traffic of the eager PyTorch ops Megatron-Core runs beside its fused kernels for two features of
an architecture, per layer, micro-batch and device: `eager_ops` returns `EagerOps` of `(batch,)`
tensors; a batch without either feature computes nothing (zeros).

- A clamped gated MLP (`activation_clamp` > 0, gpt-oss): `weighted_bias_quick_geglu_impl` clamps the
  gate half from above and the linear half on both sides, then concatenates them, before its fused
  kernel (Megatron-Core core_v0.15.0 `megatron/core/fusions/fused_bias_geglu.py:424-432`; a dense
  MLP's unfused GLU clamps the same way, `mlp.py:203-210`). Forward, the two clamps read and write
  the up-projection's output once between them and the cat reads and writes it again: 4 passes. Backward, each clamp's
  gradient reads the incoming gradient and its saved input and writes a gradient (3 passes), and the
  chunk's backward joins the halves (2): 5. Recompute of the activation (Megatron `moe_act`, this
  model's selective with fused attention) runs the forward again.
- Biased experts (`linear_bias` in an MoE layer, gpt-oss): `TEGroupedMLP._apply_bias` adds each local
  expert's output bias times the token's routing probability in a Python loop over the experts, then
  concatenates (`megatron/core/transformer/moe/experts.py:823-840`). Forward per element of the
  experts' output (top_k x hidden a token): the product writes it, the add reads two and writes one,
  the cat reads and writes: 6 passes, 2 kernels a local expert and the cat. Backward, the bias's and
  the probability's gradients each read the incoming gradient and a product: 4 passes.

A fused grouped MLP (`fused_expert_mlp`, Megatron-Core's cuteDSL path) applies both inside its kernels:
nothing here. Passes are counted from the op sequence, in the activations' dtype, not measured.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from analytical.design import DesignBatch
from analytical.step.memo import per_evaluation
from analytical.step.workload import (
    activation_bytes_per_element,
    is_moe,
    is_swiglu,
    local_tokens,
    mlp_width,
)

CLAMP_PASSES = (4.0, 5.0)  # (forward, backward) reads and writes of the up-projection's output
CLAMP_KERNELS = (3.0, 3.0)
BIAS_PASSES = (6.0, 4.0)  # of the experts' output


@dataclass
class EagerOps:
    forward_bytes: torch.Tensor
    backward_bytes: torch.Tensor
    forward_kernels: torch.Tensor
    backward_kernels: torch.Tensor
    recompute_bytes: torch.Tensor  # what re-running the activation (selective recompute) moves again


@per_evaluation
def eager_ops(d: DesignBatch) -> EagerOps:
    """The clamp's and the experts' bias's eager traffic of one layer (see the module docstring)."""
    zero = torch.zeros_like(d.tp)
    clamped = (d.activation_clamp > 0) & (d.fused_expert_mlp == 0) & (is_swiglu(d) > 0)
    biased = (d.linear_bias > 0) & (d.fused_expert_mlp == 0) & (is_moe(d) > 0)
    if not bool(clamped.any() | biased.any()):
        return EagerOps(zero, zero, zero, zero, zero)
    elem = activation_bytes_per_element(d)
    up_out = clamped * elem * 2.0 * local_tokens(d) * mlp_width(d) / d.tp  # gate and linear halves
    experts_out = biased * elem * local_tokens(d) * d.top_k * d.hidden_size
    local_experts = d.num_experts / torch.clamp_min(d.ep, 1.0)
    return EagerOps(
        forward_bytes=CLAMP_PASSES[0] * up_out + BIAS_PASSES[0] * experts_out,
        backward_bytes=CLAMP_PASSES[1] * up_out + BIAS_PASSES[1] * experts_out,
        forward_kernels=clamped * CLAMP_KERNELS[0] + biased * (2.0 * local_experts + 1.0),
        backward_kernels=clamped * CLAMP_KERNELS[1] + biased * 2.0 * local_experts,
        recompute_bytes=CLAMP_PASSES[0] * up_out)
