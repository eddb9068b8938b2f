"""One optimization run, executed: `start_job` (a new MLflow run and local record, then the
loop) and `resume_job` (continue a killed run from its record, nothing re-evaluated);
`OptimizationRun` logs every verified batch and writes the artifacts at the end."""

from __future__ import annotations

import json
import math
import sys
import time
from pathlib import Path
from typing import Any, Optional

import numpy as np
import pandas as pd
import torch
from omegaconf import OmegaConf

from analytical.codes import DTYPE
from deepflow.presets import ConfigError
from deepflow.run.best_design import base_space, chip_summary, chosen_mapping, design_values, roundtrip_step_time_s
from deepflow.run.job import RESUME_OPTIONS, Job, invalid, prepare
from deepflow.run.metrics import MetricContext, TimedStrategy, enumerate_optimum, evaluation_frame
from deepflow.run.mlflow_sink import MlflowSink, client_for, log_params
from deepflow.run.objectives import OUTCOME_LABELS
from deepflow.tracking import experiment_id_for
from deepflow.run.store import RunStore, point_columns
from deepflow.run.warm_start import fit_prior


class OptimizationRun:
    """One job's execution: MLflow run, local record, loop, artifacts."""

    def __init__(self, job: Job, store: RunStore, sink: MlflowSink, optimum: Optional[dict], quiet: bool = False):
        self.job, self.store, self.sink, self.optimum, self.quiet = job, store, sink, optimum, quiet
        self.context = MetricContext(outcomes=list(job.objective.outcome_names),
                                     optimum=(optimum or {}).get("optimum"))
        self.strategy: Optional[TimedStrategy] = None
        self.started = time.perf_counter()
        self.bar = None  # the progress bar of the evaluations (tqdm, on stderr: its rate gives the time left)

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
        if self.bar is not None:
            best = self.context.columns(frame)["best_so_far"][-1]
            what, unit = OUTCOME_LABELS[self.context.outcomes[0]]
            text = f"best {what} {best:.4g} {unit}" if np.isfinite(best) else "no feasible design yet"
            extra = "".join(f", {k} {v:.2f} s" for k, v in timings.items() if k != "verify_s")
            self.bar.set_postfix_str(f"{text} ({int(frame['objective_feasible'].sum())} feasible{extra})",
                                     refresh=False)
            self.bar.update(len(rows))

    def history(self):
        from deepflow.strategies.base import History

        X, Y, feasible, C = self.store.history_tensors(self.job.space.dim, self.context.outcomes,
                                                       list(self.job.objective.constraint_names))
        return History(X=X, Y=Y, feasible=feasible, C=C)

    def run(self, prior=None) -> dict[str, Any]:
        from deepflow.run.loop import run as loop_run

        history = self.history()
        if history.n > self.job.budget:
            raise invalid("budget", self.job.budget, f">= the {history.n} evaluations the run already has")
        if history.n == 0 and self.job.initial is not None:  # a caller's known designs, verified first
            from deepflow.run.loop import verify

            X0 = self.job.initial[: self.job.budget].to(DTYPE)
            *_, rows = verify(self.job.space, self.job.objective, X0)
            self.on_evaluation(X0, rows)
            history = self.history()
        self.strategy = TimedStrategy(self.job.make_strategy(prior))
        if history.n < self.job.budget:
            from tqdm import tqdm

            with tqdm(total=self.job.budget, initial=history.n, unit="eval", desc=self.job.name, file=sys.stderr,
                      disable=self.quiet, dynamic_ncols=True) as self.bar:
                loop_run(self.job.space, self.job.objective, self.strategy, self.job.budget, self.job.q,
                         self.job.seed, on_evaluation=self.on_evaluation, history=history)
            self.bar = None
        return self.finish()

    # ------------------------------------------------------------------------- artifacts
    def finish(self) -> dict[str, Any]:
        from deepflow import plots
        from deepflow.designs import design_config, design_yaml
        from deepflow.report import design_line

        job, store, frame = self.job, self.store, self.store.evaluations()
        d = store.directory.resolve()
        derived = self.context.columns(frame)
        label = "{} ({})".format(*OUTCOME_LABELS[self.context.outcomes[0]])
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
                                   "tracking_uri": job.uri, "experiment_id": store.state().get("experiment_id"),
                                   "output": str(job.cfg.output),
                                   "hydra_dir": store.state().get("hydra_dir")}
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
            again_with = "" if job.calibration is None else f" calibration={Path(job.calibration.path).resolve()}"
            header = (f"Best design of `deepflow optimize` run {store.run_id} ({job.name}), evaluation "
                      f"{int(frame.loc[best, 'index'])} of {len(frame)}: step time {recorded:.6g} s.\n"
                      f"Evaluate it again:  deepflow evaluate design={d / 'best_design.yaml'}{again_with}")
            if unmapped:
                header += f"\nNOT written back (no spec field): {', '.join(unmapped)}"
            (d / "best_design.yaml").write_text(design_yaml(sections, header))
            specs, again = roundtrip_step_time_s(sections, base_space(job.space).efficiency)
            if not math.isclose(again, recorded, rel_tol=1e-9):
                print(f"deepflow: warning: best_design.yaml evaluates to {again:.9g} s, the run recorded "
                      f"{recorded:.9g} s", file=sys.stderr)
            breakdown = {"evaluation": int(frame.loc[best, "index"]), "design": sections, **row}
            (d / "best_breakdown.json").write_text(json.dumps(breakdown, indent=2))
            if "chip" in sections:
                summary["best_chip"] = chip_summary(sections["chip"], specs[0])
            summary.update(best_index=int(frame.loc[best, "index"]), best_step_time_s=recorded,
                           roundtrip_step_time_s=again,
                           best_row=row, best_specs=specs, best_design=str(d / "best_design.yaml"),
                           best_design_line=design_line(*specs))
            if self.context.optimum:
                summary["regret"] = float(derived["regret"][-1])
        store.update_state(status="finished", evaluations=len(frame))
        self.sink.call("description", self.sink.client.set_tag, self.sink.run_id, "mlflow.note.content",
                       run_description(job, d, summary))
        self.sink.log_evaluations(frame, store.state().get("mlflow_synced", 0), len(frame), self.context)
        if self.sink.call("artifacts", self.sink.client.log_artifacts, self.sink.run_id, str(d)):
            self.sink.call("status", self.sink.client.set_terminated, self.sink.run_id, "FINISHED")
        summary["mlflow_complete"] = self.sink.alive
        summary["elapsed_s"] = time.perf_counter() - self.started
        return summary


