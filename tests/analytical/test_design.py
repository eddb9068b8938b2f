"""analytical.design: human units to SI tensors, and batch helpers."""

from __future__ import annotations

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from analytical import DesignBatch, MappingSpec, SpecError, evaluate, single_design, stack_designs
from analytical.codes import DTYPE, KIND_CODES, PRECISION_CODES, RECOMPUTE_CODES, TOPOLOGY_CODES
from analytical.design import OFF_VALUES, any_set, memoizing
from tests.analytical.conftest import random_design_batch


class _OpCount(TorchDispatchMode):
    """Counts the tensor operations dispatched inside the block and the elements their results hold."""

    def __init__(self) -> None:
        super().__init__()
        self.ops, self.elements = 0, 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        self.ops += 1
        self.elements += out.numel() if isinstance(out, torch.Tensor) else 0
        return out


def test_units(a100, system, gpt3, design):
    d = design(a100, system, gpt3, MappingSpec(precision="fp16", recompute="full"))
    assert d.batch_size == 1
    assert all(v.dtype == DTYPE and v.shape == (1,) for v in d.fields().values())
    assert float(d.peak_fp16_flops_per_s[0]) == 312e12
    assert float(d.hbm_bytes[0]) == 80 * 2**30
    assert float(d.hbm_bw_bytes_per_s[0]) == 2039e9
    assert float(d.sram_bytes[0]) == 40 * 2**20
    assert float(d.sram_bw_bytes_per_s[0]) == 7e12
    assert float(d.scale_up_bw_bytes_per_s[0]) == 300e9
    assert float(d.scale_out_bw_bytes_per_s[0]) == 25e9  # 200 Gbit/s
    assert float(d.kernel_launch_s[0]) == pytest.approx(4e-6)
    assert float(d.scale_out_latency_s[0]) == pytest.approx(5e-6)
    assert float(d.precision[0]) == PRECISION_CODES["fp16"]
    assert float(d.recompute[0]) == RECOMPUTE_CODES["full"]
    assert float(d.kind[0]) == KIND_CODES["transformer"]
    assert float(d.topology[0]) == TOPOLOGY_CODES["rail-optimized"]
    assert float(d.ffn_hidden_size[0]) == 4 * 12288
    assert float(d.num_kv_heads[0]) == 96


def test_system_nic_overrides_the_accelerator(a100, system, gpt3, replace):
    d = single_design(a100, replace(system, scale_out_gbit_per_device=400.0), gpt3, MappingSpec())
    assert float(d.scale_out_bw_bytes_per_s[0]) == 50e9


@pytest.mark.parametrize("devices,tp,pp,cp,dp", [(1024, 8, 16, 1, 8), (64, 2, 2, 2, 8), (8, 8, 1, 1, 1),
                                                 (4, 8, 1, 1, 1)])
def test_dp_is_derived_from_devices(a100, make_system, gpt3, devices, tp, pp, cp, dp):
    d = single_design(a100, make_system(devices), gpt3, MappingSpec(tp=tp, pp=pp, cp=cp))
    assert float(d.dp[0]) == dp


def test_stack_designs_validates_and_checks_lengths(a100, system, gpt3):
    with pytest.raises(SpecError):
        single_design(a100, system, gpt3, MappingSpec(tp=0))
    with pytest.raises(ValueError):
        stack_designs([a100, a100], [system], [gpt3], [MappingSpec()])
    with pytest.raises(ValueError):
        stack_designs([], [], [], [])


def test_batch_helpers(a100, h100, system, gpt3, lstm):
    batch = stack_designs([a100, h100], [system, system], [gpt3, lstm], [MappingSpec(), MappingSpec(tp=1)])
    assert batch.batch_size == 2
    assert torch.equal(batch.index(torch.tensor([1])).kind, torch.tensor([KIND_CODES["lstm"]], dtype=DTYPE))
    assert DesignBatch.cat([batch, batch]).batch_size == 4
    assert batch.index(slice(0, 1)).expand(7).batch_size == 7
    with pytest.raises(ValueError):
        batch.expand(3)
    changed = batch.replace(tp=4, hbm_bytes=torch.tensor([1.0, 2.0], dtype=DTYPE))
    assert torch.equal(changed.tp, torch.tensor([4.0, 4.0], dtype=DTYPE))
    assert torch.equal(changed.hbm_bytes, torch.tensor([1.0, 2.0], dtype=DTYPE))
    assert torch.equal(batch.tp, torch.tensor([1.0, 1.0], dtype=DTYPE))  # the original is untouched


def test_any_set_reads_every_gating_field_in_one_pass():
    designs = random_design_batch(64, seed=11)
    fields = designs.fields()
    assert set(OFF_VALUES) <= set(fields)  # every gate names a field of the batch
    for name, off in OFF_VALUES.items():
        assert any_set(designs, name) == bool((fields[name] > off).any()), name
        quiet = designs.replace(**{name: off})  # every design at the off value: the term is skipped
        assert not any_set(quiet, name) and any_set(quiet.replace(**{name: off + 1.0}), name), name
    memo = memoizing(designs)
    with _OpCount() as count:
        answers = [any_set(memo, name) for name in OFF_VALUES]
    assert count.ops <= 5 and answers == [any_set(designs, name) for name in OFF_VALUES]
    # a batch outside an evaluation (a space's raw draws) reads each field alone: the one-pass read of all
    # of them would be repeated at every check (it was: ~5 checks a sampled block, each stacking 19 fields)
    with _OpCount() as count:
        [any_set(designs, name) for name in OFF_VALUES]
    assert count.elements <= len(OFF_VALUES) * (designs.batch_size + 2)


def test_each_design_of_a_mixed_batch_evaluates_as_it_does_alone():
    """The terms skipped where no design of a chunk needs them (`any_set`, the live GEMM slots) change no design's
    numbers: a design's result does not depend on the designs beside it (it did: 26 of 600 randomised modern_runs
    designs with the expert-parallel overlap and no distributed optimizer, up to 2.6 % in step time, before 1F1B's
    merged window stopped depending on whether another design of the batch gathered its weights)."""
    designs = random_design_batch(400, seed=12)
    together = evaluate(designs)
    for i in range(designs.batch_size):
        alone = evaluate(designs.index(slice(i, i + 1)))
        for mixed, single in zip(together.tensors(), alone.tensors()):
            assert torch.equal(mixed[i:i + 1], single) or (mixed[i].isnan() & single[0].isnan()), i
