"""BO's candidate sets on spaces too large to enumerate (deepflow/strategies/candidates.py) and the
co-design default they serve: known-feasible, new, reproducible, resumable, checked options."""

from __future__ import annotations

import pytest
import torch

from analytical.specs import SpecError
from deepflow.config import compose_config
from deepflow.presets import ConfigError
from deepflow.run.job import CONFIG_NAME, prepare
from deepflow.run.loop import run
from deepflow.strategies import make_strategy
from deepflow.strategies.base import History, design_keys
from deepflow.strategies.candidates import candidate_set, centre_rows, local_moves
from deepflow.strategies.space_grid import snap
from tests.deepflow.optspaces import one_thread, unit_square_space  # noqa: F401 (fixture)


def job(experiment: str, *overrides: str):
    argv = [f"experiment={experiment}", *overrides]
    return prepare(compose_config(argv, CONFIG_NAME), argv)


def test_candidates_are_known_feasible_new_distinct_and_seeded():
    """On the flat co-design space (implied splits, mapping rules): every candidate breaks no known
    constraint, repeats no verified design and no other candidate; the same seed gives the same set."""
    codesign = job("llama3-70b-n5-codesign")
    space, objective = codesign.space, codesign.objective
    history = run(space, objective, make_strategy("random"), 12, q=4, seed=3)
    first = candidate_set(space, history, 512, 128, 4, seed=5)
    assert first.shape[0] > 100 and first.shape[1] == space.dim
    assert bool(space.known_feasible(first).all())
    keys = design_keys(space, first)
    assert len(set(keys)) == len(keys) and not set(keys) & set(design_keys(space, history.X))
    assert torch.equal(first, candidate_set(space, history, 512, 128, 4, seed=5))
    assert not torch.equal(first, candidate_set(space, history, 512, 128, 4, seed=6))


def test_local_moves_stay_near_their_centre_and_on_the_grid():
    square = unit_square_space()
    centre = torch.full((1, 2), 0.5, dtype=torch.float64)
    moves = local_moves(square, centre, 2000, torch.Generator().manual_seed(0))
    assert bool(((moves >= 0) & (moves <= 1)).all())
    distance = (moves - centre).abs().max(-1).values
    assert float(distance.median()) < 0.15 and float(distance.max()) > 0.3  # mostly local, some long steps
    assert float((distance < 0.03).float().mean()) > 0.1  # the finest scale is tried too
    codesign = job("llama3-70b-n5-codesign").space
    u = snap(codesign, codesign.sample(1, seed=0))
    moves = local_moves(codesign, u, 500, torch.Generator().manual_seed(1))
    discrete = [i for i, p in enumerate(codesign.parameters) if p.cardinality != float("inf")]
    bins = torch.tensor([codesign.parameters[i].cardinality for i in discrete], dtype=torch.float64)
    centres = (torch.floor(moves[:, discrete] * bins) + 0.5) / bins
    assert torch.allclose(moves[:, discrete], centres)  # moved from a bin centre to a bin centre


def test_centres_are_the_best_feasible_rows():
    X = torch.rand(5, 2, dtype=torch.float64)
    Y = torch.tensor([[3.0], [1.0], [0.5], [2.0], [4.0]], dtype=torch.float64)
    feasible = torch.tensor([True, True, False, True, True])
    history = History(X=X, Y=Y, feasible=feasible)
    assert centre_rows(history, 2).tolist() == [1, 3]  # 0.5 is infeasible
    two = History(X=X, Y=torch.cat([Y, -Y], -1), feasible=feasible)
    assert set(centre_rows(two, 10).tolist()) == {0, 1, 3, 4}  # all non-dominated (one objective is the other negated)


def test_default_codesign_bo_is_reproducible_resumable_and_known_feasible():
    """The co-design experiments' strategy=bo on the hierarchical space, at a small size: the same seed
    proposes the same designs, a run resumed from the history of a killed one proposes what the
    uninterrupted run did, and no proposal breaks a known constraint."""
    hierarchical = job("mixtral-8x7b-n3-codesign", "strategy.n_init=8")
    space, objective = hierarchical.space, hierarchical.objective
    whole = run(space, objective, hierarchical.make_strategy(), 16, q=4, seed=7)
    again = run(space, objective, hierarchical.make_strategy(), 16, q=4, seed=7)
    assert torch.equal(whole.X, again.X)
    killed = run(space, objective, hierarchical.make_strategy(), 12, q=4, seed=7)
    resumed = run(space, objective, hierarchical.make_strategy(), 16, q=4, seed=7, history=killed)
    assert torch.equal(whole.X, resumed.X) and torch.equal(whole.Y, resumed.Y)
    assert bool(space.known_feasible(whole.X).all())
    assert len(set(design_keys(space, whole.X))) == 16


