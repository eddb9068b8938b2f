"""Evolutionary baselines, stateless over the history: regularized evolution (Real et al. 2019,
"Regularized evolution for image classifier architecture search", AAAI) for one objective and
NSGA-II selection (Deb et al. 2002) for two.

Regularized evolution: the population is the last `population` evaluations (aging); each child is a
mutation of the best of `tournament` members drawn at random (infeasible members rank last). NSGA-II:
the parents are the best `population` evaluations by non-dominated rank then crowding distance,
picked by binary tournaments, and each child is a uniform crossover of two parents, mutated.

Mutation on the unit cube: one parameter (and each other with probability 1/d) moves; a discrete
parameter to a neighbouring value (or any other value, with probability 1/2; categorical: any other
value), a continuous one by N(0, 0.15) clipped to [0, 1]. Children that break a known constraint or
repeat a design are redrawn; the first `population` evaluations are random known-feasible points.
"""

from __future__ import annotations

import math

import torch

from analytical.codes import DTYPE
from analytical.space import DesignSpace
from deepflow.strategies.base import History, check_q, design_keys
from deepflow.strategies.random_search import RandomSearch


def _rank_key(history: History) -> torch.Tensor:
    """`n` scalar to minimize for one objective: infeasible rows after every feasible one."""
    y = history.Y[:, 0]
    spread = float(y.max() - y.min()) + 1.0 if history.n else 1.0
    return torch.where(history.feasible, y, y + 10.0 * spread + 1e3)


def nondominated_rank(Y: torch.Tensor) -> torch.Tensor:
    """`n` int: Pareto front index of each row of `Y n x m` (0 = non-dominated; minimized)."""
    n = Y.shape[0]
    dom = (Y.unsqueeze(1) <= Y.unsqueeze(0)).all(-1) & (Y.unsqueeze(1) < Y.unsqueeze(0)).any(-1)  # i dominates j
    count = dom.sum(0)
    rank = torch.full((n,), -1, dtype=torch.long)
    front, r = count == 0, 0
    while bool(front.any()):
        rank[front] = r
        count = count - dom[front].sum(0)
        front = (count == 0) & (rank < 0)
        r += 1
    return rank


def crowding_distance(Y: torch.Tensor) -> torch.Tensor:
    """`n` crowding distance of rows of one front `Y n x m` (boundary points: inf)."""
    n, m = Y.shape
    dist = torch.zeros(n, dtype=DTYPE)
    if n <= 2:
        return torch.full((n,), math.inf, dtype=DTYPE)
    for j in range(m):
        order = torch.argsort(Y[:, j])
        span = float(Y[order[-1], j] - Y[order[0], j]) or 1.0
        dist[order[0]] = dist[order[-1]] = math.inf
        dist[order[1:-1]] += (Y[order[2:], j] - Y[order[:-2], j]) / span
    return dist


def mutate(space: DesignSpace, x: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """A mutated copy of the point `x d` (see the module docstring)."""
    d = space.dim
    child = x.clone()
    moves = torch.rand(d, generator=gen) < 1.0 / d
    moves[torch.randint(d, (1,), generator=gen)] = True
    for i in torch.nonzero(moves).squeeze(-1).tolist():
        p = space.parameters[i]
        k = p.cardinality
        if math.isinf(k):
            child[i] = (child[i] + 0.15 * torch.randn(1, generator=gen, dtype=DTYPE)).clamp(0.0, 1.0)
            continue
        k = int(k)
        if k == 1:
            continue
        index = int(torch.clamp(torch.floor(child[i] * k), 0, k - 1))
        if p.kind == "categorical" or torch.rand(1, generator=gen) < 0.5:
            new = int(torch.randint(k - 1, (1,), generator=gen))
            new = new + 1 if new >= index else new
        else:
            step = 1 if torch.rand(1, generator=gen) < 0.5 else -1
            new = index + step if 0 <= index + step < k else index - step
        child[i] = (new + 0.5) / k
    return child


class _Evolutionary:
    def __init__(self, population: int = 32, max_tries: int = 64):
        self.population = population
        self.max_tries = max_tries

    def _children(self, space: DesignSpace, history: History, q: int, seed: int, make_child) -> torch.Tensor:
        check_q(q)
        if history.n < self.population:
            return RandomSearch().propose(space, history, q, seed)
        gen = torch.Generator().manual_seed(seed % (2**63))
        seen = set(design_keys(space, history.X))
        out = []
        for _ in range(q):
            child = None
            for _ in range(self.max_tries):
                cand = make_child(gen).unsqueeze(0)
                key = design_keys(space, cand)[0]
                if key not in seen and bool(space.known_feasible(cand)[0]):
                    child = cand
                    seen.add(key)
                    break
            if child is None:  # the neighbourhood is exhausted: a random new point instead
                child = RandomSearch().propose(space, history, 1, seed + len(out) + 1)
                seen.add(design_keys(space, child)[0])
            out.append(child)
        return torch.cat(out)


class RegularizedEvolution(_Evolutionary):
    """Aging evolution for one objective (`History.Y[:, 0]`)."""

    name = "evolution"

    def __init__(self, population: int = 32, tournament: int = 8, max_tries: int = 64):
        super().__init__(population, max_tries)
        self.tournament = tournament

    def propose(self, space: DesignSpace, history: History, q: int, seed: int) -> torch.Tensor:
        if history.m > 1:
            return NSGA2(self.population, self.max_tries).propose(space, history, q, seed)
        key = _rank_key(history)
        members = torch.arange(max(history.n - self.population, 0), history.n)

        def child(gen):
            draw = members[torch.randperm(members.numel(), generator=gen)[: self.tournament]]
            parent = draw[torch.argmin(key[draw])]
            return mutate(space, history.X[parent], gen)

        return self._children(space, history, q, seed, child)


class NSGA2(_Evolutionary):
    """NSGA-II parent selection over the whole history, uniform crossover and mutation."""

    name = "nsga2"

    def propose(self, space: DesignSpace, history: History, q: int, seed: int) -> torch.Tensor:
        feasible = torch.nonzero(history.feasible).squeeze(-1)
        if feasible.numel() < 2:
            return RandomSearch().propose(space, history, q, seed)
        Y = history.Y[feasible]
        rank = nondominated_rank(Y)
        crowd = torch.zeros(feasible.numel(), dtype=DTYPE)
        for r in rank.unique():
            on = rank == r
            crowd[on] = crowding_distance(Y[on])
        order = sorted(range(feasible.numel()), key=lambda i: (int(rank[i]), -float(crowd[i])))
        parents = torch.tensor(order[: self.population])

        def pick(gen):
            a, b = parents[torch.randint(parents.numel(), (2,), generator=gen)]
            better = a if (int(rank[a]), -float(crowd[a])) <= (int(rank[b]), -float(crowd[b])) else b
            return history.X[feasible[better]]

        def child(gen):
            x1, x2 = pick(gen), pick(gen)
            mix = torch.rand(space.dim, generator=gen) < 0.5
            return mutate(space, torch.where(mix, x1, x2), gen)

        return self._children(space, history, q, seed, child)
