"""Named design columns <-> the unit cube, and the samples table of a design space.

A surrogate works on unit-cube points `X: n x d`; a person (or a served model) speaks in named
design columns: one column per parameter of the space, SI values, categorical fields with names
(`recompute: "full"`) as strings. `DesignColumns` converts between the two with nothing but the
space's parameter list, which travels as JSON (`space_to_dict`) in the Parquet metadata of the
samples, next to the registered model, and as an MLflow artifact: neither training nor a served
model needs the Hydra config that made the space.

`samples_frame(space, u, result)` is the table `deepflow sample` writes: the decoded design, its
encoding `u_<name>` (the canonical point: bin centres for discrete parameters, so that encoding the
named columns gives the same numbers) and every analytical output (`outputs_frame`).

Bad input (an unknown or missing column, a category or grid value the space does not have) raises
`analytical.specs.SpecError` naming the columns; a value outside the range the surrogate was
trained on warns with an `ExtrapolationWarning` naming the columns and is encoded outside [0, 1].
"""

from __future__ import annotations

import dataclasses
import json
import math
import warnings
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence

import numpy as np
import pandas as pd
import torch

from analytical.chip.spec import ChipSpec
from analytical.codes import DTYPE, Reason
from analytical.design import DesignBatch
from analytical.space import CATEGORY_CODES, DesignSpace, Parameter
from analytical.specs import SpecError
from analytical.step.efficiency import DEFAULT_EFFICIENCY, Efficiency
from analytical.result import StepResult

SPACE_FORMAT_VERSION = 1
# DesignBatch fields newer than format 1's first records, with the value that reproduces those
# records' designs (heads of hidden_size / num_heads, no latent attention, no router group limit, the
# plain all-to-all dispatcher, no EP overlap, no special-function-unit term, no sliding window, no
# fp8 primary weights, no CUDA graphs, 16-bit attention, no clamped GLU, no linear biases, no fused grouped MLP,
# fused element-wise kernels, no YaRN attention factor, the generation's own fused attention kernel, no HSDP,
# dropless MoE, offload copies not priced, fp32 optimizer states and master weights, Transformer Engine's sequence
# parallelism)
ADDED_FIELD_DEFAULTS = {"head_dim": 0.0, "kv_lora_rank": 0.0, "q_lora_rank": 0.0, "qk_rope_head_dim": 0.0,
                        "v_head_dim": 0.0, "moe_router_num_groups": 1.0, "moe_router_group_topk": 1.0,
                        "overlap_ep_comm": 0.0, "ep_dispatcher": 0.0, "peak_exp_per_s": 0.0, "window_size": 0.0,
                        "window_attn_skip_freq": 0.0, "fp8_param_gather": 0.0, "cuda_graph": 0.0,
                        "fp8_attention": 0.0, "activation_clamp": 0.0, "linear_bias": 0.0, "fused_expert_mlp": 0.0,
                        "elementwise": 0.0, "rope_mscale": 1.0, "attention_kernel": 0.0, "dp_shard": 0.0,
                        "moe_capacity_factor": 0.0, "moe_pad_to_capacity": 0.0,
                        "host_link_bw_bytes_per_s": 0.0, "optimizer_state_dtype": 0.0, "master_params": 0.0,
                        "sp_keeps_gathered_input": 0.0}
PARQUET_SPACE_KEY = b"deepflow.space"
CHIP_PREFIX = "chip_"  # samples columns of a derived chip (samples_frame)
ENCODING_PREFIX = "u_"
# StepResult dictionaries -> column name pattern of each entry
BREAKDOWN_COLUMNS = {"time_breakdown_s": "time_{}_s", "memory_breakdown_bytes": "memory_{}_bytes",
                     "energy_breakdown_j": "energy_{}_j"}


class ExtrapolationWarning(UserWarning):
    """A queried design lies outside the range the surrogate was trained on."""


# --- the space as JSON ----------------------------------------------------------------------------
def space_to_dict(space: DesignSpace) -> dict[str, Any]:
    """The space as plain JSON-ready data: its parameters, its template design (SI floats), its
    chip template (`ChipSpec` fields, None for a space that derives no chip) and the efficiency
    constants its designs are evaluated with (a calibration's, when the samples used one)."""
    params = []
    for p in space.parameters:
        entry = dataclasses.asdict(p)
        entry["choices"] = list(entry["choices"])
        params.append(entry)
    template = {name: float(value[0]) for name, value in space.template.fields().items()}
    chip = dataclasses.asdict(space.chip) if getattr(space, "chip", None) is not None else None
    return {"format_version": SPACE_FORMAT_VERSION, "name": space.name, "parameters": params,
            "template": template, "chip": chip, "efficiency": space.efficiency.as_dict()}


