"""`deepflow optimize`: a tracked, resumable optimization run (or a multirun sweep of them).

    deepflow optimize                                   # the quickstart experiment
    deepflow optimize experiment=gpt3-175b-h100-mapping strategy=random budget=100
    deepflow optimize -m seed=0,1,2                     # one parent MLflow run, a child per job
    deepflow optimize resume=<run id>                   # continue a killed run
    deepflow optimize experiment=llama3-70b-n5-hierarchical   # inner=best_mapping: BO proposes the chip,
                                                        # an exhaustive search each proposal's mapping

One job: compose and check the config (conf/optimize.yaml + an experiment), open the MLflow run, and
run `deepflow.loop.run` with a callback that, after every verified batch, (1) rewrites the local
`evaluations.parquet` atomically (`deepflow.runstore`), then (2) logs one metric point per evaluation
to MLflow (step = evaluation index) and the Parquet as an artifact. MLflow failing mid-run is warned
about once and the local record goes on; `resume=<run id>` later reloads the Parquet, rebuilds the
`History` (no evaluation is repeated), sends MLflow what it missed, and continues the SAME MLflow
run. At the end: convergence and Pareto plots (PNG + offline HTML), the best design as a YAML that
`deepflow evaluate design=<file>` reads back (checked here: same step time), and its breakdown.

Metrics per evaluation: `feasible`, `step_time_s`, `energy_j` (when the model has it), `objective`
(the objective in natural units, feasible evaluations, one objective), `best_so_far`, `regret`
(best / optimum - 1, when `optimum=enumerate`), `hypervolume` (two objectives, in log units),
and per batch `propose_s`, `gp_fit_s`, `acquisition_s` (BO), `verify_s`.
"""

from __future__ import annotations

import json
import math
import re
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import numpy as np
import pandas as pd
import torch
from omegaconf import DictConfig, OmegaConf

from analytical.design import DTYPE
from analytical.specs import SpecError
from deepflow.config import compose_config, option, space_from_config
from deepflow.presets import ConfigError, available, to_spec
from deepflow.runstore import RunStore, flatten_row, point_columns
from deepflow.sweep import expand, split_flags, sweep_keys

CONFIG_NAME = "optimize"
OWN_GROUPS = ("experiment", "strategy", "tracking", "space")
RESUME_OPTIONS = ("resume", "tracking.uri", "output_dir", "output")
MAX_ENUMERATE = 2_000_000  # largest finite space `optimum=enumerate` evaluates whole
OPTIONS = {"name", "objective", "power_cap_w", "budget", "q", "seed", "optimum", "warm_start", "resume", "output_dir",
           "output", "sweep", "hardware", "system", "model", "mapping", "space", "strategy", "tracking", "chip",
           "inner"}
INNER = (None, "best_mapping")  # `inner`: null = the space as given; best_mapping = deepflow.hierarchical
HV_MARGIN = 0.1  # hypervolume reference: nadir of the first feasible batch + this, in log units


def _err(where: str, value: Any, allowed: str) -> ConfigError:
    return ConfigError(f"{where}={value!r} is invalid: allowed {allowed}")


# ------------------------------------------------------------------------------------ the job
@dataclass
class Job:
    """A checked configuration, ready to run: nothing has been evaluated or logged yet."""

    cfg: DictConfig
    overrides: list[str]
    name: str
    space: Any
    objective: Any
    strategy_name: str
    strategy_params: dict
    budget: int
    q: int
    seed: int
    uri: str
    experiment: str
    output_dir: Path
    optimum: Optional[str]
    warm_start: dict = field(default_factory=dict)
    inner: Optional[str] = None  # best_mapping: `space` is a deepflow.hierarchical.BestMappingSpace

    def make_strategy(self, prior=None):
        from deepflow.strategies import make_strategy

        params = dict(self.strategy_params)
        if self.strategy_name == "gradient":  # it differentiates the run's own objective
            params["objective"] = self.objective
        if prior is not None:
            params.update(prior=prior, prior_targets=list(range(self.objective.num_objectives)))
        return make_strategy(self.strategy_name, **params)


def _check_groups(overrides: list[str]) -> None:
    """A wrong experiment / strategy / tracking / space name, named with the allowed ones."""
    for override in overrides:
        key, _, value = override.partition("=")
        key = key.lstrip("+~")
        if key in OWN_GROUPS and value not in available(key) and value not in ("null", "none"):
            raise ConfigError(f"{key}={value!r} is not a known {key}: allowed {', '.join(available(key))}")


def _int(cfg: DictConfig, key: str, minimum: int) -> int:
    value = OmegaConf.select(cfg, key)
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise _err(key, value, f"an integer >= {minimum}")
    return value


