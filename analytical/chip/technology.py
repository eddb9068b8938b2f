"""Sourced technology tables: logic nodes, DRAM technologies and link (SerDes/optics) technologies.

These are the inputs a chip derivation turns into an accelerator (logic node + memory technology + link
technology + die area/power/shoreline budgets) and that an energy model prices FLOPs, SRAM/HBM bytes and
network bytes with. This module holds only the tables and their lookups; nothing here knows about a chip.

Conventions:
- SI units, named in the field (`_j`, `_j_per_bit`, `_bytes_per_s`, `_um2`, `_mm2`, `_mm`, `_v`). Areas
  stay in um2/mm2 and link rates in Gbit/s because those are the units every source quotes.
- Every number carries a comment with its source, or "ESTIMATE: <derivation>" where it is derived,
  extrapolated or read off die shots (tests/analytical/chip/test_technology.py lints this).
- Table rows describe a technology, not a product: HBM rows hold the standard's (or the first vendor
  parts') top speed bin, which shipping GPUs often run below (see `MemoryTech`).

Energy anchor (used by every `LogicNode` energy): Horowitz, "Computing's energy problem", ISSCC 2014, at
45 nm / 0.9 V: fp16 multiply 1.1 pJ + add 0.4 pJ, fp32 multiply 3.7 pJ + add 0.9 pJ, 64-bit read of an
8 KB SRAM 10 pJ. Scaled to N7 by C*V^2 with the switched capacitance taken to scale with the linear
dimension, i.e. 1/sqrt(logic density):
    s(45 nm -> N7) = (0.75 V / 0.9 V)^2 * sqrt(3.33 / 91.2 MTr/mm2) = 0.694 * 0.191 = 0.1327
(Intel 45 nm 3.33 MTr/mm2 and TSMC N7 91.2 MTr/mm2 as tabulated by WikiChip). Other nodes scale from N7
by TSMC's published iso-speed power reductions (logic) or by sqrt(bit-cell area) * V^2 (SRAM).
"""

from __future__ import annotations

import dataclasses
import math

from analytical.chip.tech_types import LinkTech, LogicNode, MemoryTech
from analytical.choices import SpecError

_GIB = 1 << 30  # DRAM capacities are binary: a "16 GB" HBM stack is 8 dies x 16 Gibit = 16 GiB


def _by_name(*rows):
    return {row.name: row.validate() for row in rows}


# ---- logic nodes ---------------------------------------------------------------------------------
# Node-to-node energy factors vs N7 (TSMC iso-speed power claims): N16 2.5 (N7 "-60% power vs 16FF+",
# TSMC 7nm HVM announcement 2018); N5 0.70 ("-30% vs N7", TSMC N5 announcement 2019/2020); N4 0.658
# (ESTIMATE: N5 x 0.94 for N4's ~6% smaller layout); N3 0.508 (N5 x 0.725: N3 "-25..30% vs N5", TSMC 2020
# Technology Symposium); N2 0.343 (N3E = N5 x 0.675, "-30..35% vs N5"; N2 = N3E x 0.725, "-25..30% vs N3E",
# TSMC 2023 Technology Symposium). MAC rows below are the N7 anchor (module docstring) times these factors.

