"""`StepResult`: what `analytical.evaluate` returns for a batch of designs (time, feasibility, memory,
MFU/HFU, throughput, energy and their breakdowns), with the operations on it that callers need."""

from __future__ import annotations

from dataclasses import dataclass, field, fields

import torch

from analytical.codes import Reason


@dataclass
class StepResult:
    """Outputs for a batch of designs; every tensor is `(batch,)`."""

    step_time_s: torch.Tensor
    feasible: torch.Tensor  # bool
    reason: torch.Tensor  # int64 codes of `analytical.step.feasibility.Reason`
    memory_per_device_bytes: torch.Tensor
    mfu: torch.Tensor
    hfu: torch.Tensor
    tokens_per_s: torch.Tensor
    model_flops: torch.Tensor
    energy_j: torch.Tensor  # one step, all devices (analytical.step.energy)
    energy_per_token_j: torch.Tensor
    avg_power_w: torch.Tensor  # per device, averaged over the step
    time_breakdown_s: dict[str, torch.Tensor] = field(default_factory=dict)
    memory_breakdown_bytes: dict[str, torch.Tensor] = field(default_factory=dict)
    energy_breakdown_j: dict[str, torch.Tensor] = field(default_factory=dict)

    def _map(self, fn) -> "StepResult":
        """`fn` applied to every tensor, breakdown dictionaries included."""
        return StepResult(**{f.name: ({k: fn(v) for k, v in getattr(self, f.name).items()}
                                      if isinstance(getattr(self, f.name), dict) else fn(getattr(self, f.name)))
                             for f in fields(self)})

    def tensors(self) -> list[torch.Tensor]:
        """Every tensor, breakdown dictionaries included, in the order `_map` visits them."""
        return [t for f in fields(self) for v in [getattr(self, f.name)]
                for t in (v.values() if isinstance(v, dict) else [v])]

    def outside_inference(self) -> "StepResult":
        """Itself, or where computed under `torch.inference_mode` copies that in-place updates and autograd accept
        outside it (`torch.cat` of inference tensors makes such copies too): the floating tensors copied in one
        `torch.stack` (rows of one new tensor), the others cloned."""
        if not self.step_time_s.is_inference():
            return self
        copies = iter(torch.stack([t for t in self.tensors() if t.is_floating_point()]).unbind(0))
        return self._map(lambda t: next(copies) if t.is_floating_point() else t.clone())

    def index(self, idx: torch.Tensor | slice) -> "StepResult":
        """The rows `idx` of every tensor, breakdown dictionaries included."""
        return self._map(lambda v: v[idx])

    @staticmethod
    def cat(parts: list["StepResult"]) -> "StepResult":
        """Concatenate results of consecutive chunks of a batch."""
        first = parts[0]
        tensors = {f.name: torch.cat([getattr(p, f.name) for p in parts]) for f in fields(first)
                   if isinstance(getattr(first, f.name), torch.Tensor)}
        dicts = {f.name: {k: torch.cat([getattr(p, f.name)[k] for p in parts]) for k in getattr(first, f.name)}
                 for f in fields(first) if isinstance(getattr(first, f.name), dict)}
        return StepResult(**tensors, **dicts)

    def to(self, device: torch.device | str, dtype: torch.dtype | None = None) -> "StepResult":
        """Every tensor on `device`, the floating ones in `dtype` when given (itself when nothing changes)."""
        if self.step_time_s.device == torch.device(device) and dtype in (None, self.step_time_s.dtype):
            return self
        return self._map(lambda v: v.to(device=device, dtype=dtype if v.is_floating_point() else None))

    def row(self, i: int) -> dict:
        """Plain-Python record of design i (for reports and JSON)."""
        return _record(self, i)

    def rows(self) -> list[dict]:
        """`row` of every design, reading each tensor once (one `tolist`, not one element read per design and
        tensor)."""
        lists = self._map(lambda t: t.tolist())
        return [_record(lists, i) for i in range(len(lists.step_time_s))]


def _record(r: StepResult, i: int) -> dict:
    """Design i's record from `r`, whose fields hold tensors or (`StepResult.rows`) lists."""
    return {
        "step_time_s": float(r.step_time_s[i]),
        "feasible": bool(r.feasible[i]),
        "reason": Reason(int(r.reason[i])).name.lower(),
        "memory_per_device_bytes": float(r.memory_per_device_bytes[i]),
        "mfu": float(r.mfu[i]),
        "hfu": float(r.hfu[i]),
        "tokens_per_s": float(r.tokens_per_s[i]),
        "breakdown": {k: float(v[i]) for k, v in r.time_breakdown_s.items()},
        "memory_breakdown": {k: float(v[i]) for k, v in r.memory_breakdown_bytes.items()},
        "energy_j": float(r.energy_j[i]),
        "energy_per_token_j": float(r.energy_per_token_j[i]),
        "avg_power_w": float(r.avg_power_w[i]),
        "energy_breakdown": {k: float(v[i]) for k, v in r.energy_breakdown_j.items()},
    }
