"""Train a surrogate on a samples table and say how good it is: targets, splits, metrics, plots.

    samples, space = read_samples("samples/hardware-mapping-sobol-n1000-s0.parquet")
    result = train_surrogate(samples, space, "gp", {"max_iter": 100}, seed=0)
    result.metrics["held_out_step_time_s_mape"], result.predictor.predict(designs)

Targets: log step time, and log energy when the samples have `energy_j`. The regression learns the
feasible rows only (an infeasible design's time is not a quantity anyone optimizes); a feasibility
classifier, when `surrogates.models.classifier` provides one, learns feasible/infeasible on all rows.

Splits (disjoint, over all rows):
- *extrapolation*: a region of the space left out of training: the largest device counts when the
  space varies `num_devices`, else the last listed technology node (a categorical parameter whose
  name has `node` in it), else the top `extrapolation_fraction` of the first numeric parameter's
  range (a faster chip than any seen); `extrapolation=<column>` picks the column;
- *held out*: a random `held_out_fraction` of the remaining rows;
- *train*: the rest (at most `max_train` feasible rows, a random subset, for the exact GP).

Metrics (`surrogates.metrics.regression_report`) per split and target, named
`<split>_<target>_<metric>` (e.g. `held_out_step_time_s_mape`).
"""

from __future__ import annotations

import importlib
import inspect
import math
import time
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional

import numpy as np
import pandas as pd
import torch

from analytical.codes import DTYPE
from analytical.specs import SpecError
from surrogates.columns import DesignColumns, parameters_from_dict
from surrogates.metrics import coverage, regression_report
from surrogates.pyfunc import SurrogatePredictor

# config name -> "module:class" of the regression models (imported when used)
SURROGATES = {"gp": "surrogates.models.gp:ExactGP", "svgp": "surrogates.models.svgp:SVGP",
              "mlp_ensemble": "surrogates.models.ensemble:MLPEnsemble"}
CLASSIFIER = "surrogates.models.classifier:FeasibilityClassifier"
TARGET_COLUMNS = ("step_time_s", "energy_j")
SPLITS = ("held_out", "extrapolation")


def import_class(target: str):
    module, _, name = target.partition(":")
    return getattr(importlib.import_module(module), name)


def make_surrogate(name: str, params: Mapping[str, Any], columns: DesignColumns, seed: Optional[int] = None):
    """A regression model by config name with its hyper-parameters (lists become tuples); models
    that take `cat_dims` get the indices of the categorical parameters, and `seed` when given."""
    if name not in SURROGATES:
        raise SpecError("surrogate", "name", name, "one of " + ", ".join(SURROGATES))
    cls = import_class(SURROGATES[name])
    params = {k: tuple(v) if isinstance(v, list) else v for k, v in params.items()}
    if seed is not None and "seed" in inspect.signature(cls.__init__).parameters:
        params.setdefault("seed", seed)
    accepted = inspect.signature(cls.__init__).parameters
    unknown = [k for k in params if k not in accepted]
    if unknown:
        raise SpecError(f"surrogate[{name}]", unknown[0], params[unknown[0]],
                        "one of " + ", ".join(p for p in accepted if p != "self"))
    return cls(**fill_input_dims(params, accepted, columns))


def fill_input_dims(params: dict[str, Any], accepted: Mapping[str, Any], columns: DesignColumns) -> dict[str, Any]:
    """`params` with the input encodings a model accepts (by its signature) and was not given,
    read from the space: `cat_dims` (categorical columns), `discrete_dims` (`[column, cardinality]`
    of every discrete parameter: snapped to bin centres), `one_hot_dims` (categoricals) and
    `log_features` (logs of the chip budgets and split fractions, `ensemble.log_features_of`)."""
    if "cat_dims" in accepted and "cat_dims" not in params:
        params["cat_dims"] = [i for i, p in enumerate(columns.parameters) if p.kind == "categorical"]
    if "discrete_dims" in accepted and "discrete_dims" not in params:
        params["discrete_dims"] = [[i, int(p.cardinality)] for i, p in enumerate(columns.parameters)
                                   if 2 <= p.cardinality < math.inf]
    if "one_hot_dims" in accepted and "one_hot_dims" not in params:
        params["one_hot_dims"] = [[i, len(p.choices)] for i, p in enumerate(columns.parameters)
                                  if p.kind == "categorical" and len(p.choices) >= 2]
    if "log_features" in accepted and "log_features" not in params:
        from surrogates.models.ensemble import log_features_of

        params["log_features"] = log_features_of(columns.parameters)
    return params


