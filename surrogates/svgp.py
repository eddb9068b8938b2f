"""Scalable Gaussian process: a stochastic variational GP (Hensman et al. 2013) for n >= 1e4.

A GPyTorch `ApproximateGP` with `m` inducing points whose locations are learned
(`VariationalStrategy(learn_inducing_locations=True)`), a Cholesky variational distribution and a
Matern-5/2 ARD kernel. Multi-output targets are independent GPs fused into one model with batch
shape `t` (one set of inducing points, kernel and noise per output), trained together by minibatch
Adam on the variational ELBO, so each step costs O(B m^2 + m^3) whatever n is.

Inputs are rescaled to [0, 1] by the training range and targets standardized per output; both
transforms are stored in the state. `predict` returns the predictive distribution of a new
observation (the learned Gaussian noise included). Everything runs in float64.
"""

from __future__ import annotations

import math
import time

import gpytorch
import torch
from gpytorch.models import ApproximateGP
from gpytorch.variational import CholeskyVariationalDistribution, VariationalStrategy

from surrogates.base import DTYPE, BaseSurrogate, check_float, check_int, seeded
from surrogates.fused import cosine_factor


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


class SVGP(BaseSurrogate):
    """Variational GP over `X: n x d` unit-cube points and `Y: n x t` targets.

    Args:
        num_inducing: inducing points per output (m).
        epochs: passes over the training data.
        batch_size: minibatch size of the ELBO's data term.
        lr: Adam learning rate (cosine-annealed to lr / 10 over the epochs, or over those that fit
            in `max_seconds` as estimated after the first).
        max_seconds: stop training after this wall time, whatever `epochs` says (None: no limit).
        predict_chunk: test points per forward call at predict.
        seed: inducing-point initialisation and minibatch order.
    """

    def __init__(self, num_inducing: int = 512, epochs: int = 30, batch_size: int = 1024, lr: float = 0.01,
                 max_seconds: float | None = None, predict_chunk: int = 8192, seed: int = 0):
        self.num_inducing = num_inducing
        self.epochs = epochs
        self.batch_size = batch_size
        self.lr = lr
        self.max_seconds = max_seconds
        self.predict_chunk = predict_chunk
        self.seed = seed

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

    def _build(self, inducing: torch.Tensor) -> None:
        self.gp_ = _BatchSVGP(inducing).to(DTYPE)
        self.likelihood_ = gpytorch.likelihoods.GaussianLikelihood(batch_shape=torch.Size([inducing.shape[0]])).to(DTYPE)

    def _fit(self, X: torch.Tensor, Y: torch.Tensor) -> None:
        n, t = Y.shape
        gen = seeded(self.seed)
        self.x_low_ = X.min(0).values
        self.x_range_ = (X.max(0).values - self.x_low_).clamp_min(1e-12)
        self.y_mean_ = Y.mean(0)
        self.y_std_ = Y.std(0).clamp_min(1e-12) if n > 1 else torch.ones(t, dtype=DTYPE)
        Xs, Ys = self._scale_x(X), (Y - self.y_mean_) / self.y_std_
        m = min(self.num_inducing, n)
        inducing = Xs[torch.randperm(n, generator=gen)[:m]].unsqueeze(0).repeat(t, 1, 1).contiguous()
        self._build(inducing)
        self.gp_.covar_module.base_kernel.lengthscale = 0.3 * math.sqrt(X.shape[1])
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

    def _scale_x(self, X: torch.Tensor) -> torch.Tensor:
        return (X - self.x_low_) / self.x_range_

    def _predict(self, X: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        Xs = self._scale_x(X)
        means, variances = [], []
        with torch.no_grad():
            for start in range(0, X.shape[0], self.predict_chunk):
                pred = self.likelihood_(self.gp_(Xs[start:start + self.predict_chunk]))
                means.append(pred.mean.T)
                variances.append(pred.variance.T)
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
        inducing = state["gp.variational_strategy.inducing_points"].to(DTYPE)
        self._build(torch.zeros_like(inducing))
        self.gp_.load_state_dict({k[3:]: v for k, v in state.items() if k.startswith("gp.")})
        self.likelihood_.load_state_dict({k[11:]: v for k, v in state.items() if k.startswith("likelihood.")})
        self.gp_.eval(), self.likelihood_.eval()
