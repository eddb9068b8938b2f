"""Scalable Gaussian process: a stochastic variational GP (Hensman et al. 2013) for n >= 1e4.

A GPyTorch `ApproximateGP` with `m` inducing points whose locations are learned
(`VariationalStrategy(learn_inducing_locations=True)`), a Cholesky variational distribution and a
Matern-5/2 ARD kernel. Multi-output targets are independent GPs fused into one model with batch
shape `t` (one set of inducing points, kernel and noise per output), trained together by minibatch
Adam on the variational ELBO, so each step costs O(B m^2 + m^3) whatever n is.

Inputs: with `discrete_dims` the coordinates of discrete parameters are snapped to their bin
centres and with `one_hot_dims` categorical ones become indicator columns (`surrogates.inputs`, as
in `MLPEnsemble`); the encoded inputs are then rescaled to [0, 1] by the training range (a column
constant in training keeps unit range) and targets standardized per output; both transforms are
stored in the state. Everything runs in float64.

Prediction: `predict` returns the predictive distribution of a new observation (the learned Gaussian
noise included). Going through gpytorch's `VariationalStrategy` costs tens of ms per call whatever
the batch (lazy tensors, the kernel over inducing and test points together), so after `fit` and
`load` the terms that do not depend on the test point are cached. gpytorch 1.15 whitens: with
`L = chol(K_zz + jitter I)` and `q(v) = N(m, S)` over `u = L v`,

    mean(x) = mu0 + K_xz alpha,                    alpha = L^-T m                  (t x m)
    var(x)  = k_xx + jitter + diag(K_xz A K_zx) + noise,   A = L^-T (S - I) L^-1   (t x m x m)

(`VariationalStrategy.forward` and `_compute_predictive_updates`, the same jitter on `K_zz` and on
`k_xx`), and the Matern-5/2 kernel is evaluated directly, so one query is two small matmuls.
"""

from __future__ import annotations

import math
import time
from typing import Sequence

import gpytorch
import torch
from gpytorch.models import ApproximateGP
from gpytorch.variational import CholeskyVariationalDistribution, VariationalStrategy
from linear_operator.utils.cholesky import psd_safe_cholesky

from analytical.specs import SpecError
from surrogates.inputs import check_columns_fit, check_dims, encoded_width, one_hot, snap_to_bins, unit_scale
from surrogates.models.base import DTYPE, BaseSurrogate, check_float, check_int, seeded
from surrogates.models.fused import cosine_factor

SQRT5 = math.sqrt(5.0)


class _BatchSVGP(ApproximateGP):
    """Independent SVGPs, one per output: inducing points `t x m x d`."""

    def __init__(self, inducing_points: torch.Tensor):
        t, m, d = inducing_points.shape
        batch = torch.Size([t])
        distribution = CholeskyVariationalDistribution(m, batch_shape=batch)
        strategy = VariationalStrategy(self, inducing_points, distribution, learn_inducing_locations=True)
        super().__init__(strategy)
        self.mean_module = gpytorch.means.ConstantMean(batch_shape=batch)
        self.covar_module = gpytorch.kernels.ScaleKernel(
            gpytorch.kernels.MaternKernel(nu=2.5, ard_num_dims=d, batch_shape=batch), batch_shape=batch)

    def forward(self, x: torch.Tensor) -> gpytorch.distributions.MultivariateNormal:
        return gpytorch.distributions.MultivariateNormal(self.mean_module(x), self.covar_module(x))


def matern52(x1: torch.Tensor, x2: torch.Tensor) -> torch.Tensor:
    """`... x n1 x n2` Matern-5/2 correlation of inputs already divided by their length-scales
    (`... x n1 x d`, `... x n2 x d`); squared distances by one matmul, clamped as gpytorch does."""
    sq = (x1 @ x2.mT).mul_(-2.0).add_((x1 ** 2).sum(-1, keepdim=True)).add_((x2 ** 2).sum(-1).unsqueeze(-2))
    r = sq.clamp_min_(1e-30).sqrt_()  # in place: the n1 x n2 blocks dominate the cost of a batch
    decay = torch.exp(r * -SQRT5)
    return r.mul(5.0 / 3.0).add_(SQRT5).mul_(r).add_(1.0).mul_(decay)  # (1 + sqrt5 r + 5/3 r^2) exp(-sqrt5 r)