def prepare(cfg: DictConfig, overrides: list[str]) -> Job:
    """Check everything a run needs (cheap: no evaluation, no MLflow) and return the `Job`."""
    from deepflow.objectives import make_objective
    from deepflow.strategies import STRATEGIES, make_strategy
    from deepflow.tracking import resolve_uri

    unknown = sorted(k for k in cfg if k not in OPTIONS)
    if unknown:
        raise ConfigError(f"{unknown[0]} is not an option of deepflow optimize: allowed {', '.join(sorted(OPTIONS))}")
    name = str(option(cfg, "name"))
    if not name or "/" in name or name.startswith("."):
        raise _err("name", name, "a non-empty name without '/' (a folder under output_dir)")
    option(cfg, "output", ("table", "json"))
    budget, q, seed = _int(cfg, "budget", 1), _int(cfg, "q", 1), _int(cfg, "seed", 0)
    optimum = option(cfg, "optimum", (None, "enumerate"))
    inner = OmegaConf.select(cfg, "inner")
    if inner not in INNER:
        raise _err("inner", inner, "null (the space as given) or best_mapping (the optimizer proposes the non-mapping "
                                   "parameters, an exhaustive search picks each proposal's mapping)")
    try:
        objective = make_objective(str(option(cfg, "objective")), option(cfg, "power_cap_w"))
    except SpecError as exc:
        raise ConfigError(str(exc)) from None
    for group in ("hardware", "system", "model", "mapping"):
        to_spec(group, cfg[group])
    space = space_from_config(cfg)
    if inner == "best_mapping":
        from deepflow.hierarchical import BestMappingSpace

        try:
            space = BestMappingSpace(space)
        except SpecError:
            raise _err("inner", inner, f"null for space {space.name}: best_mapping needs a space with parameters "
                                       f"outside the mapping (e.g. space=chip-mapping)") from None
    if optimum == "enumerate" and not space.size <= MAX_ENUMERATE:
        raise _err("optimum", optimum, f"null for space {space.name} ({space.size:.3g} points: enumerate needs a "
                                       f"finite space of at most {MAX_ENUMERATE:,})")
    strategy_cfg = OmegaConf.to_container(cfg.strategy, resolve=True)
    strategy_name = strategy_cfg.pop("name", None)
    if strategy_name not in STRATEGIES:
        raise _err("strategy.name", strategy_name, ", ".join(STRATEGIES))
    try:
        make_strategy(strategy_name, **strategy_cfg)  # constructors check their parameters
    except SpecError as exc:
        raise ConfigError(f"strategy.{exc.field} = {exc.value!r} is invalid: allowed {exc.allowed}") from None
    warm = OmegaConf.to_container(cfg.warm_start, resolve=True) if cfg.get("warm_start") else {}
    for key in warm:
        if key not in ("samples", "model", "params"):
            raise ConfigError(f"warm_start.{key} is not an option: allowed samples, model, params")
    samples = warm.get("samples", 0)
    if isinstance(samples, bool) or not isinstance(samples, int) or samples < 0:
        raise _err("warm_start.samples", samples, "an integer >= 0 (0 = no warm start)")
    if samples and strategy_name != "bo":
        warm = {**warm, "samples": 0, "skipped": f"strategy {strategy_name} takes no prior (only bo does)"}
    elif samples:
        from surrogates import MODELS

        if warm.get("model") not in MODELS:
            raise _err("warm_start.model", warm.get("model"), ", ".join(MODELS))
    tracking = cfg.get("tracking") or {}
    uri = resolve_uri(tracking.get("uri"))
    experiment = str(tracking.get("experiment") or name)
    return Job(cfg=cfg, overrides=overrides, name=name, space=space, objective=objective,
               strategy_name=strategy_name, strategy_params=strategy_cfg, budget=budget, q=q, seed=seed,
               uri=uri, experiment=experiment, output_dir=Path(str(option(cfg, "output_dir"))),
               optimum=optimum, warm_start=warm, inner=inner)


def compose_jobs(overrides: list[str], multirun: bool) -> list[Job]:
    """Every job of the command line, composed and checked before any of them runs."""
    _check_groups(overrides)
    sweeps = sweep_keys(overrides)
    if sweeps and not multirun:
        raise ConfigError(f"{sweeps[0]} has several values (a sweep): add -m (--multirun) to run one job per value")
    first = _compose(expand(overrides)[0])
    jobs = expand(overrides, first.get("sweep") or {}) if (multirun or first.get("sweep")) else [overrides]
    return [prepare(_compose(job), job) for job in jobs]


def _compose(overrides: list[str]) -> DictConfig:
    try:
        return compose_config(overrides, config_name=CONFIG_NAME)
    except ConfigError as exc:
        missing = re.match(r"Could not override '([^']+)'", str(exc))
        if missing:
            key = missing.group(1)
            raise ConfigError(f"{key} is not a key of the optimize config: allowed {', '.join(sorted(OPTIONS))} and "
                              f"their fields (e.g. strategy.n_init, mapping.tp); +{key}=... adds a new one") from None
        raise


# ------------------------------------------------------------------------------ MLflow sink
class MlflowSink:
    """Logs to one MLflow run and never raises: the first failure is warned about once (the local
    record goes on) and later calls are skipped. The run's state.json `mlflow_synced` counts the
    evaluations MLflow has received (a resumed run sends the rest)."""

    def __init__(self, client, run_id: str, store: RunStore):
        self.client, self.run_id, self.store = client, run_id, store
        self.alive = True

    def call(self, what: str, fn, *args, **kwargs) -> bool:
        if not self.alive:
            return False
        try:
            fn(*args, **kwargs)
            return True
        except Exception as exc:  # noqa: BLE001 - any tracking failure must leave the run going
            self.alive = False
            first = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
            print(f"deepflow: warning: MLflow failed while logging {what} ({first}); the run goes on and keeps "
                  f"every evaluation in {self.store.evaluations_path}; `deepflow optimize resume={self.run_id}` "
                  f"sends MLflow what it missed", file=sys.stderr)
            return False

    def log_evaluations(self, frame: pd.DataFrame, lo: int, hi: int, context: "MetricContext") -> None:
        from mlflow.entities import Metric

        if hi <= lo:
            return
        now = int(time.time() * 1000)
        metrics = [Metric(key, value, now, step) for key, value, step in context.metrics(frame, lo, hi)]
        ok = all(self.call("metrics", self.client.log_batch, self.run_id, metrics=metrics[i:i + 1000])
                 for i in range(0, len(metrics), 1000))
        if ok and self.call("evaluations.parquet", self.client.log_artifact, self.run_id,
                            str(self.store.evaluations_path)):
            self.store.update_state(mlflow_synced=hi)


