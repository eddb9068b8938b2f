"""`deepflow calibrate`: fit the analytical model's efficiency constants to a user's measured runs.

    deepflow calibrate data=my_runs.csv
    deepflow calibrate data=my_runs.csv fit=per_accelerator cv=source fields=[gemm_peak_fraction,hbm_bw_fraction]

The data is a CSV in the validation format (`deepflow.validation.read_rows`: the published-runs
schema of experiments/validation/README.md, or vTrain's). The constants are the fields of
`analytical.step.efficiency.Efficiency` named by `fields` (default: every one of
`deepflow.calibration.FIT_FIELDS`, read when the command runs), fitted by `fit_efficiency` (robust
least squares on log time, bounded by `FIT_BOUNDS`), never per row. A field whose value changes no
row's predicted time anywhere in its bounds (e.g. the fp8 GEMM fraction on a CSV of fp16 runs) is
not fitted: it keeps its default, and the output says so.

`fit=global`: one set of constants. `fit=per_accelerator`: the global set, then one per `gpu` of the
CSV (fitted on that gpu's rows, starting from the global set); an accelerator without its own set
uses the global one.

The error reported is cross-validated: `cv=kfold` (`folds` folds, rows shuffled with `seed` and
spread evenly over the folds per gpu) or `cv=source` (leave one `source` of the CSV out at a time).
For each fold the constants are fitted on the other rows and the held-out rows are predicted with
them: `cv_mape_after` is the mean |predicted / measured - 1| over all held-out predictions, and
`cv_mape_before` the same with the default constants. The constants written are then fitted on all
rows (`in_sample_mape` is their error on those rows, an optimistic number). `prior_sigma` is the
width of the prior around the shipped constants; `auto` (the default) chooses it by cross-validation
on the rows being fitted, keeping the shipped constants when no fit predicts held-out rows better
(deepflow/commands/cross_validation.py).

The calibration file (`out`, deepflow/calibration.py) holds every Efficiency field, per accelerator
when asked, and how it was made (data path and sha256, fit, cv, n, the cv errors, date, MLflow run).
An MLflow run (experiment `calibration`, or `tracking.experiment`) gets the params, the cv metrics and
the file as an artifact. Bad input (a missing column, an unknown gpu, a measured time that is not a
positive number, too few rows for the constants asked, an unknown option value or field) is one
error line naming it, before any fitting.
"""

from __future__ import annotations

import datetime
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from analytical.step.efficiency import Efficiency
from deepflow.calibration import efficiency_dict, predict_calibrated, sha256_of
from deepflow.commands.cross_validation import choose_prior_sigma, cross_validate, fit_calibration, sigma_label
from deepflow.presets import ConfigError
from deepflow.tables import table

FITS = ("global", "per_accelerator")
CVS = ("kfold", "source")
OUTPUTS = ("table", "json")
DEFAULT_EXPERIMENT = "calibration"


def _list_override(override: str) -> str:
    """`fields=a,b` (a Hydra sweep) as the list `fields=[a,b]`."""
    key, _, value = override.partition("=")
    if key == "fields" and "," in value and not value.lstrip().startswith("["):
        return f"fields=[{value}]"
    return override


