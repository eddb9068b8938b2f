"""Best parallel mapping of a model on a system: enumerate every valid mapping, evaluate all at once.

`enumerate_mappings` builds the candidate grid with tensor operations (staged cartesian products,
each followed by a vectorised divisibility filter; no Python loop per mapping) and returns it as a
`DesignBatch` whose hardware, system and model fields are expanded from one template design.
`best_mappings` evaluates the grid in a few chunked `evaluate` calls, keeps the feasible designs
and returns the `top_k` fastest.

The space searched (defaults of `SearchOptions`):

- tp, pp, cp: every divisor of num_devices with tp * pp * cp dividing it; dp = num_devices /
  (tp pp cp) (exact factorizations only). Transformers only: tp divides the query and key-value
  heads, 2 cp divides the sequence. pp divides the layers. LSTM and GEMM workloads: tp = cp = 1.
- ep: divisors of num_experts that divide dp (1 for dense models); with `etp` given, those whose
  etp x ep divides dp x cp x tp (experts whole on etp < tp ranks fold over the tp ranks too).
- micro_batch_size: powers of two <= 16 with dp * micro_batch_size dividing the global batch
  (`all_divisors=True`: every integer <= the cap that divides).
- vp: 1, and for pp > 1 the powers of two <= 8 with pp * vp dividing the layers and the
  micro-batch count divisible by pp (Megatron's interleaved schedule).
- sequence_parallel: off, and on where tp > 1 and tp * cp divides the sequence.
- recompute: none, selective, full (selective under flash attention too: there it re-runs the norms and
  the MLP activation and keeps less, `analytical.step.memory`, so it is a design of its own).
- (zero_stage, distributed_optimizer): (0, off), (0, on), (2, off), (3, off); stages 2 and 3 only
  without pipeline parallelism. ZeRO stage 1 is modelled exactly as the distributed optimizer
  (both shard the optimizer state over dp), so only the latter is enumerated.
- precision, flash_attention, overlap_dp_comm, overlap_tp_comm, overlap_pp_comm, ep_dispatcher, overlap_ep_comm,
  etp: as given (not searched); an overlap given as None is each mapping's stack default
  (`analytical.stack.stack_overlaps`: on with the distributed optimizer); with overlap_ep_comm, full recompute is
  not enumerated (Megatron-Core refuses it).

Every rule of `analytical.step.feasibility` about the mapping (degrees, divisibility, vp, ZeRO with
pipelining) is applied while enumerating, so an enumerated mapping is infeasible only if it does
not fit in memory, or for reasons shared by all mappings (an unsupported precision, a system
without scale-out links); `evaluate` decides those.

Size and cost (2-core CPU, one torch thread, `experiments/benchmarks/bench_analytical.py`): GPT-3
175B on 1024 GPUs with a global batch of 1536 enumerates 28,530 mappings in ~0.05-0.2 s; GPT-3 13B on 64 GPUs
(global batch 1024) in ~0.02 s. The grid grows with the number of divisors of num_devices
(tp x pp x cp) times 5 micro-batches x up to 4 vp x 2 x 3 x 4; lower `max_micro_batch_size` /
`max_vp` or turn off `context_parallel` if a space gets too large.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Optional, Sequence

import torch

from analytical.build import single_design
from analytical.codes import DTYPE, RECOMPUTE_CODES
from analytical.design import DesignBatch
from analytical.result import StepResult
from analytical.choices import (ATTENTION_KERNELS, CUDA_GRAPHS, DP_MODES, ELEMENTWISE, EP_DISPATCHERS, MASTER_PARAMS,
                                MEGATRON_RECOMPUTE, OPTIMIZER_STATE_DTYPES, PRECISIONS, RECOMPUTE, SpecError,
                                check_choice)
from analytical.specs import AcceleratorSpec, MappingSpec, ModelSpec, SystemSpec
from analytical.stack import OVERLAP_KINDS, stack_overlaps
from analytical.step.efficiency import DEFAULT_EFFICIENCY, Efficiency
from analytical.step.model import evaluate

MAPPING_FIELDS = ("tp", "pp", "dp", "cp", "ep", "vp", "sequence_parallel", "micro_batch_size", "recompute",
                  "zero_stage", "distributed_optimizer")
# (zero_stage, distributed_optimizer): the distributed optimizer is Megatron's ZeRO-1 and evaluates
# identically to stage 1, so stage 1 is not enumerated separately.
ZERO_CONFIGS = ((0, 0), (0, 1), (1, 0), (2, 0), (3, 0))
# MappingSpec fields a search takes as given, through the SearchOptions fields of the same names
STACK_FIELDS = ("cuda_graph", "fp8_attention", "fp8_param_gather", "grad_reduce_in_fp32", "fused_cross_entropy",
                "fused_expert_mlp", "elementwise", "attention_kernel", "dp_shard", "moe_capacity_factor",
                "moe_pad_to_capacity", "optimizer_state_dtype", "master_params", "sp_keeps_gathered_input")
EQUIVALENT_ZERO_CONFIGS = {(1, 0): (0, 1)}


@dataclass(frozen=True)
class SearchOptions:
    """Which mappings `enumerate_mappings` generates, and how `best_mappings` evaluates them."""

    flash_attention: bool = True
    # None: each enumerated mapping's stack default (`analytical.stack.stack_overlaps`), as `evaluate` reads a
    # mapping that leaves them unset
    overlap_dp_comm: Optional[bool] = False
    overlap_tp_comm: Optional[bool] = False
    overlap_pp_comm: Optional[bool] = False
    # the MoE software stack, as given (not searched): the dispatcher and whether dispatch and
    # combine overlap another micro-batch (then full recompute, which Megatron-Core refuses with
    # it, is not enumerated)
    ep_dispatcher: str = "alltoall"
    overlap_ep_comm: bool = False
    etp: int = 0  # expert tensor parallelism, as given (0: experts split over tp, Megatron's default)
    # the rest of the software stack, as given (MappingSpec's fields of the same names and defaults: STACK_FIELDS)
    cuda_graph: str = MappingSpec.cuda_graph
    fp8_attention: bool = MappingSpec.fp8_attention
    fp8_param_gather: bool = MappingSpec.fp8_param_gather
    grad_reduce_in_fp32: bool = MappingSpec.grad_reduce_in_fp32
    fused_cross_entropy: bool = MappingSpec.fused_cross_entropy
    fused_expert_mlp: bool = MappingSpec.fused_expert_mlp
    elementwise: str = MappingSpec.elementwise
    attention_kernel: str = MappingSpec.attention_kernel
    # HSDP's shard degree, as given: data-parallel degrees it does not divide are infeasible (DP_SHARD_INVALID)
    dp_shard: int = MappingSpec.dp_shard
    moe_capacity_factor: float = MappingSpec.moe_capacity_factor  # token dropping, as given
    moe_pad_to_capacity: bool = MappingSpec.moe_pad_to_capacity
    sp_keeps_gathered_input: bool = MappingSpec.sp_keeps_gathered_input  # DTensor's sequence parallelism (torchtitan)
    optimizer_state_dtype: str = MappingSpec.optimizer_state_dtype  # the optimizer's precision, as given
    master_params: str = MappingSpec.master_params
    max_micro_batch_size: int = 16
    max_vp: int = 8
    all_divisors: bool = False  # micro-batch and vp: every integer up to the cap, not powers of two
    recompute: tuple[str, ...] = MEGATRON_RECOMPUTE  # add "op" to search torchtitan's per-op checkpointing
    zero_stages: tuple[int, ...] = (0, 1, 2, 3)
    distributed_optimizer: bool = True  # also search the distributed optimizer (with ZeRO stage 0)
    sequence_parallel: bool = True  # also search sequence parallelism (where tp > 1)
    context_parallel: bool = True  # cp > 1 allowed (Transformers)
    chunk_size: int = 1 << 16  # designs per evaluate call (16k-64k keep temporaries in cache)
    # torch intra-op threads while evaluating, restored afterwards (process-wide, like
    # torch.set_num_threads); None keeps the caller's setting. One thread: on a small shared machine
    # intra-op parallelism makes a 0.1 s search take 2-13 s whenever another process holds a core.
    num_threads: Optional[int] = 1

    def validate(self) -> "SearchOptions":
        for name in ("max_micro_batch_size", "max_vp", "chunk_size", "num_threads"):
            value = getattr(self, name)
            if name == "num_threads" and value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise SpecError("search", name, value, "an integer >= 1")
        for value in self.recompute:
            if value not in RECOMPUTE:
                raise SpecError("search", "recompute", value, "one of " + ", ".join(RECOMPUTE))
        for value in self.zero_stages:
            if value not in (0, 1, 2, 3):
                raise SpecError("search", "zero_stages", value, "0, 1, 2 or 3")
        for name in ("etp", "dp_shard"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise SpecError("search", name, value, "an integer >= 0")
        for name, choices in (("ep_dispatcher", EP_DISPATCHERS), ("cuda_graph", CUDA_GRAPHS),
                              ("elementwise", ELEMENTWISE), ("attention_kernel", ATTENTION_KERNELS),
                              ("optimizer_state_dtype", OPTIMIZER_STATE_DTYPES), ("master_params", MASTER_PARAMS)):
            check_choice("search", self, name, choices)
        if not self.recompute or not self.zero_stages:
            raise SpecError("search", "recompute/zero_stages", (), "at least one value")
        if self.overlap_ep_comm and set(self.recompute) == {"full"}:
            raise SpecError("search", "recompute", self.recompute, "a value other than full with overlap_ep_comm")
        return self


DEFAULT_OPTIONS = SearchOptions()


@dataclass
class SearchResult:
    """The `top_k` fastest feasible mappings, fastest first (fewer if fewer are feasible)."""

    designs: DesignBatch  # the top-k designs, `(k,)` per field
    result: StepResult  # their evaluation, same order
    mappings: list[MappingSpec]  # the same designs as specs (for printing, configs, JSON)
    rows: list[dict]  # `StepResult.row` of each
    num_enumerated: int
    num_feasible: int
    search_s: float  # wall time of enumeration, evaluation and selection

    @property
    def best(self) -> Optional[MappingSpec]:
        return self.mappings[0] if self.mappings else None

    @property
    def best_row(self) -> Optional[dict]:
        return self.rows[0] if self.rows else None


def _divisors(n: int) -> list[int]:
    return [i for i in range(1, n + 1) if n % i == 0]


def _candidates(cap: int, all_divisors: bool) -> list[int]:
    if all_divisors:
        return list(range(1, cap + 1))
    return [2**i for i in range(int(math.log2(cap)) + 1)]


def _long(values: Sequence[int]) -> torch.Tensor:
    return torch.tensor(list(values), dtype=torch.int64)


def _cross(cols: dict[str, torch.Tensor], name: str, values: torch.Tensor) -> dict[str, torch.Tensor]:
    """Every row of `cols` with every value of `values` as a new column `name` (row-major)."""
    k = values.shape[0]
    n = next(iter(cols.values())).shape[0]
    out = {key: col.repeat_interleave(k) for key, col in cols.items()}
    out[name] = values.repeat(n)
    return out


def _keep(cols: dict[str, torch.Tensor], mask: torch.Tensor) -> dict[str, torch.Tensor]:
    return {key: col[mask] for key, col in cols.items()}


def _mapping_grid(system: SystemSpec, model: ModelSpec, global_batch_size: int,
                  opt: SearchOptions) -> dict[str, torch.Tensor]:
    """`(n,)` int64 columns of every candidate mapping (fields of `MAPPING_FIELDS`)."""
    devices = system.num_devices
    gbs = global_batch_size
    transformer = model.kind == "transformer"
    seq, layers, experts = model.seq_length, model.num_layers, model.num_experts
    divisors = _divisors(devices)
    tp_c = [t for t in divisors if model.num_heads % t == 0 and model.kv_heads % t == 0] if transformer else [1]
    pp_c = [p for p in divisors if layers % p == 0]
    cp_c = ([c for c in divisors if c == 1 or seq % (2 * c) == 0]
            if transformer and opt.context_parallel else [1])
    ep_c = [e for e in _divisors(experts) if devices % e == 0] if transformer else [1]

    degrees = torch.cartesian_prod(_long(tp_c), _long(pp_c), _long(cp_c)).reshape(-1, 3)
    cols = {"tp": degrees[:, 0], "pp": degrees[:, 1], "cp": degrees[:, 2]}
    model_parallel = cols["tp"] * cols["pp"] * cols["cp"]
    cols = _keep(cols, devices % model_parallel == 0)
    cols["dp"] = devices // (cols["tp"] * cols["pp"] * cols["cp"])
    cols = _keep(cols, gbs % cols["dp"] == 0)

    cols = _cross(cols, "ep", _long(ep_c))
    if opt.etp > 0 and experts > 1:  # whole experts on etp ranks: ep folds over the tp (and cp) ranks too
        cols = _keep(cols, (cols["dp"] * cols["cp"] * cols["tp"]) % (opt.etp * cols["ep"]) == 0)
    else:
        cols = _keep(cols, cols["dp"] % cols["ep"] == 0)

    mbs_c = _candidates(opt.max_micro_batch_size, opt.all_divisors)
    cols = _cross(cols, "micro_batch_size", _long(mbs_c))
    cols = _keep(cols, gbs % (cols["dp"] * cols["micro_batch_size"]) == 0)

    vp_c = _candidates(opt.max_vp, opt.all_divisors)
    cols = _cross(cols, "vp", _long(vp_c))
    micro_batches = gbs // (cols["dp"] * cols["micro_batch_size"])
    pp, vp = cols["pp"], cols["vp"]
    cols = _keep(cols, (layers % (pp * vp) == 0)
                 & ((vp == 1) | ((pp > 1) & (micro_batches % pp == 0))))

    sp_c = [0, 1] if opt.sequence_parallel and transformer else [0]
    cols = _cross(cols, "sequence_parallel", _long(sp_c))
    sp = cols["sequence_parallel"]
    cols = _keep(cols, (sp == 0) | ((cols["tp"] > 1) & (seq % (cols["tp"] * cols["cp"]) == 0)))

    recompute = set(opt.recompute) - ({"full"} if opt.overlap_ep_comm else set())
    cols = _cross(cols, "recompute", _long(sorted(RECOMPUTE_CODES[r] for r in recompute)))

    zero_configs = [(z, o) for z, o in ZERO_CONFIGS
                    if z in opt.zero_stages and (o == 0 or (opt.distributed_optimizer and 0 in opt.zero_stages))]
    zero_configs = [c for c in zero_configs if EQUIVALENT_ZERO_CONFIGS.get(c) not in zero_configs]
    cols = _cross(cols, "zero_config", torch.arange(len(zero_configs)))
    table = _long([z for z, _ in zero_configs]), _long([o for _, o in zero_configs])
    cols["zero_stage"] = table[0][cols["zero_config"]]
    cols["distributed_optimizer"] = table[1][cols.pop("zero_config")]
    cols = _keep(cols, (cols["zero_stage"] < 2) | (cols["pp"] == 1))
    return {name: cols[name] for name in MAPPING_FIELDS}


def _template(accelerator: AcceleratorSpec, system: SystemSpec, model: ModelSpec, global_batch_size: int,
              precision: str, opt: SearchOptions) -> DesignBatch:
    mapping = MappingSpec(name="search-template", global_batch_size=global_batch_size, precision=precision,
                          flash_attention=opt.flash_attention, overlap_dp_comm=opt.overlap_dp_comm,
                          overlap_tp_comm=opt.overlap_tp_comm, overlap_pp_comm=opt.overlap_pp_comm,
                          ep_dispatcher=opt.ep_dispatcher,
                          overlap_ep_comm=opt.overlap_ep_comm, etp=opt.etp,
                          **{name: getattr(opt, name) for name in STACK_FIELDS})
    return single_design(accelerator, system, model, mapping)


def enumerate_mappings(accelerator: AcceleratorSpec, system: SystemSpec, model: ModelSpec, global_batch_size: int,
                       precision: str = "bf16", options: Optional[SearchOptions] = None) -> DesignBatch:
    """Every candidate mapping of `model` on `system` (see the module docstring) as a `DesignBatch`.

    Hardware, system and model fields are stride-0 views of one template design; the mapping
    fields are contiguous float64 columns. The batch can be empty (e.g. a global batch that no
    data-parallel degree divides).
    """
    opt = (options or DEFAULT_OPTIONS).validate()
    template = _template(accelerator, system, model, global_batch_size, precision, opt)
    grid = _with_stack_overlaps(_mapping_grid(system, model, global_batch_size, opt), template, opt)
    n = grid["tp"].shape[0]
    return template.expand(n).replace(**{name: col.to(DTYPE) for name, col in grid.items()})


def _with_stack_overlaps(grid: dict[str, torch.Tensor], template: DesignBatch, opt: SearchOptions
                         ) -> dict[str, torch.Tensor]:
    """`grid` plus, for each overlap `opt` leaves None, its column of every mapping's stack default."""
    unset = [kind for kind, field in OVERLAP_KINDS.items() if getattr(opt, field) is None]
    if not unset:
        return grid
    default = stack_overlaps(grid["distributed_optimizer"], template.fsdp[0], grid["tp"], grid["pp"], grid["vp"],
                             grid["sequence_parallel"])
    return {**grid, **{OVERLAP_KINDS[kind]: default[kind] for kind in unset}}  # (each a column: the grid's shape)


