"""Deep ensemble of MLPs with mean and scale heads (Lakshminarayanan et al. 2017), fused.

M members, each `d -> hidden... -> 2t` (a location and a scale per target), are one `FusedMLP`
(weights `M x in x out`, batched matmuls) trained together, each on its own shuffle of the data.
The loss is a negative log-likelihood: `likelihood="laplace"` (default) is `log 2b + |y - mu| / b`,
`"gaussian"` the Gaussian NLL; either can be weighted by the detached predicted variance to the
power beta (Seitzer et al. 2022's beta-NLL; beta = 0 is the plain NLL). A validation split
(`val_fraction`) early-stops each member at its best epoch by the error of its location (absolute
for Laplace, squared for Gaussian; the NLL would stop early: once the means are good the scale heads
shrink and overfit, while the means still improve; the calibration below repairs the variance).

Prediction mixes the members: mean = mean of member means; variance = mean of member variances
(`2 b^2` for a Laplace) + variance of member means. With `calibrate` the std of each target is then
multiplied by the factor that makes 95 % of the validation residuals fall inside +-1.96 std (a
post-hoc scale fitted on the validation split only, Kuleshov et al. 2018 style); the factor is
stored in the state.

Inputs: with `discrete_dims` the coordinates of discrete parameters are snapped to their bin centres
and with `one_hot_dims` categorical ones become indicator columns (`surrogates.inputs`), then inputs
and targets are standardized with the training split's mean and std (stored in the state). Snapping
matters: points drawn uniformly in the cube carry within-bin offsets that the analytical model
ignores; on the joint space (22 discrete of 29 dims, 20k rows) snapping cut the step-time MAPE
from 0.31 to 0.12 and one-hot categoricals on top to 0.093 (experiments/benchmarks/bench_surrogates.py).
With `log_features` (`log_features_of(space.parameters)`: the logs of the budgets and split
fractions, implied ones included) the network also sees the quantities the analytical model divides
by (see `log_features_of`).
Training and the forward pass run in float32 (fast on CPU, ample for targets standardized to unit
scale); `fit` takes and `predict` returns float64.

Defaults, measured on the joint space at 1e5 rows (random split, 10k test rows; one thread per fit,
~380-430 s training budgets; figures are step-time / energy MAPE):
- beta-NLL beta 0.5 -> plain NLL (beta 0): 0.054 / 0.031 -> 0.043 / 0.024. The plain NLL weighs each
  residual by the inverse predicted variance, so the many easy designs are fitted closely and the
  few hard ones (see below) do not dominate; the MAPE is a mean, and the median design gains.
  beta 1 (an MSE-like mean fit) was worse: 0.066 / 0.039.
- lr 2e-3 -> 5e-3 (with beta 0): 0.043 -> 0.034 / 0.019 (3e-3: 0.038; 1e-2: 0.046, 0.035 with
  batch 1024; with beta 0.5, 1e-3 gave 0.057). Widths 192 and 256, 4 layers, batch 256 or 1024,
  gelu, weight decay 0 or 1e-4, no early stopping: 0.034 to 0.040 at the same budget, none better.
- Laplace instead of Gaussian NLL: 0.0352 -> 0.0344 (1e4 rows: 0.106 -> 0.098), within noise at 1e5
  but never worse; its location is the median, which is what a mean absolute (log) error rewards.
- 3 members instead of 5 (more epochs in the same budget): 0.0344 -> 0.0339 / 0.0188, with the
  coverage unchanged (0.95) and 5/3 the query throughput.
What remained was a tail, not a bias: the median step-time error was 0.015, 1 % of the test
designs were off by more than 45 % and the worst 5 % made 44 % of the MAPE, spread over every mapping
choice (no recompute / ZeRO / pp / tp value stood out). Its source is in the chip derivation
(analytical/chip/derive.py): the scale-up links get the network power left after the scale-out links, so
the step time has a singularity where `power_budget * (1 - compute - memory fractions)` runs out
(along power_compute_fraction, 83 % of random designs change step time by more than 30 % within a
0.1 % step), and integer counts (HBM stacks, lanes) are floored. `log_features` (the logs of the
budgets and of the implied fractions) took the bench (experiments/benchmarks/bench_surrogates.py,
480 s budget, one thread) from 0.0986 / 0.0571 to 0.0896 / 0.0499 at 1e4 rows and from
0.0348 / 0.0191 to 0.0300 / 0.0157 at 1e5 rows (0.0303 / 0.0160 in a second run; the floored
counts stay: they need the technology tables, i.e. the analytical model itself).
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import torch
from torch import nn

from analytical.specs import SpecError
from surrogates.inputs import check_columns_fit, check_dims, encoded_width, one_hot, snap_to_bins, unit_scale
from surrogates.models.base import DTYPE, BaseSurrogate, check_float, check_int, seeded
from surrogates.models.fused import FusedMLP, check_training_params, train_fused, validation_split

LOG_FEATURE_FLOOR = 1e-4  # log features of affine maps that reach 0 (an implied split at its bound)
MIN_VARIANCE = 1e-6  # in standardized units: keeps the NLL finite where a member is very sure
Z95 = 1.959963984540054  # two-sided 95 % normal quantile


def check_log_features(features: Any, where: str, name: str) -> list[tuple[float, list[tuple[int, float]]]]:
    """`features` as `[(constant, [(column, weight), ...]), ...]`, else `SpecError` naming `name`."""
    allowed = "a sequence of [constant, [[column, weight], ...]] (column an integer >= 0, numbers finite)"
    if isinstance(features, (str, bytes)):
        raise SpecError(where, name, features, allowed)
    try:
        out = [(float(c), [(int(col), float(w)) for col, w in terms]) for c, terms in features]
        ok = all(isinstance(col, int) and not isinstance(col, bool) and col >= 0
                 for _, terms in features for col, _ in terms)
    except (TypeError, ValueError):
        raise SpecError(where, name, features, allowed) from None
    if not ok or not all(math.isfinite(v) for c, terms in out for v in [c, *(w for _, w in terms)]):
        raise SpecError(where, name, features, allowed)
    return out


def log_affine(X: torch.Tensor, features: Sequence[tuple[float, Sequence[tuple[int, float]]]]) -> torch.Tensor:
    """`n x k`: `log(max(constant + sum weight * X[:, column], LOG_FEATURE_FLOOR))` of each of the
    `k` features of `X: n x d`."""
    columns = [X.new_full((X.shape[0],), c) + sum(w * X[:, col] for col, w in terms) for c, terms in features]
    return torch.log(torch.stack(columns, -1).clamp_min(LOG_FEATURE_FLOOR))


def log_features_of(parameters: Sequence[Any]) -> list[list]:
    """The `log_features` of a design space's parameter list (`analytical.space.Parameter`s): the log
    of each linear continuous parameter with `low > 0` (a die area, a power budget, a split
    fraction) and of each implied split fraction (`1 - the others`, `analytical.chip.spec.
    IMPLIED_FRACTIONS`) whose other parts are all such parameters.

    Why: the analytical model divides by these quantities (the scale-up links get the network power
    left after the scale-out links, power_budget * (1 - compute - memory fractions) - ...); the log
    step time has a singularity where such a budget runs out, steep in the unit coordinates
    (a 0.1 % step of power_compute_fraction changes the step time by more than 30 % for 83 % of
    random joint-space designs), and a log feature makes it a sum of inputs."""
    from analytical.chip.spec import IMPLIED_FRACTIONS

    linear = {p.name: (i, p) for i, p in enumerate(parameters)
              if p.kind == "continuous" and not p.log and p.high > p.low and p.low > 0}
    features = [[p.low, [[i, p.high - p.low]]] for i, p in linear.values()]
    for parts in IMPLIED_FRACTIONS.values():
        if all(part in linear for part in parts):
            features.append([1.0 - sum(linear[part][1].low for part in parts),
                             [[linear[part][0], -(linear[part][1].high - linear[part][1].low)] for part in parts]])
    return features


def gaussian_heads(out: torch.Tensor, t: int) -> tuple[torch.Tensor, torch.Tensor]:
    """`(mean, variance)`, each `... x t`, of a network output `... x 2t` (softplus variance head)."""
    mean, raw = out[..., :t], out[..., t:]
    return mean, nn.functional.softplus(raw) + MIN_VARIANCE


def beta_nll(out: torch.Tensor, y: torch.Tensor, beta: float) -> torch.Tensor:
    """`M` mean beta-NLL losses of outputs `M x B x 2t` against targets `M x B x t`."""
    mean, var = gaussian_heads(out, y.shape[-1])
    nll = 0.5 * (torch.log(var) + (y - mean) ** 2 / var)
    if beta > 0:
        nll = nll * var.detach() ** beta
    return nll.sum(-1).mean(-1)


def laplace_heads(out: torch.Tensor, t: int) -> tuple[torch.Tensor, torch.Tensor]:
    """`(location, scale b)`, each `... x t`, of a network output `... x 2t` (softplus scale head)."""
    loc, raw = out[..., :t], out[..., t:]
    return loc, nn.functional.softplus(raw) + MIN_VARIANCE


def laplace_nll(out: torch.Tensor, y: torch.Tensor, beta: float) -> torch.Tensor:
    """`M` mean Laplace NLLs `log(2b) + |y - loc| / b` of outputs `M x B x 2t` against targets
    `M x B x t`, weighted by the detached variance `2 b^2` to the power `beta` like `beta_nll`."""
    loc, b = laplace_heads(out, y.shape[-1])
    nll = torch.log(2 * b) + (y - loc).abs() / b
    if beta > 0:
        nll = nll * (2 * b.detach() ** 2) ** beta
    return nll.sum(-1).mean(-1)


def member_moments(out: torch.Tensor, t: int, likelihood: str) -> tuple[torch.Tensor, torch.Tensor]:
    """`(mean, variance)`, each `... x t`, of a member's predictive from its output `... x 2t`
    (a Laplace of scale b has variance `2 b^2`)."""
    if likelihood == "laplace":
        loc, b = laplace_heads(out, t)
        return loc, 2 * b ** 2
    return gaussian_heads(out, t)


LOSSES = {"gaussian": beta_nll, "laplace": laplace_nll}


def mean_squared_error(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """`M` mean squared errors of the mean heads of outputs `M x B x 2t` against `M x B x t`."""
    return ((out[..., :y.shape[-1]] - y) ** 2).sum(-1).mean(-1)


def mean_absolute_error(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """`M` mean absolute errors of the mean heads of outputs `M x B x 2t` against `M x B x t`."""
    return (out[..., :y.shape[-1]] - y).abs().sum(-1).mean(-1)


VALIDATION_LOSSES = {"gaussian": mean_squared_error, "laplace": mean_absolute_error}


def mix(means: torch.Tensor, variances: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Mixture mean and std `n x t` of member means and variances `M x n x t`."""
    mean = means.mean(0)
    variance = variances.mean(0) + means.var(0, unbiased=False)
    return mean, variance.sqrt()


