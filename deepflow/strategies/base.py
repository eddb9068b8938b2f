"""The data a strategy sees and the one method it has: propose unit-cube points from a history.

A strategy is stateless between calls: everything it knows comes from the verified `History`, so a
killed run resumes by reloading its history (and, for the random baselines, the seed). Points are
`n x d` float64 tensors on the unit cube of a `analytical.space.DesignSpace`; objectives are
minimized (log step time, log energy, ...), see `deepflow.run.objectives`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional, Protocol, runtime_checkable

import torch

from analytical.codes import DTYPE
from analytical.space import DesignSpace
from analytical.specs import SpecError


@dataclass
class History:
    """Every verified evaluation of a run, in evaluation order.

    X: `n x d` unit-cube points already verified by the analytical model.
    Y: `n x m` objectives to MINIMIZE (e.g. log step time, log energy); infeasible rows hold a
       finite placeholder (the computed value where there is one).
    feasible: `n` bool, verified feasible.
    C: `n x c` outcome constraints, satisfied where <= 0 (e.g. log(memory / capacity),
       log(average power / cap)), or None when the objective has none. Finite everywhere.
    """

    X: torch.Tensor
    Y: torch.Tensor
    feasible: torch.Tensor
    C: Optional[torch.Tensor] = None

    def __post_init__(self) -> None:
        self.X = torch.as_tensor(self.X, dtype=DTYPE)
        self.Y = torch.as_tensor(self.Y, dtype=DTYPE)
        self.feasible = torch.as_tensor(self.feasible, dtype=torch.bool)
        if self.C is not None:
            self.C = torch.as_tensor(self.C, dtype=DTYPE)
        self.validate()

    def validate(self) -> "History":
        n = self.X.shape[0]
        if self.X.dim() != 2 or self.Y.dim() != 2 or self.feasible.shape != (n,) or self.Y.shape[0] != n:
            raise SpecError("history", "shapes", (tuple(self.X.shape), tuple(self.Y.shape),
                                                  tuple(self.feasible.shape)), "X n x d, Y n x m, feasible n")
        if self.C is not None and (self.C.dim() != 2 or self.C.shape[0] != n):
            raise SpecError("history", "C", tuple(self.C.shape), f"a {n} x c tensor")
        if not bool(torch.isfinite(self.Y).all()) or (self.C is not None and not bool(torch.isfinite(self.C).all())):
            raise SpecError("history", "Y/C", "non-finite values", "finite numbers (placeholders for infeasible)")
        return self

    @classmethod
    def empty(cls, d: int, m: int = 1, c: Optional[int] = None) -> "History":
        return cls(X=torch.zeros(0, d, dtype=DTYPE), Y=torch.zeros(0, m, dtype=DTYPE),
                   feasible=torch.zeros(0, dtype=torch.bool),
                   C=None if c is None else torch.zeros(0, c, dtype=DTYPE))

    @property
    def n(self) -> int:
        return self.X.shape[0]

    @property
    def d(self) -> int:
        return self.X.shape[1]

    @property
    def m(self) -> int:
        return self.Y.shape[1]

    def append(self, X: torch.Tensor, Y: torch.Tensor, feasible: torch.Tensor,
               C: Optional[torch.Tensor] = None) -> "History":
        """A new history with the rows `X q x d`, `Y q x m`, `feasible q`, `C q x c` added."""
        if (C is None) != (self.C is None):
            raise SpecError("history", "C", "given" if C is not None else None,
                            "constraints on every batch or on none")
        return History(X=torch.cat([self.X, X.to(DTYPE)]), Y=torch.cat([self.Y, Y.to(DTYPE)]),
                       feasible=torch.cat([self.feasible, feasible.to(torch.bool)]),
                       C=None if C is None else torch.cat([self.C, C.to(DTYPE)]))

    def slice(self, n: int) -> "History":
        """The first n evaluations."""
        return History(X=self.X[:n], Y=self.Y[:n], feasible=self.feasible[:n],
                       C=None if self.C is None else self.C[:n])

    def best_index(self, objective: int = 0) -> Optional[int]:
        """Index of the feasible row with the lowest objective `objective` (first on ties), or None."""
        if not bool(self.feasible.any()):
            return None
        y = torch.where(self.feasible, self.Y[:, objective], torch.full_like(self.Y[:, 0], math.inf))
        return int(torch.argmin(y))

    def best_so_far(self, objective: int = 0) -> torch.Tensor:
        """`n` running minimum of objective `objective` over feasible rows (inf before the first)."""
        y = torch.where(self.feasible, self.Y[:, objective], torch.full_like(self.Y[:, 0], math.inf))
        return torch.cummin(y, dim=0).values if self.n else y

    def pareto_mask(self) -> torch.Tensor:
        """`n` bool: feasible rows that no other feasible row dominates (all objectives minimized)."""
        return pareto_mask(self.Y, self.feasible)


def pareto_mask(Y: torch.Tensor, feasible: Optional[torch.Tensor] = None) -> torch.Tensor:
    """`n` bool: rows of `Y n x m` (minimized) not dominated by another (feasible) row."""
    n = Y.shape[0]
    feasible = torch.ones(n, dtype=torch.bool) if feasible is None else feasible
    out = torch.zeros(n, dtype=torch.bool)
    idx = torch.nonzero(feasible).squeeze(-1)
    if idx.numel() == 0:
        return out
    Yf = Y[idx]
    keep = torch.ones(idx.numel(), dtype=torch.bool)
    for lo in range(0, idx.numel(), 4096):  # chunked: n^2 comparisons without n^2 memory at once
        block = Yf[lo:lo + 4096]
        dominated = ((Yf.unsqueeze(0) <= block.unsqueeze(1)).all(-1)
                     & (Yf.unsqueeze(0) < block.unsqueeze(1)).any(-1)).any(-1)
        keep[lo:lo + 4096] = ~dominated
    out[idx[keep]] = True
    return out


@runtime_checkable
class Strategy(Protocol):
    """Proposes `q x d` unit-cube points to verify next, from the verified history alone."""

    name: str

    def propose(self, space: DesignSpace, history: History, q: int, seed: int) -> torch.Tensor:
        ...


def check_q(q: int) -> int:
    if isinstance(q, bool) or not isinstance(q, int) or q < 1:
        raise SpecError("optimize", "q", q, "an integer >= 1")
    return q


def design_keys(space: DesignSpace, u: torch.Tensor) -> list[tuple]:
    """One hashable key per row of `u n x d`: the decoded values (continuous ones rounded to 12 digits)."""
    values = space.decode(u)
    cols = torch.stack([values[name] for name in space.names], dim=-1) if u.shape[0] else torch.zeros(0, space.dim)
    return [tuple(round(v, 12) for v in row) for row in cols.detach().tolist()]
