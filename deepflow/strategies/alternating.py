"""BO's `mixed="alternating"` search of a space too large to enumerate: BoTorch's
`optimize_acqf_mixed_alternating` over the unit cube (`deepflow.strategies.bo`, where the default is
the candidate set instead: README, "Optimizer: co-design benchmark")."""

from __future__ import annotations

import math
import warnings

import torch
from botorch.optim import optimize_acqf, optimize_acqf_mixed_alternating

from analytical.codes import DTYPE
from analytical.space import DesignSpace
from deepflow.strategies.base import History, design_keys
from deepflow.strategies.random_search import fresh
from deepflow.strategies.space_grid import bin_centres, cat_dims, snap


def optimize_mixed(space: DesignSpace, history: History, acqf, q: int, seed: int, num_restarts: int, raw_samples: int,
                   maxiter_alternating: int) -> torch.Tensor:
    """`q x d` proposals by `optimize_acqf_mixed_alternating` (discrete and categorical dimensions at their
    bin centres; `optimize_acqf` on a purely continuous space), repaired (`repair`)."""
    centres = bin_centres(space)
    bounds = torch.stack([torch.zeros(space.dim, dtype=DTYPE), torch.ones(space.dim, dtype=DTYPE)])
    for i, values in centres.items():
        bounds[0, i], bounds[1, i] = values[0], values[-1]
    fixed = {i: v[0] for i, v in centres.items() if len(v) == 1}
    cats = {i: v for i, v in centres.items() if i in cat_dims(space) and i not in fixed}
    disc = {i: v for i, v in centres.items() if i not in cats and i not in fixed}
    torch.manual_seed(seed % (2**31))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if centres:
            X, _ = optimize_acqf_mixed_alternating(
                acqf, bounds=bounds, discrete_dims=disc or None, cat_dims=cats or None, q=q,
                num_restarts=num_restarts, raw_samples=raw_samples,
                fixed_features=fixed or None, options={"maxiter_alternating": maxiter_alternating})
        else:
            X, _ = optimize_acqf(acqf, bounds=bounds, q=q, num_restarts=num_restarts,
                                 raw_samples=raw_samples, sequential=True)
    return repair(space, history, acqf, X.detach(), seed)


def repair(space: DesignSpace, history: History, acqf, X: torch.Tensor, seed: int) -> torch.Tensor:
    """`X q x d` with each proposal that breaks a known constraint or repeats a design replaced by the
    acquisition's best point of a known-feasible repair set: its continuous coordinates with the discrete
    coordinates of Sobol known-feasible points, and those points themselves."""
    X = snap(space, X)
    ok = space.known_feasible(X)
    seen = set(design_keys(space, history.X))
    keys = design_keys(space, X)
    taken: set = set()
    for i, k in enumerate(keys):
        if k in seen or k in taken:
            ok[i] = False
        taken.add(k)
    if bool(ok.all()):
        return X
    pool = space.sample(512, seed=seed % (2**31))
    continuous = torch.tensor([math.isinf(p.cardinality) for p in space.parameters])
    out = []
    for i in range(X.shape[0]):
        if bool(ok[i]):
            out.append(X[i:i + 1])
            continue
        mixed = pool.clone()
        mixed[:, continuous] = X[i, continuous]
        cand = torch.cat([mixed[space.known_feasible(mixed)], pool])
        cand = fresh(space, cand, History(X=torch.cat([history.X] + out), Y=torch.zeros(history.n + len(out), 1,
                                                                                         dtype=DTYPE),
                                          feasible=torch.zeros(history.n + len(out), dtype=torch.bool)),
                     cand.shape[0])
        with torch.no_grad():
            values = torch.cat([acqf(c.unsqueeze(-2)) for c in cand.split(1024)])
        out.append(cand[int(torch.argmax(values))].unsqueeze(0))
    return torch.cat(out)
