"""Exact Gaussian process: BoTorch `SingleTaskGP` (or `MixedSingleTaskGP` with categorical inputs).

For up to a few thousand samples: the fit costs O(n^3) per likelihood evaluation. Multi-output
targets are one batched model (an independent GP per output, batch shape `t`), fitted together by
`botorch.fit.fit_gpytorch_mll` (L-BFGS-B on the exact marginal log likelihood, each output's
hyper-parameters independently).

Transforms: inputs pass through `Normalize(d)` (learned from the training data, so the kernel's
length-scale priors see [0, 1] even when the data covers part of the cube); outcomes through
`Standardize(t)`. The targets we get are usually logs already (log step time, log energy), so by
default the GP models `Y` as given. With `log_targets=True` the caller passes positive raw targets
(seconds, joules) and the outcome transform is `Log` then `Standardize`: the GP models log Y and
`predict` returns the log-normal mean and std on the raw scale.

`predict` returns the predictive distribution of a new observation (`observation_noise=True`): the
analytical labels are deterministic, but the learned noise absorbs what a smooth kernel cannot
explain (discrete mapping jumps), and leaving it out would make the intervals too narrow.

Inputs: with `discrete_dims` the coordinates of discrete parameters (log2, integer, categorical)
are snapped to their bin centres (`surrogates.inputs.snap_to_bins`) before the BoTorch model, at
fit and at predict: the analytical model is constant inside a bin, and a categorical kernel
(`cat_dims`) needs each category as one value. `train_X_` keeps the inputs as given.

Everything runs in float64. Exact solves (Cholesky) are used up to `max_cholesky_size` samples.
"""

from __future__ import annotations

import warnings
from typing import Sequence

import gpytorch
import torch
from botorch.fit import fit_gpytorch_mll
from botorch.models import MixedSingleTaskGP, SingleTaskGP
from botorch.models.transforms.input import Normalize
from botorch.models.transforms.outcome import ChainedOutcomeTransform, Log, Standardize
from gpytorch.mlls import ExactMarginalLogLikelihood

from analytical.specs import SpecError
from surrogates.inputs import check_dims, snap_to_bins
from surrogates.models.base import DTYPE, BaseSurrogate, check_int

MAX_CHOLESKY_SIZE = 20_000  # gpytorch's default (800) switches to iterative solves; we want exact ones


