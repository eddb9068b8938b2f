"""Bayesian optimization with BoTorch over a design space's unit cube.

Each `propose` call refits everything from the verified `History`. The strategy object keeps only
caches: the enumerated candidates of a discrete space and, with `warm_start` (off by default), each
GP's latest hyperparameters, which start the next fit of the same space and outcome; a fresh object
(a resumed run) then starts from the default initialisation: valid proposals, not bit for bit the
same ones.

Initial design: the first `n_init` evaluations are the space's scrambled Sobol sequence with known
constraints filtered (`SobolSearch`). Afterwards:

Models (exact GPs, noise-free: the analytical model is deterministic, so `train_Yvar` is fixed at
1.1e-6 of the outcome's variance, which only regularises the Cholesky):
- inputs are the unit-cube points snapped to their design (bin centres for discrete parameters),
  duplicates dropped (one design, one value);
- when the space has categorical parameters of more than two choices (`cat_dims`), `SingleTaskGP`
  with the kernel of BoTorch's `MixedSingleTaskGP` (`mixed_kernel`: RBF on the other dimensions,
  Hamming-distance kernel on these, their scaled sum plus their scaled product) computed with the
  faster, value-for-value identical `HammingKernel`; else `SingleTaskGP` with its default kernel
  (RBF ARD, lengthscale prior scaled with the dimension);
- on a chip space searched by candidates (`chip_features`, on by default; not with a surrogate prior),
  each GP's inputs are the point and the logs of its derived chip's figures
  (`analytical.space.CHIP_FEATURES`: peak FLOP/s, memory bandwidth and capacity, scale-up and
  scale-out bandwidth, compute units; those that vary among the training rows, scaled to [0, 1] over
  them), computed by the chip derivation alone (~4 ms for 4,096 points). The step time reaches the
  splits through min()s of area, power and shoreline bounds, so it has kinks along them where it is
  smooth in the figures; with the figures BO's median best at 100 evaluations moved from +2.24 / +1.79 /
  +4.36 / +22.5 % to +0.68 / +0.31 / +2.01 / +7.62 % of the best-known design on the MoE, hierarchical,
  joint and flat co-design experiments (README, "Optimizer: co-design benchmark");
- hyperparameters: maximum marginal likelihood, L-BFGS-B, at most `fit_maxiter` iterations from the
  default initialisation, or with `warm_start` at most `fit_maxiter_warm` from the same GP's previous
  fit. Warm starting is 5x cheaper at n = 500 and reaches a HIGHER likelihood, yet it searched worse
  (experiments/benchmarks/bench_bo.py `mapping`, evaluations to 1 % regret, seeds 0-2: cold 38, 55,
  34; warm 68, 62, 39, and seed 3 missed it within 100; with 75 warm iterations seed 0 missed it):
  the hyperparameters seem to stay in the basin of the early, small-history fits. Off by default;
- objectives (minimized `History.Y`) are modelled on the FEASIBLE rows only: an infeasible design's
  value says nothing about the feasible optimum and would bend the model where it matters (while
  fewer than 2 rows are feasible, every row is used);
- each outcome constraint of `History.C` (<= 0 satisfied; memory margin log(memory / capacity), power
  margin, "other" infeasibility label; see `deepflow.run.objectives`) that is not constant gets its own
  GP on ALL rows. This is how the probability of fitting in memory enters: an outcome constraint on
  the modelled memory margin, which is continuous and informative also where it is violated, rather
  than a classifier on the 0/1 labels;
- optional warm start (`prior`): a fitted surrogate (`predict(X, return_std=True) -> (mean n x t,
  std n x t)`, the `surrogates/` interface) becomes the GP's prior mean `a * surrogate(X)[:, t] + b`
  (a, b learned), so the GP models what the surrogate gets wrong; with `prior_constraint_targets`
  also the prior mean of the memory / power constraints' GPs (`deepflow optimize`'s warm start
  learns those margins beside the objectives).

Acquisition (all maximized on the negated objectives):
- one objective: `qLogNoisyExpectedImprovement` with the constraints as `constraints` callables;
- two objectives: `qLogNoisyExpectedHypervolumeImprovement`, reference point `ref_point` (in Y units)
  or the feasible nadir plus 10 % of the range.

Candidates:
- a fully discrete space (grid of at most `max_grid` points) with at most `max_enumerate` known-feasible
  points is enumerated once (bin centres), filtered by `space.known_feasible` and by the designs
  already verified; when more than `screen` remain, a cheap analytic screen (log expected improvement
  over the best feasible value, or the sum of the objectives' posterior lower bounds for two
  objectives, plus the log probability of satisfying each modelled constraint, from the posterior
  marginals, `marginals`) keeps the `screen` best, and `optimize_acqf_discrete` picks the best q of
  those by the MC acquisition (sequential greedy with pending points). The constraint terms are
  <= 0, so they are computed only for the choices in decreasing order of the objective term until
  that term falls below the `screen`-th best total (the same choices, a fraction of the work);
- otherwise (a space with continuous parameters, e.g. the chip splits of co-design, or a grid too
  large), with `mixed="candidates"` (default): a candidate set (`deepflow.strategies.candidates`:
  `n_local` moves around the `centres` best feasible designs at step lengths from 0.003 to 0.3 of
  the unit cube, TuRBO's local search without its state, plus `n_global` Sobol points), all
  known-feasible and new; the same analytic screen keeps the `candidate_screen` best of those whose modelled
  probability of feasibility (the product over the constraint GPs) is at least `min_feasibility`
  (the q likeliest where fewer are), and `optimize_acqf_discrete` picks q by the MC acquisition.
  Measured on the co-design experiments (README, "Co-design search"): 1-5 s a batch where the
  alternating optimizer took 20-35 s, and better designs;
- with `mixed="alternating"`: `optimize_acqf_mixed_alternating` (discrete / categorical dimensions
  restricted to their bin centres; a purely continuous space uses `optimize_acqf`). A candidate that
  breaks a known constraint or repeats a design is replaced by the acquisition's best point of a
  known-feasible repair set (its continuous coordinates with the discrete coordinates of Sobol
  known-feasible points, and those points themselves).
"""

