"""Convolutional networks (`kind: cnn`): layer tables against published counts, implicit-GEMM
shapes, memory, mapping rules and bad input."""

from __future__ import annotations

import pytest
import torch

from analytical import MappingSpec, ModelSpec, evaluate, single_design, stack_designs
from analytical.codes import Reason
from analytical.specs import SpecError
from analytical.step.cnn import WINOGRAD_MULTIPLY_REDUCTION, cnn_terms, executed_gemms
from analytical.step.workload import GEMM_SLOTS, layer_gemms, total_params

DP = MappingSpec(name="dp", micro_batch_size=32, global_batch_size=32, precision="fp32", flash_attention=False)


def cnn(arch: str, image: int = 224, classes: int = 1000) -> ModelSpec:
    return ModelSpec(name=arch, kind="cnn", cnn_arch=arch, image_size=image, num_classes=classes)


# (network, input size, classes, published parameters, published multiply-accumulates per sample, source)
PUBLISHED = [
    ("resnet18", 224, 1000, 11_689_512, 1.81e9),  # torchvision ResNet18_Weights.IMAGENET1K_V1
    ("resnet34", 224, 1000, 21_797_672, 3.66e9),  # torchvision ResNet34_Weights.IMAGENET1K_V1
    ("resnet50", 224, 1000, 25_557_032, 4.09e9),  # torchvision ResNet50_Weights.IMAGENET1K_V1
    ("vgg16", 224, 1000, 138_357_544, 15.47e9),  # torchvision VGG16_Weights.IMAGENET1K_V1
    ("pointnet_cls", 1024, 40, 3.5e6, 440e6),  # Qi et al. CVPR 2017, Table 6 (rounded to 2 digits)
]


@pytest.mark.parametrize("arch,image,classes,params,macs", PUBLISHED)
def test_parameters_and_flops_per_sample_match_the_published_counts(a100, system, arch, image, classes, params, macs):
    design = single_design(a100, system, cnn(arch, image, classes), DP)
    result = evaluate(design)
    # model FLOPs of a step = 3 x forward (forward + backward) x 2 FLOPs per multiply-accumulate
    macs_per_sample = float(result.model_flops[0]) / (6.0 * DP.global_batch_size)
    tolerance = 0.02 if params != round(params, -5) else 0.01  # the PointNet counts are rounded
    assert macs_per_sample == pytest.approx(macs, rel=0.02)
    assert float(total_params(design)[0]) == pytest.approx(params, rel=tolerance)


def test_a_convolution_is_an_implicit_gemm(a100, system):
    """ResNet's stem, 7x7/2 with 3 input channels at 224: (b 112^2) x 64 outputs reducing over 3 x 49."""
    gemms = layer_gemms(single_design(a100, system, cnn("resnet18"), DP))
    first = len(GEMM_SLOTS)
    assert float(gemms.m[0, first]) == 32 * 112 * 112
    assert float(gemms.n[0, first]) == 64 and float(gemms.k[0, first]) == 3 * 49
    assert float(gemms.m[0, :first].abs().sum()) == 0.0  # no Transformer slot is used


def test_only_two_dimensional_3x3_stride_1_convolutions_are_winograd(a100, system):
    vgg = cnn_terms(single_design(a100, system, cnn("vgg16"), DP))
    assert float(vgg.winograd[0].sum()) == 13  # VGG-16's 13 convolutions (3x3, stride 1), not its 3 FC layers
    resnet = cnn_terms(single_design(a100, system, cnn("resnet18"), DP))
    # ResNet-18's 16 3x3 convolutions less the 3 that open a downsampling stage with stride 2; not the 7x7/2
    # stem, the 3 1x1/2 shortcuts or the classifier (21 slots)
    assert float(resnet.winograd[0].sum()) == 13 and float(resnet.winograd[0, 0]) == 0.0
    assert int((resnet.n[0] > 0).sum()) == 21
    pointnet = cnn_terms(single_design(a100, system, cnn("pointnet_cls", 1024, 40), DP))
    assert float(pointnet.winograd[0].sum()) == 0.0  # width-1 kernels over points


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_fp32_convolutions_run_with_winograd_multiplies_and_keep_their_model_flops(a100, system, precision):
    """In fp32 (CUDA cores) a 3x3 stride-1 convolution executes 16/36 of the direct multiplies (Winograd F(2x2,
    3x3), Lavin & Gray 2016): the step's GEMM work shrinks, its model FLOPs (MFU) do not; on tensor cores
    (fp16) the implicit GEMM runs as it is."""
    mapping = MappingSpec(name="m", micro_batch_size=32, global_batch_size=32, precision=precision,
                          flash_attention=False)
    design = single_design(a100, system, cnn("vgg16"), mapping)
    direct = layer_gemms(design)
    executed = executed_gemms(design, direct)
    winograd = cnn_terms(design).winograd[0]
    first = len(GEMM_SLOTS)
    flops = 2.0 * direct.m[0, first:] * direct.n[0, first:] * direct.k[0, first:]
    expected = (flops * (1.0 - winograd * (1.0 - WINOGRAD_MULTIPLY_REDUCTION))).sum() if precision == "fp32" \
        else flops.sum()
    assert float(executed.flops()[0]) == pytest.approx(float(expected))
    assert float(direct.flops()[0]) == pytest.approx(float(flops.sum()))
    result = evaluate(design)
    assert float(result.model_flops[0]) / (6.0 * 32) == pytest.approx(15.47e9, rel=0.02)  # direct MACs, as published


