"""The parts BO's GPs are built from: the mixed-space kernel (RBF x Hamming), a surrogate as
the prior mean, posterior marginals in chunks, and the log expected improvement."""

from __future__ import annotations

import torch
from botorch.models.kernels.categorical import CategoricalKernel
from botorch.models.utils.gpytorch_modules import get_covar_module_with_dim_scaled_prior
from gpytorch.constraints import GreaterThan
from gpytorch.kernels import Kernel, ScaleKernel
from gpytorch.means import Mean

from analytical.codes import DTYPE

NOISE_FRACTION = 1.1e-6  # fixed train_Yvar / outcome variance: noise-free (gpytorch floors noise at 1e-6)


def hyperparameters(model) -> dict[str, torch.nn.Parameter]:
    """`{name: parameter}` of a GP's own hyperparameters (not those of a surrogate prior mean)."""
    return {name: p for name, p in model.named_parameters() if ".surrogate." not in name}


def marginals(gp, X: torch.Tensor, chunk: int = 1024) -> tuple[torch.Tensor, torch.Tensor]:
    """`(mean n, variance n)` of a fitted single-output exact GP at `X n x d`, on the outcome scale:
    the textbook predictive equations with one Cholesky of the training covariance (the marginals
    only, which BoTorch's posterior would compute through the full joint covariance)."""
    from linear_operator.utils.cholesky import psd_safe_cholesky

    Xt, yt = gp.train_inputs[0], gp.train_targets
    K = gp.covar_module(Xt).to_dense() + torch.diag_embed(gp.likelihood.noise.expand(yt.shape))
    L = psd_safe_cholesky(K)
    alpha = torch.cholesky_solve((yt - gp.mean_module(Xt)).unsqueeze(-1), L)
    means, variances = [], []
    for part in X.split(chunk):
        cross = gp.covar_module(part, Xt).to_dense()
        means.append(gp.mean_module(part) + (cross @ alpha).squeeze(-1))
        v = torch.linalg.solve_triangular(L, cross.transpose(-1, -2), upper=False)
        prior_var = gp.covar_module(part.unsqueeze(-2), part.unsqueeze(-2)).to_dense()[..., 0, 0]  # n 1x1 blocks
        variances.append(prior_var - (v**2).sum(0))
    mean, var = torch.cat(means), torch.cat(variances).clamp_min(0.0)
    transform = getattr(gp, "outcome_transform", None)
    if transform is not None:
        mean = mean * transform.stdvs[..., 0] + transform.means[..., 0]
        var = var * transform.stdvs[..., 0] ** 2
    return mean, var


class HammingKernel(CategoricalKernel):
    """BoTorch's `CategoricalKernel`, `exp(-mean_j [x1_j != x2_j] / l_j)`, computed one categorical
    dimension at a time: the same values and gradients without the `n1 x n2 x k` float tensor and its
    reduction over a short last dimension (several times faster on a few hundred training points and
    thousands of candidates, where the mixed GP spent most of its time)."""

    def forward(self, x1: torch.Tensor, x2: torch.Tensor, diag: bool = False, last_dim_is_batch: bool = False,
                **params) -> torch.Tensor:
        if last_dim_is_batch:
            return super().forward(x1, x2, diag=diag, last_dim_is_batch=True)
        weight = 1.0 / (self.lengthscale * x1.shape[-1])  # batch x 1 x k
        dists = None
        for j in range(x1.shape[-1]):
            w = weight[..., 0, j].unsqueeze(-1)
            if diag:
                term = torch.where(x1[..., j] != x2[..., j], w, 0.0)
            else:
                term = torch.where(x1[..., :, j].unsqueeze(-1) != x2[..., :, j].unsqueeze(-2), w.unsqueeze(-1), 0.0)
            dists = term if dists is None else dists + term
        return torch.exp(-dists)


def mixed_kernel(d: int, cats: list[int]) -> Kernel:
    """The kernel of BoTorch's `MixedSingleTaskGP` on `d` inputs with categorical dimensions `cats`,
    `scale * (rbf + scale * hamming) + scale * rbf * hamming` (RBF with the dimension-scaled
    lengthscale prior on the other dimensions), with the faster `HammingKernel`."""
    ords = [i for i in range(d) if i not in cats]

    def hamming():
        return HammingKernel(ard_num_dims=len(cats), active_dims=cats, lengthscale_constraint=GreaterThan(1e-06))

    def rbf():
        return get_covar_module_with_dim_scaled_prior(ard_num_dims=len(ords), active_dims=ords)

    return ScaleKernel(rbf() + ScaleKernel(hamming())) + ScaleKernel(rbf() * hamming())


def log_ei(z: torch.Tensor) -> torch.Tensor:
    """log(z Phi(z) + phi(z)), stably for very negative z (expected improvement per unit std)."""
    from botorch.acquisition.analytic import _log_ei_helper

    return _log_ei_helper(z)


class SurrogateMean(Mean):
    """Prior mean `a * f(X) + b` of a GP, f the mean of column `target` of a fitted surrogate; a
    and b are learned with the kernel (they absorb the outcome standardization)."""

    def __init__(self, surrogate, target: int = 0):
        super().__init__()
        self.surrogate = surrogate
        self.target = target
        self.register_parameter("scale", torch.nn.Parameter(torch.ones(1, dtype=DTYPE)))
        self.register_parameter("offset", torch.nn.Parameter(torch.zeros(1, dtype=DTYPE)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        flat = x.reshape(-1, x.shape[-1])
        mean = self.surrogate.predict(flat, return_std=True)[0][:, self.target].to(x)
        return self.offset + self.scale * mean.reshape(x.shape[:-1])