OBJECTIVE_TEXT = {"step_time": "minimize the step time (s)", "energy": "minimize the energy per step (J)",
                  "time_at_power_cap": "minimize the step time (s) under an average power cap",
                  "time_energy": "the Pareto front of step time (s) and energy per step (J)",
                  "time_per_token": "minimize the time per token (image) of all the step's jobs (s)",
                  "energy_per_token": "minimize the energy per token (image) (J)"}


def run_description(job: Job, directory: Path, summary: Optional[dict] = None) -> str:
    """The run's description in the MLflow UI (Markdown): what was optimized, over which space,
    and, once finished, where the best design is."""
    model = OmegaConf.select(job.cfg, "model.name")
    lines = [f"**deepflow optimize** `{job.name}`: {OBJECTIVE_TEXT[job.objective.name]} of `{model}` over the "
             f"space `{job.space.name}` ({job.space.dim} parameters{', inner best-mapping search' if job.inner else ''}),"
             f" strategy `{job.strategy_name}`, budget {job.budget}, q {job.q}, seed {job.seed}.",
             f"Local record: `{directory}`."]
    if summary is not None and "best_design" in summary:
        lines.append(f"Best: step time {summary['best_step_time_s']:.6g} s at evaluation {summary['best_index']} of "
                     f"{summary['evaluations']}: `{summary['best_design_line']}`. Evaluate it again: "
                     f"`deepflow evaluate design={summary['best_design']}`.")
    elif summary is not None:
        lines.append(f"No feasible design in {summary['evaluations']} evaluations.")
    lines.append("Metrics: `best_*` and `objective_*` are lower-is-better in the unit their name ends with; "
                 "`regret_pct` is the best against the enumerated optimum; `hypervolume_log_units` is higher-is-better.")
    return "\n\n".join(lines)


