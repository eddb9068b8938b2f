"""Input encodings of unit-cube points for the neural surrogates: discrete bins snapped, categoricals one-hot.

`analytical.space` maps a discrete parameter (log2, integer, categorical) with `k` values to `k`
equal bins of its unit coordinate: every `u` in a bin is the same design. A point drawn uniformly in
the cube (a sampler, an optimizer's proposal) carries a within-bin offset that the analytical model
ignores; a network fed that offset must learn a step at each bin edge. `snap_to_bins` replaces each
discrete coordinate by its bin centre (`(floor(u k) + 0.5) / k`, the value `DesignSpace.encode`
gives), so that the model sees exactly what the analytical model sees. `one_hot` widens categorical
coordinates into one indicator column per choice (their order means nothing).

Dims are given as `[(column, cardinality), ...]` pairs (JSON-ready as lists of two integers).
"""

from __future__ import annotations

from typing import Any, Sequence

import torch

from analytical.specs import SpecError


def check_dims(dims: Any, where: str, name: str) -> list[tuple[int, int]]:
    """`dims` as a list of distinct `(column >= 0, cardinality >= 2)` integer pairs, else `SpecError`."""
    allowed = "a sequence of [column, cardinality] pairs of integers (column >= 0, cardinality >= 2), distinct columns"
    if isinstance(dims, (str, bytes)):
        raise SpecError(where, name, dims, allowed)
    try:
        pairs = [tuple(pair) for pair in dims]
    except TypeError:
        raise SpecError(where, name, dims, allowed) from None
    ok = all(len(p) == 2 and all(isinstance(v, int) and not isinstance(v, bool) for v in p)
             and p[0] >= 0 and p[1] >= 2 for p in pairs)
    if not ok or len({p[0] for p in pairs}) != len(pairs):
        raise SpecError(where, name, dims, allowed)
    return [(int(c), int(k)) for c, k in pairs]


def check_columns_fit(owner: Any, d: int, **dims: Sequence[tuple[int, int]]) -> None:
    """SpecError naming `owner`'s parameter (`discrete_dims=...`, `one_hot_dims=...`: its checked
    pairs) when one of them names a column >= d, the width of the data it is fitted on or loaded for."""
    for name, pairs in dims.items():
        if any(column >= d for column, _ in pairs):
            raise SpecError(type(owner).__name__, name, getattr(owner, name), f"columns < d = {d}")


def unit_scale(spread: torch.Tensor) -> torch.Tensor:
    """A per-column scale (std or range, `(c,)`) with columns that do not vary in training set to 1.

    Such a column (a category the training split left out, a fixed parameter) would otherwise be
    divided by ~0 and fed to the model at ~1e12 wherever it differs at predict."""
    return torch.where(spread > 1e-12, spread, torch.ones_like(spread))


def bin_index(U: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """`n x c` bin indices (as floats) in `[0, k)` of unit coordinates `U: n x c` with `k: (c,)` bins
    per column (as `Parameter.decode` reads them)."""
    return torch.minimum(torch.floor(U * k), k - 1).clamp_min(0)


def snap_to_bins(X: torch.Tensor, dims: Sequence[tuple[int, int]]) -> torch.Tensor:
    """`X: n x d` with each listed column replaced by its bin centre (a copy; X untouched).

    Coordinates outside [0, 1] (designs beyond the trained range, which `surrogates.columns`
    encodes linearly on the same grid of bin centres) are kept, so that the model extrapolates."""
    if not dims:
        return X
    columns = [column for column, _ in dims]
    k = torch.tensor([k for _, k in dims], dtype=X.dtype)
    u = X[:, columns]
    centre = (bin_index(u, k) + 0.5) / k
    X = X.clone()
    X[:, columns] = torch.where((u >= 0) & (u <= 1), centre, u)
    return X


def one_hot(X: torch.Tensor, dims: Sequence[tuple[int, int]]) -> torch.Tensor:
    """`n x d'`: the listed columns of `X: n x d` replaced, in place of each, by `k` indicator columns
    (`d' = d + sum(k - 1)`); other columns kept in order."""
    if not dims:
        return X
    widths = dict(dims)
    start, keep, keep_at, cats, cat_at, ks = 0, [], [], [], [], []
    for column in range(X.shape[1]):  # where each input column lands in the output
        if column in widths:
            cats.append(column)
            cat_at.append(start)
            ks.append(widths[column])
            start += widths[column]
        else:
            keep.append(column)
            keep_at.append(start)
            start += 1
    out = X.new_zeros(X.shape[0], start)
    out[:, keep_at] = X[:, keep]
    k = torch.tensor(ks, dtype=X.dtype)
    code = bin_index(X[:, cats], k).long()
    out.scatter_(1, code + torch.tensor(cat_at), 1.0)
    return out


def encoded_width(d: int, one_hot_dims: Sequence[tuple[int, int]]) -> int:
    """Width of `one_hot(X: n x d, one_hot_dims)`."""
    return d + sum(k - 1 for _, k in one_hot_dims)