# ---------------------------------------------------------------------------------- metrics
@dataclass
class MetricContext:
    """What the per-evaluation metrics need besides the evaluations table."""

    outcomes: list[str]  # objective columns (logs), e.g. ["log_step_time_s"]
    optimum: Optional[float] = None  # best feasible objective of the space, natural units

    def reference_point(self, frame: pd.DataFrame) -> Optional[np.ndarray]:
        """Hypervolume reference (log units): nadir of the feasible rows of the batches up to the
        first one with a feasible row, plus HV_MARGIN; None before any feasible row. A function of
        the table alone, so a resumed run computes the same."""
        feasible = frame["objective_feasible"].to_numpy(dtype=bool)
        if not feasible.any():
            return None
        first_batch = frame["batch"].to_numpy()[np.argmax(feasible)]
        rows = feasible & (frame["batch"].to_numpy() <= first_batch)
        return frame.loc[rows, self.outcomes].to_numpy(dtype=float).max(0) + HV_MARGIN

    def columns(self, frame: pd.DataFrame) -> dict[str, np.ndarray]:
        """Per-row derived series of the whole table: objective, best so far, regret, hypervolume."""
        feasible = frame["objective_feasible"].to_numpy(dtype=bool)
        y0 = frame[self.outcomes[0]].to_numpy(dtype=float)
        value = np.where(feasible, np.exp(y0), np.nan)
        best = np.minimum.accumulate(np.where(feasible, value, np.inf))
        out = {"objective": value, "best_so_far": np.where(np.isfinite(best), best, np.nan)}
        if self.optimum is not None:
            out["regret"] = out["best_so_far"] / self.optimum - 1.0
        if len(self.outcomes) == 2:
            from deepflow.plots import hypervolume_2d

            ref = self.reference_point(frame)
            Y = frame[self.outcomes].to_numpy(dtype=float)
            out["hypervolume"] = np.array([hypervolume_2d(Y[:i + 1][feasible[:i + 1]], ref) if ref is not None
                                           else 0.0 for i in range(len(frame))])
            del out["objective"]
        return out

    def metrics(self, frame: pd.DataFrame, lo: int, hi: int) -> list[tuple[str, float, int]]:
        """`(key, value, step)` of rows lo..hi-1 (finite values only; step = evaluation index)."""
        derived = self.columns(frame)
        per_row = ["step_time_s"] + (["energy_j"] if "energy_j" in frame.columns else [])
        per_batch = [c for c in ("propose_s", "gp_fit_s", "acquisition_s", "verify_s") if c in frame.columns]
        out = []
        for i in range(lo, hi):
            row = frame.iloc[i]
            step = int(row["index"])
            values = {"feasible": float(row["objective_feasible"]), **{c: float(row[c]) for c in per_row},
                      **{k: float(v[i]) for k, v in derived.items()}}
            if i == 0 or frame["batch"].iloc[i - 1] != row["batch"]:
                values.update({c: float(row[c]) for c in per_batch})
            out += [(k, v, step) for k, v in values.items() if math.isfinite(v)]
        return out


# -------------------------------------------------------------------------- timed strategy
class TimedStrategy:
    """A strategy with the wall time of each `propose` measured; a strategy that fits models (BO)
    reports their seconds as `last_fit_s_`, so `acquisition_s = propose_s - gp_fit_s`."""

    def __init__(self, strategy):
        self.strategy = strategy
        self.name = strategy.name
        self.last: dict[str, float] = {}
        self.proposed_at = time.perf_counter()

    def propose(self, space, history, q, seed):
        start = time.perf_counter()
        X = self.strategy.propose(space, history, q, seed)
        self.proposed_at = time.perf_counter()
        propose_s = self.proposed_at - start
        fit_s = getattr(self.strategy, "last_fit_s_", 0.0)
        self.last = {"propose_s": propose_s}
        if fit_s > 0:
            self.last.update(gp_fit_s=fit_s, acquisition_s=propose_s - fit_s)
        return X


