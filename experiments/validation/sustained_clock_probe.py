"""The clock a GPU sustains under its power limit, from the chip derivation's V/f curve: a probe for issue 44.

    python experiments/validation/sustained_clock_probe.py

Issue 44 asks for a step model in which a compute-bound phase whose power at full clock exceeds the limit
runs at the lower clock that fits, as silicon does. Before changing the energy model, this probe asks whether
the physics the chip derivation already holds can say *which* clock: the alpha-power law of
`analytical.chip.power.clock_ratio` (f ~ (V - Vt)^alpha / V, the node's threshold and nominal supply, the
derivation's alpha) and dynamic energy per FLOP ~ V^2, with the datasheet's peak clock at the node's nominal
supply (as the model's presets assume). A kernel that runs `r` FLOPs a clock then draws, at clock f,

    P(f) = P_idle + e_nom x (V(f) / V_nom)^2 x r x f

and it runs at min(f_max, the f where P(f) = the limit). `e_nom` (J a FLOP at nominal supply, everything the
board draws above idle: units, operand delivery, caches, HBM of the kernel) is fitted on ONE reading, the H100's
bf16 GEMM; every other loaded reading is a prediction: the same kernel on the H200 (same die, its own idle
power), the fused attention kernel on both (another FLOPs-per-clock), and the fp8 GEMM on both with the node
table's fp8 / bf16 MAC energy (`LogicNode.mac_energy_j`).

The readings are ours (`experiments/benchmarks/bench_kernels.py`: one kernel back to back for 6 s, nvidia-smi
every 100 ms; README "The kernel layer on a real GPU", table "Sustained power"): 700 W limit, 1,980 MHz the
clock's maximum on both chips. The datasheet peak (989.4 dense 16-bit TFLOP/s on both) is 540,672 FLOP a clock
at 1,830 MHz (glennklockwood.com/garden/peak-FLOPS: 528 tensor cores x 1,024 FLOP a clock x 1.83 GHz). Also
reported: the power the bf16 GEMM would draw at the datasheet clock (the energy model calibrates every chip to
reach its datasheet peak within its TDP), and what the node tables carry to an A100 (N7, 312 TFLOP/s at
1,410 MHz, 400 W) beside the one sustained A100 clock we found published: 1,305 MHz, the clock NVIDIA's HPL
Rpeak assumed sustainable at the A100's power limit (same page; fp64 tensor-core DGEMM, another datapath, so a
context line, not a check). Prints the table, then ONE JSON line.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass

from scipy.optimize import brentq

LIMIT_W = 700.0  # both chips' power limit as read by nvidia-smi (README "Sustained power")
MAX_CLOCK_MHZ = 1980.0  # both chips' maximum SM clock (same)
DATASHEET_CLOCK_MHZ = 1830.0  # the clock of the 989.4 TFLOP/s datasheet peak (module docstring)


@dataclass(frozen=True)
class Reading:
    """One sustained kernel: measured rate, board power and SM clock (nvidia-smi medians)."""

    chip: str
    kernel: str
    fmt: str  # the number format whose MAC energy prices it
    tflops: float
    power_w: float
    clock_mhz: float


# README "Sustained power" (bench_kernels.py on one H200 and one H100 SXM); attention: Llama 3 8B at 8k tokens,
# cuDNN forward + backward, the second run
READINGS = (
    Reading("H100", "bf16 GEMM 8192^3", "bf16", 672.0, 697.0, 1365.0),
    Reading("H100", "fp8 GEMM 8192^3", "fp8", 1207.0, 697.0, 1260.0),
    Reading("H100", "attention fwd+bwd", "bf16", 482.0, 692.0, 1710.0),
    Reading("H200", "bf16 GEMM 8192^3", "bf16", 657.0, 691.0, 1470.0),
    Reading("H200", "fp8 GEMM 8192^3", "fp8", 1214.0, 692.0, 1365.0),
    Reading("H200", "attention fwd+bwd", "bf16", 496.0, 692.0, 1740.0),
)
IDLE_W = {"H100": 126.0, "H200": 118.0}  # nothing running, the second run (same table)
FIT_ON = 0  # the H100 bf16 GEMM


def supply_ratio(clock_over_nominal: float, node) -> float:
    """V / V_nom at which the alpha-power law gives `clock_over_nominal` (`analytical.chip.power.clock_ratio`)."""
    import torch

    from analytical.chip.constants import DerivationConstants
    from analytical.chip.power import clock_ratio

    alpha = DerivationConstants().alpha
    vt, vn = node.threshold_v, node.nominal_vdd_v
    ratio = lambda v: float(clock_ratio(torch.tensor([v], dtype=torch.float64), vt, vn, alpha)[0])  # noqa: E731
    return brentq(lambda v: ratio(v) - clock_over_nominal, vt + 1e-6, 3.0 * vn) / vn


def power_w(clock_mhz: float, idle_w: float, e_nom_j: float, flops_per_clock: float, node,
            nominal_mhz: float = DATASHEET_CLOCK_MHZ) -> float:
    """P(f) of the module docstring."""
    v = supply_ratio(clock_mhz / nominal_mhz, node)
    return idle_w + e_nom_j * v * v * flops_per_clock * clock_mhz * 1e6


def sustained_clock_mhz(idle_w: float, e_nom_j: float, flops_per_clock: float, node, limit_w: float,
                        max_mhz: float, nominal_mhz: float = DATASHEET_CLOCK_MHZ) -> float:
    """The highest clock up to `max_mhz` whose P(f) fits `limit_w`."""
    p = lambda f: power_w(f, idle_w, e_nom_j, flops_per_clock, node, nominal_mhz) - limit_w  # noqa: E731
    if p(max_mhz) <= 0.0:
        return max_mhz
    return brentq(p, 1.0, max_mhz)


def fitted_energy_j(reading: Reading, node) -> float:
    """e_nom that puts `reading` exactly at its measured power and clock."""
    v = supply_ratio(reading.clock_mhz / DATASHEET_CLOCK_MHZ, node)
    return (reading.power_w - IDLE_W[reading.chip]) / (reading.tflops * 1e12 * v * v)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.parse_args()

    from analytical.chip.technology import logic_node
    from analytical.step.energy import static_power_w
    from deepflow.presets import load_preset

    n4 = logic_node("N4")
    fmt_scale = {f: n4.mac_energy_j(f) / n4.mac_energy_j("bf16") for f in ("bf16", "fp8")}
    e_nom = fitted_energy_j(READINGS[FIT_ON], n4)
    rows = []
    for i, r in enumerate(READINGS):
        per_clock = r.tflops * 1e12 / (r.clock_mhz * 1e6)  # a compute-bound kernel's rate scales with the clock
        e = e_nom * fmt_scale[r.fmt]
        clock = sustained_clock_mhz(IDLE_W[r.chip], e, per_clock, n4, LIMIT_W, MAX_CLOCK_MHZ)
        power = power_w(clock, IDLE_W[r.chip], e, per_clock, n4)
        rows.append({"chip": r.chip, "kernel": r.kernel, "fitted": i == FIT_ON, "clock_mhz": r.clock_mhz,
                     "predicted_clock_mhz": clock, "clock_error": clock / r.clock_mhz - 1.0, "power_w": r.power_w,
                     "predicted_power_w": power, "power_error": power / r.power_w - 1.0,
                     "implied_e_nom_pj": 1e12 * fitted_energy_j(r, n4) / fmt_scale[r.fmt]})

    print(f"e_nom fitted on the {READINGS[FIT_ON].chip} {READINGS[FIT_ON].kernel}: {e_nom * 1e12:.3f} pJ a 16-bit "
          f"FLOP at nominal supply (fp8: x {fmt_scale['fp8']:.2f}, the N4 table's MAC energies)\n")
    head = (f"{'chip':5s} {'kernel':19s} {'clock':>6s} {'predicted':>9s} {'error':>7s} {'power':>6s} "
            f"{'predicted':>9s} {'error':>7s} {'implied e_nom (bf16 pJ)':>24s}")
    print(head + "\n" + "-" * len(head))
    for r in rows:
        print(f"{r['chip']:5s} {r['kernel']:19s} {r['clock_mhz']:6.0f} {r['predicted_clock_mhz']:9.0f} "
              f"{r['clock_error']:+7.1%} {r['power_w']:6.0f} {r['predicted_power_w']:9.0f} {r['power_error']:+7.1%} "
              f"{r['implied_e_nom_pj']:24.3f}" + ("   (fitted)" if r["fitted"] else ""))
    predicted = [r for r in rows if not r["fitted"]]
    worst_clock = max(abs(r["clock_error"]) for r in predicted)
    worst_power = max(abs(r["power_error"]) for r in predicted)

    gemm = READINGS[FIT_ON]
    per_clock = gemm.tflops * 1e12 / (gemm.clock_mhz * 1e6)
    at_datasheet_w = power_w(DATASHEET_CLOCK_MHZ, IDLE_W[gemm.chip], e_nom, per_clock, n4)
    # the node tables carried to the A100: its bf16 MAC energy over N4's, the H100's FLOPs a clock over its
    # datasheet's (the GEMM's efficiency), the preset's leakage as its idle power (no reading of ours)
    n7 = logic_node("N7")
    a100 = load_preset("hardware", "a100-sxm-80gb")
    efficiency = per_clock / 540_672.0
    a100_per_clock = efficiency * a100.peak_tflops_bf16 * 1e12 / 1410e6
    a100_idle = static_power_w(n7, a100)
    a100_e = e_nom * n7.mac_energy_j("bf16") / n4.mac_energy_j("bf16")
    a100_clock = sustained_clock_mhz(a100_idle, a100_e, a100_per_clock, n7, a100.tdp_w, 1410.0, nominal_mhz=1410.0)

    print(f"\npredicted readings: clock within {worst_clock:.1%}, power within {worst_power:.1%} "
          f"({len(predicted)} readings, e_nom from one)")
    print(f"the {gemm.chip} bf16 GEMM at the datasheet clock ({DATASHEET_CLOCK_MHZ:.0f} MHz, "
          f"{per_clock * DATASHEET_CLOCK_MHZ * 1e6 / 1e12:.0f} TFLOP/s) would draw {at_datasheet_w:.0f} W, "
          f"{at_datasheet_w / LIMIT_W:.2f}x its limit")
    print(f"A100 by the node tables (N7 MAC energy x {n7.mac_energy_j('bf16') / n4.mac_energy_j('bf16'):.2f}, "
          f"idle = leakage {a100_idle:.0f} W): a bf16 GEMM sustains {a100_clock:.0f} of 1,410 MHz at "
          f"{a100.tdp_w:.0f} W (NVIDIA's HPL Rpeak: 1,305 MHz, fp64)")
    print(json.dumps({"probe": "sustained_clock", "e_nom_pj_per_flop": e_nom * 1e12, "readings": len(rows),
                      "max_abs_clock_error": worst_clock, "max_abs_power_error": worst_power,
                      "h100_gemm_at_datasheet_clock_w": at_datasheet_w, "a100_gemm_clock_mhz": a100_clock,
                      "rows": rows}))


if __name__ == "__main__":
    main()
