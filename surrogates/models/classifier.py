"""Feasibility classifier: the probability that a design is feasible (fits in memory, within budgets).

A fused ensemble of M small MLP classifiers (`surrogates.models.fused.FusedMLP`, one logit each) trained
together on binary cross-entropy, each member on its own shuffle, early-stopped per member on a
validation split. The probability is the mean of the members' probabilities; their spread is the
epistemic std. Inputs: with `discrete_dims` discrete coordinates are snapped to their bin centres
and with `one_hot_dims` categorical ones become indicator columns (`surrogates.inputs`, as in
`MLPEnsemble`: feasibility, like the step time, is constant inside a bin), then standardized with
the training split's mean and std (stored in the state; a column constant in training keeps unit
scale). Training runs in float32, inputs and outputs are float64.

scikit-learn style: `fit(X, y)` with `y: (n,)` in {0, 1} (bool or numbers, 1 = feasible),
`predict_proba(X) -> (n,)` P(feasible), `predict(X) -> (n,)` bool (P >= threshold).
"""

from __future__ import annotations

from typing import Sequence

import torch
from torch import nn

from analytical.specs import SpecError
from surrogates.inputs import check_columns_fit, check_dims, encoded_width, one_hot, snap_to_bins, unit_scale
from surrogates.models.base import DTYPE, BaseSurrogate, check_float, check_int, check_X, describe, seeded
from surrogates.models.fused import FusedMLP, check_training_params, train_fused, validation_split


