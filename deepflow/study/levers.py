"""`deepflow study technology-levers`: what each technology lever buys (conf/study/technology-levers.yaml).

Per workload (and per fixed mapping it names, beside its best mapping): the baseline; each lever over its
range, one at a time, every point the template chip derived at that technology and budget with its best
mapping (the workload's exact inner search) or the fixed mapping; then the best combination
(`best_combination`: coordinate descent over the levers from the best single-lever point). Every row carries its binding limit
and the % a 10 % relaxation of each resource buys (`deepflow.study.limits`). Checks: the best combination
is not worse than any single-lever point; for the original DeepFlow's LSTM, the trends its stored outputs
show (`deepflow_trends`).
"""

from __future__ import annotations

from typing import Any

from omegaconf import OmegaConf

from deepflow.presets import ConfigError
from deepflow.study.context import Context, chosen, losses
from deepflow.study.limits import binding_limit, sensitivities
from deepflow.study.points import config_values, encode_values, evaluate_point

EXTRA_COLUMNS = ("gain_pct", "binding")  # the table's columns beside the common ones
FIGURE = {"value": "gain_pct", "label": "step time gained against the baseline (%)", "horizontal": True}


def lever_values(lever, quick: bool) -> list:
    values = list(lever["values"])
    return [values[0], values[-1]] if quick and len(values) > 2 else values


def lever_overrides(lever, value) -> list[str]:
    return [f"{lever['field']}={value}", *(f"{key}={value}" for key in lever.get("also") or [])]


def combination_overrides(levers: dict[str, dict], combination: dict[str, Any]) -> list[str]:
    """The overrides that set each lever of `combination` (`{lever: value}`)."""
    return [o for n, v in combination.items() for o in lever_overrides(levers[n], v)]


def baseline(cfg, w, extra: tuple[str, ...] | list[str] = ()) -> list[str]:
    """The overrides of workload `w`'s baseline (`extra`: its fixed mapping's)."""
    return [f"experiment={w.experiment}", *cfg.study.baseline, *w.overrides, *extra]


def measure(ctx: Context, overrides: list[str], workload: str, variant: str, **extra: Any) -> dict[str, Any]:
    """One point: the template chip of `overrides`, its mapping, its binding limit; a row and a child run."""
    job = ctx.job(overrides)
    u = encode_values(job.space, config_values(job))
    point = evaluate_point(job, u)
    # the model's reason where it rules the design out, else the objective's power cap where that does
    reason = point.row["reason"] if not point.row["feasible"] else "feasible" if point.objective_feasible else "power_cap"
    gains = sensitivities(job, u)
    limit = binding_limit(gains, reason)
    run_id = ctx.runs.point(variant, workload, point, f"binding limit: {limit}")
    return ctx.add(workload, variant, variant, point, run_id, binding=limit,
                   gains_pct={k: round(v, 2) for k, v in gains.items()}, **extra)


def _objective(ctx: Context, overrides: list[str]) -> float:
    """The objective of the template chip of `overrides` with its mapping (inf where infeasible)."""
    job = ctx.job(overrides)
    point = evaluate_point(job, encode_values(job.space, config_values(job)))
    return point.objective_value if point.objective_feasible else float("inf")


def best_combination(ctx: Context, base: list[str], levers: dict[str, dict], workload: str,
                     passes: int) -> dict[str, Any]:
    """Each lever's value in the best combination found: from the best single-lever point of the rows
    (so never worse than one), `passes` rounds of coordinate descent over every lever's range (the
    levers interact: a node step changes what the memory can feed)."""
    singles = [r for r in ctx.rows if r["workload"] == workload and r["lever"] in levers and r["feasible"]]
    if not singles:
        return {}
    start = min(singles, key=lambda r: r["objective_s"])
    current, best = {start["lever"]: start["value"]}, start["objective_s"]
    for _ in range(passes):
        improved = False
        for n, lever in levers.items():
            for value in lever_values(lever, ctx.quick):
                if current.get(n) == value:
                    continue
                trial = {**current, n: value}
                time_s = _objective(ctx, [*base, *combination_overrides(levers, trial)])
                if time_s < best * (1 - 1e-9):
                    current, best, improved = trial, time_s, True
        if not improved:
            break
    ctx.say(f"{workload}: best combination {current} ({best:.4g} s)")
    return current


def check(cfg, quick: bool) -> tuple[list[str], dict[str, dict]]:
    """The study's own options, checked before anything runs: `(workloads, {lever: its config})`."""
    study = cfg.study
    workloads = chosen(study.get("only"), list(study.workloads), "study.only")
    names = chosen(study.get("only_levers"), list(study.levers), "study.only_levers")
    if quick:
        names = [n for n in chosen(study.get("quick_levers"), list(study.levers), "study.quick_levers") if n in names]
    levers = {n: OmegaConf.to_container(study.levers[n], resolve=True) for n in names}
    for n, lever in levers.items():
        if not isinstance(lever, dict) or not str(lever.get("field", "")).startswith("chip.") or not lever.get("values"):
            raise ConfigError(f"study.levers.{n}={lever!r} is invalid: allowed {{field: chip.<field>, values: "
                              f"[a non-empty list], also: [other fields that take the same value]}}")
    check_values(cfg, workloads[0], levers)
    return workloads, levers


