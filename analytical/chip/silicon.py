"""Energy and power of logic silicon: ONE model for presets (`analytical.step.energy`) and derived chips
(`analytical.chip.derive`), so that both price a FLOP, a last-level SRAM byte and static power the same way.
The only difference between the two paths is the supply: a derivation solves it from the power budget
(`analytical.chip.power`), a preset runs at its node's nominal supply (`voltage_ratio` = 1).

    flop energy      = COMPUTE_ENERGY_OVERHEAD x MAC datapath energy / 2 x (V / Vn)^2        (C V^2)
    SRAM J per byte  = 8 x the 8 KB bank's J per bit x sqrt(size / 8 KB) x (V / Vn)^2
    static power     = leakage_fraction / (1 - leakage_fraction) x the compute units' dynamic power at
                       peak, nominal V and clock x (V / Vn)^LEAKAGE_VOLTAGE_EXPONENT

Static power follows the silicon, not the budget: leakage is a current through every transistor, so it
scales with the compute units on the die (their nominal dynamic power at peak is the measure of "how
much silicon runs") and with V^3, and it does not change when the same die gets a higher power cap. The
alternative, `leakage_fraction x tdp_w`, would add leakage to a chip whose power cap is raised and take
it from one whose cap is lowered, and it gives a derivation no way to trade units for voltage. The
node's `leakage_fraction` keeps its meaning: the static share of the compute units' power running flat
out at nominal V.

Every function takes floats or `(batch,)` tensors alike.
"""

from __future__ import annotations

import math

# Energy per FLOP of a compute unit over the table's datapath-only MAC energy / 2: operand delivery
# (register files, shared memory, operand collectors), instruction issue, clock tree and wires around
# the datapath (Horowitz ISSCC 2014: "data movement, not arithmetic"). FITTED on the two anchors both
# paths use, an A100 SXM (N7) and an H100 SXM (N4) running at their datasheet dense fp16/bf16 peak at
# nominal V, with the compute partition (units + last-level SRAM + leakage) drawing its share of the TDP:
#
#     P(k) = peak x k x mac / 2 / (1 - leakage_fraction) + peak x (1/tile_m + 1/tile_n) x sram J/B
#          = 0.805 x TDP   (the compute split of conf/chip/a100-n7.yaml and h100-n4.yaml: HBM takes
#                           15.5 %, 2039 GB/s x 3.9 pJ/bit = 64 W on A100; the network 4 %)
#
#   A100: peak 312e12 FLOP/s, mac 0.199 pJ (N7), leakage 0.25, 40 MiB L2 at 11.85 pJ/B, 128x128
#         tiles (0.0156 B/FLOP): P = 41.39 W x k + 57.8 W = 322 W  -> k = 6.38
#   H100: peak 989.4e12 FLOP/s, mac 0.131 pJ (N4), leakage 0.28, 50 MiB L2 at 11.71 pJ/B, 128x256
#         tiles (0.0117 B/FLOP): P = 90.01 W x k + 135.8 W = 563.5 W -> k = 4.75
#
# One k for both: the value whose log power residuals balance, 5.53, rounded to 5.5. Residuals at 5.5:
# A100 draws 285 W at peak (-11.4 % of its 322 W compute budget), H100 631 W (+12.0 % of 563.5 W); a
# derivation absorbs them in its supply (A100 runs above nominal V, H100 below) and its unit count.
# tests/analytical/chip/test_silicon.py re-derives the fit and its residuals.
COMPUTE_ENERGY_OVERHEAD = 5.5
# Share of that compute power which a device draws whenever its kernels run, whatever the share of
# peak FLOP/s they reach (clock tree, instruction issue, register files and operand delivery keep
# switching while warps stall on memory, on a collective or in a memory-bound kernel); the rest is
# drawn per FLOP executed. Running flat out the two add up to the same power, so the TDP fit above
# holds. FITTED on one measured run (experiments/benchmarks/bench_energy.py --fit: MLPerf Training
# v4.0 GPT-3 175B on 512 H100, node power from the submission's power logs): the fit reaches its
# bound, 1.0, still 11 % below the measurement, i.e. a training GPU draws its compute partition's
# full power whenever it runs kernels. 0 would price only FLOPs: about half the measured draw.
CLOCKED_SHARE = 1.0
# Leakage power ~ V^n: subthreshold current rises ~V^2 through DIBL over the operating range, times V.
# ESTIMATE.
LEAKAGE_VOLTAGE_EXPONENT = 3.0
# Horowitz ISSCC 2014, 45 nm: 64-bit reads cost 10 pJ from an 8 KB SRAM, 20 pJ from 32 KB, 100 pJ from
# 1 MB: energy per bit grows as sqrt(array size) (wires), from the 8 KB bank of
# `LogicNode.sram_read_energy_j_per_bit`.
SRAM_BANK_BYTES = 8192.0


