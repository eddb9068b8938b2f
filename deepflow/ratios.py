"""Validation against published ratios rather than times: HFTA's fused-job speedups
(`experiments/validation/hfta_speedups.csv`) and parameter-server against all-reduce throughput
(`experiments/validation/ps_vs_allreduce.csv`).

A row names a model, hardware and precision presets (and optionally the accelerator's memory, as
run), a per-job batch and a fused count B, and the paper's throughput of B fused jobs relative to one
job run alone in `baseline_precision` (HFTA normalises every curve to serial fp32 at B = 1). The
prediction is B x t(one job, baseline precision) / t(B fused jobs, precision) from one batched call,
and the largest fused count that fits the accelerator's memory against the paper's largest B.

A parameter-server row names the model, the accelerator (with the memory and scale-up bandwidth as
run), the cluster (devices, devices per machine, each machine's network), the servers (count and
NIC) and the batch, and the published throughput of parameter-server training over that of
all-reduce training; the prediction is t(all-reduce) / t(ps_sync) of the same design, and the
winner is right when both ratios fall on the same side of 1.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pandas as pd

from deepflow.presets import ConfigError

HFTA_REQUIRED = ("id", "source", "model", "hardware", "precision", "baseline_precision", "micro_batch_size",
                 "fused_jobs", "published_speedup")


PS_REQUIRED = ("id", "source", "model", "hardware", "num_devices", "devices_per_node", "network_gbit_per_node",
               "ps_shards", "ps_server_gbit", "micro_batch_size", "precision", "published_ratio")


def _columns(path: str) -> set:
    try:
        return set(pd.read_csv(path, nrows=0).columns)
    except (FileNotFoundError, pd.errors.EmptyDataError, pd.errors.ParserError):
        return set()


def is_hfta(path: str) -> bool:
    """A CSV in the fused-job speedup schema (it has `published_speedup` and `fused_jobs`)."""
    return {"published_speedup", "fused_jobs"} <= _columns(path)


def is_ps(path: str) -> bool:
    """A CSV in the parameter-server schema (it has `published_ratio` and `ps_shards`)."""
    return {"published_ratio", "ps_shards"} <= _columns(path)


def ratio_report(path: str) -> tuple[dict, str]:
    """The report of a ratio CSV and its table's text, whichever of the two schemas it is in."""
    if is_hfta(path):
        result = hfta_report(path)
        return result, hfta_table(result)
    result = ps_report(path)
    return result, ps_table(result)


def _accelerator(row: pd.Series):
    """The row's hardware preset with the memory (`hbm_gib`) and in-machine bandwidth
    (`scale_up_gb_per_s`) it ran with, where the row gives them."""
    from deepflow.presets import load_preset

    accelerator = load_preset("hardware", str(row["hardware"]))
    for column, field in (("hbm_gib", "hbm_gib"), ("scale_up_gb_per_s", "scale_up_bw_gb_per_s")):
        if column in row and pd.notna(row[column]):
            accelerator = dataclasses.replace(accelerator, **{field: float(row[column])})
    return accelerator


def _read_checked(path: str, required: tuple[str, ...], check_row) -> pd.DataFrame:
    """The CSV's rows, checked: a missing column, or a row `check_row` cannot build specs from (a
    value no preset or spec accepts), is one error naming it."""
    from analytical import SpecError

    frame = pd.read_csv(path)
    missing = [c for c in required if c not in frame.columns]
    if missing:
        raise ConfigError(f"data={path!r}: missing columns {', '.join(missing)} (the schema is in "
                          "experiments/validation/README.md)")
    for _, row in frame.iterrows():
        try:
            check_row(row)
        except (SpecError, ValueError) as exc:
            raise ConfigError(f"data={Path(path).name} row {row['id']!r}: {exc}") from None
    return frame


def _specs(row: pd.Series, precision: str, jobs: int) -> tuple:
    """(accelerator, one-device system, model, mapping) of a row's jobs."""
    from analytical import MappingSpec, SystemSpec
    from deepflow.presets import load_preset

    accelerator = _accelerator(row)
    system = SystemSpec(name="one-device", num_devices=1, devices_per_node=1, scale_up_domain=1)
    batch = int(row["micro_batch_size"])
    mapping = MappingSpec(name="fused", dp=1, micro_batch_size=batch, global_batch_size=batch, precision=precision,
                          flash_attention=False, fused_jobs=jobs).validate()
    return accelerator, system, load_preset("model", str(row["model"])), mapping


