"""A searchable design space: typed parameters, the unit cube [0, 1]^d, sampling and evaluation.

A `DesignSpace` varies some fields of a template design (a `DesignBatch` of one) and keeps the
others. Each `Parameter` names a `DesignBatch` field (SI units, categorical codes) and has a kind:

- `continuous`: low + u (high - low), or geometric between low and high when `log` is set;
- `integer`: the integers low..high in equal bins of u;
- `log2`: the powers of two from low to high (both powers of two) in equal bins;
- `categorical`: the codes of `choices` (names, see `analytical.design.*_CODES`) in equal bins.

`encode` maps a value to the centre of its bin, so `decode(encode(x)) == x` for every value in the
space. Data-parallelism is derived (dp = num_devices / (tp pp cp)) so that the product of degrees
equals the device count whenever it can; points where it cannot, and points that break any other
mapping rule of `analytical.step.feasibility`, violate a *known constraint* and `sample` filters them
out. Points that pass may still be infeasible (out of memory): `evaluate` tells.

Tied fields: `peak_bf16_flops_per_s` scales every tensor precision's peak by the same factor as
the template's bf16 peak (the ratios of one architecture), so a space need not vary each one.

Chip parameters (the joint space): a space with a `chip` template (`analytical.chip.spec.ChipSpec`)
may also vary the inputs of the chip derivation (`analytical.chip.spec.CHIP_FIELDS`: technology
categoricals with their names as choices, die area and power budgets, split fractions, supply,
FLOP/clk per unit, scale-out lanes). `to_batch` derives the accelerator of every point
(`analytical.chip.derive`) and puts it in place of the template's accelerator fields; `evaluate`
merges the chip's feasibility reason (it wins over the step's). The last part of each split is
implied (`1 - the others`, e.g. `area_other_fraction`); a point where it would be negative breaks
a known constraint, like a mapping whose degrees do not multiply to the device count.

All tensors are float64; points are `(n, d)`, values `(n,)` per parameter. No Hydra or MLflow here.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, fields
from typing import Callable, Optional, Sequence

import torch

from analytical.chip.derive import DerivedChips, derive
from analytical.chip.spec import CHIP_CATEGORY_CODES, CHIP_FIELDS, IMPLIED_FRACTIONS, ChipBatch, ChipSpec, stack_chips
from analytical.choices import DEVICE_COUNTS, SIZE_COUNTS, count_limit, count_reason
from analytical.codes import (CNN_ARCH_CODES, CUDA_GRAPH_CODES, DP_MODE_CODES, DTYPE, EP_DISPATCHER_CODES, FFN_CODES,
                              KIND_CODES, MASTER_PARAMS_CODES, OPTIMIZER_STATE_DTYPE_CODES, PRECISION_CODES,
                              RECOMPUTE_CODES, TOPOLOGY_CODES)
from analytical.design import DESIGN_FIELDS, DesignBatch
from analytical.result import StepResult
from analytical.specs import SpecError
from analytical.step.efficiency import DEFAULT_EFFICIENCY, Efficiency
from analytical.step.feasibility import mapping_reasons, peak_for_precision
from analytical.step.model import evaluate

PARAMETER_KINDS = ("continuous", "integer", "log2", "categorical")
CATEGORY_CODES = {"precision": PRECISION_CODES, "recompute": RECOMPUTE_CODES, "topology": TOPOLOGY_CODES,
                  "kind": KIND_CODES, "ffn_type": FFN_CODES, "ep_dispatcher": EP_DISPATCHER_CODES,
                  "cuda_graph": CUDA_GRAPH_CODES, "cnn_arch": CNN_ARCH_CODES, "dp_mode": DP_MODE_CODES,
                  "optimizer_state_dtype": OPTIMIZER_STATE_DTYPE_CODES, "master_params": MASTER_PARAMS_CODES,
                  **CHIP_CATEGORY_CODES}
SIZES = DEVICE_COUNTS + SIZE_COUNTS  # integer fields whose values are bounded (analytical.choices)
# human units a config may give bounds in (`unit:`), converted to SI when parsed
UNITS = {"TFLOP/s": 1e12, "TB/s": 1e12, "GB/s": 1e9, "Gbit/s": 1e9 / 8.0, "GiB": 2.0**30, "MiB": 2.0**20,
         "us": 1e-6}
# accelerator fields a chip derivation produces (a space with a chip cannot also vary them)
DERIVED_FIELDS = DESIGN_FIELDS[:DESIGN_FIELDS.index("num_devices")]
# the derived chip's figures BO's GPs take beside the unit-cube point (`DesignSpace.chip_features`)
CHIP_FEATURES = ("peak_bf16_flops_per_s", "hbm_bw_bytes_per_s", "hbm_bytes", "scale_up_bw_bytes_per_s",
                 "scale_out_bw_bytes_per_s", "compute_units")
TENSOR_PEAKS = ("peak_tf32_flops_per_s", "peak_fp16_flops_per_s", "peak_bf16_flops_per_s", "peak_fp8_flops_per_s",
                "peak_fp4_flops_per_s")


@dataclass(frozen=True)
class Parameter:
    """One searchable field of `DesignBatch` or input of the chip derivation (`CHIP_FIELDS`).
    `choices` are names for categorical fields with codes (e.g. recompute: none, selective, full;
    node: N7, N5, ...), numbers otherwise (e.g. zero_stage: 0, 1, 2, 3)."""

    name: str
    kind: str
    low: float = 0.0
    high: float = 1.0
    choices: tuple = ()
    log: bool = False

    def validate(self) -> "Parameter":
        where = f"space.parameters[{self.name}]"
        if self.name not in DESIGN_FIELDS and self.name not in CHIP_FIELDS:
            raise SpecError(where, "name", self.name, "a DesignBatch field (" + ", ".join(DESIGN_FIELDS)
                            + ") or a chip input (" + ", ".join(CHIP_FIELDS) + ")")
        if self.name == "dp":
            raise SpecError(where, "name", self.name, "any field but dp (derived from the device count)")
        if self.kind not in PARAMETER_KINDS:
            raise SpecError(where, "kind", self.kind, "one of " + ", ".join(PARAMETER_KINDS))
        if self.kind == "categorical":
            if not self.choices:
                raise SpecError(where, "choices", self.choices, "at least one value")
            codes = CATEGORY_CODES.get(self.name)
            for choice in self.choices:
                if codes is not None and choice not in codes:
                    raise SpecError(where, "choices", choice, "one of " + ", ".join(codes))
                if codes is None and (isinstance(choice, str) or not math.isfinite(float(choice))):
                    raise SpecError(where, "choices", choice, "numbers")
            return self._check_count(where, "choices", max(self.choices) if self.name in SIZES else 0)
        if not (math.isfinite(self.low) and math.isfinite(self.high)) or self.low > self.high:
            raise SpecError(where, "low/high", (self.low, self.high), "finite numbers with low <= high")
        self._check_count(where, "high", self.high)
        if (self.log or self.kind == "log2") and self.low <= 0:
            raise SpecError(where, "low", self.low, "> 0 for a log or log2 parameter")
        if self.kind == "log2":
            for bound in (self.low, self.high):
                if 2.0 ** round(math.log2(bound)) != bound:
                    raise SpecError(where, "low/high", bound, "powers of two")
        if self.kind == "integer" and (self.low != int(self.low) or self.high != int(self.high)):
            raise SpecError(where, "low/high", (self.low, self.high), "integers")
        return self

    def _check_count(self, where: str, field: str, largest: float) -> "Parameter":
        """A count of devices or a size (`analytical.choices.count_limit`) ranges up to its limit at most."""
        if self.name in SIZES and largest > count_limit(self.name):
            raise SpecError(where, field, largest, f"at most {count_limit(self.name):,} for {self.name} "
                            f"({count_reason(self.name)})")
        return self

    @property
    def values(self) -> Optional[torch.Tensor]:
        """Every value of a discrete parameter, as codes (`(k,)`); None for continuous ones."""
        if self.kind == "categorical":
            codes = CATEGORY_CODES.get(self.name)
            return torch.tensor([codes[c] if codes else float(c) for c in self.choices], dtype=DTYPE)
        if self.kind == "integer":
            return torch.arange(self.low, self.high + 1.0, dtype=DTYPE)
        if self.kind == "log2":
            return 2.0 ** torch.arange(math.log2(self.low), math.log2(self.high) + 1.0, dtype=DTYPE)
        return None

    @property
    def cardinality(self) -> float:
        values = self.values
        return math.inf if values is None else float(values.numel())

    def decode(self, u: torch.Tensor) -> torch.Tensor:
        """`(n,)` unit-interval coordinates to `(n,)` values."""
        values = self.values
        if values is None:
            if self.log:
                return self.low * (self.high / self.low) ** u
            return self.low + u * (self.high - self.low)
        index = torch.clamp(torch.floor(u * values.numel()), 0, values.numel() - 1).long()
        return values[index]

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        """`(n,)` values to unit-interval coordinates (bin centres for discrete parameters)."""
        values = self.values
        if values is None:
            if self.log:
                return torch.log(x / self.low) / math.log(self.high / self.low) if self.high > self.low \
                    else torch.zeros_like(x)
            return (x - self.low) / (self.high - self.low) if self.high > self.low else torch.zeros_like(x)
        index = torch.argmin((x.unsqueeze(-1) - values).abs(), dim=-1)
        return (index.to(DTYPE) + 0.5) / values.numel()


@dataclass
class DesignSpace:
    """Parameters varied around a template design (a `DesignBatch` of one) and, optionally, a
    template chip (`ChipSpec`) whose derived accelerator replaces the template's. `efficiency`: the
    constants `evaluate` uses (a calibration's, else the defaults). `device` / `dtype`: where and in
    which float type the analytical model computes (`cuda`, `torch.float32`: see
    `experiments/benchmarks/bench_device.py` for the speed and the error); results come back as
    float64 CPU tensors whatever they are."""

    name: str
    parameters: tuple[Parameter, ...]
    template: DesignBatch
    chip: Optional[ChipSpec] = None
    efficiency: Efficiency = DEFAULT_EFFICIENCY
    device: str = "cpu"
    dtype: torch.dtype = DTYPE

    def validate(self) -> "DesignSpace":
        if self.template.batch_size != 1:
            raise SpecError(f"space[{self.name}]", "template", self.template.batch_size, "a batch of one design")
        names = [p.validate().name for p in self.parameters]
        if self.chip is None:
            chip_only = [n for n in names if n not in DESIGN_FIELDS]
            if chip_only:
                raise SpecError(f"space[{self.name}]", "chip", None, f"a chip template for the chip inputs {chip_only}")
        else:
            self.chip.validate()
            derived = [n for n in names if n in DERIVED_FIELDS and n not in CHIP_FIELDS]
            if derived:
                raise SpecError(f"space[{self.name}]", "parameters", derived,
                                "no accelerator field the chip derives (vary the chip's inputs instead)")
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise SpecError(f"space[{self.name}]", "parameters", duplicates, "each field at most once")
        if not names:
            raise SpecError(f"space[{self.name}]", "parameters", (), "at least one parameter")
        return self

    @property
    def dim(self) -> int:
        return len(self.parameters)

    @property
    def names(self) -> list[str]:
        return [p.name for p in self.parameters]

    @property
    def size(self) -> float:
        """Number of points (inf when a parameter is continuous), before constraints."""
        return math.prod(p.cardinality for p in self.parameters)

    @property
    def discrete_size(self) -> float:
        """Number of points of the discrete parameters alone, before constraints."""
        return math.prod(p.cardinality for p in self.parameters if p.kind != "continuous")

    @property
    def chip_names(self) -> list[str]:
        """The parameters that are chip-derivation inputs (none without a chip template)."""
        return [p.name for p in self.parameters if self.chip is not None and p.name in CHIP_FIELDS]

    def chip_batch(self, u: torch.Tensor, values: Optional[dict[str, torch.Tensor]] = None) -> Optional[ChipBatch]:
        """`(n, d)` points (or their decoded `values`) to the `ChipBatch` of their chips (None
        without a chip template)."""
        if self.chip is None:
            return None
        values = self.decode(u) if values is None else values
        return stack_chips([self.chip]).expand(u.shape[0]).replace(**{k: values[k] for k in self.chip_names})

    def decode(self, u: torch.Tensor) -> dict[str, torch.Tensor]:
        """`(n, d)` points of the unit cube to `{name: (n,)}` values."""
        return {p.name: p.decode(u[:, i]) for i, p in enumerate(self.parameters)}

    def encode(self, values: dict[str, torch.Tensor]) -> torch.Tensor:
        """`{name: (n,)}` values to `(n, d)` points."""
        return torch.stack([p.encode(values[p.name].to(DTYPE)) for p in self.parameters], dim=-1)

    def to_batch(self, u: torch.Tensor) -> DesignBatch:
        """`(n, d)` points to the `DesignBatch` of their designs (template fields elsewhere)."""
        return self.to_batch_and_chip(u)[0]

    def to_batch_and_chip(self, u: torch.Tensor) -> tuple[DesignBatch, Optional[DerivedChips]]:
        """`(n, d)` points to their `DesignBatch` and, with a chip template, the derivation of their
        chips (its `reason` says which chips cannot be built); differentiable in u's continuous
        coordinates."""
        values = self.decode(u)
        t = self.template
        derived = None
        if self.chip is not None:
            chip_names = set(self.chip_names)
            derived = derive(self.chip_batch(u, values))
            values = {k: v for k, v in values.items() if k not in chip_names}
            values.update({k: v for k, v in derived.accelerator.items() if k in DESIGN_FIELDS})
        elif "peak_bf16_flops_per_s" in values:
            scale = values["peak_bf16_flops_per_s"] / t.peak_bf16_flops_per_s
            values.update({name: getattr(t, name) * scale for name in TENSOR_PEAKS})
        batch = t.expand(u.shape[0]).replace(**values)
        dp = batch.num_devices / (batch.tp * batch.pp * batch.cp)
        return batch.replace(dp=torch.clamp_min(dp, 1.0)), derived

    def chip_features(self, u: torch.Tensor) -> Optional[torch.Tensor]:
        """`(n, len(CHIP_FEATURES))` figures of the chips the points derive (SI units; None without a
        chip template): what the step model sees of a chip, so smoother in them than in the splits that
        make it (each split reaches the step through min()s of area, power and shoreline bounds)."""
        if self.chip is None or not self.chip_names:
            return None
        derived = derive(self.chip_batch(u.detach()))
        return torch.stack([derived.accelerator[name] for name in CHIP_FEATURES], dim=-1)

    def splits_hold(self, u: torch.Tensor) -> torch.Tensor:
        """`(n,)` bool: every implied split fraction (`1 - the others`) is >= 0."""
        ok = torch.ones(u.shape[0], dtype=torch.bool)
        if self.chip is None or not self.chip_names:
            return ok
        chips = self.chip_batch(u)
        for implied in IMPLIED_FRACTIONS:
            ok &= chips.fraction(implied) >= -1e-12
        return ok

    def known_feasible(self, u: torch.Tensor) -> torch.Tensor:
        """`(n,)` bool: the point breaks no known constraint (mapping rules, integer dp, splits that
        sum to 1 with no negative part)."""
        batch = self.to_batch(u)
        return (mapping_reasons(batch, peak_for_precision(batch)) == 0) & self.splits_hold(u)

    def sample(self, n: int, method: str = "sobol", seed: int = 0, known_feasible: bool = True,
               max_draws: int = 64) -> torch.Tensor:
        """`(n, d)` points from a scrambled Sobol sequence or uniformly at random, keeping only those
        that satisfy the known constraints when `known_feasible`. Raises SpecError naming the
        space when fewer than n are found in `max_draws` rounds (the constraints leave too little)."""
        return sample_unit_cube(self.name, self.dim, n, method, seed,
                                self.known_feasible if known_feasible else None, max_draws)

    def evaluate(self, u: torch.Tensor, eff: Optional[Efficiency] = None) -> StepResult:
        """The analytical model on `(n, d)` points (with `eff`, else the space's `efficiency`):
        infeasible points are answers, not errors. With a chip template, a chip that cannot be built
        gives its reason (codes 14 and up)."""
        batch, derived = self.to_batch_and_chip(u)
        result = evaluate(batch.to(dtype=self.dtype), self.efficiency if eff is None else eff, device=self.device)
        result = result.to("cpu", dtype=DTYPE)
        if derived is None:
            return result
        reason = torch.where(derived.reason != 0, derived.reason, result.reason)
        return dataclasses.replace(result, reason=reason, feasible=reason == 0)



def sample_unit_cube(name: str, dim: int, n: int, method: str = "sobol", seed: int = 0,
                     keep: Optional[Callable[[torch.Tensor], torch.Tensor]] = None,
                     max_draws: int = 64) -> torch.Tensor:
    """`(n, dim)` points of a scrambled Sobol sequence (`method="sobol"`) or uniform random draws,
    in sequence order, keeping those where `keep(u)` (a `(k,)` bool mask) holds. Each round draws
    what the acceptance rate seen so far needs; fewer than n after `max_draws` rounds is a SpecError
    naming the space `name`."""
    if method not in ("sobol", "random"):
        raise SpecError(f"space[{name}]", "sampler", method, "sobol or random")
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise SpecError(f"space[{name}]", "n", n, "an integer >= 1")
    engine = torch.quasirandom.SobolEngine(dim, scramble=True, seed=seed) if method == "sobol" else None
    generator = torch.Generator().manual_seed(seed)
    kept: list[torch.Tensor] = []
    found = drawn = 0
    for _ in range(max_draws):
        # draw what the acceptance rate seen so far needs, with 20 % to spare (bounded per round)
        acceptance = found / drawn if found else (1.0 if drawn == 0 else 1.0 / 64)
        draw = min(max(math.ceil(1.2 * (n - found) / acceptance), 1024), 1 << 20)
        drawn += draw
        u = engine.draw(draw, dtype=DTYPE) if engine else torch.rand(draw, dim, generator=generator, dtype=DTYPE)
        if keep is not None:
            u = u[keep(u)]
        kept.append(u)
        found += u.shape[0]
        if found >= n:
            return torch.cat(kept)[:n]
    raise SpecError(f"space[{name}]", "known constraints", f"{found} of {n} points found",
                    "a space where valid points are not vanishingly rare")

def parameters_from_dicts(entries: Sequence[dict]) -> tuple[Parameter, ...]:
    """Parameters from plain mappings (a config's `parameters:` list), unknown keys named. An entry
    may give `low`/`high` in a human `unit` (see `UNITS`); they are converted to SI."""
    known = {f.name for f in fields(Parameter)} | {"unit"}
    out = []
    for i, entry in enumerate(entries):
        for key in entry:
            if key not in known:
                raise SpecError(f"space.parameters[{i}]", key, entry[key], "keys " + ", ".join(sorted(known)))
        values = dict(entry)
        unit = values.pop("unit", None)
        if unit is not None and unit not in UNITS:
            raise SpecError(f"space.parameters[{i}]", "unit", unit, "one of " + ", ".join(UNITS))
        if "choices" in values:
            values["choices"] = tuple(values["choices"])
        for key in ("low", "high"):
            if key in values:
                values[key] = float(values[key]) * (UNITS[unit] if unit else 1.0)
        out.append(Parameter(**values).validate())
    return tuple(out)
