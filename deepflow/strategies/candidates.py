"""Candidate sets for BO on a space too large to enumerate (continuous chip splits, mixed spaces):
local moves around the best verified designs at several step lengths (a trust region that needs
no state: every scale is tried at every batch, and the acquisition picks the step that pays), plus
global scrambled Sobol points, all known-feasible and new.

This is the candidate-set form of TuRBO's local search (Eriksson et al. 2019, "Scalable Global
Optimization via Local Bayesian Optimization", NeurIPS: perturb a masked subset of the incumbent's
coordinates, score the perturbations with the acquisition) with SCBO's handling of constraints
(Eriksson & Poloczek 2021: centre on the best feasible point; here the probability of feasibility
enters the acquisition through the constraint GPs). Without a state of its own the strategy stays
resumable: the same history and seed give the same candidates.
"""

from __future__ import annotations

import math

import torch

from analytical.codes import DTYPE
from analytical.space import DesignSpace
from deepflow.strategies.base import History, design_keys
from deepflow.strategies.evolution import nondominated_rank
from deepflow.strategies.space_grid import snap

SCALES = (0.003, 0.01, 0.03, 0.1, 0.3)  # step lengths (standard deviations on the unit cube) of the local moves


def centre_rows(history: History, k: int) -> torch.Tensor:
    """Indices of at most `k` centres of the local moves: the best feasible rows by the first
    objective, or for two objectives the non-dominated feasible rows (best first by their sum);
    the best rows overall where none is feasible."""
    rows = torch.nonzero(history.feasible).squeeze(-1)
    if rows.numel() == 0:
        rows = torch.arange(history.n)
    Y = history.Y[rows]
    if Y.shape[1] > 1:
        front = rows[nondominated_rank(Y) == 0]
        order = torch.argsort(history.Y[front].sum(-1))
        return front[order[:k]]
    return rows[torch.argsort(Y[:, 0])[:k]]


def local_moves(space: DesignSpace, centres: torch.Tensor, n: int, gen: torch.Generator,
                scales: tuple[float, ...] = SCALES) -> torch.Tensor:
    """`n x d` moves from the points `centres k x d` (each candidate from one centre, the first
    centres drawn more often): every continuous coordinate and, with probability 1/d each, the
    discrete ones move (at least one coordinate always does). A continuous coordinate moves by
    N(0, s^2), s one of `scales` per candidate, clipped to [0, 1]; a discrete one to a neighbouring
    bin or, with probability 1/2 (always for a categorical), to any other bin."""
    k, d = centres.shape
    weights = 1.0 / torch.arange(1, k + 1, dtype=DTYPE)  # the best centre twice as often as the second
    origin = torch.multinomial(weights, n, replacement=True, generator=gen)
    X = centres[origin].clone()
    scale = torch.tensor(scales, dtype=DTYPE)[torch.randint(len(scales), (n, 1), generator=gen)]
    continuous = torch.tensor([math.isinf(p.cardinality) for p in space.parameters])
    discrete = ~continuous
    move = torch.rand(n, d, generator=gen) < 1.0 / d
    move[torch.arange(n), torch.randint(d, (n,), generator=gen)] = True
    if bool(continuous.any()):
        step = torch.randn(n, d, generator=gen, dtype=DTYPE) * scale
        cmove = continuous.expand(n, d) & (move | (torch.rand(n, 1, generator=gen) < 0.5))
        X = torch.where(cmove, (X + step).clamp(0.0, 1.0), X)
    for i in torch.nonzero(discrete).squeeze(-1).tolist():
        p = space.parameters[i]
        bins = int(p.cardinality)
        rows = move[:, i]
        if bins == 1 or not bool(rows.any()):
            continue
        index = torch.clamp(torch.floor(X[rows, i] * bins), 0, bins - 1).long()
        other = torch.randint(bins - 1, index.shape, generator=gen)
        other = other + (other >= index).long()  # any other bin
        step = torch.where(torch.rand(index.shape, generator=gen) < 0.5, 1, -1)
        near = index + step
        near = torch.where((near < 0) | (near >= bins), index - step, near)
        jump = torch.rand(index.shape, generator=gen) < 0.5
        if p.kind == "categorical":
            jump[:] = True
        new = torch.where(jump, other, near)
        X[rows, i] = (new.to(DTYPE) + 0.5) / bins
    return X


def candidate_set(space: DesignSpace, history: History, n_local: int, n_global: int, centres: int,
                  seed: int, scales: tuple[float, ...] = SCALES) -> torch.Tensor:
    """`N x d` known-feasible candidates not yet verified and distinct (N <= n_local + n_global):
    `n_local` moves around the best `centres` verified designs (`centre_rows`) and `n_global`
    scrambled Sobol points (module docstring)."""
    gen = torch.Generator().manual_seed(seed % (2**63))
    parts = []
    if history.n and n_local:
        parts.append(local_moves(space, history.X[centre_rows(history, centres)], n_local, gen, scales))
    if n_global:
        engine = torch.quasirandom.SobolEngine(space.dim, scramble=True, seed=seed % (2**31))
        parts.append(engine.draw(n_global, dtype=DTYPE))
    X = snap(space, torch.cat(parts))
    X = X[space.known_feasible(X)]
    seen = set(design_keys(space, history.X)) if history.n else set()
    keep, taken = [], set()
    for i, key in enumerate(design_keys(space, X)):
        if key not in seen and key not in taken:
            keep.append(i)
            taken.add(key)
    return X[keep]
