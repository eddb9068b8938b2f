"""Attention's shapes: multi-head and grouped-query attention, and multi-head latent attention (MLA).

Plain heads: a query, key and value of `head_dim` per head (`head_dim` 0 in a batch: hidden /
heads), keys and values shared by `num_kv_heads` groups. MLA (DeepSeek-V2 / V3; DeepSeek-V3
report, arXiv 2412.19437, section 2.1.1), on where `kv_lora_rank` > 0: the hidden state is
projected down to a query latent of `q_lora_rank` (0: the query is projected at full rank) and to
a key-value latent of `kv_lora_rank` plus one rotary key of `qk_rope_head_dim` shared by the
heads; up projections give each head a query and a key of head_dim + qk_rope_head_dim and a value
of `v_head_dim`. Megatron-Core replicates the down projections over tensor-parallel ranks and
splits the up projections by head. Every function returns `(batch,)`; plain designs get exactly
the expressions they had before MLA existed. Sliding-window attention (`window_size`, `window_attn_skip_freq`):
the keys a causal query sees, averaged over positions and layers.
"""

from __future__ import annotations

import torch

from analytical.design import DesignBatch, any_set, per_evaluation


@per_evaluation
def is_mla(d: DesignBatch) -> torch.Tensor:
    return d.kv_lora_rank > 0


@per_evaluation
def any_mla(d: DesignBatch) -> bool:
    """Whether any design of the batch uses latent attention (else the plain expressions alone are
    computed: a few dozen tensor operations fewer per evaluation)."""
    return bool(is_mla(d).any())


@per_evaluation
def head_dim(d: DesignBatch) -> torch.Tensor:
    """Width of one head's query and key (without MLA's rotary part): `head_dim` where the model
    sets it, else hidden / heads."""
    return torch.where(d.head_dim > 0, d.head_dim, d.hidden_size / d.num_heads)


@per_evaluation
def qk_head_dim(d: DesignBatch) -> torch.Tensor:
    """Width of one head's query and key: head_dim, plus the rotary part under MLA."""
    if not any_mla(d):
        return head_dim(d)
    return torch.where(is_mla(d), head_dim(d) + d.qk_rope_head_dim, head_dim(d))


@per_evaluation
def value_head_dim(d: DesignBatch) -> torch.Tensor:
    """Width of one head's value (and of its share of the output projection's input)."""
    if not any_mla(d):
        return head_dim(d)
    return torch.where(is_mla(d) & (d.v_head_dim > 0), d.v_head_dim, head_dim(d))


@per_evaluation
def attention_width(d: DesignBatch) -> torch.Tensor:
    """Per token, the heads' query-key width and value width averaged: the hidden size for plain
    heads, heads x head_dim where head_dim is set. The attention core's FLOPs are 4 s times it
    (QK^T over the query-key width, softmax(.)V over the value width) and its Q, K, V, O traffic 4x it."""
    plain = torch.where(d.head_dim > 0, d.num_heads * d.head_dim, d.hidden_size)
    if not any_mla(d):
        return plain
    return torch.where(is_mla(d), d.num_heads * (qk_head_dim(d) + value_head_dim(d)) / 2.0, plain)


@per_evaluation
def attention_out_width(d: DesignBatch) -> torch.Tensor:
    """Width of the output projection's input per token (heads x value head), whole model."""
    if not any_mla(d):
        return attention_width(d)
    return torch.where(is_mla(d), d.num_heads * value_head_dim(d), attention_width(d))


@per_evaluation
def qkv_projection_width(d: DesignBatch) -> torch.Tensor:
    """Per-device output width of the QKV projection as one product with the hidden size as its
    inner dimension: plain heads (heads + 2 kv heads) x head_dim / tp; MLA's down projections
    (replicated) and up projections (split by head) folded into one product of the same work."""
    t, h, heads = d.tp, d.hidden_size, d.num_heads
    plain = (heads + 2.0 * d.num_kv_heads) * head_dim(d) / t
    if not any_mla(d):
        return plain
    qk, v = qk_head_dim(d), value_head_dim(d)
    query = torch.where(d.q_lora_rank > 0, d.q_lora_rank * (h + heads * qk / t), h * heads * qk / t)
    key_value = h * (d.kv_lora_rank + d.qk_rope_head_dim) + d.kv_lora_rank * heads * (head_dim(d) + v) / t
    return torch.where(is_mla(d), (query + key_value) / h, plain)