LOGIC_NODES: dict[str, LogicNode] = _by_name(
    LogicNode(
        name="N16",  # TSMC 16FF+ (also stands in for 12FFN, V100's node: same density on NVIDIA parts)
        relative_density=0.317,  # WikiChip: 16FF+ 28.88 MTr/mm2 / N7 91.20 MTr/mm2
        fp16_mac_energy_j=4.98e-13,  # ESTIMATE: N7 fp16 0.199 pJ x 2.5 (TSMC N7 -60% power vs 16FF+)
        bf16_mac_energy_j=4.98e-13,  # ESTIMATE: = fp16 (shared tensor datapath; no bf16 in V100 itself)
        fp8_mac_energy_j=2.49e-13,  # ESTIMATE: fp16 / 2 (H100: fp8 at 2x fp16 rate, same TDP)
        fp32_mac_energy_j=1.53e-12,  # ESTIMATE: N7 fp32 0.610 pJ x 2.5
        sram_bitcell_area_um2=0.074,  # WikiChip 16FF+ HD 6T cell 0.074 um2 (TSMC IEDM 2013: 0.07 um2)
        sram_read_energy_j_per_bit=3.91e-14,  # ESTIMATE: N7 0.0207 pJ x sqrt(0.074/0.027) x (0.80/0.75)^2
        nominal_vdd_v=0.80,  # ESTIMATE: nominal core supply of 16FF+ standard-Vt libraries (0.8 V class)
        threshold_v=0.35,  # ESTIMATE: saturation Vt of SVT FinFETs, ~0.3-0.4 V
        leakage_fraction=0.20,  # ESTIMATE: FinFET GPUs at nominal V, ~85 C: static ~15-25% of power
        # ESTIMATE: from V100 (12FFN): SM array ~1/2 of the 815 mm2 GV100 die (die shot) over full-die dense
        # fp16 125 TFLOP/s x 84/80 SMs = 131.25 TFLOP/s at 1530 MHz (V100 whitepaper): 407.5 / 131.25
        tensor_area_mm2_per_tflops=3.10,
        reference_clock_hz=1.53e9,  # V100 whitepaper: 1530 MHz boost, the clock of the area figure above
    ),
    LogicNode(
        name="N7",
        relative_density=1.0,  # reference node: TSMC N7, 91.2 MTr/mm2 (WikiChip)
        fp16_mac_energy_j=1.99e-13,  # ESTIMATE: Horowitz 45 nm fp16 mul+add 1.5 pJ x s(45->N7) 0.1327
        bf16_mac_energy_j=1.99e-13,  # ESTIMATE: = fp16 (A100: bf16 and fp16 both 312 TFLOP/s at 400 W)
        fp8_mac_energy_j=9.95e-14,  # ESTIMATE: fp16 / 2 (H100 whitepaper: fp8 1979 vs fp16 989 TFLOP/s)
        fp32_mac_energy_j=6.10e-13,  # ESTIMATE: Horowitz 45 nm fp32 mul+add 4.6 pJ x 0.1327
        sram_bitcell_area_um2=0.027,  # TSMC, Wu et al. IEDM 2016 (7 nm platform, 0.027 um2 HD cell)
        sram_read_energy_j_per_bit=2.07e-14,  # ESTIMATE: Horowitz 8 KB SRAM 10 pJ / 64 bit x 0.1327
        nominal_vdd_v=0.75,  # ESTIMATE: nominal core supply of N7 SVT libraries (0.75 V class)
        threshold_v=0.32,  # ESTIMATE: saturation Vt of SVT FinFETs, ~0.3 V
        leakage_fraction=0.25,  # ESTIMATE: static ~20-30% of GPU power at nominal V, ~85 C
        # ESTIMATE: from A100: SM array ~1/2 of the 826 mm2 GA100 die (die shot) over full-die dense fp16
        # 312 x 128/108 = 369.8 TFLOP/s at 1410 MHz (A100 whitepaper): 413 / 369.8
        tensor_area_mm2_per_tflops=1.12,
        reference_clock_hz=1.41e9,  # A100 whitepaper: 1410 MHz boost, the clock of the area figure above
    ),
    LogicNode(
        name="N5",
        relative_density=1.8,  # TSMC N5: 1.8x logic density vs N7 (TSMC N5 announcement; IEDM 2019 Yeap)
        fp16_mac_energy_j=1.39e-13,  # ESTIMATE: N7 0.199 pJ x 0.70 (TSMC N5 -30% power vs N7)
        bf16_mac_energy_j=1.39e-13,  # ESTIMATE: = fp16 (shared tensor datapath)
        fp8_mac_energy_j=6.97e-14,  # ESTIMATE: fp16 / 2 (H100: fp8 at 2x fp16 rate, same TDP)
        fp32_mac_energy_j=4.27e-13,  # ESTIMATE: N7 0.610 pJ x 0.70
        sram_bitcell_area_um2=0.021,  # TSMC, Yeap et al. IEDM 2019 (5 nm platform, 0.021 um2 HD cell)
        sram_read_energy_j_per_bit=1.83e-14,  # ESTIMATE: N7 0.0207 pJ x sqrt(0.021/0.027)
        nominal_vdd_v=0.75,  # ESTIMATE: N5 SVT libraries keep the 0.75 V class nominal supply
        threshold_v=0.30,  # ESTIMATE: ~0.3 V SVT
        leakage_fraction=0.28,  # ESTIMATE: denser FinFET at flat Vdd/Vt leaks a little more per watt
        # ESTIMATE: N4 (H100) value x 1.91/1.8 (density scaling at iso clock)
        tensor_area_mm2_per_tflops=0.400,
        reference_clock_hz=1.83e9,  # ESTIMATE: the N4 (H100) clock, since the area above is scaled at iso clock
    ),
    LogicNode(
        name="N4",  # TSMC N4 / N4P; NVIDIA's "4N" (H100, B200) is an N5-family custom variant
        relative_density=1.91,  # TSMC N4P press release (2021): ~6% higher density than N5: 1.8 x 1.06
        fp16_mac_energy_j=1.31e-13,  # ESTIMATE: N7 0.199 pJ x 0.658 (N5 x 0.94 for 6% less layout)
        bf16_mac_energy_j=1.31e-13,  # ESTIMATE: = fp16 (H100: bf16 and fp16 both 989 TFLOP/s)
        fp8_mac_energy_j=6.55e-14,  # ESTIMATE: fp16 / 2 (H100 whitepaper: fp8 1979 vs fp16 989 TFLOP/s)
        fp32_mac_energy_j=4.02e-13,  # ESTIMATE: N7 0.610 pJ x 0.658
        sram_bitcell_area_um2=0.021,  # ESTIMATE: N5-family node reuses the N5 0.021 um2 HD cell (IEDM 2019)
        sram_read_energy_j_per_bit=1.83e-14,  # ESTIMATE: same cell and supply as N5
        nominal_vdd_v=0.75,  # ESTIMATE: same supply class as N5
        threshold_v=0.30,  # ESTIMATE: same devices as N5
        leakage_fraction=0.28,  # ESTIMATE: same devices as N5
        # ESTIMATE: from H100: SM array ~1/2 of the 814 mm2 GH100 die (die shot) over full-die dense fp16
        # 989.4 x 144/132 = 1079 TFLOP/s at 1830 MHz (H100 whitepaper): 407 / 1079
        tensor_area_mm2_per_tflops=0.377,
        reference_clock_hz=1.83e9,  # H100 whitepaper: 989.4 TF / (132 SM x 4096 FLOP/clk) = 1830 MHz, the area's clock
    ),
    LogicNode(
        name="N3",  # TSMC N3 (N3B, the first N3; N3E relaxes density to 1.6x N5 and the cell to 0.021)
        relative_density=3.06,  # TSMC 2020 Technology Symposium: N3 up to 1.7x logic density vs N5: 1.8 x 1.7
        fp16_mac_energy_j=1.01e-13,  # ESTIMATE: N7 0.199 pJ x 0.508 (N5 x 0.725, TSMC N3 -25..30% vs N5)
        bf16_mac_energy_j=1.01e-13,  # ESTIMATE: = fp16 (shared tensor datapath)
        fp8_mac_energy_j=5.05e-14,  # ESTIMATE: fp16 / 2 (fp8 at 2x fp16 rate, same TDP, as on H100)
        fp32_mac_energy_j=3.10e-13,  # ESTIMATE: N7 0.610 pJ x 0.508
        sram_bitcell_area_um2=0.0199,  # TSMC IEDM 2022 N3B HD cell 0.0199 um2 (WikiChip report)
        sram_read_energy_j_per_bit=1.78e-14,  # ESTIMATE: N7 0.0207 pJ x sqrt(0.0199/0.027)
        nominal_vdd_v=0.75,  # ESTIMATE: FinFlex N3 libraries keep the 0.75 V class nominal supply
        threshold_v=0.29,  # ESTIMATE: ~0.3 V SVT, slowly falling
        leakage_fraction=0.30,  # ESTIMATE: last FinFET node, highest density at flat Vdd
        # ESTIMATE: N4 (H100) value x 1.91/3.06 (density scaling at iso clock)
        tensor_area_mm2_per_tflops=0.235,
        reference_clock_hz=1.83e9,  # ESTIMATE: the N4 (H100) clock, since the area above is scaled at iso clock
    ),
    LogicNode(
        name="N2",  # projected: TSMC N2 (nanosheet GAA), volume production from late 2025, no GPU on it yet
        # ESTIMATE: TSMC N2 ">1.15x chip density vs N3E" (2023 Symposium, IEDM 2024) applied to N3E logic
        # (1.6x N5, TSMC 2022): 1.15 x 1.6 x 1.8
        relative_density=3.31,
        fp16_mac_energy_j=6.82e-14,  # ESTIMATE: N7 0.199 pJ x 0.343 (N3E x 0.725, N2 -25..30% vs N3E)
        bf16_mac_energy_j=6.82e-14,  # ESTIMATE: = fp16 (shared tensor datapath)
        fp8_mac_energy_j=3.41e-14,  # ESTIMATE: fp16 / 2 (fp8 at 2x fp16 rate, same TDP, as on H100)
        fp32_mac_energy_j=2.09e-13,  # ESTIMATE: N7 0.610 pJ x 0.343
        sram_bitcell_area_um2=0.0175,  # TSMC IEDM 2024 / ISSCC 2025 N2 HD cell ~0.0175 um2 (38 Mb/mm2)
        sram_read_energy_j_per_bit=1.45e-14,  # ESTIMATE: N7 0.0207 pJ x sqrt(0.0175/0.027) x (0.70/0.75)^2
        nominal_vdd_v=0.70,  # ESTIMATE: GAA nanosheets allow ~50 mV lower nominal supply than N3
        threshold_v=0.28,  # ESTIMATE: ~0.3 V SVT nanosheet
        leakage_fraction=0.25,  # ESTIMATE: GAA gate control cuts leakage back below the N3 level
        # ESTIMATE: N4 (H100) value x 1.91/3.31 (density scaling at iso clock)
        tensor_area_mm2_per_tflops=0.218,
        reference_clock_hz=1.83e9,  # ESTIMATE: the N4 (H100) clock, since the area above is scaled at iso clock
    ),
)

