"""The analytical model computes wherever its batch lives and in its batch's float type.

No GPU is needed: PyTorch's `meta` device stands in for one. A constant the model made on the CPU
meets a meta tensor and PyTorch refuses the mix, exactly as a CUDA tensor would; the few
data-dependent branches (`bool(tensor.any())`, `analytical.design.any_set`'s `tolist`) are all taken on meta.
"""

from __future__ import annotations

import pytest
import torch
from torch.overrides import TorchFunctionMode

from analytical import evaluate
from tests.analytical.conftest import random_design_batch


class _EveryBranch(TorchFunctionMode):
    """`bool()` / `item()` of a meta tensor (which has no values) answer True, and `tolist()` a list of True:
    every skip-when-absent branch of the model runs."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func in (torch.Tensor.__bool__, torch.Tensor.item) and args[0].device.type == "meta":
            return True
        if func is torch.Tensor.tolist and args[0].device.type == "meta":
            return torch.ones(args[0].shape, dtype=torch.bool).tolist()
        return func(*args, **(kwargs or {}))


def test_every_tensor_of_an_evaluation_stays_on_the_batchs_device():
    designs = random_design_batch(64, seed=3)  # every kind, MoE, MLA, dispatcher and precision
    with _EveryBranch():
        result = evaluate(designs.to("meta"))
    for tensor in result.tensors():
        assert tensor.device.type == "meta" and tensor.shape[0] == 64


def test_a_constant_made_on_the_cpu_would_be_caught():
    """The check above can fail: a CPU vector meeting the meta batch is refused."""
    designs = random_design_batch(4).to("meta")
    with pytest.raises(RuntimeError, match="device"):
        _ = designs.tp + torch.zeros(4)


def test_float32_matches_float64_to_a_few_parts_in_a_million():
    designs = random_design_batch(40_000, seed=5)
    reference, single = evaluate(designs), evaluate(designs.to(dtype=torch.float32))
    assert single.step_time_s.dtype == torch.float32
    assert torch.equal(reference.reason, single.reason)
    ok = reference.feasible
    assert ok.sum() > 20  # (a few dozen of the random designs are feasible)
    for name in ("step_time_s", "energy_j", "memory_per_device_bytes", "mfu"):
        ref, got = getattr(reference, name)[ok], getattr(single, name)[ok].double()
        assert torch.isfinite(got).all()
        assert ((got - ref) / ref).abs().max() < 5e-6, name


def test_evaluate_on_another_device_returns_results_where_the_batch_was():
    designs = random_design_batch(300, seed=7)
    result = evaluate(designs, device="cpu", chunk_size=128)  # three chunks, each moved there and back
    assert result.step_time_s.device.type == "cpu"
    assert torch.equal(result.step_time_s, evaluate(designs).step_time_s)


def test_to_is_free_when_nothing_changes():
    designs = random_design_batch(10)
    assert designs.to("cpu", torch.float64) is designs
    result = evaluate(designs)
    assert result.to("cpu") is result
    assert result.to("cpu", torch.float32).step_time_s.dtype == torch.float32
    assert result.to("cpu", torch.float32).reason.dtype == torch.int64
