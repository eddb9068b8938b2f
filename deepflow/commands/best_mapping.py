"""`deepflow best-mapping`: the fastest feasible parallel mappings of a model on a system.

    deepflow best-mapping model=gpt3-175b system.num_devices=1024 top_k=10
    deepflow best-mapping -m system.num_devices=512,1024,2048 model=llama3-70b,gpt3-175b   # many systems
    deepflow best-mapping -m system.num_devices=512,1024 hydra/launcher=ray                 # ... as Ray tasks

One system is searched here (exhaustively, in one batched evaluation). With `-m` the command is a
Hydra multirun (`deepflow.launch.hydra_app`, config conf/best_mapping.yaml): one search a job, on
whichever launcher the command line names (joblib processes, Ray tasks, SLURM jobs), and a table of
the best mapping of each system at the end (`sweep.csv` in the sweep folder; nothing is logged to
MLflow: a search is a query, not a run).
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from deepflow.presets import ConfigError

CONFIG_NAME = "best_mapping"


def search(cfg) -> tuple[tuple, Any, str | None]:
    """`((accelerator, system, model, mapping), found, reason)`: the checked specs, the search's
    `BestMappings` (None when the chip cannot be built) and, then, why."""
    from analytical import REASON_TEXT, Reason
    from analytical.search import DEFAULT_OPTIONS, STACK_FIELDS, best_mappings, best_mappings_of
    from analytical.stack import OVERLAP_KINDS
    from deepflow.calibration import efficiency_of
    from deepflow.config import design_from_config

    top_k = check(cfg)
    specs, design, derived = design_from_config(cfg)
    accelerator, system, model, mapping = specs
    eff = efficiency_of(cfg, accelerator.name)  # calibration=<file>: its constants
    # the software stack as the mapping gives it; an overlap it leaves unset is each candidate's stack default
    stack = dataclasses.replace(DEFAULT_OPTIONS, **{k: getattr(mapping, k) for k in STACK_FIELDS},
                                **{f: getattr(mapping, f) for f in OVERLAP_KINDS.values()})
    if derived is None:
        return specs, best_mappings(accelerator, system, model, mapping.global_batch_size, top_k=top_k,
                                    precision=mapping.precision, flash_attention=mapping.flash_attention,
                                    ep_dispatcher=mapping.ep_dispatcher, overlap_ep_comm=mapping.overlap_ep_comm,
                                    etp=mapping.etp, eff=eff, options=stack), None
    if int(derived.reason[0]):  # an answer, as in evaluate: no mapping runs on a chip that cannot be built
        return specs, None, f"the chip cannot be built ({REASON_TEXT[Reason(int(derived.reason[0]))]})"
    # a derived chip: search around its tensors (operating-point energies, its own NIC), as evaluate does
    return specs, best_mappings_of(design, top_k=top_k, options=stack, eff=eff), None


def check(cfg) -> int:
    """The command's own options, checked: returns top_k."""
    from deepflow.config import option

    option(cfg, "output", ("table", "json"))
    top_k = option(cfg, "top_k")
    if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1:
        raise ConfigError(f"top_k={top_k!r} is invalid: allowed an integer >= 1")
    return top_k


def check_jobs(jobs: list[list[str]]) -> None:
    """Every job of a multirun composed and its specs checked before any search runs."""
    from deepflow.config import compose_config, design_from_config

    for overrides in jobs:
        cfg = compose_config(overrides, config_name=CONFIG_NAME)
        check(cfg)
        design_from_config(cfg)


def cmd_best_mapping(argv: list[str]) -> int:
    from deepflow.config import compose_config
    from deepflow.launch.hydra_app import HYDRA_FLAGS, launch

    if any(a.split("=")[0] in HYDRA_FLAGS for a in argv) or any(a.lstrip("+~").startswith(("hydra/", "hydra."))
                                                                 for a in argv):
        return launch(CONFIG_NAME, argv, check_jobs)  # many systems: Hydra's multirun and launchers
    cfg = compose_config(argv, config_name=CONFIG_NAME)
    specs, found, reason = search(cfg)
    return print_search(cfg, specs, found, reason)


def print_search(cfg, specs, found, reason) -> int:
    from deepflow.report import design_line
    from deepflow.tables import table

    accelerator, system, model, mapping = specs
    if found is None:
        print(f"no feasible mapping: {reason}")
        return 1
    rows = [{"mapping": m.__dict__, **r} for m, r in zip(found.mappings, found.rows)]
    if cfg.output == "json":
        print(json.dumps({"enumerated": found.num_enumerated, "feasible": found.num_feasible,
                          "search_s": found.search_s, "top": rows}))
        return 0
    print(f"{model.name} on {system.num_devices} x {accelerator.name}, global batch {mapping.global_batch_size}: "
          f"{found.num_enumerated:,} mappings enumerated, {found.num_feasible:,} feasible, "
          f"searched in {found.search_s:.2f} s")
    if not rows:
        print("no feasible mapping: try more devices, a smaller model or a larger memory")
        return 1
    ranked = [(i, f"{r['step_time_s']:.3f}", f"{r['mfu'] * 100:.1f}%", f"{r['memory_per_device_bytes'] / 2.0**30:.1f}",
               design_line(accelerator, system, model, m).split("; ", 1)[1])
              for i, (m, r) in enumerate(zip(found.mappings, found.rows), start=1)]
    print(table(["rank", "step_s", "MFU", "mem_GiB", "mapping"], ranked, align="rrrrl"))
    return 0


def best_mapping_task(cfg, overrides: list[str]) -> int:
    """One Hydra job of `deepflow best-mapping -m`: one system's search, its summary in its folder."""
    from deepflow.report import design_line
    from deepflow.launch import sweep_runs

    specs, found, reason = search(cfg)
    accelerator, system, model, _ = specs
    summary = {"overrides": overrides, "model": model.name, "accelerator": accelerator.name,
               "devices": system.num_devices, "enumerated": 0, "feasible": 0, "search_s": None,
               "best_step_time_s": None, "best_mfu": None, "best_mapping": reason or "no feasible mapping"}
    if found is not None:
        summary.update(enumerated=found.num_enumerated, feasible=found.num_feasible, search_s=found.search_s)
        if found.rows:
            best = found.rows[0]
            summary.update(best_step_time_s=best["step_time_s"], best_mfu=best["mfu"],
                           best_mapping=design_line(accelerator, system, model, found.mappings[0]).split("; ", 1)[1])
    sweep_runs.record_summary(summary)
    return 0


def print_sweep(summaries: list[dict], parent_id, swept: list[str]):
    """The end of a multirun of searches (deepflow.launch.sweep_runs): the best mapping of each job."""
    import pandas as pd

    from deepflow.run.summary import job_label
    from deepflow.tables import frame_table

    table = pd.DataFrame([{"job": job_label(s["overrides"], swept),
                           **{k: s[k] for k in ("model", "accelerator", "devices", "feasible", "best_step_time_s",
                                                "best_mfu", "best_mapping")}} for s in summaries])
    print(f"best mappings of {len(summaries)} systems (one search each)")
    print(frame_table(table))
    return table
