"""Global efficiency constants of the analytical model: few, shared by every design, never per row.

Fields marked "fitted" hold the values `deepflow validate fit=true fit_on=Narayanan` fits (robust
least squares on log time) on the 22 Narayanan et al. 2021 rows of
experiments/validation/published_runs.csv; they are reported on the held-out Korthikanti et al.
2022 rows and on vTrain (README, "Validation"). The comments give the public microbenchmarks the
starting values came from; the others are not fitted.
"""

from __future__ import annotations

from dataclasses import dataclass, fields


@dataclass(frozen=True)
class Efficiency:
    # Fraction of dense tensor-core peak the GEMM main loop sustains in training. Fitted (0.723);
    # started from 0.93, cuBLAS's ~290 of 312 TFLOP/s on an isolated 16384x12288x12288 fp16 GEMM
    # on A100 (NVIDIA "Matrix multiplication background" user guide, 2023): sustained training
    # runs slower (clock under power cap, interference). Wave/tile quantization comes on top.
    gemm_peak_fraction: float = 0.723
    # Per-tile fixed time (prologue: filling the shared-memory pipeline from memory; epilogue:
    # writing the tile), seconds. ~185 TFLOP/s on an 8192x1024x1024 A100 GEMM (same guide) implies
    # ~0.2-0.5 K-blocks of 1024 of overhead, i.e. ~1-3 us a tile. A time, not tensor-core work: the
    # same latency costs H100's 2.6x faster SMs 2.6x more of their work.
    gemm_tile_overhead_s: float = 2.64e-6
    # Fraction of the narrow formats' peak (fp8, mxfp8, nvfp4: twice or four times the 16-bit rate)
    # that their GEMM main loop sustains in training, in place of `gemm_peak_fraction`: at twice
    # the rate the same operand delivery feeds the tensor cores a smaller share of the time.
    # Fitted (see the README's validation table).
    narrow_gemm_peak_fraction: float = 0.6
    # Fraction of HBM bandwidth that memory-bound kernels (norms, activations, softmax, dropout,
    # the optimizer) reach: ~0.8-0.9 in STREAM-like copies on A100/H100 (Chips and Cheese, 2021).
    # Fitted (0.897).
    hbm_bw_fraction: float = 0.897
    # FlashAttention-2 fwd+bwd reaches ~170 of 312 TFLOP/s on A100 (causal, head dim 128,
    # seq 2k; Dao 2023, arXiv 2307.08691, Fig. 5): 0.55 of peak.
    flash_attention_fraction: float = 0.55
    # Fraction of link bandwidth collectives reach as bus bandwidth (NCCL tests on DGX A100:
    # ~230 of 300 GB/s NVLink, ~22 of 25 GB/s per HDR NIC): ~0.8-0.9. Scale-up not fitted (fitting
    # it on the Narayanan rows drives it to 1.0 and worsens vTrain); scale-out fitted (0.94).
    scale_up_bw_fraction: float = 0.8
    scale_out_bw_fraction: float = 0.94
    # ZeRO-3 parameter gathers and gradient scatters run far below the hierarchical NCCL bound in
    # DeepSpeed (per-module collectives of a flat ring): Narayanan et al. 2021 Table 2 shows 175B
    # ZeRO-3 at 768 and 1536 GPUs taking the same time, i.e. bandwidth-bound per GPU. Fraction of
    # the hierarchical bound. Fitted (0.148).
    zero3_comm_fraction: float = 0.148
    # Compute-communication interference: while a collective runs beside compute kernels (ZeRO-3
    # prefetch, overlapped data-parallel reduction, overlapped tp/cp communication), the compute
    # runs this many times slower (the collective's kernels hold SMs, and both share HBM), so an
    # overlapped collective of `c` seconds exposes max(c - compute, (1 - 1/slowdown) c); 1.0 =
    # perfect overlap. Lee et al. 2025 (arXiv 2507.03114) measure compute 18.9 % slower on average
    # (40 % at most) beside collectives on 4 A100/H100/MI250; an NVIDIA forum trace (2025, "Compute-
    # communication overlap causes severe GEMM performance degradation because of tail effect")
    # shows an H100 GEMM ~1.7x slower beside an FSDP-style all-gather (its 24 blocks push the GEMM
    # into a second wave). Fitted (1.75) on the six ZeRO-3 rows of Narayanan et al. 2021 Table 2,
    # the only fit rows whose communication overlaps compute: at 384/640 GPUs (compute ~
    # communication) they run 20-25 % slower than max(compute, communication), at 768+ GPUs
    # (communication-bound) they do not. The fit lies above Lee et al.'s range: it also absorbs
    # DeepSpeed 2021's host-side cost of per-module prefetch, which this model does not separate.
    overlap_compute_slowdown: float = 1.75
    # Per-layer host/framework overhead per micro-batch (Python, kernel scheduling gaps), seconds.
    # Fitted (the fit puts it at 0 on these large-model runs).
    layer_overhead_s: float = 0.0

    def as_dict(self) -> dict[str, float]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


DEFAULT_EFFICIENCY = Efficiency()