# --------------------------------------------------------------------------------- helpers
def enumerate_optimum(space, objective) -> dict[str, Any]:
    """Best feasible first objective over every point of a finite space (bin centres), in chunks."""
    grids = [(torch.arange(int(p.cardinality), dtype=DTYPE) + 0.5) / p.cardinality for p in space.parameters]
    grid = torch.cartesian_prod(*grids).reshape(-1, space.dim)
    grid = grid[space.known_feasible(grid)]
    best, best_x, n_feasible = math.inf, None, 0
    for lo in range(0, grid.shape[0], 65536):
        X = grid[lo:lo + 65536]
        Y, feasible, _, _ = objective.evaluate(space, X)
        n_feasible += int(feasible.sum())
        y = torch.where(feasible, Y[:, 0], torch.full_like(Y[:, 0], math.inf))
        i = int(torch.argmin(y))
        if float(y[i]) < best:
            best, best_x = float(y[i]), X[i]
    return {"optimum": math.exp(best) if math.isfinite(best) else None, "points": int(grid.shape[0]),
            "feasible": n_feasible, "x": None if best_x is None else best_x.tolist()}


def evaluation_frame(X: torch.Tensor, rows: list[dict], start: int, batch: int, timings: dict) -> pd.DataFrame:
    """The Parquet rows of one verified batch."""
    records = []
    for i, row in enumerate(rows):
        flat = {"index": start + i, "batch": batch, **{f"x.{j}": float(v) for j, v in enumerate(X[i].tolist())},
                **flatten_row(row), **timings, "verified_at": time.time()}
        records.append(flat)
    return pd.DataFrame.from_records(records)


def base_space(space):
    """The `DesignSpace` behind `space` (the outer space of a `BestMappingSpace`): template and chip."""
    from deepflow.hierarchical import BestMappingSpace

    return space.outer if isinstance(space, BestMappingSpace) else space


def chosen_mapping(space, X: torch.Tensor) -> list[dict[str, float]]:
    """Per point of `X n x d`, the mapping fields the inner search chose (`inner=best_mapping`:
    `BestMappingSpace.to_batch`, cached); empty dicts for a plain space (its mapping is in X)."""
    from analytical.search import MAPPING_FIELDS
    from deepflow.hierarchical import BestMappingSpace

    if not isinstance(space, BestMappingSpace):
        return [{} for _ in range(X.shape[0])]
    batch = space.to_batch(X)
    return [{name: float(getattr(batch, name)[i]) for name in MAPPING_FIELDS} for i in range(X.shape[0])]


def design_values(space, x: torch.Tensor) -> dict[str, float]:
    """`{field: SI value}` of the point `x (d,)`: every searched parameter (DesignBatch fields and
    chip inputs), the mapping an inner search chose for it (`inner=best_mapping`) and the
    DesignBatch fields its design changes from the space's template (tied peaks, derived dp, a
    derived chip's accelerator)."""
    u = x.reshape(1, -1)
    out = {name: float(v[0]) for name, v in space.decode(u).items()}
    out.update(chosen_mapping(space, u)[0])
    batch, template = space.to_batch(u), base_space(space).template
    for name, value in batch.fields().items():
        v, t = float(value[0]), float(getattr(template, name)[0])
        if name == "dp" or v != t:
            out.setdefault(name, v)
    return out


def chip_summary(chip: dict, accelerator) -> dict[str, Any]:
    """The chip inputs that matter to a reader and what they derive (`AcceleratorSpec` units)."""
    keys = ("node", "memory", "scale_up_link", "scale_out_link", "die_area_mm2", "power_budget_w",
            "area_compute_fraction", "area_sram_fraction", "power_compute_fraction", "power_memory_fraction",
            "shoreline_memory_fraction", "flops_per_cycle_per_unit", "scale_out_lanes")
    derived = ("compute_units", "peak_tflops_bf16", "peak_tflops_fp8", "sram_mib", "hbm_gib", "hbm_bw_gb_per_s",
               "scale_up_bw_gb_per_s", "scale_out_gbit_per_s", "tdp_w")
    return {**{k: chip[k] for k in keys if k in chip}, **{k: getattr(accelerator, k) for k in derived}}


def chip_line(c: dict[str, Any]) -> str:
    return (f"chip: {c['node']} {c['memory']} {c['die_area_mm2']:.0f} mm2 {c['power_budget_w']:.0f} W; area "
            f"compute/sram {c['area_compute_fraction']:.2f}/{c['area_sram_fraction']:.2f}, power compute/memory "
            f"{c['power_compute_fraction']:.2f}/{c['power_memory_fraction']:.2f}, shoreline memory "
            f"{c['shoreline_memory_fraction']:.2f}, {c['flops_per_cycle_per_unit']} FLOP/clk per unit -> "
            f"{c['compute_units']} units, {c['peak_tflops_bf16']:.0f} TFLOP/s bf16, {c['sram_mib']:.0f} MiB SRAM, "
            f"{c['hbm_gib']:.0f} GiB HBM at {c['hbm_bw_gb_per_s']:.0f} GB/s, scale-up {c['scale_up_bw_gb_per_s']:.0f} "
            f"GB/s, scale-out {c['scale_out_gbit_per_s']:.0f} Gbit/s")


def roundtrip_step_time_s(sections: dict[str, dict]) -> tuple[tuple, float]:
    """`(specs, step time)` of a design config as `deepflow evaluate design=<file>` computes them."""
    from analytical import evaluate
    from deepflow.config import design_from_config

    specs, design, _ = design_from_config(OmegaConf.create(sections))
    return specs, float(evaluate(design).step_time_s[0])


