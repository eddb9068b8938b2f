"""Strategies: BO on a known test function, constraints, batches, the gradient baseline, names."""

import warnings

import pytest
import torch
from botorch.test_functions import Branin

from analytical.specs import SpecError
from deepflow.run.loop import run
from deepflow.run.objectives import make_objective
from deepflow.strategies import STRATEGIES, make_strategy
from deepflow.strategies.base import History, design_keys
from deepflow.strategies.gradient import finite_gradient
from tests.deepflow.optspaces import continuous_space, one_thread, small_mapping_space, unit_square_space  # noqa: F401 (fixture)

BRANIN = Branin()
BRANIN_OPT = 0.397887


def branin(u: torch.Tensor) -> torch.Tensor:
    """Branin on the unit square (domain [-5, 10] x [0, 15]), `n x 2` -> `n`."""
    lo, hi = BRANIN.bounds[0].to(u), BRANIN.bounds[1].to(u)
    return BRANIN(lo + u * (hi - lo))


def minimize_branin(strategy, budget: int, seed: int) -> float:
    space = unit_square_space()
    history = History.empty(2, 1)
    while history.n < budget:
        X = strategy.propose(space, history, min(2, budget - history.n), seed * 1000 + history.n)
        history = history.append(X, branin(X).unsqueeze(-1), torch.ones(X.shape[0], dtype=torch.bool))
    return float(history.Y.min())


def test_bo_finds_branin_optimum_and_beats_random():
    bo = [minimize_branin(make_strategy("bo", n_init=6, num_restarts=2, raw_samples=64), 24, s) for s in range(3)]
    rnd = [minimize_branin(make_strategy("random"), 24, s) for s in range(3)]
    assert max(bo) < BRANIN_OPT + 0.3  # every seed within 0.3 of the optimum (range of Branin: 0.4-308)
    assert sorted(bo)[1] < sorted(rnd)[1]  # median


def test_bad_strategy_names_the_field():
    with pytest.raises(SpecError, match=r"strategy\.name.*bo, random"):
        make_strategy("annealing")
    with pytest.raises(SpecError, match=r"strategy\[bo\]\.num_restarts"):
        make_strategy("bo", num_restarts=0)
    with pytest.raises(SpecError, match=r"strategy\[random\]\.params"):
        make_strategy("random", temperature=2.0)


@pytest.mark.parametrize("name", ["bo", "random", "sobol", "evolution"])
def test_batches_are_distinct_new_and_known_feasible(name):
    space = small_mapping_space()
    objective = make_objective("step_time")
    params = {"n_init": 6, "num_restarts": 2, "raw_samples": 64} if name == "bo" else {}
    if name == "evolution":
        params = {"population": 6}
    history = run(space, objective, make_strategy(name, **params), 9, q=3, seed=1)
    X = make_strategy(name, **params).propose(space, history, 4, 123)
    assert X.shape == (4, space.dim)
    keys = design_keys(space, X)
    assert len(set(keys)) == 4 and not set(keys) & set(design_keys(space, history.X))
    assert bool(space.known_feasible(X).all())


def test_constrained_bo_best_satisfies_the_power_cap():
    space = small_mapping_space()
    probe = space.evaluate(space.sample(256, seed=0))
    cap = float(probe.avg_power_w[probe.feasible].quantile(0.3))  # a cap most fast designs break
    objective = make_objective("time_at_power_cap", power_cap_w=cap)
    history = run(space, objective, make_strategy("bo", n_init=8, num_restarts=2, raw_samples=64), 16, q=2, seed=0)
    best = history.best_index()
    assert best is not None
    check = space.evaluate(history.X[best:best + 1])
    assert bool(check.feasible[0]) and float(check.avg_power_w[0]) <= cap
    # every verified row counted feasible satisfies the cap, and the BO part proposed known-feasible points
    result = space.evaluate(history.X)
    assert bool((result.avg_power_w[history.feasible] <= cap).all())
    assert bool(space.known_feasible(history.X).all())
    assert history.C.shape == (16, 3)


def test_gradient_baseline_decreases_the_objective():
    space = continuous_space()
    objective = make_objective("step_time")
    strategy = make_strategy("gradient", n_init=4, segment=100)
    history = run(space, objective, strategy, 16, q=1, seed=2)
    start = float(history.slice(4).best_so_far()[-1])
    assert float(history.best_so_far()[-1]) < start - 0.01
    g = strategy.gradient(space, history.X[:1])
    assert bool(torch.isfinite(g).all()) and float(g.abs().sum()) > 0
    with pytest.raises(SpecError, match=r"strategy\[gradient\]\.space"):
        strategy.propose(small_mapping_space(), run(small_mapping_space(), objective, make_strategy("random"), 4),
                         1, 0)