def make_classifier(params: Optional[Mapping[str, Any]] = None, seed: Optional[int] = None,
                    columns: Optional[DesignColumns] = None):
    """The feasibility classifier of `surrogates.models.classifier`, or None when the package has none;
    with `columns` it gets the space's input encodings (`fill_input_dims`)."""
    try:
        cls = import_class(CLASSIFIER)
    except (ImportError, AttributeError):
        return None
    params = {k: tuple(v) if isinstance(v, list) else v for k, v in dict(params or {}).items()}
    accepted = inspect.signature(cls.__init__).parameters
    if seed is not None and "seed" in accepted:
        params.setdefault("seed", seed)
    if columns is not None:
        params = fill_input_dims(params, accepted, columns)
    return cls(**params)


def targets_of(samples: pd.DataFrame) -> list[str]:
    """The target columns the samples have: step time, and energy when the energy model wrote it."""
    return [t for t in TARGET_COLUMNS if t in samples.columns]


def trainable_rows(samples: pd.DataFrame, targets: list[str]) -> np.ndarray:
    """`(n,)` bool: feasible rows whose targets are finite and positive (their logs exist)."""
    ok = samples["feasible"].to_numpy(dtype=bool).copy()
    for t in targets:
        y = samples[t].to_numpy(dtype=np.float64)
        ok &= np.isfinite(y) & (y > 0)
    return ok


def log_targets(samples: pd.DataFrame, targets: list[str]) -> torch.Tensor:
    """`n x t` log of the target columns."""
    return torch.tensor(np.log(samples[targets].to_numpy(dtype=np.float64)), dtype=DTYPE)


# --- splits ---------------------------------------------------------------------------------------
@dataclass
class Splits:
    """Disjoint `(n,)` bool masks over the rows of a samples table."""

    train: np.ndarray
    held_out: np.ndarray
    extrapolation: np.ndarray
    rule: str  # what the extrapolation split holds out, in words


def _top_values(values: np.ndarray, fraction: float) -> np.ndarray:
    """Rows whose value is among the largest distinct values covering >= fraction of the rows
    (never all values)."""
    distinct = np.unique(values)
    if distinct.size < 2:
        return np.zeros(values.shape, dtype=bool)
    held = np.zeros(values.shape, dtype=bool)
    for v in distinct[::-1][:-1]:
        held |= values == v
        if held.mean() >= fraction:
            break
    return held


def extrapolation_mask(samples: pd.DataFrame, columns: DesignColumns, column: str = "auto",
                       fraction: float = 0.2) -> tuple[np.ndarray, str]:
    """`(mask, rule)`: the rows of the extrapolation split (see the module docstring)."""
    names = columns.names
    if column == "auto":
        nodes = [p.name for p in columns.parameters if p.kind == "categorical" and "node" in p.name]
        numeric = [p.name for p in columns.parameters if p.kind != "categorical"]
        column = "num_devices" if "num_devices" in names else (nodes[0] if nodes else (numeric[0] if numeric else ""))
        if not column:
            raise SpecError("train", "extrapolation", "auto", "a space with a numeric parameter or a node to hold out")
    if column not in names:
        raise SpecError("train", "extrapolation", column, "auto or a design column: " + ", ".join(names))
    p = columns.parameters[names.index(column)]
    if p.kind == "categorical":
        last = p.choices[-1]
        mask = samples[column].astype(str).to_numpy() == str(last)
        return mask, f"{column} = {last}"
    if p.kind == "continuous":
        u = columns.encode(samples[names], warn=False)[:, names.index(column)].numpy()
        mask = u > 1.0 - fraction
        low = float(samples.loc[mask, column].min()) if mask.any() else math.nan
        return mask, f"{column} >= {low:.4g} (top {fraction:.0%} of its range)"
    values = samples[column].to_numpy(dtype=np.float64)
    mask = _top_values(values, fraction)
    return mask, f"{column} >= {values[mask].min():g}" if mask.any() else f"{column}: nothing held out"


