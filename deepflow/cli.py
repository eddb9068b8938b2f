"""The `deepflow` command line: `deepflow <command> [hydra overrides]`.

Commands:
  evaluate      time, memory and feasibility of one design, with breakdowns
  best-mapping  the fastest feasible parallel mappings of a model on a system (top_k=...)
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

Bad input exits with status 2 and one line naming the field; nothing is evaluated before the whole
configuration has been checked.
"""

from __future__ import annotations

import importlib
import json
import sys

import numpy as np

USAGE = __doc__


def _fail(message: str) -> int:
    print(f"deepflow: error: {message}", file=sys.stderr)
    return 2


def cmd_evaluate(overrides: list[str]) -> int:
    from analytical import DEFAULT_EFFICIENCY, Reason, evaluate
    from deepflow.calibration import calibration_from_config
    from deepflow.config import compose_config, design_from_config, option
    from deepflow.report import design_line, step_table

    cfg = compose_config(overrides)
    output = option(cfg, "output", ("table", "json"))
    calibration = calibration_from_config(cfg)  # calibration=<file>: its constants for this accelerator
    specs, design, derived = design_from_config(cfg)  # chip=<preset>: the derived chip is the hardware
    result = evaluate(design, DEFAULT_EFFICIENCY if calibration is None else calibration.efficiency_for(specs[0].name))
    row = result.row(0)
    if derived is not None and int(derived.reason[0]):  # a chip that cannot be built says why first
        row.update(feasible=False, reason=Reason(int(derived.reason[0])).name.lower())
    given = {} if calibration is None else {"calibration": calibration.path}
    if output == "json":
        print(json.dumps({"design": design_line(*specs), **given, **row}))
    else:
        print(design_line(*specs) + (f"; calibration={calibration.path}" if calibration is not None else ""))
        print(step_table(row, specs[0].hbm_gib * 2.0**30, float(design.tdp_w[0])))  # a power limit lowers it
    return 0


def cmd_best_mapping(overrides: list[str]) -> int:
    from analytical import REASON_TEXT, Reason
    from analytical.search import DEFAULT_OPTIONS, best_mappings, best_mappings_of
    from deepflow.calibration import efficiency_of
    from deepflow.config import compose_config, design_from_config, option
    from deepflow.report import design_line

    cfg = compose_config(overrides)
    output = option(cfg, "output", ("table", "json"))
    top_k = option(cfg, "top_k")
    if not isinstance(top_k, int) or top_k < 1:
        return _fail(f"top_k={top_k!r} is invalid: allowed an integer >= 1")
    (accelerator, system, model, mapping), design, derived = design_from_config(cfg)
    eff = efficiency_of(cfg, accelerator.name)  # calibration=<file>: its constants
    if derived is None:
        found = best_mappings(accelerator, system, model, mapping.global_batch_size, top_k=top_k,
                              precision=mapping.precision, flash_attention=mapping.flash_attention, eff=eff)
    else:  # a derived chip: search around its tensors (operating-point energies, its own NIC), as evaluate does
        if int(derived.reason[0]):  # an answer, as in evaluate: no mapping runs on a chip that cannot be built
            print(f"no feasible mapping: the chip cannot be built ({REASON_TEXT[Reason(int(derived.reason[0]))]})")
            return 1
        found = best_mappings_of(design.replace(overlap_dp_comm=float(DEFAULT_OPTIONS.overlap_dp_comm),
                                                overlap_tp_comm=float(DEFAULT_OPTIONS.overlap_tp_comm)), top_k=top_k,
                                 eff=eff)
    rows = [{"mapping": m.__dict__, **r} for m, r in zip(found.mappings, found.rows)]
    if output == "json":
        print(json.dumps({"enumerated": found.num_enumerated, "feasible": found.num_feasible,
                          "search_s": found.search_s, "top": rows}))
        return 0
    print(f"{model.name} on {system.num_devices} x {accelerator.name}, global batch {mapping.global_batch_size}: "
          f"{found.num_enumerated:,} mappings enumerated, {found.num_feasible:,} feasible, "
          f"searched in {found.search_s:.2f} s")
    if not rows:
        print("no feasible mapping: try more devices, a smaller model or a larger memory")
        return 1
    print(f"{'rank':>4s} {'step_s':>9s} {'MFU':>6s} {'mem_GiB':>8s}  mapping")
    for i, (m, r) in enumerate(zip(found.mappings, found.rows), start=1):
        line = design_line(accelerator, system, model, m).split("; ", 1)[1]
        print(f"{i:4d} {r['step_time_s']:9.3f} {r['mfu'] * 100:5.1f}% "
              f"{r['memory_per_device_bytes'] / 2.0**30:8.1f}  {line}")
    return 0


