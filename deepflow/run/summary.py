"""What `deepflow optimize` prints: one run's report, or a sweep's table of child runs, then the
link that opens the run's (or the sweep's) charts in the MLflow UI, after the command that starts the UI
of a local store (`output=json`: one JSON object instead)."""

from __future__ import annotations

import json
from typing import Any, Optional

import pandas as pd

from deepflow.run.best_design import chip_line
from deepflow.tables import frame_table


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
        lines.append(step_table(summary["best_row"], specs[0].hbm_gib * 2.0**30, specs[0].tdp_w,
                                "image" if specs[2].kind == "cnn" else "token"))
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
    if summary.get("hydra_dir"):
        lines.append(f"config snapshot and log (Hydra): {summary['hydra_dir']}/")
    if "best_design" in summary:
        lines.append(f"evaluate the best design again: deepflow evaluate design={summary['best_design']}")
    return "\n".join(lines)


def jsonable(summary: dict[str, Any]) -> dict[str, Any]:
    """The summary without its spec objects (`best_design_line` says the same in words)."""
    return {k: v for k, v in summary.items() if k != "best_specs"}


def job_label(overrides: list[str], swept: list[str]) -> str:
    """A job's swept values (`seed=1 chip.node=N5`), its every override when none is swept."""
    values = [o.lstrip("+~") for o in overrides if o.partition("=")[0].lstrip("+~") in swept]
    return " ".join(values or [o.lstrip("+~") for o in overrides])


def sweep_table(summaries: list[dict[str, Any]], swept: list[str]) -> pd.DataFrame:
    """One row per job: its swept values, the best objective and the best design's chip values."""
    rows = []
    for s in summaries:
        job = job_label(s["overrides"], swept)
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
        if "best_design_line" in s:
            row["best_design"] = s["best_design_line"]
        rows.append(row)
    return pd.DataFrame(rows)


def ui_link(summaries: list[dict[str, Any]], parent_id: Optional[str]) -> str:
    """The MLflow UI link of what was run, in its Model training view: the run's metric charts, or for a sweep
    the charts of its child runs side by side (`deepflow.tracking.run_url`, `experiment_url`)."""
    from deepflow.tracking import experiment_url, run_url, ui_address

    uri, experiment_id = summaries[0]["tracking_uri"], summaries[0].get("experiment_id")
    if experiment_id is None:  # a summary written before it carried its experiment: the UI's home
        return ui_address(uri)
    return experiment_url(uri, experiment_id) if parent_id else run_url(uri, experiment_id, summaries[0]["run_id"])


def print_summaries(summaries: list[dict[str, Any]], parent_id: Optional[str], table: Optional[pd.DataFrame] = None) -> int:
    from deepflow.tracking import ui_command, ui_hint

    uri = summaries[0]["tracking_uri"]
    if summaries[0].get("output") == "json":
        print(json.dumps({"parent_run_id": parent_id, "runs": [jsonable(s) for s in summaries],
                          "ui": ui_command(uri), "ui_url": ui_link(summaries, parent_id)}, default=str))
        return 0
    if parent_id is None:
        print(report(summaries[0]))
    else:
        print(f"sweep (parent run {parent_id}): {len(summaries)} jobs, each a child run; the full report of "
              f"each is its best_breakdown.json")
        print(frame_table(table.drop(columns=["best_design"], errors="ignore")))
        print("best designs:")
        for s, job in zip(summaries, table["job"]):
            if "best_design_line" in s:
                print(f"  {job}: {s['best_design_line'].split('; ', 1)[1]}")
                if "best_chip" in s:
                    print(f"    {chip_line(s['best_chip'])}")
            print(f"    deepflow evaluate design={s['best_design']}" if "best_design" in s
                  else f"  {job}: no feasible design")
    print(f"open the MLflow UI: {ui_hint(uri, ui_link(summaries, parent_id))}")
    return 0


def print_sweep(summaries: list[dict[str, Any]], parent_id: str, swept: list[str]) -> pd.DataFrame:
    """The end of a multirun (deepflow.launch.sweep_runs): its table of child runs, printed; returned."""
    table = sweep_table(summaries, swept)
    print_summaries(summaries, parent_id, table)
    return table