def check_values(cfg, workload: str, levers: dict[str, dict]) -> None:
    """Every lever value a valid chip (the chip spec's own checks: an unknown node, a negative area), named
    as `study.levers.<lever>`, before anything runs."""
    from deepflow.config import chip_from_config, compose_config

    base = compose_config(baseline(cfg, cfg.study.workloads[workload]), "optimize")
    for n, lever in levers.items():
        for value in lever["values"]:
            trial = base.copy()
            OmegaConf.update(trial, lever["field"], value)
            try:
                chip_from_config(trial)
            except ConfigError as exc:
                raise ConfigError(f"study.levers.{n}: {exc}") from None


def mappings(w) -> dict[str, list[str]]:
    """A workload's mappings: its best (the inner search's: no override) and each fixed one it names."""
    return {"best": []} | {k: ["inner=null", "space=chip-only", *v] for k, v in (w.get("fixed_mappings") or {}).items()}


def configurations(cfg, quick: bool) -> list[list[str]]:
    """The overrides of each workload's baseline at each of its mappings."""
    workloads, _ = check(cfg, quick)
    return [baseline(cfg, w, extra) for w in (cfg.study.workloads[n] for n in workloads)
            for extra in mappings(w).values()]


def run(ctx: Context) -> dict[str, bool]:
    study = ctx.study
    ctx.reference = "baseline"
    workloads, levers = check(ctx.cfg, ctx.quick)
    checks: dict[str, bool] = {}
    for name in workloads:
        w = study.workloads[name]
        for mapping, extra in mappings(w).items():
            label = name if mapping == "best" else f"{name} ({mapping})"
            base = baseline(ctx.cfg, w, extra)
            ctx.say(f"{label}: baseline and {len(levers)} levers")
            measure(ctx, base, label, "baseline", lever=None, value=None)
            for n, lever in levers.items():
                for value in lever_values(lever, ctx.quick):
                    measure(ctx, [*base, *lever_overrides(lever, value)], label, f"{n}={value}", lever=n, value=value)
            combination = best_combination(ctx, base, levers, label, passes=1 if ctx.quick else 2)
            row = measure(ctx, [*base, *combination_overrides(levers, combination)],
                          label, "best combination", lever="all", value=", ".join(f"{n}={v}" for n, v in combination.items()))
            for other in [r for r in ctx.rows if r["workload"] == label and r["lever"] not in (None, "all")]:
                if other["feasible"]:
                    checks[f"{label}: best combination not worse than {other['variant']}"] = bool(
                        row["feasible"] and row["objective_s"] <= other["objective_s"] * (1 + 1e-9))
    losses(ctx.rows, reference="baseline", key="step_time_s")
    for r in ctx.rows:  # the time a lever buys, also where the model rules a design out (the LSTM at dp 64)
        base = next(b for b in ctx.rows if b["workload"] == r["workload"] and b["variant"] == "baseline")
        r["gain_pct"] = None if r["step_time_s"] is None else 100.0 * (base["step_time_s"] / r["step_time_s"] - 1.0)
    checks.update(deepflow_trends(ctx.rows))
    return checks


def _times(rows: list[dict[str, Any]], workload: str, lever: str) -> list[tuple[Any, float]]:
    return [(r["value"], r["step_time_s"]) for r in rows if r["workload"] == workload and r["lever"] == lever]


def deepflow_trends(rows: list[dict[str, Any]]) -> dict[str, bool]:
    """The original DeepFlow's stored LSTM outputs (codesign-anchors.md), as checks on the rows of a
    workload named `deepflow-lstm (dp64)`: data parallelism gains less after the first node step than at
    it (3.576 -> 2.913 s, then 2.913 -> 2.894 s down to 1 nm), and memory technology moves it little
    (HBM1 8.283 s, HBM2 / HBM2e 8.244 s: 0.5 %; here: under 5 %)."""
    out: dict[str, bool] = {}
    node = _times(rows, "deepflow-lstm (dp64)", "node")
    if len(node) >= 3:
        first = node[0][1] / node[1][1] - 1.0
        later = node[1][1] / node[-1][1] - 1.0
        out["deepflow-lstm (dp64): data parallelism gains less after the first node step than at it"] = later < first
    memory = _times(rows, "deepflow-lstm (dp64)", "memory")
    if len(memory) >= 2:
        times = [t for _, t in memory]
        out["deepflow-lstm (dp64): memory technology moves the step under 5 %"] = max(times) / min(times) - 1.0 < 0.05
    return out
