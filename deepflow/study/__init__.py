"""Studies: the answers users come for (`deepflow study <name>`, conf/study/<name>.yaml).

A study is a fixed set of variants of one co-design question, each an optimization or an exact
search through the commands' machinery (`deepflow.run`), all under one parent MLflow run, ending with
a table, a figure and named checks. It adds no model of its own.

Each study is a module with `check(cfg, quick)` (its own options), `configurations(cfg, quick)` (the
overrides of the jobs it knows before it runs, composed and checked before any MLflow run is opened) and
`run(ctx: deepflow.study.context.Context) -> checks`, which appends its rows to `ctx.rows`: `STUDIES`
names them.
"""

STUDIES = {"layer-by-layer": "deepflow.study.layer_by_layer",
           "technology-levers": "deepflow.study.levers",
           "phaze-tpuv4": "deepflow.study.phaze",
           "retrodiction": "deepflow.study.retrodiction"}
