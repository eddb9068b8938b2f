"""Objectives: logs of the model's outputs, feasibility under a power cap, outcome constraints."""

import pytest
import torch

from analytical.specs import SpecError
from deepflow.run.objectives import OBJECTIVES, make_objective
from tests.deepflow.optspaces import small_mapping_space


@pytest.fixture(scope="module")
def evaluated():
    torch.set_num_threads(1)
    space = small_mapping_space()
    X = space.sample(64, seed=3)
    return space, X, space.evaluate(X), space.to_batch(X)


def test_bad_name_names_the_field():
    with pytest.raises(SpecError, match=r"objective\.name.*step_time"):
        make_objective("throughput")
    with pytest.raises(SpecError, match="power_cap_w"):
        make_objective("step_time", power_cap_w=500.0)
    with pytest.raises(SpecError, match="power_cap_w"):
        make_objective("time_at_power_cap", power_cap_w=-1.0)


def test_step_time_is_log_and_feasibility_is_the_models(evaluated):
    space, X, result, designs = evaluated
    Y, feasible = make_objective("step_time")(result, designs)
    assert Y.shape == (64, 1)
    assert torch.allclose(Y[:, 0], torch.log(result.step_time_s))
    assert torch.equal(feasible, result.feasible)
    assert bool((~feasible).any()) and bool(feasible.any())  # the sample has both kinds


def test_per_token_objectives_count_every_token_of_the_step(evaluated):
    space, X, result, designs = evaluated
    Y, feasible = make_objective("time_per_token")(result, designs)
    assert torch.allclose(Y[:, 0], -torch.log(result.tokens_per_s))
    assert torch.equal(feasible, result.feasible)
    Y, _ = make_objective("energy_per_token")(result, designs)
    assert torch.allclose(Y[:, 0], torch.log(result.energy_per_token_j))
    assert make_objective("time_per_token").outcome_names == ["log_time_per_token_s"]


def test_fusing_jobs_lowers_the_time_per_token_but_not_the_step_time():
    """The case the per-token objectives exist for: B fused jobs take a longer step for B times the images."""
    from deepflow.config import compose_config, space_from_config

    space = space_from_config(compose_config(["experiment=hfta-resnet18-sweep"], config_name="optimize"))
    u = torch.tensor([[0.0, 0.75], [1.0, 0.75]], dtype=torch.float64)  # fused_jobs 1 and 64, fp16
    assert space.to_batch(u).fused_jobs.tolist() == [1.0, 64.0]
    result = space.evaluate(u)
    step = make_objective("step_time").objectives(result)[:, 0]
    per_token = make_objective("time_per_token").objectives(result)[:, 0]
    assert step[1] > step[0] and per_token[1] < per_token[0]


def test_memory_constraint_matches_out_of_memory(evaluated):
    space, X, result, designs = evaluated
    objective = make_objective("step_time")
    C = objective.constraints(result, designs)
    assert C.shape == (64, len(objective.constraint_names))
    memory = C[:, objective.constraint_names.index("memory")]
    oom = result.reason == 12
    assert bool((memory[oom] > 0).all()) and bool((memory[result.feasible] <= 0).all())


def test_power_cap_feasibility_and_two_objectives(evaluated):
    space, X, result, designs = evaluated
    cap = float(result.avg_power_w[result.feasible].median())
    objective = make_objective("time_at_power_cap", power_cap_w=cap)
    Y, feasible = objective(result, designs)
    assert bool((result.avg_power_w[feasible] <= cap).all())
    assert 0 < int(feasible.sum()) < int(result.feasible.sum())
    power = objective.constraints(result, designs)[:, objective.constraint_names.index("power")]
    assert torch.equal(power <= 0, result.avg_power_w <= cap)
    Y2, _ = make_objective("time_energy")(result, designs)
    assert Y2.shape == (64, 2) and torch.allclose(Y2[:, 1], torch.log(result.energy_j))
    assert set(OBJECTIVES) == {"step_time", "energy", "time_at_power_cap", "time_energy", "time_per_token",
                               "energy_per_token"}