@per_evaluation
def attention_params(d: DesignBatch) -> torch.Tensor:
    """Weights of the QKV and output projections (MLA: with its latents' norms), whole model."""
    h, heads, dh = d.hidden_size, d.num_heads, head_dim(d)
    plain = h * ((heads + 2.0 * d.num_kv_heads) * dh) + heads * dh * h
    if not any_mla(d):
        return plain
    qk, v = qk_head_dim(d), value_head_dim(d)
    query = torch.where(d.q_lora_rank > 0, d.q_lora_rank * (h + heads * qk + 1.0), h * heads * qk)
    key_value = h * (d.kv_lora_rank + d.qk_rope_head_dim) + d.kv_lora_rank * (heads * (dh + v) + 1.0)
    return torch.where(is_mla(d), query + key_value + heads * v * h, plain)


@per_evaluation
def latent_activation_bytes_per_token(d: DesignBatch) -> torch.Tensor:
    """MLA's latents kept for the up projections' backward pass at 16 bit (the query latent, the
    key-value latent and the rotary key), replicated over tp; 0 for plain heads."""
    if not any_mla(d):
        return torch.zeros_like(d.kv_lora_rank)
    latents = d.q_lora_rank + d.kv_lora_rank + d.qk_rope_head_dim
    return torch.where(is_mla(d), 2.0 * latents, torch.zeros_like(latents))


@per_evaluation
def kv_width(d: DesignBatch) -> torch.Tensor:
    """Key and value elements per token, whole model (what context parallelism circulates)."""
    return torch.where(is_mla(d), d.num_heads * (qk_head_dim(d) + value_head_dim(d)),
                       2.0 * d.num_kv_heads * head_dim(d))


@per_evaluation
def any_window(d: DesignBatch) -> bool:
    """Whether any design of the batch has sliding-window attention (else none of its terms is computed)."""
    return any_set(d, "window_size")


@per_evaluation
def windowed_layer_fraction(d: DesignBatch) -> torch.Tensor:
    """Share of the layers that attend through the sliding window: all of them with
    `window_attn_skip_freq` 0, else those whose 1-indexed number N does not divide (Megatron-Core
    `is_layer_window_attention`: `layer_number % window_attn_skip_freq != 0`)."""
    n = d.window_attn_skip_freq
    full_layers = torch.where(n > 0, torch.floor(d.num_layers / torch.clamp_min(n, 1.0)), 0.0)
    return torch.where(d.window_size > 0, (d.num_layers - full_layers) / d.num_layers, 0.0)


@per_evaluation
def causal_keys_per_query(d: DesignBatch) -> torch.Tensor:
    """Keys a query attends to under the causal mask, averaged over its positions and the layers:
    s/2 in full attention; w - w (w - 1) / (2 s) through a window of w < s keys (the mean of
    min(i + 1, w) over positions i, as Megatron-Bridge's flop_utils `calculate_swa_context`)."""
    s = d.seq_length
    if not any_window(d):
        return s / 2.0
    w = d.window_size
    windowed = torch.where(w < s, w - w * (w - 1.0) / (2.0 * s), s / 2.0)
    f = windowed_layer_fraction(d)
    return (1.0 - f) * s / 2.0 + f * windowed


# Rows of queries one thread block of a fused attention kernel holds: 128 in FlashAttention-2 and -3 for head dims
# 64 and 128 (Shah et al. 2024, arXiv 2407.08608, sec. 4.1: "block sizes 128 x 128"; flash-attention's
# hopper/tile_size.h and the FA2 forward's kBlockM 128).
FLASH_QUERY_TILE = 128


@per_evaluation
def attention_query_tiles(d: DesignBatch) -> torch.Tensor:
    """(query tile, head) pairs a fused attention pass of one micro-batch runs on one device, each a thread
    block's unit of work whatever its keys: b x heads / tp x ceil((s / cp) / 128), on every layer (a windowed
    layer runs as many tiles, each over fewer keys). Under context parallelism the rank's kernel runs once a
    ring step, cp steps: the first over all its tiles, each later one over all of them against half a key
    chunk or over half of them against a whole one (the load-balanced causal ring of Transformer Engine's
    p2p context parallelism), (3 cp + 1) / 4 passes over the rank's tiles in all."""
    tiles = torch.ceil(d.seq_length / d.cp / FLASH_QUERY_TILE)
    return d.micro_batch_size * d.num_heads / d.tp * tiles * (3.0 * d.cp + 1.0) / 4.0