def _warm_start(job: Job, store: RunStore, quiet: bool):
    """Fit the warm-start surrogate on Sobol samples (or reload it on resume); None without one."""
    samples = job.warm_start.get("samples", 0)
    if job.warm_start.get("skipped") and not quiet:
        print(f"warm start skipped: {job.warm_start['skipped']}", file=sys.stderr, flush=True)
    if not samples:
        return None
    directory = store.directory / "surrogate"
    if (directory / "config.json").is_file():
        from surrogates import load_surrogate

        return load_surrogate(directory)
    prior = fit_prior(job, samples, seed=job.seed + 7919)
    prior.model.save(directory)
    frame = pd.DataFrame(prior.X.numpy(), columns=point_columns(job.space.dim))
    for j, name in enumerate(prior.names):
        frame[name] = prior.Y[:, j].numpy()
    frame["feasible"] = prior.feasible.numpy()
    frame.to_parquet(store.directory / "warm_start_samples.parquet", index=False)
    feasible, name = int(prior.feasible.sum()), type(prior.model).__name__
    store.update_state(warm_start={"samples": samples, "feasible": feasible, "model": name, "fit_s": prior.fit_s})
    if not quiet:
        print(f"warm start: {samples} Sobol samples ({feasible} feasible), {name} fitted in {prior.fit_s:.1f} s",
              file=sys.stderr, flush=True)
    return prior.model


def start_job(job: Job, client, parent: Optional[dict] = None, hydra_dir: Optional[str] = None,
              quiet: bool = False) -> dict[str, Any]:
    """A new MLflow run and local record for `job`, then the optimization. `parent`: the multirun's
    parent run (`deepflow.launch.sweep_runs.parent_of_job`), whose experiment the run joins as its child;
    `hydra_dir`: the job's Hydra folder (config snapshot, log), tagged on the run."""
    experiment_id = parent["experiment_id"] if parent else experiment_id_for(client, job.experiment)
    tags = {"deepflow.command": "optimize", "deepflow.experiment": job.name,
            "deepflow.overrides": " ".join(job.overrides)}
    if hydra_dir:
        tags["deepflow.hydra_dir"] = hydra_dir
    run_name = f"{job.name}-{job.strategy_name}-seed{job.seed}"
    if parent:
        tags["mlflow.parentRunId"] = parent["run_id"]
        swept = [o for o in job.overrides if o.partition("=")[0].lstrip("+~") in parent["swept"]]
        run_name += "-" + "-".join(o.partition("=")[2] for o in swept)[:80]
    run = client.create_run(experiment_id, run_name=run_name, tags=tags)
    run_id = run.info.run_id
    store = RunStore.create(job.output_dir, job.name, run_id, OmegaConf.to_yaml(job.cfg, resolve=True),
                            {"run_id": run_id, "tracking_uri": job.uri, "experiment": job.experiment,
                             "experiment_id": experiment_id, "status": "running", "mlflow_synced": 0,
                             "overrides": job.overrides, "hydra_dir": hydra_dir,
                             "calibration_sha256": None if job.calibration is None else job.calibration.sha256})
    client.set_tag(run_id, "deepflow.local_dir", str(store.directory.resolve()))
    client.set_tag(run_id, "mlflow.note.content", run_description(job, store.directory.resolve()))
    log_params(client, run_id, job.cfg)
    if job.calibration is not None:  # calibration=<file>: which constants, exactly, and the file itself
        client.log_param(run_id, "calibration_sha256", job.calibration.sha256)
        client.log_artifact(run_id, job.calibration.path, artifact_path="calibration")
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
                quantity = job.objective.outcome_names[0].removeprefix("log_")
                sink.call("optimum", sink.client.log_metric, sink.run_id, f"optimum_{quantity}", optimum["optimum"])
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
    if "device" in given:  # a run started on a GPU machine may go on elsewhere (float64 gives the same values)
        OmegaConf.update(cfg, "device", given["device"], force_add=True)
    job = prepare(cfg, state.get("overrides", []))
    now = None if job.calibration is None else job.calibration.sha256
    if state.get("calibration_sha256") is not None and now != state["calibration_sha256"]:
        raise ConfigError(f"calibration={cfg.get('calibration')!r} has changed since run {run_id} started (sha256 "
                          f"{state['calibration_sha256'][:12]}..., now {(now or 'none')[:12]}...): its evaluations used "
                          f"the old constants; restore that file or start a new run")
    client = client_for(job.uri)
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
