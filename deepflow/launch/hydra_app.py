"""Hydra's own application machinery for the commands that run experiments (`optimize`, `sample`).

    deepflow optimize -m seed=0,1,2 strategy=bo,random             # Hydra's multirun (BasicSweeper)
    deepflow optimize -m seed=0,1 hydra/launcher=joblib            # jobs in parallel processes
    deepflow sample -m seed=0,1 hydra/launcher=submitit_slurm      # jobs on a SLURM cluster
    deepflow optimize --cfg job | --info | --help                  # Hydra's inspection flags

`launch` is `@hydra.main` with three things in front, all before anything runs or is logged:
1. the command line is parsed with Hydra's own argument parser, and every *job* of the multirun is
   composed and checked with the command's own checks, as Hydra's BasicSweeper will expand it
   (`BasicSweeper.split_arguments`, the config's `hydra.sweeper.params` first); bad input is one
   `ConfigError` line naming the field, also for an unknown or uninstalled launcher;
2. `group.field=value` overrides become Hydra's add-or-override `++group.field=value`, so that a
   field a preset leaves at its default can be set, as in every other command;
3. a config that declares its own sweep (`hydra.sweeper.params`, e.g. experiment=technology-sweep)
   runs as a multirun without `-m`.
Then Hydra runs: one output folder per job with its `.hydra/` config snapshot and log, the launcher
the config names, and the `deepflow.launch.sweep_runs.SweepParent` callback that opens one parent
MLflow run per multirun. Each job calls the command's task (`TASKS`) with its composed config.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import sys
from typing import Callable, Iterator

from deepflow.config import compose_config, field_override
from deepflow.presets import CONF_DIR, ConfigError

# the task of each command: "module:function", called as function(cfg, task_overrides) -> exit code
TASKS = {"optimize": "deepflow.commands.optimize:optimize_task", "sample": "deepflow.commands.sample:sample_task",
         "best_mapping": "deepflow.commands.best_mapping:best_mapping_task"}
# Hydra's own command-line flags (its argument parser's): a command line with one is Hydra's
HYDRA_FLAGS = ("-m", "--multirun", "-c", "--cfg", "-i", "--info", "--resolve", "-p", "--package", "--hydra-help",
               "--version", "-cd", "--config-dir", "-sc", "--shell-completion", "--experimental-rerun", "-cp",
               "--config-path", "-cn", "--config-name")
_INSPECT = ("cfg", "info", "help", "hydra_help", "shell_completion")  # Hydra flags that run nothing
_codes: list[int] = []  # exit codes of the jobs this process ran (the single run's is the command's)


def task(cfg) -> int:
    """Hydra's task function for every command: the job's own command, in the folder the command
    was started from (a launcher may start its worker elsewhere; relative paths mean the same)."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    from deepflow.allocator import retain_freed_memory

    retain_freed_memory()  # (a launcher's worker process did not start from `deepflow.cli.main`)
    hc = HydraConfig.get()
    if os.getcwd() != hc.runtime.cwd:
        os.chdir(hc.runtime.cwd)
    module, _, function = TASKS[hc.job.name].partition(":")
    try:
        code = int(getattr(importlib.import_module(module), function)(cfg, list(hc.overrides.task)) or 0)
    except ConfigError as exc:  # checked before Hydra started, so rare: one line in a single run
        if hc.mode == RunMode.MULTIRUN:
            raise  # a failed job of the sweep (Hydra reports it with its overrides)
        print(f"deepflow: error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    _codes.append(code)
    return code


def is_hydra_key(override: str) -> bool:
    return override.lstrip("+~").startswith(("hydra.", "hydra/"))


def _field_override(override: str) -> str:
    return override if is_hydra_key(override) else field_override(override)


@contextlib.contextmanager
def _argv(argv: list[str]) -> Iterator[None]:
    saved = sys.argv
    sys.argv = argv
    try:
        yield
    finally:
        sys.argv = saved


def _parser():
    from hydra._internal.utils import get_args_parser  # the parser @hydra.main uses (not a public name)

    parser = get_args_parser()

    def error(message: str):
        raise ConfigError(f"{message}: allowed key=value overrides and Hydra's flags (-m, --cfg job, --info, "
                          f"--help, --hydra-help)")

    parser.error = error
    return parser


def jobs_of(config_name: str, overrides: list[str], multirun: bool) -> tuple[list[list[str]], bool]:
    """`(jobs, multirun)`: the task overrides of each job, as Hydra's BasicSweeper will launch them
    (the config's `hydra.sweeper.params` first, then the command line's, which win for a key), and
    whether this is a multirun (a config's declared sweep makes it one). Hydra overrides are checked
    here (launcher, sweeper) and are not part of the jobs."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException
    from omegaconf import DictConfig, OmegaConf

    parser = OverridesParser.create()
    try:
        parsed = parser.parse_overrides(overrides)
    except HydraException as exc:
        raise ConfigError(str(exc).splitlines()[0]) from None
    swept = [o for o in parsed if o.is_sweep_override()]
    if swept and not multirun:
        raise ConfigError(f"{swept[0].get_key_element().lstrip('+~')} has several values (a sweep): add -m "
                          f"(--multirun) to run one job per value")
    plain = [o.input_line for o in parsed if not o.is_sweep_override()]
    cfg = compose_config(plain, config_name=config_name, return_hydra_config=True)
    sweeper = OmegaConf.select(cfg, "hydra.sweeper._target_") or ""
    params = OmegaConf.select(cfg, "hydra.sweeper.params")
    params = OmegaConf.to_container(params, resolve=False) if isinstance(params, DictConfig) else {}
    multirun = multirun or bool(params)
    if not multirun:
        return [[o for o in overrides if not is_hydra_key(o)]], False
    if not sweeper.endswith("BasicSweeper"):  # another sweeper proposes its own jobs: check the base config
        return [[o.input_line for o in parsed if not o.is_sweep_override() and not o.is_hydra_override()]], True
    declared = [f"{key}={value}" for key, value in params.items()]
    batches = BasicSweeper.split_arguments(parser.parse_overrides(declared + overrides), None)
    return [[o for o in job if not is_hydra_key(o)] for batch in batches for job in batch], True


def launch(config_name: str, argv: list[str], check: Callable[[list[list[str]]], None]) -> int:
    """Run command `config_name` (a key of `TASKS`) as a Hydra application with the command line
    `argv`, after `check(jobs)` has checked every job's task overrides (it raises ConfigError)."""
    import hydra

    args = _parser().parse_args(argv)
    if args.experimental_rerun is not None or args.config_name or args.config_path:
        raise ConfigError("--experimental-rerun, --config-name and --config-path are not options of deepflow: "
                          f"the command sets its config ({config_name}); allowed -m, --cfg, --info, --help, -cd")
    argv = [_field_override(a) if "=" in a and not a.startswith("-") else a for a in argv]
    if not any(getattr(args, flag) for flag in _INSPECT):
        jobs, multirun = jobs_of(config_name, [_field_override(o) for o in args.overrides], args.multirun)
        check(jobs)
        if multirun and not args.multirun:
            print(f"the config declares a sweep (hydra.sweeper.params): {len(jobs)} jobs as a multirun",
                  file=sys.stderr, flush=True)
            argv = ["--multirun", *argv]
    from deepflow.launch import sweep_runs

    del _codes[:]
    main = hydra.main(config_path=str(CONF_DIR), config_name=config_name, version_base="1.3")(task)
    try:
        with _argv([f"deepflow {config_name}", *argv]):
            main()
    except SystemExit as exc:  # Hydra reports a failed job and exits 1
        sweep_runs.close_open_parents("FAILED")
        return exc.code if isinstance(exc.code, int) else 1
    except BaseException:
        sweep_runs.close_open_parents("FAILED")
        raise
    return max(_codes + [sweep_runs.failed_code()])