def test_a_non_finite_gradient_is_zeroed_with_a_warning_and_a_discrete_one_silently():
    grad = torch.tensor([[1.0, float("nan"), 2.0], [float("inf"), 3.0, float("nan")]], dtype=torch.float64)
    mask = torch.tensor([True, True, False])  # the last coordinate discrete
    with pytest.warns(RuntimeWarning, match="2 non-finite gradient entries in continuous coordinates"):
        g = finite_gradient(grad, mask)
    assert torch.equal(g, torch.tensor([[1.0, 0.0, 0.0], [0.0, 3.0, 0.0]], dtype=torch.float64))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a NaN in a discrete coordinate only is not a defect: no warning
        assert torch.equal(finite_gradient(grad[:1, [0, 2]], torch.tensor([True, False])),
                           torch.tensor([[1.0, 0.0]], dtype=torch.float64))


def test_registry_builds_every_strategy():
    for name in STRATEGIES:
        assert make_strategy(name).name == name


def test_hierarchical_best_mapping_matches_the_core_search():
    from analytical.search import best_mappings
    from analytical.space import DesignSpace, Parameter
    from deepflow.presets import load_preset
    from deepflow.run.hierarchical import BestMappingSpace
    from tests.deepflow.optspaces import template

    space = DesignSpace("test-hw", (Parameter("hbm_bw_bytes_per_s", "continuous", 1e12, 8e12, log=True),
                                    Parameter("tp", "log2", 1, 8)), template()).validate()
    outer = BestMappingSpace(space)
    assert outer.names == ["hbm_bw_bytes_per_s"]
    u = outer.encode({"hbm_bw_bytes_per_s": space.template.hbm_bw_bytes_per_s})
    mapping = load_preset("mapping", "gpt3-175b-1024")
    found = best_mappings(load_preset("hardware", "h100-sxm-80gb"), load_preset("system", "dgx-h100-superpod"),
                          load_preset("model", "gpt3-175b"), mapping.global_batch_size, top_k=1,
                          precision=mapping.precision, flash_attention=mapping.flash_attention)
    assert float(outer.evaluate(u).step_time_s[0]) == pytest.approx(found.rows[0]["step_time_s"], rel=1e-12)
    history = run(outer, make_objective("step_time"), make_strategy("random"), 3, q=3, seed=0)
    assert bool(history.feasible.all())


class ExactBranin:
    """A perfect 'surrogate' of Branin on the unit square with the surrogates' predict interface."""

    def predict(self, X, return_std=True):
        mean = branin(X).unsqueeze(-1)
        return mean, torch.zeros_like(mean)


def test_surrogate_prior_mean_warm_starts_the_gp():
    space = unit_square_space()
    X = space.sample(6, seed=0)
    history = History(X=X, Y=branin(X).unsqueeze(-1), feasible=torch.ones(6, dtype=torch.bool))
    test = space.sample(64, seed=1, method="random")
    errors = {}
    for prior in (None, ExactBranin()):
        model = make_strategy("bo", prior=prior).fit(space, history)[0]
        with torch.no_grad():
            errors[prior is None] = float((model.posterior(test).mean[:, 0] - branin(test)).abs().mean())
    assert errors[False] < 0.1 * errors[True]


def test_hamming_kernel_and_mixed_kernel_match_botorch():
    from botorch.models import MixedSingleTaskGP, SingleTaskGP
    from botorch.models.kernels.categorical import CategoricalKernel

    from deepflow.strategies.gp_parts import HammingKernel, mixed_kernel

    torch.manual_seed(0)
    a, b = CategoricalKernel(ard_num_dims=3).double(), HammingKernel(ard_num_dims=3).double()
    for k in (a, b):
        k.lengthscale = torch.tensor([[0.4, 1.0, 3.0]], dtype=torch.float64)
    x1, x2 = torch.randint(0, 3, (2, 7, 3)).double(), torch.randint(0, 3, (5, 3)).double()
    assert torch.allclose(a.forward(x1, x2), b.forward(x1, x2), rtol=0, atol=1e-14)
    assert torch.allclose(a.forward(x1, x1, diag=True), b.forward(x1, x1, diag=True), rtol=0, atol=1e-14)
    grads = [torch.autograd.grad(k.forward(x2, x2).sum(), k.raw_lengthscale)[0] for k in (a, b)]
    assert torch.allclose(*grads, rtol=1e-12, atol=1e-14) and float(grads[0].abs().sum()) > 0
    # the whole mixed kernel: MixedSingleTaskGP's, parameter for parameter
    X = torch.rand(20, 5, dtype=torch.float64)
    X[:, [1, 3]] = (torch.randint(0, 3, (20, 2)).double() + 0.5) / 3
    Y = torch.randn(20, 1, dtype=torch.float64)
    ref, fast = MixedSingleTaskGP(X, Y, cat_dims=[1, 3]), SingleTaskGP(X, Y, covar_module=mixed_kernel(5, [1, 3]))
    assert [n for n, _ in ref.named_parameters()] == [n for n, _ in fast.named_parameters()]
    with torch.no_grad():
        for (_, p), (_, q) in zip(ref.named_parameters(), fast.named_parameters()):
            value = torch.randn_like(p)
            p.copy_(value)
            q.copy_(value)
        Z = torch.rand(6, 5, dtype=torch.float64)
        assert torch.allclose(ref.covar_module(Z, X).to_dense(), fast.covar_module(Z, X).to_dense(), atol=1e-12)