def parameters_from_dict(space: Mapping[str, Any]) -> tuple[Parameter, ...]:
    """The validated parameters of a `space_to_dict` record."""
    if space.get("format_version") != SPACE_FORMAT_VERSION:
        raise SpecError("space", "format_version", space.get("format_version"), str(SPACE_FORMAT_VERSION))
    return tuple(Parameter(**{**p, "choices": tuple(p.get("choices", ()))}).validate() for p in space["parameters"])


def space_from_dict(space: Mapping[str, Any]) -> DesignSpace:
    """The `DesignSpace` of a `space_to_dict` record. Template fields added to `DesignBatch` after
    the record was written take `ADDED_FIELD_DEFAULTS`; any other missing field is a SpecError
    naming it."""
    # fields added to DesignBatch later default to the value that leaves an older record's designs as they were
    template = {**ADDED_FIELD_DEFAULTS, **space.get("template", {})}
    missing = [f.name for f in dataclasses.fields(DesignBatch) if f.name not in template]
    if missing:
        raise SpecError("space", "template", ", ".join(missing), "a value for every DesignBatch field")
    batch = DesignBatch(**{f.name: torch.tensor([float(template[f.name])], dtype=DTYPE)
                           for f in dataclasses.fields(DesignBatch)})
    chip = ChipSpec(**space["chip"]) if space.get("chip") else None
    return DesignSpace(name=str(space["name"]), parameters=parameters_from_dict(space), template=batch,
                       chip=chip, efficiency=_efficiency(space.get("efficiency"))).validate()


def _efficiency(record: Optional[Mapping[str, Any]]) -> Efficiency:
    """The constants of a space record; a record written before they were kept was labelled with
    the defaults of its day, today's defaults are the nearest."""
    if not record:
        return DEFAULT_EFFICIENCY
    known = DEFAULT_EFFICIENCY.as_dict()
    for key, value in record.items():
        if key not in known or isinstance(value, bool) or not isinstance(value, (int, float)):
            raise SpecError("space", f"efficiency.{key}", value, "Efficiency fields with numbers: " + ", ".join(known))
    return dataclasses.replace(DEFAULT_EFFICIENCY, **{k: float(v) for k, v in record.items()})


def template_design(space: Mapping[str, Any]) -> dict[str, Any]:
    """`{column: value}` of the space's template design for every parameter of a `space_to_dict`
    record: SI numbers, category names (chip inputs from the chip template)."""
    out = {}
    for p in parameters_from_dict(space):
        if space.get("chip") and p.name in space["chip"]:
            out[p.name] = space["chip"][p.name]
            continue
        value = float(space["template"][p.name])
        names = _names_of(p)
        out[p.name] = names.get(value, value) if names is not None else (int(value) if value == int(value) else value)
    return out


def space_json(space: DesignSpace) -> str:
    return json.dumps(space_to_dict(space), indent=1)


# --- named columns <-> unit cube --------------------------------------------------------------------
def _names_of(p: Parameter) -> dict[float, str] | None:
    """code -> name for a categorical field whose values have names (recompute, precision, ...)."""
    codes = CATEGORY_CODES.get(p.name)
    return {float(c): n for n, c in codes.items()} if p.kind == "categorical" and codes is not None else None