def enumerate_mappings_of(design: DesignBatch, options: Optional[SearchOptions] = None) -> DesignBatch:
    """`enumerate_mappings` at the tensor level: every candidate mapping around ONE design (a batch
    of one, e.g. a decoded point of a design space), its accelerator, system and model fields kept,
    its global batch, precision, flash attention, overlap flags and MoE dispatcher taken as given."""
    from types import SimpleNamespace

    from analytical.specs import MODEL_KINDS

    def num(field: str) -> int:
        return int(round(float(getattr(design, field)[0])))

    opt = dataclasses.replace(options or DEFAULT_OPTIONS, flash_attention=bool(num("flash_attention")),
                              overlap_ep_comm=bool(num("overlap_ep_comm")), etp=num("etp")).validate()
    system = SimpleNamespace(num_devices=num("num_devices"))
    model = SimpleNamespace(kind=MODEL_KINDS[num("kind")], num_heads=num("num_heads"), kv_heads=num("num_kv_heads"),
                            seq_length=num("seq_length"), num_layers=num("num_layers"),
                            num_experts=num("num_experts"))
    grid = _with_stack_overlaps(_mapping_grid(system, model, num("global_batch_size"), opt), design, opt)
    return design.expand(grid["tp"].shape[0]).replace(**{name: col.to(DTYPE) for name, col in grid.items()})


