"""The `deepflow` command line: `deepflow <command> [hydra overrides]`.

Commands:
  evaluate      time, memory and feasibility of one design, with breakdowns
  best-mapping  the fastest feasible parallel mappings of a model on a system (top_k=...; -m: many systems)
  validate      predicted vs measured iteration times of a CSV of real runs (data=...)
  optimize      a tracked, resumable optimization run (experiment=..., resume=<run id>)
  sample        designs of a space evaluated by the analytical model, to Parquet + MLflow (n=..., sampler=...)
                (optimize and sample are Hydra applications: -m sweeps with hydra/launcher=basic|joblib|ray|
                submitit_local|submitit_slurm, --cfg job, --info, --help)
  train-surrogate  fit a surrogate on samples, report it, register it in MLflow (surrogate=..., data=...)
  query         a registered surrogate's predictions for designs (model_uri=models:/<name>@champion, verify=true)
  derive        the accelerator a chip's technology and budgets give, and what each part uses (chip=...)
  calibrate     fit the efficiency constants to measured runs (data=<csv>), cross-validated; writes a
                calibration file that evaluate, best-mapping, validate, sample and optimize take (calibration=<file>)
  study         a case study: its variants as child MLflow runs, a table, figures and checks
                (layer-by-layer, technology-levers, phaze-tpuv4, retrodiction; quick=true: a small version)

Bad input exits with status 2 and one line naming the field; nothing is evaluated before the whole
configuration has been checked.
"""

from __future__ import annotations

import importlib
import sys

USAGE = __doc__


def _fail(message: str) -> int:
    print(f"deepflow: error: {message}", file=sys.stderr)
    return 2


# A command is "module:function" (deepflow/commands/), imported only when that command runs (so that
# `deepflow evaluate` never pays for importing MLflow or BoTorch). Each takes the Hydra overrides.
COMMANDS = {"evaluate": "deepflow.commands.evaluate:cmd_evaluate",
            "best-mapping": "deepflow.commands.best_mapping:cmd_best_mapping",
            "validate": "deepflow.commands.validate:cmd_validate",
            "optimize": "deepflow.commands.optimize:cmd_optimize",
            "sample": "deepflow.commands.sample:cmd_sample",
            "train-surrogate": "deepflow.commands.train_surrogate:cmd_train_surrogate",
            "query": "deepflow.commands.query:cmd_query", "derive": "deepflow.commands.derive:cmd_derive",
            "calibrate": "deepflow.commands.calibrate:cmd_calibrate", "study": "deepflow.commands.study:cmd_study"}


def _command(name: str):
    module, _, function = COMMANDS[name].partition(":")
    return getattr(importlib.import_module(module), function)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(USAGE)
        return 0 if argv else 2
    command, overrides = argv[0], argv[1:]
    if command not in COMMANDS:
        return _fail(f"unknown command {command!r}: allowed {', '.join(COMMANDS)}")
    from analytical.specs import SpecError
    from deepflow.allocator import retain_freed_memory
    from deepflow.presets import ConfigError

    retain_freed_memory()  # batched evaluation without a page fault for every temporary (deepflow/allocator.py)
    try:
        return _command(command)(overrides)
    except (ConfigError, SpecError) as exc:
        return _fail(str(exc))


if __name__ == "__main__":
    sys.exit(main())