from __future__ import annotations

import math
import time
import warnings
from typing import Optional

import torch
from botorch.acquisition.logei import qLogNoisyExpectedImprovement
from botorch.acquisition.multi_objective.logei import qLogNoisyExpectedHypervolumeImprovement
from botorch.acquisition.multi_objective.objective import WeightedMCMultiOutputObjective
from botorch.acquisition.objective import GenericMCObjective
from botorch.exceptions.warnings import OptimizationWarning
from botorch.fit import fit_gpytorch_mll
from botorch.models import ModelListGP, SingleTaskGP
from botorch.optim import optimize_acqf_discrete
from botorch.sampling import SobolQMCNormalSampler
from gpytorch.mlls import ExactMarginalLogLikelihood

from analytical.codes import DTYPE
from analytical.search import torch_threads
from analytical.space import DesignSpace
from analytical.specs import SpecError
from deepflow.strategies.alternating import optimize_mixed
from deepflow.strategies.base import History, check_q, design_keys
from deepflow.strategies.candidates import SCALES, candidate_set
from deepflow.strategies.gp_parts import NOISE_FRACTION, SurrogateMean, hyperparameters, log_ei, marginals, mixed_kernel
from deepflow.strategies.random_search import SobolSearch
from deepflow.strategies.space_grid import cat_dims, enumerate_space, grid_ids, snap, space_key

SCREEN_BLOCK = 4096  # choices per block of the screen's constraint terms
LIKELY_PENALTY = 1e6  # subtracted from the screen score of a choice below min_feasibility
MIXED = ("candidates", "alternating")  # how a space too large to enumerate is searched (class docstring)


