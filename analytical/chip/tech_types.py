"""The kinds of technology the tables of `analytical.chip.technology` hold: a logic node, a
memory technology, a link technology (fields in human units, checked on construction)."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Optional

from analytical.choices import SpecError


def _check_fields(spec: str, obj: object) -> None:
    """Every float field > 0 and finite (None allowed for Optional fields)."""
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        if f.name in ("name", "family") or value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise SpecError(spec, f.name, value, "a number")
        if not math.isfinite(value) or value <= 0:
            raise SpecError(spec, f.name, value, "a finite number > 0")


@dataclass(frozen=True)
class LogicNode:
    """One CMOS logic process node at its nominal (typical-corner) supply.

    `relative_density` is logic transistor density relative to TSMC N7 = 1.0. MAC energies are one
    multiply-accumulate inside a tensor-core-like array (datapath only: no operand delivery from register
    files/SRAM, no clock tree, no leakage). bf16 and fp8 share the fp16 datapath in A100/H100-class tensor
    cores; fp32 is a CUDA-core-style FMA. `tensor_area_mm2_per_tflops` is the area of the SM array (tensor
    cores plus the register files, shared memory and schedulers that feed them) per dense fp16 TFLOP/s at
    the product's boost clock, read off NVIDIA die shots; None where unknown.
    """

    name: str
    relative_density: float
    fp16_mac_energy_j: float
    bf16_mac_energy_j: float
    fp8_mac_energy_j: float
    fp32_mac_energy_j: float
    sram_bitcell_area_um2: float  # high-density 6T bit-cell
    sram_read_energy_j_per_bit: float  # read from an 8 KB bank; larger arrays add wire energy ~sqrt(size)
    nominal_vdd_v: float
    threshold_v: float
    leakage_fraction: float  # static share of total power at nominal V and ~85 C junction
    tensor_area_mm2_per_tflops: Optional[float] = None
    # the clock at which `tensor_area_mm2_per_tflops` is quoted (the product's boost clock), which a chip
    # derivation takes as the node's clock at `nominal_vdd_v`; None where unknown
    reference_clock_hz: Optional[float] = None

    def validate(self) -> "LogicNode":
        spec = f"technology.node[{self.name}]"
        _check_fields(spec, self)
        if self.leakage_fraction >= 1:
            raise SpecError(spec, "leakage_fraction", self.leakage_fraction, "< 1")
        if self.threshold_v >= self.nominal_vdd_v:
            raise SpecError(spec, "threshold_v", self.threshold_v, f"< nominal_vdd_v ({self.nominal_vdd_v})")
        return self

    def mac_energy_j(self, precision: str) -> float:
        """Energy of one MAC at `precision` (the names of `analytical.specs.PRECISIONS`)."""
        energies = {"fp16": self.fp16_mac_energy_j, "bf16": self.bf16_mac_energy_j,
                    "fp8": self.fp8_mac_energy_j, "fp32": self.fp32_mac_energy_j,
                    # TF32 runs on the fp16 tensor datapath at half its dense rate within the same TDP
                    # (A100 whitepaper: 156 vs 312 TFLOP/s; H100: 494.7 vs 989.4), so ~2x the fp16 energy.
                    "tf32": 2.0 * self.fp16_mac_energy_j,
                    # ESTIMATE: fp4 at 2x the fp8 rate within the same TDP (B200: 9 vs 4.5 PFLOP/s dense,
                    # HGX B200 datasheet), so half the fp8 energy, as fp8 is half of fp16's.
                    "fp4": 0.5 * self.fp8_mac_energy_j}
        if precision not in energies:
            raise SpecError(f"technology.node[{self.name}]", "precision", precision,
                            "one of " + ", ".join(energies))
        return energies[precision]


@dataclass(frozen=True)
class MemoryTech:
    """One DRAM technology, per stack (HBM) or per device/package (GDDR6: one x32 device; LPDDR5: one x64
    package).

    `energy_j_per_bit` is the access energy per bit transferred (DRAM core + I/O on both sides), the figure
    vendors and O'Connor et al. quote. `phy_area_mm2` and `shoreline_mm` are the logic-die PHY of one stack
    at an N7..N4-class node; the die edge one stack occupies in a floorplan is at least the package's edge
    (`footprint_area_mm2` is width x depth of the stack), usually more than the PHY's `shoreline_mm`.
    """

    name: str
    bw_bytes_per_s_per_stack: float
    capacity_bytes_per_stack: float
    energy_j_per_bit: float
    footprint_area_mm2: float
    phy_area_mm2: float
    shoreline_mm: float
    # the stack's package side placed along the die edge (its long side): the die edge one stack occupies
    footprint_edge_mm: Optional[float] = None

    def validate(self) -> "MemoryTech":
        _check_fields(f"technology.memory[{self.name}]", self)
        return self


@dataclass(frozen=True)
class LinkTech:
    """One link technology. A lane is one differential pair per direction (a full-duplex TX+RX pair);
    `gbit_per_s_per_lane` is the per-direction rate vendors quote for aggregate bandwidth (NVLink, IB data
    rates; PCIe GT/s), before protocol overheads, which `Efficiency.*_bw_fraction` absorbs.

    `energy_j_per_bit` is per bit per link traversal (one TX end to one RX end): the SerDes at both ends,
    plus, for optical technologies (InfiniBand at data-centre reach, CPO), the optics. `lanes_per_mm` is the
    die-edge density of the SerDes, `phy_area_mm2_per_lane` its logic-die area (N7..N4 class).
    """

    name: str
    family: str  # "nvlink", "pcie", "infiniband", "cpo": rates rise generation by generation within one
    gbit_per_s_per_lane: float
    energy_j_per_bit: float
    lanes_per_mm: float
    phy_area_mm2_per_lane: float

    def validate(self) -> "LinkTech":
        _check_fields(f"technology.link[{self.name}]", self)
        return self
