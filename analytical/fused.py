"""Fused repeated jobs (HFTA, Wang et al. MLSys 2021) against the ways a team runs them today.

`fused_comparison(design)` takes one design whose mapping fuses B = `fused_jobs` single-device jobs
and answers, from one batched evaluation of the same design with 1..`max_jobs` fused jobs:

- fused: the B jobs as one fused step on one accelerator (the design itself);
- serial: the B jobs one after another on that accelerator (B steps of one job, B times the time);
- one per accelerator: each job alone on its own accelerator (one job's step time on B accelerators;
  the same energy per job as serial);
- the largest B that fits the accelerator's memory (0 when one job does not).

Concurrent jobs under MPS (several processes sharing the accelerator's units) are not modelled: how
far their kernels overlap needs a model of kernel co-scheduling this one does not have. Each MPS
process would also hold its own CUDA context (`memory.RUNTIME_RESERVE_BYTES` per job).
"""

from __future__ import annotations

import torch

from analytical.codes import Reason
from analytical.design import DesignBatch
from analytical.step.efficiency import DEFAULT_EFFICIENCY, Efficiency
from analytical.step.model import evaluate


def fused_comparison(design: DesignBatch, eff: Efficiency = DEFAULT_EFFICIENCY, max_jobs: int = 1024) -> dict:
    """Fused, serial and one-per-accelerator time and energy of `design`'s B fused jobs (a batch of
    one), and the largest fused count that fits; times per step of every job, energies per job-step."""
    if design.batch_size != 1:
        raise ValueError("fused_comparison needs a batch of one design")
    jobs = int(design.fused_jobs[0])
    n = max(max_jobs, jobs)
    counts = torch.arange(1, n + 1, dtype=design.tp.dtype, device=design.tp.device)
    result = evaluate(design.expand(n).replace(fused_jobs=counts), eff)
    fits = (result.reason == int(Reason.OK)).tolist()
    largest = next((i for i, ok in enumerate(fits) if not ok), n)  # feasible up to here (memory grows with B)
    one_s, fused_s = float(result.step_time_s[0]), float(result.step_time_s[jobs - 1])
    one_j, fused_j = float(result.energy_j[0]), float(result.energy_j[jobs - 1])
    return {
        "fused_jobs": jobs,
        "fused_step_time_s": fused_s,
        "serial_step_time_s": jobs * one_s,
        "one_per_accelerator_step_time_s": one_s,
        "speedup_vs_serial": jobs * one_s / fused_s,
        "fused_energy_per_job_j": fused_j / jobs,
        "serial_energy_per_job_j": one_j,
        "largest_fused_jobs": largest if fits[0] else 0,
        "searched_up_to": n,
    }