# ---- memory technologies ------------------------------------------------------------------------
# Bandwidth = pin rate x interface width / 8. PHY area and shoreline are ESTIMATEs: die-shot analyses are
# paywalled; an HBM PHY sits under the stack's ~6 mm-wide bump field at ~1.5-1.7 mm depth.

MEMORY_TECHS: dict[str, MemoryTech] = _by_name(
    MemoryTech(
        name="HBM2",
        # JEDEC JESD235B (press release 2018-12-17): HBM2's top bin 2.4 Gb/s/pin x 1024 bits = 307 GB/s, the
        # speed of Samsung Aquabolt (2018); JESD235A's 2.0 Gb/s (256 GB/s) before it. V100 runs 1.75 (225 GB/s),
        # A100 40GB 2.43 (1555 GB/s / 5 stacks), TPU v4 2.34 (1200 GB/s / 4 stacks, Jouppi et al. ISCA 2023)
        bw_bytes_per_s_per_stack=307.2e9,
        capacity_bytes_per_stack=8 * _GIB,  # Samsung Aquabolt (2018): 8-high x 8 Gb (V100 32GB = 4 stacks)
        energy_j_per_bit=3.9e-12,  # O'Connor et al., MICRO 2017 "Fine-grained DRAM": HBM2 ~3.9 pJ/bit
        footprint_area_mm2=92.0,  # JEDEC/Samsung HBM2 KGSD outline 7.75 x 11.87 mm
        phy_area_mm2=9.0,  # ESTIMATE: ~6 mm x 1.5 mm PHY under the stack's bump field
        shoreline_mm=6.0,  # ESTIMATE: width of the 1024-DQ microbump field at 55 um pitch (~6 mm)
        footprint_edge_mm=11.87,  # JEDEC/Samsung HBM2 KGSD outline 7.75 x 11.87 mm: long side
    ),
    MemoryTech(
        name="HBM2e",
        bw_bytes_per_s_per_stack=409.6e9,  # JESD235C / Samsung Flashbolt: 3.2 Gb/s x 1024 (A100 80GB: 408)
        capacity_bytes_per_stack=16 * _GIB,  # Samsung Flashbolt / SK hynix HBM2E: 8-high x 16 Gb
        energy_j_per_bit=3.9e-12,  # ESTIMATE: = HBM2 (same 1.2 V I/O and array; Micron quotes up to 6.0)
        footprint_area_mm2=92.0,  # Samsung/SK hynix HBM2E keep the 7.75 x 11.87 mm HBM2 outline
        phy_area_mm2=9.0,  # ESTIMATE: same 1024-bit bump field as HBM2
        shoreline_mm=6.0,  # ESTIMATE: same 1024-bit bump field as HBM2
        footprint_edge_mm=11.87,  # Samsung/SK hynix HBM2E 7.75 x 11.87 mm outline: long side
    ),
    MemoryTech(
        name="HBM3",
        bw_bytes_per_s_per_stack=819.2e9,  # JEDEC JESD238 (2022): 6.4 Gb/s x 1024 (H100 SXM runs 670)
        capacity_bytes_per_stack=16 * _GIB,  # SK hynix HBM3 (2021): 16 GB 8-high (24 GB 12-high); H100 80GB
        energy_j_per_bit=3.9e-12,  # ESTIMATE: between HBM2 (3.9, O'Connor 2017) and HBM3e (3.9, Samsung)
        footprint_area_mm2=121.0,  # Micron (2023): HBM3 and HBM3E share an 11 x 11 mm footprint
        phy_area_mm2=11.0,  # ESTIMATE: ~6.5 mm x 1.7 mm, more power/ground bumps than HBM2
        shoreline_mm=6.5,  # ESTIMATE: 1024 DQ + 32 pseudo-channel control at HBM3 bump pitch
        footprint_edge_mm=11.0,  # Micron (2023): 11 x 11 mm HBM3 footprint
    ),
    MemoryTech(
        name="HBM3e",
        bw_bytes_per_s_per_stack=1228.8e9,  # SK hynix/Micron HBM3E: 9.6 Gb/s x 1024 (B200 runs ~1000)
        capacity_bytes_per_stack=24 * _GIB,  # Micron HBM3E (2023): 8-high x 24 Gb; H200 6x, B200 8x 24 GB
        energy_j_per_bit=3.9e-12,  # Samsung (2025, via ChinaFlashMarket): current HBM3E 3.9 pJ/bit
        footprint_area_mm2=121.0,  # Micron (2023): HBM3E fits the HBM3 11 x 11 mm footprint
        phy_area_mm2=11.0,  # ESTIMATE: same interface as HBM3
        shoreline_mm=6.5,  # ESTIMATE: same interface as HBM3
        footprint_edge_mm=11.0,  # Micron (2023): 11 x 11 mm HBM3E footprint
    ),
    MemoryTech(
        name="HBM4",  # projected: JEDEC JESD270-4 published April 2025, first products (Rubin) 2026
        bw_bytes_per_s_per_stack=2048e9,  # JEDEC JESD270-4: 8 Gb/s x 2048 bits = 2 TB/s per stack
        capacity_bytes_per_stack=36 * _GIB,  # SK hynix HBM4 (2025): 12-high x 24 Gb (JEDEC allows 64 GB)
        energy_j_per_bit=2.8e-12,  # ESTIMATE: HBM3E 3.9 pJ/bit / 1.4 (SK hynix: >40% better efficiency)
        footprint_area_mm2=144.0,  # ESTIMATE: JEDEC: "larger physical footprint" than HBM3's 11 x 11 mm
        phy_area_mm2=18.0,  # ESTIMATE: 2x the HBM3 I/O count at a finer bump pitch: ~10 mm x 1.8 mm
        shoreline_mm=10.0,  # ESTIMATE: 2048 DQ; ~1.5x HBM3's edge at finer pitch
        footprint_edge_mm=12.0,  # ESTIMATE: side of the ~144 mm2 footprint above
    ),
    MemoryTech(
        name="GDDR6",  # per x32 device
        bw_bytes_per_s_per_stack=64e9,  # JEDEC JESD250 / Micron GDDR6: 16 Gb/s x 32 bits
        capacity_bytes_per_stack=2 * _GIB,  # Samsung 16 Gb GDDR6 (2018)
        energy_j_per_bit=7.5e-12,  # Micron "Ultra-Bandwidth Solutions": GDDR6 average device power 7.5 pJ/bit
        footprint_area_mm2=168.0,  # JESD250 180-ball FBGA, 14 x 12 mm
        phy_area_mm2=3.0,  # ESTIMATE: x32 GDDR6 PHY ~1.0 mm deep along its edge
        shoreline_mm=3.5,  # ESTIMATE: Navi 10/21 die shots: 32 data pairs + CA per ~3-4 mm of edge
        footprint_edge_mm=14.0,  # JESD250 180-ball FBGA 14 x 12 mm: long side
    ),
    MemoryTech(
        name="LPDDR5",  # per x64 package (4 x16 channels)
        bw_bytes_per_s_per_stack=51.2e9,  # JEDEC JESD209-5: 6400 MT/s x 64 bits
        capacity_bytes_per_stack=16 * _GIB,  # Samsung 16 GB LPDDR5 package (2021): 8 x 16 Gb
        energy_j_per_bit=4.5e-12,  # ESTIMATE: 0.5 V unterminated I/O + core, ~30% below LPDDR4X (Samsung)
        footprint_area_mm2=186.0,  # ESTIMATE: typical x64 LPDDR5 FBGA 12.4 x 15 mm
        phy_area_mm2=4.0,  # ESTIMATE: x64 LPDDR5 PHY incl. CA, ~1 mm deep
        shoreline_mm=4.0,  # ESTIMATE: 64 DQ single-ended + CA at ~60 um effective pitch
        footprint_edge_mm=15.0,  # ESTIMATE: long side of the 12.4 x 15 mm FBGA above
    ),
)

