"""Held-out error of the global efficiency constants: leave one source out, leave one generation out.

Run by hand: `python experiments/validation/leave_one_source_out.py` (add `--json` for one JSON
line only; `--fields gemm_peak_fraction` fits that constant alone in every held-out fit: a quick run). Two tables:

1. leave one source out: fit on all sources but one (Narayanan et al. 2021 and Korthikanti et al.
   2022 from published_runs.csv, vTrain), report the error on the one left out;
2. leave one generation out (the modern_runs.csv rows with the older sources): fit on Ampere rows
   only and report Hopper and Blackwell; fit on Ampere + Hopper and report Blackwell. A row's
   generation comes from its accelerator's spec (`deepflow.validation.generation`): constants may
   depend on a generation only through those spec fields, never on a row or a source. The Ampere
   rows run no narrow format, so their fit takes the narrow-format GEMM fraction equal to the 16-bit
   one (`without_unfitted_narrow_fraction`) rather than keep the shipped value, fitted on every row;
   nor do they hold an MoE run, so their fit leaves the MoE layers' host floor out (`moe_layer_host_s`
   0: `without_unfitted_moe_host_time`).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path

import numpy as np

from analytical import DEFAULT_EFFICIENCY, Efficiency
from analytical.codes import PRECISIONS
from deepflow.calibration import FIT_FIELDS, fit_efficiency
from deepflow.validation import GENERATIONS, Rows, concat, generation, read_rows, report

HERE = Path(__file__).resolve().parent
HEADER = f"{'constants':34s} {'evaluated on':16s} {'n':>4s} {'mean|err|':>10s} {'max|err|':>9s} {'min tau':>8s}"


def _line(label: str, name: str, s: dict, held_out: bool) -> str:
    return (f"{label:34s} {name:16s} {s['n']:4d} {s['mape']:10.1%} {s['max_abs_error']:9.1%} "
            f"{s.get('min_kendall_tau') or float('nan'):8.3f} {'held out' if held_out else ''}")


def _summary(s: dict) -> dict:
    return {k: s.get(k) for k in ("n", "mape", "max_abs_error", "min_kendall_tau", "infeasible_rows")}


def leave_one_source_out(quiet: bool, fields: tuple[str, ...] = FIT_FIELDS) -> dict:
    published = read_rows(str(HERE / "published_runs.csv"))
    sources = {
        "narayanan21": published.subset(np.array([s.startswith("Narayanan") for s in published.sources])),
        "korthikanti22": published.subset(np.array([s.startswith("Korthikanti") for s in published.sources])),
        "vtrain": read_rows(str(HERE / "vtrain_ground_truth_multi.csv")),
    }
    out = {}
    for left_out in [None, *sources]:
        if left_out is None:
            eff, label = DEFAULT_EFFICIENCY, "shipped defaults"
        else:
            eff = fit_efficiency(concat([rows for name, rows in sources.items() if name != left_out]), fields=fields)
            label = f"fit without {left_out}"
        for name, rows in sources.items():
            s = report(rows, eff)["summary"]
            if not quiet:
                print(_line(label, name, s, name == left_out))
            out[f"{label}|{name}"] = _summary(s)
    return out


def all_rows() -> Rows:
    return concat([read_rows(str(HERE / f)) for f in ("published_runs.csv", "vtrain_ground_truth_multi.csv",
                                                      "modern_runs.csv")])


def without_unfitted_narrow_fraction(train: Rows, eff: Efficiency) -> Efficiency:
    """`eff` fitted on `train`, with the narrow-format GEMM fraction set to the fitted 16-bit one where
    no row of `train` runs a narrow format (fp8, mxfp8, nvfp4): the fit cannot move it then, and the
    value it would keep (the shipped default's) was fitted on the very rows held out."""
    if any(PRECISIONS.index(spec[3].precision) >= PRECISIONS.index("fp8") for spec in train.specs):
        return eff
    return dataclasses.replace(eff, narrow_gemm_peak_fraction=eff.gemm_peak_fraction)


def without_unfitted_moe_host_time(train: Rows, eff: Efficiency) -> Efficiency:
    """`eff` with no MoE host floor (`moe_layer_host_s` 0) where no row of `train` is an MoE run: the fit
    cannot move it then, and the shipped value was fitted on the very rows held out."""
    if any(spec[2].num_experts > 1 for spec in train.specs):
        return eff
    return dataclasses.replace(eff, moe_layer_host_s=0.0)


def leave_one_generation_out(quiet: bool, fields: tuple[str, ...] = FIT_FIELDS) -> dict:
    """Fit on the older generations' rows (all visible files), report the newer ones."""
    rows = all_rows()
    gens = np.array([generation(spec[0]) for spec in rows.specs])
    by_gen = {g: rows.subset(gens == g) for g in GENERATIONS if (gens == g).any()}
    out = {}
    for fit_on in (GENERATIONS[:1], GENERATIONS[:2]):
        train = rows.subset(np.isin(gens, fit_on))
        fitted = fit_efficiency(train, fields=fields)
        eff = without_unfitted_moe_host_time(train, without_unfitted_narrow_fraction(train, fitted))
        label = "fit on " + " + ".join(fit_on)
        for g, part in by_gen.items():
            s = report(part, eff)["summary"]
            if not quiet:
                print(_line(label, g, s, g not in fit_on))
            out[f"{label}|{g}"] = _summary(s) | {"held_out": g not in fit_on}
    for g, part in by_gen.items():  # the shipped constants, for comparison
        s = report(part, DEFAULT_EFFICIENCY)["summary"]
        if not quiet:
            print(_line("shipped defaults", g, s, False))
        out[f"shipped defaults|{g}"] = _summary(s)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print only the final JSON line")
    parser.add_argument("--fit-shipped", action="store_true",
                        help="fit the constants on every visible row (how the shipped defaults were made) and print them")
    parser.add_argument("--fields", default=None,
                        help="fit only these comma-separated constants, the others held at the shipped values (with "
                             "--fit-shipped, the last refit: flash_attention_fraction,narrow_gemm_peak_fraction; "
                             "without, in every held-out fit: a quick run)")
    args = parser.parse_args()
    fields = tuple(args.fields.split(",")) if args.fields else FIT_FIELDS
    unknown = sorted(set(fields) - set(FIT_FIELDS))
    if unknown:
        parser.error(f"--fields: unknown {', '.join(unknown)}; allowed {', '.join(FIT_FIELDS)}")
    if args.fit_shipped:
        if args.fields:
            eff = fit_efficiency(all_rows(), start=DEFAULT_EFFICIENCY, fields=fields)
        else:
            eff = fit_efficiency(all_rows())
        print(json.dumps({"fitted_on_all_visible_rows": eff.as_dict()}))
        return
    if not args.json:
        print("leave one source out\n" + HEADER)
    result = {"leave_one_source_out": leave_one_source_out(args.json, fields)}
    if not args.json:
        print("\nleave one generation out\n" + HEADER)
    result["leave_one_generation_out"] = leave_one_generation_out(args.json, fields)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
