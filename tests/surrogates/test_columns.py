"""Named design columns <-> unit cube, the space as JSON, and the samples table (no MLflow here)."""

from __future__ import annotations

import dataclasses
import json
import warnings

import numpy as np
import pandas as pd
import pytest
import torch

from analytical.specs import SpecError
from analytical.step.model import TIME_PARTS
from deepflow.config import compose_config, space_from_config
from surrogates.columns import (
    CHIP_PREFIX,
    ENCODING_PREFIX,
    DesignColumns,
    ExtrapolationWarning,
    read_samples,
    samples_frame,
    space_from_dict,
    space_json,
    space_to_dict,
    template_design,
    write_samples,
)


def shipped_space(name: str):
    return space_from_config(compose_config([f"space={name}"], config_name="sample"))


@pytest.fixture(scope="module", params=["hardware-mapping", "joint"])
def space(request):
    return shipped_space(request.param)


@pytest.fixture(scope="module")
def samples(space):
    u = space.sample(400, seed=3)
    return u, samples_frame(space, u, space.evaluate(u))


def test_named_columns_encode_back_to_the_canonical_point(space, samples):
    u, df = samples
    columns = DesignColumns.from_space(space)
    X = columns.encode(df[columns.names], warn=False)
    assert torch.equal(X, space.encode(space.decode(u)))
    assert np.array_equal(X.numpy(), df[[ENCODING_PREFIX + n for n in columns.names]].to_numpy())
    # categorical names are strings, grids integers
    for p in space.parameters:
        if p.kind == "categorical" and isinstance(p.choices[0], str):
            assert set(df[p.name]) <= set(p.choices)
        elif p.kind in ("integer", "log2"):
            assert df[p.name].dtype == np.int64


def test_samples_carry_the_derived_chip_of_a_chip_space(space, samples):
    u, df = samples
    chip_columns = [c for c in df.columns if c.startswith(CHIP_PREFIX)]
    if space.chip is None:  # hardware-mapping: the accelerator is in the design columns
        assert chip_columns == []
        return
    batch, derived = space.to_batch_and_chip(u)
    for name in ("peak_bf16_flops_per_s", "hbm_bw_bytes_per_s", "hbm_bytes", "tdp_w", "vdd_v", "clock_hz"):
        assert CHIP_PREFIX + name in chip_columns
    built = derived.feasible.numpy()
    assert built.any()
    np.testing.assert_array_equal(df["chip_peak_bf16_flops_per_s"].to_numpy()[built],
                                  batch.peak_bf16_flops_per_s.numpy()[built])
    assert (df.loc[built, "chip_peak_bf16_flops_per_s"] > 0).all()


def test_space_json_rebuilds_the_same_designs(space, samples):
    u, df = samples
    again = space_from_dict(json.loads(space_json(space)))
    assert again.names == space.names
    a, b = space.evaluate(u), again.evaluate(u)
    assert torch.allclose(a.step_time_s, b.step_time_s, rtol=1e-12)
    assert torch.equal(a.reason, b.reason)


# DesignBatch's fields when `ADDED_FIELD_DEFAULTS` began (space format 1): every field added since must
# take a default there, or an older record no longer loads (the regression fixed at d4339a0)
FORMAT_1_FIELDS = frozenset((
    "peak_fp32_flops_per_s", "peak_tf32_flops_per_s", "peak_fp16_flops_per_s", "peak_bf16_flops_per_s",
    "peak_fp8_flops_per_s", "peak_fp4_flops_per_s", "compute_units", "sram_bytes", "sram_bw_bytes_per_s",
    "hbm_bytes", "hbm_bw_bytes_per_s", "scale_up_bw_bytes_per_s", "scale_out_bw_bytes_per_s", "kernel_launch_s",
    "tile_m", "tile_n", "tdp_w", "flop_energy_fp32_j", "flop_energy_tf32_j", "flop_energy_fp16_j",
    "flop_energy_bf16_j", "flop_energy_fp8_j", "flop_energy_fp4_j", "sram_energy_j_per_byte",
    "hbm_energy_j_per_byte", "scale_up_energy_j_per_byte", "scale_out_energy_j_per_byte", "static_power_w",
    "num_devices", "devices_per_node", "scale_up_domain", "topology", "scale_up_latency_s", "scale_out_latency_s",
    "oversubscription", "ps_server_bw_bytes_per_s", "ps_server_sum_bytes_per_s", "straggler_cv", "kind",
    "num_layers", "hidden_size", "num_heads", "num_kv_heads", "ffn_hidden_size", "ffn_type", "vocab_size",
    "seq_length", "num_experts", "top_k", "moe_ffn_hidden_size", "num_shared_experts", "gemm_m", "gemm_n",
    "gemm_k", "cnn_arch", "image_size", "num_classes", "tp", "pp", "dp", "cp", "ep", "vp", "sequence_parallel",
    "micro_batch_size", "global_batch_size", "recompute", "zero_stage", "fsdp", "distributed_optimizer",
    "precision", "flash_attention", "overlap_dp_comm", "overlap_tp_comm", "overlap_pp_comm", "offload_layers",
    "fused_jobs", "dp_mode", "ps_shards", "staleness", "fused_cross_entropy", "recompute_layers",
    "grad_reduce_in_fp32", "etp"))


