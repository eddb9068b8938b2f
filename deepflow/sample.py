"""`deepflow sample`: designs of a space evaluated by the analytical model, as a Parquet table.

    deepflow sample space=hardware-mapping n=100000 sampler=sobol

Draws `n` points of the space's unit cube (scrambled Sobol or uniform; points that break a known
mapping rule are redrawn), evaluates them in batches of `batch_size` with a progress bar, and
writes one row per design: the named design columns, their encodings `u_<name>`, and every output
of the analytical model (`surrogates.columns.samples_frame`). Infeasible designs are kept, with
`feasible = False` and their `reason`. The Parquet file is written first (nothing is lost if MLflow
is down); then an MLflow run of experiment `samples` (or `tracking.experiment`) gets it as a
dataset input and as an artifact (`samples/<file>`), with the space as `space.json`.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from deepflow.presets import ConfigError

DEFAULT_EXPERIMENT = "samples"


def sample_options(cfg) -> tuple[int, str, int, int]:
    """`(n, sampler, seed, batch_size)` of the config, checked."""
    from deepflow.config import option

    n, seed, batch = option(cfg, "n"), option(cfg, "seed"), option(cfg, "batch_size")
    sampler = option(cfg, "sampler", ("sobol", "random"))
    for key, value, low in (("n", n, 1), ("seed", seed, 0), ("batch_size", batch, 1)):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ConfigError(f"{key}={value!r} is invalid: allowed an integer >= {low}")
    return n, sampler, seed, batch


def evaluate_samples(space, u, batch_size: int, progress: bool = True):
    """The samples table of the points `u` (`(n, d)`), evaluated `batch_size` at a time."""
    import pandas as pd
    from tqdm import tqdm

    from surrogates.columns import samples_frame

    parts = []
    with tqdm(total=u.shape[0], unit="design", desc=f"evaluating {space.name}", disable=not progress) as bar:
        for start in range(0, u.shape[0], batch_size):
            chunk = u[start:start + batch_size]
            parts.append(samples_frame(space, chunk, space.evaluate(chunk)))
            bar.update(chunk.shape[0])
    return pd.concat(parts, ignore_index=True)


def log_samples(df, space, path: Path, params: dict, metrics: dict, experiment: str, calibration=None) -> str:
    """Log the samples file to MLflow (dataset input, artifact, space.json and, with `calibration`
    (a `deepflow.calibration.Calibration`), its file and sha256); returns the run id."""
    import mlflow

    from deepflow.train_surrogate import log_dataset
    from surrogates.columns import space_to_dict

    mlflow.set_experiment(experiment)
    with mlflow.start_run(run_name=path.stem) as run:
        mlflow.set_tag("deepflow.command", "sample")
        mlflow.log_params(params)
        mlflow.log_metrics(metrics)
        log_dataset(df, str(path.resolve()), "samples", name=path.stem)
        mlflow.log_artifact(str(path), artifact_path="samples")
        mlflow.log_dict(space_to_dict(space), "space.json")
        if calibration is not None:
            mlflow.log_param("calibration_sha256", calibration.sha256)
            mlflow.log_artifact(calibration.path, artifact_path="calibration")
        return run.info.run_id


def cmd_sample(overrides: list[str]) -> int:
    from deepflow.calibration import calibration_from_config
    from deepflow.config import compose_config, option, space_from_config
    from deepflow.tracking import check_reachable, quiet_mlflow_logs, resolve_uri, ui_command
    from surrogates.columns import write_samples

    cfg = compose_config(overrides, config_name="sample")
    n, sampler, seed, batch_size = sample_options(cfg)
    use_mlflow = option(cfg, "mlflow", (True, False))
    calibration = calibration_from_config(cfg)  # checked here; space_from_config takes its constants
    space = space_from_config(cfg)
    out = option(cfg, "out")
    path = Path(out) if out else Path("samples") / f"{space.name}-{sampler}-n{n}-s{seed}.parquet"
    if path.suffix != ".parquet":
        raise ConfigError(f"out={str(path)!r} is invalid: allowed a path ending in .parquet")
    uri = resolve_uri(cfg.tracking.get("uri"))
    if use_mlflow:
        check_reachable(uri)

    start = time.perf_counter()
    print(f"drawing {n:,} designs of space {space.name!r} that satisfy its known constraints ...", file=sys.stderr)
    u = space.sample(n, method=sampler, seed=seed)
    sample_s = time.perf_counter() - start
    df = evaluate_samples(space, u, batch_size)
    elapsed = time.perf_counter() - start
    path.parent.mkdir(parents=True, exist_ok=True)
    write_samples(df, space, path)

    feasible = float(df["feasible"].mean())
    reasons = df["reason"].value_counts().to_dict()
    print(f"{n:,} designs of space {space.name!r} ({space.dim} parameters, {sampler}, seed {seed}): "
          f"drawn in {sample_s:.1f} s, evaluated in {elapsed - sample_s:.1f} s")
    print(f"feasible: {feasible:.1%}; reasons: " + ", ".join(f"{k} {v:,}" for k, v in reasons.items()))
    print(f"wrote {path} ({len(df.columns)} columns)")
    if calibration is not None:
        print(f"labelled with the efficiency constants of calibration={calibration.path}")
    if use_mlflow:
        import mlflow

        quiet_mlflow_logs()
        mlflow.set_tracking_uri(uri)
        params = {"space": space.name, "n": n, "sampler": sampler, "seed": seed, "dim": space.dim,
                  "hardware": _preset(cfg, "hardware"), "system": _preset(cfg, "system"),
                  "model": _preset(cfg, "model"), "path": str(path.resolve()),
                  "calibration": None if calibration is None else str(Path(calibration.path).resolve())}
        metrics = {"feasible_fraction": feasible, "sample_s": sample_s, "evaluate_s": elapsed - sample_s}
        run_id = log_samples(df, space, path, params, metrics,
                             str(cfg.tracking.get("experiment") or DEFAULT_EXPERIMENT), calibration)
        print(f"MLflow run {run_id} (train on it: deepflow train-surrogate data={run_id})")
        print(f"see it: {ui_command(uri)}")
    return 0


def _preset(cfg, group: str) -> str:
    """The name a group's preset goes by in the run's params (its `name` field when it has one)."""
    value = cfg.get(group)
    return str(value.get("name", "")) if value is not None and hasattr(value, "get") else json.dumps(value)
