"""Speed of the analytical model: one design, a million designs, and the best-mapping search.

    python experiments/benchmarks/bench_analytical.py [--batch 1000000] [--repeats 300] [--glibc-defaults]

Prints human-readable figures, then ONE JSON line (the last line of stdout) with:

- single_design_ms: median over `--repeats` calls of `evaluate(single_design(...))`, building the
  batch of one from the specs included; single_design_eval_only_ms: `evaluate` on a prebuilt batch
  of one; single_design_build_ms: `single_design` alone.
- batch_designs_per_s: `--batch` designs (a GPT-3 175B / 1024 A100 template expanded and its mapping
  fields randomised) over the wall time of ONE `evaluate` call (median of `--batch-repeats`);
  batch_designs_per_s_chunked: the same designs evaluated in chunks of 65,536.
- mapping_search_s / mappings_enumerated / mappings_feasible / best_mapping: `best_mappings` for
  GPT-3 175B on 1024 A100-80GB (DGX A100 nodes), global batch 1536 (median wall time of
  `--search-repeats` calls; mapping_search_first_s is the first call in the process, before any
  other search); the same with suffix _13b_h100 for GPT-3 13B on 64 H100-80GB, global batch 1024.
  The search evaluates on one torch thread (`SearchOptions.num_threads`); mapping_search_2threads_s
  and _max_s time it on torch's 2 threads instead (spiky on a shared 2-core machine).

- single_design_tensor_ops / chunk_tensor_ops / chunk_elements_per_design: the tensor operations one
  `evaluate` dispatches for the single design and for one 65,536-design chunk, and the elements they
  produce per design (counted with a `TorchDispatchMode`): deterministic, where wall times on a shared
  2-core machine move by 10-30 % between runs, so two versions of the model compare exactly.

- retain_freed_memory: whether the process kept its freed memory (`deepflow.allocator.retain_freed_memory`, as
  the `deepflow` command does; false with `--glibc-defaults`, which leaves glibc's malloc as it starts, or off
  glibc); page_faults_per_chunk: the minor page faults of one 65,536-design `evaluate` (after a warm-up);
  max_rss_mib: the process's peak resident memory.

Targets: single design <= 1 ms, >= 1e6 designs/s, search <= 5 s. torch runs on 2 threads.
The specs are built in code (datasheet values, not the conf/ presets) so the figures do not move
when a preset is edited.
"""

from __future__ import annotations

import argparse
import json
import platform
import resource
import statistics
import time

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from analytical import AcceleratorSpec, MappingSpec, ModelSpec, SystemSpec, evaluate, single_design
from analytical.codes import DTYPE
from analytical.search import SearchOptions, best_mappings
from deepflow.allocator import retain_freed_memory

# NVIDIA A100 SXM4 80GB datasheet (dense tensor-core peaks); 40 MiB L2, 7 TB/s L2 (estimate);
# NVLink3 300 GB/s per direction; one 200 Gbit/s HDR NIC per GPU in a DGX A100.
A100 = AcceleratorSpec(name="a100-sxm-80gb", peak_tflops_fp32=19.5, peak_tflops_tf32=156.0,
                       peak_tflops_fp16=312.0, peak_tflops_bf16=312.0, peak_tflops_fp8=0.0, compute_units=108,
                       sram_mib=40.0, sram_bw_tb_per_s=7.0, hbm_gib=80.0, hbm_bw_gb_per_s=2039.0,
                       scale_up_bw_gb_per_s=300.0, scale_out_gbit_per_s=200.0, kernel_launch_us=4.0,
                       tile_m=128, tile_n=128, tdp_w=400.0)
# NVIDIA H100 SXM5 80GB datasheet (dense peaks); NVLink4 450 GB/s per direction; 400 Gbit/s NDR NIC.
H100 = AcceleratorSpec(name="h100-sxm-80gb", peak_tflops_fp32=67.0, peak_tflops_tf32=494.0,
                       peak_tflops_fp16=989.0, peak_tflops_bf16=989.0, peak_tflops_fp8=1979.0, compute_units=132,
                       sram_mib=50.0, sram_bw_tb_per_s=12.0, hbm_gib=80.0, hbm_bw_gb_per_s=3350.0,
                       scale_up_bw_gb_per_s=450.0, scale_out_gbit_per_s=400.0, kernel_launch_us=3.0,
                       tile_m=128, tile_n=256, tdp_w=700.0, logic_node="N4", memory_technology="HBM3",
                       scale_up_link="NVLink4", scale_out_link="IB-NDR")  # TSMC 4N, HBM3 (H100 whitepaper)
DGX_A100_1024 = SystemSpec(name="dgx-a100-1024", num_devices=1024, devices_per_node=8, scale_up_domain=8,
                           topology="rail-optimized")
DGX_H100_64 = SystemSpec(name="dgx-h100-64", num_devices=64, devices_per_node=8, scale_up_domain=8,
                         topology="rail-optimized")