def test_every_field_newer_than_format_1_has_a_default_for_older_records():
    from analytical.design import DesignBatch
    from surrogates.columns import ADDED_FIELD_DEFAULTS

    fields = {f.name for f in dataclasses.fields(DesignBatch)}
    assert fields - FORMAT_1_FIELDS == set(ADDED_FIELD_DEFAULTS), \
        "a DesignBatch field added after space format 1 needs an ADDED_FIELD_DEFAULTS entry"
    assert FORMAT_1_FIELDS <= fields


def test_a_record_written_before_the_newer_fields_rebuilds_the_same_designs(space, samples):
    """A surrogate's space record from before head_dim, router groups and the EP dispatcher existed
    loads with the defaults that leave its designs as they were; another missing field is an error."""
    from surrogates.columns import ADDED_FIELD_DEFAULTS

    u, _ = samples
    record = json.loads(space_json(space))
    for name in ADDED_FIELD_DEFAULTS:
        record["template"].pop(name)
    old = space_from_dict(record)
    assert torch.equal(old.evaluate(u).step_time_s, space.evaluate(u).step_time_s)
    record["template"].pop("hidden_size")
    with pytest.raises(SpecError, match="hidden_size"):
        space_from_dict(record)


def test_the_record_keeps_the_constants_the_designs_were_labelled_with(space, samples):
    """A space evaluated with a calibration's constants comes back with them (so `query verify=true`
    checks a surrogate against the model that labelled its samples); a bad constant names the field."""
    import dataclasses

    u, _ = samples
    calibrated = dataclasses.replace(space, efficiency=dataclasses.replace(space.efficiency, gemm_peak_fraction=0.5))
    again = space_from_dict(json.loads(space_json(calibrated)))
    assert again.efficiency == calibrated.efficiency
    assert torch.equal(again.evaluate(u).step_time_s, calibrated.evaluate(u).step_time_s)
    record = json.loads(space_json(space))
    record["efficiency"]["gemm_peak_fractoin"] = 0.5
    with pytest.raises(SpecError, match="gemm_peak_fractoin"):
        space_from_dict(record)


def test_samples_keep_infeasible_rows_with_their_reason(space, samples):
    u, df = samples
    assert len(df) == u.shape[0]
    assert (~df["feasible"]).any() and df["feasible"].any()
    assert set(df.loc[df["feasible"], "reason"]) == {"ok"}
    assert "ok" not in set(df.loc[~df["feasible"], "reason"])
    parts = df[[f"time_{p}_s" for p in TIME_PARTS]].sum(axis=1)
    np.testing.assert_allclose(parts, df["step_time_s"], rtol=1e-9)
    for column in ("step_time_s", "memory_per_device_bytes", "mfu", "energy_j", "dp"):
        assert column in df and np.isfinite(df[column]).all()


def test_parquet_carries_the_space(tmp_path, space, samples):
    _, df = samples
    path = tmp_path / "s.parquet"
    write_samples(df, space, path)
    back, record = read_samples(path)
    pd.testing.assert_frame_equal(back, df, check_dtype=False)
    assert record == space_to_dict(space)
    plain = tmp_path / "plain.parquet"
    df.to_parquet(plain)
    with pytest.raises(SpecError, match="deepflow sample"):
        read_samples(plain)


def test_unknown_and_missing_columns_are_named(space, samples):
    _, df = samples
    columns = DesignColumns.from_space(space)
    designs = df[columns.names].head(3)
    with pytest.raises(SpecError, match="unknown column.*bogus"):
        columns.encode(designs.assign(bogus=1.0))
    with pytest.raises(SpecError, match=f"missing column.*{columns.names[0]}"):
        columns.encode(designs.drop(columns=columns.names[0]))


def test_off_grid_values_and_unknown_categories_are_named():
    space = shipped_space("hardware-mapping")
    columns = DesignColumns.from_space(space)
    design = pd.DataFrame([template_design(space_to_dict(space))])
    with pytest.raises(SpecError, match="tp.*powers of two"):
        columns.encode(design.assign(tp=3))
    with pytest.raises(SpecError, match="recompute.*'sometimes'.*none, selective, full"):
        columns.encode(design.assign(recompute="sometimes"))
    with pytest.raises(SpecError, match="zero_stage"):
        columns.encode(design.assign(zero_stage=5))
    with pytest.raises(SpecError, match="hbm_bytes.*finite"):
        columns.encode(design.assign(hbm_bytes="lots"))


def test_outside_the_trained_range_warns_naming_the_column():
    space = shipped_space("hardware-mapping")
    design = pd.DataFrame([template_design(space_to_dict(space))])
    trained = DesignColumns.from_space(space, ranges={"hbm_bytes": (40 * 2.0**30, 100 * 2.0**30)})
    with warnings.catch_warnings():
        warnings.simplefilter("error", ExtrapolationWarning)
        inside = trained.encode(design)  # 80 GiB: inside
    with pytest.warns(ExtrapolationWarning, match=r"extrapolates.*hbm_bytes"):
        outside = trained.encode(design.assign(hbm_bytes=150 * 2.0**30))
    i = space.names.index("hbm_bytes")
    assert outside[0, i] > inside[0, i]
    # beyond the space's own grid: encoded past 1 (linearly in bins), with a warning
    with pytest.warns(ExtrapolationWarning, match="tp"):
        far = trained.encode(design.assign(tp=128))
    assert far[0, space.names.index("tp")] > 1.0


def test_template_design_is_a_valid_design_of_the_space():
    for name in ("hardware-mapping", "joint", "mapping-only"):
        space = shipped_space(name)
        record = space_to_dict(space)
        design = pd.DataFrame([template_design(record)])
        u = DesignColumns.from_space(space).encode(design, warn=False)
        assert u.shape == (1, space.dim)