# ------------------------------------------------------------------------------- one run
class OptimizationRun:
    """One job's execution: MLflow run, local record, loop, artifacts."""

    def __init__(self, job: Job, store: RunStore, sink: MlflowSink, optimum: Optional[dict], quiet: bool = False):
        self.job, self.store, self.sink, self.optimum, self.quiet = job, store, sink, optimum, quiet
        self.context = MetricContext(outcomes=list(job.objective.outcome_names),
                                     optimum=(optimum or {}).get("optimum"))
        self.strategy: Optional[TimedStrategy] = None
        self.started = time.perf_counter()

    def on_evaluation(self, X: torch.Tensor, rows: list[dict]) -> None:
        for row, mapping in zip(rows, chosen_mapping(self.job.space, X)):
            row["design"].update(mapping)  # inner=best_mapping: the chosen mapping as design.tp, ... columns
        frame = self.store.evaluations()
        start = len(frame)
        batch = int(frame["batch"].iloc[-1]) + 1 if start else 0
        timings = dict(self.strategy.last) if self.strategy else {}
        if self.strategy:
            timings["verify_s"] = time.perf_counter() - self.strategy.proposed_at
        frame = self.store.append(evaluation_frame(X, rows, start, batch, timings))  # local record first
        self.sink.log_evaluations(frame, self.store.state().get("mlflow_synced", 0), len(frame), self.context)
        if not self.quiet:
            best = self.context.columns(frame)["best_so_far"][-1]
            what = "step time" if self.context.outcomes[0] == "log_step_time_s" else "energy per step"
            unit = "s" if self.context.outcomes[0] == "log_step_time_s" else "J"
            text = f"best {what} {best:.4g} {unit}" if np.isfinite(best) else "no feasible design yet"
            extra = "".join(f", {k} {v:.2f} s" for k, v in timings.items() if k != "verify_s")
            print(f"[{len(frame):4d}/{self.job.budget}] {text} ({int(frame['objective_feasible'].sum())} feasible"
                  f"{extra})", file=sys.stderr, flush=True)

    def history(self):
        from deepflow.strategies.base import History

        X, Y, feasible, C = self.store.history_tensors(self.job.space.dim, self.context.outcomes,
                                                       list(self.job.objective.constraint_names))
        return History(X=X, Y=Y, feasible=feasible, C=C)

    def run(self, prior=None) -> dict[str, Any]:
        from deepflow.loop import run as loop_run

        history = self.history()
        if history.n > self.job.budget:
            raise _err("budget", self.job.budget, f">= the {history.n} evaluations the run already has")
        self.strategy = TimedStrategy(self.job.make_strategy(prior))
        if history.n < self.job.budget:
            loop_run(self.job.space, self.job.objective, self.strategy, self.job.budget, self.job.q, self.job.seed,
                     on_evaluation=self.on_evaluation, history=history)
        return self.finish()

    # ------------------------------------------------------------------------- artifacts
    def finish(self) -> dict[str, Any]:
        from deepflow import plots
        from deepflow.designs import design_config, design_yaml

        job, store, frame = self.job, self.store, self.store.evaluations()
        d = store.directory.resolve()
        derived = self.context.columns(frame)
        label = {"log_step_time_s": "step time (s)", "log_energy_j": "energy per step (J)"}[self.context.outcomes[0]]
        title = f"{job.name}: {job.strategy_name}, seed {job.seed}"
        plots.convergence_png(frame, d / "convergence.png", label, np.exp(frame[self.context.outcomes[0]].to_numpy(float))
                              * np.where(frame["objective_feasible"].to_numpy(bool), 1.0, np.nan),
                              derived["best_so_far"], self.context.optimum, derived.get("hypervolume"), title)
        plots.pareto_png(frame, d / "pareto.png", title)
        plots.pareto_html(frame, d / "pareto.html", title)
        summary: dict[str, Any] = {"run_id": store.run_id, "name": job.name, "experiment": job.experiment,
                                   "evaluations": len(frame), "feasible": int(frame["objective_feasible"].sum()),
                                   "objective": job.objective.name, "strategy": job.strategy_name, "seed": job.seed,
                                   "inner": job.inner, "overrides": job.overrides, "local_dir": str(d.resolve()),
                                   "tracking_uri": job.uri, "output": str(job.cfg.output)}
        if self.optimum:
            summary["optimum"] = self.optimum
        if "hypervolume" in derived:
            summary["hypervolume"] = float(derived["hypervolume"][-1])
            front = frame[frame["objective_feasible"].to_numpy(bool)]
            Y = front[self.context.outcomes].to_numpy(float)
            front = front[plots.pareto_front_mask(Y)].sort_values("step_time_s")
            front.to_csv(d / "pareto_front.csv", index=False)
            summary["pareto_front"] = int(len(front))
        best = int(np.nanargmin(np.where(frame["objective_feasible"].to_numpy(bool),
                                         frame[self.context.outcomes[0]].to_numpy(float), np.inf))) \
            if frame["objective_feasible"].any() else None
        if best is not None:
            x = torch.tensor(frame.loc[best, point_columns(job.space.dim)].to_numpy(float), dtype=DTYPE)
            sections, unmapped = design_config(job.cfg, design_values(job.space, x),
                                               getattr(base_space(job.space), "chip", None))
            row = job.space.evaluate(x.reshape(1, -1)).row(0)
            recorded = float(frame.loc[best, "step_time_s"])
            header = (f"Best design of `deepflow optimize` run {store.run_id} ({job.name}), evaluation "
                      f"{int(frame.loc[best, 'index'])} of {len(frame)}: step time {recorded:.6g} s.\n"
                      f"Evaluate it again:  deepflow evaluate design={d / 'best_design.yaml'}")
            if unmapped:
                header += f"\nNOT written back (no spec field): {', '.join(unmapped)}"
            (d / "best_design.yaml").write_text(design_yaml(sections, header))
            specs, again = roundtrip_step_time_s(sections)
            if not math.isclose(again, recorded, rel_tol=1e-9):
                print(f"deepflow: warning: best_design.yaml evaluates to {again:.9g} s, the run recorded "
                      f"{recorded:.9g} s", file=sys.stderr)
            breakdown = {"evaluation": int(frame.loc[best, "index"]), "design": sections, **row}
            (d / "best_breakdown.json").write_text(json.dumps(breakdown, indent=2))
            if "chip" in sections:
                summary["best_chip"] = chip_summary(sections["chip"], specs[0])
            summary.update(best_index=int(frame.loc[best, "index"]), best_step_time_s=recorded,
                           roundtrip_step_time_s=again,
                           best_row=row, best_specs=specs, best_design=str(d / "best_design.yaml"))
            if self.context.optimum:
                summary["regret"] = float(derived["regret"][-1])
        store.update_state(status="finished", evaluations=len(frame))
        self.sink.log_evaluations(frame, store.state().get("mlflow_synced", 0), len(frame), self.context)
        if self.sink.call("artifacts", self.sink.client.log_artifacts, self.sink.run_id, str(d)):
            self.sink.call("status", self.sink.client.set_terminated, self.sink.run_id, "FINISHED")
        summary["mlflow_complete"] = self.sink.alive
        summary["elapsed_s"] = time.perf_counter() - self.started
        return summary


