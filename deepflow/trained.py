"""What a measured run having trained implies about what its validation row leaves out.

A published run fit its devices' memory and its mapping was valid, so where a row does not state how it ran,
`deepflow.validation.read_rows` takes the lightest choice that makes it so: the recompute of `recompute=auto`,
the gradient reduce precision, activation offloading where nothing else fits, and an expert tensor
parallelism the mapping admits. Every inference is a stack's documented setting, never fitted on time, and
`assumed` reports it per row (`rows[].assumed` of `deepflow validate output=json`).
"""

from __future__ import annotations

import dataclasses

from analytical import Reason, evaluate, stack_designs
from analytical.step.feasibility import expert_grid_fits

# `recompute` a source does not state: the lightest that fits device memory (it trained, so it fit)
AUTO = "auto"


def trained_etp(tp: int, ep: int, dp: int, cp: int, experts: int) -> int:
    """The expert tensor parallelism of a row that states none: Megatron-Core's default (0: tp) where its expert
    grid fits the mapping (etp * ep divides dp * cp * tp); where it does not, the run (which trained) set a smaller
    one, and 1 is what the recipes set (every literal `expert_tensor_parallel_size` in Megatron-Bridge @067f987df,
    142, and in NeMo @8cfedd7203, 8, is 1)."""
    return 0 if experts <= 1 or expert_grid_fits(tp, ep, dp, cp, tp) else 1


def first_fitting(specs: list[tuple], options: dict[int, list[dict]]) -> dict[int, int | None]:
    """Per row `i` of `options` (mapping fields to replace): the index of its first option that fits device
    memory, or None (one batch)."""
    if not options:
        return {}
    trial = [(*specs[i][:3], dataclasses.replace(specs[i][3], **o)) for i, opts in options.items() for o in opts]
    fits = (evaluate(stack_designs(*zip(*trial))).reason != int(Reason.OUT_OF_MEMORY)).tolist()
    out, start = {}, 0
    for i, opts in options.items():
        row_fits, start = fits[start:start + len(opts)], start + len(opts)
        out[i] = row_fits.index(True) if any(row_fits) else None
    return out


def _stage_layers(spec: tuple) -> int:
    """Layers of the most loaded pipeline stage."""
    return -(-spec[2].num_layers // spec[3].pp)


def fewest_that_fit(specs: list[tuple], searches: dict[int, tuple[dict, str, int]]) -> dict[int, int | None]:
    """Per row `i` of `searches` (`(fields, name, most)`): the smallest k in 1..most for which the mapping with
    `fields` and `name=k` fits device memory, or None; memory falls as k grows (layers recomputed or
    offloaded), so a bisection: one batch per halving, about log2(most) batches whatever the rows."""
    def fits(ks: dict[int, int]) -> dict[int, bool]:
        found = first_fitting(specs, {i: [dict(searches[i][0], **{searches[i][1]: k})] for i, k in ks.items()})
        return {i: f == 0 for i, f in found.items()}

    top = fits({i: most for i, (_, _, most) in searches.items() if most >= 1})
    bounds = {i: (1, searches[i][2]) for i, ok in top.items() if ok}  # the answer lies in [lo, hi]
    while any(lo < hi for lo, hi in bounds.values()):
        mid = {i: (lo + hi) // 2 for i, (lo, hi) in bounds.items() if lo < hi}
        for i, ok in fits(mid).items():
            lo, hi = bounds[i]
            bounds[i] = (lo, mid[i]) if ok else (mid[i] + 1, hi)
    return {i: bounds[i][0] if i in bounds else None for i in searches}


def lightest_that_fits(specs: list[tuple], auto: set[int], grads_unstated: set[int],
                       offload_unstated: set[int]) -> list[tuple]:
    """`specs` with each row of `auto` (recompute unstated), `grads_unstated` (gradient reduce precision
    unstated) or `offload_unstated` (activation offloading unstated) given the lightest choice that fits its
    device memory: recompute none, selective, full on the fewest layers of each stage (Megatron
    recompute_method=block), full on all (the heaviest where none fits: the run reports out of memory); at each,
    fp32 gradient reduction (Megatron-LM's bf16 default) before bf16, which NVIDIA's benchmark scripts set (NeMo
    @8cfedd7203 scripts/performance/helpers.py set_precision_configs, Megatron-Bridge @067f987df
    perf_recipes/_common.py _perf_precision) and which costs no time. Where none of those fits, the activations
    of the fewest layers of each stage wait in host memory (Megatron `cpu_offloading_num_layers`, which
    Megatron-Bridge's Megatron-FSDP recipes set for Llama 3 70B / 3.1 405B on GB200), over the lightest
    recompute and gradients. A row that overlaps its expert-parallel traffic never had full recompute
    (Megatron-Core refuses the pair). Layer counts are searched only where needed."""
    specs = list(specs)

    def levels(i: int) -> list[dict]:
        m = specs[i][3]
        recomputes = (["none", "selective"] + ([] if m.overlap_ep_comm else ["full"])) if i in auto else [m.recompute]
        grads = [True, False] if i in grads_unstated else [m.grad_reduce_in_fp32]
        return [{"recompute": r, "recompute_layers": 0 if i in auto else m.recompute_layers, "grad_reduce_in_fp32": g}
                for r in recomputes for g in grads]

    options = {i: levels(i) for i in sorted(auto | grads_unstated | offload_unstated)}
    first = first_fitting(specs, options)
    choice = {i: opts[-1 if first[i] is None else first[i]] if i in auto else opts[first[i] or 0]
              for i, opts in options.items()}
    # where full recompute fits and nothing lighter does: the fewest layers of the most loaded stage, below all
    partial = {i: (choice[i], "recompute_layers", _stage_layers(specs[i]) - 1)
               for i in auto if first[i] is not None and choice[i]["recompute"] == "full"}
    # where nothing fits: the fewest offloaded layers, over the lightest recompute with the lightest gradients
    offload = {i: ([o for o in options[i] if o["recompute"] == options[i][0]["recompute"]][-1], "offload_layers",
                   _stage_layers(specs[i])) for i in offload_unstated if first[i] is None}
    for search in (partial, offload):
        for i, k in fewest_that_fit(specs, search).items():
            choice[i] = choice[i] if k is None else dict(search[i][0], **{search[i][1]: k})
    for i, c in choice.items():
        specs[i] = (*specs[i][:3], dataclasses.replace(specs[i][3], **c))
    return specs


def assumed(spec: tuple, auto: bool, etp_stated: bool, grads_unstated: bool, offload_unstated: bool) -> dict:
    """What was inferred for one row because the run trained: the recompute of `recompute=auto`, the gradient
    reduce precision where it is unstated and not Megatron-LM's fp32, offloaded layers where unstated
    (`lightest_that_fits`), an expert tensor parallelism other than Megatron-Core's default (`trained_etp`)."""
    mapping, out = spec[3], {}
    if auto:
        out["recompute"] = mapping.recompute + (f", {mapping.recompute_layers} layers a stage"
                                                if mapping.recompute_layers else "")
    if grads_unstated and not mapping.grad_reduce_in_fp32:
        out["grad_reduce_in_fp32"] = 0
    if offload_unstated and mapping.offload_layers:
        out["offload_layers"] = mapping.offload_layers
    if not etp_stated and mapping.etp:
        out["etp"] = mapping.etp
    return out
