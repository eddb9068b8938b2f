"""The configuration of `deepflow optimize`: composed (conf/optimize.yaml + an experiment + overrides)
and checked into a `Job` before anything is evaluated or logged (every job of a multirun, by
`deepflow.commands.optimize.check_jobs`, before Hydra launches the first)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from omegaconf import DictConfig, OmegaConf

from analytical.specs import SpecError
from deepflow.config import option, space_from_config
from deepflow.presets import ConfigError, to_spec

CONFIG_NAME = "optimize"
RESUME_OPTIONS = ("resume", "tracking.uri", "output_dir", "output", "device")  # device: same results, other hardware
MAX_ENUMERATE = 2_000_000  # largest finite space `optimum=enumerate` evaluates whole
OPTIONS = {"name", "objective", "power_cap_w", "budget", "q", "seed", "optimum", "warm_start", "resume", "output_dir",
           "output", "hardware", "system", "model", "mapping", "space", "strategy", "tracking", "chip",
           "inner", "calibration", "executor", "ray", "device", "dtype"}
INNER = (None, "best_mapping")  # `inner`: null = the space as given; best_mapping = deepflow.run.hierarchical


def invalid(where: str, value: Any, allowed: str) -> ConfigError:
    return ConfigError(f"{where}={value!r} is invalid: allowed {allowed}")


@dataclass
class Job:
    """A checked configuration, ready to run: nothing has been evaluated or logged yet."""

    cfg: DictConfig
    overrides: list[str]
    name: str
    space: Any
    objective: Any
    strategy_name: str
    strategy_params: dict
    budget: int
    q: int
    seed: int
    uri: str
    experiment: str
    output_dir: Path
    optimum: Optional[str]
    warm_start: dict = field(default_factory=dict)
    inner: Optional[str] = None  # best_mapping: `space` is a deepflow.run.hierarchical.BestMappingSpace
    calibration: Any = None  # the deepflow.calibration.Calibration of `calibration=<file>` (the space's constants)
    # `k x d` unit-cube points verified first, before the strategy proposes (they count in the budget): designs a
    # caller already knows, e.g. the variants a study evaluated before its joint search (deepflow.study)
    initial: Any = None

    def make_strategy(self, prior=None):
        from deepflow.strategies import make_strategy

        params = dict(self.strategy_params)
        if self.strategy_name == "gradient":  # it differentiates the run's own objective
            params["objective"] = self.objective
        if prior is not None:
            m = self.objective.num_objectives
            params.update(prior=prior, prior_targets=list(range(m)))
            if prior.n_outputs_ > m:  # a warm start that also learned the constraint margins (older runs' did not)
                params["prior_constraint_targets"] = {j: m + k for k, j in enumerate(self.objective.modelled_constraints)}
        return make_strategy(self.strategy_name, **params)


def _int(cfg: DictConfig, key: str, minimum: int) -> int:
    value = OmegaConf.select(cfg, key)
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise invalid(key, value, f"an integer >= {minimum}")
    return value


def prepare(cfg: DictConfig, overrides: list[str]) -> Job:
    """Check everything a run needs (cheap: no evaluation, no MLflow) and return the `Job`."""
    from deepflow.calibration import calibration_from_config
    from deepflow.run.objectives import make_objective
    from deepflow.scale.executor import executor_options
    from deepflow.strategies import STRATEGIES, make_strategy
    from deepflow.tracking import resolve_uri

    unknown = sorted(k for k in cfg if k not in OPTIONS)
    if unknown:
        raise ConfigError(f"{unknown[0]} is not an option of deepflow optimize: allowed {', '.join(sorted(OPTIONS))}")
    name = str(option(cfg, "name"))
    if not name or "/" in name or name.startswith(".") or name in ("hydra", "multirun"):
        raise invalid("name", name, "a non-empty name without '/' (a folder under output_dir), other than hydra "
                                    "and multirun (Hydra's folders there)")
    option(cfg, "output", ("table", "json"))
    budget, q, seed = _int(cfg, "budget", 1), _int(cfg, "q", 1), _int(cfg, "seed", 0)
    optimum = option(cfg, "optimum", (None, "enumerate"))
    inner = OmegaConf.select(cfg, "inner")
    if inner not in INNER:
        raise invalid("inner", inner, "null (the space as given) or best_mapping (the optimizer proposes the non-mapping "
                                   "parameters, an exhaustive search picks each proposal's mapping)")
    try:
        objective = make_objective(str(option(cfg, "objective")), option(cfg, "power_cap_w"))
    except SpecError as exc:
        raise ConfigError(str(exc)) from None
    for group in ("hardware", "system", "model", "mapping"):
        to_spec(group, cfg[group])
    calibration = calibration_from_config(cfg)  # checked here; space_from_config takes its constants
    if calibration is not None:  # the saved config (resume) names the file wherever the run continues
        OmegaConf.update(cfg, "calibration", str(Path(calibration.path).resolve()))
    space = space_from_config(cfg)
    executor = executor_options(cfg)
    if executor.name == "ray" and inner != "best_mapping":
        raise invalid("executor", executor.name, "local for inner=null: Ray runs the inner best-mapping searches of "
                                                 "inner=best_mapping; a plain space's batch of q designs is one "
                                                 "vectorized call of milliseconds")
    if inner == "best_mapping":
        from deepflow.run.hierarchical import BestMappingSpace
        from deepflow.scale.executor import RayMap

        try:
            space = BestMappingSpace(space, map_fn=RayMap(executor) if executor.name == "ray" else None)
        except SpecError:
            raise invalid("inner", inner, f"null for space {space.name}: best_mapping needs a space with parameters "
                                       f"outside the mapping (e.g. space=chip-mapping)") from None
    if optimum == "enumerate" and not space.size <= MAX_ENUMERATE:
        raise invalid("optimum", optimum, f"null for space {space.name} ({space.size:.3g} points: enumerate needs a "
                                       f"finite space of at most {MAX_ENUMERATE:,})")
    strategy_cfg = OmegaConf.to_container(cfg.strategy, resolve=True)
    strategy_name = strategy_cfg.pop("name", None)
    if strategy_name not in STRATEGIES:
        raise invalid("strategy.name", strategy_name, ", ".join(STRATEGIES))
    try:
        make_strategy(strategy_name, **strategy_cfg)  # constructors check their parameters
    except SpecError as exc:
        raise ConfigError(f"strategy.{exc.field} = {exc.value!r} is invalid: allowed {exc.allowed}") from None
    warm = OmegaConf.to_container(cfg.warm_start, resolve=True) if cfg.get("warm_start") else {}
    for key in warm:
        if key not in ("samples", "model", "params"):
            raise ConfigError(f"warm_start.{key} is not an option: allowed samples, model, params")
    samples = warm.get("samples", 0)
    if isinstance(samples, bool) or not isinstance(samples, int) or samples < 0:
        raise invalid("warm_start.samples", samples, "an integer >= 0 (0 = no warm start)")
    if samples and strategy_name != "bo":
        warm = {**warm, "samples": 0, "skipped": f"strategy {strategy_name} takes no prior (only bo does)"}
    elif samples:
        from surrogates import MODELS

        if warm.get("model") not in MODELS:
            raise invalid("warm_start.model", warm.get("model"), ", ".join(MODELS))
    tracking = cfg.get("tracking") or {}
    uri = resolve_uri(tracking.get("uri"))
    experiment = str(tracking.get("experiment") or name)
    return Job(cfg=cfg, overrides=overrides, name=name, space=space, objective=objective,
               strategy_name=strategy_name, strategy_params=strategy_cfg, budget=budget, q=q, seed=seed,
               uri=uri, experiment=experiment, output_dir=Path(str(option(cfg, "output_dir"))),
               optimum=optimum, warm_start=warm, inner=inner, calibration=calibration)
