"""Small design spaces for the optimizer tests (built in code around shipped presets)."""

from __future__ import annotations

import pytest

from analytical.build import single_design
from analytical.search import torch_threads
from analytical.space import DesignSpace, Parameter
from deepflow.presets import load_preset


def template():
    return single_design(load_preset("hardware", "h100-sxm-80gb"), load_preset("system", "dgx-h100-superpod"),
                         load_preset("model", "gpt3-175b"), load_preset("mapping", "gpt3-175b-1024"))


def small_mapping_space() -> DesignSpace:
    """GPT-3 175B on 1024 H100: tp, pp, micro-batch, recompute, ZeRO (7 x 7 x 5 x 3 x 4 = 2,940 points)."""
    params = (Parameter("tp", "log2", 1, 64), Parameter("pp", "log2", 1, 64), Parameter("micro_batch_size", "log2", 1, 16),
              Parameter("recompute", "categorical", choices=("none", "selective", "full")),
              Parameter("zero_stage", "categorical", choices=(0, 1, 2, 3)))
    return DesignSpace("test-mapping", params, template()).validate()


def continuous_space() -> DesignSpace:
    """Accelerator rates only (log-continuous), mapping fixed at the template's: differentiable."""
    params = (Parameter("peak_bf16_flops_per_s", "continuous", 4e14, 2e15, log=True),
              Parameter("hbm_bw_bytes_per_s", "continuous", 1e12, 8e12, log=True),
              Parameter("scale_up_bw_bytes_per_s", "continuous", 1.5e11, 1.8e12, log=True))
    return DesignSpace("test-continuous", params, template()).validate()


def unit_square_space() -> DesignSpace:
    """Two continuous coordinates on [0, 1] (fields of no consequence): a carrier for test functions."""
    params = (Parameter("kernel_launch_s", "continuous", 0.0, 1.0), Parameter("tile_m", "continuous", 0.0, 1.0))
    return DesignSpace("test-square", params, template()).validate()


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """GP fits and acquisition on one torch thread (5-10x faster than two on a shared 2-core machine).
    Import it into a test module to apply it to every test there."""
    with torch_threads(1):
        yield
