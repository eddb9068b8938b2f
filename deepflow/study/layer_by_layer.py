"""`deepflow study layer-by-layer`: what designing one layer at a time costs (conf/study/layer-by-layer.yaml).

Per workload, at the study's technology and budgets, five variants (a-e of the config's comment), all
evaluated through the workload's hierarchical co-design space (`inner=best_mapping`) and its objective,
so that "best mapping" means the same exact search everywhere:

- a `today`: the template chip's own values (`config_values`), its best mapping;
- b `fixed-mapping`: a's mapping and precision held (`mapping_overrides`), the chip searched by BO on
  the workload's `fixed_space` (default `chip-only`; flat: no inner search), which must hold no chip
  parameter the joint space lacks, or c could not rebuild b's chip;
- c `sequential`: b's chip, mapping and precision re-optimized;
- d `cross-workload`: the joint chip of the workload named `cross`, this workload's mapping and
  precision;
- e `joint`: BO over the chip with the exact inner search (the workload's experiment as it is), its first
  two evaluations a's and c's designs (`Job.initial`): a designer starts from the chip they have and the one
  the sequential flow gives, so the joint answer is never behind them, and what it finds beyond c is what
  designing layer by layer leaves on the table at that budget.

Precision is software: where a variant re-optimizes the mapping it also takes the better precision
(`best_precision`). A workload that names `inner` parameters (the repeated small-model case: fused_jobs
and precision of one accelerator's HFTA packing) runs on a flat space instead: its "best mapping" is every
combination of those parameters evaluated (`best_inner`), its fixed-mapping variant holds them, and its
joint variant is BO over the chip and them together. Checks: e is not worse than any other variant of its
workload (against a, b and c by construction, as a check of consistency; against d, the other workload's
chip, a test of the search).
"""

from __future__ import annotations

from typing import Any

import torch

from deepflow.presets import available
from deepflow.study.context import Context, chosen, losses, mapping_overrides, not_worse, positive_int, unknown
from deepflow.study.points import config_values, encode_values, evaluate_values

FIXED_SPACE = "chip-only"  # the fixed-mapping search's space where a workload names no `fixed_space`
VARIANTS = ("today", "fixed-mapping", "sequential", "cross-workload", "joint")
LABELS = {"today": "a: today's chip, best mapping", "fixed-mapping": "b: a's mapping held, chip optimized",
          "sequential": "c: b's chip, mapping re-optimized", "cross-workload": "d: chip co-designed for {cross}",
          "joint": "e: joint co-design"}


def best_precision(job, values: dict[str, Any]):
    """The better (by the objective, feasible first) of the design `values` at each precision of the space."""
    choices = next((p.choices for p in job.space.parameters if p.name == "precision"), None)
    if choices is None:
        return evaluate_values(job, values)
    points = [evaluate_values(job, {**values, "precision": c}) for c in choices]
    return min(points, key=lambda p: (not p.objective_feasible, p.objective_value))


def best_inner(job, values: dict[str, Any], inner: list[str]):
    """The best (by the objective, feasible first) of the design `values` over every combination of the
    `inner` parameters of `job.space` (finite: integer, log2 or categorical), evaluated in one batch."""
    import itertools

    from deepflow.study.points import evaluate_point

    params = {p.name: p for p in job.space.parameters}
    grids = []
    for name in inner:
        p = params[name]
        if p.kind == "continuous":
            raise unknown("study.workloads.<name>.inner", name, [q.name for q in job.space.parameters
                                                                 if q.kind != "continuous"])
        grids.append(list(p.choices) if p.kind == "categorical" else
                     [int(v) for v in p.values.tolist()])
    points = [encode_values(job.space, {**values, **dict(zip(inner, combo))}) for combo in itertools.product(*grids)]
    U = torch.cat(points)
    Y, feasible, _, _ = job.objective.evaluate(job.space, U)
    order = sorted(range(U.shape[0]), key=lambda i: (not bool(feasible[i]), float(Y[i, 0])))
    return evaluate_point(job, U[order[0]:order[0] + 1])


def chip_values(values: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in values.items() if k != "precision"}


def remap(job, values: dict[str, Any], inner: list[str] | None):
    """The design `values` with its mapping re-optimized: the inner search (a hierarchical job) and the
    better precision, or every combination of the `inner` parameters (a flat one)."""
    return best_precision(job, values) if not inner else best_inner(job, values, inner)


