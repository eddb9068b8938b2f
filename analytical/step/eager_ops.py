"""HBM traffic of eager PyTorch ops beside the fused kernels the step model assumes, per layer,
micro-batch and device: `eager_ops` returns `EagerOps` of `(batch,)` tensors; a batch without any of the
features below computes nothing (zeros).

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
nothing here.

- Eager element-wise modules (`elementwise` eager / eager_fused_norm): torchtitan's Llama block without
  torch.compile (pytorch/torchtitan@9dec370, 2024-12: `models/norms.py` RMSNorm, `models/llama/model.py`
  apply_rotary_emb, repeat_kv, FeedForward). Counted beyond what the step model charges the fused kernels
  (a norm's read and write, the activation's 3 passes, nothing for the rotary embedding):
  - RMSNorm `(x.float() * rsqrt(x.float().pow(2).mean(-1) + eps)).type_as(x) * weight`: forward the cast,
    pow, mean, product, cast back and weight product move 4 activation-dtype and 7 fp32 passes over
    the norm's input (2 of them charged already), 6 kernels and 2 small ones; backward autograd's
    chain moves 8 and 17 (4 charged) in about 12 kernels. Not with `eager_fused_norm`.
  - Rotary embedding in complex fp32 (`view_as_complex(x.float()) * freqs_cis`, cast back), on the
    queries and keys: 2 activation-dtype and 4 fp32 passes forward and again backward, 3 kernels each.
  - Grouped-query attention's `repeat_kv` copies keys and values to every query head: it reads the kv
    heads and writes the query heads' width, forward, and sums them back in the backward pass.
  - The gated activation `silu(w1 x) * w3 x`: 2 passes more forward (silu writes its output, the product
    reads it) and 3 more backward than one fused kernel.
  Full recompute and per-op checkpointing run the forward's share again (torchtitan's op policy
  recomputes every element-wise op); selective recompute its norms' and activation's share.
- An eager MLP activation beside fused norms and rotary embedding (`elementwise` eager_activation; with the
  eager modes above too): NeMo 2.x's Nemotron `squared_relu`, `torch.pow(torch.nn.functional.relu(x), 2)` with
  its `@torch.jit.script` commented out (nemo/collections/llm/fn/activation.py, v2.2.0 / v2.3.0; NemotronConfig
  leaves Megatron-Core's `bias_activation_fusion` False, so its MLP calls it as is). Forward, relu writes its
  output and pow reads it: 2 passes over the up-projection's output beyond one fused kernel, 1 kernel more;
  backward, `pow_backward` (`grad * (2 * r.pow(1))`: a copy, a scale, a product) and relu's
  `threshold_backward` move 10 passes where a fused kernel moves 4: 6 more, 3 kernels more. It saves relu's
  output for pow where a fused kernel saves its input: no more memory. (Megatron-Core's own `squared_relu`
  and NeMo 1.x's are `@jit_fuser`-compiled: fused.) A gated activation here costs as torchtitan's above.
- Megatron-Core's unfused RoPE under YaRN (`rope_mscale` != 1, gpt-oss; with fused element-wise modules):
  Transformer Engine's fused RoPE has no attention factor, so Megatron-Core falls back to its unfused
  `_apply_rotary_pos_emb_bshd` (`rope_utils.py` apply_rotary_pos_emb, "mscale ... is not supported by TE's
  fused RoPE", from PR #2038, 2025-11-22: core_v0.16.0 on, and the dev 0.15 of Megatron-Bridge v0.2.0's
  pin 0d8e0714). Per query and key element, forward: `t * cos`, rotate-half's negation (half the
  elements) and concatenation, `* sin`, the sum and the final concatenation with the pass-through part,
  12 passes in 6 kernels; backward about as many. The fused kernel's own two passes are not charged by
  the step model, so all 12 are.

- PyTorch DTensor's sequence parallelism (`sp_keeps_gathered_input`, torchtitan) keeps activations batch first,
  `(batch, sequence, hidden)`, and gathers and scatters them along the sequence, dim 1, where NCCL gathers and
  scatters along dim 0: each all-gather is followed by `torch.cat(torch.chunk(out, tp, dim=0), dim=1)` and each
  reduce-scatter preceded by `torch.cat(torch.chunk(in, tp, dim=1))` (torch/distributed/_functional_collectives.py
  `all_gather_tensor` / `reduce_scatter_tensor`; from pytorch/pytorch#169404, December 2025, an all-gather of one
  sequence takes a view instead, not modelled: every torchtitan run here is older). Each is a read and a write of the
  whole gathered tensor: per layer and pass, 2 gathers of the attention and MLP inputs and 2 scatters of their
  outputs, the backward pass's mirrors on the gradients. Megatron-Core lays activations out sequence first, so its
  gathers and scatters need none. Async TP (`overlap_tp_comm`; torch._inductor's micro-pipelined
  `fused_all_gather_matmul` / `fused_matmul_reduce_scatter`, torch/distributed/_symmetric_memory) moves the
  sequence dim to the front of what it pipelines instead: a copy of the local shard before each gather and of the
  reduce-scatter GEMM's input (the attention output, the MLP's down-projection input, 1/tp wide), not of the
  gathered tensor.

Passes are counted from the op sequences, not measured; fp32 passes move 4 bytes an element, the others
the activations' dtype.

`eager_saved_bytes` is the memory side of the eager element-wise modules: what their autograd graph keeps
for the backward pass beyond the fused kernels' set that `analytical.step.memory` counts (Korthikanti et
al.), counted with `torch.autograd.graph.saved_tensors_hooks` over unique storages on the modules above
(bf16 input): RMSNorm keeps its fp32 copy of the input and its normalised output, 6 bytes an element where
a fused norm keeps its 2-byte input (4 more, also at fp32, where the copy is the input itself); the rotary
embedding nothing (the complex product saves only the frequency table, which needs no gradient);
attention keeps `repeat_kv`'s copies of the keys and values at every query head's width instead of the kv
heads; `silu(w1 x) * w3 x` keeps silu's output besides its input, `w3 x` and the product (4 tensors, not 3).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import NamedTuple

import torch

from analytical.codes import ELEMENTWISE_CODES, FFN_CODES
from analytical.design import DesignBatch, any_set, per_evaluation, sequence_parallel_divisor
from analytical.step.attention import attention_out_width, head_dim, is_mla
from analytical.step.param_bytes import sp_gather_bytes_per_element
from analytical.step.workload import (
    activation_bytes_per_element,
    is_kind,
    is_moe,
    is_swiglu,
    local_tokens,
    mlp_width,
    routed_copies,
)

CLAMP_PASSES = (4.0, 5.0)  # (forward, backward) reads and writes of the up-projection's output
CLAMP_KERNELS = (3.0, 3.0)
BIAS_PASSES = (6.0, 4.0)  # of the experts' output
FP32_BYTES = 4.0
# eager element-wise modules, beyond the fused kernels' charge: (forward, backward) passes in the
# activations' dtype and in fp32, and kernels (see the module docstring)
NORM_PASSES = ((2.0, 7.0), (4.0, 17.0))
NORM_KERNELS = (7.0, 10.0)
ROPE_PASSES = ((2.0, 4.0), (2.0, 4.0))
ROPE_KERNELS = (6.0, 6.0)  # queries and keys
GLU_PASSES = (2.0, 3.0)
# eager squared ReLU `torch.pow(relu(x), 2)` beyond one fused kernel's read and write (2 passes forward, 4 backward):
# forward relu writes its output and pow reads it; backward autograd's pow_backward `grad * (2 * r.pow(1))` copies,
# scales and multiplies (7 passes, 3 kernels) and relu's threshold_backward reads the gradient and its result (3)
SQUARED_RELU_PASSES = (2.0, 6.0)
SQUARED_RELU_KERNELS = (1.0, 3.0)
MEGATRON_ROPE_PASSES = (12.0, 12.0)  # unfused RoPE under YaRN, activation dtype
MEGATRON_ROPE_KERNELS = (12.0, 12.0)  # queries and keys
NORM_SAVED_BYTES = 4.0  # eager RMSNorm's saved tensors beyond a fused norm's, per element (`eager_saved_bytes`)


@dataclass
class EagerOps:
    forward_bytes: torch.Tensor
    backward_bytes: torch.Tensor
    forward_kernels: torch.Tensor
    backward_kernels: torch.Tensor
    recompute_bytes: torch.Tensor  # what re-running the activation (selective recompute) moves again


def _passes_bytes(elements: torch.Tensor, passes: tuple[float, float], elem: torch.Tensor) -> torch.Tensor:
    """Bytes of `passes` (activation-dtype, fp32) over `elements`."""
    return elements * (passes[0] * elem + passes[1] * FP32_BYTES)


def rotary_elements(d: DesignBatch) -> torch.Tensor:
    """Query and key elements the rotary embedding rotates, per layer, micro-batch and device: every
    head's width; under latent attention the rotary part of each query head and the one shared key."""
    kv = torch.where(is_mla(d), 1.0, d.num_kv_heads)
    width = torch.where(is_mla(d), d.qk_rope_head_dim, head_dim(d))
    return local_tokens(d) * (d.num_heads + kv) * width / d.tp


