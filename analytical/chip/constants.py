"""The global constants of the chip derivation (`analytical.chip.derive`): one set for every chip, each
with its source, or ESTIMATE / fitted and against what. The energy and power of the silicon (overhead
energy per FLOP, SRAM energy per byte, leakage and its voltage exponent) are not here: presets use them
too, so they live in `analytical.chip.silicon`."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class DerivationConstants:
    """The global constants of the derivation: one set for every chip, never per chip."""

    # Fraction of the units on the die that the product enables (the rest are spares for yield):
    # A100 108 of 128 SMs (0.84), H100 SXM 132 of 144 (0.92) (whitepapers). ESTIMATE: their mean.
    enabled_unit_fraction: float = 0.88
    # Alpha-power law exponent (Sakurai & Newton, IEEE JSSC 1990): ~1.3 for velocity-saturated
    # short-channel devices (1 = fully saturated, 2 = long channel). ESTIMATE for FinFETs.
    alpha: float = 1.3
    # Bit-cell area over the area of the last-level SRAM with its tags, ECC, controllers and
    # crossbar slice. ESTIMATE: A100's 40 MiB L2 is 9.1 mm2 of 0.027 um2 cells in ~83 mm2 (~10 % of
    # the 826 mm2 die on die shots).
    sram_area_efficiency: float = 0.11
    # L2 bytes per clock per compute unit (crossbar ports) and per MiB (banks): A100 whitepaper
    # 5120 B/clk with 108 SMs (47.4) and 40 MiB (128).
    sram_bytes_per_cycle_per_unit: float = 47.4
    sram_bytes_per_cycle_per_mib: float = 128.0
    # Share of the die perimeter available to memory and network PHYs (the rest: corners, PCIe and
    # low-speed I/O, power). ESTIMATE from A100/H100 die shots: HBM on the two long edges, NVLink
    # and PCIe on most of the short ones.
    phy_shoreline_fraction: float = 0.9
    # Largest monolithic die: the lithography reticle field, 26 x 33 mm (ASML/TSMC).
    reticle_area_mm2: float = 858.0
    # Interposer area a memory stack takes with its spacing and underfill keep-out, over its
    # footprint. ESTIMATE: A100/H100 CoWoS photos show ~1-2 mm gaps around 7.75 x 11.87 / 11 x 11
    # mm stacks.
    stack_keepout_factor: float = 1.25
    # Exponentials per clock per compute unit on the special-function units (MUFU.EX2): 16, on A100,
    # H100 and B200 alike. FlashAttention-3 (Shah et al. 2024, arXiv 2407.08608, sec. 3.1): H100 SXM5
    # "989 TFLOPS of FP16 matmul but only 3.9 TFLOPS of special functions" = 16 x 132 SMs x 1.83 GHz;
    # FlashAttention-4 (Zadouri et al. 2026): B200's exponential unit "16 ops per clock per SM",
    # unchanged from Hopper. (Blackwell Ultra doubles it: conf/hardware/b300.yaml.)
    sfu_exp_per_cycle_per_unit: float = 16.0
    # Precision rates relative to dense fp16 on the tensor units: tf32 1/2 and fp8 2x (A100 and
    # H100 whitepapers: 156/312, 1979/989); fp32 (non-tensor) 1/16 (A100 19.5/312; H100 67/989 is
    # 1/14.8).
    tf32_over_fp16: float = 0.5
    fp8_over_fp16: float = 2.0
    fp32_over_fp16: float = 1.0 / 16.0


DEFAULT_DERIVATION = DerivationConstants()
