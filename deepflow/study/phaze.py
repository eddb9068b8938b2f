"""`deepflow study phaze-tpuv4`: PHAZE's search against TPU v4 (conf/study/phaze-tpuv4.yaml).

Per model: `tpu-v4`, the datasheet preset with its best placement (`deepflow.commands.best_mapping.search`);
`derived`, the chip the TPU v4 template derives, best placement; `spotlight`, the architecture searched
(BO on space tpu-chip, flat) with the placement held at PHAZE's baseline; `co-designed`, architecture and
placement together (BO with the exact placement search); both searches start from the derived TPU v4
(`Job.initial`), as PHAZE's and Spotlight's start from a baseline. Throughput is PHAZE's 4,096 sequences
over the step time; `vs_tpu_v4` and `vs_derived` are a row's throughput over the preset's and the derived
chip's (the fair comparison: the preset's 8 compute units pay the step model's fixed time a tile, fitted
on GPUs, over 16x fewer units than the derived chip's 128: README, "Case studies"). Checks: the derived chip is within
`tolerance` of the preset on peak bf16 FLOP/s, HBM bandwidth and power; co-design is not worse than the
restricted variants (derived, spotlight) of its model.
"""

from __future__ import annotations

from typing import Any

from deepflow.presets import ConfigError
from deepflow.study.context import Context, chosen, losses, not_worse, number, positive_int
from deepflow.study.points import Point, config_values, encode_values

EXTRA_COLUMNS = ("throughput_seq_per_s", "vs_tpu_v4", "vs_derived")
PLACEMENT = ("tp", "pp", "dp")


def check(cfg, quick: bool) -> tuple[list[str], int, float]:
    """The study's own options, checked before anything runs: `(models, budget, tolerance)`."""
    study = cfg.study
    models = chosen(study.get("only"), list(study.models), "study.only")
    quick_models = chosen(study.get("quick_models"), list(study.models), "study.quick_models")
    if quick and study.get("only") is None:  # quick=true: the smaller models, unless the command names some
        models = quick_models
    budget, quick_budget = positive_int(cfg, "study.budget"), positive_int(cfg, "study.quick_budget")
    tolerance = number(cfg, "study.tolerance", lambda v: 0 < v < 1, "a fraction between 0 and 1")
    for m in models:
        placement = study.models[m].get("placement") or {}
        if sorted(placement) != sorted(PLACEMENT):
            raise ConfigError(f"study.models.{m}.placement={dict(placement)!r} is invalid: allowed {{tp, pp, dp}}")
    return models, quick_budget if quick else budget, tolerance


def preset_point(ctx: Context, overrides: list[str]) -> tuple[Point | None, Any]:
    """The datasheet preset of `overrides` with its best placement, as a `Point` (None: nothing fits)."""
    from deepflow.commands.best_mapping import search
    from deepflow.config import compose_config

    cfg = compose_config([*overrides, "top_k=1", "output=json"], "best_mapping")
    specs, found, _ = search(cfg)
    if found is None or not found.rows:
        return None, specs[0]
    row = found.rows[0]
    design = {k: float(v) if isinstance(v, (int, float, bool)) else v for k, v in found.mappings[0].__dict__.items()
              if k in ("tp", "pp", "dp", "cp", "ep", "micro_batch_size", "recompute")}
    from analytical.codes import RECOMPUTE_CODES

    if isinstance(design.get("recompute"), str):
        design["recompute"] = float(RECOMPUTE_CODES[design["recompute"]])
    return Point(values={}, design=design, row=row, objective_feasible=True, objective_value=row["step_time_s"]), specs[0]


def derived_checks(chip: dict[str, float], spec, tolerance: float) -> dict[str, bool]:
    """The derived TPU v4 (`Point.chip`, SI) within `tolerance` of the datasheet preset (`spec`, human units)."""
    checks = {}
    for name, mine, theirs in (("peak bf16 FLOP/s", chip["peak_bf16_flops_per_s"], spec.peak_tflops_bf16 * 1e12),
                               ("HBM bandwidth", chip["hbm_bw_bytes_per_s"], spec.hbm_bw_gb_per_s * 1e9),
                               ("power", chip["tdp_w"], spec.tdp_w)):
        checks[f"derived TPU v4 {name} within {100 * tolerance:.0f} % of the preset "
               f"({mine / theirs - 1:+.1%})"] = abs(mine / theirs - 1) <= tolerance
    return checks