class SVGP(BaseSurrogate):
    """Variational GP over `X: n x d` unit-cube points and `Y: n x t` targets.

    Args:
        num_inducing: inducing points per output (m).
        epochs: passes over the training data.
        batch_size: minibatch size of the ELBO's data term.
        lr: Adam learning rate (cosine-annealed to lr / 10 over the epochs, or over those that fit
            in `max_seconds` as estimated after the first).
        max_seconds: stop training after this wall time, whatever `epochs` says (None: no limit).
        predict_chunk: test points per block at predict (the `t x chunk x m` kernel block: 1024
            rows keep it in cache, about twice the rows/s of 8192 on CPU).
        seed: inducing-point initialisation and minibatch order.
        discrete_dims: `[column, cardinality]` pairs of discrete parameters (log2, integer,
            categorical): the column is snapped to its bin centre before the GP.
        one_hot_dims: `[column, cardinality]` pairs of categorical parameters fed as `cardinality`
            indicator columns instead of one ordinal coordinate.
    """

    def __init__(self, num_inducing: int = 512, epochs: int = 30, batch_size: int = 1024, lr: float = 0.01,
                 max_seconds: float | None = None, predict_chunk: int = 1024, seed: int = 0,
                 discrete_dims: Sequence[Sequence[int]] = (), one_hot_dims: Sequence[Sequence[int]] = ()):
        self.num_inducing = num_inducing
        self.epochs = epochs
        self.batch_size = batch_size
        self.lr = lr
        self.max_seconds = max_seconds
        self.predict_chunk = predict_chunk
        self.seed = seed
        self.discrete_dims = discrete_dims
        self.one_hot_dims = one_hot_dims

    def _validate_params(self) -> None:
        where = type(self).__name__
        check_int(self.num_inducing, where, "num_inducing")
        check_int(self.epochs, where, "epochs")
        check_int(self.batch_size, where, "batch_size")
        check_float(self.lr, where, "lr", high=1.0)
        if self.max_seconds is not None:
            check_float(self.max_seconds, where, "max_seconds")
        check_int(self.predict_chunk, where, "predict_chunk")
        check_int(self.seed, where, "seed", minimum=0)
        self._discrete = check_dims(self.discrete_dims, where, "discrete_dims")
        self._one_hot = check_dims(self.one_hot_dims, where, "one_hot_dims")

    def _check_columns(self, d: int) -> None:
        check_columns_fit(self, d, discrete_dims=self._discrete, one_hot_dims=self._one_hot)

    def _build(self, inducing: torch.Tensor) -> None:
        self.gp_ = _BatchSVGP(inducing).to(DTYPE)
        self.likelihood_ = gpytorch.likelihoods.GaussianLikelihood(batch_shape=torch.Size([inducing.shape[0]])).to(DTYPE)

    def _fit(self, X: torch.Tensor, Y: torch.Tensor) -> None:
        n, t = Y.shape
        self._check_columns(X.shape[1])
        gen = seeded(self.seed)
        E = self._encode(X)
        self.x_low_ = E.min(0).values
        spread = E.max(0).values - self.x_low_
        self.x_range_ = unit_scale(spread)
        self.y_mean_ = Y.mean(0)
        self.y_std_ = Y.std(0).clamp_min(1e-12) if n > 1 else torch.ones(t, dtype=DTYPE)
        Xs, Ys = self._scale_x(X), (Y - self.y_mean_) / self.y_std_
        m = min(self.num_inducing, n)
        inducing = Xs[torch.randperm(n, generator=gen)[:m]].unsqueeze(0).repeat(t, 1, 1).contiguous()
        self._build(inducing)
        self.gp_.covar_module.base_kernel.lengthscale = 0.3 * math.sqrt(E.shape[1])
        self.likelihood_.noise = 1e-2
        self.gp_.train(), self.likelihood_.train()
        mll = gpytorch.mlls.VariationalELBO(self.likelihood_, self.gp_, num_data=n)
        params = list(self.gp_.parameters()) + list(self.likelihood_.parameters())
        optimizer = torch.optim.Adam(params, lr=self.lr)
        batch = min(self.batch_size, n)
        steps_per_epoch = math.ceil(n / batch)
        total_steps = [self.epochs * steps_per_epoch]  # shortened when max_seconds allows fewer epochs
        schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: cosine_factor(s, total_steps[0], 0.1))
        start = time.perf_counter()
        self.epochs_run_ = 0
        for _ in range(self.epochs):
            order = torch.randperm(n, generator=gen)
            for i in range(steps_per_epoch):
                idx = order[i * batch:(i + 1) * batch]
                optimizer.zero_grad(set_to_none=True)
                loss = -mll(self.gp_(Xs[idx]), Ys[idx].T).sum()
                loss.backward()
                optimizer.step()
                schedule.step()
            self.epochs_run_ += 1
            if self.epochs_run_ == 1 and self.max_seconds is not None:
                affordable = max(1, int(self.max_seconds / max(time.perf_counter() - start, 1e-9)))
                total_steps[0] = min(self.epochs, affordable) * steps_per_epoch
            if self.max_seconds is not None and time.perf_counter() - start > self.max_seconds:
                break
        self.gp_.eval(), self.likelihood_.eval()
        self._cache_predictive()

    def _encode(self, X: torch.Tensor) -> torch.Tensor:
        """`X: n x d` -> `n x d'`: discrete columns snapped, categorical ones one-hot."""
        return one_hot(snap_to_bins(X, self._discrete), self._one_hot)

    def _scale_x(self, X: torch.Tensor) -> torch.Tensor:
        return (self._encode(X) - self.x_low_) / self.x_range_

    @torch.no_grad()
    def _cache_predictive(self) -> None:
        """The test-point-free terms of the predictive distribution (module docstring), per output."""
        strategy = self.gp_.variational_strategy
        kernel = self.gp_.covar_module
        jitter = strategy.jitter_val
        Z = strategy.inducing_points  # t x m x d'
        t, m, d = Z.shape
        K_zz = kernel(Z).to_dense() + jitter * torch.eye(m, dtype=Z.dtype)
        L = psd_safe_cholesky(K_zz)
        q = strategy.variational_distribution
        mu, S = q.mean, q.covariance_matrix  # t x m, t x m x m (whitened)
        self.alpha_ = torch.linalg.solve_triangular(L.mT, mu.unsqueeze(-1), upper=True).squeeze(-1)
        P = torch.linalg.solve_triangular(L.mT, S - torch.eye(m, dtype=S.dtype), upper=True)  # L^-T (S - I)
        A = torch.linalg.solve_triangular(L.mT, P.mT, upper=True)  # L^-T (S - I) L^-1
        self.A_ = 0.5 * (A + A.mT)
        self.lengthscale_ = kernel.base_kernel.lengthscale.detach().clone()  # t x 1 x d'
        self.z_scaled_ = Z.detach() / self.lengthscale_
        self.outputscale_ = kernel.outputscale.detach().reshape(t, 1).clone()
        self.mean0_ = self.gp_.mean_module(Z[:, :1]).detach().reshape(t, 1)
        self.prior_var_ = self.outputscale_ + jitter + self.likelihood_.noise.detach().reshape(t, 1)

    def _moments(self, Xs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Predictive mean and variance `t x n` (standardized units) at scaled inputs `Xs: n x d'`."""
        K_xz = self.outputscale_.unsqueeze(-1) * matern52(Xs / self.lengthscale_, self.z_scaled_)  # t x n x m
        mean = self.mean0_ + (K_xz @ self.alpha_.unsqueeze(-1)).squeeze(-1)
        variance = self.prior_var_ + ((K_xz @ self.A_) * K_xz).sum(-1)
        return mean, variance

    def _predict(self, X: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        Xs = self._scale_x(X)
        means, variances = [], []
        with torch.no_grad():
            for start in range(0, X.shape[0], self.predict_chunk):
                mean, variance = self._moments(Xs[start:start + self.predict_chunk])
                means.append(mean.T)
                variances.append(variance.T)
        mean = torch.cat(means) * self.y_std_ + self.y_mean_
        std = torch.cat(variances).clamp_min(0.0).sqrt() * self.y_std_
        return mean, std

    def _state(self) -> dict[str, torch.Tensor]:
        state = {"x_low": self.x_low_, "x_range": self.x_range_, "y_mean": self.y_mean_, "y_std": self.y_std_}
        state.update({"gp." + k: v for k, v in self.gp_.state_dict().items()})
        state.update({"likelihood." + k: v for k, v in self.likelihood_.state_dict().items()})
        return state

    def _restore(self, state: dict[str, torch.Tensor]) -> None:
        self.x_low_, self.x_range_ = state["x_low"].to(DTYPE), state["x_range"].to(DTYPE)
        self.y_mean_, self.y_std_ = state["y_mean"].to(DTYPE), state["y_std"].to(DTYPE)
        self._check_columns(self.n_features_in_)
        inducing = state["gp.variational_strategy.inducing_points"].to(DTYPE)
        width = encoded_width(self.n_features_in_, self._one_hot)
        if inducing.shape[-1] != width or self.x_low_.shape != (width,):
            raise SpecError(f"{type(self).__name__}.load", "one_hot_dims", self.one_hot_dims,
                            f"the encoding the state was saved with ({inducing.shape[-1]} encoded columns)")
        self._build(torch.zeros_like(inducing))
        self.gp_.load_state_dict({k[3:]: v for k, v in state.items() if k.startswith("gp.")})
        self.likelihood_.load_state_dict({k[11:]: v for k, v in state.items() if k.startswith("likelihood.")})
        self.gp_.eval(), self.likelihood_.eval()
        self._cache_predictive()
