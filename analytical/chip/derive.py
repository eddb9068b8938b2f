"""Chip derivation (CrossFlow's "architecture generation"): technology + budgets -> an accelerator.

`derive(chips)` turns a `ChipBatch` (logic node, memory and link technologies, die area and power
budgets and their splits; `analytical.chip.spec`) into every accelerator field of `DesignBatch`,
energy fields included, plus a feasibility reason per chip and the area, power and shoreline each
part uses. It is batch-first over float64 tensors and differentiable in the continuous inputs:

- compute: the compute area holds `area / unit_area` units (unit area = the node's tensor area per
  TFLOP/s x the unit's FLOP/clk x the node's reference clock), of which `enabled_unit_fraction` are
  enabled (yield harvesting). The supply V is the highest in the node's range whose power fits the
  compute budget: dynamic C V^2 f of the units and SRAM (`silicon.COMPUTE_ENERGY_OVERHEAD` x the
  table's datapath MAC energy) with f(V) from the alpha-power law f ~ (V - Vt)^alpha / V, plus leakage
  ~ V^3 (the node's `leakage_fraction` of the units' power at nominal V). Peak FLOP/s = units x
  FLOP/clk x f. Energy per FLOP, per SRAM byte and static power come from `analytical.chip.silicon`, the
  model presets use at nominal V, so a preset and the chip derived from the same technology and
  budgets differ only by the solved supply and the unit count.
- SRAM: capacity from area, bit cell and `sram_area_efficiency`; bandwidth bytes/clk x f bounded by
  both the units (crossbar ports) and the capacity (banks).
- memory: stacks bounded by the memory shoreline (die perimeter x `phy_shoreline_fraction` x split /
  the stack's edge), by the PHY area left in the "other" area and by the interposer area; bandwidth
  = min(stacks x per-stack bandwidth, memory power / energy per byte); capacity = stacks x stack.
- network: `scale_out_lanes` lanes of the scale-out link first, the rest of the network shoreline
  and of the other area carries scale-up lanes; each bandwidth bounded by its lanes and by the
  network power left for it.

Integer counts (units, stacks, lanes) are floored with a straight-through estimator: the value is
the whole count, the gradient that of the un-floored count (`relaxed=True` returns un-floored counts,
whose exact gradient that is). The supply is found by Newton's method without gradient, then one
more Newton step on the power equation carries the implicit-function gradient dV/d(inputs).

Modules: inputs `analytical.chip.spec`, global constants (each sourced) `analytical.chip.constants`,
energy and power of the silicon `analytical.chip.silicon` (shared with presets), supply / clock / power
`analytical.chip.power`, the derivation here.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from functools import lru_cache

import torch

from analytical.chip import silicon
from analytical.chip.constants import DEFAULT_DERIVATION, DerivationConstants
from analytical.chip.power import clock_ratio, compute_power_w, operating_vdd_v
from analytical.chip.spec import (
    CHIP_CATEGORY_CODES,
    CHIP_FIELDS,
    DTYPE,
    ChipBatch,
    ChipSpec,
    chip_from_dict,
    stack_chips,
    supply_range_v,
)
from analytical.chip.technology import LINK_TECHS, LOGIC_NODES, MEMORY_TECHS
from analytical.codes import Reason
from analytical.specs import AcceleratorSpec

__all__ = ["CHIP_CATEGORY_CODES", "CHIP_FIELDS", "DEFAULT_DERIVATION", "ChipBatch", "ChipSpec", "DerivationConstants",
           "DerivedChips", "accelerator_spec", "chip_from_dict", "clock_ratio", "compute_power_w", "derive",
           "derive_chip", "operating_vdd_v", "stack_chips", "supply_range_v"]

MIB = 2.0**20

USAGE_PARTS = {
    "area_mm2": ("compute", "sram", "memory_phy", "network_phy", "other_unused"),
    "power_w": ("compute_dynamic", "sram_dynamic", "static", "memory", "network"),
    "shoreline_mm": ("memory", "network", "unused"),
}


@dataclass
class DerivedChips:
    """Output of `derive` for a batch of chips; every tensor is `(batch,)`.

    `accelerator`: the accelerator fields of `DesignBatch` (SI units), energy fields included.
    `reason`: int64 codes of `analytical.step.feasibility.Reason` (0 = the chip can be built).
    `operating`: vdd_v, clock_hz, units_on_die, hbm_stacks, scale_up_lanes, scale_out_lanes.
    `usage`: {"area_mm2" | "power_w" | "shoreline_mm": {part: (batch,)}} (power at peak activity);
    budgets in `usage["budget"]`: die_area_mm2, power_w, shoreline_mm.
    """

    accelerator: dict[str, torch.Tensor]
    reason: torch.Tensor
    operating: dict[str, torch.Tensor]
    usage: dict[str, dict[str, torch.Tensor]] = field(default_factory=dict)

    @property
    def feasible(self) -> torch.Tensor:
        return self.reason == 0

    def row(self, i: int) -> dict:
        """Plain-Python record of chip i (for reports and JSON)."""
        return {"feasible": bool(self.reason[i] == 0), "reason": Reason(int(self.reason[i])).name.lower(),
                "accelerator": {k: float(v[i]) for k, v in self.accelerator.items()},
                "operating": {k: float(v[i]) for k, v in self.operating.items()},
                "usage": {g: {k: float(v[i]) for k, v in parts.items()} for g, parts in self.usage.items()}}


# ---- technology tables as per-code tensors ----------------------------------------------------------

@lru_cache(maxsize=None)
def _tables() -> dict[str, dict[str, torch.Tensor]]:
    def column(rows, name):
        return torch.tensor([getattr(row, name) for row in rows], dtype=DTYPE)

    nodes, memories, links = list(LOGIC_NODES.values()), list(MEMORY_TECHS.values()), list(LINK_TECHS.values())
    node_fields = ("fp16_mac_energy_j", "bf16_mac_energy_j", "fp8_mac_energy_j", "fp32_mac_energy_j",
                   "sram_bitcell_area_um2", "sram_read_energy_j_per_bit", "nominal_vdd_v", "threshold_v",
                   "leakage_fraction", "tensor_area_mm2_per_tflops", "reference_clock_hz")
    memory_fields = ("bw_bytes_per_s_per_stack", "capacity_bytes_per_stack", "energy_j_per_bit",
                     "footprint_area_mm2", "phy_area_mm2", "footprint_edge_mm")
    link_fields = ("gbit_per_s_per_lane", "energy_j_per_bit", "lanes_per_mm", "phy_area_mm2_per_lane")
    return {"node": {f: column(nodes, f) for f in node_fields},
            "memory": {f: column(memories, f) for f in memory_fields},
            "link": {f: column(links, f) for f in link_fields}}


@lru_cache(maxsize=None)
def _matrix(table: str) -> tuple[tuple[str, ...], torch.Tensor]:
    columns = _tables()[table]
    return tuple(columns), torch.stack(list(columns.values()))  # columns x rows


def _lookup(table: str, codes: torch.Tensor) -> dict[str, torch.Tensor]:
    """The table's columns at each code, `{column: (batch,)}` (one gather for all columns)."""
    names, matrix = _matrix(table)
    last = matrix.shape[1] - 1
    if codes.stride(0) == 0 and codes.numel() > 0:  # one code for the whole batch (an expanded template)
        column = matrix[:, int(codes[0].clamp(0, last))]
        return {k: column[i].expand(codes.shape) for i, k in enumerate(names)}
    rows = torch.index_select(matrix, 1, codes.long().clamp(0, last))  # columns x batch, contiguous
    return {k: rows[i] for i, k in enumerate(names)}