def _sqrt(x):
    return x.sqrt() if hasattr(x, "sqrt") else math.sqrt(x)


def _max(x, floor: float):
    return x.clamp_min(floor) if hasattr(x, "clamp_min") else max(x, floor)


def integer_power(x, exponent: float):
    """x ** exponent, by multiplication for the integer exponents 2 and 3 (cheaper than pow)."""
    if exponent == 2.0:
        return x * x
    if exponent == 3.0:
        return x * x * x
    return x ** exponent


def flop_energy_j(mac_energy_j, voltage_ratio=1.0):
    """J per FLOP of a compute unit: half a MAC of the datapath x the overhead, at V = ratio x nominal."""
    return COMPUTE_ENERGY_OVERHEAD * mac_energy_j / 2.0 * voltage_ratio * voltage_ratio


def sram_energy_j_per_byte(read_energy_j_per_bit, sram_bytes, voltage_ratio=1.0):
    """J per byte read from a last-level SRAM of `sram_bytes`: the 8 KB bank's energy x sqrt(size / 8 KB)."""
    return (8.0 * read_energy_j_per_bit * _sqrt(_max(sram_bytes, SRAM_BANK_BYTES) / SRAM_BANK_BYTES)
            * voltage_ratio * voltage_ratio)


def sram_bytes_per_flop(tile_m, tile_n):
    """Bytes a tiled 16-bit GEMM streams through the last-level SRAM per FLOP: 1/tile_m + 1/tile_n
    (`analytical.step.kernels.gemm_sram_bytes`: 2 B x m n k (1/tm + 1/tn) for 2 m n k FLOPs)."""
    return 1.0 / tile_m + 1.0 / tile_n


def leakage_power_w(units_dynamic_nominal_w, leakage_fraction, voltage_ratio=1.0):
    """Static power of compute units whose dynamic power at peak, nominal V and clock is
    `units_dynamic_nominal_w`: the node's static share at nominal V, times (V / Vn)^3."""
    return (units_dynamic_nominal_w * leakage_fraction / (1.0 - leakage_fraction)
            * integer_power(voltage_ratio, LEAKAGE_VOLTAGE_EXPONENT))


def compute_power_at_peak_w(peak_16bit_flops_per_s, fp16_mac_energy_j, leakage_fraction, sram_read_energy_j_per_bit,
                            sram_bytes, tile_m, tile_n, voltage_ratio=1.0, clock_ratio=1.0):
    """Power of the compute partition (units, last-level SRAM, leakage) running a 16-bit GEMM at the
    peak rate `peak_16bit_flops_per_s` x `clock_ratio`, at V = `voltage_ratio` x nominal. The peak is
    the rate at nominal V (a preset's datasheet peak; a derivation's units x FLOP/clk x reference clock)."""
    flops = peak_16bit_flops_per_s * clock_ratio
    units = flops * flop_energy_j(fp16_mac_energy_j, voltage_ratio)
    sram = flops * sram_bytes_per_flop(tile_m, tile_n) * sram_energy_j_per_byte(sram_read_energy_j_per_bit, sram_bytes,
                                                                                 voltage_ratio)
    leakage = leakage_power_w(peak_16bit_flops_per_s * flop_energy_j(fp16_mac_energy_j), leakage_fraction,
                              voltage_ratio)
    return units + sram + leakage
