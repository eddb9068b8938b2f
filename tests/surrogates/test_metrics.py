"""Accuracy and calibration metrics against values worked out by hand or by an independent formula."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from surrogates.metrics import (calibration_curve, coverage, gaussian_nll, kendall_tau, mape, mape_from_log, r2,
                                regression_report, top_recall)


def test_mape_from_log_is_the_original_scale_error():
    y = torch.log(torch.tensor([1.0, 2.0, 4.0], dtype=torch.float64))
    pred = torch.log(torch.tensor([1.1, 1.8, 4.0], dtype=torch.float64))
    assert mape_from_log(y, pred) == pytest.approx((0.1 + 0.1 + 0.0) / 3)
    assert mape(torch.exp(y), torch.exp(pred)) == pytest.approx(mape_from_log(y, pred))


def test_columns_are_scored_separately():
    y = torch.tensor([[0.0, 1.0], [1.0, 2.0], [2.0, 3.0]], dtype=torch.float64)
    pred = torch.stack([y[:, 0], y[:, 1].flip(0)], dim=-1)
    assert r2(y, pred)[0] == pytest.approx(1.0)
    assert r2(y, pred)[1] == pytest.approx(1.0 - 8.0 / 2.0)
    assert kendall_tau(y, pred).tolist() == pytest.approx([1.0, -1.0])


def test_top_recall_counts_the_shared_best():
    y = torch.arange(100, dtype=torch.float64)
    pred = y.clone()
    pred[0] = 1000.0  # the truly best design predicted worst
    assert top_recall(y, pred, fraction=0.05) == pytest.approx(4 / 5)
    assert top_recall(y, -y, fraction=0.05, minimize=False) == pytest.approx(0.0)


def test_coverage_and_nll_of_a_standard_normal():
    gen = torch.Generator().manual_seed(0)
    y = torch.randn(200_000, generator=gen, dtype=torch.float64)
    zeros, ones = torch.zeros_like(y), torch.ones_like(y)
    assert coverage(y, zeros, ones) == pytest.approx(0.95, abs=0.003)
    assert coverage(y, zeros, ones, level=0.5) == pytest.approx(0.5, abs=0.005)
    expected = -torch.distributions.Normal(0.0, 1.0).log_prob(y).mean()
    assert gaussian_nll(y, zeros, ones) == pytest.approx(float(expected))
    assert gaussian_nll(y, zeros, ones) == pytest.approx(0.5 * (math.log(2 * math.pi) + 1.0), abs=0.01)


def test_report_and_calibration_curve_take_numpy_columns():
    rng = np.random.default_rng(0)
    y = rng.normal(size=5000)
    mean = y + rng.normal(scale=0.1, size=y.size)
    report = regression_report(y, mean, np.full(y.size, 0.1))
    assert set(report) == {"mape", "r2_log", "kendall_tau", "top1_recall", "coverage95", "nll"}
    assert all(isinstance(v, float) for v in report.values())
    assert 0.93 < report["coverage95"] < 0.97 and report["r2_log"] > 0.98
    levels, observed = calibration_curve(y, mean, np.full(y.size, 0.1))
    assert np.all(np.diff(observed) >= 0) and np.max(np.abs(observed - levels)) < 0.03


def test_shape_mismatch_is_an_error():
    with pytest.raises(ValueError, match="shapes differ"):
        r2(torch.zeros(3), torch.zeros(4))