# ---- link technologies ---------------------------------------------------------------------------
# SerDes energies are ESTIMATEs: long-reach electrical SerDes (56G NRZ/PAM4, 112G and 224G PAM4) stay at
# ~4-6 pJ/bit TX+RX across ISSCC 2019-2024 transceiver papers; vendors do not publish NVLink/PCIe PHY
# energies. Shoreline densities are ESTIMATEs from A100/H100 die shots (NVLink + PCIe PHYs along ~1.5 die
# edges: 48+16 lanes on A100, 36+16 lanes on H100).

LINK_TECHS: dict[str, LinkTech] = _by_name(
    LinkTech(
        name="NVLink2", family="nvlink",
        gbit_per_s_per_lane=25.0,  # V100 whitepaper: 6 links x 8 lanes x 25 Gb/s = 25 GB/s per link per dir
        energy_j_per_bit=4.0e-12,  # ESTIMATE: 25G NRZ SerDes TX+RX, ~4 pJ/bit as the 50G class (no lower)
        lanes_per_mm=2.5,  # ESTIMATE: as NVLink3 (NRZ lanes at a similar pitch on the V100 die)
        phy_area_mm2_per_lane=0.30,  # ESTIMATE: 25G NRZ lane at 12FFN, as a 50G lane at N7
    ),
    LinkTech(
        name="NVLink3", family="nvlink",
        gbit_per_s_per_lane=50.0,  # A100 whitepaper: 12 links x 4 lanes x 50 Gb/s = 25 GB/s per link per dir
        energy_j_per_bit=4.0e-12,  # ESTIMATE: 50G-class SerDes TX+RX, ~4 pJ/bit
        lanes_per_mm=2.5,  # ESTIMATE: A100 die shot, ~64 lanes (NVLink + PCIe) on ~25 mm of edge
        phy_area_mm2_per_lane=0.30,  # ESTIMATE: 50G SerDes lane incl. PLL/clocking share at N7
    ),
    LinkTech(
        name="NVLink4", family="nvlink",
        gbit_per_s_per_lane=100.0,  # H100 whitepaper: 18 links x 2 lanes x 100 Gb/s (PAM4) = 25 GB/s per dir
        energy_j_per_bit=4.5e-12,  # ESTIMATE: 112G PAM4 SerDes TX+RX, ~4-5 pJ/bit
        lanes_per_mm=2.0,  # ESTIMATE: H100 die shot, ~52 lanes (NVLink + PCIe) on ~26 mm of edge
        phy_area_mm2_per_lane=0.40,  # ESTIMATE: 112G PAM4 lane with DSP receiver at N4
    ),
    LinkTech(
        name="NVLink5", family="nvlink",
        gbit_per_s_per_lane=200.0,  # NVIDIA Blackwell: 18 links x 2 lanes x 200 Gb/s = 50 GB/s/link/dir
        energy_j_per_bit=5.0e-12,  # ESTIMATE: 224G PAM4 SerDes TX+RX, ~5 pJ/bit
        lanes_per_mm=2.0,  # ESTIMATE: as NVLink4 (larger 224G lanes offset by tighter packing)
        phy_area_mm2_per_lane=0.50,  # ESTIMATE: 224G PAM4 lane with heavier DSP/equalisation
    ),
    LinkTech(
        name="PCIe4", family="pcie",
        gbit_per_s_per_lane=16.0,  # PCI-SIG PCIe 4.0 (2017): 16 GT/s, 128b/130b
        energy_j_per_bit=5.0e-12,  # ESTIMATE: long-reach NRZ SerDes TX+RX ~5 pJ/bit
        lanes_per_mm=2.5,  # ESTIMATE: A100 die shot, PCIe beside the NVLink PHYs at similar pitch
        phy_area_mm2_per_lane=0.20,  # ESTIMATE: 16G NRZ lane at N7
    ),
    LinkTech(
        name="PCIe5", family="pcie",
        gbit_per_s_per_lane=32.0,  # PCI-SIG PCIe 5.0 (2019): 32 GT/s, 128b/130b
        energy_j_per_bit=5.5e-12,  # ESTIMATE: 32G NRZ with 36 dB channel, ~5-6 pJ/bit
        lanes_per_mm=2.5,  # ESTIMATE: H100 die shot
        phy_area_mm2_per_lane=0.25,  # ESTIMATE: 32G NRZ lane at N5/N4
    ),
    LinkTech(
        name="PCIe6", family="pcie",
        gbit_per_s_per_lane=64.0,  # PCI-SIG PCIe 6.0 (2022): 64 GT/s PAM4, FLIT mode with FEC
        energy_j_per_bit=6.0e-12,  # ESTIMATE: 64G PAM4 SerDes with DSP receiver, ~6 pJ/bit
        lanes_per_mm=2.0,  # ESTIMATE: PAM4 lanes, as NVLink4
        phy_area_mm2_per_lane=0.35,  # ESTIMATE: 64G PAM4 lane
    ),
    LinkTech(
        name="IB-EDR", family="infiniband",
        gbit_per_s_per_lane=25.0,  # IBTA Vol. 2 (2014): EDR 25 Gb/s per lane, 100 Gb/s per 4x port
        # ESTIMATE: 25G SerDes 4 pJ/bit + optics: a 100G QSFP28 SR4 transceiver ~3.5 W per 100 Gb/s
        # (35 pJ/bit; half of each end's module per direction) = 39 pJ/bit per hop
        energy_j_per_bit=39.0e-12,
        lanes_per_mm=2.5,  # ESTIMATE: NIC/switch SerDes of the NVLink2 class
        phy_area_mm2_per_lane=0.30,  # ESTIMATE: as NVLink2 (same 25G class)
    ),
    LinkTech(
        name="IB-HDR", family="infiniband",
        gbit_per_s_per_lane=50.0,  # IBTA Vol. 2 Rel. 1.4 (2018): HDR 50 Gb/s per lane, 200 Gb/s per 4x port
        # ESTIMATE: 50G SerDes 4 pJ/bit + optics: a 200G QSFP56 SR4 transceiver ~4.5 W per 200 Gb/s
        # (22.5 pJ/bit; half of each end's module per direction) = 26.5 pJ/bit per hop
        energy_j_per_bit=26.5e-12,
        lanes_per_mm=2.5,  # ESTIMATE: NIC/switch SerDes of the NVLink3 class
        phy_area_mm2_per_lane=0.30,  # ESTIMATE: as NVLink3 (same 50G class)
    ),
    LinkTech(
        name="IB-NDR", family="infiniband",
        gbit_per_s_per_lane=100.0,  # IBTA Vol. 2 Rel. 1.5 (2021): NDR 100 Gb/s per lane, 400 Gb/s per 4x port
        # ESTIMATE: 112G SerDes 4.5 pJ/bit + optics: 400G OSFP SR4 ~8 W per 400 Gb/s (20 pJ/bit) = 24.5
        energy_j_per_bit=24.5e-12,
        lanes_per_mm=2.0,  # ESTIMATE: as NVLink4 (same 112G class)
        phy_area_mm2_per_lane=0.40,  # ESTIMATE: as NVLink4 (same 112G class)
    ),
    LinkTech(
        name="IB-XDR", family="infiniband",
        gbit_per_s_per_lane=200.0,  # IBTA XDR / NVIDIA Quantum-X800 (2024): 200 Gb/s per lane, 800 Gb/s port
        # ESTIMATE: 224G SerDes 5 pJ/bit + optics: 1.6T pluggable ~30 W (NVIDIA GTC 2025) / 1.6 Tb/s
        # = 18.75 pJ/bit; total 23.75 pJ/bit per hop
        energy_j_per_bit=23.75e-12,
        lanes_per_mm=2.0,  # ESTIMATE: as NVLink5 (same 224G class)
        phy_area_mm2_per_lane=0.50,  # ESTIMATE: as NVLink5 (same 224G class)
    ),
    LinkTech(
        name="ICI", family="ici",  # Google TPU v4 inter-chip interconnect (3D torus, 6 links per chip)
        # ESTIMATE: Jouppi et al. ISCA 2023: 50 GB/s per link per direction; lane count unpublished, taken
        # as 8 lanes of 50 Gb/s, the SerDes class of N7 contemporaries (A100's NVLink3)
        gbit_per_s_per_lane=50.0,
        # ESTIMATE: electrical 50G SerDes TX+RX ~4 pJ/bit; the optics between 4x4x4 cubes are not priced
        # (Jouppi et al. ISCA 2023: OCSes and optical components are < 3% of system power)
        energy_j_per_bit=4.0e-12,
        lanes_per_mm=2.5,  # ESTIMATE: as NVLink3 (same 50G class)
        phy_area_mm2_per_lane=0.30,  # ESTIMATE: as NVLink3 (same 50G class)
    ),
    LinkTech(
        name="CPO", family="cpo",
        gbit_per_s_per_lane=200.0,  # NVIDIA Quantum-X / Spectrum-X Photonics (GTC 2025): 200G per lane
        # ESTIMATE: NVIDIA GTC 2025 "3.5x power efficiency" vs pluggables applied to IB-XDR 23.75 pJ/bit
        # = 6.8 pJ/bit (Broadcom Bailly 51.2T: <6 W per 800G port, ~7.5 pJ/bit, agrees)
        energy_j_per_bit=6.8e-12,
        lanes_per_mm=5.0,  # ESTIMATE: ~1 Tb/s per mm of edge to an adjacent optical engine (XSR/D2D)
        phy_area_mm2_per_lane=0.15,  # ESTIMATE: short-reach electrical lane to the co-packaged engine
    ),
)


