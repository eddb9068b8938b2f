"""Fused MLP deep ensemble: one batched model holds every member, it recovers a known function
with calibrated uncertainty, mixes members correctly and survives a save/load round trip."""

from __future__ import annotations

import pytest
import torch

from analytical.specs import SpecError
from surrogates.inputs import encoded_width, one_hot, snap_to_bins
from surrogates.metrics import coverage
from surrogates.models.base import STATE_FILE
from surrogates.models.ensemble import (
    LOG_FEATURE_FLOOR,
    MLPEnsemble,
    beta_nll,
    check_log_features,
    gaussian_heads,
    laplace_nll,
    log_affine,
    log_features_of,
    member_moments,
    mix,
)
from surrogates.models.fused import FusedMLP, member_batches

SMALL = dict(n_members=4, hidden=(32, 32), batch_size=64, max_epochs=60, patience=60, lr=5e-3)


@pytest.fixture(scope="module")
def data(make_dataset):
    return make_dataset(400)


@pytest.fixture(scope="module")
def fitted(data):
    X, Y, _, _ = data
    return MLPEnsemble(**SMALL).fit(X, Y)


def test_recovers_a_known_function_with_calibrated_std(fitted, data):
    _, _, X_test, Y_test = data
    mean, std = fitted.predict(X_test, return_std=True)
    assert mean.shape == std.shape == (300, 2) and mean.dtype == std.dtype == torch.float64
    rmse = ((mean - Y_test) ** 2).mean(0).sqrt()
    assert (rmse < 0.15 * Y_test.std(0)).all(), rmse
    assert (coverage(Y_test, mean, std) > 0.8).all() and (std < 0.5 * Y_test.std(0)).all()
    assert torch.equal(fitted.predict(X_test), mean)


def test_members_are_one_fused_model_and_differ(fitted, data):
    _, _, X_test, _ = data
    assert isinstance(fitted.net_, FusedMLP)
    assert [tuple(w.shape) for w in fitted.net_.weights] == [(4, 3, 32), (4, 32, 32), (4, 32, 4)]
    means, _ = fitted._member_moments(X_test)
    assert means.shape == (4, 300, 2) and means.std(0).mean() > 1e-3  # independent inits and shuffles


def test_fused_forward_equals_each_member_alone():
    gen = torch.Generator().manual_seed(0)
    net = FusedMLP(3, 5, (7, 6), 2, generator=gen)
    x = torch.randn(3, 10, 5, generator=gen)
    out = net(x)
    for m in range(3):
        h = x[m]
        for i, (w, b) in enumerate(zip(net.weights, net.biases)):
            h = h @ w[m] + b[m]
            h = torch.nn.functional.silu(h) if i < 2 else h
        assert torch.allclose(out[m], h, atol=1e-6)


def test_each_member_gets_its_own_shuffle():
    idx = member_batches(100, 3, 32, torch.Generator().manual_seed(0))
    assert idx.shape == (3, 3, 32)  # steps x members x batch (the short last batch dropped)
    for m in range(3):
        assert idx[:, m].flatten().unique().numel() == 96
    assert not torch.equal(idx[:, 0], idx[:, 1])


def test_mixture_moments():
    means = torch.tensor([[[0.0]], [[2.0]]])
    variances = torch.tensor([[[1.0]], [[3.0]]])
    mean, std = mix(means, variances)
    assert mean.item() == pytest.approx(1.0)
    assert std.item() ** 2 == pytest.approx(2.0 + 1.0)  # mean of variances + variance of means


def test_beta_nll_is_the_gaussian_nll_at_beta_zero():
    out = torch.tensor([[[0.5, 0.0]]])  # mean 0.5, softplus(0) variance
    y = torch.tensor([[[1.5]]])
    _, var = gaussian_heads(out, 1)
    expected = -torch.distributions.Normal(0.5, var.sqrt()).log_prob(y) - 0.5 * torch.log(torch.tensor(2 * torch.pi))
    assert beta_nll(out, y, 0.0).item() == pytest.approx(expected.item(), rel=1e-5)
    assert beta_nll(out, y, 0.5).item() == pytest.approx(expected.item() * var.sqrt().item(), rel=1e-5)


def test_laplace_nll_and_moments():
    out = torch.tensor([[[0.5, 0.3]]])  # location 0.5, softplus(0.3) scale
    y = torch.tensor([[[1.5]]])
    loc, var = member_moments(out, 1, "laplace")
    b = torch.nn.functional.softplus(torch.tensor(0.3)).item()
    expected = -torch.distributions.Laplace(0.5, b).log_prob(y)
    assert laplace_nll(out, y, 0.0).item() == pytest.approx(expected.item(), rel=1e-5)
    assert laplace_nll(out, y, 0.5).item() == pytest.approx(expected.item() * (2 * b * b) ** 0.5, rel=1e-4)
    assert loc.item() == 0.5 and var.item() == pytest.approx(2 * b * b, rel=1e-5)  # a Laplace's variance
    assert torch.equal(member_moments(out, 1, "gaussian")[1], gaussian_heads(out, 1)[1])