def _unfused_rope(d: DesignBatch, elem: torch.Tensor) -> EagerOps:
    """Megatron-Core's unfused RoPE where YaRN's attention factor is not 1 (and the rotary embedding otherwise fused:
    `elementwise` fused or eager_activation)."""
    on = ((d.rope_mscale != 1.0) & ~_torchtitan_eager(d)).to(elem.dtype)
    bytes_ = on * is_kind(d, "transformer") * rotary_elements(d) * elem
    kernels = on * is_kind(d, "transformer")
    return EagerOps(MEGATRON_ROPE_PASSES[0] * bytes_, MEGATRON_ROPE_PASSES[1] * bytes_,
                    MEGATRON_ROPE_KERNELS[0] * kernels, MEGATRON_ROPE_KERNELS[1] * kernels,
                    recompute_bytes=torch.zeros_like(bytes_))


def _add(a: EagerOps, b: EagerOps) -> EagerOps:
    return EagerOps(*(getattr(a, f.name) + getattr(b, f.name) for f in dataclasses.fields(EagerOps)))


def _torchtitan_eager(d: DesignBatch) -> torch.Tensor:
    """Where torchtitan's Llama block runs its element-wise modules eagerly (`elementwise` eager or
    eager_fused_norm), bool `(batch,)`."""
    return (d.elementwise == ELEMENTWISE_CODES["eager"]) | (d.elementwise == ELEMENTWISE_CODES["eager_fused_norm"])


