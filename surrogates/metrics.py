"""Accuracy and calibration of a surrogate's predictions (pure functions over tensors).

Targets are usually logs (log step time, log energy); `mape_from_log` and `regression_report` say
so. Every function takes `(n,)` or `n x t` arrays (torch tensors or numpy arrays) and returns a
float for `(n,)` input or a `(t,)` float64 tensor (one value per target column) for `n x t` input.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from scipy import stats

Z95 = 1.959963984540054


def _columns(*arrays) -> tuple[list[torch.Tensor], bool]:
    tensors = [torch.as_tensor(x).detach() for x in arrays]
    shape = tensors[0].shape
    for x in tensors:
        if x.shape != shape:
            raise ValueError(f"shapes differ: {[tuple(y.shape) for y in tensors]}")
    single = tensors[0].dim() == 1
    return [x.to(torch.float64).reshape(shape[0], -1) for x in tensors], single


def _out(values: torch.Tensor, single: bool):
    return float(values[0]) if single else values


def mape_from_log(y_log: torch.Tensor, pred_log: torch.Tensor):
    """Mean absolute percentage error on the original scale of log targets:
    `mean |exp(pred) - exp(y)| / exp(y) = mean |exp(pred - y) - 1|`."""
    (y, p), single = _columns(y_log, pred_log)
    return _out(torch.expm1(p - y).abs().mean(0), single)


def mape(y: torch.Tensor, pred: torch.Tensor):
    """Mean absolute percentage error `mean |pred - y| / |y|` (targets on their raw scale)."""
    (y, p), single = _columns(y, pred)
    return _out(((p - y) / y).abs().mean(0), single)


def r2(y: torch.Tensor, pred: torch.Tensor):
    """Coefficient of determination `1 - SS_res / SS_tot` (on whatever scale is given, e.g. log)."""
    (y, p), single = _columns(y, pred)
    ss_res = ((y - p) ** 2).sum(0)
    ss_tot = ((y - y.mean(0)) ** 2).sum(0)
    return _out(1.0 - ss_res / ss_tot, single)


def kendall_tau(y: torch.Tensor, pred: torch.Tensor):
    """Kendall's tau-b rank correlation between truth and prediction (O(n log n), scipy)."""
    (y, p), single = _columns(y, pred)
    taus = torch.tensor([stats.kendalltau(y[:, j].numpy(), p[:, j].numpy()).statistic for j in range(y.shape[1])],
                        dtype=torch.float64)
    return _out(taus, single)


def top_recall(y: torch.Tensor, pred: torch.Tensor, fraction: float = 0.01, minimize: bool = True):
    """Share of the truly best `fraction` of designs that the prediction also puts in its best
    `fraction` (top-1 % recall by default; best = smallest when `minimize`)."""
    (y, p), single = _columns(y, pred)
    k = max(1, int(math.ceil(fraction * y.shape[0])))
    sign = 1.0 if minimize else -1.0
    out = []
    for j in range(y.shape[1]):
        true_best = set(torch.topk(-sign * y[:, j], k).indices.tolist())
        pred_best = set(torch.topk(-sign * p[:, j], k).indices.tolist())
        out.append(len(true_best & pred_best) / k)
    return _out(torch.tensor(out, dtype=torch.float64), single)


def coverage(y: torch.Tensor, mean: torch.Tensor, std: torch.Tensor, level: float = 0.95):
    """Share of truths inside the central `level` interval `mean +- z std` of a Gaussian prediction."""
    (y, m, s), single = _columns(y, mean, std)
    z = float(torch.special.ndtri(torch.tensor(0.5 + level / 2, dtype=torch.float64)))
    return _out(((y - m).abs() <= z * s).to(torch.float64).mean(0), single)


def gaussian_nll(y: torch.Tensor, mean: torch.Tensor, std: torch.Tensor):
    """Mean negative log likelihood of the truths under `N(mean, std^2)` (nats)."""
    (y, m, s), single = _columns(y, mean, std)
    var = s.clamp_min(1e-300) ** 2
    return _out((0.5 * (math.log(2 * math.pi) + var.log() + (y - m) ** 2 / var)).mean(0), single)


def calibration_curve(y, mean, std, levels=None) -> tuple[np.ndarray, np.ndarray]:
    """`(levels, observed)`: the observed coverage of central Gaussian intervals at each nominal
    level (default 0.05, 0.10, ..., 0.95, 0.99), for one target `(n,)`."""
    levels = np.asarray(levels if levels is not None else [*np.arange(0.05, 0.96, 0.05), 0.99], dtype=np.float64)
    observed = np.array([coverage(y, mean, std, float(level)) for level in levels], dtype=np.float64)
    return levels, observed


def regression_report(y_log, mean, std) -> dict:
    """All of the above for log targets: `{metric: float}` for `(n,)` input, `{metric: [per target]}`
    for `n x t`. Keys: mape (original scale), r2_log, kendall_tau, top1_recall, coverage95, nll."""
    values = {
        "mape": mape_from_log(y_log, mean),
        "r2_log": r2(y_log, mean),
        "kendall_tau": kendall_tau(y_log, mean),
        "top1_recall": top_recall(y_log, mean),
        "coverage95": coverage(y_log, mean, std),
        "nll": gaussian_nll(y_log, mean, std),
    }
    return {k: (v if isinstance(v, float) else v.tolist()) for k, v in values.items()}
