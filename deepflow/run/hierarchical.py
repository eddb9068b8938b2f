"""Hierarchical mode `inner=best_mapping` (the PHAZE / DeepFlow structure): the optimizer proposes
technology, chip and cluster; the core's exhaustive best-mapping search picks the mapping of each.

`BestMappingSpace(space)` is the outer space: the parameters of `space` that are not searched
mapping fields (`analytical.search.MAPPING_FIELDS`: tp, pp, dp, cp, ep, vp, sequence parallel,
micro-batch, recompute, ZeRO stage, distributed optimizer). Precision, flash attention and the
overlap flags stay outer parameters if the space varies them (the search takes them as given).
It has what the loop and the strategies use of a `DesignSpace` (`dim`, `parameters`, `names`,
`size`, `decode`, `encode`, `sample`, `known_feasible`, `to_batch`, `evaluate`), so any strategy runs
on it unchanged: `evaluate(u)` answers, for each outer point, with the evaluation of its fastest
feasible mapping (every valid mapping of `analytical.search.enumerate_mappings_of` evaluated in
one batched call), or with the reason of the template's mapping when no mapping is feasible; a
chip that cannot be built keeps its derivation reason. `to_batch(u)` gives the same designs (with
their best mappings), differentiable in u's continuous coordinates.

The known constraints of the outer space are the chip's (implied splits >= 0): mapping rules are the
inner search's business.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Callable, Optional

import torch

from analytical.codes import DTYPE
from analytical.design import DesignBatch
from analytical.result import StepResult
from analytical.search import MAPPING_FIELDS, SearchOptions, enumerate_mappings_of
from analytical.space import DesignSpace, sample_unit_cube
from analytical.specs import SpecError
from analytical.step.efficiency import Efficiency
from analytical.step.model import evaluate


def search_best_mapping(design: DesignBatch, options: Optional[SearchOptions], eff: Efficiency
                        ) -> Optional[dict[str, float]]:
    """The mapping fields of the fastest feasible mapping of one design (a batch of one) among every
    valid mapping (`enumerate_mappings_of`, evaluated in one batched call), or None."""
    grid = enumerate_mappings_of(design, options)
    if grid.batch_size == 0:
        return None
    result = evaluate(grid, eff)
    time_s = torch.where(result.feasible, result.step_time_s, torch.full_like(result.step_time_s, math.inf))
    best = int(torch.argmin(time_s))
    if not bool(result.feasible[best]):
        return None
    return {name: float(getattr(grid, name)[best]) for name in MAPPING_FIELDS}


def _one_by_one(fn: Callable, arguments: list[tuple]) -> list:
    return [fn(*args) for args in arguments]


class BestMappingSpace:
    """The outer space of `space` with the mapping chosen by exhaustive search (module docstring)."""

    def __init__(self, space: DesignSpace, options: Optional[SearchOptions] = None, cache_size: int = 4096,
                 efficiency: Optional[Efficiency] = None, map_fn: Optional[Callable] = None):
        outer = tuple(p for p in space.parameters if p.name not in MAPPING_FIELDS)
        if not outer:
            raise SpecError(f"space[{space.name}]", "parameters", space.names,
                            "some parameter outside the mapping for inner=best_mapping")
        # the constants of the inner search and of `evaluate` (a calibration's): the space's own by default
        self.efficiency = space.efficiency if efficiency is None else efficiency
        self.space = dataclasses.replace(space, efficiency=self.efficiency)
        self.outer = dataclasses.replace(self.space, name=f"{space.name}/outer", parameters=outer)
        self.options = options
        self.cache_size = cache_size
        self._cache: dict[tuple, dict[str, float]] = {}  # (constants, outer point) -> its best mapping's fields
        # how the searches of a batch's new points run: map_fn(search_best_mapping, [(design, options,
        # eff), ...]) -> their results in order; one after another here by default, Ray tasks with
        # deepflow.scale.executor.RayMap (`deepflow optimize inner=best_mapping executor=ray`)
        self.map_fn = map_fn

    # the DesignSpace surface the loop and strategies use
    @property
    def name(self) -> str:
        return self.outer.name

    @property
    def parameters(self):
        return self.outer.parameters

    @property
    def dim(self) -> int:
        return self.outer.dim

    @property
    def names(self) -> list[str]:
        return self.outer.names

    @property
    def size(self) -> float:
        return self.outer.size

    def decode(self, u: torch.Tensor) -> dict[str, torch.Tensor]:
        return self.outer.decode(u)

    def encode(self, values: dict[str, torch.Tensor]) -> torch.Tensor:
        return self.outer.encode(values)

    def known_feasible(self, u: torch.Tensor) -> torch.Tensor:
        return self.outer.splits_hold(u)

    def chip_features(self, u: torch.Tensor) -> Optional[torch.Tensor]:
        return self.outer.chip_features(u)

    def sample(self, n: int, method: str = "sobol", seed: int = 0, known_feasible: bool = True,
               max_draws: int = 64) -> torch.Tensor:
        return sample_unit_cube(self.outer.name, self.dim, n, method, seed,
                                self.known_feasible if known_feasible else None, max_draws)

    # the inner search
    def best_mapping(self, design: DesignBatch, eff: Optional[Efficiency] = None) -> Optional[dict[str, float]]:
        """The mapping fields of the fastest feasible mapping of one design (a batch of one), or None."""
        return search_best_mapping(design, self.options, self.efficiency if eff is None else eff)

    def _mappings(self, u: torch.Tensor, eff: Efficiency) -> list[Optional[dict[str, float]]]:
        batch, derived = self.outer.to_batch_and_chip(u.detach())
        keys = [(eff, u[i].detach().numpy().tobytes()) for i in range(u.shape[0])]
        new = [i for i, key in enumerate(keys) if key not in self._cache and keys.index(key) == i]
        searched = [i for i in new if derived is None or int(derived.reason[i]) == 0]  # a chip that can be built
        arguments = [(batch.index(slice(i, i + 1)), self.options, eff) for i in searched]
        found = (self.map_fn or _one_by_one)(search_best_mapping, arguments)
        results = dict(zip(searched, found))
        out = {}
        for i in new:
            out[keys[i]] = results.get(i)
        answers = [out[key] if key in out else self._cache[key] for key in keys]
        for key, value in out.items():
            if len(self._cache) >= self.cache_size:
                self._cache.pop(next(iter(self._cache)))
            self._cache[key] = value
        return answers

    def to_batch(self, u: torch.Tensor, eff: Optional[Efficiency] = None) -> DesignBatch:
        """`(n, d)` outer points to their designs with their best mappings (the template's mapping
        where none is feasible); differentiable in the continuous coordinates of u."""
        batch = self.outer.to_batch(u)
        mappings = self._mappings(u, self.efficiency if eff is None else eff)
        columns = {}
        for name in MAPPING_FIELDS:
            default = getattr(batch, name)
            values = [m[name] if m is not None else float(default[i]) for i, m in enumerate(mappings)]
            columns[name] = torch.tensor(values, dtype=DTYPE)
        return batch.replace(**columns)

    def evaluate(self, u: torch.Tensor, eff: Optional[Efficiency] = None) -> StepResult:
        """Each outer point evaluated with its best mapping (module docstring), with `eff`, else the
        space's `efficiency`."""
        eff = self.efficiency if eff is None else eff
        batch = self.to_batch(u, eff)
        result = evaluate(batch, eff)
        if self.outer.chip is None:
            return result
        _, derived = self.outer.to_batch_and_chip(u.detach())
        reason = torch.where(derived.reason != 0, derived.reason, result.reason)
        return dataclasses.replace(result, reason=reason, feasible=reason == 0)