# --------------------------------------------------------------------------- MLflow setup
def _client(uri: str):
    from mlflow import MlflowClient

    from deepflow.tracking import check_reachable, quiet_mlflow_logs

    check_reachable(uri)
    quiet_mlflow_logs()
    return MlflowClient(tracking_uri=uri)


def _experiment_id(client, name: str) -> str:
    found = client.get_experiment_by_name(name)
    return found.experiment_id if found is not None else client.create_experiment(name)


def _params(cfg: DictConfig) -> dict[str, str]:
    flat = pd.json_normalize(OmegaConf.to_container(cfg, resolve=True), sep=".").iloc[0].to_dict()
    return {k: (json.dumps(v) if isinstance(v, (list, dict)) else str(v))[:6000] for k, v in flat.items()}


def _log_params(client, run_id: str, cfg: DictConfig) -> None:
    from mlflow.entities import Param

    params = [Param(k, v) for k, v in _params(cfg).items()]
    for i in range(0, len(params), 100):
        client.log_batch(run_id, params=params[i:i + 100])


def _warm_start(job: Job, store: RunStore, quiet: bool):
    """Fit the warm-start surrogate on Sobol samples (or reload it on resume); None without one."""
    samples = job.warm_start.get("samples", 0)
    if job.warm_start.get("skipped") and not quiet:
        print(f"warm start skipped: {job.warm_start['skipped']}", file=sys.stderr, flush=True)
    if not samples:
        return None
    from surrogates import load_surrogate, model_class

    directory = store.directory / "surrogate"
    if (directory / "config.json").is_file():
        return load_surrogate(directory)
    start = time.perf_counter()
    X = job.space.sample(samples, method="sobol", seed=job.seed + 7919)
    Y, feasible, _, result = job.objective.evaluate(job.space, X)
    cls = model_class(job.warm_start.get("model"))
    params = dict(job.warm_start.get("params") or {})
    if "cat_dims" in cls.__init__.__code__.co_varnames and "cat_dims" not in params:
        params["cat_dims"] = [i for i, p in enumerate(job.space.parameters) if p.kind == "categorical"]
    rows = feasible if int(feasible.sum()) >= 2 else torch.ones_like(feasible)
    model = cls(**params).fit(X[rows], Y[rows])
    model.save(directory)
    frame = pd.DataFrame(X.numpy(), columns=point_columns(job.space.dim))
    for j, name in enumerate(job.objective.outcome_names):
        frame[name] = Y[:, j].numpy()
    frame["feasible"] = feasible.numpy()
    frame.to_parquet(store.directory / "warm_start_samples.parquet", index=False)
    store.update_state(warm_start={"samples": samples, "feasible": int(feasible.sum()), "model": cls.__name__,
                                   "fit_s": time.perf_counter() - start})
    if not quiet:
        print(f"warm start: {samples} Sobol samples ({int(feasible.sum())} feasible), {cls.__name__} fitted in "
              f"{time.perf_counter() - start:.1f} s", file=sys.stderr, flush=True)
    return model


