"""Fit the global efficiency constants on all sources but one, report the error on the one left out.

Run by hand: `python experiments/validation/leave_one_source_out.py`. Sources: Narayanan et al. 2021,
Korthikanti et al. 2022 (published_runs.csv) and vTrain (vtrain_ground_truth_multi.csv).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from analytical import DEFAULT_EFFICIENCY
from deepflow.validation import Rows, fit_efficiency, read_rows, report

HERE = Path(__file__).resolve().parent


def concat(parts: list[Rows]) -> Rows:
    return Rows(sum((p.ids for p in parts), []), sum((p.groups for p in parts), []),
                sum((p.sources for p in parts), []), sum((p.specs for p in parts), []),
                np.concatenate([p.measured_s for p in parts]))


def main() -> None:
    published = read_rows(str(HERE / "published_runs.csv"))
    sources = {
        "narayanan21": published.subset(np.array([s.startswith("Narayanan") for s in published.sources])),
        "korthikanti22": published.subset(np.array([s.startswith("Korthikanti") for s in published.sources])),
        "vtrain": read_rows(str(HERE / "vtrain_ground_truth_multi.csv")),
    }
    summary = {}
    print(f"{'constants':28s} {'evaluated on':14s} {'n':>4s} {'mean|err|':>10s} {'max|err|':>9s} {'min tau':>8s}")
    for left_out in [None, *sources]:
        if left_out is None:
            eff, label = DEFAULT_EFFICIENCY, "shipped defaults"
        else:
            eff = fit_efficiency(concat([rows for name, rows in sources.items() if name != left_out]))
            label = f"fit without {left_out}"
        for name, rows in sources.items():
            s = report(rows, eff)["summary"]
            tag = "held out" if name == left_out else ""
            print(f"{label:28s} {name:14s} {s['n']:4d} {s['mape']:10.1%} {s['max_abs_error']:9.1%} "
                  f"{s.get('min_kendall_tau', float('nan')):8.3f} {tag}")
            summary[f"{label}|{name}"] = {k: s[k] for k in ("n", "mape", "max_abs_error")} | {
                "min_kendall_tau": s.get("min_kendall_tau")}
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
