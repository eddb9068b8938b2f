"""Horizontally fused MLPs: M members trained as one batched model (HFTA-style).

Every weight carries a leading member dimension (`M x in x out`) and a layer is one batched matmul
(`torch.baddbmm`), so an ensemble of M small MLPs costs one wider job instead of M jobs. Each
member sees its own shuffle of the data: a minibatch is `M x B x d`.

Early stopping is per member: after each epoch the validation loss of each member is compared with
its best so far, and the parameters of the members that improved are copied into `best` (a masked
copy along the member dimension). Training stops when no member improved for `patience` epochs.
"""

from __future__ import annotations

import math
import time
from typing import Callable, Sequence

import torch
from torch import nn

from analytical.specs import SpecError
from surrogates.models.base import check_float, check_int

ACTIVATIONS = {"silu": nn.functional.silu, "relu": torch.relu, "tanh": torch.tanh, "gelu": nn.functional.gelu}


class FusedMLP(nn.Module):
    """M MLPs `d -> hidden... -> out` with weights `M x in x out`; `forward(x: M x B x d) -> M x B x out`."""

    def __init__(self, n_members: int, d: int, hidden: Sequence[int], out: int, activation: str = "silu",
                 generator: torch.Generator | None = None):
        super().__init__()
        sizes = [d, *hidden, out]
        self.activation = activation
        self.weights = nn.ParameterList()
        self.biases = nn.ParameterList()
        for fan_in, fan_out in zip(sizes[:-1], sizes[1:]):
            bound = 1.0 / math.sqrt(fan_in)  # nn.Linear's default initialisation, per member
            w = (torch.rand(n_members, fan_in, fan_out, generator=generator) * 2 - 1) * bound
            b = (torch.rand(n_members, 1, fan_out, generator=generator) * 2 - 1) * bound
            self.weights.append(nn.Parameter(w))
            self.biases.append(nn.Parameter(b))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        act = ACTIVATIONS[self.activation]
        last = len(self.weights) - 1
        for i, (w, b) in enumerate(zip(self.weights, self.biases)):
            x = torch.baddbmm(b, x, w)
            if i < last:
                x = act(x)
        return x


def validation_split(n: int, val_fraction: float, generator: torch.Generator,
                     where: str) -> tuple[torch.Tensor, torch.Tensor]:
    """`(train, val)` row indices of a random split of n rows with `val_fraction` held out for early
    stopping; a SpecError naming `where`'s X when either side would have fewer than 2 rows."""
    n_val = int(round(n * val_fraction))
    if n_val < 2 or n - n_val < 2:
        raise SpecError(where, "X", f"{n} rows",
                        f"enough rows for a validation split of {val_fraction} (>= 2 rows each side)")
    perm = torch.randperm(n, generator=generator)
    return perm[n_val:], perm[:n_val]


