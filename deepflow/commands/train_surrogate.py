"""`deepflow train-surrogate`: fit a surrogate on samples, report it, log and register it in MLflow.

    deepflow train-surrogate surrogate=gp data=samples/hardware-mapping-sobol-n1000-s0.parquet
    deepflow train-surrogate surrogate=mlp_ensemble data=<run id of deepflow sample>

Reads the samples (a Parquet path, or the run id of `deepflow sample`: its artifact is downloaded),
trains the regression model (log step time, and log energy when the samples have it, on feasible
rows) and the feasibility classifier (all rows) with `surrogates.training.train_surrogate`, prints
the metrics of the held-out and extrapolation splits, and saves the model locally
(`output_dir/<space>-<surrogate>-<time>/`) before MLflow sees it. The MLflow run (experiment
`surrogates`, or `tracking.experiment`) gets params, metrics, a parity and a calibration plot, the
samples as a dataset input, and the model as a registered pyfunc (`registered_name`, default
`deepflow-<space>`). The alias `champion` moves to the new version when its `champion_metric`
(lower is better) beats the current champion's.
"""

from __future__ import annotations

import re
import tempfile
import time
import warnings
from pathlib import Path

from deepflow.presets import ConfigError

DEFAULT_EXPERIMENT = "surrogates"
RUN_ID = re.compile(r"^[0-9a-f]{32}$")
CHAMPION = re.compile(r"^(held_out|extrapolation)_[a-z0-9_]+_(mape|nll)$")  # metrics where lower is better
METRIC_COLUMNS = (("MAPE", "mape", "{:.2%}"), ("R2(log)", "r2_log", "{:.3f}"), ("tau", "kendall_tau", "{:.3f}"),
                  ("top1%", "top1_recall", "{:.2f}"), ("cov95", "coverage95", "{:.2f}"), ("NLL", "nll", "{:.3f}"),
                  ("n", "n", "{:.0f}"))


def read_data(data, tmp_dir: str):
    """`(samples, space record, source, source run id or None)` of `data`: a Parquet path or shard
    directory, an MLflow run id of `deepflow sample`, or a `runs:/<run id>/<path>.parquet` artifact URI. `source` is where
    the file lives (a path or the artifact's URI), for the dataset input of the training run."""
    from surrogates.columns import read_samples as read_all

    def read_samples(path):
        try:
            return read_all(path)
        except (OSError, ValueError) as exc:  # pyarrow's ArrowInvalid is a ValueError
            raise ConfigError(f"data={str(path)!r} is not a sample of `deepflow sample` ({type(exc).__name__}: "
                              f"{str(exc).splitlines()[0][:160]}): allowed its Parquet file, shard directory or "
                              f"MLflow run id") from None

    if data is None or str(data).strip() in ("", "None", "null"):
        raise ConfigError("data is required: allowed a Parquet file of `deepflow sample` or the MLflow run id "
                          "that logged one (data=samples/<file>.parquet or data=<run id>)")
    data = str(data)
    if Path(data).is_file() or Path(data).is_dir():  # a file, or a directory of shards (executor=ray)
        return (*read_samples(data), str(Path(data).resolve()), None)
    if RUN_ID.match(data) or data.startswith("runs:/"):
        import mlflow
        from mlflow.exceptions import MlflowException

        try:
            if data.startswith("runs:/"):
                local = mlflow.artifacts.download_artifacts(artifact_uri=data, dst_path=tmp_dir)
                run_id, _, path = data[len("runs:/"):].partition("/")
            else:
                run_id = data
                files = [f.path for f in mlflow.MlflowClient().list_artifacts(run_id, "samples")
                         if f.path.endswith(".parquet")]
                shards = mlflow.get_run(run_id).data.tags.get("deepflow.samples_dir")
                if not files and shards and Path(shards).is_dir():  # a sharded sample stays where it was written
                    return (*read_samples(shards), shards, run_id)
                if not files:
                    raise ConfigError(f"data={data!r}: that run has no samples/*.parquet artifact "
                                      f"(allowed the run id of `deepflow sample`)")
                path = files[0]
                local = mlflow.artifacts.download_artifacts(run_id=run_id, artifact_path=path, dst_path=tmp_dir)
            source = mlflow.get_run(run_id).info.artifact_uri.rstrip("/") + "/" + path
        except MlflowException as exc:
            raise ConfigError(f"data={data!r} is not a readable MLflow run: {str(exc).splitlines()[0]}") from None
        return (*read_samples(local), source, run_id)
    raise ConfigError(f"data={data!r} is neither an existing Parquet file nor an MLflow run id "
                      f"(32 hex digits) of `deepflow sample`")


