"""`deepflow validate`: predicted vs measured iteration times (and memory) of a CSV of real runs."""

from __future__ import annotations

import json

import numpy as np

from deepflow.presets import ConfigError


def group_keys(value) -> tuple[str, ...]:
    """`group_by` (null, one key, or a list of `deepflow.validation.GROUP_KEYS`) as a tuple, checked."""
    from omegaconf import ListConfig, OmegaConf

    from deepflow.validation import GROUP_KEYS

    if value is None:
        return ()
    keys = tuple(OmegaConf.to_container(value)) if isinstance(value, ListConfig) else (value,)
    for key in keys:
        if key not in GROUP_KEYS:
            raise ConfigError(f"group_by: {key!r} is invalid: allowed {', '.join(GROUP_KEYS)} (or a list of them)")
    return keys


def cmd_validate(overrides: list[str]) -> int:
    from analytical import DEFAULT_EFFICIENCY
    from deepflow.calibration import calibration_from_config, fit_efficiency, predict_calibrated
    from deepflow.config import compose_config, option
    from deepflow.report import validation_table
    from deepflow.validation import read_rows, report

    cfg = compose_config(overrides)
    output = option(cfg, "output", ("table", "json"))
    from deepflow.ratios import is_hfta, is_ps, ratio_report

    data = str(option(cfg, "data"))
    if is_hfta(data) or is_ps(data):  # published ratios (fused-job speedups, PS / all-reduce), not times
        result, text = ratio_report(data)
        print(json.dumps(result) if output == "json" else text)
        return 0
    fit = option(cfg, "fit", (True, False))
    group_by = group_keys(option(cfg, "group_by"))
    breakdown = option(cfg, "breakdown", (True, False))
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
            raise ConfigError(f"fit_on={fit_on!r} matches no row's source: sources are {sorted(set(rows.sources))}")
        eff = fit_efficiency(rows.subset(train), start=eff)
        calibration = None  # the refitted global constants replace the file's
        result["fitted"] = {"on": fit_on, "n": int(train.sum()), "constants": eff.as_dict()}
        if (~train).any():
            result["held_out"] = report(rows.subset(~train), eff)["summary"]
    if calibration is not None and calibration.per_accelerator:
        result.update(report(rows, eff, pred=predict_calibrated(rows, calibration), group_by=group_by,
                             breakdown=breakdown))
    else:
        result.update(report(rows, eff, group_by=group_by, breakdown=breakdown))
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
