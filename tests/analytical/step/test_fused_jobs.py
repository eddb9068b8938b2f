"""Fused repeated jobs (`mapping.fused_jobs`, HFTA): each term against its closed form on small cases."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from analytical import MappingSpec, ModelSpec, evaluate, single_design, stack_designs
from analytical.codes import Reason
from analytical.specs import SpecError
from analytical.step.model import fuse_jobs
from analytical.step.workload import layer_gemms

ONE = MappingSpec(name="one", micro_batch_size=32, global_batch_size=32, precision="fp16", flash_attention=False)
RESNET18_CIFAR = ModelSpec(name="r18", kind="cnn", cnn_arch="resnet18", image_size=32, num_classes=10)
GEMM = ModelSpec(name="g", kind="gemm", gemm_m=256, gemm_n=256, gemm_k=256)


def fused(jobs: int, mapping: MappingSpec = ONE) -> MappingSpec:
    return dataclasses.replace(mapping, fused_jobs=jobs)


def test_b_fused_gemms_are_one_batched_gemm_of_b_products(a100, make_system):
    """A fused GEMM job: the same m x n x k product, count B, B times the FLOPs."""
    system = make_system(1)
    single = single_design(a100, system, GEMM, ONE)
    four = single_design(a100, system, GEMM, fused(4))
    g1, g4 = layer_gemms(fuse_jobs(single)), layer_gemms(fuse_jobs(four))
    assert torch.equal(g4.m, g1.m) and torch.equal(g4.n, g1.n) and torch.equal(g4.k, g1.k)
    assert float(g4.count[0, 0]) == 4.0 * float(g1.count[0, 0])
    r1, r4 = evaluate(single), evaluate(four)
    assert float(r4.model_flops[0]) == pytest.approx(4.0 * float(r1.model_flops[0]))
    # one wave of 2 x 2 tiles on 108 units: four products still fit one wave, so one launch does all
    assert float(r4.step_time_s[0]) < 2.0 * float(r1.step_time_s[0])


def test_fusing_a_device_filling_network_gains_little_and_a_small_one_much(a100, make_system):
    system = make_system(1)
    big = ModelSpec(name="g", kind="gemm", gemm_m=8192, gemm_n=8192, gemm_k=8192)

    def speedup(model: ModelSpec, jobs: int) -> float:
        one, many = (evaluate(single_design(a100, system, model, fused(b))) for b in (1, jobs))
        return jobs * float(one.step_time_s[0]) / float(many.step_time_s[0])

    assert speedup(big, 8) == pytest.approx(1.0, abs=0.05)
    assert speedup(GEMM, 8) > 3.0


def test_b_jobs_hold_b_copies_of_the_model_and_b_batches_of_activations(a100, make_system):
    system = make_system(1)
    r1, r3 = (evaluate(single_design(a100, system, RESNET18_CIFAR, fused(b))) for b in (1, 3))
    m1, m3 = r1.memory_breakdown_bytes, r3.memory_breakdown_bytes
    for part in ("weights", "gradients", "optimizer", "activations"):
        assert float(m3[part][0]) == pytest.approx(3.0 * float(m1[part][0]))
    assert float(m3["runtime_reserve"][0]) == float(m1["runtime_reserve"][0])
    # throughput counts the three jobs' images
    assert float(r3.tokens_per_s[0]) == pytest.approx(3 * 32 / float(r3.step_time_s[0]))


def test_the_largest_fused_count_that_fits_is_an_answer(a100, make_system):
    system = make_system(1)
    counts = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512]
    n = len(counts)
    result = evaluate(stack_designs([a100] * n, [system] * n, [RESNET18_CIFAR] * n,
                                    [fused(b, dataclasses.replace(ONE, micro_batch_size=128, global_batch_size=128))
                                     for b in counts]))
    reasons = result.reason.tolist()
    assert reasons[0] == Reason.OK and reasons[-1] == Reason.OUT_OF_MEMORY
    fits = [b for b, r in zip(counts, reasons) if r == Reason.OK]
    assert fits == counts[:len(fits)]  # feasible up to a largest count, not beyond
    assert torch.isfinite(result.step_time_s).all()


def test_fusing_needs_single_device_jobs(a100, make_system):
    result = evaluate(single_design(a100, make_system(2), RESNET18_CIFAR,
                                    fused(2, dataclasses.replace(ONE, global_batch_size=64))))
    assert int(result.reason[0]) == Reason.FUSED_JOBS_INVALID


def test_one_job_leaves_every_design_as_it_was(a100, make_system, small_gpt):
    """fused_jobs=1 beside fused designs: its values are those it has alone (bit for bit)."""
    system = make_system(1)
    gpt = MappingSpec(name="g", micro_batch_size=1, global_batch_size=8)
    alone = evaluate(single_design(a100, system, small_gpt, gpt))
    mixed = evaluate(stack_designs([a100] * 2, [system] * 2, [small_gpt, RESNET18_CIFAR], [gpt, fused(4)]))
    for name in ("step_time_s", "energy_j", "memory_per_device_bytes", "model_flops"):
        assert torch.equal(getattr(mixed, name)[:1], getattr(alone, name)), name


@pytest.mark.parametrize("value", [0, -2, 1.5])
def test_a_bad_fused_count_is_named(value):
    with pytest.raises(SpecError) as err:
        MappingSpec(name="bad", fused_jobs=value).validate()
    assert err.value.field == "fused_jobs"


def test_the_comparison_with_serial_jobs_is_one_batched_evaluation(a100, make_system):
    from analytical.fused import fused_comparison

    system = make_system(1)
    design = single_design(a100, system, RESNET18_CIFAR, fused(8))
    out = fused_comparison(design, max_jobs=64)
    one, eight = (evaluate(single_design(a100, system, RESNET18_CIFAR, fused(b))) for b in (1, 8))
    assert out["serial_step_time_s"] == pytest.approx(8 * float(one.step_time_s[0]))
    assert out["fused_step_time_s"] == pytest.approx(float(eight.step_time_s[0]))
    assert out["speedup_vs_serial"] == pytest.approx(8 * float(one.step_time_s[0]) / float(eight.step_time_s[0]))
    assert out["fused_energy_per_job_j"] == pytest.approx(float(eight.energy_j[0]) / 8)
    assert out["largest_fused_jobs"] == 64 and out["searched_up_to"] == 64  # all of them fit in 80 GB
    tight = fused_comparison(single_design(dataclasses.replace(a100, hbm_gib=4.0), system, RESNET18_CIFAR, fused(2)))
    ok = [int(b) for b in range(1, 65)
          if int(evaluate(single_design(dataclasses.replace(a100, hbm_gib=4.0), system, RESNET18_CIFAR,
                                        fused(b))).reason[0]) == Reason.OK]
    assert tight["largest_fused_jobs"] == max(ok)
