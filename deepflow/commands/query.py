"""`deepflow query`: a registered surrogate's predictions for designs, optionally verified.

    deepflow query model_uri=models:/deepflow-joint@champion design.tp=4 design.pp=16 verify=true
    deepflow query model_uri=models:/deepflow-joint@champion designs=designs.csv output=json

Designs come from a CSV/Parquet file (`designs=`: exactly the model's design columns, or a samples
file of `deepflow sample`, whose design columns are taken) or from `design.<column>=<value>`
overrides (one design; the columns not given take the space template's values, and the command
says which). Each prediction is the median with its 95 % interval per target (and P(feasible) when
the model has a classifier); `verify=true` evaluates the same designs with the analytical model
(rebuilt from the space stored with the model) and prints its value and the surrogate's error
beside. A design outside the trained range is predicted with a warning naming the columns.
"""

from __future__ import annotations

import json
import sys
import warnings
from pathlib import Path

from deepflow.presets import ConfigError

INLINE = "design."


def split_inline(overrides: list[str]) -> tuple[dict, list[str]]:
    """`({column: value}, other overrides)`: the `design.<column>=<value>` overrides taken out (values
    parsed as int, float, or kept as text)."""
    design, rest = {}, []
    for override in overrides:
        key, _, value = override.partition("=")
        key = key.lstrip("+~")
        if key.startswith(INLINE):
            design[key[len(INLINE):]] = _parse(value)
        else:
            rest.append(override)
    return design, rest


def _parse(text: str):
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            continue
    return text


def read_designs(path: str, columns: list[str]):
    """The designs of a CSV or Parquet file (a samples Parquet: its design columns)."""
    import pandas as pd

    file = Path(path)
    if not file.is_file():
        raise ConfigError(f"designs={path!r}: no such file: allowed a CSV or Parquet file of designs")
    if file.suffix == ".parquet":
        import pyarrow.parquet as pq

        from surrogates.columns import PARQUET_SPACE_KEY

        df = pd.read_parquet(file)
        if PARQUET_SPACE_KEY in (pq.read_schema(file).metadata or {}):  # a samples file: its design columns
            missing = [c for c in columns if c not in df.columns]
            return df[[c for c in columns if c in df.columns]] if not missing else df
        return df
    if file.suffix == ".csv":
        return pd.read_csv(file)
    raise ConfigError(f"designs={path!r} is invalid: allowed a .csv or .parquet file")


def verify(meta: dict, designs):
    """`(StepResult, ok)`: the analytical model on the designs (space rebuilt from the model's
    record); `ok[i]` is False where a discrete value lies outside the space's grid (not evaluable)."""
    import torch

    from surrogates.columns import DesignColumns, space_from_dict

    space = space_from_dict(meta["space"])
    columns = DesignColumns.from_space(meta["space"])
    u = columns.encode(designs, warn=False)
    values = columns.values(designs)
    decoded = space.decode(u)
    ok = torch.ones(u.shape[0], dtype=torch.bool)
    for name, x in values.items():
        ok &= torch.isclose(decoded[name], x, rtol=1e-9, atol=0.0) | (x == decoded[name])
    return space.evaluate(u), ok.numpy()