def start_job(job: Job, client, parent_run_id: Optional[str] = None, quiet: bool = False) -> dict[str, Any]:
    """A new MLflow run and local record for `job`, then the optimization."""
    experiment_id = _experiment_id(client, job.experiment)
    tags = {"deepflow.command": "optimize", "deepflow.experiment": job.name,
            "deepflow.overrides": " ".join(job.overrides)}
    if parent_run_id:
        tags["mlflow.parentRunId"] = parent_run_id
    run_name = f"{job.name}-{job.strategy_name}-seed{job.seed}"
    if parent_run_id:
        run_name += "-" + "-".join(o.partition("=")[2] for o in job.overrides if "=" in o)[:80]
    run = client.create_run(experiment_id, run_name=run_name, tags=tags)
    run_id = run.info.run_id
    store = RunStore.create(job.output_dir, job.name, run_id, OmegaConf.to_yaml(job.cfg, resolve=True),
                            {"run_id": run_id, "tracking_uri": job.uri, "experiment": job.experiment,
                             "experiment_id": experiment_id, "status": "running", "mlflow_synced": 0,
                             "overrides": job.overrides})
    client.set_tag(run_id, "deepflow.local_dir", str(store.directory.resolve()))
    _log_params(client, run_id, job.cfg)
    return _execute(job, store, MlflowSink(client, run_id, store), quiet)


def _execute(job: Job, store: RunStore, sink: MlflowSink, quiet: bool) -> dict[str, Any]:
    started = time.perf_counter()
    try:
        optimum = store.state().get("optimum")
        if job.optimum == "enumerate" and optimum is None:
            optimum = enumerate_optimum(job.space, job.objective)
            optimum["enumerate_s"] = time.perf_counter() - started
            store.update_state(optimum=optimum)
            if optimum["optimum"] is not None:
                sink.call("optimum", sink.client.log_metric, sink.run_id, "optimum", optimum["optimum"])
        prior = _warm_start(job, store, quiet)
        runner = OptimizationRun(job, store, sink, optimum, quiet)
        runner.started = started
        return runner.run(prior)
    except BaseException:
        store.update_state(status="failed")
        sink.call("status", sink.client.set_terminated, sink.run_id, "FAILED")
        raise


def resume_job(run_id: str, overrides: list[str], quiet: bool = False) -> dict[str, Any]:
    """Continue the run `run_id` from its local record: same config, same MLflow run."""
    given = {o.partition("=")[0].lstrip("+~"): o.partition("=")[2] for o in overrides}
    extra = sorted(k for k in given if k not in RESUME_OPTIONS)
    if extra:
        raise ConfigError(f"{extra[0]} cannot be changed when resuming (the run's saved config is used): "
                          f"allowed with resume: {', '.join(RESUME_OPTIONS)}")
    store = RunStore.find(given.get("output_dir", "outputs"), run_id)
    cfg = OmegaConf.create(store.config_yaml())
    state = store.state()
    with_uri = state.get("tracking_uri") if "tracking.uri" not in given else given["tracking.uri"]
    OmegaConf.update(cfg, "tracking.uri", with_uri, force_add=True)
    if "output" in given:
        cfg.output = given["output"]
    job = prepare(cfg, state.get("overrides", []))
    client = _client(job.uri)
    sink = MlflowSink(client, run_id, store)
    sink.call("status", client.update_run, run_id, "RUNNING")
    # what MLflow really has (the run may have died between logging and noting it): steps are logged
    # in order, so the evaluations it has are 0 .. last step of the per-evaluation `feasible` metric
    steps = []
    if sink.call("metric history", lambda: steps.extend(m.step for m in client.get_metric_history(run_id, "feasible"))):
        store.update_state(mlflow_synced=max(steps) + 1 if steps else 0)
    n = len(store.evaluations())
    if not quiet:
        print(f"resuming run {run_id}: {n} of {job.budget} evaluations on record, none repeated",
              file=sys.stderr, flush=True)
    store.update_state(status="running", resumed=state.get("resumed", 0) + 1)
    return _execute(job, store, sink, quiet)


# ---------------------------------------------------------------------------------- report
def report(summary: dict[str, Any]) -> str:
    from deepflow.report import design_line, step_table

    lines = [f"run {summary['run_id']} ({summary['name']}): {summary['evaluations']} evaluations, "
             f"{summary['feasible']} feasible, strategy {summary['strategy']}"
             f"{' (inner ' + summary['inner'] + ')' if summary.get('inner') else ''}, seed {summary['seed']}, "
             f"{summary['elapsed_s']:.1f} s"]
    if "best_row" not in summary:
        lines.append("no feasible design found: try a larger budget, more devices or a smaller model")
    else:
        specs = summary["best_specs"]
        lines.append(f"best design (evaluation {summary['best_index']}): {design_line(*specs)}")
        if "best_chip" in summary:
            lines.append(chip_line(summary["best_chip"]))
        lines.append(step_table(summary["best_row"], specs[0].hbm_gib * 2.0**30, specs[0].tdp_w))
    if "optimum" in summary and summary["optimum"].get("optimum"):
        o = summary["optimum"]
        lines.append(f"regret: {summary.get('regret', float('nan')):+.2%} vs the optimum {o['optimum']:.6g} of "
                     f"{o['points']:,} enumerated designs ({o['feasible']:,} feasible)")
    if "hypervolume" in summary:
        lines.append(f"Pareto front: {summary['pareto_front']} designs, hypervolume {summary['hypervolume']:.4g} "
                     f"(log units): {summary['local_dir']}/pareto_front.csv")
    if not summary.get("mlflow_complete", True):
        lines.append(f"MLflow did not receive everything: `deepflow optimize resume={summary['run_id']}` sends it")
    lines.append(f"local record: {summary['local_dir']}/ (evaluations.parquet, convergence.png, pareto.png, "
                 f"pareto.html, best_design.yaml, best_breakdown.json)")
    if "best_design" in summary:
        lines.append(f"evaluate the best design again: deepflow evaluate design={summary['best_design']}")
    return "\n".join(lines)