def check(cfg, quick: bool) -> tuple[list[str], int, int]:
    """The study's own options, checked before anything runs: `(workloads, budget, fixed-mapping budget)`."""
    study = cfg.study
    workloads = chosen(study.get("only"), list(study.workloads), "study.only")
    budget, fixed_budget = positive_int(cfg, "study.budget"), positive_int(cfg, "study.fixed_mapping_budget")
    quick_budget = positive_int(cfg, "study.quick_budget")
    for name in study.workloads:
        cross = study.workloads[name].get("cross")
        if cross is not None and cross not in study.workloads:
            raise unknown(f"study.workloads.{name}.cross", cross, list(study.workloads))
        fixed_space = study.workloads[name].get("fixed_space", FIXED_SPACE)
        if fixed_space not in available("space"):
            raise unknown(f"study.workloads.{name}.fixed_space", fixed_space, available("space"))
    return (workloads, quick_budget, quick_budget) if quick else (workloads, budget, fixed_budget)


def configurations(cfg, quick: bool) -> list[list[str]]:
    """The overrides of each workload's joint job (its hierarchical co-design experiment)."""
    workloads, budget, _ = check(cfg, quick)
    return [[f"experiment={cfg.study.workloads[n].experiment}", *cfg.study.workloads[n].overrides, f"budget={budget}"]
            for n in workloads]


def run(ctx: Context) -> dict[str, bool]:
    study = ctx.study
    ctx.reference = "joint"
    workloads, budget, fixed_budget = check(ctx.cfg, ctx.quick)
    jobs = {name: ctx.job(overrides) for name, overrides in zip(workloads, configurations(ctx.cfg, ctx.quick))}
    joint = {}
    for name in workloads:
        w, job = study.workloads[name], jobs[name]
        inner = list(w.get("inner") or [])
        today = remap(job, config_values(job, [n for n in job.space.names if n not in inner]), inner)
        ctx.add(name, "today", LABELS["today"], today, ctx.runs.point("today", name, today, "the template chip with "
                                                                       "its best mapping"))
        space = f"space={w.get('fixed_space', FIXED_SPACE)}"
        if inner:
            held = [f"experiment={w.experiment}", *w.overrides, space, f"budget={fixed_budget}",
                    *(f"++mapping.{k}={today.values[k]}" for k in inner)]
        else:
            held = [f"experiment={w.experiment}", *w.overrides, "inner=null", space, f"budget={fixed_budget}",
                    f"++mapping.precision={today.values['precision']}", *mapping_overrides(today.design)]
        fixed, summary = ctx.search(ctx.job(held), name, "fixed-mapping")
        ctx.add(name, "fixed-mapping", LABELS["fixed-mapping"], fixed, summary["run_id"])
        sequential = None if fixed is None else remap(job, {**today.values, **chip_values(fixed.values)}, inner)
        run_id = ctx.runs.point("sequential", name, sequential, "the fixed-mapping variant's chip, re-mapped")
        ctx.add(name, "sequential", LABELS["sequential"], sequential, run_id)
        known = [p for p in (today, sequential) if p is not None]  # the joint search starts from them
        job.initial = torch.cat([encode_values(job.space, p.values) for p in known]) if known else None
        best, summary = ctx.search(job, name, "joint")
        joint[name] = best
        ctx.add(name, "joint", LABELS["joint"], best, summary["run_id"])
    for name in workloads:
        w = study.workloads[name]
        cross, inner = w.get("cross"), list(w.get("inner") or [])
        if cross is None or cross not in joint:
            continue  # its chip was not designed in this run (study.only)
        other, job = joint[cross], jobs[name]
        point = None
        if other is not None:
            mine = config_values(job, [n for n in job.space.names if n not in inner])
            point = remap(job, {**mine, **{k: v for k, v in chip_values(other.values).items() if k in mine}}, inner)
        run_id = ctx.runs.point("cross-workload", name, point, f"the joint chip of {cross}")
        ctx.add(name, "cross-workload", LABELS["cross-workload"].format(cross=cross), point, run_id)
    order = {v: i for i, v in enumerate(VARIANTS)}
    ctx.rows.sort(key=lambda r: (workloads.index(r["workload"]), order[r["variant"]]))
    losses(ctx.rows, reference="joint")
    return not_worse(ctx.rows, "joint")