def cmd_query(overrides: list[str]) -> int:
    import pandas as pd

    from deepflow.config import compose_config, option
    from deepflow.tracking import check_reachable, quiet_mlflow_logs, resolve_uri
    from surrogates.columns import ExtrapolationWarning, template_design

    inline, overrides = split_inline(overrides)
    cfg = compose_config(overrides, config_name="query")
    model_uri = option(cfg, "model_uri")
    if not model_uri:
        raise ConfigError("model_uri is required: allowed models:/<name>@champion, models:/<name>/<version>, "
                          "runs:/<run id>/surrogate or a local model directory")
    output = option(cfg, "output", ("table", "json"))
    do_verify = option(cfg, "verify", (True, False))
    max_rows = option(cfg, "max_rows")
    if isinstance(max_rows, bool) or not isinstance(max_rows, int) or max_rows < 1:
        raise ConfigError(f"max_rows={max_rows!r} is invalid: allowed an integer >= 1")
    path = option(cfg, "designs")
    if bool(path) == bool(inline):
        raise ConfigError("designs: give either designs=<csv or parquet> or design.<column>=<value> overrides "
                          "(allowed one of the two)")
    uri = resolve_uri(cfg.tracking.get("uri"))
    check_reachable(uri)
    import mlflow
    from mlflow.exceptions import MlflowException

    from surrogates.registry import load

    quiet_mlflow_logs()
    mlflow.set_tracking_uri(uri)
    try:
        surrogate = load(str(model_uri))
    except (MlflowException, OSError) as exc:
        raise ConfigError(f"model_uri={model_uri!r} cannot be loaded from {uri}: {str(exc).splitlines()[0]}") from None
    columns = surrogate.input_columns
    filled = []
    if inline:
        unknown = [k for k in inline if k not in columns]
        if unknown:
            raise ConfigError(f"design.{unknown[0]} is not a design column of this model: allowed "
                              + ", ".join(columns))
        template = template_design(surrogate.meta["space"])
        filled = [c for c in columns if c not in inline]
        designs = pd.DataFrame([{c: inline.get(c, template[c]) for c in columns}])
    else:
        designs = read_designs(str(path), columns)

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ExtrapolationWarning)
        predictions = surrogate.predict(designs)
    notes = [str(w.message) for w in caught if issubclass(w.category, ExtrapolationWarning)]
    for note in notes:
        print(f"deepflow: warning: {note}", file=sys.stderr)
    table = pd.concat([designs.reset_index(drop=True), predictions.reset_index(drop=True)], axis=1)
    if do_verify:
        result, ok = verify(surrogate.meta, designs)
        for t in surrogate.targets:
            truth = getattr(result, t).numpy().astype(float)
            truth[~ok] = float("nan")
            table[f"{t}_analytical"] = truth
            table[f"{t}_error"] = table[f"{t}_median"] / truth - 1.0
        table["feasible_analytical"] = result.feasible.numpy() & ok
        from analytical.codes import Reason

        table["reason_analytical"] = [Reason(int(r)).name.lower() if k else "outside_space"
                                      for r, k in zip(result.reason.tolist(), ok)]
    if output == "json":
        print(json.dumps({"model": str(model_uri), "targets": surrogate.targets, "extrapolation": notes,
                          "from_template": filled, "rows": json.loads(table.to_json(orient="records"))}))
        return 0
    print(f"model {model_uri} ({surrogate.meta.get('surrogate', '?')}, trained on "
          f"{surrogate.meta.get('trained_rows', '?')} feasible designs of space {surrogate.meta['space']['name']!r})")
    if filled:
        print("from the space's template design: " + ", ".join(f"{c}={_text(designs.at[0, c])}" for c in filled))
    print(prediction_table(table, surrogate.targets, do_verify, "feasible_prob" in table, max_rows))
    return 0


def _text(value) -> str:
    return f"{value:.6g}" if isinstance(value, float) else str(value)


def prediction_table(table, targets: list[str], verified: bool, classifier: bool, max_rows: int) -> str:
    """One line per design: per target the median [95 % interval] (and analytical value, error)."""
    from deepflow.tables import table as draw

    header = ["#"]
    for t in targets:
        header += [f"{t} median", "[95% interval]"] + (["analytical", "error"] if verified else [])
    header += (["P(feasible)"] if classifier else []) + (["feasible (analytical)"] if verified else [])
    rows = []
    for i, row in table.head(max_rows).iterrows():
        cells = [i]
        for t in targets:
            cells += [f"{row[t + '_median']:.5g}", f"[{row[t + '_lower']:.4g}, {row[t + '_upper']:.4g}]"]
            if verified:
                cells += [f"{row[t + '_analytical']:.5g}", f"{row[t + '_error']:+.1%}"]
        cells += [f"{row['feasible_prob']:.2f}"] if classifier else []
        if verified:
            cells.append("yes" if row["feasible_analytical"] else "no (" + row["reason_analytical"] + ")")
        rows.append(cells)
    lines = [draw(header, rows)]
    if len(table) > max_rows:
        lines.append(f"... {len(table) - max_rows} more (max_rows=..., or output=json for all)")
    return "\n".join(lines)