def test_a_bo_proposal_neither_reads_nor_moves_the_global_generator():
    """BoTorch samples from torch's global generator where no seed reaches it (qLogNEI's pruning of its
    baseline, the priors a failed GP fit restarts from), so a proposal depended on what the process had
    drawn before: seed 3 of the MoE experiment ended at 1.029, 1.042 or 1.054 s from run to run. The
    strategy seeds the generator from its own seed for each proposal and restores the caller's state."""
    moe = job("mixtral-8x7b-n3-codesign", "strategy.n_init=8")
    history = run(moe.space, moe.objective, make_strategy("random"), 12, q=4, seed=7)
    strategy = moe.make_strategy()
    proposals = []
    for global_seed in (0, 1):
        torch.manual_seed(global_seed)
        state = torch.get_rng_state()
        proposals.append(strategy.propose(moe.space, history, 4, seed=11))
        assert torch.equal(torch.get_rng_state(), state)  # the caller's draws are untouched
    assert torch.equal(*proposals)


def test_chip_features_are_the_derived_chips_figures():
    """What the GPs take beside the point on a chip space: the derived chip's peak, memory, links and
    units, the same on the flat and the hierarchical (outer) space; nothing on a space without a chip."""
    from analytical.chip.derive import derive
    from analytical.space import CHIP_FEATURES

    flat, outer = job("llama3-70b-n5-codesign").space, job("llama3-70b-n5-hierarchical").space
    u = flat.sample(8, seed=2)
    features = flat.chip_features(u)
    derived = derive(flat.chip_batch(u))
    assert features.shape == (8, len(CHIP_FEATURES)) and bool((features > 0).all())
    assert torch.equal(features[:, CHIP_FEATURES.index("hbm_bytes")], derived.accelerator["hbm_bytes"])
    shared = [flat.names.index(n) for n in outer.names]
    assert torch.equal(outer.chip_features(u[:, shared]), features)
    assert unit_square_space().chip_features(torch.rand(3, 2, dtype=torch.float64)) is None


def test_bo_with_chip_features_proposes_points_of_the_space_and_uses_them():
    """With chip features (the default) the GPs are fitted on d + f inputs, yet every proposal is a
    known-feasible point of the d-dimensional space; with `chip_features=false` the same history and seed
    give other proposals (so the features reach the choice)."""
    moe = job("mixtral-8x7b-n3-codesign", "strategy.n_init=8")
    history = run(moe.space, moe.objective, make_strategy("random"), 12, q=4, seed=7)
    strategy = moe.make_strategy()
    widths, fit = [], strategy.fit

    def fit_and_record(space, h):
        out = fit(space, h)
        widths.append(out[1].shape[-1])  # the training inputs' columns
        return out

    strategy.fit = fit_and_record
    with_features = strategy.propose(moe.space, history, 4, seed=11)
    assert widths and widths[0] > moe.space.dim  # the training inputs carried the features
    assert with_features.shape == (4, moe.space.dim) and bool(moe.space.known_feasible(with_features).all())
    assert strategy._features is None  # a proposal leaves no feature scale behind
    without = job("mixtral-8x7b-n3-codesign", "strategy.n_init=8", "strategy.chip_features=false").make_strategy()
    plain = without.propose(moe.space, history, 4, seed=11)
    assert plain.shape == with_features.shape and not torch.equal(plain, with_features)


def test_bad_candidate_options_name_the_field_and_the_allowed_values():
    with pytest.raises(SpecError, match=r"strategy\[bo\]\.mixed = 'anneal'.*candidates or alternating"):
        make_strategy("bo", mixed="anneal")
    with pytest.raises(SpecError, match=r"strategy\[bo\]\.min_feasibility.*\(0, 1\]"):
        make_strategy("bo", min_feasibility=1.5)
    with pytest.raises(SpecError, match=r"strategy\[bo\]\.n_local.*integer >= 1"):
        make_strategy("bo", n_local=0)
    with pytest.raises(ConfigError, match=r"^strategy\.centres = 0 is invalid: allowed an integer >= 1$"):
        job("llama3-70b-n5-hierarchical", "strategy.centres=0")
    with pytest.raises(SpecError, match=r"strategy\[bo\]\.chip_features = 'yes'.*true or false"):
        make_strategy("bo", chip_features="yes")