def mapping_from_batch(batch: DesignBatch, i: int, name: Optional[str] = None) -> MappingSpec:
    """The `MappingSpec` of design `i` of a batch (dp explicit), e.g. to print it or evaluate it again."""
    return _mapping_from_values(lambda field: float(getattr(batch, field)[i]), name)


def mappings_from_batch(batch: DesignBatch) -> list[MappingSpec]:
    """`mapping_from_batch` of every design of a batch, reading each field once (one `tolist`, not one element
    read per design and field)."""
    column = functools.cache(lambda field: getattr(batch, field).tolist())
    return [_mapping_from_values(lambda field: column(field)[i]) for i in range(batch.batch_size)]


def _mapping_from_values(value, name: Optional[str] = None) -> MappingSpec:
    """A validated `MappingSpec` from `value(field)`, a design's float value of each mapping field."""
    def num(field: str) -> int:
        return int(round(value(field)))

    def flag(field: str) -> bool:
        return bool(value(field) != 0.0)

    mapping = MappingSpec(
        name=name or f"tp{num('tp')}-pp{num('pp')}-dp{num('dp')}-cp{num('cp')}",
        tp=num("tp"), pp=num("pp"), dp=num("dp"), cp=num("cp"), ep=num("ep"), vp=num("vp"),
        sequence_parallel=flag("sequence_parallel"), micro_batch_size=num("micro_batch_size"),
        global_batch_size=num("global_batch_size"), recompute=RECOMPUTE[num("recompute")],
        zero_stage=num("zero_stage"), fsdp=flag("fsdp"), distributed_optimizer=flag("distributed_optimizer"),
        precision=PRECISIONS[num("precision")], flash_attention=flag("flash_attention"),
        overlap_dp_comm=flag("overlap_dp_comm"), overlap_tp_comm=flag("overlap_tp_comm"),
        overlap_pp_comm=flag("overlap_pp_comm"), overlap_ep_comm=flag("overlap_ep_comm"),
        ep_dispatcher=EP_DISPATCHERS[num("ep_dispatcher")], offload_layers=num("offload_layers"),
        fused_jobs=num("fused_jobs"), dp_mode=DP_MODES[num("dp_mode")], ps_shards=num("ps_shards"),
        staleness=num("staleness"), fused_cross_entropy=flag("fused_cross_entropy"),
        recompute_layers=num("recompute_layers"), grad_reduce_in_fp32=flag("grad_reduce_in_fp32"), etp=num("etp"),
        fp8_param_gather=flag("fp8_param_gather"), cuda_graph=CUDA_GRAPHS[num("cuda_graph")],
        fp8_attention=flag("fp8_attention"), fused_expert_mlp=flag("fused_expert_mlp"),
        elementwise=ELEMENTWISE[num("elementwise")], attention_kernel=ATTENTION_KERNELS[num("attention_kernel")],
        dp_shard=num("dp_shard"), moe_capacity_factor=value("moe_capacity_factor"),
        moe_pad_to_capacity=flag("moe_pad_to_capacity"),
        optimizer_state_dtype=OPTIMIZER_STATE_DTYPES[num("optimizer_state_dtype")],
        master_params=MASTER_PARAMS[num("master_params")], sp_keeps_gathered_input=flag("sp_keeps_gathered_input"))
    return mapping.validate()