def _int(value: Any, key: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigError(f"{key}={value!r} is invalid: allowed an integer >= {minimum}")
    return value


def options(cfg) -> dict[str, Any]:
    """The checked options of the composed config (no file is read here)."""
    from omegaconf import ListConfig, OmegaConf

    from deepflow import calibration
    from deepflow.config import option

    out = {"fit": option(cfg, "fit", FITS), "cv": option(cfg, "cv", CVS), "output": option(cfg, "output", OUTPUTS),
           "mlflow": option(cfg, "mlflow", (True, False)),
           "flash_attention": option(cfg, "flash_attention", (True, False)),
           "folds": _int(option(cfg, "folds"), "folds", 2), "seed": _int(option(cfg, "seed"), "seed", 0)}
    data = option(cfg, "data")
    if data is None or not str(data).strip():
        raise ConfigError("data=None is invalid: allowed a CSV of measured runs (e.g. data=my_runs.csv)")
    out["data"] = str(data)
    fit_fields = tuple(calibration.FIT_FIELDS)  # read now: the tuple grows as the model does
    given = OmegaConf.select(cfg, "fields")
    if given is None:
        fields = fit_fields
    else:
        fields = tuple(OmegaConf.to_container(given)) if isinstance(given, ListConfig) else (given,)
        if not fields:
            raise ConfigError(f"fields=[] is invalid: allowed a non-empty list of {', '.join(fit_fields)}")
        for name in fields:
            if name not in fit_fields:
                raise ConfigError(f"fields: {name!r} is not a fitted constant: allowed {', '.join(fit_fields)}")
        if len(set(fields)) != len(fields):
            raise ConfigError(f"fields={list(fields)} is invalid: allowed each constant at most once")
    out["fields"] = fields
    sigma = option(cfg, "prior_sigma")
    if sigma is not None and sigma != "auto" and (isinstance(sigma, bool) or not isinstance(sigma, (int, float))
                                                  or not sigma > 0):
        raise ConfigError(f"prior_sigma={sigma!r} is invalid: allowed auto, a number > 0 (e.g. 0.2) or null "
                          "(no prior)")
    out["prior_sigma"] = sigma if sigma in (None, "auto") else float(sigma)
    path = Path(str(option(cfg, "out") or ""))
    if path.suffix not in (".yaml", ".yml"):
        raise ConfigError(f"out={str(path)!r} is invalid: allowed a path ending in .yaml or .yml")
    out["out"] = path
    return out


# ----------------------------------------------------------------------------------------- data
def read_measured(path: str, flash_attention: bool = False):
    """`(rows, gpus)`: the CSV's rows (`deepflow.validation.read_rows`) and each row's accelerator preset (its `gpu`
    as the preset is named, so `GB200` and `gb200` are one). A file that is not a CSV, a measured time that is not a
    positive number and any value read_rows cannot read are a ConfigError naming the problem."""
    from deepflow import validation

    try:
        rows = validation.read_rows(path, flash_attention=flash_attention)
    except ConfigError:
        raise
    except (ValueError, TypeError, KeyError) as exc:  # a value read_rows cannot convert
        raise ConfigError(f"data={path!r}: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}") from None
    if not len(rows.ids):
        raise ConfigError(f"data={path!r}: no rows")
    return rows, [spec[0].name for spec in rows.specs]


def check_counts(path: str, rows, gpus: list[str], opts: dict) -> None:
    """Enough rows for the constants asked (2 per constant; per gpu for fit=per_accelerator), for the
    folds, and two sources for cv=source; a ConfigError naming the problem otherwise."""
    n, k, need = len(rows.ids), len(opts["fields"]), 2 * len(opts["fields"])
    fields = f"fields=[{','.join(opts['fields'])}]"
    if n < need:
        raise ConfigError(f"data={path!r}: {n} rows are too few to fit {k} constants ({fields}): allowed at least "
                          f"{need} rows (2 per constant), or fewer fields")
    if opts["cv"] == "kfold" and n < opts["folds"]:
        raise ConfigError(f"folds={opts['folds']} is invalid: allowed at most the {n} rows of data={path!r}")
    if opts["cv"] == "source" and len(set(rows.sources)) < 2:
        raise ConfigError(f"cv=source needs rows of at least two sources: data={path!r} has only "
                          f"{sorted(set(rows.sources))}: allowed cv=kfold")
    if opts["fit"] == "per_accelerator":
        for gpu in dict.fromkeys(gpus):
            n_gpu = gpus.count(gpu)
            if n_gpu < need:
                raise ConfigError(f"data={path!r}: gpu {gpu} has {n_gpu} rows, too few for fit=per_accelerator with "
                                  f"{k} constants ({fields}): allowed at least {need} rows per gpu, or fit=global")


# ----------------------------------------------------------------------------------------- MLflow
def _start_run(uri: str, experiment: str, data: str):
    """`(client, run_id)` of a new MLflow run, or `(None, None)` with a warning when MLflow fails."""
    from deepflow.run.mlflow_sink import client_for
    from deepflow.tracking import experiment_id_for

    try:
        client = client_for(uri)
        run = client.create_run(experiment_id_for(client, experiment), run_name=f"calibrate-{Path(data).stem}",
                                tags={"deepflow.command": "calibrate"})
        return client, run.info.run_id
    except ConfigError:
        raise
    except Exception as exc:  # noqa: BLE001 - the calibration file is the result; MLflow is its record
        _warn(exc)
        return None, None


def _log_run(client, run_id: str, params: dict, metrics: dict, path: Path) -> bool:
    from mlflow.entities import Metric, Param

    try:
        now = int(time.time() * 1000)
        client.log_batch(run_id, metrics=[Metric(k, float(v), now, 0) for k, v in metrics.items()],
                         params=[Param(k, str(v)[:6000]) for k, v in params.items()])
        client.log_artifact(run_id, str(path), artifact_path="calibration")
        client.set_terminated(run_id, "FINISHED")
        return True
    except Exception as exc:  # noqa: BLE001
        _warn(exc)
        return False


def _warn(exc: Exception) -> None:
    first = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
    print(f"deepflow: warning: MLflow failed ({first}); the calibration file is written all the same",
          file=sys.stderr)


# ----------------------------------------------------------------------------------------- command
def _table(result: dict) -> str:
    lines = [f"calibrated on {result['n']} rows of {result['data']} (sha256 {result['data_sha256'][:12]}...), "
             f"fit={result['fit']}, " + (f"{result['folds']}-fold cross-validation (seed {result['seed']})"
                                         if result["cv"] == "kfold" else "leave-one-source-out cross-validation"),
             f"cross-validated mean |error|: {result['cv_mape_before']:.1%} with the default constants -> "
             f"{result['cv_mape_after']:.1%} fitted on the other folds (max {result['cv_max_abs_error_before']:.1%} "
             f"-> {result['cv_max_abs_error_after']:.1%})"]
    auto = result["prior_sigma"] == "auto"
    lines.append(table(["held out", "n", "default", "fitted", *(["prior_sigma"] if auto else [])],
                       [(f["held_out"][:44], f["n"], f"{f['mape_before']:.1%}", f"{f['mape_after']:.1%}",
                         *([sigma_label(f["prior_sigma"])] if auto else [])) for f in result["cv_folds"]], indent=2))
    if auto:
        lines.append(f"prior_sigma=auto chose {sigma_label(result['prior_sigma_used'])} on all rows (0: the default "
                     "constants kept; cv mean |error| by width: "
                     + ", ".join(f"{k} {v:.1%}" for k, v in result["prior_sigma_cv"].items()) + ")")
    lines.append(f"fitted on all rows: mean |error| {result['in_sample_mape']:.1%} (in sample)")
    per = result.get("per_accelerator", {})
    names = list(per)
    default = efficiency_dict(Efficiency())
    lines += ["", table(["constant", "default", "fitted", *(g[:14] for g in names), ""],
                        [(key, f"{default[key]:.4g}", f"{result['constants'][key]:.4g}",
                          *(f"{per[g][key]:.4g}" for g in names),
                          "(not informed by the data: default kept)" if key in result["fields_not_informed"] else "")
                         for key in result["fields"]], align="l" + "r" * (2 + len(names)) + "l")]
    lines += ["", f"wrote {result['calibration_file']}",
              f"use it: deepflow evaluate calibration={result['calibration_file']} (also best-mapping, validate, "
              f"sample, optimize)"]
    if result.get("mlflow_run_id"):
        lines.append(f"MLflow run {result['mlflow_run_id']}; see it: {result['mlflow_ui']}")
    return "\n".join(lines)


def cmd_calibrate(overrides: list[str]) -> int:
    from deepflow.config import compose_config
    from deepflow.tracking import check_reachable, resolve_uri, run_url, ui_hint

    started = time.perf_counter()
    cfg = compose_config([_list_override(o) for o in overrides], config_name="calibrate")
    opts = options(cfg)
    uri = resolve_uri(cfg.tracking.get("uri")) if opts["mlflow"] else None
    if uri is not None:
        check_reachable(uri)
    data = opts["data"]
    rows, gpus = read_measured(data, opts["flash_attention"])
    check_counts(data, rows, gpus, opts)  # every input checked: from here on, fitting

    print(f"calibrating {len(opts['fields'])} constants on {len(rows.ids)} rows of {data} ({opts['fit']}, cv={opts['cv']}) ...",
          file=sys.stderr, flush=True)
    cv = cross_validate(rows, gpus, opts)
    sigma, sigma_scores = opts["prior_sigma"], None
    if sigma == "auto":  # the width for the constants written: chosen on all rows
        sigma, sigma_scores = choose_prior_sigma(rows, gpus, opts)
        print(f"prior_sigma=auto: {sigma_label(sigma)} (cv mean |error| by width: "
              + ", ".join(f"{k} {v:.2%}" for k, v in sigma_scores.items()) + ")", file=sys.stderr, flush=True)
    calibration, idle = fit_calibration(rows, gpus, opts["fields"], opts["fit"], prior_sigma=sigma)
    in_sample = np.abs(predict_calibrated(rows, calibration)["predicted_s"] / rows.measured_s - 1.0)
    out_path = opts["out"].resolve()
    result: dict[str, Any] = {
        **{k: cv[k] for k in ("cv_mape_before", "cv_mape_after", "cv_max_abs_error_before", "cv_max_abs_error_after")},
        "n": len(rows.ids), "fit": opts["fit"], "cv": opts["cv"],
        "folds": opts["folds"] if opts["cv"] == "kfold" else len(cv["cv_folds"]), "seed": opts["seed"],
        "prior_sigma": opts["prior_sigma"], "prior_sigma_used": sigma, "prior_sigma_cv": sigma_scores,
        "fields": list(opts["fields"]), "fields_not_informed": list(idle["global"]),
        "constants": efficiency_dict(calibration.efficiency), "in_sample_mape": float(in_sample.mean()),
        "data": str(Path(data).resolve()), "data_sha256": sha256_of(data), "calibration_file": str(out_path),
        "cv_folds": cv["cv_folds"]}
    if opts["fit"] == "per_accelerator":
        result["per_accelerator"] = {g: efficiency_dict(e) for g, e in calibration.per_accelerator.items()}
        result["per_accelerator_not_informed"] = {g: list(v) for g, v in idle.items() if g != "global"}

    client, run_id = _start_run(uri, str(cfg.tracking.get("experiment") or DEFAULT_EXPERIMENT), data) \
        if uri is not None else (None, None)
    calibration.provenance = {
        "command": "deepflow calibrate " + " ".join(overrides), "data": result["data"], "data_sha256": result["data_sha256"],
        "fit": opts["fit"], "cv": opts["cv"], "folds": result["folds"], "seed": opts["seed"],
        "prior_sigma": opts["prior_sigma"], "prior_sigma_used": sigma, "fields": list(opts["fields"]),
        "fields_not_informed": list(idle["global"]), "n": len(rows.ids),
        "gpus": sorted(set(gpus)), "cv_mape_before": result["cv_mape_before"], "cv_mape_after": result["cv_mape_after"],
        "in_sample_mape": result["in_sample_mape"],
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"), "mlflow_run_id": run_id}
    calibration.save(out_path)
    result["calibration_sha256"] = calibration.sha256
    if client is not None:
        params = {"data": result["data"], "data_sha256": result["data_sha256"], "fit": opts["fit"], "cv": opts["cv"],
                  "folds": result["folds"], "seed": opts["seed"], "prior_sigma": str(opts["prior_sigma"]),
                  "prior_sigma_used": sigma_label(sigma),
                  "n": len(rows.ids), "fields": ",".join(opts["fields"]),
                  "fields_not_informed": ",".join(idle["global"]), "calibration_sha256": calibration.sha256}
        metrics = {k: result[k] for k in ("cv_mape_before", "cv_mape_after", "cv_max_abs_error_before",
                                          "cv_max_abs_error_after", "in_sample_mape")}
        if _log_run(client, run_id, params, metrics, out_path):
            experiment_id = client.get_run(run_id).info.experiment_id
            result.update(mlflow_run_id=run_id, tracking_uri=uri,
                          mlflow_ui=ui_hint(uri, run_url(uri, experiment_id, run_id)))
    result["elapsed_s"] = time.perf_counter() - started
    if opts["output"] == "json":
        print(json.dumps(result))
    else:
        print(_table(result))
    return 0
