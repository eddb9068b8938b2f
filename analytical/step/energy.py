"""Energy of one training step: dynamic compute, SRAM and HBM traffic, network traffic and static power.

    energy_j = compute + sram + hbm + scale_up + scale_out + static        (one step, all devices)

- compute: FLOPs actually executed (GEMMs of the forward, backward and recomputed passes, fused attention,
  logits; per device times devices, so redundant work such as a tp-replicated router counts) x J per FLOP
  at the step's precision.
- sram / hbm: bytes moved, from the same kernel model as the time (`kernels.gemm_hbm_bytes`,
  `kernels.gemm_sram_bytes`, memory-bound kernels, fused attention, logits and loss, the optimizer)
  x J per byte. Everything read from HBM also streams through the last-level SRAM once.
- scale_up / scale_out: bytes each collective of the tp / cp / ep / pp / dp groups puts on each fabric
  level, with the placement of `analytical.step.collectives` (a group inside one scale-up domain rides its
  links only; a hierarchical collective splits its bytes between both levels), x J per byte per link
  traversal x traversals per byte on that level (`link_traversals`).
- static: leakage and background power x step time x devices.

Outputs per design: `energy_j`, `energy_per_token_j`, `avg_power_w` (per device) and the breakdown.
`accelerator_energy_fields` turns an `AcceleratorSpec`'s technology names into the per-unit energies of
`DesignBatch` at the node's nominal voltage (a preset runs at nominal V), with the silicon model of
`analytical.chip.silicon` that derived chips use too (static power: leakage of the compute units, not a
share of the budget).

Known omissions: HBM traffic of collectives (the sent and received buffers), switch-ASIC energy, non-GEMM
FLOPs (softmax, norms: their bytes are counted), host CPUs, NICs' logic, fans and power conversion (the
model predicts board power, not node or facility power), and the clock throttling a device under its
power cap would do (a design over its budget is flagged, not slowed).
"""

from __future__ import annotations

import torch

from analytical.chip import silicon
from analytical.chip.tech_types import LogicNode
from analytical.chip.technology import link_tech, logic_node, memory_tech
from analytical.codes import RECOMPUTE_CODES, TOPOLOGY_CODES, Reason
from analytical.design import DesignBatch, any_set, per_precision, sequence_parallel_divisor
from analytical.specs import PEAK_FORMATS, AcceleratorSpec
from analytical.step import collectives as coll
from analytical.step.attention import any_mla, head_dim, is_mla, kv_width
from analytical.step.eager_ops import eager_ops
from analytical.step.kernels import gemm_flops, gemm_hbm_bytes, gemm_sram_bytes
from analytical.step.memory import (dp_collective_counts, full_recompute_share, micro_batches_per_step,
                                    op_recompute, optimizer_sharded, recomputed_module_bytes, reduce_buffers,
                                    shard_groups, sharded_params, weight_groups)
from analytical.step.param_bytes import adam_step_bytes_per_param, grad_bytes_per_param
from analytical.step.workload import (
    CORE_SLOTS,
    Gemms,
    activation_bytes_per_element,
    any_expert_tp,
    attention_core_flops,
    expert_tp,
    flash_qkvo_bytes,
    gemm_bytes_per_element,
    is_kind,
    is_moe,
    local_tokens,
    logit_gemm_flops,
    memory_bound_bytes_per_layer,
    mlp_tp,
    routed_copies,
    slot_sum,
)

ENERGY_PARTS = ("compute", "sram", "hbm", "scale_up", "scale_out", "static")

# Per-unit energies of the silicon (J per FLOP, J per SRAM byte, static power) come from
# `analytical.chip.silicon`, the one model that derived chips (`analytical.chip.derive`) use too; a preset runs at
# its node's nominal supply. The operand-delivery overhead per FLOP is fitted there on A100 and H100.

