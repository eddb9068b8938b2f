"""Validation against published ratios rather than times: HFTA's fused-job speedups
(`experiments/validation/hfta_speedups.csv`).

A row names a model, hardware and precision presets (and optionally the accelerator's memory, as
run), a per-job batch and a fused count B, and the paper's throughput of B fused jobs relative to one
job run alone in `baseline_precision` (HFTA normalises every curve to serial fp32 at B = 1). The
prediction is B x t(one job, baseline precision) / t(B fused jobs, precision) from one batched call,
and the largest fused count that fits the accelerator's memory against the paper's largest B.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pandas as pd

from deepflow.presets import ConfigError

HFTA_REQUIRED = ("id", "source", "model", "hardware", "precision", "baseline_precision", "micro_batch_size",
                 "fused_jobs", "published_speedup")


def is_hfta(path: str) -> bool:
    """A CSV in the fused-job speedup schema (it has `published_speedup` and `fused_jobs`)."""
    try:
        columns = pd.read_csv(path, nrows=0).columns
    except (FileNotFoundError, pd.errors.EmptyDataError, pd.errors.ParserError):
        return False
    return "published_speedup" in columns and "fused_jobs" in columns


def _specs(row: pd.Series, precision: str, jobs: int) -> tuple:
    """(accelerator, one-device system, model, mapping) of a row's jobs."""
    from analytical import MappingSpec, SystemSpec
    from deepflow.presets import load_preset

    accelerator = load_preset("hardware", str(row["hardware"]))
    if "hbm_gib" in row and pd.notna(row["hbm_gib"]):
        accelerator = dataclasses.replace(accelerator, hbm_gib=float(row["hbm_gib"]))
    system = SystemSpec(name="one-device", num_devices=1, devices_per_node=1, scale_up_domain=1)
    batch = int(row["micro_batch_size"])
    mapping = MappingSpec(name="fused", dp=1, micro_batch_size=batch, global_batch_size=batch, precision=precision,
                          flash_attention=False, fused_jobs=jobs).validate()
    return accelerator, system, load_preset("model", str(row["model"])), mapping


def read_hfta(path: str) -> pd.DataFrame:
    """The rows, checked: a missing column or a value no preset or spec accepts names the row."""
    from analytical import SpecError

    frame = pd.read_csv(path)
    missing = [c for c in HFTA_REQUIRED if c not in frame.columns]
    if missing:
        raise ConfigError(f"data={path!r}: missing columns {', '.join(missing)} (the schema is in "
                          "experiments/validation/README.md)")
    for _, row in frame.iterrows():
        try:
            _specs(row, str(row["precision"]), int(row["fused_jobs"]))
            _specs(row, str(row["baseline_precision"]), 1)
        except (SpecError, ValueError) as exc:
            raise ConfigError(f"data={Path(path).name} row {row['id']!r}: {exc}") from None
    return frame


def predict_hfta(frame: pd.DataFrame, max_jobs: int = 256) -> pd.DataFrame:
    """Predicted speedup and largest fused count of every row (a few batched evaluations)."""
    from analytical import evaluate, stack_designs
    from analytical.fused import fused_comparison
    from analytical.build import single_design

    fused = [_specs(row, str(row["precision"]), int(row["fused_jobs"])) for _, row in frame.iterrows()]
    alone = [_specs(row, str(row["baseline_precision"]), 1) for _, row in frame.iterrows()]
    fused_s = evaluate(stack_designs(*zip(*fused))).step_time_s.numpy()
    alone_s = evaluate(stack_designs(*zip(*alone))).step_time_s.numpy()
    largest = [fused_comparison(single_design(*specs), max_jobs=max_jobs)["largest_fused_jobs"] for specs in fused]
    out = frame.copy()
    out["predicted_speedup"] = frame["fused_jobs"].to_numpy(float) * alone_s / fused_s
    out["predicted_max_fused_jobs"] = largest
    return out


def hfta_report(path: str) -> dict:
    """`{"summary": {n, mape, max_abs_error, median_abs_error, max_jobs_n, max_jobs_within_one,
    max_jobs_mean_abs_error}, "rows": [...]}` with signed errors as fractions."""
    rows = predict_hfta(read_hfta(path))
    error = rows["predicted_speedup"] / rows["published_speedup"] - 1.0
    summary = {"n": int(len(rows)), "mape": float(np.abs(error).mean()), "max_abs_error": float(np.abs(error).max()),
               "median_abs_error": float(np.median(np.abs(error))), "mean_signed_error": float(error.mean())}
    has_max = rows["published_max_fused_jobs"].notna() if "published_max_fused_jobs" in rows else None
    out_rows = []
    for i, row in rows.iterrows():
        record = {"id": row["id"], "predicted_speedup": float(row["predicted_speedup"]),
                  "published_speedup": float(row["published_speedup"]), "error": float(error[i]),
                  "predicted_max_fused_jobs": int(row["predicted_max_fused_jobs"])}
        if has_max is not None and has_max[i]:
            record["published_max_fused_jobs"] = int(row["published_max_fused_jobs"])
        out_rows.append(record)
    if has_max is not None and has_max.any():
        gaps = np.array([abs(r["predicted_max_fused_jobs"] - r["published_max_fused_jobs"])
                         for r in out_rows if "published_max_fused_jobs" in r])
        summary.update(max_jobs_n=int(len(gaps)), max_jobs_within_one=int((gaps <= 1).sum()),
                       max_jobs_mean_abs_error=float(gaps.mean()))
    return {"summary": summary, "rows": out_rows}


def hfta_table(result: dict) -> str:
    from deepflow.tables import table

    rows = [(r["id"], f"{r['predicted_speedup']:.2f}", f"{r['published_speedup']:.2f}", f"{r['error']:+.1%}",
             str(r["predicted_max_fused_jobs"]), str(r.get("published_max_fused_jobs", "")))
            for r in result["rows"]]
    s = result["summary"]
    text = table(["id", "speedup", "published", "error", "largest B", "published B"], rows, align="lrrrrr")
    text += (f"\n\nn = {s['n']}   mean |error| = {s['mape']:.1%}   max |error| = {s['max_abs_error']:.1%}")
    if "max_jobs_n" in s:
        text += (f"\nlargest fused count that fits: {s['max_jobs_within_one']} of {s['max_jobs_n']} within one job "
                 f"of the paper's (mean gap {s['max_jobs_mean_abs_error']:.1f})")
    return text