def _count(x: torch.Tensor, relaxed: bool) -> torch.Tensor:
    """Whole count of x >= 0 (straight-through gradient), or x itself when relaxed."""
    x = torch.clamp_min(x, 0.0)
    return x if relaxed else x + (torch.floor(x) - x).detach()


# ---- the derivation ---------------------------------------------------------------------------------

def derive(chips: ChipBatch, constants: DerivationConstants = DEFAULT_DERIVATION,
           relaxed: bool = False) -> DerivedChips:
    """Derive `chips.batch_size` accelerators. Infeasible chips get a reason and finite fields."""
    c = constants
    node, mem = _lookup("node", chips.node), _lookup("memory", chips.memory)
    up, out = _lookup("link", chips.scale_up_link), _lookup("link", chips.scale_out_link)
    area, power = chips.die_area_mm2, chips.power_budget_w
    area_compute = area * chips.fraction("area_compute_fraction")
    area_sram = area * chips.fraction("area_sram_fraction")
    area_other = area * chips.fraction("area_other_fraction")
    fpc = chips.flops_per_cycle_per_unit
    f_ref, vn, vt = node["reference_clock_hz"], node["nominal_vdd_v"], node["threshold_v"]

    # compute units and SRAM
    unit_area = node["tensor_area_mm2_per_tflops"] * fpc * f_ref / 1e12
    units_on_die = _count(area_compute / unit_area, relaxed)
    units = _count(area_compute / unit_area * c.enabled_unit_fraction, relaxed)
    safe_units = torch.clamp_min(units, 1.0)
    sram_bytes = area_sram * 1e6 * c.sram_area_efficiency / node["sram_bitcell_area_um2"] / 8.0
    sram_bytes_per_cycle = torch.minimum(c.sram_bytes_per_cycle_per_unit * safe_units,
                                         c.sram_bytes_per_cycle_per_mib * sram_bytes / MIB)
    # the silicon model presets use too (analytical.chip.silicon), at nominal V and the reference clock
    sram_energy_nominal_j_per_byte = silicon.sram_energy_j_per_byte(node["sram_read_energy_j_per_bit"], sram_bytes)
    units_dynamic_nominal_w = safe_units * fpc * f_ref * silicon.flop_energy_j(node["fp16_mac_energy_j"])
    sram_dynamic_nominal_w = (safe_units * fpc * f_ref * silicon.sram_bytes_per_flop(chips.tile_m, chips.tile_n)
                              * sram_energy_nominal_j_per_byte)
    leakage_nominal_w = silicon.leakage_power_w(units_dynamic_nominal_w, node["leakage_fraction"])
    compute_budget_w = power * chips.fraction("power_compute_fraction")
    vdd, compute_fits = operating_vdd_v(compute_budget_w, chips.vdd_v, units_dynamic_nominal_w + sram_dynamic_nominal_w,
                                        leakage_nominal_w, vt, vn, c)
    v2 = (vdd / vn) * (vdd / vn)
    clock_hz = f_ref * clock_ratio(vdd, vt, vn, c.alpha)
    peak_fp16 = safe_units * fpc * clock_hz
    static_w = silicon.leakage_power_w(units_dynamic_nominal_w, node["leakage_fraction"], vdd / vn)

    # memory stacks
    shoreline = 4.0 * torch.sqrt(area) * c.phy_shoreline_fraction
    shore_memory = shoreline * chips.fraction("shoreline_memory_fraction")
    shore_network = shoreline * chips.fraction("shoreline_network_fraction")
    stacks_by_package = (chips.interposer_area_mm2 - area) / (mem["footprint_area_mm2"] * c.stack_keepout_factor)
    stacks_fit = torch.minimum(torch.minimum(shore_memory / mem["footprint_edge_mm"], area_other / mem["phy_area_mm2"]),
                               stacks_by_package)
    stacks = _count(stacks_fit, relaxed)
    memory_power_w = power * chips.fraction("power_memory_fraction")
    hbm_energy_j_per_byte = 8.0 * mem["energy_j_per_bit"]
    hbm_bw = torch.minimum(stacks * mem["bw_bytes_per_s_per_stack"], memory_power_w / hbm_energy_j_per_byte)

    # network lanes: scale-out first, scale-up from what is left of the shoreline and the other area
    out_lanes = chips.scale_out_lanes
    network_power_w = power * chips.fraction("power_network_fraction")
    out_energy_j_per_byte, up_energy_j_per_byte = 8.0 * out["energy_j_per_bit"], 8.0 * up["energy_j_per_bit"]
    out_lane_bytes_per_s = out["gbit_per_s_per_lane"] * 1e9 / 8.0
    up_lane_bytes_per_s = up["gbit_per_s_per_lane"] * 1e9 / 8.0
    out_shore = out_lanes / out["lanes_per_mm"]
    area_left = area_other - stacks * mem["phy_area_mm2"] - out_lanes * out["phy_area_mm2_per_lane"]
    up_lanes = _count(torch.minimum((shore_network - out_shore) * up["lanes_per_mm"],
                                    area_left / up["phy_area_mm2_per_lane"]), relaxed)
    out_bw = torch.minimum(out_lanes * out_lane_bytes_per_s, network_power_w / out_energy_j_per_byte)
    up_power_w = torch.clamp_min(network_power_w - out_bw * out_energy_j_per_byte, 0.0)
    up_bw = torch.minimum(up_lanes * up_lane_bytes_per_s, up_power_w / up_energy_j_per_byte)

    # feasibility: the first rule broken is the reason
    checks = [
        (Reason.PACKAGE_AREA_EXCEEDED, (area <= c.reticle_area_mm2) & (area < chips.interposer_area_mm2)),
        (Reason.NO_COMPUTE_UNIT, units >= 1),
        (Reason.COMPUTE_POWER_TOO_LOW, compute_fits),
        (Reason.NO_MEMORY_STACK, stacks >= 1),
        (Reason.SHORELINE_EXCEEDED, up_lanes >= 1),
        (Reason.NETWORK_POWER_TOO_LOW, out_lanes * out_lane_bytes_per_s * out_energy_j_per_byte
         <= network_power_w * (1.0 + 1e-9)),
    ]
    reason = torch.zeros(area.shape, dtype=torch.int64)
    for code, holds in reversed(checks):
        reason = torch.where(holds, reason, torch.full_like(reason, int(code)))

    fp8 = chips.fp8
    flop_energy = lambda mac: silicon.flop_energy_j(mac, vdd / vn)  # noqa: E731 (J/FLOP at the supply)
    accelerator = {
        "peak_fp32_flops_per_s": peak_fp16 * c.fp32_over_fp16,
        "peak_tf32_flops_per_s": peak_fp16 * c.tf32_over_fp16,
        "peak_fp16_flops_per_s": peak_fp16,
        "peak_bf16_flops_per_s": peak_fp16,
        "peak_fp8_flops_per_s": peak_fp16 * c.fp8_over_fp16 * fp8,
        "peak_fp4_flops_per_s": torch.zeros_like(peak_fp16),  # derived chips have no fp4 datapath (yet)
        "compute_units": safe_units,
        "peak_exp_per_s": safe_units * c.sfu_exp_per_cycle_per_unit * clock_hz,
        "sram_bytes": torch.clamp_min(sram_bytes, 1.0),
        "sram_bw_bytes_per_s": torch.clamp_min(sram_bytes_per_cycle * clock_hz, 1e6),
        "hbm_bytes": stacks * mem["capacity_bytes_per_stack"],
        "hbm_bw_bytes_per_s": torch.clamp_min(hbm_bw, 1e6),
        "scale_up_bw_bytes_per_s": torch.clamp_min(up_bw, 1e6),
        "scale_out_bw_bytes_per_s": torch.clamp_min(out_bw, 0.0),
        "kernel_launch_s": chips.kernel_launch_s,
        "tile_m": chips.tile_m,
        "tile_n": chips.tile_n,
        "tdp_w": power,
        "flop_energy_fp32_j": flop_energy(node["fp32_mac_energy_j"]),
        # tf32 runs on the fp16 datapath at half rate: twice the fp16 energy per FLOP (technology.py)
        "flop_energy_tf32_j": flop_energy(2.0 * node["fp16_mac_energy_j"]),
        "flop_energy_fp16_j": flop_energy(node["fp16_mac_energy_j"]),
        "flop_energy_bf16_j": flop_energy(node["bf16_mac_energy_j"]),
        "flop_energy_fp8_j": flop_energy(node["fp8_mac_energy_j"]),
        "flop_energy_fp4_j": flop_energy(0.5 * node["fp8_mac_energy_j"]),  # technology.py: fp4 = fp8 / 2
        "sram_energy_j_per_byte": silicon.sram_energy_j_per_byte(node["sram_read_energy_j_per_bit"], sram_bytes,
                                                                 vdd / vn),
        "hbm_energy_j_per_byte": hbm_energy_j_per_byte,
        "scale_up_energy_j_per_byte": up_energy_j_per_byte,
        "scale_out_energy_j_per_byte": out_energy_j_per_byte,
        "static_power_w": static_w,
    }
    clock_scale = v2 * clock_hz / f_ref
    memory_phy_mm2 = stacks * mem["phy_area_mm2"]
    network_phy_mm2 = out_lanes * out["phy_area_mm2_per_lane"] + up_lanes * up["phy_area_mm2_per_lane"]
    shore_used_memory = stacks * mem["footprint_edge_mm"]
    shore_used_network = out_shore + up_lanes / up["lanes_per_mm"]
    usage = {
        "area_mm2": {"compute": units_on_die * unit_area, "sram": area_sram, "memory_phy": memory_phy_mm2,
                     "network_phy": network_phy_mm2,
                     "other_unused": (area_other - memory_phy_mm2 - network_phy_mm2
                                      + area_compute - units_on_die * unit_area)},
        "power_w": {"compute_dynamic": units_dynamic_nominal_w * clock_scale,
                    "sram_dynamic": sram_dynamic_nominal_w * clock_scale, "static": static_w,
                    "memory": hbm_bw * hbm_energy_j_per_byte,
                    "network": out_bw * out_energy_j_per_byte + up_bw * up_energy_j_per_byte},
        "shoreline_mm": {"memory": shore_used_memory, "network": shore_used_network,
                         "unused": shoreline - shore_used_memory - shore_used_network},
        "budget": {"die_area_mm2": area, "power_w": power, "shoreline_mm": shoreline,
                   "compute_power_w": compute_budget_w, "memory_power_w": memory_power_w,
                   "network_power_w": network_power_w},
    }
    operating = {"vdd_v": vdd, "clock_hz": clock_hz, "units_on_die": units_on_die, "hbm_stacks": stacks,
                 "scale_up_lanes": up_lanes, "scale_out_lanes": out_lanes.expand(area.shape)}
    return DerivedChips(accelerator=accelerator, reason=reason, operating=operating, usage=usage)