class DesignColumns:
    """The named columns of a space's parameters and their unit-cube encoding.

    `ranges` (`{name: (low, high)}`, the trained range) makes `encode` warn about designs outside
    it by more than `tolerance` of the parameter's unit interval (so that a design a hair beyond the
    extreme training sample is not called an extrapolation); without it, the space's own bounds are
    the range.
    """

    def __init__(self, parameters: Sequence[Parameter], ranges: Mapping[str, Sequence[float]] | None = None,
                 tolerance: float = 0.01):
        self.parameters = tuple(parameters)
        self.ranges = {k: (float(v[0]), float(v[1])) for k, v in (ranges or {}).items()}
        self.tolerance = tolerance

    @classmethod
    def from_space(cls, space: DesignSpace | Mapping[str, Any], ranges=None) -> "DesignColumns":
        params = space.parameters if isinstance(space, DesignSpace) else parameters_from_dict(space)
        return cls(params, ranges)

    @property
    def names(self) -> list[str]:
        return [p.name for p in self.parameters]

    def is_named(self, name: str) -> bool:
        """Whether the column holds category names (strings) rather than numbers."""
        p = self.parameters[self.names.index(name)]
        return _names_of(p) is not None

    # unit cube -> columns
    def frame(self, u: torch.Tensor) -> pd.DataFrame:
        """`(n, d)` points to a DataFrame of decoded values: names for named categoricals, int64 for
        integer grids, float64 otherwise."""
        columns = {}
        for i, p in enumerate(self.parameters):
            values = p.decode(u[:, i]).numpy()
            names = _names_of(p)
            if names is not None:
                columns[p.name] = pd.array([names[float(v)] for v in values], dtype=object)
            elif p.kind in ("integer", "log2") or (p.kind == "categorical" and np.all(values == np.round(values))):
                columns[p.name] = values.astype(np.int64)
            else:
                columns[p.name] = values
        return pd.DataFrame(columns)

    # columns -> unit cube
    def check_columns(self, df: pd.DataFrame) -> None:
        """SpecError naming unknown or missing design columns."""
        unknown = [c for c in df.columns if c not in self.names]
        missing = [n for n in self.names if n not in df.columns]
        if unknown or missing:
            parts = ([f"unknown column(s) {', '.join(map(str, unknown))}"] if unknown else []) + \
                    ([f"missing column(s) {', '.join(missing)}"] if missing else [])
            raise SpecError("designs", "columns", "; ".join(parts), "exactly the design columns " + ", ".join(self.names))

    def values(self, df: pd.DataFrame) -> dict[str, torch.Tensor]:
        """`{name: (n,)}` SI values / codes of the design columns (numbers or category names)."""
        self.check_columns(df)
        out = {}
        for p in self.parameters:
            column = df[p.name]
            names = _names_of(p)
            if names is not None:
                codes = {n: c for c, n in names.items()}
                bad = sorted({str(v) for v in column if str(v) not in p.choices})
                if bad:
                    raise SpecError("designs", p.name, ", ".join(bad), "one of " + ", ".join(p.choices))
                out[p.name] = torch.tensor([codes[str(v)] for v in column], dtype=DTYPE)
                continue
            numbers = pd.to_numeric(column, errors="coerce").to_numpy(dtype=np.float64)
            if not np.isfinite(numbers).all():
                bad = [str(v) for v, x in zip(column, numbers) if not np.isfinite(x)][:5]
                raise SpecError("designs", p.name, ", ".join(bad), "finite numbers")
            out[p.name] = torch.tensor(numbers, dtype=DTYPE)
        return out

    def encode(self, df: pd.DataFrame, warn: bool = True) -> torch.Tensor:
        """`(n, d)` unit-cube points of the designs of `df` (its columns: exactly `names`).

        Discrete parameters map to the centres of their bins; a grid value the space does not have
        (tp = 3 on a powers-of-two grid, an unknown category) is a SpecError. A value outside the
        trained range is encoded outside [0, 1] (linearly in the parameter's own scale) and, when
        `warn`, raises an `ExtrapolationWarning` naming the columns.
        """
        values = self.values(df)
        out = torch.empty(len(df), len(self.parameters), dtype=DTYPE)
        outside = []
        for i, p in enumerate(self.parameters):
            x = values[p.name]
            out[:, i] = _encode(p, x)
            if _names_of(p) is not None or p.kind == "categorical":
                continue
            low, high = self.ranges.get(p.name, _bounds(p))
            u_low, u_high = _encode(p, torch.tensor([low, high], dtype=DTYPE)).tolist()
            if ((out[:, i] < u_low - self.tolerance) | (out[:, i] > u_high + self.tolerance)).any():
                outside.append(f"{p.name} (trained on {low:.4g}..{high:.4g}, got {float(x.min()):.4g}.."
                               f"{float(x.max()):.4g})")
        if outside and warn:
            warnings.warn(ExtrapolationWarning("the query extrapolates beyond the trained range in "
                                               + "; ".join(outside)), stacklevel=2)
        return out

    def trained_ranges(self, df: pd.DataFrame) -> dict[str, tuple[float, float]]:
        """`{name: (min, max)}` of the numeric design columns of `df` (the rows a model learns)."""
        values = self.values(df)
        return {p.name: (float(values[p.name].min()), float(values[p.name].max()))
                for p in self.parameters if _names_of(p) is None}


def _bounds(p: Parameter) -> tuple[float, float]:
    grid = p.values
    return (float(grid.min()), float(grid.max())) if grid is not None else (p.low, p.high)