def read_hfta(path: str) -> pd.DataFrame:
    """The fused-job rows, checked (`_read_checked`): both the fused jobs and the one-job baseline."""
    def check(row: pd.Series) -> None:
        _specs(row, str(row["precision"]), int(row["fused_jobs"]))
        _specs(row, str(row["baseline_precision"]), 1)

    return _read_checked(path, HFTA_REQUIRED, check)


def predict_hfta(frame: pd.DataFrame, max_jobs: int = 256) -> pd.DataFrame:
    """Predicted speedup and largest fused count of every row (a few batched evaluations)."""
    from analytical import evaluate, single_design, stack_designs
    from analytical.fused import fused_comparison

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


def _ps_specs(row: pd.Series, mode: str) -> tuple:
    """(accelerator, cluster, model, mapping) of a parameter-server row, trained with `mode`."""
    from analytical import MappingSpec, SystemSpec
    from deepflow.presets import load_preset

    accelerator = _accelerator(row)
    per_node = int(row["devices_per_node"])
    system = SystemSpec(name="cluster", num_devices=int(row["num_devices"]), devices_per_node=per_node,
                        scale_up_domain=per_node, topology="fat-tree",
                        scale_out_gbit_per_device=float(row["network_gbit_per_node"]) / per_node,
                        ps_server_gbit=float(row["ps_server_gbit"])).validate()
    batch = int(row["micro_batch_size"])
    given = "overlap_dp_comm" in row and pd.notna(row["overlap_dp_comm"])
    overlap = bool(int(row["overlap_dp_comm"])) if given else True
    mapping = MappingSpec(name=mode, micro_batch_size=batch, global_batch_size=batch * int(row["num_devices"]),
                          precision=str(row["precision"]), flash_attention=False, overlap_dp_comm=overlap,
                          dp_mode=mode, ps_shards=int(row["ps_shards"]) if mode != "allreduce" else 0).validate()
    return accelerator, system, load_preset("model", str(row["model"])), mapping


def read_ps(path: str) -> pd.DataFrame:
    """The parameter-server rows, checked (`_read_checked`)."""
    return _read_checked(path, PS_REQUIRED, lambda row: _ps_specs(row, "ps_sync"))


def ps_report(path: str) -> dict:
    """`{"summary": {n, mape, max_abs_error, median_abs_error, winner_right}, "rows": [...]}`."""
    from analytical import evaluate, stack_designs

    frame = read_ps(path)
    runs = {mode: evaluate(stack_designs(*zip(*[_ps_specs(row, mode) for _, row in frame.iterrows()])))
            for mode in ("allreduce", "ps_sync")}
    predicted = runs["allreduce"].step_time_s.numpy() / runs["ps_sync"].step_time_s.numpy()
    published = frame["published_ratio"].to_numpy(float)
    error = predicted / published - 1.0
    right = (predicted > 1.0) == (published > 1.0)
    rows = [{"id": str(i), "predicted_ratio": float(p), "published_ratio": float(m), "error": float(e),
             "winner_right": bool(w), "feasible": bool(fa and fp)}
            for i, p, m, e, w, fa, fp in zip(frame["id"], predicted, published, error, right,
                                              runs["allreduce"].feasible.tolist(), runs["ps_sync"].feasible.tolist())]
    summary = {"n": len(rows), "mape": float(np.abs(error).mean()), "max_abs_error": float(np.abs(error).max()),
               "median_abs_error": float(np.median(np.abs(error))), "mean_signed_error": float(error.mean()),
               "winner_right": int(right.sum())}
    return {"summary": summary, "rows": rows}


def ps_table(result: dict) -> str:
    from deepflow.tables import table

    rows = [(r["id"], f"{r['predicted_ratio']:.2f}", f"{r['published_ratio']:.2f}", f"{r['error']:+.1%}",
             "yes" if r["winner_right"] else "NO") for r in result["rows"]]
    s = result["summary"]
    return (table(["id", "PS / all-reduce", "published", "error", "winner right"], rows, align="lrrrl")
            + f"\n\nn = {s['n']}   mean |error| = {s['mape']:.1%}   max |error| = {s['max_abs_error']:.1%}   "
              f"winner right in {s['winner_right']} of {s['n']}")
