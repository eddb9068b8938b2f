"""A preset and the chip derived from the same technology and budgets, on the same training designs.

    python experiments/benchmarks/bench_preset_vs_derived.py

Both paths price silicon with `analytical.chip.silicon` (one operand-delivery overhead per FLOP, one SRAM and
one leakage model); they differ by the supply the derivation solves (J/FLOP ~ V^2, leakage ~ V^3) and by
the derived unit count, SRAM size and bandwidths. For each case the fastest feasible mapping of the preset
(`analytical.search.best_mappings`) is evaluated three ways: the preset; the preset with the derived
chip's energy fields only (same step time: the energy model alone); the whole derived chip. Prints a
table, then ONE JSON line (the last line of stdout).
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
import yaml

from analytical import evaluate, single_design
from analytical.chip.derive import derive_chip
from analytical.chip.spec import chip_from_dict
from analytical.search import best_mappings
from deepflow.presets import load_preset

CHIPS = Path(__file__).resolve().parents[2] / "conf" / "chip"
# (hardware preset, chip config, system preset, model, devices, global batch)
CASES = [
    ("a100-sxm-80gb", "a100-n7", "dgx-a100-superpod", "llama3-70b", 1024, 1024),
    ("h100-sxm-80gb", "h100-n4", "dgx-h100-superpod", "llama3-70b", 1024, 1024),
    ("h100-sxm-80gb", "h100-n4", "dgx-h100-superpod", "llama2-13b", 8, 128),
]
ENERGY_FIELDS = ("flop_energy_bf16_j", "sram_energy_j_per_byte", "static_power_w")


def compare_case(hardware: str, chip_name: str, system_name: str, model_name: str, devices: int,
                 batch: int) -> dict:
    accelerator = load_preset("hardware", hardware)
    system = load_preset("system", system_name, num_devices=devices)
    model = load_preset("model", model_name)
    mapping = best_mappings(accelerator, system, model, batch, top_k=1, precision="bf16").mappings[0]
    design = single_design(accelerator, system, model, mapping)
    derived = derive_chip(chip_from_dict(yaml.safe_load((CHIPS / f"{chip_name}.yaml").read_text())))
    fields = {k: v for k, v in derived.accelerator.items() if k in design.fields()}
    energy_only = {k: v for k, v in fields.items() if "energy" in k or k == "static_power_w"}
    out = {"case": f"{hardware} vs {chip_name}, {model_name} on {devices}",
           "mapping": f"tp={mapping.tp} pp={mapping.pp} dp={mapping.dp} mb={mapping.micro_batch_size}",
           "derived_vdd_v": float(derived.operating["vdd_v"][0])}
    for label, d in (("preset", design), ("derived_energy_fields", design.replace(**energy_only)),
                     ("derived_chip", design.replace(**fields))):
        r = evaluate(d)
        out[label] = {"feasible": bool(r.feasible[0]), "step_time_s": float(r.step_time_s[0]),
                      "avg_power_w": float(r.avg_power_w[0]), "energy_per_token_j": float(r.energy_per_token_j[0]),
                      **{k: float(getattr(d, k)[0]) for k in ENERGY_FIELDS}}
    out["energy_per_token_ratio"] = out["derived_chip"]["energy_per_token_j"] / out["preset"]["energy_per_token_j"]
    return out


def main() -> None:
    torch.set_num_threads(2)
    rows = [compare_case(*case) for case in CASES]
    print(f"{'case':44s} {'path':22s} {'step s':>8s} {'power W':>8s} {'J/token':>8s} {'pJ/FLOP':>8s} "
          f"{'pJ/B L2':>8s} {'static W':>8s}")
    for row in rows:
        for label in ("preset", "derived_energy_fields", "derived_chip"):
            r = row[label]
            print(f"{row['case']:44s} {label:22s} {r['step_time_s']:8.3f} {r['avg_power_w']:8.1f} "
                  f"{r['energy_per_token_j']:8.4f} {r['flop_energy_bf16_j'] * 1e12:8.4f} "
                  f"{r['sram_energy_j_per_byte'] * 1e12:8.3f} {r['static_power_w']:8.1f}")
        print(f"{'':44s} derived chip / preset energy per token: {row['energy_per_token_ratio']:.3f} "
              f"(derived supply {row['derived_vdd_v']:.3f} V; {row['mapping']})")
    print(json.dumps({"rows": rows, "energy_per_token_ratios": {r["case"]: round(r["energy_per_token_ratio"], 4)
                                                                 for r in rows}}))


if __name__ == "__main__":
    main()