def bce(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """`M` mean binary cross-entropies of logits `M x B x 1` against labels `M x B x 1`."""
    return nn.functional.binary_cross_entropy_with_logits(out, y, reduction="none").mean((-1, -2))


class FeasibilityClassifier(BaseSurrogate):
    """P(feasible) of unit-cube designs `X: n x d`.

    Args:
        n_members: ensemble size M.
        hidden: widths of the hidden layers of each member.
        activation: one of `fused.ACTIVATIONS`.
        lr, weight_decay: AdamW; cosine-annealed over `max_epochs`.
        batch_size, max_epochs, patience, max_seconds, val_fraction: as in `MLPEnsemble`.
        threshold: `predict` says feasible where P(feasible) >= threshold.
        predict_chunk: rows per forward call at predict.
        seed: initialisation, split and shuffles (private generator).
        discrete_dims: `[column, cardinality]` pairs of discrete parameters (log2, integer,
            categorical): the column is snapped to its bin centre before the network.
        one_hot_dims: `[column, cardinality]` pairs of categorical parameters fed as `cardinality`
            indicator columns instead of one ordinal coordinate.
    """

    def __init__(self, n_members: int = 5, hidden: tuple[int, ...] = (64, 64), activation: str = "silu",
                 lr: float = 3e-3, weight_decay: float = 1e-5, batch_size: int = 256, max_epochs: int = 100,
                 patience: int = 10, max_seconds: float | None = None, val_fraction: float = 0.1,
                 threshold: float = 0.5, predict_chunk: int = 65536, seed: int = 0,
                 discrete_dims: Sequence[Sequence[int]] = (), one_hot_dims: Sequence[Sequence[int]] = ()):
        self.n_members = n_members
        self.hidden = hidden
        self.activation = activation
        self.lr = lr
        self.weight_decay = weight_decay
        self.batch_size = batch_size
        self.max_epochs = max_epochs
        self.patience = patience
        self.max_seconds = max_seconds
        self.val_fraction = val_fraction
        self.threshold = threshold
        self.predict_chunk = predict_chunk
        self.seed = seed
        self.discrete_dims = discrete_dims
        self.one_hot_dims = one_hot_dims

    def _validate_params(self) -> None:
        where = type(self).__name__
        check_training_params(self)
        check_float(self.threshold, where, "threshold", low_open=False, high=1.0)
        check_int(self.predict_chunk, where, "predict_chunk")
        check_int(self.seed, where, "seed", minimum=0)
        self._discrete = check_dims(self.discrete_dims, where, "discrete_dims")
        self._one_hot = check_dims(self.one_hot_dims, where, "one_hot_dims")

    def _check_columns(self, d: int) -> None:
        check_columns_fit(self, d, discrete_dims=self._discrete, one_hot_dims=self._one_hot)

    # --- the classifier interface ---------------------------------------------------------------
    def fit(self, X: torch.Tensor, y: torch.Tensor) -> "FeasibilityClassifier":
        """Learn P(feasible) from `X: n x d` and labels `y: (n,)` in {0, 1}; returns self."""
        where = f"{type(self).__name__}.fit"
        self._validate_params()
        X = check_X(X, where)
        if not isinstance(y, torch.Tensor):
            raise SpecError(where, "y", type(y).__name__, "a torch.Tensor of shape (n,) with values 0 or 1")
        if y.dim() == 2 and y.shape[1] == 1:
            y = y[:, 0]
        if y.shape != (X.shape[0],):
            raise SpecError(where, "y", describe(y), f"a tensor of shape ({X.shape[0]},) (one label per row of X)")
        y = y.to(DTYPE)
        if not ((y == 0) | (y == 1)).all():
            raise SpecError(where, "y", "values other than 0 and 1 (or NaN)", "labels 0 (infeasible) or 1 (feasible)")
        self.n_features_in_, self.n_outputs_ = X.shape[1], 1
        self._fit(X, y.unsqueeze(-1))
        return self

    def predict_proba(self, X: torch.Tensor, return_std: bool = False):
        """`(n,)` P(feasible) at `X: n x d`, and the members' std `(n,)` when `return_std`."""
        X = check_X(X, f"{type(self).__name__}.predict_proba", d=self._fitted_width())
        p, std = self._predict(X)
        return (p[:, 0], std[:, 0]) if return_std else p[:, 0]

    def predict(self, X: torch.Tensor, return_std: bool = False) -> torch.Tensor:
        """`(n,)` bool: predicted feasible (P(feasible) >= threshold)."""
        if return_std:
            raise SpecError(f"{type(self).__name__}.predict", "return_std", return_std,
                            "False (use predict_proba(X, return_std=True) for the spread)")
        return self.predict_proba(X) >= self.threshold

    # --- hooks of BaseSurrogate -----------------------------------------------------------------
    def _fit(self, X: torch.Tensor, y: torch.Tensor) -> None:
        n, d = X.shape
        self._check_columns(d)
        gen = seeded(self.seed)
        train, val = validation_split(n, self.val_fraction, gen, f"{type(self).__name__}.fit")
        E = self._encode(X)
        self.x_mean_, self.x_std_ = E[train].mean(0), unit_scale(E[train].std(0))
        Xs = self._scale_x(X)
        self.net_ = FusedMLP(self.n_members, Xs.shape[1], self.hidden, 1, self.activation, generator=gen)
        self.train_summary_ = train_fused(
            self.net_, Xs[train], y[train].float(), Xs[val], y[val].float(), bce, lr=self.lr,
            weight_decay=self.weight_decay, batch_size=self.batch_size, max_epochs=self.max_epochs,
            patience=self.patience, max_seconds=self.max_seconds, generator=gen)

    def _encode(self, X: torch.Tensor) -> torch.Tensor:
        """`X: n x d` -> `n x d'`: discrete columns snapped, categorical ones one-hot."""
        return one_hot(snap_to_bins(X, self._discrete), self._one_hot)

    def _scale_x(self, X: torch.Tensor) -> torch.Tensor:
        return ((self._encode(X) - self.x_mean_) / self.x_std_).float()

    @torch.no_grad()
    def _predict(self, X: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = self._scale_x(X)
        probs = []
        for start in range(0, x.shape[0], self.predict_chunk):
            chunk = x[start:start + self.predict_chunk]
            probs.append(torch.sigmoid(self.net_(chunk.expand(self.n_members, *chunk.shape))))
        members = torch.cat(probs, 1).to(DTYPE)  # M x n x 1
        return members.mean(0), members.std(0, unbiased=False)

    def _state(self) -> dict[str, torch.Tensor]:
        state = {"x_mean": self.x_mean_, "x_std": self.x_std_}
        state.update({"net." + k: v for k, v in self.net_.state_dict().items()})
        return state

    def _restore(self, state: dict[str, torch.Tensor]) -> None:
        self.x_mean_, self.x_std_ = state["x_mean"].to(DTYPE), state["x_std"].to(DTYPE)
        self._check_columns(self.n_features_in_)
        width = encoded_width(self.n_features_in_, self._one_hot)
        self.net_ = FusedMLP(self.n_members, width, self.hidden, 1, self.activation)
        self.net_.load_state_dict({k[4:]: v for k, v in state.items() if k.startswith("net.")})
        self.net_.eval()