class ExactGP(BaseSurrogate):
    """BoTorch exact GP over `X: n x d` unit-cube points and `Y: n x t` targets.

    Args:
        cat_dims: columns of X that are categorical (bin centres of `analytical.space`): a
            `MixedSingleTaskGP` with a categorical kernel on them. Empty: `SingleTaskGP`.
        log_targets: Y holds positive raw values; model log Y (`Log` + `Standardize`).
        max_iter: L-BFGS-B iterations of the hyper-parameter fit.
        predict_chunk: test points per posterior call (bounds memory at `predict_chunk x n`).
        seed: seeds the fit's random restarts (the global RNG is restored afterwards).
        discrete_dims: `[column, cardinality]` pairs of discrete parameters: the column is snapped
            to its bin centre before the model (categorical ones too: they are discrete).
    """

    def __init__(self, cat_dims: Sequence[int] = (), log_targets: bool = False, max_iter: int = 200,
                 predict_chunk: int = 2048, seed: int = 0, discrete_dims: Sequence[Sequence[int]] = ()):
        self.cat_dims = list(cat_dims)
        self.log_targets = log_targets
        self.max_iter = max_iter
        self.predict_chunk = predict_chunk
        self.seed = seed
        self.discrete_dims = discrete_dims

    def _validate_params(self) -> None:
        where = type(self).__name__
        for i in self.cat_dims:
            if isinstance(i, bool) or not isinstance(i, int) or i < 0:
                raise SpecError(where, "cat_dims", self.cat_dims, "column indices >= 0")
        if len(set(self.cat_dims)) != len(self.cat_dims):
            raise SpecError(where, "cat_dims", self.cat_dims, "distinct column indices")
        if not isinstance(self.log_targets, bool):
            raise SpecError(where, "log_targets", self.log_targets, "True or False")
        check_int(self.max_iter, where, "max_iter")
        check_int(self.predict_chunk, where, "predict_chunk")
        check_int(self.seed, where, "seed", minimum=0)
        self._discrete = check_dims(self.discrete_dims, where, "discrete_dims")

    def _check_columns(self, d: int) -> None:
        if any(i >= d for i in self.cat_dims):
            raise SpecError(type(self).__name__, "cat_dims", self.cat_dims, f"indices < d = {d}")
        if any(column >= d for column, _ in self._discrete):
            raise SpecError(type(self).__name__, "discrete_dims", self.discrete_dims, f"columns < d = {d}")

    # --- model construction (also used by load) -------------------------------------------------
    def _build(self, X: torch.Tensor, Y: torch.Tensor):
        """The BoTorch model on the training data (`X` as given: snapped here)."""
        X = snap_to_bins(X, self._discrete)
        d, t = X.shape[1], Y.shape[1]
        outcome = Standardize(m=t)
        if self.log_targets:
            outcome = ChainedOutcomeTransform(log=Log(), standardize=Standardize(m=t))
        if self.cat_dims:
            cont = [i for i in range(d) if i not in self.cat_dims]
            normalize = Normalize(d=d, indices=cont) if cont else None
            return MixedSingleTaskGP(X, Y, cat_dims=list(self.cat_dims), input_transform=normalize,
                                     outcome_transform=outcome)
        return SingleTaskGP(X, Y, input_transform=Normalize(d=d), outcome_transform=outcome)

    def _fit(self, X: torch.Tensor, Y: torch.Tensor) -> None:
        self._check_columns(X.shape[1])
        if X.shape[0] > MAX_CHOLESKY_SIZE:
            raise SpecError(f"{type(self).__name__}.fit", "X", f"{X.shape[0]} rows",
                            f"at most {MAX_CHOLESKY_SIZE} rows for an exact GP (use SVGP or MLPEnsemble)")
        with torch.random.fork_rng():
            torch.manual_seed(self.seed)
            model = self._build(X, Y)
            mll = ExactMarginalLogLikelihood(model.likelihood, model)
            with gpytorch.settings.max_cholesky_size(MAX_CHOLESKY_SIZE), warnings.catch_warnings():
                warnings.simplefilter("ignore", category=UserWarning)  # input-scaling notes on small n
                fit_gpytorch_mll(mll, optimizer_kwargs={"options": {"maxiter": self.max_iter}})
        model.eval()
        self.model_ = model
        self.train_X_, self.train_Y_ = X, Y

    def _predict(self, X: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        X = snap_to_bins(X, self._discrete)
        means, stds = [], []
        with torch.no_grad(), gpytorch.settings.max_cholesky_size(MAX_CHOLESKY_SIZE):
            for start in range(0, X.shape[0], self.predict_chunk):
                post = self.model_.posterior(X[start:start + self.predict_chunk], observation_noise=True)
                means.append(post.mean)
                stds.append(post.variance.clamp_min(0.0).sqrt())
        return torch.cat(means).to(DTYPE), torch.cat(stds).to(DTYPE)

    # --- persistence: training data + hyper-parameters, as tensors -------------------------------
    def _state(self) -> dict[str, torch.Tensor]:
        state = {"train_X": self.train_X_, "train_Y": self.train_Y_}
        state.update({"model." + k: v for k, v in self.model_.state_dict().items()})
        return state

    def _restore(self, state: dict[str, torch.Tensor]) -> None:
        X, Y = state["train_X"].to(DTYPE), state["train_Y"].to(DTYPE)
        self._check_columns(self.n_features_in_)
        model = self._build(X, Y)
        model.load_state_dict({k[len("model."):]: v for k, v in state.items() if k.startswith("model.")})
        model.eval()
        self.model_, self.train_X_, self.train_Y_ = model, X, Y
