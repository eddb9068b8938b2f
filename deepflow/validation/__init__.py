"""Judge the analytical model against measured training runs.

Two CSV schemas are understood (see experiments/validation/README.md):
- the published-runs schema (`id, model, num_layers, ..., measured_iter_time_s`), any rows, any
  GPU preset of conf/hardware and any precision;
- the vTrain schema (`Parameters (billion), # GPUs, ..., iteration time (ms)`): Megatron-DeepSpeed
  GPT runs on A100 nodes with full activation checkpointing; ranking quality matters there, so
  Kendall tau per model is reported.

A row that leaves out how it ran gets its framework's defaults and what the run having trained implies
(`deepflow.trained`). `deepflow.calibration.fit_efficiency` fits the few global constants of
`analytical.step.efficiency.Efficiency` on some rows (least squares on log time); never per row.
"""

from deepflow.validation.read import (FRAMEWORKS, PUBLISHED_REQUIRED, VTRAIN_DEFAULTS, VTRAIN_REQUIRED, framework,
                                      is_vtrain, read_rows)
from deepflow.validation.report import (GROUP_KEYS, MEMORY_PART_KEY, TIME_PART_KEY, kendall_tau, predict, report,
                                        row_labels)
from deepflow.validation.rows import GENERATIONS, GIB, Rows, concat, generation

__all__ = ["FRAMEWORKS", "GENERATIONS", "GIB", "GROUP_KEYS", "MEMORY_PART_KEY", "PUBLISHED_REQUIRED", "Rows",
           "TIME_PART_KEY", "VTRAIN_DEFAULTS", "VTRAIN_REQUIRED", "concat", "framework", "generation", "is_vtrain",
           "kendall_tau", "predict", "read_rows", "report", "row_labels"]
