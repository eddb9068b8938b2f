"""`deepflow study <name>`: a case study of the co-design question, one command.

    deepflow study layer-by-layer                 # what designing one layer at a time costs
    deepflow study technology-levers              # what each technology lever buys, one at a time
    deepflow study phaze-tpuv4                    # PHAZE's search against TPU v4
    deepflow study retrodiction                   # co-design at A100's and H100's own budgets
    deepflow study layer-by-layer quick=true output=json seed=1 study.only=[llama3-70b]

Composed by Hydra (conf/study.yaml + conf/study/<name>.yaml + overrides) and checked before anything
runs; one parent MLflow run with a child run per variant (`deepflow.study.runs`), the table printed and
logged as markdown, a figure (PNG and offline HTML), the named checks, and the link that opens the
table in the MLflow UI (the parent run's artifacts, Model training view). `output=json` ends with one JSON line: `study`, `rows` (one per variant:
its design, step time, energy, MFU and the % it loses to the best), `checks` (name -> true/false),
`run_id`, `url`.
"""

from __future__ import annotations

import importlib
import warnings

from omegaconf import OmegaConf

from deepflow.presets import ConfigError

CONFIG_NAME = "study"


def _known(name: str) -> str:
    """`name` where it names a study, else a ConfigError naming the studies."""
    from deepflow.study import STUDIES

    if name not in STUDIES:
        raise ConfigError(f"study {name!r} is not known: allowed {', '.join(STUDIES)}")
    return name


def _name_and_overrides(argv: list[str]) -> list[str]:
    from deepflow.study import STUDIES

    if not argv or "=" in argv[0]:
        if not any(a.partition("=")[0] == "study" for a in argv):
            raise ConfigError(f"study: name the study: deepflow study <name> [overrides]; allowed {', '.join(STUDIES)}")
        return list(argv)
    return [f"study={_known(argv[0])}", *argv[1:]]


def compose(argv: list[str]):
    """The checked study config of a command line."""
    from deepflow.config import compose_config, option

    overrides = _name_and_overrides(argv)
    for o in overrides:
        if o.partition("=")[0] == "study":
            _known(o.partition("=")[2])
    cfg = compose_config(overrides, CONFIG_NAME)
    option(cfg, "output", ("table", "json"))
    if not isinstance(cfg.quick, bool):
        raise ConfigError(f"quick={cfg.quick!r} is invalid: allowed true or false")
    if isinstance(cfg.seed, bool) or not isinstance(cfg.seed, int) or cfg.seed < 0:
        raise ConfigError(f"seed={cfg.seed!r} is invalid: allowed an integer >= 0")
    unknown = sorted(k for k in cfg if k not in ("tracking", "study", "quick", "seed", "output", "output_dir"))
    if unknown:
        raise ConfigError(f"{unknown[0]} is not an option of deepflow study: allowed output, output_dir, quick, "
                          f"seed, study.<field>, tracking.<field>")
    return cfg


def cmd_study(argv: list[str]) -> int:
    from deepflow.study.context import Context, output_path
    from deepflow.study.report import checks_text, figure, json_line, markdown, table_cells
    from deepflow.study.runs import StudyRuns
    from deepflow.tables import table
    from deepflow.tracking import check_reachable, resolve_uri, run_url, ui_hint

    from linear_operator.utils.warnings import NumericalWarning

    from deepflow.study import STUDIES

    cfg = compose(argv)
    name = str(cfg.study.name)
    warnings.filterwarnings("ignore", category=NumericalWarning)  # GP jitter notes of the searches, not findings
    module = importlib.import_module(STUDIES[name])
    module.check(cfg, bool(cfg.quick))  # the study's own options, before any run is opened
    uri = resolve_uri(OmegaConf.select(cfg, "tracking.uri"))
    check_reachable(uri)
    experiment = str(OmegaConf.select(cfg, "tracking.experiment") or f"study-{name}")
    params = {"study": name, "quick": cfg.quick, "seed": cfg.seed,
              **{f"study.{k}": v for k, v in OmegaConf.to_container(cfg.study, resolve=True).items() if k != "name"}}
    base = [f"tracking.uri={uri}", f"tracking.experiment={experiment}", f"output_dir={output_path(cfg) / 'studies' / name}",
            f"seed={cfg.seed}", "output=json"]
    ctx = Context(cfg=cfg, runs=None, base=base, quick=bool(cfg.quick))
    for overrides in module.configurations(cfg, bool(cfg.quick)):  # composed and checked before any run opens
        ctx.job(overrides)
    runs = ctx.runs = StudyRuns(uri, experiment, name, output_path(cfg), params)
    try:
        checks = module.run(ctx)
    except BaseException:
        runs.fail()
        raise
    header, cells = table_cells(ctx.rows, ctx.reference, tuple(getattr(module, "EXTRA_COLUMNS", ())))
    files = [runs.directory / "table.md"]
    files[0].write_text(f"# study {name}\n\n" + markdown(header, cells) + "\n## checks\n\n"
                        + "\n".join(f"- {'ok' if ok else '**FAILED**'}: {check}" for check, ok in checks.items()) + "\n")
    files += figure(ctx.rows, runs.directory, f"deepflow study {name}", **getattr(module, "FIGURE", {}))
    (runs.directory / "rows.json").write_text(json_line(name, ctx.rows, checks))
    files.append(runs.directory / "rows.json")
    runs.finish(files, {"checks_passed": sum(checks.values()), "checks_failed": len(checks) - sum(checks.values()),
                        "elapsed_s": ctx.elapsed_s})
    url = run_url(uri, runs.experiment_id, runs.run_id, tab="artifacts/table.md")  # the table; the figures beside it
    if cfg.output == "json":
        print(json_line(name, ctx.rows, checks, {"run_id": runs.run_id, "url": url, "elapsed_s": ctx.elapsed_s,
                                                 "directory": str(runs.directory.resolve())}))
        return 0
    print(f"study {name}: {len(ctx.rows)} variants in {ctx.elapsed_s:.0f} s (parent MLflow run {runs.run_id})")
    print(table(header, cells))
    print("checks:\n" + checks_text(checks))
    print(f"table and figures: {runs.directory.resolve()}")
    print(f"open it in the MLflow UI: {ui_hint(uri, url)}")
    return 0  # a failed check is a finding of the study (printed), not an error of the command