def make_splits(samples: pd.DataFrame, columns: DesignColumns, held_out_fraction: float = 0.2,
                extrapolation: str = "auto", extrapolation_fraction: float = 0.2, seed: int = 0) -> Splits:
    """Extrapolation region first, then a random held-out share of the rest; train is what is left."""
    if not 0.0 < held_out_fraction < 1.0:
        raise SpecError("train", "held_out_fraction", held_out_fraction, "a number in (0, 1)")
    if not 0.0 < extrapolation_fraction < 1.0:
        raise SpecError("train", "extrapolation_fraction", extrapolation_fraction, "a number in (0, 1)")
    extra, rule = extrapolation_mask(samples, columns, extrapolation, extrapolation_fraction)
    rest = np.flatnonzero(~extra)
    rng = np.random.default_rng(seed)
    held = np.zeros(len(samples), dtype=bool)
    held[rng.permutation(rest)[:int(round(held_out_fraction * rest.size))]] = True
    return Splits(train=~extra & ~held, held_out=held, extrapolation=extra, rule=rule)


# --- evaluation and plots -------------------------------------------------------------------------
@dataclass
class Evaluation:
    """Log-scale truth and predictive `(n, t)` arrays of one split, and its metrics."""

    log_true: np.ndarray
    mean: np.ndarray
    std: np.ndarray
    metrics: dict[str, float]


def evaluate_split(model, X: torch.Tensor, Y: torch.Tensor, targets: list[str]) -> Evaluation:
    """Metrics of `model` on `X: n x d` against log targets `Y: n x t` (keys `<target>_<metric>`)."""
    mean, std = model.predict(X, return_std=True)
    mean, std = mean.reshape(Y.shape), std.reshape(Y.shape)
    metrics = {f"{t}_n": float(Y.shape[0]) for t in targets}
    for name, values in regression_report(Y, mean, std).items():
        metrics.update({f"{t}_{name}": float(v) for t, v in zip(targets, values)})
    return Evaluation(Y.numpy(), mean.detach().numpy(), std.detach().numpy(), metrics)


CALIBRATION_LEVELS = tuple(np.round(np.linspace(0.05, 0.95, 19), 2)) + (0.99,)