class _EagerModules(NamedTuple):
    """Per layer, micro-batch and device, `(batch,)` each (the shared terms of `_elementwise` and
    `eager_saved_bytes`)."""
    eager: torch.Tensor  # 1 where a Transformer's rotary embedding and repeat_kv run eagerly (torchtitan)
    norm: torch.Tensor  # 1 where its RMSNorms are eager too (not under `eager_fused_norm`)
    norm_elements: torch.Tensor  # elements the two eager RMSNorms read
    grouped: torch.Tensor  # 1 where grouped-query attention copies keys and values (`repeat_kv`)
    glu_bytes: torch.Tensor  # bytes of an eager gated activation's output
    relu2_bytes: torch.Tensor  # bytes of an eager squared ReLU's output


def _eager_modules(d: DesignBatch) -> _EagerModules:
    elem = activation_bytes_per_element(d)
    transformer = is_kind(d, "transformer")
    eager = _torchtitan_eager(d) * transformer
    norm = eager * (d.elementwise == ELEMENTWISE_CODES["eager"]).to(elem.dtype)
    norm_elements = norm * 2.0 * local_tokens(d) * d.hidden_size / sequence_parallel_divisor(d)
    grouped = eager * ((d.num_kv_heads < d.num_heads) & ~is_mla(d)).to(elem.dtype)
    activation = (d.elementwise != ELEMENTWISE_CODES["fused"]) * transformer * local_tokens(d) * mlp_width(d) / d.tp
    relu2 = (d.ffn_type == FFN_CODES["squared_relu"]) * activation * elem
    return _EagerModules(eager, norm, norm_elements, grouped, is_swiglu(d) * activation * elem, relu2)


def _elementwise(d: DesignBatch, elem: torch.Tensor) -> EagerOps:
    """Eager element-wise modules' extra traffic (`elementwise` eager, eager_fused_norm or eager_activation)."""
    eager, norm, norm_elems, grouped, glu, relu2 = _eager_modules(d)
    rope_elems = eager * rotary_elements(d)
    kv_copy = grouped * 2.0 * local_tokens(d) * (d.num_kv_heads + d.num_heads) * head_dim(d) / d.tp * elem
    activation = GLU_PASSES[0] * glu + SQUARED_RELU_PASSES[0] * relu2
    forward = (_passes_bytes(norm_elems, NORM_PASSES[0], elem) + _passes_bytes(rope_elems, ROPE_PASSES[0], elem)
               + kv_copy + activation)
    backward = (_passes_bytes(norm_elems, NORM_PASSES[1], elem) + _passes_bytes(rope_elems, ROPE_PASSES[1], elem)
                + kv_copy + GLU_PASSES[1] * glu + SQUARED_RELU_PASSES[1] * relu2)
    glu_on, relu2_on = (glu > 0).to(elem.dtype), (relu2 > 0).to(elem.dtype)
    kernels = (norm * NORM_KERNELS[0] + eager * ROPE_KERNELS[0] + 2.0 * grouped + glu_on
               + SQUARED_RELU_KERNELS[0] * relu2_on)
    back_kernels = (norm * NORM_KERNELS[1] + eager * ROPE_KERNELS[1] + 2.0 * grouped + glu_on
                    + SQUARED_RELU_KERNELS[1] * relu2_on)
    # Megatron-style selective recompute re-runs the norms and the activation only
    modules = _passes_bytes(norm_elems, NORM_PASSES[0], elem) + activation
    return EagerOps(forward, backward, kernels, back_kernels, recompute_bytes=modules)