@contextmanager
def torch_threads(n: Optional[int]):
    """Run the block with `n` torch threads (None: leave the setting as it is), restoring it after."""
    previous = torch.get_num_threads()
    if n is None or n == previous:
        yield
        return
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


def _fastest_feasible(step_time_s: torch.Tensor, feasible: torch.Tensor, k: int) -> torch.Tensor:
    """Indices of the k fastest feasible designs, ties kept in enumeration order."""
    keyed = torch.where(feasible, step_time_s, torch.full_like(step_time_s, math.inf))
    order = torch.sort(keyed, stable=True).indices
    return order[: min(k, int(feasible.sum()))]


def best_mappings(accelerator: AcceleratorSpec, system: SystemSpec, model: ModelSpec, global_batch_size: int,
                  top_k: int = 10, precision: str = "bf16", flash_attention: Optional[bool] = None,
                  overlap_dp_comm: Optional[bool] = None, overlap_tp_comm: Optional[bool] = None,
                  options: Optional[SearchOptions] = None, eff: Efficiency = DEFAULT_EFFICIENCY,
                  ep_dispatcher: Optional[str] = None, overlap_ep_comm: Optional[bool] = None,
                  etp: Optional[int] = None) -> SearchResult:
    """The `top_k` fastest feasible mappings of `model` on `system` for one global batch.

    `flash_attention`, the overlap flags, `ep_dispatcher` and `etp`, when given, override those of
    `options`. An empty result (no feasible mapping) is an answer, not an error.
    """
    if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1:
        raise SpecError("search", "top_k", top_k, "an integer >= 1")
    start = time.perf_counter()
    opt = options or DEFAULT_OPTIONS
    given = {"flash_attention": flash_attention, "overlap_dp_comm": overlap_dp_comm,
             "overlap_tp_comm": overlap_tp_comm, "ep_dispatcher": ep_dispatcher, "overlap_ep_comm": overlap_ep_comm,
             "etp": etp}
    opt = dataclasses.replace(opt, **{k: v for k, v in given.items() if v is not None})
    designs = enumerate_mappings(accelerator, system, model, global_batch_size, precision, opt)
    return _fastest_mappings(designs, top_k, opt, eff, start)


