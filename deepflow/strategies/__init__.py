"""Strategies that propose designs to verify: BoTorch BO and the baselines, behind one interface
(`deepflow.strategies.base.Strategy`). `make_strategy(name, **params)` builds one by name."""

from __future__ import annotations

import importlib

from analytical.specs import SpecError
from deepflow.strategies.base import History, Strategy

# name -> "module:class", imported when used (BoTorch only for "bo")
STRATEGIES = {
    "bo": "deepflow.strategies.bo:BayesianOptimization",
    "random": "deepflow.strategies.random_search:RandomSearch",
    "sobol": "deepflow.strategies.random_search:SobolSearch",
    "evolution": "deepflow.strategies.evolution:RegularizedEvolution",
    "nsga2": "deepflow.strategies.evolution:NSGA2",
    "gradient": "deepflow.strategies.gradient:GradientSearch",
}


def make_strategy(name: str, **params) -> Strategy:
    """The strategy `name` (one of `STRATEGIES`) built with `params`; a bad name or parameter raises
    SpecError naming the field."""
    if name not in STRATEGIES:
        raise SpecError("strategy", "name", name, "one of " + ", ".join(STRATEGIES))
    module, _, cls = STRATEGIES[name].partition(":")
    factory = getattr(importlib.import_module(module), cls)
    try:
        return factory(**params)
    except TypeError as exc:
        raise SpecError(f"strategy[{name}]", "params", sorted(params), f"the parameters of {cls} ({exc})") from None


__all__ = ["History", "Strategy", "STRATEGIES", "make_strategy"]