@per_evaluation
def eager_saved_bytes(d: DesignBatch) -> tuple[torch.Tensor, torch.Tensor]:
    """`(saved, modules)`, `(batch,)` each: activation bytes the eager element-wise modules' autograd graph
    keeps for the backward pass beyond the fused kernels' set, per layer, micro-batch and device, and the
    norms' and activation's share of it (what selective recompute re-runs rather than keeps). Zeros where
    `elementwise` is fused (see the module docstring)."""
    if not any_set(d, "elementwise"):
        zero = torch.zeros_like(d.tp)
        return zero, zero
    m = _eager_modules(d)
    norms = m.norm_elements * NORM_SAVED_BYTES
    kv_copies = (m.grouped * 2.0 * local_tokens(d) * (d.num_heads - d.num_kv_heads) * head_dim(d) / d.tp
                 * activation_bytes_per_element(d))
    return norms + kv_copies + m.glu_bytes, norms + m.glu_bytes  # an eager squared ReLU keeps no more than fused


@per_evaluation
def eager_ops(d: DesignBatch) -> EagerOps:
    """The eager traffic of one layer (see the module docstring)."""
    zero = torch.zeros_like(d.tp)
    any_rope = bool((d.rope_mscale != 1.0).any())
    if not (any_set(d, "activation_clamp") or any_set(d, "linear_bias") or any_set(d, "elementwise")
            or any_set(d, "sp_keeps_gathered_input") or any_rope):
        return EagerOps(zero, zero, zero, zero, zero)  # (every design fused: the common case, no more work)
    clamped = (d.activation_clamp > 0) & (d.fused_expert_mlp == 0) & (is_swiglu(d) > 0)
    biased = (d.linear_bias > 0) & (d.fused_expert_mlp == 0) & (is_moe(d) > 0)
    elem = activation_bytes_per_element(d)
    up_out = clamped * elem * 2.0 * local_tokens(d) * mlp_width(d) / d.tp  # gate and linear halves
    experts_out = biased * elem * local_tokens(d) * routed_copies(d) * d.hidden_size
    local_experts = d.num_experts / torch.clamp_min(d.ep, 1.0)
    ops = EagerOps(
        forward_bytes=CLAMP_PASSES[0] * up_out + BIAS_PASSES[0] * experts_out,
        backward_bytes=CLAMP_PASSES[1] * up_out + BIAS_PASSES[1] * experts_out,
        forward_kernels=clamped * CLAMP_KERNELS[0] + biased * (2.0 * local_experts + 1.0),
        backward_kernels=clamped * CLAMP_KERNELS[1] + biased * 2.0 * local_experts,
        recompute_bytes=CLAMP_PASSES[0] * up_out)
    if any_set(d, "elementwise"):
        ops = _add(ops, _elementwise(d, elem))
    if any_rope:
        ops = _add(ops, _unfused_rope(d, elem))
    if any_set(d, "sp_keeps_gathered_input"):
        ops = _add(ops, _dtensor_sp(d, elem))
    return ops


def _dtensor_sp(d: DesignBatch, elem: torch.Tensor) -> EagerOps:
    """The layout copies of DTensor's sequence-parallel collectives (see the module docstring) where
    `sp_keeps_gathered_input`, sequence parallelism and tp > 1. A gathered element forward is what the gather moves
    (`param_bytes.sp_gather_bytes_per_element`: fp8 under Float8); the scatters and the backward pass move the
    activations' dtype."""
    on = ((d.sp_keeps_gathered_input > 0) & (d.sequence_parallel > 0) & (d.tp > 1)).to(elem.dtype)
    tokens = on * is_kind(d, "transformer") * local_tokens(d)
    gathered = sp_gather_bytes_per_element(d)
    # vanilla: a read and a write of the 2 gathered inputs and of the 2 outputs to scatter, hidden wide
    whole = 2.0 * 2.0 * tokens * d.hidden_size
    # async TP: of the local shard before each gather and of each reduce-scatter GEMM's 1/tp-wide input
    shard = whole / d.tp
    scatter_inputs = 2.0 * tokens * (attention_out_width(d) + mlp_width(d)) / d.tp
    # capped at the vanilla path's: no overlap flag lengthens a step (a wide MLP at a low tp would copy more)
    async_tp = d.overlap_tp_comm > 0
    vanilla = whole * (gathered + elem), whole * 2.0 * elem
    fused = shard * gathered + scatter_inputs * elem, (shard + scatter_inputs) * elem
    forward, backward = (torch.where(async_tp, torch.minimum(f, v), v) for f, v in zip(fused, vanilla))
    kernels = 4.0 * on  # one a gather or scatter
    return EagerOps(forward, backward, kernels, kernels, recompute_bytes=torch.zeros_like(forward))