def best_mappings_of(design: DesignBatch, top_k: int = 10, options: Optional[SearchOptions] = None,
                     eff: Efficiency = DEFAULT_EFFICIENCY) -> SearchResult:
    """`best_mappings` around ONE design given as tensors (a batch of one), e.g. on a derived chip
    whose accelerator fields (energies at its operating voltage, its own NIC) no spec can carry:
    every mapping of `enumerate_mappings_of(design, options)` evaluated in one batched call."""
    if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1:
        raise SpecError("search", "top_k", top_k, "an integer >= 1")
    start = time.perf_counter()
    opt = options or DEFAULT_OPTIONS
    return _fastest_mappings(enumerate_mappings_of(design, opt), top_k, opt, eff, start)


def _fastest_mappings(designs: DesignBatch, top_k: int, opt: SearchOptions, eff: Efficiency,
                      start: float) -> SearchResult:
    """Evaluate the enumerated `designs` chunk by chunk and keep the `top_k` fastest feasible."""
    n = designs.batch_size

    # per chunk keep only its own top-k, then merge: the global top-k is among them
    kept_idx, kept_results, num_feasible = [], [], 0
    with torch_threads(opt.num_threads):
        for lo in range(0, n, opt.chunk_size):
            chunk = designs if n <= opt.chunk_size else designs.index(slice(lo, min(n, lo + opt.chunk_size)))
            res = evaluate(chunk, eff)
            num_feasible += int(res.feasible.sum())
            local = _fastest_feasible(res.step_time_s, res.feasible, top_k)
            kept_idx.append(local + lo)
            kept_results.append(res.index(local))
        if kept_results:
            candidates, cand_idx = StepResult.cat(kept_results), torch.cat(kept_idx)
        else:  # nothing enumerated: an empty batch evaluates to empty results
            candidates, cand_idx = evaluate(designs, eff), torch.zeros(0, dtype=torch.int64)
    pick = _fastest_feasible(candidates.step_time_s, candidates.feasible, top_k)
    top_designs = designs.index(cand_idx[pick])
    top_result = candidates.index(pick)
    mappings = mappings_from_batch(top_designs)
    rows = top_result.rows()
    return SearchResult(designs=top_designs, result=top_result, mappings=mappings, rows=rows,
                        num_enumerated=n, num_feasible=num_feasible,
                        search_s=time.perf_counter() - start)
