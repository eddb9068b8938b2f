"""Per-evaluation memoization of derived terms: `evaluate` computes each derived tensor (the local
tokens, a layer's parameters, ...) once per chunk, however many terms use it."""

from __future__ import annotations

import functools

from analytical.design import DesignBatch

_MEMO = "_per_evaluation_memo"


def memoizing(d: DesignBatch) -> DesignBatch:
    """A private shallow copy of `d` on which `per_evaluation` functions compute each derived
    tensor once (same tensors, same graph; `step.evaluate` uses one per chunk, so the many terms
    that need, say, the local tokens or the layer's parameters share one computation)."""
    copy = object.__new__(type(d))
    copy.__dict__.update(d.__dict__)
    copy.__dict__[_MEMO] = {}
    return copy


def per_evaluation(fn):
    """Memoize `fn(d, *hashable_args)` on a batch made by `memoizing`; other batches compute afresh."""

    @functools.wraps(fn)
    def wrapper(d, *args, **kwargs):
        memo = d.__dict__.get(_MEMO)
        if memo is None or kwargs:
            return fn(d, *args, **kwargs)
        key = (fn, *args)
        if key not in memo:
            memo[key] = fn(d, *args)
        return memo[key]

    return wrapper
