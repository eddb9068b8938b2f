"""Validation rows: the specs of measured training runs and what was measured, as `deepflow.validation.read`
builds them and `deepflow.validation.report` judges them; and the accelerator generation a row belongs to."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

GIB = 2.0 ** 30


@dataclass
class Rows:
    """Validation rows as specs plus what was measured."""

    ids: list[str]
    groups: list[str]  # the model (for ranking) or source of each row
    sources: list[str]
    specs: list[tuple]  # (accelerator, system, model, mapping)
    measured_s: np.ndarray
    # device memory measured by the source (GiB; NaN where not stated); None: no row states it
    measured_memory_gib: np.ndarray | None = None
    unstated_columns: tuple[str, ...] = ()  # optional columns the CSV leaves out, read as their defaults
    # per row, what the reader inferred because the run trained (`recompute=auto`, an unstated `etp`); None: nothing
    assumed: list[dict] | None = None

    def assumptions(self) -> list[dict]:
        return [{} for _ in self.ids] if self.assumed is None else self.assumed

    def memory(self) -> np.ndarray:
        """`measured_memory_gib`, NaN-filled where the CSV has no such column."""
        return np.full(len(self.ids), np.nan) if self.measured_memory_gib is None else self.measured_memory_gib

    def subset(self, mask: np.ndarray) -> "Rows":
        keep = np.flatnonzero(mask)
        return Rows([self.ids[i] for i in keep], [self.groups[i] for i in keep],
                    [self.sources[i] for i in keep], [self.specs[i] for i in keep], self.measured_s[keep],
                    self.memory()[keep], self.unstated_columns, [self.assumptions()[i] for i in keep])


def concat(parts: list[Rows]) -> Rows:
    """The rows of several `Rows`, in order."""
    return Rows(sum((p.ids for p in parts), []), sum((p.groups for p in parts), []),
                sum((p.sources for p in parts), []), sum((p.specs for p in parts), []),
                np.concatenate([p.measured_s for p in parts]), np.concatenate([p.memory() for p in parts]),
                tuple(sorted(set().union(*(p.unstated_columns for p in parts)))),
                sum((p.assumptions() for p in parts), []))


# Accelerator generations, oldest first, told apart by spec fields alone (never by name): the
# narrowest tensor-core format with a peak rate. Ampere has none below 16 bit, Hopper fp8,
# Blackwell fp4 (NVIDIA A100 / H100 / Blackwell architecture whitepapers).
GENERATIONS = ("ampere", "hopper", "blackwell")


def generation(accelerator) -> str:
    """`GENERATIONS` entry of an `AcceleratorSpec` from its narrow-format peaks."""
    if accelerator.peak_tflops_fp4 > 0:
        return "blackwell"
    return "hopper" if accelerator.peak_tflops_fp8 > 0 else "ampere"