# Link traversals (TX end to RX end) per byte on each level. Scale-up: GPU -> NVSwitch -> GPU (DGX/HGX,
# NVL72), 1 on a torus's direct links. Scale-out: NIC -> leaf -> NIC inside one leaf switch's nodes, 4
# through a spine; 1 on a torus. ESTIMATE: a leaf serves one DGX H100 SuperPOD scalable unit of 32 nodes
# per rail (NVIDIA DGX SuperPOD reference architecture; 20 nodes for DGX A100).
SCALE_UP_SWITCH_TRAVERSALS = 2.0
SCALE_OUT_LEAF_TRAVERSALS = 2.0
SCALE_OUT_SPINE_TRAVERSALS = 4.0
NODES_PER_LEAF = 32.0


# ---- per-unit energies of an accelerator (scalars, at nominal voltage) ---------------------------------

def flop_energy_j(node: LogicNode, precision: str) -> float:
    """J per FLOP at `precision` on `node` at nominal V (`analytical.chip.silicon.flop_energy_j`)."""
    return silicon.flop_energy_j(node.mac_energy_j(precision))


def sram_energy_j_per_byte(node: LogicNode, sram_bytes: float) -> float:
    """J per byte read from a last-level SRAM of `sram_bytes` at nominal V (`analytical.chip.silicon`)."""
    return silicon.sram_energy_j_per_byte(node.sram_read_energy_j_per_bit, sram_bytes)


def units_dynamic_power_w(node: LogicNode, accelerator: AcceleratorSpec) -> float:
    """Dynamic power of the compute units running flat out at nominal V: the highest over precisions
    of peak FLOP/s x J per FLOP (on GPUs every tensor precision gives the same, e.g. A100 312 TFLOP/s
    fp16 or 156 tf32 at twice the energy; fp32 on the CUDA cores draws less)."""
    peaks = {p: getattr(accelerator, f"peak_tflops_{p}") * 1e12 for p in PEAK_FORMATS}
    return max(peak * flop_energy_j(node, p) for p, peak in peaks.items())


def static_power_w(node: LogicNode, accelerator: AcceleratorSpec) -> float:
    """Leakage at nominal V and ~85 C (`analytical.chip.silicon.leakage_power_w`): the node's static share
    of the compute units' power at peak. It follows the silicon (the peak rate), not the budget."""
    return silicon.leakage_power_w(units_dynamic_power_w(node, accelerator), node.leakage_fraction)


# A datasheet chip reaches its dense peak within its TDP. Where a node table prices its compute
# partition (units, last-level SRAM traffic of its tiles, leakage) at peak above this share of the TDP,
# the chip's architecture must do better than the table knows (Blackwell on the N4 row: 2.3x H100's
# 16-bit peak on the same node class within 1.4x its TDP), so its J/FLOP, SRAM J/byte and leakage are
# scaled down to fit. The share is the compute split the energy model was fitted with (0.805 of the
# TDP, analytical.chip.silicon) times its largest calibration residual (H100 +12.0 %): A100 and H100 stay
# as fitted.
PRESET_COMPUTE_SHARE_MAX = 0.805 * 1.12


def compute_partition_scale(node: LogicNode, accelerator: AcceleratorSpec, tdp_w: float | None = None,
                            peak_share: float = 1.0) -> float:
    """Factor (<= 1) on a preset's compute-partition energies so that it fits its TDP at peak. `tdp_w` and
    `peak_share` (the share of every datasheet peak): the same at another rating of its silicon, its nominal
    point (`analytical.power_cap`), where the table's leakage follows the silicon's peak there."""
    tdp = accelerator.tdp_w if tdp_w is None else tdp_w
    if tdp <= 0:
        return 1.0
    dynamic = peak_share * units_dynamic_power_w(node, accelerator)
    leakage = (accelerator.static_power_w if accelerator.static_power_w is not None
               else peak_share * static_power_w(node, accelerator))
    peak16 = peak_share * max(accelerator.peak_tflops_fp16, accelerator.peak_tflops_bf16) * 1e12
    sram = peak16 * silicon.sram_bytes_per_flop(accelerator.tile_m, accelerator.tile_n) * sram_energy_j_per_byte(
        node, accelerator.sram_mib * 2.0**20)
    return min(1.0, PRESET_COMPUTE_SHARE_MAX * tdp / (dynamic + leakage + sram))