class BayesianOptimization:
    """BoTorch BO (see the module docstring). Parameters:

    n_init: Sobol evaluations before the first model (default 2 (d + 1)).
    num_restarts, raw_samples: of the continuous / mixed acquisition optimization.
    mc_samples: quasi-MC samples of the acquisition.
    max_enumerate: most known-feasible points of a fully discrete space optimized by enumeration.
    max_grid: largest fully discrete grid enumerated to find them.
    screen: enumerated candidates kept by the analytic pre-screen for the MC acquisition.
    fit_maxiter: L-BFGS iterations of each GP's hyperparameter fit from the default initialisation.
    warm_start: start each GP's hyperparameters from this object's latest fit of the same space and
      outcome (an initialisation only: a fresh object, e.g. of a resumed run, starts from the
      default). Off by default: cheaper fits but a worse search (module docstring);
      fit_maxiter_warm: L-BFGS iterations of such a warm-started fit.
    num_threads: torch intra-op threads while proposing (restored afterwards; None keeps the
      caller's). One: GP fits of a few hundred points gain nothing from more, and on a shared
      machine intra-op threads make them several times slower.
    ref_point: two objectives only: hypervolume reference point in Y units (minimized), length 2.
    mixed: how a space that is not enumerated is searched: "candidates" or "alternating" (module
      docstring); n_local, n_global, centres: the candidate set's local moves, Sobol points and the
      designs the moves start from; min_feasibility: the least modelled probability of feasibility of
      a candidate that goes on to the acquisition; candidate_screen: how many candidates the analytic screen
      keeps for the MC acquisition (512: the same search as 2,048 on the joint space at half the time, README).
    chip_features: on a chip space searched by candidates, the GPs also take the derived chip's
      figures (module docstring).
    prior: an optional fitted surrogate (see `SurrogateMean`); prior_targets: its column per objective;
      prior_constraint_targets: `{constraint column of History.C: surrogate column}` for the
      constraints whose GPs take the surrogate as prior mean too (the memory and power margins).
    """

    name = "bo"

    def __init__(self, n_init: Optional[int] = None, num_restarts: int = 4, raw_samples: int = 256,
                 mc_samples: int = 64, max_enumerate: int = 200_000, ref_point: Optional[list[float]] = None,
                 prior=None, prior_targets: Optional[list[int]] = None, maxiter_alternating: int = 16,
                 max_grid: int = 2_000_000, screen: int = 2048, fit_maxiter: int = 75,
                 num_threads: Optional[int] = 1, warm_start: bool = False, fit_maxiter_warm: int = 20,
                 prior_constraint_targets: Optional[dict[int, int]] = None, mixed: str = "candidates",
                 n_local: int = 3072, n_global: int = 1024, centres: int = 4, min_feasibility: float = 0.8,
                 scales: Optional[list[float]] = None, candidate_screen: int = 512,
                 chip_features: bool = True):
        self.n_init = n_init
        self.num_restarts = num_restarts
        self.raw_samples = raw_samples
        self.mc_samples = mc_samples
        self.max_enumerate = max_enumerate
        self.ref_point = ref_point
        self.prior = prior
        self.prior_targets = prior_targets
        self.prior_constraint_targets = prior_constraint_targets
        self.maxiter_alternating = maxiter_alternating
        self.max_grid = max_grid
        self.screen = screen
        self.fit_maxiter = fit_maxiter
        self.num_threads = num_threads
        self.warm_start = warm_start
        self.fit_maxiter_warm = fit_maxiter_warm
        self.mixed = mixed
        self.n_local = n_local
        self.n_global = n_global
        self.centres = centres
        self.min_feasibility = min_feasibility
        self.scales = scales
        self.candidate_screen = candidate_screen
        self.chip_features = chip_features
        if scales is not None and (not scales or any(isinstance(x, bool) or not isinstance(x, (int, float)) or x <= 0
                                                     for x in scales)):
            raise SpecError("strategy[bo]", "scales", scales, "null or a list of positive step lengths (unit cube)")
        if isinstance(min_feasibility, bool) or not isinstance(min_feasibility, (int, float)) \
                or not 0.0 < min_feasibility <= 1.0:
            raise SpecError("strategy[bo]", "min_feasibility", min_feasibility, "a number in (0, 1]")
        if mixed not in MIXED:
            raise SpecError("strategy[bo]", "mixed", mixed, " or ".join(MIXED))
        for name in ("num_restarts", "raw_samples", "mc_samples", "max_enumerate", "maxiter_alternating",
                     "max_grid", "screen", "fit_maxiter", "fit_maxiter_warm", "n_local", "n_global", "centres",
                     "candidate_screen"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise SpecError("strategy[bo]", name, value, "an integer >= 1")
        if n_init is not None and (isinstance(n_init, bool) or not isinstance(n_init, int) or n_init < 1):
            raise SpecError("strategy[bo]", "n_init", n_init, "an integer >= 1 or None")
        if ref_point is not None and len(ref_point) != 2:
            raise SpecError("strategy[bo]", "ref_point", ref_point, "two numbers (Y units) or None")
        if not isinstance(warm_start, bool):
            raise SpecError("strategy[bo]", "warm_start", warm_start, "true or false")
        if not isinstance(chip_features, bool):
            raise SpecError("strategy[bo]", "chip_features", chip_features, "true or false")
        self._enumerated: dict[tuple, torch.Tensor] = {}
        self._hyperparameters: dict[tuple, dict[str, torch.Tensor]] = {}  # warm start: latest fit per key
        self._features = None  # during a proposal with chip features: (space.chip_features, columns, low, span)

    # ----------------------------------------------------------------------------------- models
    def _gp(self, space: DesignSpace, X: torch.Tensor, y: torch.Tensor, target: Optional[int] = None,
            key: Optional[tuple] = None):
        """An exact noise-free GP on `X n x d`, `y n` (fitted); with `warm_start`, its hyperparameters
        start from the latest fit under the same `key` (space and outcome) and are stored for the next."""
        Y = y.unsqueeze(-1)
        var = float(Y.var()) if Y.shape[0] > 1 else 1.0
        Yvar = torch.full_like(Y, NOISE_FRACTION * max(var, 1e-12))
        cats = cat_dims(space)
        if cats and len(cats) < space.dim:
            model = SingleTaskGP(X, Y, train_Yvar=Yvar, covar_module=mixed_kernel(X.shape[-1], cats))
        else:
            model = SingleTaskGP(X, Y, train_Yvar=Yvar)
        if target is not None and self.prior is not None:
            model.mean_module = SurrogateMean(self.prior, target)
        warm = self.warm_start and key is not None
        maxiter = self.fit_maxiter
        if warm and key in self._hyperparameters:
            maxiter = self.fit_maxiter_warm
            with torch.no_grad():
                for name, param in hyperparameters(model).items():
                    previous = self._hyperparameters[key].get(name)
                    if previous is not None and previous.shape == param.shape:
                        param.copy_(previous)
        mll = ExactMarginalLogLikelihood(model.likelihood, model)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fit_gpytorch_mll(mll, optimizer_kwargs={"options": {"maxiter": maxiter}})
        if warm:
            self._hyperparameters[key] = {name: p.detach().clone() for name, p in hyperparameters(model).items()}
        return model

    def fit(self, space: DesignSpace, history: History):
        """`(model, X, Y, feasible, constraint outcome indices)` from the history (one row per design)."""
        Xs = snap(space, history.X)
        keys = design_keys(space, Xs)
        first: dict[tuple, int] = {}
        for i, k in enumerate(keys):
            first.setdefault(k, i)
        idx = torch.tensor(sorted(first.values()))
        X, Y, feas = self._inputs(Xs[idx], fit=True), history.Y[idx], history.feasible[idx]
        C = history.C[idx] if history.C is not None else torch.zeros(len(idx), 0, dtype=DTYPE)
        rows = feas if int(feas.sum()) >= 2 else torch.ones_like(feas)
        skey = space_key(space)
        targets = self.prior_targets or list(range(Y.shape[1]))
        models = [self._gp(space, X[rows], Y[rows, j], target=targets[j], key=(skey, "objective", j))
                  for j in range(Y.shape[1])]
        constraint_targets = self.prior_constraint_targets or {}
        cons = []
        for j in range(C.shape[1]):
            if float(C[:, j].max() - C[:, j].min()) > 1e-9:
                models.append(self._gp(space, X, C[:, j], target=constraint_targets.get(j),
                                       key=(skey, "constraint", j)))
                cons.append(len(models) - 1)
        model = models[0] if len(models) == 1 else ModelListGP(*models)
        return model, X, Y, feas, cons

    def _inputs(self, X: torch.Tensor, fit: bool = False) -> torch.Tensor:
        """The GPs' inputs of the points `X n x d`: X itself, or during a proposal with chip features
        `n x (d + f)`: X and the logs of its derived chip's figures that vary among the training rows,
        scaled to [0, 1] over them (`fit=True` sets that scale from X, the training rows)."""
        if self._features is None:
            return X
        features = torch.log(self._features[0](X).clamp_min(1e-30))
        if fit:
            low, high = features.min(0).values, features.max(0).values
            columns = (high - low) > 1e-9 * high.abs().clamp_min(1.0)
            self._features = (self._features[0], columns, low[columns], (high - low)[columns])
        _, columns, low, span = self._features
        return torch.cat([X, (features[:, columns] - low) / span], dim=-1)

    def acquisition(self, space: DesignSpace, history: History, seed: int):
        start = time.perf_counter()
        model, X, Y, feas, cons = self.fit(space, history)
        self.last_fit_s_ = time.perf_counter() - start  # GP fit seconds of the latest proposal
        m = Y.shape[1]
        self._m, self._cons = m, cons
        self._best = float(Y[feas, 0].min()) if bool(feas.any()) else float(Y[:, 0].min())
        sampler = SobolQMCNormalSampler(sample_shape=torch.Size([self.mc_samples]), seed=seed % (2**31))
        constraints = [(lambda Z, j=j: Z[..., j]) for j in cons] or None
        if m == 1:
            return qLogNoisyExpectedImprovement(
                model=model, X_baseline=X, sampler=sampler, constraints=constraints, prune_baseline=True,
                objective=GenericMCObjective(lambda Z, X=None: -Z[..., 0]))
        Yf = Y[feas] if bool(feas.any()) else Y
        if self.ref_point is not None:
            ref = torch.tensor(self.ref_point, dtype=DTYPE)
        else:
            ref = Yf.max(0).values + 0.1 * (Yf.max(0).values - Yf.min(0).values).clamp_min(1e-3)
        return qLogNoisyExpectedHypervolumeImprovement(
            model=model, ref_point=(-ref).tolist(), X_baseline=X, sampler=sampler, constraints=constraints,
            objective=WeightedMCMultiOutputObjective(weights=-torch.ones(m, dtype=DTYPE), outcomes=list(range(m)),
                                                     num_outcomes=m + len(cons)),
            prune_baseline=True)

    # ------------------------------------------------------------------------------ candidates
    def _discrete_choices(self, space: DesignSpace) -> Optional[torch.Tensor]:
        """Known-feasible points of a fully discrete space, when the grid has at most `max_grid`
        points and at most `max_enumerate` of them are known-feasible (cached per space), else None."""
        key = space_key(space)
        if key not in self._enumerated:
            choices = None
            if space.size <= self.max_grid:
                grid = enumerate_space(space)
                keep = torch.cat([space.known_feasible(c) for c in grid.split(1 << 16)])
                if int(keep.sum()) <= self.max_enumerate:
                    choices = grid[keep]
            self._enumerated[key] = choices
        return self._enumerated[key]

    def propose(self, space: DesignSpace, history: History, q: int, seed: int) -> torch.Tensor:
        check_q(q)
        self.last_fit_s_ = 0.0
        n_init = self.n_init if self.n_init is not None else 2 * (space.dim + 1)
        if history.n < n_init:
            return SobolSearch().propose(space, history, min(q, n_init - history.n), seed)
        # BoTorch draws from torch's global generator where no seed reaches it (the samples that prune the
        # baseline of qLogNEI, the priors a failed GP fit restarts from): seeded here from `seed` and restored
        # after, a proposal is a function of (history, seed) alone, whatever the process ran before
        with torch_threads(self.num_threads), torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed % (2**63))
            return self._propose(space, history, q, seed)

    def _propose(self, space: DesignSpace, history: History, q: int, seed: int) -> torch.Tensor:
        choices = self._discrete_choices(space)
        self._features = self._feature_source(space) if choices is None and self.mixed == "candidates" else None
        try:
            return self._propose_from(space, history, q, seed, choices)
        finally:
            self._features = None

    def _feature_source(self, space: DesignSpace) -> Optional[tuple]:
        """The start of `_features` where the GPs take chip features on `space` (module docstring), else None."""
        features = getattr(space, "chip_features", None)
        if not self.chip_features or self.prior is not None or features is None:
            return None
        return None if features(torch.full((1, space.dim), 0.5, dtype=DTYPE)) is None else (features, None, None, None)

    def predictor(self, space: DesignSpace, X: torch.Tensor, y: torch.Tensor):
        """`predict(X' m x d) -> (mean m, variance m)`: the GP a proposal on the candidate set would fit to
        the designs `X n x d` with values `y n` (chip features included where they apply), to measure its
        predictions (`experiments/benchmarks/gp_features.py`)."""
        self._features = self._feature_source(space)
        try:
            gp = self._gp(space, self._inputs(X, fit=True), y)
            features = self._features
        finally:
            self._features = None

        def predict(Xq: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            self._features = features
            try:
                with torch.no_grad():
                    return marginals(gp, self._inputs(Xq))
            finally:
                self._features = None
        return predict

    def _propose_from(self, space: DesignSpace, history: History, q: int, seed: int,
                      choices: Optional[torch.Tensor]) -> torch.Tensor:
        acqf = self.acquisition(space, history, seed)
        if choices is None and self.mixed == "alternating":
            return optimize_mixed(space, history, acqf, q, seed, self.num_restarts, self.raw_samples,
                                  self.maxiter_alternating)
        if choices is None:  # a candidate set: the likely feasible ones (at least q) go on
            choices = candidate_set(space, history, self.n_local, self.n_global, self.centres, seed,
                                    tuple(self.scales) if self.scales else SCALES)
            if choices.shape[0] == 0:
                return SobolSearch().propose(space, history, q, seed)
            choices = self._inputs(choices)
            choices = choices[self._screen(acqf, choices, likely=q, keep=self.candidate_screen)]
        else:
            choices = choices[~torch.isin(grid_ids(space, choices), grid_ids(space, history.X))]
            if choices.shape[0] == 0:  # every design verified
                return SobolSearch().propose(space, history, q, seed)
            if choices.shape[0] > self.screen:
                choices = choices[self._screen(acqf, choices)]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", OptimizationWarning)
            # qLogNEI's note where the joint posterior of baseline and candidates is too ill-conditioned for its
            # low-rank update (near-duplicate inputs): BoTorch then samples it in full, nothing is lost
            warnings.filterwarnings("ignore", message="Low-rank cholesky updates failed")
            X, _ = optimize_acqf_discrete(acqf, q=min(q, choices.shape[0]), choices=choices,
                                          max_batch_size=1024, unique=True)
        return X[:, :space.dim]  # without the chip features

    def _screen(self, acqf, choices: torch.Tensor, likely: int = 0, keep: Optional[int] = None) -> torch.Tensor:
        """Indices of the `keep` (default `screen`) most promising choices by the analytic screen (module docstring).
        With `likely` > 0, only the choices whose modelled probability of feasibility is at least
        `min_feasibility` (or the `likely` most probable, where fewer are).

        The objectives' score is computed for every choice; the constraint terms (log probabilities,
        <= 0) only in blocks of choices in decreasing order of that score, stopping once the next
        block's objective score is below the `keep`-th best full score: no later choice can then
        enter the top (the same choices as scoring all, at a fraction of the constraint GPs' cost)."""
        models = acqf.model.models if isinstance(acqf.model, ModelListGP) else [acqf.model]
        m, cons, best, k = self._m, self._cons, self._best, min(keep or self.screen, choices.shape[0])
        with torch.no_grad():
            stats = [marginals(gp, choices) for gp in models[:m]]
            mean = torch.stack([s[0] for s in stats], -1)
            std = torch.stack([s[1] for s in stats], -1).clamp_min(1e-12).sqrt()
            if m == 1:
                z = (best - mean[:, 0]) / std[:, 0]  # minimization: improvement below the best
                base = log_ei(z) + torch.log(std[:, 0])
            else:
                base = -(mean - 2.0 * std).sum(-1)
            if not cons:
                return torch.topk(base, k).indices
            order = torch.argsort(base, descending=True)
            score = torch.full_like(base, -math.inf)
            done, threshold = 0, -math.inf
            while done < order.numel() and (done < k or float(base[order[done]]) >= threshold):
                idx = order[done:done + max(k, SCREEN_BLOCK)]
                log_pof = torch.zeros(idx.numel(), dtype=base.dtype)
                for j in cons:
                    mean_j, var_j = marginals(models[j], choices[idx])
                    log_pof = log_pof + torch.special.log_ndtr(-mean_j / var_j.clamp_min(1e-12).sqrt())
                score[idx] = base[idx] + log_pof
                if likely:  # below min_feasibility a choice ranks after every likelier one
                    score[idx] -= LIKELY_PENALTY * (log_pof < math.log(self.min_feasibility))
                done += idx.numel()
                if done >= k:
                    threshold = float(torch.topk(score, k).values[-1])
            self.last_screen_constraint_rows_ = done  # choices whose constraint terms were computed
        top = torch.topk(score, k)
        if likely:
            return top.indices[: max(likely, int((top.values > -LIKELY_PENALTY / 2).sum()))]
        return top.indices
