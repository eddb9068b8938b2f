"""`deepflow evaluate`: time, memory, energy and feasibility of one design, with breakdowns."""

from __future__ import annotations

import json


def cmd_evaluate(overrides: list[str]) -> int:
    from analytical import DEFAULT_EFFICIENCY, Reason, evaluate
    from deepflow.calibration import calibration_from_config
    from deepflow.config import compose_config, design_from_config, option
    from deepflow.report import design_line, fused_table, step_table

    cfg = compose_config(overrides)
    output = option(cfg, "output", ("table", "json"))
    calibration = calibration_from_config(cfg)  # calibration=<file>: its constants for this accelerator
    specs, design, derived = design_from_config(cfg)  # chip=<preset>: the derived chip is the hardware
    eff = DEFAULT_EFFICIENCY if calibration is None else calibration.efficiency_for(specs[0].name)
    result = evaluate(design, eff)
    row = result.row(0)
    if derived is not None and int(derived.reason[0]):  # a chip that cannot be built says why first
        row.update(feasible=False, reason=Reason(int(derived.reason[0])).name.lower())
    given = {} if calibration is None else {"calibration": calibration.path}
    if specs[3].fused_jobs > 1:  # HFTA: the fused jobs against running them one by one
        from analytical.fused import fused_comparison

        given["fused"] = fused_comparison(design, eff)
    if output == "json":
        print(json.dumps({"design": design_line(*specs), **given, **row}))
    else:
        print(design_line(*specs) + (f"; calibration={calibration.path}" if calibration is not None else ""))
        token = "image" if specs[2].kind == "cnn" else "token"
        print(step_table(row, specs[0].hbm_gib * 2.0**30, float(design.tdp_w[0]), token))  # a power limit lowers tdp
        if "fused" in given:
            print("\n" + fused_table(given["fused"]))
    return 0
