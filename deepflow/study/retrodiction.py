"""`deepflow study retrodiction`: co-design at A100's and H100's own budgets (conf/study/retrodiction.yaml).

Per case: `real`, the chip template's own splits (the real chip as the derivation reproduces it) with its
best mapping, and `co-designed`, BO over the chip (space chip-only, the exact search on each proposal's
mapping) at the same technology, budgets and power cap; and `within-real-bounds`, the same search within
two freedoms the real chips did not take and the model does not price (space chip-real-bounds: the
die's compute share at most 0.5, the scale-up domain and scale-out lanes held), so that the table shows
how much of the claimed gain comes from them. Each row carries the design's key ratios
(`ratios`): FLOP/s per byte/s of HBM, SRAM per compute unit, scale-up bandwidth per FLOP/s. Checks: the
co-designed chip is not worse than the real one (the search) and its gain is at most `max_gain` (above
it, a finding to explain: README, "Case studies").
"""

from __future__ import annotations

from deepflow.study.context import Context, chosen, losses, number, positive_int
from deepflow.study.points import config_values, encode_values

EXTRA_COLUMNS = ("flop_per_hbm_byte", "sram_kib_per_unit", "scale_up_byte_per_kflop")
BOUNDED = "space=chip-real-bounds"  # the search within the real chip's compute share and scale-up domain


def ratios(chip: dict[str, float]) -> dict[str, float]:
    """The design's key ratios (its derived accelerator's fields, SI units)."""
    peak = chip.get("peak_bf16_flops_per_s") or float("nan")
    return {"flop_per_hbm_byte": round(peak / chip["hbm_bw_bytes_per_s"], 1),
            "sram_kib_per_unit": round(chip["sram_bytes"] / chip["compute_units"] / 2**10, 1),
            "scale_up_byte_per_kflop": round(1e3 * chip["scale_up_bw_bytes_per_s"] / peak, 3)}


def check(cfg, quick: bool) -> tuple[list[str], int, float]:
    """The study's own options, checked before anything runs: `(cases, budget, max_gain)`."""
    study = cfg.study
    cases = chosen(study.get("only"), list(study.cases), "study.only")
    budget = positive_int(cfg, "study.budget")
    quick_budget = positive_int(cfg, "study.quick_budget")
    max_gain = number(cfg, "study.max_gain", lambda v: v >= 1, "a number >= 1")
    return cases, quick_budget if quick else budget, max_gain


def case_overrides(cfg, case: str, budget: int, *extra: str) -> list[str]:
    """The overrides of a case's co-design search (`extra`: of a variant of it)."""
    return [*cfg.study.base, *cfg.study.cases[case].overrides, f"budget={budget}", *extra]


def configurations(cfg, quick: bool) -> list[list[str]]:
    """The overrides of each case's co-design search and of its search within the real chip's bounds."""
    cases, budget, _ = check(cfg, quick)
    return [case_overrides(cfg, c, budget, *extra) for c in cases for extra in ([], [BOUNDED])]


def run(ctx: Context) -> dict[str, bool]:
    ctx.reference = "real"
    cases, budget, max_gain = check(ctx.cfg, ctx.quick)
    jobs = {c: ctx.job(case_overrides(ctx.cfg, c, budget)) for c in cases}
    checks: dict[str, bool] = {}
    for case in cases:
        job = jobs[case]
        point, run_id = ctx.point(job, config_values(job), case, "real", "the template's own splits, best mapping")
        real = ctx.add(case, "real", "real chip (template splits), best mapping", point, run_id, **ratios(point.chip))
        best, summary = ctx.search(job, case, "co-designed")
        designed = ctx.add(case, "co-designed", "co-designed at the same budgets", best, summary["run_id"],
                           **(ratios(best.chip) if best is not None else {}))
        bounded_job = ctx.job(case_overrides(ctx.cfg, case, budget, BOUNDED))
        bounded_job.initial = encode_values(bounded_job.space, config_values(bounded_job))  # starts from the real chip
        best, summary = ctx.search(bounded_job, case, "within-real-bounds")
        bounded = ctx.add(case, "within-real-bounds", "co-designed, compute share <= 0.5, scale-up domain and lanes held",
                          best, summary["run_id"], **(ratios(best.chip) if best is not None else {}))
        for row in (designed, bounded):
            if row["feasible"] and real["feasible"]:
                row["gain"] = real["objective_s"] / row["objective_s"]
        if "gain" in bounded:
            checks[f"{case}: within the real chip's compute share and scale-up domain, gain {bounded['gain']:.2f}x "
                   f"at most {max_gain}x"] = bounded["gain"] <= max_gain
        if "gain" in designed:
            checks[f"{case}: co-designed not worse than the real chip"] = designed["gain"] >= 1 - 1e-9
            checks[f"{case}: claimed gain {designed['gain']:.2f}x at most {max_gain}x"] = designed["gain"] <= max_gain
    losses(ctx.rows, reference="real")
    return checks