def test_gaussian_likelihood_fits_too_loads_back_and_bad_likelihood_is_named(data, tmp_path):
    X, Y, X_test, Y_test = data
    model = MLPEnsemble(**SMALL, likelihood="gaussian", beta=0.5).fit(X, Y)
    mean, std = model.predict(X_test, return_std=True)
    assert (((mean - Y_test) ** 2).mean(0).sqrt() < 0.15 * Y_test.std(0)).all()
    assert (coverage(Y_test, mean, std) > 0.8).all()
    assert MLPEnsemble.load(model.save(tmp_path / "g")).likelihood == "gaussian"
    state = torch.load(tmp_path / "g" / STATE_FILE, weights_only=True)
    del state["likelihood"]  # a model saved before the option existed: Gaussian, whatever the default
    torch.save(state, tmp_path / "g" / STATE_FILE)
    old = MLPEnsemble.load(tmp_path / "g")
    assert old.likelihood == "gaussian" and torch.equal(old.predict(X_test, return_std=True)[1], std)
    with pytest.raises(SpecError, match=r"MLPEnsemble\.likelihood = 'normal'"):
        MLPEnsemble(likelihood="normal").fit(X, Y)


def test_same_seed_same_model(data):
    X, Y, X_test, _ = data
    a = MLPEnsemble(n_members=2, hidden=(8,), max_epochs=3, seed=3).fit(X[:100], Y[:100])
    b = MLPEnsemble(n_members=2, hidden=(8,), max_epochs=3, seed=3).fit(X[:100], Y[:100])
    assert torch.equal(a.predict(X_test), b.predict(X_test))


def test_save_load_round_trip(fitted, data, tmp_path):
    _, _, X_test, _ = data
    fitted.save(tmp_path)
    state = torch.load(tmp_path / STATE_FILE, weights_only=True)
    assert {"x_mean", "y_std", "std_scale", "net.weights.0"} <= set(state)
    loaded = MLPEnsemble.load(tmp_path)
    mean, std = fitted.predict(X_test, return_std=True)
    mean2, std2 = loaded.predict(X_test, return_std=True)
    assert torch.equal(mean2, mean) and torch.equal(std2, std)


def test_bad_input_is_named(fitted):
    with pytest.raises(SpecError, match=r"MLPEnsemble\.predict\.X = .*3 columns"):
        fitted.predict(torch.rand(2, 4, dtype=torch.float64))
    with pytest.raises(SpecError, match=r"MLPEnsemble\.fit\.X = '5 rows'"):
        MLPEnsemble().fit(torch.rand(5, 2, dtype=torch.float64), torch.rand(5, 1, dtype=torch.float64))


