"""The algorithm layer: shapes, parameters and FLOPs of a workload (its activation memory: `memory`).

Every function takes a `DesignBatch` and returns `(batch,)` tensors, or `(batch, slots)` for the
GEMM table. Transformer conventions: `ffn_type` gelu means GPT-style (biases, LayerNorm, learned
positions, tied output embedding, dropout); swiglu means LLaMA-style (no biases, RMSNorm, rotary positions,
untied output layer, no dropout); squared_relu means Nemotron-style (swiglu's conventions with a 2-matrix
MLP and LayerNorm). MoE layers (num_experts > 1) route each token to `top_k` experts.

Formulas checked in tests against Narayanan et al. 2021 (FLOPs, eq. 3 and parameter count).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from analytical.codes import FFN_CODES, KIND_CODES, PRECISION_CODES
from analytical.design import DesignBatch, any_set, per_evaluation, sequence_parallel_divisor
from analytical.step.attention import (any_window, attention_out_width, attention_params, attention_width,
                                       causal_keys_per_query, head_dim, qk_head_dim, qkv_projection_width,
                                       value_head_dim)
from analytical.step.cnn import any_cnn, cnn_terms

GEMM_SLOTS = ("qkv", "attention_scores", "attention_values", "attention_out", "ffn_up", "ffn_down",
              "router", "recurrent")
ROUTER_SLOT = GEMM_SLOTS.index("router")
CORE_SLOTS = slice(GEMM_SLOTS.index("attention_scores"), GEMM_SLOTS.index("attention_values") + 1)  # unfused QK^T, AV


def slot_sum(x: torch.Tensor) -> torch.Tensor:
    """`(batch,)` sum over the GEMM slots of `(batch, slots)`: the fixed `GEMM_SLOTS`, plus a CNN's
    layer slots when the chunk holds one, summed apart (a design's sum is then the same whichever
    designs share its chunk: the CNN slots add exactly 0.0 to the others)."""
    if x.shape[-1] == len(GEMM_SLOTS):
        return x.sum(-1)
    return x[..., :len(GEMM_SLOTS)].sum(-1) + x[..., len(GEMM_SLOTS):].sum(-1)


@per_evaluation
def is_kind(d: DesignBatch, kind: str) -> torch.Tensor:
    return (d.kind == KIND_CODES[kind]).to(d.tp.dtype)


@per_evaluation
def any_kind(d: DesignBatch, kind: str) -> bool:
    """Whether some design of the batch is of workload `kind` (else that kind's terms are not computed)."""
    return bool(is_kind(d, kind).any())


@per_evaluation
def is_swiglu(d: DesignBatch) -> torch.Tensor:
    """1 where the MLP is gated (SwiGLU: gate and up projections), else 0."""
    return (d.ffn_type == FFN_CODES["swiglu"]).to(d.tp.dtype)


@per_evaluation
def is_gpt_style(d: DesignBatch) -> torch.Tensor:
    """1 where the layers follow GPT's conventions (`ffn_type` gelu: biases, learned positions, a tied output
    embedding, dropout), else 0."""
    return (d.ffn_type == FFN_CODES["gelu"]).to(d.tp.dtype)


@per_evaluation
def is_narrow(d: DesignBatch) -> torch.Tensor:
    """1 where the GEMMs run in an 8- or 4-bit format (fp8, mxfp8, nvfp4) with 16-bit activations
    between them (Transformer Engine's recipes), 0 for fp32/tf32/fp16/bf16."""
    return (d.precision >= PRECISION_CODES["fp8"]).to(d.precision.dtype)


@per_evaluation
def gemm_bytes_per_element(d: DesignBatch) -> torch.Tensor:
    """Bytes per GEMM input element: 4 (fp32/tf32), 2 (fp16/bf16), 1 (fp8, mxfp8: 1 + a 1-byte
    scale per 32 elements), 0.5625 (nvfp4: 0.5 + a 1-byte scale per 16 elements). Block sizes:
    OCP Microscaling Formats spec v1.0 (2023) and NVIDIA's NVFP4 introduction (2025)."""
    p = d.precision
    wide = (p <= PRECISION_CODES["tf32"]).to(p.dtype)
    fp8 = (p == PRECISION_CODES["fp8"]).to(p.dtype)
    mxfp8 = (p == PRECISION_CODES["mxfp8"]).to(p.dtype)
    nvfp4 = (p == PRECISION_CODES["nvfp4"]).to(p.dtype)
    return 2.0 + 2.0 * wide - fp8 - (1.0 - 1.0 / 32.0) * mxfp8 - (1.5 - 1.0 / 16.0) * nvfp4


@per_evaluation
def activation_bytes_per_element(d: DesignBatch) -> torch.Tensor:
    """Activations stay 16-bit under fp8 training (Transformer Engine keeps them in bf16)."""
    return 2.0 + 2.0 * (d.precision <= PRECISION_CODES["tf32"]).to(d.precision.dtype)


@per_evaluation
def local_tokens(d: DesignBatch) -> torch.Tensor:
    """Tokens of one micro-batch held by one context-parallel rank: b s / cp."""
    return d.micro_batch_size * d.seq_length / d.cp


@per_evaluation
def ffn_gate_factor(d: DesignBatch) -> torch.Tensor:
    """Up-projection matrices per MLP: 2 for SwiGLU (gate and up), 1 for GeLU."""
    return 1.0 + is_swiglu(d)


@per_evaluation
def stage_layers(d: DesignBatch) -> torch.Tensor:
    """Layers on the most loaded pipeline stage: vp chunks of ceil(L / (pp vp)) layers (L / pp when
    pp vp divides L; Megatron-Core puts the remainder on fewer layers elsewhere)."""
    return torch.ceil(d.num_layers / (d.pp * d.vp) - 1e-9) * d.vp


@per_evaluation
def is_moe(d: DesignBatch) -> torch.Tensor:
    return (d.num_experts > 1).to(d.tp.dtype)


@per_evaluation
def expert_tp(d: DesignBatch) -> torch.Tensor:
    """Ranks each expert's weights are split over: `etp` in MoE layers where it is set (Megatron-Core's
    expert_tensor_parallel_size), else tp (its default, and every dense MLP)."""
    if not any_set(d, "etp"):
        return d.tp
    return torch.where((d.etp > 0) & (d.num_experts > 1), d.etp, d.tp)


@per_evaluation
def any_expert_tp(d: DesignBatch) -> bool:
    """Whether any MoE design of the batch splits its experts over other ranks than tp (`expert_tp`)."""
    return expert_tp(d) is not d.tp and bool((expert_tp(d) != d.tp).any())


@per_evaluation
def mlp_tp(d: DesignBatch) -> torch.Tensor:
    """Ranks of the MLP's tensor-parallel collectives: `expert_tp` in MoE layers of routed experts only,
    tp where a shared expert (split over tp in Megatron-Core) or a dense MLP needs them."""
    return torch.where(d.num_shared_experts > 0, d.tp, expert_tp(d))


@per_evaluation
def expert_width(d: DesignBatch) -> torch.Tensor:
    """MLP width of one expert: `moe_ffn_hidden_size` in MoE layers, `ffn_hidden_size` in dense ones."""
    return torch.where(d.num_experts > 1, d.moe_ffn_hidden_size, d.ffn_hidden_size)


@per_evaluation
def routed_copies(d: DesignBatch) -> torch.Tensor:
    """Copies of a token the routed experts compute and the dispatcher moves, `(batch,)`: top_k dropless
    (`moe_capacity_factor` 0); with a capacity factor c under balanced routing each expert keeps min(c, 1) of
    its share, or computes all c of it where its input is padded to capacity (Megatron-Core `get_capacity`:
    ceil(tokens x top_k / experts x c) an expert)."""
    c = d.moe_capacity_factor
    if not bool((c > 0).any()):  # dropless batch: the common case, no more work
        return d.top_k
    share = torch.where(d.moe_pad_to_capacity > 0, c, torch.clamp_max(c, 1.0))
    return d.top_k * torch.where(c > 0, share, 1.0)


@per_evaluation
def mlp_width(d: DesignBatch) -> torch.Tensor:
    """MLP intermediate elements per token, summed over the experts it passes through: the
    expert width times (`routed_copies` + shared experts); the FFN width in dense layers."""
    return expert_width(d) * (routed_copies(d) + d.num_shared_experts * is_moe(d))


@dataclass
class Gemms:
    """GEMM table of one layer's forward pass on one device: each field `(batch, slots)`.

    `count` independent products of (m x k) @ (k x n) run as one batched kernel; `serial` such
    kernels run one after another (LSTM time steps).
    """

    m: torch.Tensor
    n: torch.Tensor
    k: torch.Tensor
    count: torch.Tensor
    serial: torch.Tensor

    def backward(self) -> tuple["Gemms", "Gemms"]:
        """Input-gradient (m x n)@(n x k) and weight-gradient (k x m)@(m x n) GEMM tables."""
        dgrad = Gemms(self.m, self.k, self.n, self.count, self.serial)
        wgrad = Gemms(self.k, self.n, self.m, self.count, self.serial)
        return dgrad, wgrad

    def flops(self) -> torch.Tensor:
        """`(batch,)` FLOPs of the table: sum of 2 m n k count serial."""
        return slot_sum(2.0 * self.m * self.n * self.k * self.count * self.serial)


def layer_gemms(d: DesignBatch) -> Gemms:
    """Per-device forward GEMMs of one layer, for every workload kind (slots in `GEMM_SLOTS`).

    Attention score/value products appear only for unfused attention; flash attention is
    modelled as one fused kernel (`attention_core_flops`).
    """
    tr = is_kind(d, "transformer")
    t, e = d.tp, d.ep
    h, s = d.hidden_size, d.seq_length
    tokens = local_tokens(d)
    b = d.micro_batch_size
    heads_local = d.num_heads / t
    unfused = tr * (1.0 - d.flash_attention)
    # tokens reaching one expert of this device; shared experts see every token and are folded in
    # as extra routed work (same FLOPs and GEMM shapes per expert). Experts split over etp < tp
    # ranks take etp / tp of the tokens at tp / etp times the width (the same work per device)
    et = expert_tp(d)
    expert_tokens = tokens * (routed_copies(d) + d.num_shared_experts * is_moe(d)) * e / d.num_experts
    if any_expert_tp(d):
        expert_tokens = expert_tokens * et / t
    local_experts = d.num_experts / e
    moe = is_moe(d)
    f_e = expert_width(d)
    one = torch.ones_like(h)
    zero = torch.zeros_like(h)
    qk, v = qk_head_dim(d), value_head_dim(d)
    tr_tokens = tr * tokens
    qkv_m, qkv_n, qkv_k = tr_tokens, tr * qkv_projection_width(d), tr * h
    recurrent_m, recurrent_serial = zero, one
    if any_kind(d, "lstm"):  # input-to-gates in the qkv slot; hidden-to-gates, one kernel per time step
        lstm = is_kind(d, "lstm")
        qkv_m, qkv_n, qkv_k = qkv_m + lstm * b * s, qkv_n + lstm * 4.0 * h, qkv_k + lstm * h
        recurrent_m, recurrent_serial = lstm * b, torch.where(lstm > 0, s, one)
    if any_kind(d, "gemm"):  # the plain GEMM: b stacked products in the qkv slot
        gemm = is_kind(d, "gemm")
        qkv_m, qkv_n, qkv_k = qkv_m + gemm * b * d.gemm_m, qkv_n + gemm * d.gemm_n, qkv_k + gemm * d.gemm_k
    slots_m = [
        qkv_m,  # qkv
        s / d.cp * unfused,  # attention scores: (s/cp x dh) @ (dh x s) per head and sequence
        s / d.cp * unfused,  # attention values: (s/cp x s) @ (s x dh)
        tr_tokens,  # attention output projection
        tr * expert_tokens,  # ffn up (and gate)
        tr * expert_tokens,  # ffn down
        tr_tokens * moe,  # router
        recurrent_m,  # recurrent hidden-to-gates
    ]
    slots_n = [qkv_n, s, v, h, ffn_gate_factor(d) * f_e / et, h, d.num_experts, 4.0 * h]
    slots_k = [qkv_k, qk, s, heads_local * v, h, f_e / et, h, h]
    slots_count = [one, b * heads_local, b * heads_local, one, local_experts, local_experts, one, one]
    slots_serial = [one, one, one, one, one, one, one, recurrent_serial]
    if any_cnn(d):  # one slot per convolution / FC layer (`cnn.MAX_SLOTS`, zeros past a network's end)
        cnn = cnn_terms(d)
        width = cnn.m.shape[-1]
        slots_m += list((b.unsqueeze(-1) * cnn.m).unbind(-1))
        slots_n += list(cnn.n.unbind(-1))
        slots_k += list(cnn.k.unbind(-1))
        slots_count += [one] * width
        slots_serial += [one] * width
    stack = lambda xs: torch.stack(xs, dim=-1)  # noqa: E731
    gemms = Gemms(stack(slots_m), stack(slots_n), stack(slots_k), stack(slots_count),
                  stack(slots_serial) + zero.unsqueeze(-1))
    return _fused(d, gemms) if any_fused(d) else gemms


@per_evaluation
def any_fused(d: DesignBatch) -> bool:
    return any_set(d, "fused_jobs")


@per_evaluation
def any_parameter_server(d: DesignBatch) -> bool:
    return any_set(d, "dp_mode")


def _fused(d: DesignBatch, gemms: Gemms) -> Gemms:
    """B fused jobs (HFTA): every product whose rows are the micro-batch's tokens or images runs as B
    batched products of one job's rows each (`d.micro_batch_size` holds all B jobs' samples, see
    `fuse_jobs`); the attention score products, already one per sequence, stay as they are."""
    per_token = torch.ones(gemms.m.shape[-1], dtype=gemms.m.dtype, device=gemms.m.device)
    per_token[CORE_SLOTS] = 0.0
    split = 1.0 + (d.fused_jobs.unsqueeze(-1) - 1.0) * per_token
    return Gemms(gemms.m / split, gemms.n, gemms.k, gemms.count * split, gemms.serial)


@per_evaluation
def has_vocabulary(d: DesignBatch) -> torch.Tensor:
    """1 for the kinds with token embeddings and an output layer (transformer, lstm), 0 for gemm and
    cnn (a CNN's classifier is one of its GEMM slots)."""
    return 1.0 - is_kind(d, "gemm") - is_kind(d, "cnn")


@per_evaluation
def logit_gemm_flops(d: DesignBatch) -> torch.Tensor:
    """Forward FLOPs of the output layer per micro-batch on one device: 2 (b s/cp) h V/tp."""
    return 2.0 * local_tokens(d) * d.hidden_size * d.vocab_size / d.tp * has_vocabulary(d)


@per_evaluation
def attention_core_flops(d: DesignBatch) -> torch.Tensor:
    """Forward FLOPs of QK^T and softmax(.)V per micro-batch and device: 4 b (s/cp) k h / tp with k
    keys a query: unfused kernels compute the full square (k = s); a causal flash kernel skips the
    masked half and, in windowed layers, the tiles outside the window (`causal_keys_per_query`).
    """
    keys = (1.0 - d.flash_attention) * d.seq_length + d.flash_attention * causal_keys_per_query(d)
    return 4.0 * local_tokens(d) * keys * attention_width(d) / d.tp * is_kind(d, "transformer")


@per_evaluation
def flash_qkvo_bytes(d: DesignBatch, elem: torch.Tensor) -> torch.Tensor:
    """Bytes a fused attention kernel reads and writes for its Q, K, V and O per micro-batch and device (the
    scores stay on chip): 4 b (s/cp) width / tp x `elem` bytes an element."""
    return 4.0 * local_tokens(d) * attention_width(d) / d.tp * elem


@per_evaluation
def attention_score_elements(d: DesignBatch) -> torch.Tensor:
    """Scores (query-key pairs over the heads) a causal flash kernel computes per micro-batch and
    device: b (s/cp) heads k / tp. Each is one exponential of the softmax forward, and one again
    backward, where the probabilities are rebuilt from the saved log-sum-exp."""
    return local_tokens(d) * d.num_heads / d.tp * causal_keys_per_query(d) * is_kind(d, "transformer")


@per_evaluation
def layer_params(d: DesignBatch) -> tuple[torch.Tensor, torch.Tensor]:
    """Parameters of one layer: `(dense, expert)`, whole model (not divided by any degree)."""
    tr = is_kind(d, "transformer")
    h, f = d.hidden_size, d.ffn_hidden_size
    qkv_out = (d.num_heads + 2.0 * d.num_kv_heads) * head_dim(d)  # (GPT-style biases; MLA models have none)
    attention = attention_params(d)
    norms = 2.0 * h * (2.0 - is_swiglu(d))  # LayerNorm (GPT, Nemotron) has weight and bias, RMSNorm a weight
    biases = is_gpt_style(d) * (qkv_out + h + f + h)
    moe = is_moe(d)
    router = moe * h * d.num_experts
    per_expert = (ffn_gate_factor(d) + 1.0) * h * expert_width(d)
    expert = d.num_experts * per_expert
    shared = moe * d.num_shared_experts * per_expert  # replicated over ep like the attention
    dense = tr * (attention + norms + biases + router + shared)
    if any_kind(d, "lstm"):  # (the kinds are exclusive: each design adds one non-zero term)
        dense = dense + is_kind(d, "lstm") * (8.0 * h * h + 8.0 * h)
    if any_kind(d, "gemm"):
        dense = dense + is_kind(d, "gemm") * d.gemm_k * d.gemm_n
    if any_cnn(d):
        dense = dense + cnn_terms(d).params
    return dense, tr * expert


@per_evaluation
def embedding_params(d: DesignBatch) -> tuple[torch.Tensor, torch.Tensor]:
    """`(input, output)` embedding parameters; GPT-style models tie the output to the input."""
    gpt_tr = is_gpt_style(d) * is_kind(d, "transformer")
    vh = d.vocab_size * d.hidden_size * has_vocabulary(d)
    return vh + gpt_tr * d.seq_length * d.hidden_size, vh * (1.0 - gpt_tr)


def total_params(d: DesignBatch) -> torch.Tensor:
    dense, expert = layer_params(d)
    emb_in, emb_out = embedding_params(d)
    return d.num_layers * (dense + expert) + emb_in + emb_out


def active_params(d: DesignBatch) -> torch.Tensor:
    """Parameters a token passes through (MoE: top_k of num_experts experts)."""
    dense, expert = layer_params(d)
    emb_in, emb_out = embedding_params(d)
    return d.num_layers * (dense + expert * d.top_k / d.num_experts) + emb_in + emb_out


def layer_forward_flops_per_sequence(d: DesignBatch, gemms: Gemms | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """`(layer, attention_core)` forward FLOPs of one layer for one sequence, whole model (no
    parallel split), counting the full attention square as Narayanan et al. 2021 do (sliding-window
    layers: the square's share that their window keeps of the causal half, `causal_keys_per_query`).

    Derived from one device's GEMM table (`gemms`, computed when not given): every product is
    split over tp and over the cp sequence shards (the router only over cp), and expert parallelism
    moves tokens without changing a device's work. The experts count their top_k copies of a token
    (the model's FLOPs) whatever a capacity factor drops or pads (`routed_copies`).
    """
    gemms = layer_gemms(d) if gemms is None else gemms
    t, c = d.tp.unsqueeze(-1), d.cp.unsqueeze(-1)
    router = torch.zeros(gemms.m.shape[-1], dtype=t.dtype, device=t.device)
    router[ROUTER_SLOT] = 1.0
    scale = c * (t * (1.0 - router) + router)
    if routed_copies(d) is not d.top_k:  # dropped or padded copies: back to top_k
        shared = d.num_shared_experts * is_moe(d)
        nominal = ((d.top_k + shared) / (routed_copies(d) + shared)).unsqueeze(-1)
        experts = torch.zeros_like(router)
        experts[[GEMM_SLOTS.index("ffn_up"), GEMM_SLOTS.index("ffn_down")]] = 1.0
        scale = scale * (1.0 + experts * (torch.where(is_moe(d).unsqueeze(-1) > 0, nominal, 1.0) - 1.0))
    core = 4.0 * d.micro_batch_size * d.seq_length**2 * attention_width(d) * is_kind(d, "transformer")
    if any_window(d):
        core = core * causal_keys_per_query(d) / (d.seq_length / 2.0)
    per_micro_batch = slot_sum(2.0 * gemms.m * gemms.n * gemms.k * gemms.count * gemms.serial * scale)
    return (per_micro_batch + d.flash_attention * core) / d.micro_batch_size, core / d.micro_batch_size


def model_flops_per_step(d: DesignBatch, gemms: Gemms | None = None,
                         layer_flops: torch.Tensor | None = None) -> torch.Tensor:
    """FLOPs of one training step without recomputation (forward + backward = 3x forward), with
    the full (non-causal) attention square, as in Narayanan et al. 2021 eq. 3.

    For GPT this equals 72 B s L h^2 (1 + s/(6h) + V/(12 L h)) with B the global batch.
    `layer_flops` is `layer_forward_flops_per_sequence(d, gemms)[0]` when the caller has it.
    """
    layer = layer_forward_flops_per_sequence(d, gemms)[0] if layer_flops is None else layer_flops
    logits = logit_gemm_flops(d) * d.tp * d.cp / d.micro_batch_size
    return 3.0 * (d.num_layers * layer + logits) * d.global_batch_size


@per_evaluation
def memory_bound_bytes_per_layer(d: DesignBatch) -> tuple[torch.Tensor, torch.Tensor]:
    """HBM bytes and kernel count of one layer's memory-bound kernels, forward, per device.

    Norms (read + write), residual adds with dropout (two reads, a write and a 1-byte mask), the
    activation function, MoE token permutation, and for unfused attention the scale-mask-softmax
    and attention dropout over the a s^2 scores. Narrow-format GEMMs (fp8, mxfp8, nvfp4) add the
    cast of the one activation input no kernel before it writes in the narrow format, the
    attention output entering the output projection (Transformer Engine's cast-transpose: read
    16-bit, write the narrow copy and its transpose for the backward pass; its LayerNormLinear and
    LayerNormMLP fuse the casts of the norm and activation outputs), and the scaling (amax)
    bookkeeping; the backward pass (twice the forward's traffic in `step`) casts the gradients.
    """
    tr = is_kind(d, "transformer")
    t = d.tp
    elem = activation_bytes_per_element(d)
    th = local_tokens(d) * d.hidden_size
    sp_div = sequence_parallel_divisor(d)
    norms = 2.0 * 2.0 * th / sp_div
    residual = 2.0 * 3.5 * th / sp_div
    act = (2.0 + is_swiglu(d)) * local_tokens(d) * mlp_width(d) / t
    moe = is_moe(d)
    permute = moe * 4.0 * th * routed_copies(d)
    scores = d.micro_batch_size * d.num_heads / t * (d.seq_length / d.cp) * d.seq_length
    softmax_dropout = 4.5 * scores * (1.0 - d.flash_attention)
    casts = is_narrow(d) * local_tokens(d) * attention_out_width(d) / t * (elem + 2.0 * gemm_bytes_per_element(d))
    bytes_ = tr * (elem * (norms + residual + act + permute + softmax_dropout) + casts)
    kernels = tr * (5.0 + 2.0 * moe + 2.0 * (1.0 - d.flash_attention) + 4.0 * is_narrow(d))
    if any_kind(d, "lstm"):  # (the kinds are exclusive: each design adds one non-zero term)
        lstm = is_kind(d, "lstm")
        bytes_ = bytes_ + lstm * elem * 12.0 * local_tokens(d) * d.hidden_size
        kernels = kernels + lstm * d.seq_length
    if any_cnn(d):  # batch norm, ReLU, residual additions, pooling
        cnn = cnn_terms(d)
        bytes_ = bytes_ + elem * d.micro_batch_size * cnn.memory_bound_elements
        kernels = kernels + cnn.memory_bound_kernels
    return bytes_, kernels


def fuse_jobs(d: DesignBatch) -> DesignBatch:
    """B fused jobs (`fused_jobs`, HFTA) as one training step: the micro-batch and global batch hold
    all B jobs' samples, so every activation, memory-bound kernel's traffic and FLOP count scales with
    B; the GEMM table then splits each product into B batched ones (`workload.layer_gemms`), and the
    parameters are B copies (`memory.params_per_device`). Throughput (`tokens_per_s`) is the B jobs'
    together. Itself when no design fuses."""
    if not any_fused(d):
        return d
    return d.replace(micro_batch_size=d.micro_batch_size * d.fused_jobs,
                     global_batch_size=d.global_batch_size * d.fused_jobs)
