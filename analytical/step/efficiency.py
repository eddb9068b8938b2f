"""Global efficiency constants of the analytical model: few, shared by every design, never per row.

Fields marked "fitted" hold the values fitted (robust least squares on log time,
`deepflow.calibration.fit_efficiency`) on every visible measured run: the 30 A100 runs of
experiments/validation/published_runs.csv, the 109 of vtrain_ground_truth_multi.csv and the 186
H100 / H200 / B200 / B300 / GB200 / GB300 runs of modern_runs.csv, in stages: a refit moves the constants
a model change concerns and holds the others (`python experiments/validation/leave_one_source_out.py
--fit-shipped --fields a,b` repeats one; without `--fields` it refits all eleven). How well
they transfer is reported leaving one source and one accelerator generation out (same script; README,
"Validation"). The comments give the public microbenchmarks the starting values came from. Fields marked
"measured" (the fused attention kernel's time a query tile) come from our own kernel timings on a GPU and are
never fitted (`deepflow.calibration.FIT_FIELDS` leaves them out). A user's own cluster gets its own values from
`deepflow calibrate` (a calibration file every command takes).
"""

from __future__ import annotations

from dataclasses import dataclass, fields


@dataclass(frozen=True)
class Efficiency:
    # Fraction of dense tensor-core peak the 16-bit GEMM main loop sustains in training. Started
    # from 0.93, cuBLAS's ~290 of 312 TFLOP/s on an isolated 16384x12288x12288 fp16 GEMM on A100
    # (NVIDIA "Matrix multiplication background" user guide, 2023). Fitted (0.828); the per-tile
    # time below and wave quantization come on top.
    gemm_peak_fraction: float = 0.8280
    # Per-tile fixed time (prologue: filling the shared-memory pipeline from memory; epilogue:
    # writing the tile), seconds. ~185 TFLOP/s on an 8192x1024x1024 A100 GEMM (same guide) implies
    # ~0.2-0.5 K-blocks of 1024 of overhead, i.e. ~1-3 us a tile. A time, not tensor-core work: the
    # same latency costs H100's 2.6x faster SMs 2.6x more of their work. Fitted (6.3 us).
    gemm_tile_overhead_s: float = 6.313e-6
    # Fraction of the narrow formats' peak (fp8, mxfp8, nvfp4: twice or four times the 16-bit rate)
    # that their GEMM main loop sustains, in place of `gemm_peak_fraction`. Fitted (0.715) together with
    # `flash_attention_fraction`, every other constant held, once torchtitan's H100 rows were typed with
    # their FlashAttention-2 kernel (`MappingSpec.attention_kernel`): until then the shared attention
    # fraction carried those rows' slow attention and the fp8 GEMMs had to look as fast as the 16-bit ones
    # (0.828). The value is the fit's; no public microbenchmark was found to start it from.
    narrow_gemm_peak_fraction: float = 0.7147
    # Fraction of HBM bandwidth that memory-bound kernels (norms, activations, softmax, dropout,
    # the optimizer) reach: ~0.8-0.9 in STREAM-like copies on A100/H100 (Chips and Cheese, 2021).
    # Fitted (at its bound 1.0: the fused kernels of today's stacks move fewer bytes than counted).
    hbm_bw_fraction: float = 1.0
    # FlashAttention-2 fwd+bwd reaches ~170 of 312 TFLOP/s on A100 (causal, head dim 128, seq 2k;
    # Dao 2023, arXiv 2307.08691, Fig. 5): 0.55 of peak. Fitted (0.454, with the narrow fraction above),
    # for the generation's own kernel's matmuls only: its softmax exponentials are timed apart at the
    # special-function units' rate (`kernels.softmax_exp_time_s`, `peak_tera_exp_per_s`), and a
    # FlashAttention-2 kernel on a newer GPU runs at a share of it (`kernels.FA2_SHARE_ON_NEWER_GPUS`).
    # Before torchtitan's H100 rows were typed with that kernel the fit held it at 0.272. Refitted alone (0.472)
    # once the kernel's fixed time a query tile (below) was priced apart.
    flash_attention_fraction: float = 0.4717
    # Fixed time of one (query tile of 128 rows, head) pair of a fused attention kernel on one SM, forward and
    # backward (`kernels.attention_tiles_time_s`): what makes the kernel's rate rise with the keys a query sees
    # and fall with narrower heads at the same FLOPs. Measured, not fitted: cuDNN's kernel (PyTorch SDPA, causal,
    # bf16) on one H200, 12 shapes (Llama 3 8B at 1k-16k tokens, 70B, 405B, GPT-3 175B, gpt-oss-120b's 64-wide
    # heads, Qwen3-235B), least squares of time = FLOPs / rate + tiles x this / SMs over two runs: forward
    # 8.0 us (rate 689 TFLOP/s; every shape within 12 %), backward 24.0 us (565 TFLOP/s; within 13 %)
    # (`experiments/benchmarks/bench_kernels.py`, README "The kernel layer on a real GPU"; a third run alone:
    # 7.6 and 25.0 us; an H100 SXM, 7 shapes: 8.4 and 31.9 us, so the backward value is the less certain: with
    # 32 us modern_runs reads 8.56 % against 8.50 %). A time, as `gemm_tile_overhead_s`: kept on every
    # generation; charged where the part names a special-function unit rate (an SM-based GPU), as the
    # exponentials are.
    flash_attention_fwd_tile_s: float = 8.0e-6
    flash_attention_bwd_tile_s: float = 24.0e-6
    # Fraction of link bandwidth collectives reach as bus bandwidth (NCCL tests on DGX A100:
    # ~230 of 300 GB/s NVLink, ~22 of 25 GB/s per HDR NIC): ~0.8-0.9. Both fitted (0.888; 0.750:
    # at its bound 1.0 until MoE dispatch counted one copy per expert where DeepEP / HybridEP send
    # one per node, when the NIC had to look faster than it is).
    scale_up_bw_fraction: float = 0.8877
    scale_out_bw_fraction: float = 0.7502
    # ZeRO-3 parameter gathers and gradient scatters run far below the hierarchical NCCL bound in
    # DeepSpeed (per-module collectives of a flat ring): Narayanan et al. 2021 Table 2 shows 175B
    # ZeRO-3 at 768 and 1536 GPUs taking the same time, i.e. bandwidth-bound per GPU. Fraction of
    # the hierarchical bound. Fitted (0.162). FSDP (`MappingSpec.fsdp`) runs at the bound.
    zero3_comm_fraction: float = 0.1620
    # Compute-communication interference: while a collective runs beside compute kernels (ZeRO-3
    # prefetch, overlapped data-parallel reduction, overlapped tp/cp communication), the compute
    # runs this many times slower (the collective's kernels hold SMs, and both share HBM), so an
    # overlapped collective of `c` seconds exposes max(c - compute, (1 - 1/slowdown) c); 1.0 =
    # perfect overlap. Lee et al. 2025 (arXiv 2507.03114) measure compute 18.9 % slower on average
    # (40 % at most) beside collectives on 4 A100/H100/MI250; an NVIDIA forum trace (2025, "Compute-
    # communication overlap causes severe GEMM performance degradation because of tail effect")
    # shows an H100 GEMM ~1.7x slower beside an FSDP-style all-gather. Fitted (1.83): above Lee et
    # al.'s range; it also absorbs host-side costs of overlapped schedules this model does not separate.
    overlap_compute_slowdown: float = 1.833
    # Per-layer host/framework overhead per micro-batch (Python, kernel scheduling gaps), seconds.
    # Fitted (0.60 ms). None under a full-iteration CUDA graph (`MappingSpec.cuda_graph` full).
    layer_overhead_s: float = 5.977e-4
    # Least time of an MoE layer's forward or backward pass of one micro-batch where the host launches
    # its kernels (no full-iteration CUDA graph), seconds: the host's time to launch the router, the
    # permutations, the dispatch and the expert GEMMs. The token dispatcher's host-device
    # synchronization (Megatron-Core MoEAlltoAllTokenDispatcher, `cuda_sync_point`) keeps the host
    # from running ahead into the next layer, so a layer whose GPU work is shorter waits on the host.
    # Fitted (4.96 ms) with every other constant held; not under a full-iteration CUDA graph. The
    # validation rows show such a floor: Qwen3-30B-A3B at micro-batch 1 takes 4.4 ms a layer pass on
    # B200 and 4.7 ms on H100 (Megatron-Bridge 26.02 / 26.02.01), where the GPU's work is 2.2 / 3.4 ms.
    moe_layer_host_s: float = 4.963e-3

    def as_dict(self) -> dict[str, float]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


DEFAULT_EFFICIENCY = Efficiency()