def throughputs(rows: list[dict[str, Any]], sequences: int) -> None:
    """Each row's `throughput_seq_per_s` (sequences / step time; None where infeasible), then its ratio to its
    model's tpu-v4 and derived rows (`vs_tpu_v4`, `vs_derived`)."""
    for r in rows:
        r["throughput_seq_per_s"] = round(sequences / r["step_time_s"], 2) if r["step_time_s"] and r["feasible"] else None
    for r in rows:
        for key, variant in (("vs_tpu_v4", "tpu-v4"), ("vs_derived", "derived")):
            ref = next(x for x in rows if x["workload"] == r["workload"] and x["variant"] == variant)
            mine, theirs = r["throughput_seq_per_s"], ref["throughput_seq_per_s"]
            r[key] = round(mine / theirs, 3) if mine and theirs else None


def codesign(cfg, model: str, budget: int) -> list[str]:
    """The overrides of a model's PHAZE-style search: the architecture and the placement together."""
    return [*cfg.study.common, *cfg.study.models[model].overrides, f"budget={budget}"]


def held(cfg, model: str, budget: int) -> list[str]:
    """The overrides of a model's Spotlight-style search: the architecture, PHAZE's placement held."""
    w = cfg.study.models[model]
    return [*codesign(cfg, model, budget), "inner=null",
            *(f"++mapping.{k}={int(v)}" for k, v in w.placement.items()), *(w.get("spotlight_overrides") or [])]


def configurations(cfg, quick: bool) -> list[list[str]]:
    """The overrides of each model's co-design and Spotlight-style searches."""
    models, budget, _ = check(cfg, quick)
    return [o for m in models for o in (codesign(cfg, m, budget), held(cfg, m, budget))]


def run(ctx: Context) -> dict[str, bool]:
    study = ctx.study
    ctx.reference = "tpu-v4"
    models, budget, tolerance = check(ctx.cfg, ctx.quick)
    jobs = {m: ctx.job(codesign(ctx.cfg, m, budget)) for m in models}
    # the system, batch and precision of the common overrides: those a datasheet preset's search takes too
    plain = [o for o in study.common if o.partition("=")[0] in ("system", "system.num_devices", "mapping.global_batch_size",
                                                                  "++mapping.precision", "++mapping.flash_attention")]
    checks: dict[str, bool] = {}
    for m in models:
        w, job = study.models[m], jobs[m]
        preset, spec = preset_point(ctx, [f"hardware={study.preset}", *plain, *w.overrides])
        ctx.add(m, "tpu-v4", f"TPU v4 ({study.preset} preset), best placement", preset,
                ctx.runs.point("tpu-v4", m, preset, "the datasheet preset"))
        derived, run_id = ctx.point(job, config_values(job), m, "derived", "the TPU v4 template's own derivation")
        ctx.add(m, "derived", "TPU v4 derived from its technology and budgets", derived, run_id)
        if m == models[0]:  # the same chip for every model
            checks.update(derived_checks(derived.chip, spec, tolerance))
        spot_job = ctx.job(held(ctx.cfg, m, budget))
        spot_job.initial = encode_values(spot_job.space, config_values(spot_job))  # both searches start at TPU v4
        job.initial = encode_values(job.space, derived.values)
        spot, summary = ctx.search(spot_job, m, "spotlight")
        ctx.add(m, "spotlight", "Spotlight-style: architecture searched, PHAZE's placement held", spot,
                summary["run_id"])
        best, summary = ctx.search(job, m, "co-designed")
        ctx.add(m, "co-designed", "PHAZE-style: architecture and placement co-designed", best, summary["run_id"])
    throughputs(ctx.rows, int(study.sequences))
    losses(ctx.rows, reference="tpu-v4")
    checks.update(not_worse([r for r in ctx.rows if r["variant"] != "tpu-v4"], "co-designed"))
    return checks
