"""Baselines that ignore the history's values: uniform random and scrambled Sobol points, both
restricted to the known-feasible part of the space and never proposing a design twice."""

from __future__ import annotations

import torch

from analytical.codes import DTYPE
from analytical.space import DesignSpace
from deepflow.strategies.base import History, check_q, design_keys


def run_seed(batch_seed: int, n_done: int) -> int:
    """The run seed that `deepflow.run.loop.batch_seed(seed, n_done)` came from (its inverse)."""
    return (int(batch_seed) - int(n_done)) // 1_000_003


def fresh(space: DesignSpace, candidates: torch.Tensor, history: History, q: int) -> torch.Tensor:
    """The first q candidates (in order) whose design is not in the history or earlier in the list;
    repeats fill up only if fewer than q are new (a nearly exhausted discrete space)."""
    seen = set(design_keys(space, history.X)) if history.n else set()
    keys = design_keys(space, candidates)
    pick, taken = [], set()
    for i, k in enumerate(keys):
        if k not in seen and k not in taken:
            pick.append(i)
            taken.add(k)
            if len(pick) == q:
                break
    if len(pick) < q:
        pick += [i for i in range(len(keys)) if i not in pick][: q - len(pick)]
    return candidates[pick]


class RandomSearch:
    """Uniformly random known-feasible points (without replacement over designs)."""

    name = "random"

    def __init__(self, oversample: int = 4):
        self.oversample = oversample

    def propose(self, space: DesignSpace, history: History, q: int, seed: int) -> torch.Tensor:
        check_q(q)
        pool = space.sample(max(self.oversample * q, 64), method="random", seed=seed)
        return fresh(space, pool, history, q)


class SobolSearch:
    """The scrambled Sobol sequence of the run seed, known-infeasible points skipped: the proposal
    after n evaluations is the sequence's next new design (stateless: regenerated from the seed)."""

    name = "sobol"

    def __init__(self, chunk: int = 1024):
        self.chunk = chunk

    def propose(self, space: DesignSpace, history: History, q: int, seed: int) -> torch.Tensor:
        check_q(q)
        engine = torch.quasirandom.SobolEngine(space.dim, scramble=True, seed=run_seed(seed, history.n) % (2**31))
        kept, found = [], 0
        need = history.n + 8 * q
        for _ in range(256):
            u = engine.draw(self.chunk, dtype=DTYPE)
            u = u[space.known_feasible(u)]
            kept.append(u)
            found += u.shape[0]
            if found >= need:
                break
        seq = torch.cat(kept)
        return fresh(space, seq, history, q)
