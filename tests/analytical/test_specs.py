"""analytical.specs: validation names the offending field; analytical.build.spec_from_dict rejects unknown keys."""

from __future__ import annotations

import pytest

from analytical import AcceleratorSpec, MappingSpec, ModelSpec, SpecError, SystemSpec
from analytical.build import spec_from_dict


def raises_naming(field: str, spec) -> SpecError:
    with pytest.raises(SpecError) as info:
        spec.validate()
    assert info.value.field == field
    assert field in str(info.value)
    return info.value


def test_fixture_specs_are_valid(a100, h100, system, gpt3, llama7b, llama_gqa, mixtral, lstm, gemm_model):
    for spec in (a100, h100, system, gpt3, llama7b, llama_gqa, mixtral, lstm, gemm_model, MappingSpec()):
        assert spec.validate() is spec


def test_negative_hidden_size(gpt3, replace):
    error = raises_naming("hidden_size", replace(gpt3, hidden_size=-12288))
    assert "-12288" in str(error) and "model[gpt3-175b-test]" in str(error)


@pytest.mark.parametrize("value", [0, 2.5, True, "4096"])
def test_hidden_size_must_be_a_positive_integer(gpt3, replace, value):
    raises_naming("hidden_size", replace(gpt3, hidden_size=value))


def test_unknown_precision():
    error = raises_naming("precision", MappingSpec(precision="fp4"))
    assert "fp4" in str(error) and "bf16" in str(error)  # names the allowed values


def test_unknown_topology(system, replace):
    error = raises_naming("topology", replace(system, topology="dragonfly"))
    assert "fat-tree" in str(error)


def test_zero_stage_4():
    raises_naming("zero_stage", MappingSpec(zero_stage=4))
    raises_naming("zero_stage", MappingSpec(zero_stage=-1))


def test_top_k_above_num_experts(mixtral, replace):
    raises_naming("top_k", replace(mixtral, top_k=9))


def test_num_heads_not_dividing_hidden(gpt3, replace):
    raises_naming("num_heads", replace(gpt3, num_heads=100))


def test_kv_heads_not_dividing_heads(llama_gqa, replace):
    raises_naming("num_kv_heads", replace(llama_gqa, num_kv_heads=6))


def test_unknown_kind_and_ffn_type(gpt3, replace):
    raises_naming("kind", replace(gpt3, kind="mamba"))
    raises_naming("ffn_type", replace(gpt3, ffn_type="relu"))


def test_unknown_recompute():
    raises_naming("recompute", MappingSpec(recompute="partial"))


@pytest.mark.parametrize("field,value", [("tp", 0), ("pp", -2), ("micro_batch_size", 0), ("dp", 0), ("vp", 1.5)])
def test_mapping_degrees(field, value):
    raises_naming(field, MappingSpec(**{field: value}))


def test_mapping_flags_must_be_bools():
    raises_naming("sequence_parallel", MappingSpec(sequence_parallel=1))


@pytest.mark.parametrize("field,value", [("hbm_gib", 0.0), ("hbm_bw_gb_per_s", -1.0), ("compute_units", 0),
                                         ("tile_m", 0), ("peak_tflops_fp8", -1.0), ("kernel_launch_us", float("nan"))])
def test_accelerator_fields(a100, replace, field, value):
    raises_naming(field, replace(a100, **{field: value}))


def test_accelerator_needs_one_supported_precision(a100, replace):
    no_peak = replace(a100, peak_tflops_fp32=0.0, peak_tflops_tf32=0.0, peak_tflops_fp16=0.0, peak_tflops_bf16=0.0)
    raises_naming("peak_tflops_*", no_peak)


def test_system_fields(system, replace):
    raises_naming("oversubscription", replace(system, oversubscription=0.5))
    raises_naming("scale_up_domain", replace(system, scale_up_domain=4))  # smaller than a node
    assert replace(system, topology="torus", scale_up_domain=4).validate()  # torus: allowed
    raises_naming("scale_out_gbit_per_device", replace(system, scale_out_gbit_per_device=0.0))
    raises_naming("num_devices", replace(system, num_devices=0))


@pytest.mark.parametrize("field, largest", [("num_devices", 2**24), ("devices_per_node", 2**24),
                                            ("scale_up_domain", 2**24)])
def test_device_counts_end_at_2_pow_24(system, replace, field, largest):
    big = replace(system, num_devices=largest, devices_per_node=8, scale_up_domain=largest)
    assert replace(big, **{field: largest}).validate()  # the largest count is a valid spec
    error = raises_naming(field, replace(big, **{field: largest + 1}))
    assert "16,777,216" in error.allowed
    error = raises_naming(field, replace(big, **{field: 99999999999999999999}))
    assert str(error) == (f"system[{system.name}].{field} = 99999999999999999999 is invalid: allowed an integer "
                          f"from 1 to 16,777,216 (2**24: above any cluster built)")


@pytest.mark.parametrize("spec, field", [(ModelSpec(), "num_layers"), (ModelSpec(), "hidden_size"),
                                         (ModelSpec(), "seq_length"), (MappingSpec(), "global_batch_size"),
                                         (MappingSpec(), "micro_batch_size"), (MappingSpec(), "tp"),
                                         (MappingSpec(), "ps_shards")])
def test_sizes_beyond_any_model_or_cluster_name_the_field(replace, spec, field):
    raises_naming(field, replace(spec, **{field: 2**40}))


def test_a_design_beyond_any_cluster_is_refused_by_the_python_api(a100, system, gpt3, replace):
    from analytical import single_design

    with pytest.raises(SpecError) as info:
        single_design(a100, replace(system, num_devices=10**20), gpt3, MappingSpec(tp=8, pp=8))
    assert info.value.field == "num_devices" and "16,777,216" in str(info.value)


def test_spec_from_dict_builds_and_validates():
    spec = spec_from_dict(ModelSpec, {"name": "tiny", "num_layers": 2, "hidden_size": 64, "num_heads": 4,
                                      "vocab_size": 100, "seq_length": 32}, "model[tiny]")
    assert isinstance(spec, ModelSpec) and spec.hidden_size == 64
    with pytest.raises(SpecError) as info:
        spec_from_dict(ModelSpec, {"hidden_size": -1}, "model[x]")
    assert info.value.field == "hidden_size"


@pytest.mark.parametrize("cls,key", [(ModelSpec, "hidden"), (MappingSpec, "tensor_parallel"),
                                     (AcceleratorSpec, "peak_tflops"), (SystemSpec, "nodes")])
def test_spec_from_dict_rejects_unknown_key(cls, key):
    with pytest.raises(SpecError) as info:
        spec_from_dict(cls, {key: 1}, "spec[x]")
    assert info.value.field == key
    assert key in str(info.value)
    # the message lists the known fields
    assert "name" in info.value.allowed


def test_spec_error_is_a_value_error():
    assert issubclass(SpecError, ValueError)


def test_head_dim_must_be_a_positive_integer_and_frees_the_head_count():
    with pytest.raises(SpecError) as info:
        ModelSpec(hidden_size=2880, num_heads=64, head_dim=0).validate()
    assert info.value.field == "head_dim"
    with pytest.raises(SpecError) as info:
        ModelSpec(hidden_size=2880, num_heads=128).validate()  # 2880 / 128 is not a whole head
    assert info.value.field == "num_heads" and "head_dim" in str(info.value)
    ModelSpec(hidden_size=2880, num_heads=128, head_dim=64).validate()