def derive_chip(chip: ChipSpec, constants: DerivationConstants = DEFAULT_DERIVATION) -> DerivedChips:
    """Derive one validated `ChipSpec` (a batch of one)."""
    return derive(stack_chips([chip]), constants)


def accelerator_spec(derived: DerivedChips, i: int = 0, name: str = "derived",
                     chip: ChipSpec | None = None) -> AcceleratorSpec:
    """Design `i` of a derivation as an `AcceleratorSpec` (human units) for reports and
    `single_design`; `chip` (its `ChipSpec`) names its technologies. Energy fields are set where
    `AcceleratorSpec` has them (same names). Not validated: an infeasible chip converts too (check
    `derived.reason`)."""
    a = {k: float(v[i]) for k, v in derived.accelerator.items()}
    values = dict(
        name=name, peak_tflops_fp32=a["peak_fp32_flops_per_s"] / 1e12,
        peak_tflops_tf32=a["peak_tf32_flops_per_s"] / 1e12,
        peak_tflops_fp16=a["peak_fp16_flops_per_s"] / 1e12, peak_tflops_bf16=a["peak_bf16_flops_per_s"] / 1e12,
        peak_tflops_fp8=a["peak_fp8_flops_per_s"] / 1e12, peak_tflops_fp4=a["peak_fp4_flops_per_s"] / 1e12,
        compute_units=int(round(a["compute_units"])), peak_tera_exp_per_s=a["peak_exp_per_s"] / 1e12,
        sram_mib=a["sram_bytes"] / MIB, sram_bw_tb_per_s=a["sram_bw_bytes_per_s"] / 1e12,
        hbm_gib=a["hbm_bytes"] / 2.0**30, hbm_bw_gb_per_s=a["hbm_bw_bytes_per_s"] / 1e9,
        scale_up_bw_gb_per_s=a["scale_up_bw_bytes_per_s"] / 1e9,
        scale_out_gbit_per_s=a["scale_out_bw_bytes_per_s"] * 8 / 1e9,
        kernel_launch_us=a["kernel_launch_s"] * 1e6, tile_m=int(round(a["tile_m"])), tile_n=int(round(a["tile_n"])),
        tdp_w=a["tdp_w"])
    known = {f.name for f in fields(AcceleratorSpec)}
    values.update({k: v for k, v in a.items() if k in known and k not in values})
    if chip is not None:
        technologies = {"logic_node": chip.node, "memory_technology": chip.memory,
                        "scale_up_link": chip.scale_up_link,
                        "scale_out_link": chip.scale_out_link}
        values.update({k: v for k, v in technologies.items() if k in known})
    return AcceleratorSpec(**values)
