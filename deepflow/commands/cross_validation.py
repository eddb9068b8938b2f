"""Fitting and cross-validation of `deepflow calibrate` (deepflow/commands/calibrate.py).

`fit_calibration` fits the constants of one set of rows (globally, then per accelerator);
`cross_validate` predicts every row with the constants fitted without its fold. `prior_sigma="auto"`
chooses the width of the prior around the shipped constants by cross-validation on the rows being
fitted (`choose_prior_sigma`): from keeping the shipped constants (0) to plain least squares (None),
the narrowest that predicts held-out rows about as well as the best. Inside `cross_validate` the
choice is nested: each fold chooses on its own training rows only, so the reported error never saw
the held-out rows.
"""

from __future__ import annotations

import dataclasses
import sys
import time
from typing import Any, Optional

import numpy as np

from analytical.step.efficiency import Efficiency
from deepflow.calibration import Calibration, predict_calibrated

# prior_sigma=auto tries these widths, narrowest first (a tie goes to the narrower): 0 keeps the
# starting constants (nothing fitted), None is plain least squares
AUTO_PRIOR_SIGMAS: tuple[Optional[float], ...] = (0.0, 0.05, 0.2, None)
AUTO_INNER_FOLDS = 3  # folds of the cross-validation that chooses the width (nested in each outer fold)


def _log_time(rows, eff: Efficiency) -> np.ndarray:
    from deepflow.validation import predict

    return np.log(predict(rows, eff)["predicted_s"])