def binned_dataset(n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """`n x 3` points and `n x 1` targets that depend on the bin of column 0 (4 bins, a categorical
    whose codes are unordered) and of column 1 (3 ordered bins), and smoothly on column 2."""
    X = torch.rand(n, 3, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    cat = torch.floor(X[:, 0] * 4).clamp(max=3).long()
    level = torch.floor(X[:, 1] * 3).clamp(max=2)
    y = torch.tensor([0.0, 1.5, -1.0, 0.5], dtype=torch.float64)[cat] + 0.5 * level + torch.sin(3 * X[:, 2])
    return X, y.unsqueeze(-1)


def test_snap_and_one_hot_encode_what_the_space_decodes():
    X = torch.tensor([[0.10, 0.40, 0.7], [0.99, 0.01, 0.2]], dtype=torch.float64)
    snapped = snap_to_bins(X, [(0, 4), (1, 3)])
    assert torch.allclose(snapped, torch.tensor([[0.125, 0.5, 0.7], [0.875, 1 / 6, 0.2]], dtype=torch.float64))
    assert X[0, 0] == 0.10  # a copy
    beyond = torch.tensor([[1.125, -0.1, 0.5]], dtype=torch.float64)  # past the range: kept (extrapolation)
    assert torch.equal(snap_to_bins(beyond, [(0, 4), (1, 3)]), beyond)
    wide = one_hot(X, [(0, 4)])
    assert wide.shape == (2, encoded_width(3, [(0, 4)])) == (2, 6)
    assert wide[:, :4].tolist() == [[1, 0, 0, 0], [0, 0, 0, 1]] and torch.equal(wide[:, 4:], X[:, 1:])


def test_discrete_and_one_hot_options_fit_steps_and_survive_save_load(tmp_path):
    X, Y = binned_dataset(600, 0)
    X_test, Y_test = binned_dataset(300, 1)
    params = dict(n_members=3, hidden=(32, 32), batch_size=64, max_epochs=40, patience=40, lr=5e-3)
    model = MLPEnsemble(**params, discrete_dims=[[0, 4], [1, 3]], one_hot_dims=[[0, 4]]).fit(X, Y)
    assert [tuple(w.shape) for w in model.net_.weights][0] == (3, 6, 32)  # 4 indicators + 2 columns
    shifted = X_test.clone()
    shifted[:, :2] = snap_to_bins(X_test, [(0, 4), (1, 3)])[:, :2]  # same designs, bin centres
    mean = model.predict(X_test)
    assert torch.equal(model.predict(shifted), mean)  # within-bin offsets are ignored
    plain = MLPEnsemble(**params).fit(X, Y)
    rmse = ((mean - Y_test) ** 2).mean().sqrt()
    assert rmse < 0.1 * Y_test.std() and rmse < ((plain.predict(X_test) - Y_test) ** 2).mean().sqrt()
    model.save(tmp_path)
    assert torch.load(tmp_path / STATE_FILE, weights_only=True)["x_mean"].shape == (6,)
    loaded = MLPEnsemble.load(tmp_path)
    assert loaded.one_hot_dims == [[0, 4]] and loaded.discrete_dims == [[0, 4], [1, 3]]
    mean2, std2 = loaded.predict(X_test, return_std=True)
    assert torch.equal(mean2, mean) and torch.equal(std2, model.predict(X_test, return_std=True)[1])


@pytest.mark.parametrize("dims", [[[0, 1]], [[-1, 3]], [[0, 3], [0, 4]], [3], "0,3", [[0.5, 3]]])
def test_bad_dims_are_named(dims):
    with pytest.raises(SpecError, match=r"MLPEnsemble\.one_hot_dims"):
        MLPEnsemble(one_hot_dims=dims).fit(torch.rand(50, 2, dtype=torch.float64), torch.rand(50, 1, dtype=torch.float64))
    with pytest.raises(SpecError, match=r"MLPEnsemble\.discrete_dims = .*columns < d = 2"):
        MLPEnsemble(discrete_dims=[[2, 3]]).fit(torch.rand(50, 2, dtype=torch.float64), torch.rand(50, 1, dtype=torch.float64))


def test_log_features_of_a_space_are_its_budgets_and_implied_splits():
    from analytical.space import Parameter

    params = [Parameter("tp", "log2", 1, 8), Parameter("power_budget_w", "continuous", 300, 1200),
              Parameter("power_compute_fraction", "continuous", 0.5, 0.9),
              Parameter("power_memory_fraction", "continuous", 0.05, 0.4),
              Parameter("die_area_mm2", "continuous", 300, 858, log=True)]  # already log in u: no feature
    features = log_features_of(params)
    assert len(features) == 4  # power budget, two fractions, the implied power_network_fraction
    U = torch.tensor([[0.5, 0.25, 0.5, 0.0, 0.3], [0.5, 1.0, 1.0, 1.0, 0.3]], dtype=torch.float64)
    values = log_affine(U, check_log_features(features, "t", "log_features")).exp()
    assert torch.allclose(values[0], torch.tensor([525.0, 0.7, 0.05, 1 - 0.7 - 0.05], dtype=torch.float64))
    assert values[1, 3].item() == pytest.approx(LOG_FEATURE_FLOOR)  # 1 - 0.9 - 0.4 < 0: floored


def test_log_features_widen_the_input_and_survive_save_load(data, tmp_path):
    X, Y, X_test, _ = data
    features = [[0.1, [[0, 1.0]]], [1.0, [[0, -0.5], [2, -0.4]]]]
    model = MLPEnsemble(n_members=2, hidden=(8,), max_epochs=3, log_features=features).fit(X, Y)
    assert tuple(model.net_.weights[0].shape) == (2, 5, 8)  # 3 columns + 2 log features
    loaded = MLPEnsemble.load(model.save(tmp_path))
    assert torch.equal(loaded.predict(X_test), model.predict(X_test))
    for bad in ([[0.1, [[5, 1.0]]]], [[0.1, [[0, "x"]]]], [0.1], "log"):
        with pytest.raises(SpecError, match=r"MLPEnsemble\.log_features"):
            MLPEnsemble(log_features=bad).fit(X, Y)


def test_training_gives_the_ensemble_the_log_features_of_the_space():
    from analytical.space import Parameter
    from surrogates.columns import DesignColumns
    from surrogates.training import make_surrogate

    params = [Parameter("tp", "log2", 1, 8), Parameter("power_budget_w", "continuous", 300, 1200)]
    model = make_surrogate("mlp_ensemble", {}, DesignColumns(params))
    assert model.log_features == log_features_of(params) and len(model.log_features) == 1
    assert make_surrogate("mlp_ensemble", {"log_features": []}, DesignColumns(params)).log_features == ()


def test_a_column_constant_in_training_keeps_unit_scale():
    # category 3 of column 0 never appears in training: its one-hot column is constant (all 0)
    X = torch.rand(200, 2, dtype=torch.float64) * torch.tensor([0.74, 1.0], dtype=torch.float64)
    Y = X.sum(-1, keepdim=True)
    model = MLPEnsemble(n_members=2, hidden=(8,), max_epochs=3, one_hot_dims=[[0, 4]]).fit(X, Y)
    assert float(model.x_std_.min()) == 1.0 or float(model.x_std_.min()) > 1e-3
    unseen = torch.tensor([[0.9, 0.5]], dtype=torch.float64)
    mean, std = model.predict(unseen, return_std=True)
    assert torch.isfinite(mean).all() and float(mean.abs().max()) < 1e3
