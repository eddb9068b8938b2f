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
    # Fraction of dense tensor-core peak the GEMM main loop sustains in training. Fitted (0.724);
    # started from 0.93, cuBLAS's ~290 of 312 TFLOP/s on an isolated 16384x12288x12288 fp16 GEMM
    # on A100 (NVIDIA "Matrix multiplication background" user guide, 2023): sustained training
    # runs slower (clock under power cap, interference). Wave/tile quantization comes on top.
    gemm_peak_fraction: float = 0.724
    # Per-tile fixed cost (prologue: filling the shared-memory pipeline; epilogue: writing the
    # tile), as an equivalent extra K extent. ~185 TFLOP/s on an 8192x1024x1024 A100 GEMM
    # (same guide) implies ~0.2-0.5 K-blocks of 1024 of overhead. Fitted (175).
    gemm_tile_overhead_k: float = 175.0
    # Fraction of HBM bandwidth that memory-bound kernels (norms, activations, softmax, dropout,
    # the optimizer) reach: ~0.8-0.9 in STREAM-like copies on A100/H100 (Chips and Cheese, 2021).
    # Fitted (0.895).
    hbm_bw_fraction: float = 0.895
    # FlashAttention-2 fwd+bwd reaches ~170 of 312 TFLOP/s on A100 (causal, head dim 128,
    # seq 2k; Dao 2023, arXiv 2307.08691, Fig. 5): 0.55 of peak.
    flash_attention_fraction: float = 0.55
    # Fraction of link bandwidth collectives reach as bus bandwidth (NCCL tests on DGX A100:
    # ~230 of 300 GB/s NVLink, ~22 of 25 GB/s per HDR NIC): ~0.8-0.9. Scale-up not fitted (fitting
    # it on the Narayanan rows drives it to 1.0 and worsens vTrain); scale-out fitted (0.98).
    scale_up_bw_fraction: float = 0.8
    scale_out_bw_fraction: float = 0.98
    # ZeRO-3 parameter gathers and gradient scatters run far below the hierarchical NCCL bound in
    # DeepSpeed (per-module collectives of a flat ring): Narayanan et al. 2021 Table 2 shows 175B
    # ZeRO-3 at 768 and 1536 GPUs taking the same time, i.e. bandwidth-bound per GPU. Fraction of
    # the hierarchical bound. Fitted (0.136).
    zero3_comm_fraction: float = 0.136
    # Per-layer host/framework overhead per micro-batch (Python, kernel scheduling gaps), seconds.
    # Fitted (the fit puts it at 0 on these large-model runs).
    layer_overhead_s: float = 0.0

    def as_dict(self) -> dict[str, float]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


DEFAULT_EFFICIENCY = Efficiency()