def informed_fields(rows, start: Efficiency, fields: tuple[str, ...]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """`(informed, not informed)`: a field informs the fit when moving it to either end of its
    `FIT_BOUNDS` changes some row's predicted time (else the fit could only drift it)."""
    from deepflow.calibration import FIT_BOUNDS

    base = _log_time(rows, start)
    informed, idle = [], []
    for name in fields:
        moved = [_log_time(rows, dataclasses.replace(start, **{name: float(end)})) for end in FIT_BOUNDS[name]]
        changed = any(((np.isfinite(m) != np.isfinite(base)) | (np.abs(np.nan_to_num(m - base)) > 1e-9)).any()
                      for m in moved)
        (informed if changed else idle).append(name)
    return tuple(informed), tuple(idle)


def _fit(rows, start: Efficiency, fields: tuple[str, ...],
         prior_sigma: Optional[float]) -> tuple[Efficiency, tuple[str, ...]]:
    """`start` fitted to `rows` (`fit_efficiency`), the fields that cannot move it left out; a
    prior of width 0 keeps `start` as it is."""
    from deepflow.calibration import fit_efficiency

    informed, idle = informed_fields(rows, start, fields)
    if not informed or prior_sigma == 0.0:
        return start, idle
    return fit_efficiency(rows, start=start, fields=informed, prior_sigma=prior_sigma), idle


def fit_calibration(rows, gpus: list[str], fields: tuple[str, ...], fit: str, min_rows_per_gpu: int = 0,
                    prior_sigma: Optional[float] = None) -> tuple[Calibration, dict[str, tuple[str, ...]]]:
    """The constants of `rows` (global, then per gpu for fit=per_accelerator: each gpu's rows,
    starting from the global fit; a gpu with fewer than `min_rows_per_gpu` rows keeps the global
    set) and, per set (`"global"` or the gpu), the fields left at their start (not informed).
    `prior_sigma`: the width of the prior around the starting constants (`fit_efficiency`)."""
    glob, idle = _fit(rows, Efficiency(), fields, prior_sigma)
    not_informed = {"global": idle}
    per = {}
    if fit == "per_accelerator":
        for gpu in dict.fromkeys(gpus):
            mask = np.array([g == gpu for g in gpus])
            if mask.sum() >= max(min_rows_per_gpu, 1):
                per[gpu], not_informed[gpu] = _fit(rows.subset(mask), glob, fields, prior_sigma)
    return Calibration(efficiency=glob, per_accelerator=per), not_informed


def fold_masks(rows, gpus: list[str], cv: str, folds: int, seed: int) -> list[tuple[str, np.ndarray]]:
    """`[(name, held-out mask)]`: k folds (shuffled by `seed`, each gpu's rows spread evenly), or
    one per source."""
    n = len(rows.ids)
    if cv == "source":
        return [(source, np.array([s == source for s in rows.sources])) for source in dict.fromkeys(rows.sources)]
    rng = np.random.default_rng(seed)
    fold = np.empty(n, dtype=int)
    offset = 0
    for gpu in dict.fromkeys(gpus):
        idx = rng.permutation([i for i, g in enumerate(gpus) if g == gpu])
        fold[idx] = (offset + np.arange(len(idx))) % folds
        offset += len(idx)
    return [(f"fold {j + 1}", fold == j) for j in range(folds)]


def sigma_label(sigma: Optional[float]) -> str:
    """A prior width as the command line writes it: `0`, `0.05`, `null`."""
    return "null" if sigma is None else f"{sigma:g}"


def choose_prior_sigma(rows, gpus: list[str], opts: dict) -> tuple[Optional[float], dict[str, float]]:
    """`(width, {width: cv mean |error|})`: of `AUTO_PRIOR_SIGMAS`, each width's constants are fitted
    on the other folds of `rows` (`AUTO_INNER_FOLDS` folds, or one per row when fewer) and predict the
    held-out rows; the width chosen is the narrowest whose mean |error| is within one standard error
    of the best one's (the one-standard-error rule: Hastie, Tibshirani & Friedman, The Elements of
    Statistical Learning, 2nd ed., sec. 7.10), so a handful of rows does not move the constants on
    a difference that is noise."""
    inner = {**opts, "cv": "kfold", "folds": min(AUTO_INNER_FOLDS, len(rows.ids))}
    runs = {sigma: cross_validate(rows, gpus, {**inner, "prior_sigma": sigma}, progress=False)
            for sigma in AUTO_PRIOR_SIGMAS if sigma != 0.0}
    fitted = next(iter(runs.values()))  # width 0 fits nothing: its errors are the starting constants'
    runs[0.0] = {"cv_mape_after": fitted["cv_mape_before"], "abs_errors_after": fitted["abs_errors_before"]}
    scores = {sigma: run["cv_mape_after"] for sigma, run in runs.items()}
    best = min(AUTO_PRIOR_SIGMAS, key=lambda sigma: scores[sigma])
    errors = runs[best]["abs_errors_after"]
    standard_error = float(np.std(errors, ddof=1) / np.sqrt(len(errors))) if len(errors) > 1 else 0.0
    chosen = next(sigma for sigma in AUTO_PRIOR_SIGMAS if scores[sigma] <= scores[best] + standard_error)
    return chosen, {sigma_label(sigma): scores[sigma] for sigma in AUTO_PRIOR_SIGMAS}


def cross_validate(rows, gpus: list[str], opts: dict, progress: bool = True) -> dict[str, Any]:
    """Held-out predictions of every row with the default constants and with the constants fitted
    on the other folds; their errors, overall and per fold. With `prior_sigma` "auto" each fold
    chooses its width on its own training rows (`choose_prior_sigma`), and says which."""
    from deepflow.validation import predict

    n = len(rows.ids)
    before = predict(rows, Efficiency())["predicted_s"]
    after = np.full(n, np.nan)
    per_fold = []
    for j, (name, held) in enumerate(fold_masks(rows, gpus, opts["cv"], opts["folds"], opts["seed"])):
        if not held.any():
            continue
        start = time.perf_counter()
        train = ~held
        train_gpus = [g for g, t in zip(gpus, train) if t]
        sigma, auto = opts["prior_sigma"], opts["prior_sigma"] == "auto"
        if auto:
            sigma, _ = choose_prior_sigma(rows.subset(train), train_gpus, opts)
        cal, _ = fit_calibration(rows.subset(train), train_gpus, opts["fields"], opts["fit"],
                                 min_rows_per_gpu=len(opts["fields"]), prior_sigma=sigma)
        after[held] = predict_calibrated(rows.subset(held), cal)["predicted_s"]
        err_b = np.abs(before[held] / rows.measured_s[held] - 1.0)
        err_a = np.abs(after[held] / rows.measured_s[held] - 1.0)
        per_fold.append({"held_out": name, "n": int(held.sum()), "mape_before": float(err_b.mean()),
                         "mape_after": float(err_a.mean()), **({"prior_sigma": sigma} if auto else {})})
        if progress:
            chosen = f" (prior_sigma {sigma_label(sigma)})" if auto else ""
            print(f"cv {j + 1}: held out {name} ({int(held.sum())} rows): fitted on {int(train.sum())}{chosen} in "
                  f"{time.perf_counter() - start:.1f} s, mean |error| {err_b.mean():.1%} -> {err_a.mean():.1%}",
                  file=sys.stderr, flush=True)
    err_before = np.abs(before / rows.measured_s - 1.0)
    err_after = np.abs(after / rows.measured_s - 1.0)
    return {"cv_mape_before": float(err_before.mean()), "cv_mape_after": float(err_after.mean()),
            "cv_max_abs_error_before": float(err_before.max()), "cv_max_abs_error_after": float(err_after.max()),
            "cv_folds": per_fold, "abs_errors_before": err_before, "abs_errors_after": err_after}
