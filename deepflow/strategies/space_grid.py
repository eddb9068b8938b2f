"""The grid of a design space as BO sees it: bin centres of discrete parameters, categorical
dimensions, the enumerated points of a finite space and their ids."""

from __future__ import annotations

import math

import torch

from analytical.codes import DTYPE
from analytical.space import DesignSpace


def snap(space: DesignSpace, X: torch.Tensor) -> torch.Tensor:
    """`n x d` points moved to their design's canonical point (bin centres of discrete parameters)."""
    return space.encode(space.decode(X)) if X.shape[0] else X


def bin_centres(space: DesignSpace) -> dict[int, list[float]]:
    """`{dim: allowed unit-cube values}` of every discrete parameter (the centres `Parameter.encode` gives)."""
    out = {}
    for i, p in enumerate(space.parameters):
        if not math.isinf(p.cardinality):
            k = int(p.cardinality)
            out[i] = [(j + 0.5) / k for j in range(k)]
    return out


def cat_dims(space: DesignSpace) -> list[int]:
    """Categorical parameters with more than two choices. A two-choice one (an on/off flag) stays an
    ordinary dimension: its two bin centres are as expressive under a stationary kernel as a
    categorical kernel, at a fraction of the hyperparameters."""
    return [i for i, p in enumerate(space.parameters) if p.kind == "categorical" and p.cardinality > 2]


def enumerate_space(space: DesignSpace) -> torch.Tensor:
    """`N x d` every point of a fully discrete space (bin centres), known constraints NOT applied."""
    centres = bin_centres(space)
    axes = [torch.tensor(centres[i], dtype=DTYPE) for i in range(space.dim)]
    return torch.cartesian_prod(*axes).reshape(-1, space.dim)


def grid_ids(space: DesignSpace, u: torch.Tensor) -> torch.Tensor:
    """`n` int64: the index of each point's design in the grid of a fully discrete space."""
    ids = torch.zeros(u.shape[0], dtype=torch.int64)
    for i, p in enumerate(space.parameters):
        k = int(p.cardinality)
        ids = ids * k + torch.clamp(torch.floor(u[:, i] * k), 0, k - 1).long()
    return ids


def space_key(space: DesignSpace) -> tuple:
    """Key of a space (object) in a strategy's caches."""
    return (space.name, tuple(space.names), id(space))
