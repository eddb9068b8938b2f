"""What an optimization run minimizes: a `StepResult` turned into objectives, feasibility and the
outcome constraints a strategy may model.

`Objective(name)` with name one of `OBJECTIVES`:

- `step_time`: Y = [log step time];
- `energy`: Y = [log energy per step] (needs the energy model: `StepResult.energy_j`);
- `time_at_power_cap`: Y = [log step time], feasible only where the average device power is at most
  `power_cap_w` (each design's own `tdp_w` when None: the model's POWER_OVER_BUDGET);
- `time_energy`: Y = [log step time, log energy per step] (two objectives, a Pareto front);
- `time_per_token`: Y = [log (1 / tokens per second)], the time per token (per image for a CNN) of
  all the step's jobs together: with `mapping.fused_jobs` B jobs share a step, so this is what a
  sweep of many jobs minimizes (its makespan is the samples of all jobs times this);
- `energy_per_token`: Y = [log energy per token] (per image; per job-sample when jobs are fused).

Logs: the quantities span decades across a space and a GP models their logs far better; a regret of
1 % in time is a difference of log(1.01) in Y. All objectives are minimized.

Outcome constraints `C n x c` (satisfied where <= 0) are what a model-based strategy can learn about
feasibility before it verifies a point:

- `memory`: log(memory per device / HBM capacity), the out-of-memory rule of `analytical.step.model`;
- `power` (time_at_power_cap only): log(average device power / cap);
- `other`: +1 where the design is infeasible for a reason neither of the above explains (a chip
  that cannot be derived, a mapping rule), -1 elsewhere: a label a GP regresses, so its posterior
  is a soft probability of such infeasibility. Known mapping rules are filtered before proposing,
  so this column is usually constant -1 (a strategy drops constant columns).

Infeasible rows keep their computed objective where it is finite (it is a real number of the model:
the time an out-of-memory design would take); a non-finite value becomes `PLACEHOLDER`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

import torch

from analytical.codes import DTYPE, Reason
from analytical.design import DesignBatch
from analytical.specs import SpecError
from analytical.result import StepResult

OBJECTIVES = ("step_time", "energy", "time_at_power_cap", "time_energy", "time_per_token", "energy_per_token")
# each outcome column (a log): what it is and its unit, for tables, plots and progress bars
OUTCOME_LABELS = {"log_step_time_s": ("step time", "s"), "log_energy_j": ("energy per step", "J"),
                  "log_time_per_token_s": ("time per token", "s"), "log_energy_per_token_j": ("energy per token", "J")}
PLACEHOLDER = 50.0  # finite stand-in for a non-finite log objective (e^50 s: never a best value)
MODELLED_REASONS = {"memory": int(Reason.OUT_OF_MEMORY), "power": 13}  # 13: Reason.POWER_OVER_BUDGET


def _log(x: torch.Tensor) -> torch.Tensor:
    y = torch.log(x.to(DTYPE))
    return torch.nan_to_num(y, nan=PLACEHOLDER, posinf=PLACEHOLDER, neginf=-PLACEHOLDER)


def _field(result: StepResult, name: str, objective: str) -> torch.Tensor:
    value = getattr(result, name, None)
    if value is None:
        raise SpecError("objective", "name", objective,
                        f"an objective the analytical model provides (StepResult has no {name}: the energy "
                        f"model is needed); allowed {', '.join(OBJECTIVES)}")
    return value


@dataclass(frozen=True)
class Objective:
    """Objectives (minimized), feasibility and outcome constraints of evaluated designs."""

    name: str = "step_time"
    power_cap_w: Optional[float] = None  # time_at_power_cap: per-device average power cap; None = tdp_w

    def validate(self) -> "Objective":
        if self.name not in OBJECTIVES:
            raise SpecError("objective", "name", self.name, "one of " + ", ".join(OBJECTIVES))
        if self.power_cap_w is not None:
            if isinstance(self.power_cap_w, bool) or not isinstance(self.power_cap_w, (int, float)) \
                    or not math.isfinite(self.power_cap_w) or self.power_cap_w <= 0:
                raise SpecError("objective", "power_cap_w", self.power_cap_w, "a number > 0 (watts) or None")
            if self.name != "time_at_power_cap":
                raise SpecError("objective", "power_cap_w", self.power_cap_w,
                                "None unless name is time_at_power_cap")
        return self

    @property
    def num_objectives(self) -> int:
        return 2 if self.name == "time_energy" else 1

    @property
    def outcome_names(self) -> list[str]:
        return {"step_time": ["log_step_time_s"], "energy": ["log_energy_j"],
                "time_at_power_cap": ["log_step_time_s"],
                "time_energy": ["log_step_time_s", "log_energy_j"],
                "time_per_token": ["log_time_per_token_s"], "energy_per_token": ["log_energy_per_token_j"]}[self.name]

    @property
    def constraint_names(self) -> list[str]:
        return ["memory", "power", "other"] if self.name == "time_at_power_cap" else ["memory", "other"]

    @property
    def modelled_constraints(self) -> list[int]:
        """Columns of `constraints` that are continuous margins (memory, power), not the 0/1 "other" label."""
        return [j for j, name in enumerate(self.constraint_names) if name in MODELLED_REASONS]

    def objectives(self, result: StepResult) -> torch.Tensor:
        """`n x m` objectives (logs; non-finite -> PLACEHOLDER)."""
        cols = []
        if self.name in ("step_time", "time_at_power_cap", "time_energy"):
            cols.append(_log(result.step_time_s))
        if self.name in ("energy", "time_energy"):
            cols.append(_log(_field(result, "energy_j", self.name)))
        if self.name == "time_per_token":
            cols.append(-_log(result.tokens_per_s))
        if self.name == "energy_per_token":
            cols.append(_log(_field(result, "energy_per_token_j", self.name)))
        return torch.stack(cols, dim=-1)

    def _power_ratio(self, result: StepResult, designs: Optional[DesignBatch]) -> torch.Tensor:
        power = _field(result, "avg_power_w", self.name).to(DTYPE)
        if self.power_cap_w is not None:
            return power / self.power_cap_w
        if designs is None:
            raise SpecError("objective", "designs", None, "the evaluated DesignBatch (its tdp_w is the cap)")
        return power / designs.tdp_w

    def feasible(self, result: StepResult, designs: Optional[DesignBatch] = None) -> torch.Tensor:
        """`n` bool: the model's verdict, and under a power cap also average power <= cap."""
        ok = result.feasible.clone()
        if self.name == "time_at_power_cap":
            ok &= self._power_ratio(result, designs) <= 1.0
        return ok

    def constraints(self, result: StepResult, designs: DesignBatch) -> torch.Tensor:
        """`n x c` outcome constraints (<= 0 satisfied), columns `constraint_names`."""
        memory = _log(result.memory_per_device_bytes / designs.hbm_bytes)
        cols = [memory]
        explained = result.reason == MODELLED_REASONS["memory"]
        if self.name == "time_at_power_cap":
            cols.append(_log(self._power_ratio(result, designs)))
            explained |= result.reason == MODELLED_REASONS["power"]
        other = ~result.feasible & ~explained
        cols.append(torch.where(other, 1.0, -1.0).to(DTYPE))
        return torch.stack(cols, dim=-1).clamp(-PLACEHOLDER, PLACEHOLDER)

    def __call__(self, result: StepResult, designs: Optional[DesignBatch] = None
                 ) -> tuple[torch.Tensor, torch.Tensor]:
        """`(Y n x m, feasible n)` of evaluated designs."""
        return self.objectives(result), self.feasible(result, designs)

    def evaluate(self, space, X: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, StepResult]:
        """Verify `X n x d` with the analytical model (`space.evaluate`):
        `(Y n x m, feasible n, C n x c, result)`."""
        result = space.evaluate(X)
        designs = space.to_batch(X)
        Y, feasible = self(result, designs)
        return Y, feasible, self.constraints(result, designs), result

    def check(self, space) -> "Objective":
        """Raise SpecError naming `objective.name` now, before any work, when the analytical model
        lacks a quantity this objective needs (evaluates the space's centre point once)."""
        self.validate()
        self.evaluate(space, torch.full((1, space.dim), 0.5, dtype=DTYPE))
        return self


def make_objective(name: str, power_cap_w: Optional[float] = None) -> Objective:
    """A validated `Objective`; a bad name raises SpecError naming `objective.name` and the allowed ones."""
    return Objective(name=name, power_cap_w=power_cap_w).validate()
