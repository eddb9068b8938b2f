"""Bytes per element of a sequence-parallel gather: the one rule that the tensor-parallel collectives
(`model.sp_pair_bytes_per_element`) and DTensor's layout copies (`eager_ops._dtensor_sp`) both read."""

from __future__ import annotations

import dataclasses

import pytest

from analytical import MappingSpec, stack_designs
from analytical.step.model import sp_pair_bytes_per_element
from analytical.step.param_bytes import sp_gather_bytes_per_element
from analytical.step.workload import activation_bytes_per_element

TP_SP = MappingSpec(tp=8, dp=1, micro_batch_size=1, global_batch_size=8, sequence_parallel=True)

# gathered bytes an element: the quantized GEMM input (mxfp8: a 1-byte scale per 32, nvfp4: per 16), else the
# activations' dtype
GATHERED = {"fp32": 4.0, "bf16": 2.0, "fp8": 1.0, "mxfp8": 1.0 + 1.0 / 32.0, "nvfp4": 0.5 + 1.0 / 16.0}


@pytest.mark.parametrize("precision", sorted(GATHERED))
def test_a_sequence_parallel_gather_moves_the_quantized_gemm_input(design, h100, system, llama7b, precision):
    d = design(h100, system, llama7b, dataclasses.replace(TP_SP, precision=precision))
    elem = activation_bytes_per_element(d)
    assert float(sp_gather_bytes_per_element(d)[0]) == GATHERED[precision]
    # the pair's mean: the gather's bytes and the 16-bit (fp32: 32-bit) scatter's
    assert float(sp_pair_bytes_per_element(d, elem)[0]) == 0.5 * (GATHERED[precision] + float(elem[0]))


def test_without_sequence_parallelism_the_pair_is_an_all_reduce_of_the_output(design, h100, system, llama7b):
    """No sequence parallelism: the tensor-parallel all-reduce moves the 16-bit output, fp8 or not; a batch
    where no design gathers narrow gets `elem` itself back (the caller's fast path tests identity)."""
    d = design(h100, system, llama7b, dataclasses.replace(TP_SP, precision="fp8", sequence_parallel=False))
    elem = activation_bytes_per_element(d)
    assert sp_pair_bytes_per_element(d, elem) is elem
    fp8 = [dataclasses.replace(TP_SP, precision="fp8", sequence_parallel=sp) for sp in (True, False)]
    both = stack_designs([h100] * 2, [system] * 2, [llama7b] * 2, fp8)  # with and without sequence parallelism
    assert sp_pair_bytes_per_element(both, activation_bytes_per_element(both)).tolist() == [1.5, 2.0]