def test_warm_start_starts_from_the_previous_fit_and_a_fresh_strategy_still_proposes():
    from gpytorch.mlls import ExactMarginalLogLikelihood

    space, objective = small_mapping_space(), make_objective("step_time")
    history = run(space, objective, make_strategy("random"), 30, q=30, seed=3)

    def mll(model):
        gp = model.models[0]
        gp.train()
        with torch.no_grad():
            value = float(ExactMarginalLogLikelihood(gp.likelihood, gp)(gp(*gp.train_inputs), gp.train_targets))
        gp.eval()
        return value

    warm = make_strategy("bo", n_init=6, warm_start=True, fit_maxiter_warm=1)
    first = mll(warm.fit(space, history.slice(29))[0])  # 75 iterations from the default init, stored
    assert {key[1:] for key in warm._hyperparameters} == {("objective", 0), ("constraint", 0)}
    again = mll(warm.fit(space, history.slice(29))[0])  # one iteration from the stored optimum
    cold = make_strategy("bo", n_init=6, fit_maxiter=1)  # the default: no warm start
    assert again >= first - 1e-6 > mll(cold.fit(space, history.slice(29))[0]) + 0.05
    assert not cold._hyperparameters
    for strategy in (warm, make_strategy("bo", n_init=6)):  # warm-started, and fresh (e.g. a resumed run)
        X = strategy.propose(space, history, 2, 5)
        keys = design_keys(space, X)
        assert X.shape == (2, space.dim) and len(set(keys)) == 2 and not set(keys) & set(design_keys(space, history.X))
        assert bool(space.known_feasible(X).all())
    with pytest.raises(SpecError, match=r"strategy\[bo\]\.warm_start"):
        make_strategy("bo", warm_start="yes")


def test_pruned_screen_keeps_the_same_choices_as_scoring_every_choice(monkeypatch):
    from deepflow.strategies import bo

    monkeypatch.setattr(bo, "SCREEN_BLOCK", 16)  # blocks of 16 choices, so that pruning happens here
    space, objective = small_mapping_space(), make_objective("step_time")
    history = run(space, objective, make_strategy("random"), 40, q=40, seed=4)
    strategy = make_strategy("bo", n_init=6, screen=16)
    acqf = strategy.acquisition(space, history, 0)
    choices = strategy._discrete_choices(space)
    kept = strategy._screen(acqf, choices)
    assert strategy._cons and strategy.last_screen_constraint_rows_ < choices.shape[0]
    with torch.no_grad():  # every choice scored in full
        stats = [bo.marginals(gp, choices) for gp in acqf.model.models]
        mean = torch.stack([s[0] for s in stats], -1)
        std = torch.stack([s[1] for s in stats], -1).clamp_min(1e-12).sqrt()
        score = bo.log_ei((strategy._best - mean[:, 0]) / std[:, 0]) + torch.log(std[:, 0])
        for j in strategy._cons:
            score = score + torch.special.log_ndtr(-mean[:, j] / std[:, j])
    assert set(kept.tolist()) == set(torch.topk(score, 16).indices.tolist())


class ModelledOutcomes:
    """A 'surrogate' that is the analytical model: columns [log step time, memory margin]."""

    def __init__(self, space, objective):
        self.space, self.objective = space, objective

    def predict(self, X, return_std=True):
        Y, _, C, _ = self.objective.evaluate(self.space, X)
        mean = torch.cat([Y, C[:, self.objective.modelled_constraints]], dim=-1)
        return mean, torch.zeros_like(mean)


def test_a_prior_that_learned_the_memory_margin_is_the_memory_constraints_prior_mean():
    """With `prior_constraint_targets`, the memory constraint's GP starts from the surrogate's margin."""
    space, objective = small_mapping_space(), make_objective("step_time")
    history = run(space, objective, make_strategy("random"), 12, q=12, seed=4)
    assert objective.constraint_names[objective.modelled_constraints[0]] == "memory"
    test = space.sample(64, seed=9)
    truth = objective.evaluate(space, test)[2][:, 0]
    errors = {}
    prior = ModelledOutcomes(space, objective)
    for targets in (None, {0: 1}):
        bo = make_strategy("bo", prior=prior, prior_targets=[0], prior_constraint_targets=targets)
        model, _, _, _, cons = bo.fit(space, history)
        assert cons, "the memory margin varies over the history, so it is modelled"
        with torch.no_grad():
            errors[targets is None] = float((model.posterior(test).mean[:, cons[0]] - truth).abs().mean())
    assert errors[False] < 0.2 * errors[True]