def metrics_table(metrics: dict, targets: list[str]) -> str:
    """One line per split and target: MAPE, R2 of logs, Kendall tau, top-1 % recall, coverage, NLL."""
    from deepflow.tables import table

    rows, notes = [], []
    for split in ("held_out", "extrapolation"):
        for t in targets:
            if f"{split}_{t}_mape" in metrics:
                rows.append([split, t] + [fmt.format(metrics[f"{split}_{t}_{key}"]) for _, key, fmt in METRIC_COLUMNS])
        if f"{split}_feasible_accuracy" in metrics:
            notes.append(f"{split} feasible: accuracy {metrics[f'{split}_feasible_accuracy']:.1%}, "
                         f"Brier {metrics[f'{split}_feasible_brier']:.3f}")
    header = ["split", "target"] + [name for name, _, _ in METRIC_COLUMNS]
    return "\n".join([table(header, rows, align="ll" + "r" * len(METRIC_COLUMNS))] + notes)


def _check_options(cfg) -> dict:
    from omegaconf import OmegaConf

    from deepflow.config import option

    s = OmegaConf.to_container(cfg.surrogate, resolve=True)
    for key in ("name", "params"):
        if key not in s:
            raise ConfigError(f"surrogate.{key} is missing: allowed a surrogate config with name, params, max_train")
    max_train = s.get("max_train")
    if max_train is not None and (isinstance(max_train, bool) or not isinstance(max_train, int) or max_train < 2):
        raise ConfigError(f"surrogate.max_train={max_train!r} is invalid: allowed null or an integer >= 2")
    for key in ("held_out_fraction", "extrapolation_fraction"):
        value = option(cfg, key)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < 1:
            raise ConfigError(f"{key}={value!r} is invalid: allowed a number in (0, 1)")
    seed = option(cfg, "seed")
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ConfigError(f"seed={seed!r} is invalid: allowed an integer >= 0")
    clf = OmegaConf.to_container(cfg.classifier, resolve=True) if cfg.get("classifier") else {}
    option(cfg, "classifier.enabled", (True, False))
    return {"surrogate": s, "max_train": max_train, "seed": seed,
            "classifier": (clf.get("params") or {}) if clf.get("enabled") else None}


def _add_or_override(override: str) -> str:
    """`surrogate.params.<name>=v` and `classifier.params.<name>=v` may set any hyper-parameter of
    the model, also one its config leaves at the default (Hydra's `++`); the model's constructor
    rejects unknown names."""
    key = override.partition("=")[0]
    return f"++{override}" if key.startswith(("surrogate.params.", "classifier.params.")) else override