def test_an_fp32_vgg_step_computes_faster_than_direct_convolution_at_peak(a100, system):
    """BytePS's V100 clusters trained VGG-16 (fp32) at 17 TFLOPS of direct-convolution work on 15.7 TFLOPS
    parts (experiments/validation/ps_vs_allreduce.csv): only a fast algorithm does that, and the model's
    fp32 step now does too."""
    mapping = MappingSpec(name="dp8", micro_batch_size=32, global_batch_size=256, precision="fp32",
                          flash_attention=False)
    result = evaluate(single_design(a100, system, cnn("vgg16"), mapping))  # 8 devices, 32 images each
    assert bool(result.feasible[0])
    compute_s = float(result.time_breakdown_s["forward_compute"][0] + result.time_breakdown_s["backward_compute"][0])
    direct_at_peak_s = float(result.model_flops[0]) / 8 / (a100.peak_tflops_fp32 * 1e12)
    assert compute_s < direct_at_peak_s
    assert float(result.mfu[0]) > 1.0  # MFU counts the direct convolution's FLOPs (as the published counts do)


def test_a_cifar_image_shrinks_every_layer(a100, system):
    big, small = (cnn_terms(single_design(a100, system, cnn("resnet18", size, 10), DP)) for size in (224, 32))
    assert float(small.params[0]) == float(big.params[0])  # the classifier is the same (10 classes) both times
    assert float(big.m[0, 0]) / float(small.m[0, 0]) == pytest.approx((112 / 16) ** 2)
    assert float(small.kept_elements[0]) < float(big.kept_elements[0]) / 40


def test_activations_grow_with_the_micro_batch_and_max_pool_keeps_its_indices(a100, system):
    def activations(batch: int) -> float:
        mapping = MappingSpec(name="m", micro_batch_size=batch, global_batch_size=batch, precision="fp32",
                              flash_attention=False)
        result = evaluate(single_design(a100, system, cnn("vgg16"), mapping))
        return float(result.memory_breakdown_bytes["activations"][0])

    assert activations(16) == pytest.approx(2.0 * activations(8))
    terms = cnn_terms(single_design(a100, system, cnn("vgg16"), DP))
    # five 2x2 max pools on 224: 64x112^2 + 128x56^2 + 256x28^2 + 512x14^2 + 512x7^2 outputs, 8 bytes each
    pooled = 64 * 112**2 + 128 * 56**2 + 256 * 28**2 + 512 * 14**2 + 512 * 7**2
    assert float(terms.index_bytes[0]) == 8.0 * pooled


def test_data_parallel_training_reduces_the_gradients(a100, make_system):
    mapping = MappingSpec(name="dp8", micro_batch_size=32, global_batch_size=256, precision="fp16",
                          flash_attention=False)
    result = evaluate(single_design(a100, make_system(8), cnn("resnet50"), mapping))
    assert bool(result.feasible[0])
    assert float(result.time_breakdown_s["dp_comm"][0]) > 0.0
    assert float(result.tokens_per_s[0]) == pytest.approx(256 / float(result.step_time_s[0]))


def test_a_transformer_gets_the_same_answer_beside_a_cnn(a100, system, small_gpt):
    gpt_mapping = MappingSpec(name="g", micro_batch_size=1, global_batch_size=8)
    alone = evaluate(single_design(a100, system, small_gpt, gpt_mapping))
    mixed = evaluate(stack_designs([a100, a100], [system, system], [small_gpt, cnn("resnet50")], [gpt_mapping, DP]))
    assert torch.equal(mixed.step_time_s[:1], alone.step_time_s)
    assert torch.equal(mixed.energy_j[:1], alone.energy_j)
    assert torch.equal(mixed.memory_per_device_bytes[:1], alone.memory_per_device_bytes)


@pytest.mark.parametrize("change", [dict(tp=2), dict(pp=2), dict(recompute="full")])
def test_a_cnn_trains_data_parallel_only(a100, make_system, change):
    mapping = MappingSpec(**dict(dict(name="x", micro_batch_size=32, global_batch_size=32, precision="fp32",
                                      flash_attention=False), **change))
    result = evaluate(single_design(a100, make_system(2 if "recompute" not in change else 1), cnn("resnet18"), mapping))
    assert int(result.reason[0]) == Reason.MAPPING_UNSUPPORTED_BY_MODEL


@pytest.mark.parametrize("fields,field", [
    (dict(kind="cnn", cnn_arch="alexnet"), "cnn_arch"),
    (dict(kind="cnn"), "cnn_arch"),
    (dict(kind="transformer", cnn_arch="resnet18"), "cnn_arch"),
    (dict(kind="cnn", cnn_arch="resnet18", seq_length=2), "seq_length"),
    (dict(kind="cnn", cnn_arch="resnet18", image_size=0), "image_size"),
])
def test_bad_cnn_fields_are_named(fields, field):
    with pytest.raises(SpecError) as err:
        ModelSpec(name="bad", **fields).validate()
    assert err.value.field == field