def member_batches(n: int, n_members: int, batch_size: int, generator: torch.Generator) -> torch.Tensor:
    """`steps x M x B` indices: an independent permutation of `range(n)` per member, cut in batches
    (the last, short batch is dropped when there is more than one)."""
    order = torch.argsort(torch.rand(n_members, n, generator=generator), dim=1)
    steps = max(n // batch_size, 1)
    batch = min(batch_size, n)
    return order[:, :steps * batch].reshape(n_members, steps, batch).transpose(0, 1)


def cosine_factor(step: int, total: int, floor: float = 0.05) -> float:
    """Learning-rate factor of a cosine schedule from 1 down to `floor` over `total` steps."""
    return floor + (1.0 - floor) * 0.5 * (1.0 + math.cos(math.pi * min(step / max(total, 1), 1.0)))


def train_fused(model: FusedMLP, X: torch.Tensor, Y: torch.Tensor, X_val: torch.Tensor, Y_val: torch.Tensor,
                loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor], *, lr: float, weight_decay: float,
                batch_size: int, max_epochs: int, patience: int, max_seconds: float | None,
                generator: torch.Generator,
                val_loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None = None) -> dict:
    """Train `model` (in place) with AdamW and a cosine schedule; keep each member's best epoch.

    The schedule spans `max_epochs`, or the epochs that fit in `max_seconds` (estimated from the
    first epoch's time), whichever is fewer, so that a time-capped fit still anneals.

    `X: n x d`, `Y: n x k` (float32, already scaled); `loss_fn(out: M x B x o, y: M x B x k) -> M`
    gives each member's mean loss; `val_loss_fn` (same form, default `loss_fn`) is the early-stopping
    criterion on the validation rows. Returns a summary: epochs run, best validation loss per member,
    seconds.
    """
    n, n_members = X.shape[0], model.weights[0].shape[0]
    steps = max(n // batch_size, 1)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay)
    total_steps = [max_epochs * steps]  # shortened after the first epoch when max_seconds allows fewer
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: cosine_factor(step, total_steps[0]))
    best = [p.detach().clone() for p in model.parameters()]
    best_loss = torch.full((n_members,), math.inf)
    since_improved, epochs, start = 0, 0, time.perf_counter()
    for _ in range(max_epochs):
        model.train()
        for idx in member_batches(n, n_members, batch_size, generator):
            optimizer.zero_grad(set_to_none=True)
            loss_fn(model(X[idx]), Y[idx]).sum().backward()
            optimizer.step()
            schedule.step()
        epochs += 1
        val = validation_loss(model, X_val, Y_val, val_loss_fn or loss_fn)
        if epochs == 1 and max_seconds is not None:
            affordable = max(1, int(0.95 * max_seconds / max(time.perf_counter() - start, 1e-9)))
            total_steps[0] = min(max_epochs, affordable) * steps
        improved = val < best_loss
        if improved.any():
            since_improved = 0
            best_loss = torch.where(improved, val, best_loss)
            with torch.no_grad():
                for keep, p in zip(best, model.parameters()):
                    keep[improved] = p[improved]
        else:
            since_improved += 1
        if since_improved >= patience or (max_seconds is not None and time.perf_counter() - start > max_seconds):
            break
    with torch.no_grad():
        for keep, p in zip(best, model.parameters()):
            p.copy_(keep)
    model.eval()
    return {"epochs": epochs, "best_val_loss": best_loss.tolist(), "seconds": time.perf_counter() - start}


@torch.no_grad()
def validation_loss(model: FusedMLP, X: torch.Tensor, Y: torch.Tensor,
                    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor], chunk: int = 16384) -> torch.Tensor:
    """`M` mean losses of each member over `X: n x d` (all members see every row)."""
    model.eval()
    n_members = model.weights[0].shape[0]
    total = torch.zeros(n_members)
    for start in range(0, X.shape[0], chunk):
        x, y = X[start:start + chunk], Y[start:start + chunk]
        out = model(x.expand(n_members, *x.shape))
        total += loss_fn(out, y.expand(n_members, *y.shape)) * x.shape[0]
    return total / X.shape[0]


def check_training_params(model) -> None:
    """The hyper-parameters every fused-MLP model shares (members, widths, activation, optimizer,
    epochs, early stopping, time budget, validation split): SpecError naming the first bad one."""
    where = type(model).__name__
    check_int(model.n_members, where, "n_members")
    if isinstance(model.hidden, (str, bytes)) or not all(
            isinstance(h, int) and not isinstance(h, bool) and h >= 1 for h in model.hidden):
        raise SpecError(where, "hidden", model.hidden, "a sequence of integers >= 1 (hidden layer widths)")
    if model.activation not in ACTIVATIONS:
        raise SpecError(where, "activation", model.activation, "one of " + ", ".join(ACTIVATIONS))
    check_float(model.lr, where, "lr", high=1.0)
    check_float(model.weight_decay, where, "weight_decay", low_open=False)
    check_int(model.batch_size, where, "batch_size")
    check_int(model.max_epochs, where, "max_epochs")
    check_int(model.patience, where, "patience")
    if model.max_seconds is not None:
        check_float(model.max_seconds, where, "max_seconds")
    check_float(model.val_fraction, where, "val_fraction", high=0.5)