def cmd_validate(overrides: list[str]) -> int:
    from analytical import DEFAULT_EFFICIENCY
    from deepflow.calibration import calibration_from_config, predict_calibrated
    from deepflow.config import compose_config, option
    from deepflow.report import validation_table
    from deepflow.validation import fit_efficiency, read_rows, report

    cfg = compose_config(overrides)
    output = option(cfg, "output", ("table", "json"))
    fit = option(cfg, "fit", (True, False))
    calibration = calibration_from_config(cfg)  # calibration=<file>: its constants (per gpu when it has them)
    rows = read_rows(str(option(cfg, "data")), flash_attention=bool(option(cfg, "flash_attention", (True, False))))
    eff = DEFAULT_EFFICIENCY if calibration is None else calibration.efficiency
    result: dict = {}
    if calibration is not None:
        result["calibration"] = {"path": calibration.path, "sha256": calibration.sha256,
                                 "per_accelerator": sorted(calibration.per_accelerator)}
    if fit:
        fit_on = str(option(cfg, "fit_on"))
        train = np.array([fit_on in s for s in rows.sources])
        if not train.any():
            return _fail(f"fit_on={fit_on!r} matches no row's source: sources are {sorted(set(rows.sources))}")
        eff = fit_efficiency(rows.subset(train), start=eff)
        calibration = None  # the refitted global constants replace the file's
        result["fitted"] = {"on": fit_on, "n": int(train.sum()), "constants": eff.as_dict()}
        if (~train).any():
            result["held_out"] = report(rows.subset(~train), eff)["summary"]
    if calibration is not None and calibration.per_accelerator:
        result.update(report(rows, eff, pred=predict_calibrated(rows, calibration)))
    else:
        result.update(report(rows, eff))
    if output == "json":
        print(json.dumps(result))
        return 0
    print(validation_table(result))
    if "calibration" in result:
        print(f"constants of calibration={result['calibration']['path']}"
              + (f" (per accelerator: {', '.join(result['calibration']['per_accelerator'])})"
                 if result["calibration"]["per_accelerator"] else "")
              + (", refitted below" if fit else ""))
    if fit:
        print(f"\nfitted on {result['fitted']['n']} rows whose source contains {result['fitted']['on']!r}: "
              + ", ".join(f"{k}={v:.4g}" for k, v in result["fitted"]["constants"].items()))
        if "held_out" in result:
            h = result["held_out"]
            print(f"held out ({h['n']} rows): mean |error| = {h['mape']:.1%}, max |error| = {h['max_abs_error']:.1%}")
    return 0


# A command is a function here or "module:function" imported only when that command runs (so that
# `deepflow evaluate` never pays for importing MLflow or BoTorch). Each takes the Hydra overrides.
COMMANDS = {"evaluate": cmd_evaluate, "best-mapping": cmd_best_mapping, "validate": cmd_validate,
            "optimize": "deepflow.optimize:cmd_optimize",
            "sample": "deepflow.sample:cmd_sample", "train-surrogate": "deepflow.train_surrogate:cmd_train_surrogate",
            "query": "deepflow.query:cmd_query", "derive": "deepflow.derive:cmd_derive",
            "calibrate": "deepflow.calibrate:cmd_calibrate"}


def _command(name: str):
    target = COMMANDS[name]
    if callable(target):
        return target
    module, _, function = target.partition(":")
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
    from deepflow.presets import ConfigError

    try:
        return _command(command)(overrides)
    except (ConfigError, SpecError) as exc:
        return _fail(str(exc))


if __name__ == "__main__":
    sys.exit(main())
