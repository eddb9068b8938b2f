"""Eager PyTorch ops beside the fused kernels: a clamped GLU and biased experts (gpt-oss).

Megatron-Core clamps the GLU's halves and concatenates them before its fused activation
(`fused_bias_geglu.py:424-432`), and adds each expert's output bias times the routing probability in a
Python loop over the local experts (`TEGroupedMLP._apply_bias`); a fused grouped MLP
(`MappingSpec.fused_expert_mlp`) does both inside its kernels."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from analytical import MappingSpec, ModelSpec, SpecError, evaluate
from analytical.search import mapping_from_batch
from analytical.step.eager_ops import BIAS_PASSES, CLAMP_PASSES, eager_ops
from deepflow.presets import load_preset

MAPPING = MappingSpec(ep=8, micro_batch_size=4, global_batch_size=256, distributed_optimizer=True)


@pytest.fixture(scope="module")
def oss() -> ModelSpec:
    return load_preset("model", "gpt-oss-120b")


@pytest.fixture(scope="module")
def b200():
    return load_preset("hardware", "b200")


def plain(model: ModelSpec) -> ModelSpec:
    return dataclasses.replace(model, activation_clamp=0.0, linear_bias=False)


def test_the_preset_is_clamped_and_biased(oss):
    assert (oss.activation_clamp, oss.linear_bias) == (7.0, True)


def test_bytes_and_kernels_follow_the_op_sequence(design, b200, system, oss):
    ops = eager_ops(design(b200, system, oss, MAPPING))
    tokens = MAPPING.micro_batch_size * oss.seq_length  # tp 1, cp 1; bf16 activations: 2 bytes
    up_out = 2.0 * 2.0 * tokens * oss.top_k * oss.expert_ffn_size  # gate and linear halves
    experts_out = 2.0 * tokens * oss.top_k * oss.hidden_size
    local_experts = oss.num_experts / MAPPING.ep
    assert float(ops.forward_bytes[0]) == pytest.approx(CLAMP_PASSES[0] * up_out + BIAS_PASSES[0] * experts_out)
    assert float(ops.backward_bytes[0]) == pytest.approx(CLAMP_PASSES[1] * up_out + BIAS_PASSES[1] * experts_out)
    assert float(ops.recompute_bytes[0]) == pytest.approx(CLAMP_PASSES[0] * up_out)
    assert float(ops.forward_kernels[0]) == 3.0 + 2.0 * local_experts + 1.0
    assert float(ops.backward_kernels[0]) == 3.0 + 2.0 * local_experts


def test_each_feature_alone_and_the_fused_grouped_mlp(design, b200, system, oss):
    base = eager_ops(design(b200, system, oss, MAPPING))
    clamp_only = eager_ops(design(b200, system, dataclasses.replace(oss, linear_bias=False), MAPPING))
    bias_only = eager_ops(design(b200, system, dataclasses.replace(oss, activation_clamp=0.0), MAPPING))
    total = float(clamp_only.forward_bytes[0]) + float(bias_only.forward_bytes[0])
    assert 0 < float(clamp_only.forward_bytes[0]) < total
    assert float(base.forward_bytes[0]) == pytest.approx(total)
    assert float(bias_only.recompute_bytes[0]) == 0.0  # the bias follows the activation: not recomputed
    for zero in (eager_ops(design(b200, system, plain(oss), MAPPING)),
                 eager_ops(design(b200, system, oss, dataclasses.replace(MAPPING, fused_expert_mlp=True)))):
        assert all(float(getattr(zero, f.name)[0]) == 0.0 for f in dataclasses.fields(zero))
    # biases of a dense model are fused into its GEMMs and bias-activation kernels: nothing
    dense = dataclasses.replace(oss, num_experts=1, top_k=1, activation_clamp=0.0)
    assert float(eager_ops(design(b200, system, dense, MappingSpec(global_batch_size=256))).forward_bytes[0]) == 0.0


def test_the_eager_ops_lengthen_the_step_and_add_hbm_energy(run, b200, system, oss):
    eager, without = run(b200, system, oss, MAPPING), run(b200, system, plain(oss), MAPPING)
    fused = run(b200, system, oss, dataclasses.replace(MAPPING, fused_expert_mlp=True))
    assert float(eager.step_time_s[0]) > float(without.step_time_s[0])
    assert float(fused.step_time_s[0]) == float(without.step_time_s[0])
    assert eager.row(0)["energy_breakdown"]["hbm"] > without.row(0)["energy_breakdown"]["hbm"]
    # selective recompute re-runs the clamp with the activation
    selective = dataclasses.replace(MAPPING, recompute="selective")
    assert run(b200, system, oss, selective).row(0)["breakdown"]["recompute"] > \
        run(b200, system, plain(oss), selective).row(0)["breakdown"]["recompute"]


def test_a_batch_mixing_designs_prices_each_alone(b200, system, oss):
    from analytical import stack_designs
    specs = [(oss, MAPPING), (plain(oss), MAPPING), (oss, dataclasses.replace(MAPPING, fused_expert_mlp=True))]
    batch = stack_designs([b200] * 3, [system] * 3, [m for m, _ in specs], [p for _, p in specs])
    together = evaluate(batch).step_time_s
    alone = torch.cat([evaluate(stack_designs([b200], [system], [m], [p])).step_time_s for m, p in specs])
    assert torch.allclose(together, alone, rtol=1e-12)


def test_mapping_from_a_batch_keeps_the_fused_grouped_mlp(design, b200, system, oss):
    mapping = dataclasses.replace(MAPPING, dp=1, fused_expert_mlp=True)
    assert mapping_from_batch(design(b200, system, oss, mapping), 0).fused_expert_mlp is True


@pytest.mark.parametrize("spec, field, value", [("model", "activation_clamp", -1.0), ("model", "linear_bias", 2),
                                                ("mapping", "fused_expert_mlp", "yes")])
def test_bad_values_name_the_field(oss, spec, field, value):
    target = oss if spec == "model" else MAPPING
    with pytest.raises(SpecError) as err:
        dataclasses.replace(target, **{field: value}).validate()
    assert field in str(err.value)