def calibration_curve(log_true: np.ndarray, mean: np.ndarray, std: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """`(levels, observed)`: observed coverage of each nominal central interval (`(n,)` inputs)."""
    y, m, s = (torch.as_tensor(np.ascontiguousarray(a)) for a in (log_true, mean, std))
    return np.array(CALIBRATION_LEVELS), np.array([coverage(y, m, s, float(q)) for q in CALIBRATION_LEVELS])


def parity_figure(evaluations: Mapping[str, Evaluation], targets: list[str], max_points: int = 5000, seed: int = 0):
    """Predicted (median) vs true per target, log-log, one colour per split."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(targets), figsize=(5.0 * len(targets), 4.6), squeeze=False)
    rng = np.random.default_rng(seed)
    for j, (t, ax) in enumerate(zip(targets, axes[0])):
        lo, hi = math.inf, -math.inf
        for split, ev in evaluations.items():
            if ev.log_true.shape[0] == 0:
                continue
            idx = rng.permutation(ev.log_true.shape[0])[:max_points]
            x, y = np.exp(ev.log_true[idx, j]), np.exp(ev.mean[idx, j])
            ax.scatter(x, y, s=4, alpha=0.5, label=f"{split} (MAPE {ev.metrics[f'{t}_mape']:.1%})")
            lo, hi = min(lo, x.min(), y.min()), max(hi, x.max(), y.max())
        if math.isfinite(lo):
            ax.plot([lo, hi], [lo, hi], "k--", lw=1)
        ax.set(xscale="log", yscale="log", xlabel=f"analytical {t}", ylabel=f"surrogate {t} (median)", title=t)
        ax.legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    return fig


def calibration_figure(evaluations: Mapping[str, Evaluation], targets: list[str]):
    """Observed vs nominal coverage of central predictive intervals, per split and target."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.0, 4.6))
    for split, ev in evaluations.items():
        if ev.log_true.shape[0] == 0:
            continue
        for j, t in enumerate(targets):
            levels, observed = calibration_curve(ev.log_true[:, j], ev.mean[:, j], ev.std[:, j])
            ax.plot(levels, observed, marker="o", ms=3, label=f"{split}: {t}")
    ax.plot([0, 1], [0, 1], "k--", lw=1)
    ax.set(xlabel="nominal coverage of the central interval", ylabel="observed coverage", xlim=(0, 1), ylim=(0, 1),
           title="calibration")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


# --- the whole training -----------------------------------------------------------------------------
@dataclass
class TrainingResult:
    predictor: SurrogatePredictor
    metrics: dict[str, float]
    evaluations: dict[str, Evaluation]
    splits: Splits
    targets: list[str]
    input_example: pd.DataFrame  # two training designs (inside the trained range)
    info: dict[str, Any] = field(default_factory=dict)  # counts, rule, timings (for params and reports)


def train_surrogate(samples: pd.DataFrame, space: Mapping[str, Any], surrogate: str, params: Mapping[str, Any],
                    held_out_fraction: float = 0.2, extrapolation: str = "auto", extrapolation_fraction: float = 0.2,
                    max_train: Optional[int] = None, classifier: Optional[Mapping[str, Any]] = None,
                    seed: int = 0) -> TrainingResult:
    """Fit `surrogate` (a `SURROGATES` name with its constructor `params`) on the train split of the
    samples and evaluate it on the held-out and extrapolation splits. `space` is the samples' space
    record (`surrogates.columns.read_samples`); `classifier`: the feasibility classifier's
    parameters (None: no classifier)."""
    columns = DesignColumns(parameters_from_dict(space))
    targets = targets_of(samples)
    if not targets:
        raise SpecError("data", "columns", "no step_time_s", "a samples table written by `deepflow sample`")
    model = make_surrogate(surrogate, params, columns, seed)
    splits = make_splits(samples, columns, held_out_fraction, extrapolation, extrapolation_fraction, seed)
    ok = trainable_rows(samples, targets)
    train_rows = np.flatnonzero(splits.train & ok)
    if max_train is not None and train_rows.size > max_train:
        train_rows = np.sort(np.random.default_rng(seed + 1).permutation(train_rows)[:max_train])
    if train_rows.size < 2:
        raise SpecError("train", "feasible training rows", int(train_rows.size),
                        "at least 2: sample more designs or a space with more feasible ones")
    train = samples.iloc[train_rows]
    X = columns.encode(train[columns.names], warn=False)
    start = time.perf_counter()
    model.fit(X, log_targets(train, targets))
    fit_s = time.perf_counter() - start
    clf = None
    clf_s = 0.0
    if classifier is not None:
        clf = make_classifier(classifier, seed, columns)
        clf_rows = np.flatnonzero(splits.train)
        labels = samples["feasible"].to_numpy(dtype=bool)[clf_rows]
        if clf is not None and 0 < labels.sum() < labels.size:
            start = time.perf_counter()
            clf.fit(columns.encode(samples.iloc[clf_rows][columns.names], warn=False),
                    torch.tensor(labels, dtype=DTYPE))
            clf_s = time.perf_counter() - start
        else:
            clf = None
    meta = {"space": dict(space), "targets": targets, "transform": "log", "surrogate": surrogate,
            "ranges": columns.trained_ranges(train[columns.names]), "trained_rows": int(train_rows.size),
            "regression_rows": "feasible", "extrapolation_rule": splits.rule}
    predictor = SurrogatePredictor(model, meta, clf)
    evaluations, metrics = {}, {}
    start = time.perf_counter()
    for split in SPLITS:
        rows = np.flatnonzero(getattr(splits, split) & ok)
        if rows.size == 0:
            continue
        part = samples.iloc[rows]
        ev = evaluate_split(model, columns.encode(part[columns.names], warn=False), log_targets(part, targets), targets)
        evaluations[split] = ev
        metrics.update({f"{split}_{k}": v for k, v in ev.metrics.items()})
        if clf is not None:
            all_rows = np.flatnonzero(getattr(splits, split))
            prob = predictor.predict(samples.iloc[all_rows][columns.names], warn=False)["feasible_prob"].to_numpy()
            truth = samples["feasible"].to_numpy(dtype=bool)[all_rows]
            metrics[f"{split}_feasible_accuracy"] = float(np.mean((prob >= 0.5) == truth))
            metrics[f"{split}_feasible_brier"] = float(np.mean((prob - truth) ** 2))
    info = {"rows": len(samples), "feasible_rows": int(ok.sum()), "train_rows": int(train_rows.size),
            "held_out_rows": int((splits.held_out & ok).sum()),
            "extrapolation_rows": int((splits.extrapolation & ok).sum()), "extrapolation_rule": splits.rule,
            "fit_s": fit_s, "classifier_fit_s": clf_s, "evaluate_s": time.perf_counter() - start,
            "classifier": clf is not None}
    return TrainingResult(predictor, metrics, evaluations, splits, targets, train[columns.names].head(2), info)
