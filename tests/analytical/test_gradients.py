"""Step time is differentiable with torch autograd w.r.t. the continuous hardware parameters."""

from __future__ import annotations

import pytest
import torch

from analytical import MappingSpec, evaluate, single_design

CONTINUOUS = ("hbm_bw_bytes_per_s", "scale_up_bw_bytes_per_s", "scale_out_bw_bytes_per_s",
              "peak_bf16_flops_per_s", "kernel_launch_s", "scale_out_latency_s")


@pytest.fixture(params=["gpt3-a100-unfused", "llama-h100-flash-overlap"])
def design(request, a100, h100, make_system, gpt3, llama7b):
    if request.param == "gpt3-a100-unfused":
        return single_design(a100, make_system(1024), gpt3,
                             MappingSpec(tp=8, pp=8, dp=16, global_batch_size=1536, recompute="selective",
                                         sequence_parallel=True, flash_attention=False))
    return single_design(h100, make_system(64), llama7b,
                         MappingSpec(tp=2, pp=2, dp=16, global_batch_size=512, micro_batch_size=2,
                                     overlap_dp_comm=True, overlap_tp_comm=True))


@pytest.mark.parametrize("field", CONTINUOUS)
def test_autograd_matches_central_finite_differences(design, field):
    x = getattr(design, field).clone().requires_grad_(True)
    (grad,) = torch.autograd.grad(evaluate(design.replace(**{field: x})).step_time_s.sum(), x)
    h = float(x.detach()) * 1e-6
    up = float(evaluate(design.replace(**{field: x.detach() + h})).step_time_s)
    down = float(evaluate(design.replace(**{field: x.detach() - h})).step_time_s)
    fd = (up - down) / (2 * h)
    assert float(grad) == pytest.approx(fd, rel=1e-5, abs=1e-30)
    if field == "kernel_launch_s":
        assert float(grad) > 0  # every launch costs time
    elif field != "scale_out_latency_s":
        assert float(grad) <= 0  # more bandwidth or FLOP/s never slows a step


def test_gradients_are_finite_over_random_designs(random_designs_20k):
    d = random_designs_20k
    xs = {f: getattr(d, f).clone().requires_grad_(True) for f in CONTINUOUS}
    result = evaluate(d.replace(**xs))
    grads = torch.autograd.grad(result.step_time_s.sum(), list(xs.values()))
    for field, g in zip(CONTINUOUS, grads):
        assert bool(torch.isfinite(g).all()), field


# what the chip derivation makes continuous beside CONTINUOUS (the joint space differentiates through all of them)
DERIVED = ("compute_units", "tile_m", "tile_n", "sram_bw_bytes_per_s", "peak_fp8_flops_per_s")


def test_gradients_through_tiles_waves_and_split_k_are_finite(random_designs_20k):
    """Every design has empty GEMM slots (0 output tiles: a transformer's recurrent one, a dense model's router);
    split-K once divided the compute units by their 0 tiles, and autograd's 0 x inf through `floor` made NaN
    of every gradient that reaches the units or the tiles, although each time was finite."""
    d = random_designs_20k
    xs = {f: getattr(d, f).clone().requires_grad_(True) for f in DERIVED}
    result = evaluate(d.replace(**xs))
    assert bool(torch.isfinite(result.step_time_s).all())
    grads = torch.autograd.grad((result.step_time_s + result.energy_j).sum(), list(xs.values()))
    for field, g in zip(DERIVED, grads):
        assert bool(torch.isfinite(g).all()), field