def cmd_train_surrogate(overrides: list[str]) -> int:
    from deepflow.config import compose_config, option
    from deepflow.tracking import check_reachable, quiet_mlflow_logs, resolve_uri, run_url, ui_hint
    from surrogates.training import SURROGATES, train_surrogate

    cfg = compose_config([_add_or_override(o) for o in overrides], config_name="train_surrogate")
    opts = _check_options(cfg)
    name = opts["surrogate"]["name"]
    if name not in SURROGATES:
        raise ConfigError(f"surrogate={name!r} is not a known surrogate: allowed {', '.join(SURROGATES)}")
    champion_metric = str(option(cfg, "champion_metric"))
    if not CHAMPION.match(champion_metric):
        raise ConfigError(f"champion_metric={champion_metric!r} is invalid: allowed <split>_<target>_<mape|nll> "
                          f"(lower is better), e.g. held_out_step_time_s_mape, extrapolation_energy_j_nll")
    uri = resolve_uri(cfg.tracking.get("uri"))
    check_reachable(uri)
    import mlflow

    quiet_mlflow_logs()
    mlflow.set_tracking_uri(uri)
    with tempfile.TemporaryDirectory() as tmp:
        samples, space, source, source_run = read_data(option(cfg, "data"), tmp)
    registered = str(option(cfg, "registered_name") or f"deepflow-{space['name']}")

    start = time.perf_counter()
    result = train_surrogate(samples, space, name, opts["surrogate"]["params"],
                             held_out_fraction=float(option(cfg, "held_out_fraction")),
                             extrapolation=str(option(cfg, "extrapolation")),
                             extrapolation_fraction=float(option(cfg, "extrapolation_fraction")),
                             max_train=opts["max_train"], classifier=opts["classifier"], seed=opts["seed"])
    train_s = time.perf_counter() - start
    info = result.info
    local = Path(str(option(cfg, "output_dir"))) / f"{space['name']}-{name}-{time.strftime('%Y%m%d-%H%M%S')}"
    result.predictor.save(local)
    print(f"{name} on {info['train_rows']:,} feasible training rows of {info['rows']:,} "
          f"({info['feasible_rows']:,} feasible; regression on feasible rows only), "
          f"trained in {info['fit_s']:.1f} s"
          + (f" + classifier {info['classifier_fit_s']:.1f} s" if info["classifier"] else ""))
    print(f"extrapolation split: {info['extrapolation_rule']} ({info['extrapolation_rows']:,} feasible rows); "
          f"held out: {info['held_out_rows']:,} feasible rows")
    print(metrics_table(result.metrics, result.targets))
    print(f"saved {local}")

    if champion_metric not in result.metrics:
        raise ConfigError(f"champion_metric={champion_metric!r} is not a metric of this run (its samples have no "
                          f"such target): allowed " + ", ".join(m for m in sorted(result.metrics) if CHAMPION.match(m)))
    run_id, experiment_id, version, promoted = log_training(result, samples, cfg, opts, registered, champion_metric, source,
                                             source_run, train_s)
    print(f"MLflow run {run_id}: registered {registered} version {version}"
          + (f", now @champion ({champion_metric} {result.metrics[champion_metric]:.4g})" if promoted
             else f"; champion unchanged (it has a better {champion_metric})"))
    print(f"query it: deepflow query model_uri=models:/{registered}@champion designs=<csv or parquet> verify=true")
    print(f"see it: {ui_hint(uri, run_url(uri, experiment_id, run_id))}")
    return 0


def log_training(result, samples, cfg, opts, registered: str, champion_metric: str, source: str, source_run,
                 train_s: float):
    """The MLflow run of a training: params, metrics, plots, dataset input, registered model; returns
    `(run id, experiment id, registered version, promoted to @champion)`."""
    import matplotlib.pyplot as plt
    import mlflow

    from deepflow.config import option
    from deepflow.tracking import experiment_id_for, log_dataset
    from surrogates.registry import log_predictor, promote_if_better
    from surrogates.training import calibration_figure, parity_figure

    s = opts["surrogate"]
    mlflow.set_experiment(experiment_id=experiment_id_for(mlflow.MlflowClient(),
                                                          str(cfg.tracking.get("experiment") or DEFAULT_EXPERIMENT)))
    with mlflow.start_run(run_name=f"{s['name']}-{result.predictor.meta['space']['name']}") as run:
        mlflow.set_tag("deepflow.command", "train-surrogate")
        if source_run:
            mlflow.set_tag("deepflow.samples_run", source_run)
        params = {"surrogate": s["name"], "max_train": s.get("max_train"), "data": str(option(cfg, "data")),
                  "space": result.predictor.meta["space"]["name"], "targets": ",".join(result.targets),
                  "held_out_fraction": option(cfg, "held_out_fraction"), "seed": opts["seed"],
                  "extrapolation": result.info["extrapolation_rule"], "classifier": result.info["classifier"],
                  "registered_name": registered,
                  **{f"rows_{k}": result.info[k] for k in ("rows", "feasible_rows", "train_rows")},
                  **{f"param_{k}": v for k, v in s["params"].items()}}
        mlflow.log_params(params)
        mlflow.log_metrics({**result.metrics, "fit_s": result.info["fit_s"], "train_total_s": train_s})
        log_dataset(samples, source, "training")
        for fig, file in ((parity_figure(result.evaluations, result.targets), "parity.png"),
                          (calibration_figure(result.evaluations, result.targets), "calibration.png")):
            mlflow.log_figure(fig, file)
            plt.close(fig)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            info = log_predictor(result.predictor, result.input_example, registered_name=registered)
        version = info.registered_model_version
        promoted = promote_if_better(registered, version, champion_metric, result.metrics[champion_metric])
        mlflow.set_tag("deepflow.champion", str(promoted).lower())
        return run.info.run_id, run.info.experiment_id, version, promoted