GPT3_175B = ModelSpec(name="gpt3-175b", num_layers=96, hidden_size=12288, num_heads=96, vocab_size=51200,
                      seq_length=2048)
GPT3_13B = ModelSpec(name="gpt3-13b", num_layers=40, hidden_size=5120, num_heads=40, vocab_size=51200,
                     seq_length=2048)
# Megatron-LM's published 175B recipe (Narayanan et al. 2021; Korthikanti et al. 2022)
MAPPING_175B = MappingSpec(name="gpt3-175b-1024", tp=8, pp=8, dp=16, micro_batch_size=1, global_batch_size=1536,
                           recompute="selective", sequence_parallel=True, precision="bf16")


def _median_ms(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def random_designs(n: int, seed: int = 0) -> torch.Tensor:
    """n GPT-3 175B / 1024 A100 designs with randomised mapping fields (most valid, some not)."""
    g = torch.Generator().manual_seed(seed)

    def pick(values):
        table = torch.tensor(values, dtype=DTYPE)
        return table[torch.randint(len(values), (n,), generator=g)]

    tp, pp, cp = pick([1, 2, 4, 8]), pick([1, 2, 4, 8, 16]), pick([1, 1, 1, 2])
    template = single_design(A100, DGX_A100_1024, GPT3_175B, MAPPING_175B)
    return template.expand(n).replace(
        tp=tp, pp=pp, cp=cp, dp=1024.0 / (tp * pp * cp), vp=pick([1, 1, 2, 4]), micro_batch_size=pick([1, 2, 4, 8]),
        recompute=pick([0, 1, 2]), zero_stage=pick([0, 1, 1, 2, 3]), distributed_optimizer=pick([0, 1]),
        sequence_parallel=pick([0, 1]), flash_attention=pick([0, 1]), overlap_dp_comm=pick([0, 1]),
        overlap_tp_comm=pick([0, 1]))


def bench_search(name: str, accelerator, system, model, global_batch: int, repeats: int,
                 options: SearchOptions | None = None) -> dict:
    start = time.perf_counter()
    found = best_mappings(accelerator, system, model, global_batch, top_k=10, options=options)
    first = time.perf_counter() - start
    walls = [first]
    for _ in range(repeats - 1):
        start = time.perf_counter()
        best_mappings(accelerator, system, model, global_batch, top_k=10, options=options)
        walls.append(time.perf_counter() - start)
    best = found.best_row or {}
    out = {
        "search_s": statistics.median(walls),
        "first_s": first,
        "max_s": max(walls),
        "enumerated": found.num_enumerated,
        "feasible": found.num_feasible,
        "best": ({"mapping": {k: v for k, v in found.best.__dict__.items() if k != "name"},
                  "step_time_s": best["step_time_s"], "mfu": best["mfu"],
                  "memory_gib": best["memory_per_device_bytes"] / 2.0**30} if found.best else None),
    }
    print(f"\n[{name}] {model.name} on {system.num_devices} x {accelerator.name}, global batch {global_batch}")
    print(f"  {found.num_enumerated:,} mappings enumerated, {found.num_feasible:,} feasible; search "
          f"{out['search_s']:.3f} s median of {repeats} (first {first:.3f} s, max {out['max_s']:.3f} s)")
    for i, (m, r) in enumerate(zip(found.mappings[:5], found.rows[:5]), start=1):
        memory_gib = r["memory_per_device_bytes"] / 2**30
        print(f"  #{i}: {r['step_time_s']:8.3f} s  MFU {r['mfu']:.1%}  mem {memory_gib:5.1f} GiB"
              f"  tp={m.tp} pp={m.pp} dp={m.dp} cp={m.cp} vp={m.vp} mbs={m.micro_batch_size}"
              f" sp={int(m.sequence_parallel)} recompute={m.recompute} zero={m.zero_stage}"
              f" distopt={int(m.distributed_optimizer)}")
    return out


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


def count_ops(designs) -> tuple[int, int]:
    """`(tensor ops, result elements)` of one `evaluate(designs)` (after a warm-up call)."""
    evaluate(designs)
    with _OpCount() as count:
        evaluate(designs)
    return count.ops, count.elements


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=300)
    parser.add_argument("--batch-repeats", type=int, default=3)
    parser.add_argument("--search-repeats", type=int, default=5)
    parser.add_argument("--glibc-defaults", action="store_true",
                        help="leave glibc's malloc as it starts instead of retaining freed memory")
    args = parser.parse_args()
    retained = False if args.glibc_defaults else retain_freed_memory()
    torch.set_num_threads(2)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, Python {platform.python_version()}, "
          f"{platform.processor() or platform.machine()}")

    # searches first, so that mapping_search_first_s is a first search of the process
    search_175b = bench_search("search 175B", A100, DGX_A100_1024, GPT3_175B, 1536, args.search_repeats)
    search_13b = bench_search("search 13B", H100, DGX_H100_64, GPT3_13B, 1024, args.search_repeats)
    # the same 175B search with torch's 2 intra-op threads instead of the search's default of one
    search_2t = bench_search("search 175B, 2 torch threads", A100, DGX_A100_1024, GPT3_175B, 1536,
                             args.search_repeats, SearchOptions(num_threads=None))

    # one design
    build = lambda: single_design(A100, DGX_A100_1024, GPT3_175B, MAPPING_175B)  # noqa: E731
    prebuilt = build()
    for _ in range(20):
        evaluate(build())
    single_ms = _median_ms(lambda: evaluate(build()), args.repeats)
    eval_only_ms = _median_ms(lambda: evaluate(prebuilt), args.repeats)
    build_ms = _median_ms(build, args.repeats)
    row = evaluate(prebuilt).row(0)
    print(f"\n[single design] GPT-3 175B tp8 pp8 dp16 on 1024 A100: step {row['step_time_s']:.3f} s, "
          f"MFU {row['mfu']:.1%}")
    print(f"  evaluate(single_design(...)): {single_ms:.3f} ms median of {args.repeats} "
          f"(build {build_ms:.3f} ms, evaluate only {eval_only_ms:.3f} ms); target <= 1 ms")

    # a million designs
    designs = random_designs(args.batch)
    evaluate(designs.index(slice(0, 4096)))
    chunk = 1 << 16

    def chunked() -> None:
        for lo in range(0, args.batch, chunk):
            evaluate(designs.index(slice(lo, lo + chunk)))

    chunked_s = statistics.median(_median_ms(chunked, 1) / 1e3 for _ in range(args.batch_repeats))
    single_ops, _ = count_ops(prebuilt)
    chunk_designs = designs.index(slice(0, min(chunk, args.batch)))
    chunk_ops, chunk_elements = count_ops(chunk_designs)
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    evaluate(chunk_designs)
    chunk_faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults
    walls, feasible = [], 0.0
    for _ in range(args.batch_repeats):
        start = time.perf_counter()
        res = evaluate(designs)
        walls.append(time.perf_counter() - start)
        feasible = float(res.feasible.double().mean())
        del res
    batch_s = statistics.median(walls)
    print(f"\n[batch] {args.batch:,} designs ({feasible:.1%} feasible), medians of {args.batch_repeats}: "
          f"one evaluate call {batch_s:.3f} s -> {args.batch / batch_s:,.0f} designs/s; in chunks of {chunk:,}: "
          f"{chunked_s:.3f} s -> {args.batch / chunked_s:,.0f} designs/s; target >= 1,000,000/s")
    print(f"[tensor ops] one evaluate: {single_ops:,} for the single design, {chunk_ops:,} for a chunk of "
          f"{chunk_designs.batch_size:,} ({chunk_elements / chunk_designs.batch_size:,.0f} result elements a design)")
    print(f"[memory] freed memory retained: {retained}; {chunk_faults:,} minor page faults an evaluate of the chunk")

    result = {
        "single_design_ms": round(single_ms, 4),
        "single_design_eval_only_ms": round(eval_only_ms, 4),
        "single_design_build_ms": round(build_ms, 4),
        "batch_size": args.batch,
        "batch_designs_per_s": round(args.batch / batch_s),
        "batch_designs_per_s_chunked": round(args.batch / chunked_s),
        "single_design_tensor_ops": single_ops,
        "chunk_tensor_ops": chunk_ops,
        "chunk_elements_per_design": round(chunk_elements / chunk_designs.batch_size),
        "mapping_search_s": round(search_175b["search_s"], 4),
        "mapping_search_first_s": round(search_175b["first_s"], 4),
        "mappings_enumerated": search_175b["enumerated"],
        "mappings_feasible": search_175b["feasible"],
        "best_mapping": search_175b["best"],
        "mapping_search_2threads_s": round(search_2t["search_s"], 4),
        "mapping_search_2threads_max_s": round(search_2t["max_s"], 4),
        "mapping_search_13b_h100_s": round(search_13b["search_s"], 4),
        "mapping_search_13b_h100_first_s": round(search_13b["first_s"], 4),
        "mappings_enumerated_13b_h100": search_13b["enumerated"],
        "mappings_feasible_13b_h100": search_13b["feasible"],
        "best_mapping_13b_h100": search_13b["best"],
        "retain_freed_memory": retained,
        "page_faults_per_chunk": chunk_faults,
        "max_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
    }
    result["targets_met"] = {
        "single_design_ms<=1": result["single_design_ms"] <= 1.0,
        "batch_designs_per_s>=1e6": result["batch_designs_per_s"] >= 1e6,
        "mapping_search_s<=5": result["mapping_search_s"] <= 5.0 and result["mapping_search_13b_h100_s"] <= 5.0,
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