def _encode(p: Parameter, x: torch.Tensor) -> torch.Tensor:
    """Unit-interval coordinates of values `x` (`(n,)`), extrapolating linearly beyond the bounds."""
    grid = p.values
    if grid is None:
        if p.high == p.low:
            return torch.zeros_like(x)
        if p.log:
            if (x <= 0).any():
                raise SpecError("designs", p.name, float(x.min()), "values > 0 (a log-scaled parameter)")
            return torch.log(x / p.low) / math.log(p.high / p.low)
        return (x - p.low) / (p.high - p.low)
    k = grid.numel()
    if p.kind == "categorical":
        bad = ~(x.unsqueeze(-1) == grid).any(-1)
        if bad.any():
            raise SpecError("designs", p.name, sorted({float(v) for v in x[bad]}),
                            "one of " + ", ".join(f"{float(v):g}" for v in grid))
        return p.encode(x)
    if p.kind == "log2":
        if (x <= 0).any():
            raise SpecError("designs", p.name, float(x.min()), "powers of two")
        index = torch.log2(x / p.low)
    else:
        index = x - p.low
    bad = (index - torch.round(index)).abs() > 1e-9
    if bad.any():
        allowed = "powers of two" if p.kind == "log2" else "integers"
        raise SpecError("designs", p.name, sorted({float(v) for v in x[bad]})[:5], allowed)
    return (torch.round(index) + 0.5) / k


# --- the samples table ----------------------------------------------------------------------------
def outputs_frame(result: StepResult) -> pd.DataFrame:
    """Every output of a `StepResult` as columns: each `(n,)` tensor under its field name (`reason`
    as its name, e.g. `out_of_memory`) and each breakdown entry as `time_<part>_s`,
    `memory_<part>_bytes`, `energy_<part>_j` (other dictionaries: `<field>_<key>`)."""
    columns: dict[str, Any] = {}
    for f in dataclasses.fields(result):
        value = getattr(result, f.name)
        if isinstance(value, dict):
            pattern = BREAKDOWN_COLUMNS.get(f.name, f.name + "_{}")
            for key, tensor in value.items():
                columns[pattern.format(key)] = tensor.detach().numpy()
        elif f.name == "reason":
            names = {int(r): r.name.lower() for r in Reason}
            columns["reason"] = pd.array([names.get(int(c), f"code_{int(c)}") for c in value.tolist()], dtype=object)
        elif value.dtype == torch.bool:
            columns[f.name] = value.numpy()
        else:
            columns[f.name] = value.detach().numpy()
    return pd.DataFrame(columns)


def samples_frame(space: DesignSpace, u: torch.Tensor, result: StepResult) -> pd.DataFrame:
    """Design columns, `u_<name>` encodings (canonical points) and the analytical outputs of the
    points `u` (`(n, d)`), plus the derived data-parallel degree `dp` and, for a space with a chip
    template, what each design's chip derives to: `chip_<field>` for its accelerator fields (SI
    units, e.g. `chip_peak_bf16_flops_per_s`, `chip_hbm_bw_bytes_per_s`) and operating point
    (`chip_vdd_v`, `chip_clock_hz`, `chip_units_on_die`, ...)."""
    columns = DesignColumns.from_space(space)
    design = columns.frame(u)
    canonical = space.encode(space.decode(u)).numpy()
    encoding = pd.DataFrame(canonical, columns=[ENCODING_PREFIX + n for n in columns.names])
    batch, derived = space.to_batch_and_chip(u)
    extra = {"dp": batch.dp.detach().numpy()}
    if derived is not None:
        for group in (derived.accelerator, derived.operating):
            extra.update({CHIP_PREFIX + k: v.detach().numpy() for k, v in group.items()})
    return pd.concat([design, encoding, pd.DataFrame(extra), outputs_frame(result)], axis=1)


def write_samples(df: pd.DataFrame, space: DesignSpace, path) -> None:
    """Write the samples table as Parquet with the space's JSON in the schema metadata."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.Table.from_pandas(df, preserve_index=False)
    metadata = dict(table.schema.metadata or {})
    metadata[PARQUET_SPACE_KEY] = space_json(space).encode()
    pq.write_table(table.replace_schema_metadata(metadata), str(path))


def read_samples(path) -> tuple[pd.DataFrame, dict[str, Any]]:
    """`(samples, space record)` of a Parquet file `write_samples` wrote, or of a directory of such
    shards (`part-*.parquet`, as `deepflow sample` writes them with `executor=ray`), in order
    (SpecError otherwise)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    if Path(path).is_dir():
        shards = sorted(Path(path).glob("part-*.parquet"))
        if not shards:
            raise SpecError("data", "directory", str(path), "a directory of part-*.parquet shards")
        table = pa.concat_tables([pq.read_table(str(p)) for p in shards])
    else:
        table = pq.read_table(str(path))
    metadata = table.schema.metadata or {}
    if PARQUET_SPACE_KEY not in metadata:
        raise SpecError("data", "parquet metadata", str(path),
                        f"a samples file written by `deepflow sample` (with {PARQUET_SPACE_KEY.decode()})")
    return table.to_pandas(), json.loads(metadata[PARQUET_SPACE_KEY].decode())
