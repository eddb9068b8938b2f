"""Kernel time models: GEMMs on tensor cores, memory-bound kernels, fused attention (and its kernel's peak).

All functions broadcast: per-design parameters have shape `(batch, 1)` and kernel shapes
`(batch, kernels)`; the result has the kernel shape. Times in seconds.
"""

from __future__ import annotations

import torch

from analytical.codes import ATTENTION_KERNEL_CODES
from analytical.design import DesignBatch
from analytical.step.efficiency import Efficiency
from analytical.step.workload import is_narrow


def ceil_div(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """ceil(a / b) for positive tensors, exact on integer-valued floats."""
    return torch.ceil(a / b)


def gemm_tiles(m: torch.Tensor, n: torch.Tensor, count: torch.Tensor, tile_m: torch.Tensor,
               tile_n: torch.Tensor) -> torch.Tensor:
    """Output tiles of `count` (m x n) products: count * ceil(m/tm) * ceil(n/tn)."""
    return count * ceil_div(m, tile_m) * ceil_div(n, tile_n)


def gemm_waves(m: torch.Tensor, n: torch.Tensor, count: torch.Tensor, tile_m: torch.Tensor,
               tile_n: torch.Tensor, compute_units: torch.Tensor) -> torch.Tensor:
    """Waves of output tiles over the compute units: ceil(count * ceil(m/tm) * ceil(n/tn) / units)."""
    return ceil_div(gemm_tiles(m, n, count, tile_m, tile_n), compute_units)


# Split-K: a product whose output tiles fill less than one wave of the compute units splits its
# reduction over the idle units (cuBLAS / cuDNN heuristics; CUTLASS "split-K parallel"), each part
# reducing at least this many elements (an estimate: a few main-loop stages of a 128-wide tile), and
# the partial sums are written and summed in fp32. This is what keeps a convolution's weight
# gradient, a (c_in k^2) x c_out output reducing over every pixel of the batch, from running on a
# handful of units.
SPLIT_K_MIN_ELEMENTS = 256.0


def split_k(k: torch.Tensor, tiles: torch.Tensor, compute_units: torch.Tensor) -> torch.Tensor:
    """Parts the reduction is split into for a product of `tiles` output tiles: floor(units / tiles),
    at most k / 256, at least 1. An empty product (0 tiles) is divided by 1, not 0: its infinite quotient
    gave autograd 0 x inf = NaN through `floor` (its time is 0 either way)."""
    per_tile = torch.floor(compute_units / torch.clamp_min(tiles, 1.0))
    parts = torch.minimum(per_tile, torch.floor(k / SPLIT_K_MIN_ELEMENTS))
    return torch.clamp_min(parts, 1.0)


def gemm_flops(m: torch.Tensor, n: torch.Tensor, k: torch.Tensor, count: torch.Tensor) -> torch.Tensor:
    """Useful FLOPs of `count` independent (m x k) @ (k x n) products: 2 m n k count."""
    return 2.0 * m * n * k * count


def gemm_compute_time_s(m, n, k, count, peak_flops_per_s, compute_units, tile_m, tile_n,
                        eff: Efficiency, peak_fraction=None) -> torch.Tensor:
    """Tensor-core time with tile and wave quantization.

    Every wave runs one (tile_m x tile_n) tile per compute unit; a tile costs the FLOPs of its
    full K extent at `peak_fraction` (default `eff.gemm_peak_fraction`) of the unit's peak, plus a
    fixed time `gemm_tile_overhead_s` (filling the operand pipeline from memory and writing the
    tile out: latency, not tensor-core work, so it weighs more on a chip with faster tensor cores).
    """
    return _gemm_compute_time_s(k, gemm_tiles(m, n, count, tile_m, tile_n), peak_flops_per_s, compute_units,
                                tile_m, tile_n, eff, peak_fraction)[0]


def _gemm_compute_time_s(k, tiles, peak_flops_per_s, compute_units, tile_m, tile_n, eff: Efficiency,
                         peak_fraction=None) -> tuple[torch.Tensor, torch.Tensor | None]:
    """`(time, split-K parts)` of a product of `tiles` output tiles reducing over k; parts None when
    no product of the batch splits."""
    fraction = eff.gemm_peak_fraction if peak_fraction is None else peak_fraction
    per_unit_flops_per_s = peak_flops_per_s * fraction / compute_units
    if not bool((tiles < compute_units).any()):  # every product fills a wave: no split (the common case)
        waves = ceil_div(tiles, compute_units)
        return waves * (2.0 * tile_m * tile_n * k / per_unit_flops_per_s + eff.gemm_tile_overhead_s), None
    parts = split_k(k, tiles, compute_units)
    waves = ceil_div(tiles * parts, compute_units)
    tile_flops = 2.0 * tile_m * tile_n * k / parts
    return waves * (tile_flops / per_unit_flops_per_s + eff.gemm_tile_overhead_s), parts


def gemm_hbm_bytes(m, n, k, count, bytes_per_element) -> torch.Tensor:
    """Compulsory off-chip traffic: read A and B once, write C once."""
    return bytes_per_element * count * (m * k + k * n + m * n)


def gemm_sram_bytes(m, n, k, count, tile_m, tile_n, bytes_per_element) -> torch.Tensor:
    """On-chip (L2) traffic of a tiled GEMM: each output tile streams its A rows and B columns."""
    return bytes_per_element * count * m * n * k * (1.0 / tile_n + 1.0 / tile_m)


def gemm_time_s(m, n, k, count, peak_flops_per_s, compute_units, tile_m, tile_n, hbm_bw_bytes_per_s,
                sram_bw_bytes_per_s, launch_s, bytes_per_element, eff: Efficiency,
                peak_fraction=None, traffic=None) -> torch.Tensor:
    """Roofline over compute, HBM and SRAM, plus one kernel launch. Zero-size GEMMs cost 0.

    `traffic`: an `(m, n, k)` that broadcasts against the shapes, in which to count the compulsory and tile
    traffic instead (both symmetric in m, n and k, so the permuted shapes of a forward GEMM's input- and
    weight-gradient GEMMs can share the forward's: `analytical.step.model` passes the forward table against the
    three tables stacked). Default: `(m, n, k)`."""
    compute, parts = _gemm_compute_time_s(k, gemm_tiles(m, n, count, tile_m, tile_n), peak_flops_per_s,
                                          compute_units, tile_m, tile_n, eff, peak_fraction)
    tr_m, tr_n, tr_k = (m, n, k) if traffic is None else traffic
    hbm_bytes = gemm_hbm_bytes(tr_m, tr_n, tr_k, count, bytes_per_element)
    if parts is not None:  # split-K's fp32 partial sums: written once by each part, read once by the reduction
        hbm_bytes = hbm_bytes + 8.0 * count * m * n * (parts - 1.0)
    hbm = hbm_bytes / (hbm_bw_bytes_per_s * eff.hbm_bw_fraction)
    sram = gemm_sram_bytes(tr_m, tr_n, tr_k, count, tile_m, tile_n, bytes_per_element) / sram_bw_bytes_per_s
    time = torch.maximum(torch.maximum(compute, hbm), sram) + launch_s
    return torch.where(tr_m * tr_n * tr_k * count > 0, time, 0.0)  # (the same product m n k: a permutation)


def memory_bound_time_s(bytes_moved, num_kernels, hbm_bw_bytes_per_s, launch_s,
                        eff: Efficiency) -> torch.Tensor:
    """Element-wise, normalization and softmax kernels: bytes over HBM bandwidth plus launches."""
    return bytes_moved / (hbm_bw_bytes_per_s * eff.hbm_bw_fraction) + num_kernels * launch_s


def flash_attention_time_s(flops, qkvo_bytes, peak_flops_per_s, hbm_bw_bytes_per_s, launch_s,
                           eff: Efficiency) -> torch.Tensor:
    """A fused (flash) attention kernel: scores never reach HBM, so a roofline over its FLOPs at
    the fused kernel's efficiency and the Q, K, V, O traffic (its softmax's exponentials come on
    top: `softmax_exp_time_s`)."""
    compute = flops / (peak_flops_per_s * eff.flash_attention_fraction)
    memory = qkvo_bytes / (hbm_bw_bytes_per_s * eff.hbm_bw_fraction)
    time = torch.maximum(compute, memory) + launch_s
    return torch.where(flops > 0, time, 0.0)


def attention_tiles_time_s(query_tiles: torch.Tensor, tile_s: float, compute_units: torch.Tensor) -> torch.Tensor:
    """Fixed time of a fused attention pass's (query tile, head) pairs, `(batch,)`: each takes one SM `tile_s`
    besides its matmuls and exponentials (loading its queries, filling and draining the pipeline, rescaling
    and writing its output and log-sum-exp), the tiles spread over the `compute_units` SMs
    (`Efficiency.flash_attention_fwd_tile_s`, measured on a GPU; the step charges it on parts with
    special-function units, as `softmax_exp_time_s`)."""
    return query_tiles * tile_s / compute_units


def softmax_exp_time_s(exps: torch.Tensor, peak_exp_per_s: torch.Tensor) -> torch.Tensor:
    """`exps` softmax exponentials at the special-function units' rate, in series with the
    kernel's matmuls: a tile's scores leave the first matmul, pass the exponential and enter the
    second (FlashAttention-3, arXiv 2407.08608, sec. 3.1: on H100 with 128-wide heads "exponential
    can take 50% of the cycle compared to matmul"; NVIDIA, "Making Softmax More Efficient with
    NVIDIA Blackwell Ultra", 2026: GB200's tensor cores idle until the softmax completes). No rate
    (0): no time."""
    return torch.where(peak_exp_per_s > 0, exps / torch.clamp_min(peak_exp_per_s, 1.0), 0.0)


def host_wait_s(forward_s: torch.Tensor, backward_s: torch.Tensor, moe: torch.Tensor, eager: torch.Tensor,
                merged: torch.Tensor, eff: Efficiency) -> tuple[torch.Tensor, torch.Tensor]:
    """Time the GPU waits on the host in one MoE layer's forward and backward pass of one micro-batch,
    `(batch,)` each: what a pass (compute and exposed communication, `forward_s`, `backward_s`) falls
    short of `moe_layer_host_s`, the host's time to launch it, where the host launches it (`eager` 1:
    no full-iteration CUDA graph) and the layer is MoE (`moe` 1). The token dispatcher's host-device
    synchronization keeps the host from running ahead into the next layer, so a shorter pass waits.
    Where the 1F1B expert-parallel overlap merges a forward and a backward (`merged` 1), the pair
    waits as one, charged to the backward (where that overlap charges its exposed dispatch).
    """
    return _outlasting(eager * moe * eff.moe_layer_host_s, forward_s, backward_s, merged)


def _outlasting(busy_s: torch.Tensor, forward_s: torch.Tensor, backward_s: torch.Tensor,
                merged: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """`(forward, backward)` time by which `busy_s`, run beside each of a layer's passes, outlasts it; where a
    forward and a backward run as one unit (`merged` 1), `2 busy_s` beside the pair, charged to the backward."""
    pair = torch.relu(2.0 * busy_s - forward_s - backward_s)
    wait_fwd, wait_bwd = torch.relu(busy_s - forward_s), torch.relu(busy_s - backward_s)
    return torch.where(merged > 0, 0.0, wait_fwd), torch.where(merged > 0, pair, wait_bwd)


# FlashAttention-2 is written for Ampere's tensor-core instructions (mma.sync); on Hopper it cannot use
# the asynchronous wgmma / TMA path the generation's own kernels are built on. Measured in PyTorch itself
# (pytorch/pytorch#142132, nightly 2.6.0.dev20241204, H100, batch 1, 24 heads, sequence 4608, head dim
# 128): SDPA's default (FlashAttention-2) backend 329.483 TFLOP/s, its cuDNN backend 631.338. An `fa2`
# kernel's matmuls run at that ratio (0.52) of the generation's own kernel's on a chip newer than
# Ampere, taken as one with an fp8 peak (Ampere and older have none; the ratio is assumed on Blackwell
# too). The FlashAttention-3 paper's utilizations agree: FlashAttention-2 "only 35%" on H100, FlashAttention-3
# "up to ... 75%" (Shah et al. 2024, arXiv 2407.08608, abstract): 0.47.
FA2_SHARE_ON_NEWER_GPUS = 329.483 / 631.338


def gemm_peak_fraction(d: DesignBatch, eff: Efficiency) -> torch.Tensor:
    """`(batch,)` fraction of the format's peak the GEMM main loop sustains: `narrow_gemm_peak_fraction`
    for fp8 / mxfp8 / nvfp4, `gemm_peak_fraction` otherwise."""
    return eff.gemm_peak_fraction + is_narrow(d) * (eff.narrow_gemm_peak_fraction - eff.gemm_peak_fraction)


def sixteen_bit_peak(d: DesignBatch, peak: torch.Tensor) -> torch.Tensor:
    """Peak of the kernels that stay 16-bit under narrow-format training (fused attention, the
    output layer; Transformer Engine's default recipes): bf16's where the chip has it, else the
    precision's own."""
    return torch.where((is_narrow(d) > 0) & (d.peak_bf16_flops_per_s > 0), d.peak_bf16_flops_per_s, peak)


def attention_peak(d: DesignBatch, peak: torch.Tensor) -> torch.Tensor:
    """Peak of the fused attention kernel's matmuls: fp8's under a narrow precision with
    `fp8_attention` (where the chip has fp8), else `sixteen_bit_peak`; an `fa2` kernel runs in 16 bits,
    at `FA2_SHARE_ON_NEWER_GPUS` of it on a chip newer than Ampere (one with an fp8 peak)."""
    fa2 = d.attention_kernel == ATTENTION_KERNEL_CODES["fa2"]
    fp8 = (d.fp8_attention > 0) & (is_narrow(d) > 0) & (d.peak_fp8_flops_per_s > 0) & ~fa2
    base = torch.where(fp8, d.peak_fp8_flops_per_s, sixteen_bit_peak(d, peak))
    return torch.where(fa2 & (d.peak_fp8_flops_per_s > 0), FA2_SHARE_ON_NEWER_GPUS * base, base)


def offload_wait_s(bytes_: torch.Tensor, host_bw_bytes_per_s: torch.Tensor, forward_s: torch.Tensor,
                   backward_s: torch.Tensor, merged: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """`(forward, backward)` exposed time, `(batch,)` each, of copying one offloaded layer's activations
    (`bytes_`) to host memory behind the next layer's forward pass and back behind the previous layer's
    backward pass (Megatron-Core's cpu_offloading double-buffers one layer ahead): what the copy over the
    device's host link outlasts the pass it hides behind. Where a forward and a backward run as one unit
    (`merged` 1: the 1F1B expert-parallel overlap), both copies hide behind the pair, charged to the
    backward as `host_wait_s` charges it. A link of 0 prices nothing."""
    copy = torch.where(host_bw_bytes_per_s > 0, bytes_ / torch.clamp_min(host_bw_bytes_per_s, 1.0), 0.0)
    return _outlasting(copy, forward_s, backward_s, merged)
