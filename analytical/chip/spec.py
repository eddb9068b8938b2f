"""The inputs of a chip derivation: technology names, budgets and their splits.

`ChipSpec` is the human-facing record (a config of `conf/chip/`): the logic node, memory and link
technologies by name (`analytical.chip.technology` tables), the die area and package power budgets in
human units, and how area, power and die shoreline are split among the parts of the chip.
`validate()` raises `SpecError` naming the field. `ChipBatch` holds the same inputs as `(batch,)`
float64 tensors (technologies as integer codes, the index of their row in the table; SI units), the
input of `analytical.chip.derive`.

Splits: area among compute units / SRAM / other (PHYs, I/O, uncore), power among compute (units,
SRAM, leakage) / memory (DRAM stacks and their PHYs) / network (scale-up and scale-out SerDes), die
shoreline among memory PHY / network PHY. Each split sums to 1; in a `ChipBatch` the last part of
each split is implied (`1 - the others`), so a batch cannot break that rule.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Optional, Sequence

import torch

from analytical.chip.technology import LINK_TECHS, LOGIC_NODES, MEMORY_TECHS
from analytical.choices import SpecError, check_int

DTYPE = torch.float64
NODE_CODES = {name: i for i, name in enumerate(LOGIC_NODES)}
MEMORY_CODES = {name: i for i, name in enumerate(MEMORY_TECHS)}
LINK_CODES = {name: i for i, name in enumerate(LINK_TECHS)}
# the technology fields of a chip and the codes of their names
CHIP_CATEGORY_CODES = {"node": NODE_CODES, "memory": MEMORY_CODES,
                       "scale_up_link": LINK_CODES, "scale_out_link": LINK_CODES}
SPLITS = {"area": ("area_compute_fraction", "area_sram_fraction", "area_other_fraction"),
          "power": ("power_compute_fraction", "power_memory_fraction", "power_network_fraction"),
          "shoreline": ("shoreline_memory_fraction", "shoreline_network_fraction")}
# the last part of each split is implied in a ChipBatch
IMPLIED_FRACTIONS = {parts[-1]: parts[:-1] for parts in SPLITS.values()}
SPLIT_TOLERANCE = 1e-6


@dataclass
class ChipSpec:
    """One chip to derive. Human units (mm2, W, V, us), as in `conf/chip/*.yaml`.

    `vdd_v` = None lets the derivation pick the supply (and clock) that the compute power budget
    allows; a number fixes it. `flops_per_cycle_per_unit` is the dense fp16 FLOPs per clock of one
    compute unit (an architecture choice: 2048 on an A100 SM, 4096 on an H100 SM).
    `scale_out_lanes` SerDes lanes of `scale_out_link` serve the scale-out network; the rest of the
    network shoreline carries `scale_up_link` lanes.
    """

    name: str = "chip"
    node: str = "N5"
    memory: str = "HBM3e"
    scale_up_link: str = "NVLink4"
    scale_out_link: str = "IB-NDR"
    die_area_mm2: float = 800.0
    power_budget_w: float = 700.0
    area_compute_fraction: float = 0.5
    area_sram_fraction: float = 0.1
    area_other_fraction: float = 0.4
    power_compute_fraction: float = 0.805
    power_memory_fraction: float = 0.155
    power_network_fraction: float = 0.04
    shoreline_memory_fraction: float = 0.6
    shoreline_network_fraction: float = 0.4
    vdd_v: Optional[float] = None
    flops_per_cycle_per_unit: int = 4096
    fp8: bool = True
    scale_out_lanes: int = 4
    interposer_area_mm2: float = 2500.0
    kernel_launch_us: float = 3.0
    tile_m: int = 128
    tile_n: int = 256

    def validate(self) -> "ChipSpec":
        spec = f"chip[{self.name}]"
        for field, table in (("node", LOGIC_NODES), ("memory", MEMORY_TECHS),
                             ("scale_up_link", LINK_TECHS), ("scale_out_link", LINK_TECHS)):
            if getattr(self, field) not in table:
                raise SpecError(spec, field, getattr(self, field), "one of " + ", ".join(table))
        for field in ("die_area_mm2", "power_budget_w", "interposer_area_mm2", "kernel_launch_us"):
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
                    or value < 0 or (value == 0 and field != "kernel_launch_us"):
                raise SpecError(spec, field, value, ">= 0" if field == "kernel_launch_us" else "a number > 0")
        for group, parts in SPLITS.items():
            for field in parts:
                value = getattr(self, field)
                if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
                    raise SpecError(spec, field, value, "a fraction in [0, 1]")
            total = sum(getattr(self, field) for field in parts)
            if abs(total - 1.0) > SPLIT_TOLERANCE:
                raise SpecError(spec, "+".join(parts), round(total, 9), f"fractions of the {group} split summing to 1")
        if self.vdd_v is not None:
            node = LOGIC_NODES[self.node]
            low, high = supply_range_v(node.threshold_v, node.nominal_vdd_v)
            if isinstance(self.vdd_v, bool) or not isinstance(self.vdd_v, (int, float)) \
                    or not low - 1e-9 <= self.vdd_v <= high + 1e-9:
                raise SpecError(spec, "vdd_v", self.vdd_v, f"None or a supply in [{low:.3f}, {high:.3f}] V for "
                                                          f"{self.node}")
        check_int(spec, self, ("flops_per_cycle_per_unit", "tile_m", "tile_n"))
        check_int(spec, self, ("scale_out_lanes",), minimum=0)
        if not isinstance(self.fp8, bool):
            raise SpecError(spec, "fp8", self.fp8, "true or false")
        return self


# The supply range a derivation may choose from, relative to the node's table row.
# ESTIMATE: near-threshold operation (below Vt + 0.15 V) is outside the alpha-power law's range and
# outside what GPU voltage regulators offer; 1.2 x nominal is the usual overdrive ceiling of FinFET
# libraries for reliability (gate-oxide and electromigration limits).
VDD_MIN_OVER_THRESHOLD_V = 0.15
VDD_MAX_OVER_NOMINAL = 1.2


def supply_range_v(threshold_v, nominal_vdd_v):
    """(lowest, highest) supply of a node: floats or tensors."""
    return threshold_v + VDD_MIN_OVER_THRESHOLD_V, nominal_vdd_v * VDD_MAX_OVER_NOMINAL


@dataclass
class ChipBatch:
    """The inputs of `batch` chip derivations, SI units, each a `(batch,)` float64 tensor.

    Technologies are codes (`NODE_CODES`, `MEMORY_CODES`, `LINK_CODES`); `vdd_v` = 0 means "solve
    for the supply"; `fp8` is 0 or 1. The last part of each split is implied (see the module
    docstring)."""

    node: torch.Tensor
    memory: torch.Tensor
    scale_up_link: torch.Tensor
    scale_out_link: torch.Tensor
    die_area_mm2: torch.Tensor
    power_budget_w: torch.Tensor
    area_compute_fraction: torch.Tensor
    area_sram_fraction: torch.Tensor
    power_compute_fraction: torch.Tensor
    power_memory_fraction: torch.Tensor
    shoreline_memory_fraction: torch.Tensor
    vdd_v: torch.Tensor
    flops_per_cycle_per_unit: torch.Tensor
    fp8: torch.Tensor
    scale_out_lanes: torch.Tensor
    interposer_area_mm2: torch.Tensor
    kernel_launch_s: torch.Tensor
    tile_m: torch.Tensor
    tile_n: torch.Tensor

    @property
    def batch_size(self) -> int:
        return self.die_area_mm2.shape[0]

    def fields(self) -> dict[str, torch.Tensor]:
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}

    def fraction(self, name: str) -> torch.Tensor:
        """Any split fraction, the implied ones (`area_other_fraction`, ...) included."""
        if name in IMPLIED_FRACTIONS:
            return 1.0 - sum(getattr(self, part) for part in IMPLIED_FRACTIONS[name])
        return getattr(self, name)

    def replace(self, **changes: torch.Tensor | float) -> "ChipBatch":
        n = self.batch_size
        full = {k: (v if isinstance(v, torch.Tensor) else torch.full((n,), float(v), dtype=DTYPE))
                for k, v in changes.items()}
        return dataclasses.replace(self, **full)

    def expand(self, n: int) -> "ChipBatch":
        if self.batch_size != 1:
            raise ValueError("expand needs a batch of one chip")
        return ChipBatch(**{k: v.expand(n) for k, v in self.fields().items()})

    def index(self, idx: torch.Tensor | slice) -> "ChipBatch":
        return ChipBatch(**{k: v[idx] for k, v in self.fields().items()})


CHIP_FIELDS = tuple(f.name for f in dataclasses.fields(ChipBatch))


def _row(chip: ChipSpec) -> dict[str, float]:
    return {
        "node": NODE_CODES[chip.node], "memory": MEMORY_CODES[chip.memory],
        "scale_up_link": LINK_CODES[chip.scale_up_link], "scale_out_link": LINK_CODES[chip.scale_out_link],
        "die_area_mm2": chip.die_area_mm2, "power_budget_w": chip.power_budget_w,
        "area_compute_fraction": chip.area_compute_fraction, "area_sram_fraction": chip.area_sram_fraction,
        "power_compute_fraction": chip.power_compute_fraction, "power_memory_fraction": chip.power_memory_fraction,
        "shoreline_memory_fraction": chip.shoreline_memory_fraction,
        "vdd_v": 0.0 if chip.vdd_v is None else chip.vdd_v,
        "flops_per_cycle_per_unit": chip.flops_per_cycle_per_unit, "fp8": float(chip.fp8),
        "scale_out_lanes": chip.scale_out_lanes, "interposer_area_mm2": chip.interposer_area_mm2,
        "kernel_launch_s": chip.kernel_launch_us * 1e-6, "tile_m": chip.tile_m, "tile_n": chip.tile_n,
    }


def stack_chips(chips: Sequence[ChipSpec]) -> ChipBatch:
    """Validate a non-empty list of `ChipSpec` and stack it into a `ChipBatch` of that length."""
    if not chips:
        raise ValueError("stack_chips needs a non-empty list")
    rows = [_row(chip.validate()) for chip in chips]
    table = torch.tensor([[r[k] for k in CHIP_FIELDS] for r in rows], dtype=DTYPE)
    return ChipBatch(**{k: table[:, i].contiguous() for i, k in enumerate(CHIP_FIELDS)})


def chip_from_dict(values: dict, name: str = "chip") -> ChipSpec:
    """A validated `ChipSpec` from a plain mapping (a config), unknown keys named."""
    known = {f.name for f in dataclasses.fields(ChipSpec)}
    for key in values:
        if key not in known:
            raise SpecError(f"chip[{values.get('name', name)}]", key, values[key], "fields " + ", ".join(sorted(known)))
    return ChipSpec(**values).validate()
