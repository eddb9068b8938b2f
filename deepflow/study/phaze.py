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

from omegaconf import OmegaConf

from deepflow.presets import ConfigError
from deepflow.study.context import Context, chosen, losses, not_worse, positive_int
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
    tolerance = OmegaConf.select(cfg, "study.tolerance")
    if isinstance(tolerance, bool) or not isinstance(tolerance, (int, float)) or not 0 < tolerance < 1:
        raise ConfigError(f"study.tolerance={tolerance!r} is invalid: allowed a fraction between 0 and 1")
    for m in models:
        placement = study.models[m].get("placement") or {}
        if sorted(placement) != sorted(PLACEMENT):
            raise ConfigError(f"study.models.{m}.placement={dict(placement)!r} is invalid: allowed {{tp, pp, dp}}")
    return models, quick_budget if quick else budget, float(tolerance)


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


def run(ctx: Context) -> dict[str, bool]:
    study = ctx.study
    ctx.reference = "tpu-v4"
    models, budget, tolerance = check(ctx.cfg, ctx.quick)
    jobs = {m: ctx.job([*study.common, *study.models[m].overrides, f"budget={budget}"]) for m in models}
    checks: dict[str, bool] = {}
    batch = None
    for m in models:
        w, job = study.models[m], jobs[m]
        batch = int(study.sequences)
        plain = [o for o in study.common if o.partition("=")[0] in ("system", "system.num_devices", "mapping.global_batch_size",
                                                                      "++mapping.precision", "++mapping.flash_attention")]
        preset, spec = preset_point(ctx, [f"hardware={study.preset}", *plain, *w.overrides])
        ctx.add(m, "tpu-v4", f"TPU v4 ({study.preset} preset), best placement", preset,
                ctx.runs.point("tpu-v4", m, preset, "the datasheet preset"))
        derived, run_id = ctx.point(job, config_values(job), m, "derived", "the TPU v4 template's own derivation")
        ctx.add(m, "derived", "TPU v4 derived from its technology and budgets", derived, run_id)
        for name, mine, theirs in () if m != models[0] else (("peak bf16 FLOP/s", derived.chip["peak_bf16_flops_per_s"], spec.peak_tflops_bf16 * 1e12),
                                   ("HBM bandwidth", derived.chip["hbm_bw_bytes_per_s"], spec.hbm_bw_gb_per_s * 1e9),
                                   ("power", derived.chip["tdp_w"], spec.tdp_w)):
            checks[f"derived TPU v4 {name} within {100 * tolerance:.0f} % of the preset "
                   f"({mine / theirs - 1:+.1%})"] = abs(mine / theirs - 1) <= tolerance
        held = [*study.common, *w.overrides, f"budget={budget}", "inner=null",
                *(f"++mapping.{k}={int(v)}" for k, v in w.placement.items()), *(w.get("spotlight_overrides") or [])]
        spot_job = ctx.job(held)
        spot_job.initial = encode_values(spot_job.space, config_values(spot_job))  # both searches start at TPU v4
        job.initial = encode_values(job.space, derived.values)
        spot, summary = ctx.search(spot_job, m, "spotlight")
        ctx.add(m, "spotlight", "Spotlight-style: architecture searched, PHAZE's placement held", spot,
                summary["run_id"])
        best, summary = ctx.search(job, m, "co-designed")
        ctx.add(m, "co-designed", "PHAZE-style: architecture and placement co-designed", best, summary["run_id"])
    for r in ctx.rows:
        r["throughput_seq_per_s"] = None if not r["step_time_s"] or not r["feasible"] else round(batch / r["step_time_s"], 2)
        ref = next(x for x in ctx.rows if x["workload"] == r["workload"] and x["variant"] == "tpu-v4")
        r["vs_tpu_v4"] = None if not r["throughput_seq_per_s"] or not ref.get("throughput_seq_per_s") else \
            round(r["throughput_seq_per_s"] / ref["throughput_seq_per_s"], 3)
        ref = next(x for x in ctx.rows if x["workload"] == r["workload"] and x["variant"] == "derived")
        r["vs_derived"] = None if not r["throughput_seq_per_s"] or not ref.get("throughput_seq_per_s") else \
            round(r["throughput_seq_per_s"] / ref["throughput_seq_per_s"], 3)
    losses(ctx.rows, reference="tpu-v4")
    checks.update({k: v for k, v in not_worse([r for r in ctx.rows if r["variant"] != "tpu-v4"], "co-designed").items()})
    return checks