def accelerator_energy_fields(accelerator: AcceleratorSpec) -> dict[str, float]:
    """The energy fields of `DesignBatch` for one (validated) accelerator spec."""
    node = logic_node(accelerator.logic_node)
    memory = memory_tech(accelerator.memory_technology)
    scale = compute_partition_scale(node, accelerator)
    static = scale * (accelerator.static_power_w if accelerator.static_power_w is not None
                      else static_power_w(node, accelerator))
    fields = {f"flop_energy_{p}_j": scale * flop_energy_j(node, p) for p in PEAK_FORMATS}
    fields.update(
        sram_energy_j_per_byte=scale * sram_energy_j_per_byte(node, accelerator.sram_mib * 2.0**20),
        hbm_energy_j_per_byte=8.0 * memory.energy_j_per_bit,
        scale_up_energy_j_per_byte=8.0 * link_tech(accelerator.scale_up_link).energy_j_per_bit,
        scale_out_energy_j_per_byte=8.0 * link_tech(accelerator.scale_out_link).energy_j_per_bit,
        static_power_w=static,
    )
    return fields


# ---- batch functions: one per term -------------------------------------------------------------------

def flop_energy_for_precision(d: DesignBatch) -> torch.Tensor:
    """`(batch,)` J per FLOP at each design's training precision."""
    return per_precision(d, "flop_energy_", "_j")


def compute_energy_j(flops: torch.Tensor, flop_energy_j_: torch.Tensor, units_power_w: torch.Tensor,
                     busy_s: torch.Tensor, num_devices: torch.Tensor) -> torch.Tensor:
    """Compute units: the per-FLOP share of their energy for the FLOPs executed, plus the clocked
    share (`silicon.CLOCKED_SHARE`) of their power at peak for the time their kernels run."""
    share = silicon.CLOCKED_SHARE
    return (1.0 - share) * flops * flop_energy_j_ + share * units_power_w * busy_s * num_devices


def units_power_at_peak_w(d: DesignBatch) -> torch.Tensor:
    """`(batch,)` dynamic power of the compute units running flat out: the highest over number formats
    of peak FLOP/s x J per FLOP (`units_dynamic_power_w` of a batch)."""
    return torch.stack([getattr(d, f"peak_{f}_flops_per_s") * getattr(d, f"flop_energy_{f}_j")
                        for f in PEAK_FORMATS], dim=-1).amax(-1)


def sram_energy_j(sram_bytes: torch.Tensor, energy_j_per_byte: torch.Tensor) -> torch.Tensor:
    return sram_bytes * energy_j_per_byte


def hbm_energy_j(hbm_bytes: torch.Tensor, energy_j_per_byte: torch.Tensor) -> torch.Tensor:
    return hbm_bytes * energy_j_per_byte


def network_energy_j(link_bytes: torch.Tensor, traversals: torch.Tensor,
                     energy_j_per_byte: torch.Tensor) -> torch.Tensor:
    """Bytes put on one fabric level x link traversals per byte x J per byte per traversal."""
    return link_bytes * traversals * energy_j_per_byte


def static_energy_j(static_power_w_: torch.Tensor, step_time_s: torch.Tensor,
                    num_devices: torch.Tensor) -> torch.Tensor:
    return static_power_w_ * step_time_s * num_devices


def link_traversals(d: DesignBatch) -> tuple[torch.Tensor, torch.Tensor]:
    """`(scale_up, scale_out)` link traversals per byte (see the constants above)."""
    torus = d.topology == TOPOLOGY_CODES["torus"]
    one = torch.ones_like(d.tp)
    up = torch.where(torus, one, one * SCALE_UP_SWITCH_TRAVERSALS)
    nodes = d.num_devices / d.devices_per_node
    switched = torch.where(nodes <= NODES_PER_LEAF, one * SCALE_OUT_LEAF_TRAVERSALS, one * SCALE_OUT_SPINE_TRAVERSALS)
    return up, torch.where(torus, one, switched)