class MLPEnsemble(BaseSurrogate):
    """Fused deep ensemble over `X: n x d` unit-cube points and `Y: n x t` targets.

    Args:
        n_members: ensemble size M.
        hidden: widths of the hidden layers of each member.
        activation: one of `fused.ACTIVATIONS`.
        lr, weight_decay: AdamW; the learning rate is cosine-annealed over `max_epochs`.
        batch_size: rows per member per step.
        max_epochs, patience: epochs at most; stop when no member improved for `patience` epochs.
        max_seconds: wall-time budget of the training loop (None: none).
        val_fraction: share of the rows held out for early stopping and calibration.
        beta: beta of the beta-NLL loss (0: the plain NLL).
        likelihood: "laplace" or "gaussian": the members' predictive distribution and loss.
        calibrate: scale the std on the validation split so that 95 % intervals cover 95 %.
        predict_chunk: rows per forward call at predict (4096: the activations stay in cache; 65536
            halved the rows per second of a 1e5-row predict on one thread).
        seed: initialisation, split and shuffles (a private generator; global RNG untouched).
        discrete_dims: `[column, cardinality]` pairs of discrete parameters (log2, integer,
            categorical): the column is snapped to its bin centre before the network.
        one_hot_dims: `[column, cardinality]` pairs of categorical parameters fed as `cardinality`
            indicator columns instead of one ordinal coordinate.
        log_features: `[constant, [[column, weight], ...]]` items: extra inputs
            `log(constant + sum weight * X[:, column])` (`log_affine`; `log_features_of(parameters)`
            gives those of a design space: its budgets and implied split fractions).
    """

    def __init__(self, n_members: int = 3, hidden: tuple[int, ...] = (128, 128, 128), activation: str = "silu",
                 lr: float = 5e-3, weight_decay: float = 1e-5, batch_size: int = 256, max_epochs: int = 300,
                 patience: int = 40, max_seconds: float | None = None, val_fraction: float = 0.1,
                 beta: float = 0.0, likelihood: str = "laplace", calibrate: bool = True,
                 predict_chunk: int = 4096, seed: int = 0,
                 discrete_dims: Sequence[Sequence[int]] = (), one_hot_dims: Sequence[Sequence[int]] = (),
                 log_features: Sequence[Sequence[Any]] = ()):
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
        self.beta = beta
        self.likelihood = likelihood
        self.calibrate = calibrate
        self.predict_chunk = predict_chunk
        self.seed = seed
        self.discrete_dims = discrete_dims
        self.one_hot_dims = one_hot_dims
        self.log_features = log_features

    def _validate_params(self) -> None:
        where = type(self).__name__
        check_training_params(self)
        check_float(self.beta, where, "beta", low_open=False, high=1.0)
        if self.likelihood not in LOSSES:
            raise SpecError(where, "likelihood", self.likelihood, "one of " + ", ".join(LOSSES))
        if not isinstance(self.calibrate, bool):
            raise SpecError(where, "calibrate", self.calibrate, "True or False")
        check_int(self.predict_chunk, where, "predict_chunk")
        check_int(self.seed, where, "seed", minimum=0)
        self._discrete = check_dims(self.discrete_dims, where, "discrete_dims")
        self._one_hot = check_dims(self.one_hot_dims, where, "one_hot_dims")
        self._log_features = check_log_features(self.log_features, where, "log_features")

    def _check_columns(self, d: int) -> None:
        check_columns_fit(self, d, discrete_dims=self._discrete, one_hot_dims=self._one_hot)
        if any(column >= d for _, terms in self._log_features for column, _ in terms):
            raise SpecError(type(self).__name__, "log_features", self.log_features, f"columns < d = {d}")

    def _fit(self, X: torch.Tensor, Y: torch.Tensor) -> None:
        n, d = X.shape
        t = Y.shape[1]
        self._check_columns(d)
        gen = seeded(self.seed)
        train, val = validation_split(n, self.val_fraction, gen, f"{type(self).__name__}.fit")
        E = self._encode(X)
        self.x_mean_, self.x_std_ = E[train].mean(0), unit_scale(E[train].std(0))
        self.y_mean_, self.y_std_ = Y[train].mean(0), Y[train].std(0).clamp_min(1e-12)
        Xs, Ys = self._scale_x(X), ((Y - self.y_mean_) / self.y_std_).float()
        self.net_ = FusedMLP(self.n_members, Xs.shape[1], self.hidden, 2 * t, self.activation, generator=gen)
        beta, loss = self.beta, LOSSES[self.likelihood]
        self.train_summary_ = train_fused(
            self.net_, Xs[train], Ys[train], Xs[val], Ys[val], lambda out, y: loss(out, y, beta),
            lr=self.lr, weight_decay=self.weight_decay, batch_size=self.batch_size, max_epochs=self.max_epochs,
            patience=self.patience, max_seconds=self.max_seconds, generator=gen,
            val_loss_fn=VALIDATION_LOSSES[self.likelihood])
        self.std_scale_ = torch.ones(t, dtype=DTYPE)
        if self.calibrate:
            mean, std = self._predict(X[val])
            z = ((Y[val] - mean) / std).abs()
            self.std_scale_ = (torch.quantile(z, 0.95, dim=0) / Z95).clamp_min(1e-3)

    def _encode(self, X: torch.Tensor) -> torch.Tensor:
        """`X: n x d` -> `n x d'`: discrete columns snapped, categorical ones one-hot, then the log features."""
        E = one_hot(snap_to_bins(X, self._discrete), self._one_hot)
        return torch.cat([E, log_affine(X, self._log_features)], 1) if self._log_features else E

    def _scale_x(self, X: torch.Tensor) -> torch.Tensor:
        return ((self._encode(X) - self.x_mean_) / self.x_std_).float()

    @torch.no_grad()
    def _member_moments(self, X: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Member means and variances `M x n x t` in standardized units (float32)."""
        x = self._scale_x(X)
        t = self.n_outputs_
        means, variances = [], []
        for start in range(0, x.shape[0], self.predict_chunk):
            chunk = x[start:start + self.predict_chunk]
            mean, var = member_moments(self.net_(chunk.expand(self.n_members, *chunk.shape)), t, self.likelihood)
            means.append(mean)
            variances.append(var)
        return torch.cat(means, 1), torch.cat(variances, 1)

    def _predict(self, X: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        mean, std = mix(*self._member_moments(X))
        mean = mean.to(DTYPE) * self.y_std_ + self.y_mean_
        std = std.to(DTYPE) * self.y_std_ * self.std_scale_
        return mean, std

    def _state(self) -> dict[str, torch.Tensor]:
        state = {"x_mean": self.x_mean_, "x_std": self.x_std_, "y_mean": self.y_mean_, "y_std": self.y_std_,
                 "std_scale": self.std_scale_,
                 "likelihood": torch.tensor(list(LOSSES).index(self.likelihood))}
        state.update({"net." + k: v for k, v in self.net_.state_dict().items()})
        return state

    def _restore(self, state: dict[str, torch.Tensor]) -> None:
        self.x_mean_, self.x_std_ = state["x_mean"].to(DTYPE), state["x_std"].to(DTYPE)
        self.y_mean_, self.y_std_ = state["y_mean"].to(DTYPE), state["y_std"].to(DTYPE)
        self.std_scale_ = state["std_scale"].to(DTYPE)
        # models saved before `likelihood` existed have no code in their state: they are Gaussian
        self.likelihood = list(LOSSES)[int(state["likelihood"])] if "likelihood" in state else "gaussian"
        self._check_columns(self.n_features_in_)
        width = encoded_width(self.n_features_in_, self._one_hot) + len(self._log_features)
        self.net_ = FusedMLP(self.n_members, width, self.hidden, 2 * self.n_outputs_, self.activation)
        self.net_.load_state_dict({k[4:]: v for k, v in state.items() if k.startswith("net.")})
        self.net_.eval()
