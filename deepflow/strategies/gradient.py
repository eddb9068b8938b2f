"""Gradient-descent baseline over the continuous parameters (the original DeepFlow's GD search,
with real gradients: autograd through `space.to_batch` and the analytical model).

One proposal is one projected gradient step, so the budget counts steps exactly as it counts any
other strategy's evaluations (the gradient at an already verified point costs no new evaluation).

- The penalized objective of a point u is `Y_0(u) + penalty * sum_j relu(C_j(u))` over the objective's
  modelled constraints (memory margin, power margin; see `deepflow.run.objectives`), with more objectives
  summed (a scalarization: this is a single-objective baseline).
- Parametrization: the unit cube of the space. A step moves the continuous coordinates by `lr` along
  the normalized negative gradient (max-norm) and projects back onto [0, 1]^d, so every budget or
  split that the space parametrizes as a box coordinate stays valid (splits parametrized on the cube
  by the space, e.g. stick-breaking, stay on their simplex). Discrete and categorical coordinates are
  held at the current point's values.
- The run is split into segments of `segment` evaluations. Segment 0 starts from the best of `n_init`
  Sobol points; every later segment starts from `q` random known-feasible points (a restart). Within
  a segment the current point is the segment's best (penalized) verified point; the step size halves
  after each batch that did not improve it (a backtracking line search made of verified steps).
- For q > 1 the batch takes steps of lr, lr/2, lr/4, ... from the current point.

Stateless like every strategy: the segment, current point and step size are read off the history.
Spaces without continuous parameters raise SpecError.
"""

from __future__ import annotations

import math
import warnings
from typing import Optional

import torch

from analytical.codes import DTYPE
from analytical.space import DesignSpace
from analytical.specs import SpecError
from analytical.step.model import evaluate
from deepflow.run.objectives import Objective
from deepflow.strategies.base import History, check_q
from deepflow.strategies.random_search import RandomSearch, SobolSearch, fresh


def continuous_mask(space: DesignSpace) -> torch.Tensor:
    return torch.tensor([math.isinf(p.cardinality) for p in space.parameters], dtype=torch.bool)



def finite_gradient(grad: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """`n x d` gradient with the discrete coordinates (`mask` false, `d`) zeroed and non-finite entries zeroed. A
    non-finite entry in a continuous coordinate is a derivative the step model does not define, i.e. a bug in it:
    one warning says how many (split-K's 0 x inf once made half the joint space's chip coordinates NaN, and this
    guard zeroed them silently for 20 stops)."""
    bad = ~torch.isfinite(grad) & mask
    if bool(bad.any()):
        warnings.warn(f"gradient strategy: {int(bad.sum())} non-finite gradient entries in continuous coordinates "
                      f"(of {int(mask.sum()) * grad.shape[0]}) set to 0", RuntimeWarning, stacklevel=2)
    return torch.nan_to_num(grad, nan=0.0, posinf=0.0, neginf=0.0) * mask.to(grad.dtype)

class GradientSearch:
    """Projected gradient descent with verified steps (see the module docstring)."""

    name = "gradient"

    def __init__(self, objective: Optional[Objective] = None, lr: float = 0.2, min_lr: float = 1e-3,
                 segment: int = 40, n_init: int = 8, penalty: float = 10.0):
        self.objective = (objective or Objective("step_time")).validate()
        self.lr, self.min_lr, self.segment, self.n_init, self.penalty = lr, min_lr, segment, n_init, penalty
        if not (lr > 0 and min_lr > 0 and segment >= 2 and n_init >= 1 and penalty >= 0):
            raise SpecError("strategy[gradient]", "lr/min_lr/segment/n_init/penalty",
                            (lr, min_lr, segment, n_init, penalty), "lr, min_lr > 0, segment >= 2, n_init >= 1, "
                            "penalty >= 0")

    def penalized(self, space: DesignSpace, u: torch.Tensor) -> torch.Tensor:
        """`n` penalized objective of points `u n x d` (differentiable in the continuous coordinates)."""
        designs = space.to_batch(u)
        result = evaluate(designs, space.efficiency)  # the space's constants (a calibration's, else the defaults)
        Y = self.objective.objectives(result)
        C = self.objective.constraints(result, designs)
        modelled = [j for j, name in enumerate(self.objective.constraint_names) if name != "other"]
        return Y.sum(-1) + self.penalty * torch.relu(C[:, modelled]).sum(-1)

    def _history_penalized(self, history: History) -> torch.Tensor:
        value = history.Y.sum(-1)
        if history.C is not None:
            modelled = [j for j, name in enumerate(self.objective.constraint_names)
                        if name != "other" and j < history.C.shape[1]]
            value = value + self.penalty * torch.relu(history.C[:, modelled]).sum(-1)
            if "other" in self.objective.constraint_names:
                other = self.objective.constraint_names.index("other")
                value = torch.where(history.C[:, other] > 0, torch.full_like(value, math.inf), value)
        return value

    def gradient(self, space: DesignSpace, u: torch.Tensor) -> torch.Tensor:
        """`n x d` gradient of the penalized objective (zero in the discrete coordinates)."""
        mask = continuous_mask(space)
        x = u.clone().requires_grad_(True)
        self.penalized(space, x).sum().backward()
        return finite_gradient(x.grad.detach(), mask)

    def propose(self, space: DesignSpace, history: History, q: int, seed: int) -> torch.Tensor:
        check_q(q)
        mask = continuous_mask(space)
        if not bool(mask.any()):
            raise SpecError("strategy[gradient]", "space", space.name, "a space with continuous parameters")
        if history.n < self.n_init:
            return SobolSearch().propose(space, history, min(q, self.n_init - history.n), seed)
        start = 0 if history.n < self.segment else (history.n // self.segment) * self.segment
        if history.n == start and start > 0:  # restart: random known-feasible points
            return RandomSearch().propose(space, history, q, seed)
        value = self._history_penalized(history)[start:]
        best = int(torch.argmin(value)) + start
        # steps since the segment's best improved, in batches of q: the step size halves each time
        failures = (history.n - 1 - best) // q
        lr = self.lr * 0.5 ** failures
        if lr < self.min_lr:
            return RandomSearch().propose(space, history, q, seed)
        x = history.X[best:best + 1]
        g = self.gradient(space, x)[0]
        scale = float(g.abs().max())
        if scale == 0.0:
            return RandomSearch().propose(space, history, q, seed)
        steps = lr * 0.5 ** torch.arange(q, dtype=DTYPE)
        cand = (x - steps.unsqueeze(-1) * (g / scale).unsqueeze(0)).clamp(0.0, 1.0)
        out = fresh(space, cand, history, q)
        return out
