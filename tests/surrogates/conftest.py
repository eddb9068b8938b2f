"""Shared data for the surrogate tests: known smooth functions on the unit cube, small n.

Each fit here is small (a few hundred rows, a few hundred optimizer steps) so the whole folder
runs in about a minute on two cores; the real-scale figures come from
`experiments/benchmarks/bench_surrogates.py`.
"""

from __future__ import annotations

import math

import pytest
import torch

DTYPE = torch.float64


@pytest.fixture(autouse=True, scope="module")
def _single_torch_thread():
    """Small batched matmuls train faster on one thread than with intra-op parallelism on a small,
    shared machine; restored after each module."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


def known_function(X: torch.Tensor) -> torch.Tensor:
    """`n x 2` targets of `n x 3` points: smooth, different in each output, range ~[-1, 2]."""
    y0 = torch.sin(math.pi * X[:, 0]) + X[:, 1] ** 2 - 0.5 * X[:, 2]
    y1 = torch.cos(2.0 * X[:, 1]) * X[:, 0] + 0.8 * X[:, 2]
    return torch.stack([y0, y1], dim=-1)


def points(n: int, seed: int, d: int = 3) -> torch.Tensor:
    return torch.rand(n, d, generator=torch.Generator().manual_seed(seed), dtype=DTYPE)


def dataset(n_train: int, n_test: int = 300) -> tuple[torch.Tensor, ...]:
    """`(X, Y, X_test, Y_test)` of `known_function`, disjoint random points."""
    X, X_test = points(n_train, 0), points(n_test, 1)
    return X, known_function(X), X_test, known_function(X_test)


@pytest.fixture(scope="module")
def make_dataset():
    """`dataset` as a fixture (test modules do not import conftest)."""
    return dataset