# ---- work of one step ----------------------------------------------------------------------------------

def _slots(g: Gemms, live: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
    """`(batch, slots)` per-slot `value` x serial repetitions, 0 in the empty slots."""
    return torch.where(live, value * g.serial, 0.0)


def step_work(d: DesignBatch, gemms: Gemms, params: torch.Tensor) -> dict[str, torch.Tensor]:
    """FLOPs executed and SRAM / HBM bytes moved by one step on all devices, each `(batch,)`.

    Per layer and micro-batch on one device: forward, backward (input and weight gradients) and
    recompute (full: the whole forward; selective: the unfused attention core, or with fused attention
    the norms and the MLP activation; op: the core, half the other matmuls and the memory-bound
    kernels), as in `analytical.step.model`;
    times layers per stage, micro-batches and devices. The last stage's devices add the logit GEMMs and
    the loss; every device adds its Adam step over its (possibly sharded) parameters.
    """
    elem_g = gemm_bytes_per_element(d)
    elem = activation_bytes_per_element(d)
    g = gemms
    eg = elem_g.unsqueeze(-1)
    live = g.m * g.n * g.k * g.count > 0
    # the input- and weight-gradient GEMMs ((m x n)@(n x k), (k x m)@(m x n)) have the forward's FLOPs,
    # compulsory bytes and tile traffic (each symmetric in m, n, k), so backward = 2 x forward per slot
    # FLOPs, HBM bytes and SRAM bytes stacked: `(3, batch, slots)`, each term below computed once for the three
    per_slot = torch.stack([_slots(g, live, gemm_flops(g.m, g.n, g.k, g.count)),
                            _slots(g, live, gemm_hbm_bytes(g.m, g.n, g.k, g.count, eg)),
                            _slots(g, live, gemm_sram_bytes(g.m, g.n, g.k, g.count, d.tile_m.unsqueeze(-1),
                                                            d.tile_n.unsqueeze(-1), eg))])

    selective = (d.recompute == RECOMPUTE_CODES["selective"]).to(d.tp.dtype)
    op = op_recompute(d)
    full = full_recompute_share(d)
    transformer = is_kind(d, "transformer")
    flash = d.flash_attention * transformer
    flash_flops = attention_core_flops(d) * flash
    qkvo_bytes = flash_qkvo_bytes(d, elem) * flash
    mb_bytes, _ = memory_bound_bytes_per_layer(d)
    eager = eager_ops(d)  # eager PyTorch ops beside the fused kernels (analytical.step.eager_ops)
    scores = d.micro_batch_size * d.num_heads / d.tp * (d.seq_length / d.cp) * d.seq_length
    core_mem_bytes = 4.5 * scores * elem * (1.0 - d.flash_attention) * transformer
    # selective recompute with fused attention re-runs the norms and the MLP activation (and the eager
    # modules' share of them), as the step time does (`analytical.step.model`)
    modules_bytes = flash * (recomputed_module_bytes(d) + eager.recompute_bytes)

    # beside the GEMMs, `(3, batch)` each: the fused attention's FLOPs (FA2 backward: 5 of the 2 forward matmuls),
    # and the non-GEMM bytes (everything read from HBM also streams through the last-level SRAM once): forward,
    # backward, unfused core, per-op recompute's and selective recompute's extra
    zero = torch.zeros_like(flash_flops)
    fwd_extra, bwd_extra, core_extra, op_extra, selective_extra = (torch.stack([f, b, b]) for f, b in (
        (flash_flops, mb_bytes + qkvo_bytes + eager.forward_bytes),
        (2.5 * flash_flops, 2.0 * (mb_bytes + qkvo_bytes) + eager.backward_bytes),
        (zero, core_mem_bytes), (zero, mb_bytes + eager.forward_bytes), (zero, modules_bytes)))
    gemm_fwd = slot_sum(per_slot)
    forward = gemm_fwd + fwd_extra
    backward = 2.0 * gemm_fwd + bwd_extra
    core_gemm = per_slot[..., CORE_SLOTS].sum(-1)
    core = core_gemm + core_extra
    recompute = full * forward + selective * (core + selective_extra)
    if op is not None:
        recompute = recompute + op * (0.5 * (gemm_fwd - core_gemm) + core + op_extra)
    work = dict(zip(("flops", "hbm_bytes", "sram_bytes"), forward + backward + recompute))

    # the last stage: logit GEMMs (forward, input and weight gradients) and the fp32 loss, forward and backward
    not_gemm = 1.0 - is_kind(d, "gemm")
    tokens = local_tokens(d)
    vocab_local = d.vocab_size / d.tp
    logit_flops = 3.0 * logit_gemm_flops(d)
    logit_gemm_bytes = 3.0 * elem_g * (tokens * d.hidden_size + d.hidden_size * vocab_local
                                       + tokens * vocab_local) * not_gemm
    loss_bytes = 2.0 * tokens * vocab_local * (elem + 8.0) * not_gemm
    logit_sram = 3.0 * elem_g * tokens * vocab_local * d.hidden_size * (1.0 / d.tile_n + 1.0 / d.tile_m) * not_gemm
    logits = {"flops": logit_flops, "hbm_bytes": logit_gemm_bytes + loss_bytes,
              "sram_bytes": logit_sram + loss_bytes}

    stage_devices = d.tp * d.cp * d.dp
    micro_batch_devices, devices = micro_batches_per_step(d) * stage_devices, stage_devices * d.pp
    optimizer_bytes = devices * (sharded_params(d, weight_groups(d, params), optimizer_sharded(d))
                                 * adam_step_bytes_per_param(d))  # (Adam runs no tensor-core FLOPs)
    out = {name: micro_batch_devices * (d.num_layers * work[name] + logits[name]) for name in work}
    return {name: v + optimizer_bytes if name != "flops" else v for name, v in out.items()}


# ---- network bytes per level -------------------------------------------------------------------------

def _fraction(n: torch.Tensor) -> torch.Tensor:
    """(n - 1) / n: the share of a buffer a ring member sends, 0 for a group of one."""
    return (n - 1.0) / n


def all_reduce_link_bytes(bytes_, size, stride, domain, placed=None) -> tuple[torch.Tensor, torch.Tensor]:
    """`(scale_up, scale_out)` bytes one rank sends in a placed (hierarchical) all-reduce of `bytes_`:
    reduce-scatter and all-gather inside the domain, all-reduce of bytes/n_local across domains."""
    n_local, n_domains = coll.placement(size, stride, domain) if placed is None else placed
    return 2.0 * _fraction(n_local) * bytes_, 2.0 * _fraction(n_domains) * bytes_ / n_local


def all_gather_link_bytes(bytes_, size, stride, domain, placed=None) -> tuple[torch.Tensor, torch.Tensor]:
    """As `all_reduce_link_bytes` for an all-gather (or reduce-scatter) of `bytes_` gathered bytes."""
    n_local, n_domains = coll.placement(size, stride, domain) if placed is None else placed
    return _fraction(n_local) * bytes_, _fraction(n_domains) * bytes_ / n_local


def all_to_all_link_bytes(bytes_, size, stride, domain, placed=None) -> tuple[torch.Tensor, torch.Tensor]:
    """An all-to-all: the share of the buffer for peers outside the domain leaves through the NIC."""
    n_local, _ = coll.placement(size, stride, domain) if placed is None else placed
    return (n_local - 1.0) / size * bytes_, (size - n_local) / size * bytes_


def dispatch_link_bytes(token_bytes, top_k, num_groups, group_topk, size, stride, domain,
                        placed=None) -> tuple[torch.Tensor, torch.Tensor]:
    """A dispatch deduplicated per scale-up domain (`collectives.group_dispatch_time_s`): a token
    once through the NIC to each other domain holding one of its experts, then forwarded inside."""
    n_local, n_domains = coll.placement(size, stride, domain) if placed is None else placed
    domains = coll.expected_domains_per_token(top_k, n_domains, num_groups, group_topk)
    return top_k * token_bytes * _fraction(n_local), domains * _fraction(n_domains) * token_bytes


def network_bytes(d: DesignBatch, params: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """`(scale_up, scale_out)` bytes sent by all devices in one step (`(batch,)` each): the collectives
    of `analytical.step.model` (tp, cp, ep per layer and micro-batch, pipeline point-to-point, data parallel)."""
    elem = activation_bytes_per_element(d)
    tokens = local_tokens(d)
    transformer = is_kind(d, "transformer")
    full = full_recompute_share(d)
    domain = d.scale_up_domain
    one = coll.adjacent(d)
    micro_batches = micro_batches_per_step(d)
    devices = d.tp * d.cp * d.dp * d.pp
    per_layer = micro_batches * d.num_layers / d.pp * devices  # rank-layer-micro-batches in a step

    tp = all_reduce_link_bytes(tokens * d.hidden_size * elem * transformer, d.tp, one, domain,
                               coll.placed_group(d, d.tp, one))
    if any_expert_tp(d):  # as analytical.step.model: the MoE MLP's pair over the etp ranks of an expert
        mlp = all_reduce_link_bytes(tokens * d.hidden_size * elem * transformer, mlp_tp(d), one, domain,
                                    coll.placed_group(d, mlp_tp(d), one))
        tp = tuple((attention + moe_mlp) / 2.0 for attention, moe_mlp in zip(tp, mlp))
    kv_bytes = 2.0 * tokens * d.num_kv_heads * head_dim(d) / d.tp * elem * d.cp
    if any_mla(d):
        kv_bytes = torch.where(is_mla(d), tokens * kv_width(d) / d.tp * elem * d.cp, kv_bytes)
    kv_bytes = kv_bytes * transformer
    cp = all_gather_link_bytes(kv_bytes, d.cp, d.tp, domain, coll.placed_group(d, d.cp, d.tp))
    moe = is_moe(d) * transformer
    sp_div = sequence_parallel_divisor(d)
    token_bytes = tokens * d.hidden_size * elem * moe / sp_div
    ep_placed = coll.placed_group(d, d.ep, expert_tp(d))
    ep = all_to_all_link_bytes(token_bytes * routed_copies(d), d.ep, expert_tp(d), domain, ep_placed)
    if any_set(d, "ep_dispatcher"):  # (skipped where no design deduplicates its dispatch)
        dedup = dispatch_link_bytes(token_bytes * routed_copies(d) / d.top_k, d.top_k, d.moe_router_num_groups,
                                    d.moe_router_group_topk, d.ep, expert_tp(d), domain, ep_placed)
        ep = tuple(torch.where(d.ep_dispatcher > 0, x, y) for x, y in zip(dedup, ep))
    counts = {"tp": 4.0 + 2.0 * full, "cp": 3.0 + full, "ep": 4.0 + 2.0 * full}  # fwd + bwd (+ recompute)
    if op_recompute(d) is not None:  # per-op checkpointing gathers the tp input again (half the forward)
        counts["tp"] = counts["tp"] + op_recompute(d)

    # pipeline: a forward activation and a backward gradient per micro-batch and chunk boundary
    # (pp * vp - 1 boundaries), each tp rank sending 1/tp of it (Megatron's scatter-gather)
    p2p_total = 2.0 * micro_batches * (d.pp * d.vp - 1.0) * tokens * d.hidden_size * elem / d.tp \
        * d.tp * d.cp * d.dp
    crosses = (d.pp * d.tp * d.cp * d.dp > domain).to(d.tp.dtype)

    # as analytical.step.model: one collective per class of weights over the ranks that share them
    groups, grad = weight_groups(d, params), grad_bytes_per_param(d)
    shards = shard_groups(d, groups)  # HSDP: the sharded collectives over the shard group

    def over_groups(link_bytes, buffers):
        (b, g, s), *rest = buffers
        up, out = link_bytes(b, g, s, domain, coll.placed_group(d, g, s))
        for b, g, s in rest:
            more_up, more_out = link_bytes(b, g, s, domain, coll.placed_group(d, g, s))
            up, out = up + more_up, out + more_out
        return up, out

    ar = over_groups(all_reduce_link_bytes, [(p * grad, g, s) for p, g, s in groups])
    scatter_gather, replicas = reduce_buffers(d, shards)
    (rs_up, ag_up), (rs_out, ag_out) = over_groups(all_gather_link_bytes, scatter_gather)
    rs, ag = (rs_up, rs_out), (ag_up, ag_out)
    if replicas is not None:  # as analytical.step.model: each shard all-reduced over the replicas
        rs = tuple(a + b for a, b in zip(rs, over_groups(all_reduce_link_bytes, replicas)))
    n_ar, n_rs, n_ag = dp_collective_counts(d)

    def dp_level(i: int) -> torch.Tensor:
        return n_ar * ar[i] + n_rs * rs[i] + n_ag * ag[i]

    levels = []
    for i, p2p_share in ((0, 1.0 - crosses), (1, crosses)):
        model_parallel = counts["tp"] * tp[i] + counts["cp"] * cp[i] + counts["ep"] * ep[i]
        levels.append(per_layer * model_parallel + p2p_share * p2p_total + devices * dp_level(i))
    return levels[0], levels[1]


# ---- the step ----------------------------------------------------------------------------------------

def step_energy(d: DesignBatch, gemms: Gemms, params: torch.Tensor, step_time_s: torch.Tensor,
                busy_s: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
    """Energy breakdown of one step, all devices (`ENERGY_PARTS`, each `(batch,)` in J). `busy_s` is
    the time a device runs kernels (the step less the pipeline bubble; the step when not given)."""
    busy_s = step_time_s if busy_s is None else busy_s
    work = step_work(d, gemms, params)
    up_bytes, out_bytes = network_bytes(d, params)
    up_hops, out_hops = link_traversals(d)
    return {
        "compute": compute_energy_j(work["flops"], flop_energy_for_precision(d), units_power_at_peak_w(d),
                                    busy_s, d.num_devices),
        "sram": sram_energy_j(work["sram_bytes"], d.sram_energy_j_per_byte),
        "hbm": hbm_energy_j(work["hbm_bytes"], d.hbm_energy_j_per_byte),
        "scale_up": network_energy_j(up_bytes, up_hops, d.scale_up_energy_j_per_byte),
        "scale_out": network_energy_j(out_bytes, out_hops, d.scale_out_energy_j_per_byte),
        "static": static_energy_j(d.static_power_w, step_time_s, d.num_devices),
    }


def energy_summary(d: DesignBatch, breakdown: dict[str, torch.Tensor],
                   step_time_s: torch.Tensor) -> dict[str, torch.Tensor]:
    """`energy_j` (step, all devices), `energy_per_token_j` and `avg_power_w` (per device)."""
    energy = sum(breakdown[k] for k in ENERGY_PARTS)
    return {"energy_j": energy,
            "energy_per_token_j": energy / (d.global_batch_size * d.seq_length),
            "avg_power_w": energy / (torch.clamp_min(step_time_s, 1e-30) * d.num_devices)}


def power_reason(reason: torch.Tensor, avg_power_w: torch.Tensor, tdp_w: torch.Tensor) -> torch.Tensor:
    """POWER_OVER_BUDGET where a design passing every earlier rule averages more than its budget
    (`tdp_w` > 0; 0 means no budget)."""
    over = (reason == 0) & (tdp_w > 0) & (avg_power_w > tdp_w)
    return torch.where(over, int(Reason.POWER_OVER_BUDGET), reason)