# ---- lookups ---------------------------------------------------------------------------------------

def _lookup(table: dict, field: str, name: str):
    if isinstance(name, str):
        for key, row in table.items():
            if key.casefold() == name.casefold():
                return row
    raise SpecError("technology", field, name, "one of " + ", ".join(table))


def logic_node(name: str) -> LogicNode:
    """The logic node `name` (case-insensitive: "n7" finds "N7"); SpecError "technology.node" otherwise."""
    return _lookup(LOGIC_NODES, "node", name)


def memory_tech(name: str) -> MemoryTech:
    """The memory technology `name` (case-insensitive); SpecError "technology.memory" otherwise."""
    return _lookup(MEMORY_TECHS, "memory", name)


def link_tech(name: str) -> LinkTech:
    """The link technology `name` (case-insensitive); SpecError "technology.link" otherwise."""
    return _lookup(LINK_TECHS, "link", name)


def interpolate_node(relative_density: float) -> LogicNode:
    """A node between two table rows, interpolated log-linearly in density: every float field f is
    exp(lerp(log f)) with weight t = log(d / d_lo) / log(d_hi / d_lo), i.e. a power law through the two
    neighbouring nodes. A density equal to a row's returns that row; outside [N16, N2] raises SpecError
    (no extrapolation: beyond N2 the tables hold nothing to anchor it)."""
    rows = sorted(LOGIC_NODES.values(), key=lambda row: row.relative_density)
    lo_d, hi_d = rows[0].relative_density, rows[-1].relative_density
    d = relative_density
    if isinstance(d, bool) or not isinstance(d, (int, float)) or not lo_d <= d <= hi_d:
        raise SpecError("technology", "relative_density", relative_density,
                        f"a number in [{lo_d}, {hi_d}] ({rows[0].name} .. {rows[-1].name})")
    for row in rows:
        if row.relative_density == d:
            return row
    hi_index = next(i for i, row in enumerate(rows) if row.relative_density > d)
    lo, hi = rows[hi_index - 1], rows[hi_index]
    t = math.log(d / lo.relative_density) / math.log(hi.relative_density / lo.relative_density)
    values = {}
    for f in dataclasses.fields(LogicNode):
        a, b = getattr(lo, f.name), getattr(hi, f.name)
        if f.name == "name":
            continue
        if f.name == "relative_density":
            values[f.name] = float(d)
        elif a is None or b is None:
            values[f.name] = None
        else:
            values[f.name] = math.exp((1 - t) * math.log(a) + t * math.log(b))
    return LogicNode(name=f"{lo.name}-{hi.name}@{d:.4g}", **values).validate()