def _jsonable(summary: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in summary.items() if k != "best_specs"}


def cmd_optimize(overrides: list[str]) -> int:
    multirun, overrides = split_flags(overrides)
    resume = [o.partition("=")[2] for o in overrides if o.partition("=")[0] == "resume"]
    if resume and resume[0] not in ("", "null"):
        if multirun:
            raise ConfigError("resume= continues one run: allowed without -m (--multirun)")
        summary = resume_job(resume[0], [o for o in overrides if not o.startswith("resume=")])
        return _print([summary], None)
    jobs = compose_jobs(overrides, multirun)
    client = _client(jobs[0].uri)
    for job in jobs[1:]:
        if job.uri != jobs[0].uri:
            raise _err("tracking.uri", job.uri, f"the same store for every job of a multirun ({jobs[0].uri})")
    if len(jobs) == 1 and not multirun:
        return _print([start_job(jobs[0], client)], None)
    for job in jobs:  # children live in their parent's MLflow experiment (e.g. -m experiment=a,b)
        job.experiment = jobs[0].experiment
    experiment_id = _experiment_id(client, jobs[0].experiment)
    swept = [o for o in overrides if o.partition("=")[0] in sweep_keys(overrides)]
    swept += [f"{k}={v}" for k, v in (jobs[0].cfg.get("sweep") or {}).items() if k not in sweep_keys(overrides)]
    parent = client.create_run(experiment_id, run_name=f"{jobs[0].name}-sweep",
                               tags={"deepflow.command": "optimize -m", "deepflow.sweep": " ".join(swept)})
    parent_id = parent.info.run_id
    client.log_param(parent_id, "jobs", len(jobs))
    summaries = []
    try:
        for i, job in enumerate(jobs):
            print(f"job {i + 1}/{len(jobs)}: {' '.join(job.overrides)}", file=sys.stderr, flush=True)
            summaries.append(start_job(job, client, parent_run_id=parent_id))
    except BaseException:
        client.set_terminated(parent_id, "FAILED")
        raise
    table = sweep_table(summaries, [o.partition("=")[0] for o in swept])
    path = Path(jobs[0].output_dir) / jobs[0].name / f"sweep-{parent_id}.csv"
    path.parent.mkdir(parents=True, exist_ok=True)
    table.to_csv(path, index=False)
    client.log_artifact(parent_id, str(path))
    client.set_terminated(parent_id, "FINISHED")
    return _print(summaries, parent_id, table)


def sweep_table(summaries: list[dict[str, Any]], swept: list[str]) -> pd.DataFrame:
    """One row per job: its swept values, the best objective and the best design's chip values."""
    rows = []
    for s in summaries:
        job = " ".join(o for o in s["overrides"] if o.partition("=")[0] in swept) or " ".join(s["overrides"])
        row = {"run_id": s["run_id"], "job": job, "evaluations": s["evaluations"],
               "feasible": s["feasible"], "best_step_time_s": s.get("best_step_time_s")}
        if "best_row" in s and "energy_j" in s["best_row"]:
            row["best_energy_j"] = s["best_row"]["energy_j"]
        if "regret" in s:
            row["regret"] = s["regret"]
        if "hypervolume" in s:
            row["hypervolume"] = s["hypervolume"]
        for key in ("node", "area_compute_fraction", "area_sram_fraction", "power_compute_fraction",
                    "flops_per_cycle_per_unit", "peak_tflops_bf16", "sram_mib", "hbm_bw_gb_per_s"):
            if key in s.get("best_chip", {}):
                row[key] = s["best_chip"][key]
        if "best_specs" in s:
            from deepflow.report import design_line

            row["best_design"] = design_line(*s["best_specs"])
        rows.append(row)
    return pd.DataFrame(rows)


def _print(summaries: list[dict[str, Any]], parent_id: Optional[str], table: Optional[pd.DataFrame] = None) -> int:
    from deepflow.tracking import ui_command

    uri = summaries[0]["tracking_uri"]
    if summaries[0].get("output") == "json":
        print(json.dumps({"parent_run_id": parent_id, "runs": [_jsonable(s) for s in summaries],
                          "ui": ui_command(uri)}, default=str))
        return 0
    if parent_id is None:
        print(report(summaries[0]))
    else:
        print(f"sweep (parent run {parent_id}): {len(summaries)} jobs, each a child run; the full report of "
              f"each is its best_breakdown.json")
        with pd.option_context("display.width", 250, "display.max_colwidth", 60, "display.precision", 4):
            print(table.drop(columns=["best_design"], errors="ignore").to_string(index=False))
        print("best designs:")
        for s, job in zip(summaries, table["job"]):
            if "best_specs" in s:
                from deepflow.report import design_line

                print(f"  {job}: {design_line(*s['best_specs']).split('; ', 1)[1]}")
                if "best_chip" in s:
                    print(f"    {chip_line(s['best_chip'])}")
            print(f"    deepflow evaluate design={s.get('best_design', '(no feasible design)')}")
    print(f"open the MLflow UI: {ui_command(uri)}")
    return 0
