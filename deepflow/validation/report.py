"""Judge predictions against what was measured: each row's error, the summary (mean, max, median error,
infeasible rows, memory where measured, Kendall tau per model) and the same by group."""

from __future__ import annotations

import math

import numpy as np

from analytical import Efficiency, evaluate, stack_designs
from deepflow.validation.rows import GIB, Rows, generation


# key prefixes of `predict`'s per-part arrays: a row's predicted time and device memory by part
TIME_PART_KEY, MEMORY_PART_KEY = "time_s.", "memory_gib."


def predict(rows: Rows, eff: Efficiency) -> dict[str, np.ndarray]:
    """Predicted iteration time, feasibility and reason of every row, in one batched call, with the
    time and the device memory by part (`TIME_PART_KEY` + a part of `analytical.step.model.TIME_PARTS`,
    `MEMORY_PART_KEY` + a part of `analytical.step.memory.MEMORY_PARTS`; the time parts add up to the time)."""
    batch = stack_designs(*zip(*rows.specs))
    result = evaluate(batch, eff)
    out = {"predicted_s": result.step_time_s.numpy(), "feasible": result.feasible.numpy(),
           "reason": result.reason.numpy(), "memory_gib": result.memory_per_device_bytes.numpy() / GIB}
    out.update({TIME_PART_KEY + k: v.numpy() for k, v in result.time_breakdown_s.items()})
    out.update({MEMORY_PART_KEY + k: v.numpy() / GIB for k, v in result.memory_breakdown_bytes.items()})
    return out


def _parts(pred: dict, prefix: str, i: int) -> dict[str, float]:
    """Row `i`'s non-zero parts of `pred` under `prefix`, largest first."""
    parts = {k.removeprefix(prefix): float(v[i]) for k, v in pred.items() if k.startswith(prefix) and v[i] != 0.0}
    return dict(sorted(parts.items(), key=lambda kv: -abs(kv[1])))


def kendall_tau(x: np.ndarray, y: np.ndarray) -> float:
    """Kendall's tau-b of two equally long arrays (scipy's implementation)."""
    from scipy.stats import kendalltau

    return float(kendalltau(x, y).statistic) if len(x) > 1 else float("nan")


def _finite_or_none(x: float) -> float | None:
    """JSON has no NaN: an undefined statistic (one row, or no spread) is null."""
    return None if math.isnan(x) else x


# row properties `report` can group the errors by (`group_by`), each read from the row's specs
GROUP_KEYS = ("model", "gpu", "generation", "moe", "precision", "source")


def row_labels(rows: Rows, keys: tuple[str, ...]) -> list[str]:
    """Each row's values of `keys` (`GROUP_KEYS`) joined by " / ", e.g. "hopper / MoE"."""
    def values(i: int) -> dict[str, str]:
        accelerator, _, model, mapping = rows.specs[i]
        return {"model": rows.groups[i], "gpu": accelerator.name, "generation": generation(accelerator),
                "moe": "MoE" if model.num_experts > 1 else "dense", "precision": mapping.precision,
                "source": rows.sources[i]}

    return [" / ".join(values(i)[k] for k in keys) for i in range(len(rows.ids))]


def report(rows: Rows, eff: Efficiency, pred: dict | None = None, group_by: tuple[str, ...] = (),
           breakdown: bool = False) -> dict:
    """`{"summary": {...}, "rows": [...], "by_group": {...}, "unstated_columns": [...]}` with signed errors as
    fractions; `unstated_columns`: the optional columns the CSV leaves out, read as their defaults; a row's
    `assumed`: what the reader inferred for it because it trained (`Rows.assumed`), where anything. `pred`:
    the rows' predictions when already made (as `predict` returns them; e.g. a per-accelerator
    calibration's, `deepflow.calibration.predict_calibrated`), else `predict(rows, eff)`.
    `group_by` (`GROUP_KEYS`): adds `"by": {label: {n, mape, max_abs_error}}`, sorted by label.
    `breakdown`: each row also gets its predicted time by part (`time_breakdown_s`, largest first; the
    parts add up to `predicted_s`) and, where memory was measured, its predicted memory by part
    (`memory_breakdown_gib`): which term a row's error can come from."""
    pred = predict(rows, eff) if pred is None else pred
    error = pred["predicted_s"] / rows.measured_s - 1.0
    abs_err = np.abs(error)
    out_rows = [{"id": i, "predicted_s": float(p), "measured_s": float(m), "error": float(e),
                 "feasible": bool(f), **({"assumed": a} if a else {})}
                for i, p, m, e, f, a in zip(rows.ids, pred["predicted_s"], rows.measured_s, error, pred["feasible"],
                                            rows.assumptions())]
    measured_gib = rows.memory()
    has_memory = np.isfinite(measured_gib) & (measured_gib > 0)
    memory_error = pred["memory_gib"] / np.where(has_memory, measured_gib, 1.0) - 1.0
    for i in np.flatnonzero(has_memory):
        out_rows[i].update(predicted_memory_gib=float(pred["memory_gib"][i]),
                           measured_memory_gib=float(measured_gib[i]), memory_error=float(memory_error[i]))
        if breakdown:
            out_rows[i]["memory_breakdown_gib"] = _parts(pred, MEMORY_PART_KEY, i)
    if breakdown:
        for i, row in enumerate(out_rows):
            row["time_breakdown_s"] = _parts(pred, TIME_PART_KEY, i)
    by_group = {}
    for group in dict.fromkeys(rows.groups):
        idx = np.array([g == group for g in rows.groups])
        by_group[group] = {"n": int(idx.sum()), "mape": float(abs_err[idx].mean()),
                           "kendall_tau": _finite_or_none(kendall_tau(pred["predicted_s"][idx], rows.measured_s[idx]))}
    summary = {"n": len(rows.ids), "mape": float(abs_err.mean()), "max_abs_error": float(abs_err.max()),
               "median_abs_error": float(np.median(abs_err)), "mean_signed_error": float(error.mean()),
               "infeasible_rows": int((~pred["feasible"]).sum()),
               "assumed_rows": sum(bool(a) for a in rows.assumptions())}
    if has_memory.any():
        memory_abs = np.abs(memory_error[has_memory])
        summary.update(memory_n=int(has_memory.sum()), memory_mape=float(memory_abs.mean()),
                       memory_max_abs_error=float(memory_abs.max()),
                       memory_within_10pct=int((memory_abs <= 0.10).sum()))
    taus = [g["kendall_tau"] for g in by_group.values() if g["n"] > 2 and g["kendall_tau"] is not None]
    if taus:
        summary["min_kendall_tau"] = float(min(taus))
    out = {"summary": summary, "rows": out_rows, "by_group": by_group, "unstated_columns": list(rows.unstated_columns)}
    if group_by:
        labels = np.array(row_labels(rows, tuple(group_by)))
        out["by"] = {label: {"n": int((labels == label).sum()), "mape": float(abs_err[labels == label].mean()),
                             "max_abs_error": float(abs_err[labels == label].max())}
                     for label in sorted(set(labels))}
    return out
