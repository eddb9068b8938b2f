"""`deepflow best-mapping`: the fastest feasible parallel mappings of a model on a system."""

from __future__ import annotations

import json

from deepflow.presets import ConfigError


def cmd_best_mapping(overrides: list[str]) -> int:
    from analytical import REASON_TEXT, Reason
    from analytical.search import DEFAULT_OPTIONS, best_mappings, best_mappings_of
    from deepflow.calibration import efficiency_of
    from deepflow.config import compose_config, design_from_config, option
    from deepflow.report import design_line
    from deepflow.tables import table

    cfg = compose_config(overrides)
    output = option(cfg, "output", ("table", "json"))
    top_k = option(cfg, "top_k")
    if not isinstance(top_k, int) or top_k < 1:
        raise ConfigError(f"top_k={top_k!r} is invalid: allowed an integer >= 1")
    (accelerator, system, model, mapping), design, derived = design_from_config(cfg)
    eff = efficiency_of(cfg, accelerator.name)  # calibration=<file>: its constants
    if derived is None:
        found = best_mappings(accelerator, system, model, mapping.global_batch_size, top_k=top_k,
                              precision=mapping.precision, flash_attention=mapping.flash_attention, eff=eff)
    else:  # a derived chip: search around its tensors (operating-point energies, its own NIC), as evaluate does
        if int(derived.reason[0]):  # an answer, as in evaluate: no mapping runs on a chip that cannot be built
            print(f"no feasible mapping: the chip cannot be built ({REASON_TEXT[Reason(int(derived.reason[0]))]})")
            return 1
        found = best_mappings_of(design.replace(overlap_dp_comm=float(DEFAULT_OPTIONS.overlap_dp_comm),
                                                overlap_tp_comm=float(DEFAULT_OPTIONS.overlap_tp_comm)), top_k=top_k,
                                 eff=eff)
    rows = [{"mapping": m.__dict__, **r} for m, r in zip(found.mappings, found.rows)]
    if output == "json":
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
