"""Shared fixtures for the analytical-model tests.

Every spec is built here, in code (no YAML presets): an A100-80GB-like and an H100-like
accelerator, DGX-like systems, and the reference workloads (GPT-3 175B, a LLaMA-2-7B-like GQA/SwiGLU
model, a Mixtral-8x7B-like MoE, an LSTM and a plain GEMM). `random_designs` samples a large
`DesignBatch` field by field, plausible but often infeasible, for property tests.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

from analytical import AcceleratorSpec, DesignBatch, ModelSpec, StepResult, SystemSpec, evaluate, single_design
from analytical.codes import CNN_ARCH_CODES, DTYPE, GIB, MIB, RECOMPUTE_CODES


@pytest.fixture(autouse=True, scope="module")
def _single_torch_thread():
    """The model's element-wise ops on (batch,) tensors are faster on one thread than with intra-op
    parallelism on a small, shared machine (10x on 2 cores); restored after each module."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


# ---- hardware ----------------------------------------------------------------------------------

def a100_spec() -> AcceleratorSpec:
    return AcceleratorSpec(
        name="a100-80gb-test", peak_tflops_fp32=19.5, peak_tflops_tf32=156.0, peak_tflops_fp16=312.0,
        peak_tflops_bf16=312.0, peak_tflops_fp8=0.0, compute_units=108, sram_mib=40.0, sram_bw_tb_per_s=7.0,
        hbm_gib=80.0, hbm_bw_gb_per_s=2039.0, scale_up_bw_gb_per_s=300.0, scale_out_gbit_per_s=200.0,
        kernel_launch_us=4.0, tile_m=128, tile_n=128, tdp_w=400.0)


def h100_spec() -> AcceleratorSpec:
    return AcceleratorSpec(
        name="h100-sxm-test", peak_tflops_fp32=67.0, peak_tflops_tf32=494.7, peak_tflops_fp16=989.4,
        peak_tflops_bf16=989.4, peak_tflops_fp8=1978.9, compute_units=132, sram_mib=50.0, sram_bw_tb_per_s=12.0,
        hbm_gib=80.0, hbm_bw_gb_per_s=3350.0, scale_up_bw_gb_per_s=450.0, scale_out_gbit_per_s=400.0,
        kernel_launch_us=4.0, tile_m=128, tile_n=256, tdp_w=700.0, logic_node="N4", memory_technology="HBM3",
        scale_up_link="NVLink4", scale_out_link="IB-NDR")


def dgx_system(num_devices: int = 8, **overrides) -> SystemSpec:
    """Nodes of 8 devices sharing one NVLink domain, joined by a rail-optimized network."""
    values = dict(name=f"dgx-{num_devices}", num_devices=num_devices, devices_per_node=8, scale_up_domain=8,
                  topology="rail-optimized", scale_up_latency_us=2.0, scale_out_latency_us=5.0)
    values.update(overrides)
    return SystemSpec(**values)


# ---- workloads ---------------------------------------------------------------------------------

def gpt3_175b_spec() -> ModelSpec:
    return ModelSpec(name="gpt3-175b-test", kind="transformer", num_layers=96, hidden_size=12288, num_heads=96,
                     vocab_size=51200, seq_length=2048, ffn_type="gelu")


def gpt_spec(num_layers: int, hidden: int, heads: int, vocab: int, seq: int) -> ModelSpec:
    return ModelSpec(name=f"gpt-{num_layers}x{hidden}", kind="transformer", num_layers=num_layers,
                     hidden_size=hidden, num_heads=heads, vocab_size=vocab, seq_length=seq, ffn_type="gelu")


def llama2_7b_spec() -> ModelSpec:
    return ModelSpec(name="llama2-7b-test", kind="transformer", num_layers=32, hidden_size=4096, num_heads=32,
                     num_kv_heads=32, ffn_hidden_size=11008, ffn_type="swiglu", vocab_size=32000, seq_length=4096)


def llama_gqa_spec() -> ModelSpec:
    """LLaMA-2-70B-like: GQA with 8 key-value heads, SwiGLU."""
    return ModelSpec(name="llama2-70b-test", kind="transformer", num_layers=80, hidden_size=8192, num_heads=64,
                     num_kv_heads=8, ffn_hidden_size=28672, ffn_type="swiglu", vocab_size=32000, seq_length=4096)


def mixtral_spec() -> ModelSpec:
    return ModelSpec(name="mixtral-8x7b-test", kind="transformer", num_layers=32, hidden_size=4096, num_heads=32,
                     num_kv_heads=8, ffn_hidden_size=14336, ffn_type="swiglu", vocab_size=32000, seq_length=4096,
                     num_experts=8, top_k=2)


def lstm_spec() -> ModelSpec:
    return ModelSpec(name="lstm-test", kind="lstm", num_layers=2, hidden_size=1024, vocab_size=10000,
                     seq_length=128)


def gemm_spec() -> ModelSpec:
    return ModelSpec(name="gemm-test", kind="gemm", gemm_m=8192, gemm_n=8192, gemm_k=8192)


@pytest.fixture
def a100() -> AcceleratorSpec:
    return a100_spec()


@pytest.fixture
def h100() -> AcceleratorSpec:
    return h100_spec()


@pytest.fixture
def system() -> SystemSpec:
    return dgx_system(8)


@pytest.fixture
def make_system():
    return dgx_system


@pytest.fixture
def gpt3() -> ModelSpec:
    return gpt3_175b_spec()


@pytest.fixture
def llama7b() -> ModelSpec:
    return llama2_7b_spec()


@pytest.fixture
def llama_gqa() -> ModelSpec:
    return llama_gqa_spec()


@pytest.fixture
def mixtral() -> ModelSpec:
    return mixtral_spec()


@pytest.fixture
def lstm() -> ModelSpec:
    return lstm_spec()


@pytest.fixture
def gemm_model() -> ModelSpec:
    return gemm_spec()


@pytest.fixture
def make_gpt():
    """`make_gpt(num_layers, hidden, heads, vocab, seq)` -> GPT-style ModelSpec."""
    return gpt_spec


@pytest.fixture
def small_gpt() -> ModelSpec:
    """A GPT-1.3B-like model that trains comfortably on 16 A100s."""
    return gpt_spec(24, 2048, 16, 51200, 2048)


# ---- helpers -----------------------------------------------------------------------------------

def one(accelerator, system_, model, mapping) -> DesignBatch:
    return single_design(accelerator, system_, model, mapping)


def run_one(accelerator, system_, model, mapping) -> StepResult:
    return evaluate(single_design(accelerator, system_, model, mapping))


@pytest.fixture
def design():
    """`design(accelerator, system, model, mapping)` -> DesignBatch of one."""
    return one


@pytest.fixture
def run():
    """`run(accelerator, system, model, mapping)` -> StepResult of one design."""
    return run_one


def with_fields(spec, **changes):
    return dataclasses.replace(spec, **changes)


@pytest.fixture
def replace():
    return with_fields


# ---- random designs ----------------------------------------------------------------------------

def random_design_batch(n: int, seed: int = 0) -> DesignBatch:
    """`n` designs sampled field by field within plausible ranges: powers of two for degrees, all
    workload kinds and precisions, often infeasible (degrees not matching devices, OOM, ...)."""
    g = torch.Generator().manual_seed(seed)

    def uniform(lo, hi):
        return lo + (hi - lo) * torch.rand(n, generator=g, dtype=DTYPE)

    def ints(lo, hi):
        return torch.randint(lo, hi + 1, (n,), generator=g).to(DTYPE)

    def pow2(lo, hi):
        return 2.0 ** ints(lo, hi)

    def choice(values):
        table = torch.tensor(values, dtype=DTYPE)
        return table[torch.randint(len(values), (n,), generator=g)]

    def coin(p):
        return torch.rand(n, generator=g, dtype=DTYPE) < p

    num_devices = pow2(0, 13)
    devices_per_node = pow2(0, 3)
    heads = pow2(0, 7)
    hidden = heads * choice([64, 80, 128])
    tp, pp, cp = pow2(0, 4), pow2(0, 4), pow2(0, 2)
    derived_dp = torch.clamp_min(torch.floor(num_devices / (tp * pp * cp)), 1.0)
    dp = torch.where(coin(0.85), derived_dp, pow2(0, 6))
    mbs = pow2(0, 4)
    # at least one micro-batch per step; 15% not a multiple of dp * micro_batch_size
    per_step = dp * mbs * pow2(0, 6)
    gbs = per_step + torch.where(coin(0.15), torch.floor(torch.rand(n, generator=g, dtype=DTYPE) * dp * mbs),
                                 torch.zeros(n, dtype=DTYPE))
    experts = choice([1, 1, 1, 8, 16, 64])
    fields = dict(
        peak_fp32_flops_per_s=uniform(10, 100) * 1e12,
        peak_tf32_flops_per_s=torch.where(coin(0.9), uniform(100, 1000) * 1e12, torch.zeros(n, dtype=DTYPE)),
        peak_fp16_flops_per_s=uniform(100, 2500) * 1e12,
        peak_bf16_flops_per_s=torch.where(coin(0.9), uniform(100, 2500) * 1e12, torch.zeros(n, dtype=DTYPE)),
        peak_fp8_flops_per_s=torch.where(coin(0.5), uniform(400, 5000) * 1e12, torch.zeros(n, dtype=DTYPE)),
        peak_fp4_flops_per_s=torch.where(coin(0.3), uniform(800, 10000) * 1e12, torch.zeros(n, dtype=DTYPE)),
        compute_units=ints(32, 160),
        sram_bytes=uniform(8, 256) * MIB,
        sram_bw_bytes_per_s=uniform(2, 40) * 1e12,
        hbm_bytes=uniform(16, 192) * GIB,
        hbm_bw_bytes_per_s=uniform(0.5, 8.0) * 1e12,
        scale_up_bw_bytes_per_s=uniform(25, 1000) * 1e9,
        # 3% without a NIC (valid: single-node parts); infeasible once they span several domains
        scale_out_bw_bytes_per_s=torch.where(coin(0.03), torch.zeros(n, dtype=DTYPE), uniform(1, 100) * 1e9),
        kernel_launch_s=uniform(0, 10) * 1e-6,
        tile_m=choice([64, 128, 256]),
        tile_n=choice([64, 128, 256]),
        tdp_w=uniform(200, 1200),
        num_devices=num_devices,
        devices_per_node=devices_per_node,
        scale_up_domain=devices_per_node * choice([1, 2, 9]),
        topology=ints(0, 2),
        scale_up_latency_s=uniform(0, 5) * 1e-6,
        scale_out_latency_s=uniform(0, 20) * 1e-6,
        oversubscription=uniform(1, 4),
        kind=choice([0, 0, 0, 0, 0, 0, 1, 2]),
        num_layers=ints(1, 128),
        hidden_size=hidden,
        num_heads=heads,
        num_kv_heads=torch.clamp_min(heads / pow2(0, 3), 1.0),
        ffn_hidden_size=torch.round(hidden * uniform(2, 6)),
        ffn_type=ints(0, 1),
        vocab_size=ints(1000, 256000),
        seq_length=pow2(7, 15),
        num_experts=experts,
        top_k=torch.minimum(choice([1, 2]), experts),
        gemm_m=pow2(0, 15),
        gemm_n=pow2(0, 15),
        gemm_k=pow2(0, 15),
        tp=tp,
        pp=pp,
        dp=dp,
        cp=cp,
        ep=pow2(0, 3),
        vp=choice([1, 1, 2, 4]),
        sequence_parallel=ints(0, 1),
        micro_batch_size=mbs,
        global_batch_size=gbs,
        recompute=ints(0, 2),
        zero_stage=ints(0, 3),
        distributed_optimizer=ints(0, 1),
        precision=ints(0, 4),
        flash_attention=ints(0, 1),
        overlap_dp_comm=ints(0, 1),
        overlap_tp_comm=ints(0, 1),
    )
    # energy fields (analytical/step/energy.py), drawn after the others so that those keep their values
    pj = 1e-12
    fields.update(
        flop_energy_fp32_j=uniform(0.5, 5.0) * pj,
        flop_energy_tf32_j=uniform(0.3, 3.0) * pj,
        flop_energy_fp16_j=uniform(0.1, 2.0) * pj,
        flop_energy_bf16_j=uniform(0.1, 2.0) * pj,
        flop_energy_fp8_j=uniform(0.05, 1.0) * pj,
        flop_energy_fp4_j=uniform(0.02, 0.5) * pj,
        sram_energy_j_per_byte=uniform(2.0, 20.0) * pj,
        hbm_energy_j_per_byte=uniform(15.0, 60.0) * pj,
        scale_up_energy_j_per_byte=uniform(16.0, 60.0) * pj,
        scale_out_energy_j_per_byte=uniform(40.0, 320.0) * pj,
        static_power_w=uniform(0.1, 0.35) * fields["tdp_w"],
    )
    # MoE widths, shared experts and FSDP (added later), drawn last for the same reason
    fields.update(
        moe_ffn_hidden_size=torch.where(experts > 1, torch.round(hidden * uniform(0.25, 4)), fields["ffn_hidden_size"]),
        num_shared_experts=torch.where(experts > 1, ints(0, 2), torch.zeros(n, dtype=DTYPE)),
        fsdp=(fields["zero_stage"] == 3).to(DTYPE) * ints(0, 1),
        overlap_pp_comm=ints(0, 1),
        offload_layers=ints(0, 1) * ints(0, 8),
    )
    # expert-parallel dispatch and overlap, router groups (added later still)
    groups = torch.where(experts > 1, 2.0 ** ints(0, 1), torch.ones(n, dtype=DTYPE))
    fields.update(
        moe_router_num_groups=groups,
        moe_router_group_topk=torch.where(groups > 1, ints(1, 2), torch.ones(n, dtype=DTYPE)),
        overlap_ep_comm=ints(0, 1) * (fields["recompute"] != RECOMPUTE_CODES["full"]).to(DTYPE),
        ep_dispatcher=ints(0, 2),
        head_dim=ints(0, 1) * 2.0 ** ints(5, 8),  # derived, or 32..256 (heads x head_dim != hidden)
    )
    # multi-head latent attention on a quarter of the designs (kv heads = heads, a head_dim given)
    mla = (ints(0, 3) == 0) & (fields["kind"] == 0)
    zero = torch.zeros(n, dtype=DTYPE)
    fields.update(
        kv_lora_rank=torch.where(mla, 2.0 ** ints(7, 9), zero),
        q_lora_rank=torch.where(mla, ints(0, 1) * 2.0 ** ints(8, 10), zero),
        qk_rope_head_dim=torch.where(mla, 2.0 ** ints(4, 6), zero),
        v_head_dim=torch.where(mla, ints(0, 1) * 2.0 ** ints(6, 7), zero),
    )
    fields["num_kv_heads"] = torch.where(mla, fields["num_heads"], fields["num_kv_heads"])
    fields["head_dim"] = torch.where(mla & (fields["head_dim"] == 0), 2.0 ** ints(6, 7), fields["head_dim"])
    # convolutional networks on an eighth of the designs (one layer table, one image a token), and
    # fused repeated jobs (HFTA) on a third
    cnn = (ints(0, 7) == 0) & ~mla
    one_ = torch.ones(n, dtype=DTYPE)
    fields.update(
        kind=torch.where(cnn, 3.0 * one_, fields["kind"]),
        cnn_arch=torch.where(cnn, ints(1, len(CNN_ARCH_CODES)), zero),
        image_size=torch.where(cnn, choice([32, 64, 224, 1024]), 224.0 * one_),
        num_classes=torch.where(cnn, choice([10, 16, 1000]), 1000.0 * one_),
        fused_jobs=torch.where(ints(0, 2) == 0, choice([2, 4, 8]), one_),
    )
    # parameter-server data parallelism with stragglers and staleness (added last)
    dp_mode = choice([0, 0, 1, 2])
    fields.update(
        dp_mode=dp_mode,
        ps_shards=ints(0, 16),
        staleness=torch.where(dp_mode == 1, ints(0, 4), zero),
        ps_server_bw_bytes_per_s=uniform(1.0, 50.0) * 1e9,
        ps_server_sum_bytes_per_s=ints(0, 1) * uniform(5.0, 100.0) * 1e9,
        straggler_cv=ints(0, 1) * uniform(0.0, 0.3),
    )
    # torchtitan's per-op checkpointing and its eager fp32 cross-entropy (added last)
    fields.update(recompute=torch.where(ints(0, 5) == 0, float(RECOMPUTE_CODES["op"]) * one_, fields["recompute"]),
                  fused_cross_entropy=ints(0, 1))
    fields["grad_reduce_in_fp32"] = ints(0, 1)  # 16-bit gradient reduction (added last)
    full = fields["recompute"] == RECOMPUTE_CODES["full"]
    fields["recompute_layers"] = torch.where(full & (ints(0, 2) == 0), ints(1, 8), zero)
    fields["etp"] = torch.where(ints(0, 2) == 0, one_, zero)  # whole experts on each rank (added last)
    # special-function units on most accelerators (16 or 32 exponentials a clock per unit at 1.4-2 GHz)
    # and sliding-window attention on a quarter of the designs (added last)
    sfu = ints(0, 3).clamp_max(1) * choice([16, 32]) * uniform(1.4, 2.0) * 1e9
    fields["peak_exp_per_s"] = sfu * fields["compute_units"]
    fields["window_size"] = torch.where(ints(0, 3) == 0, pow2(5, 12), zero)
    fields["window_attn_skip_freq"] = ints(0, 1) * ints(1, 4)
    fields["fp8_param_gather"] = ints(0, 1)  # fp8 primary weights (added last)
    fields["cuda_graph"] = ints(0, 3)  # CUDA_GRAPH_CODES
    fields["fp8_attention"] = ints(0, 1)
    # a clamped GLU on a quarter of the designs, biased linear layers, a fused grouped MLP (added last)
    fields["activation_clamp"] = torch.where(ints(0, 3) == 0, 7.0 * one_, zero)
    fields["linear_bias"] = ints(0, 1)
    fields["fused_expert_mlp"] = ints(0, 1)
    fields["elementwise"] = ints(0, 2)  # ELEMENTWISE_CODES
    fields["attention_kernel"] = ints(0, 1)  # ATTENTION_KERNEL_CODES
    # HSDP on a quarter of the designs: half of an even dp, all of an odd one, now and then 3 (which may not divide
    # dp: DP_SHARD_INVALID) (added last)
    half = torch.where(torch.remainder(fields["dp"], 2.0) == 0, fields["dp"] / 2.0, fields["dp"])
    fields["dp_shard"] = torch.where(ints(0, 3) == 0, torch.where(ints(0, 7) == 0, 3.0 * one_, half), zero)
    # a host link on half of the designs, 16-256 GB/s a direction (offloaded copies priced) (added last)
    fields["host_link_bw_bytes_per_s"] = ints(0, 1) * uniform(16.0, 256.0) * 1e9
    # MoE token dropping on a quarter of the designs, padded to capacity on half of those (not with deepep)
    fields["moe_capacity_factor"] = torch.where(ints(0, 3) == 0, choice([0.5, 1.0, 1.25, 2.0]), zero)
    fields["moe_pad_to_capacity"] = ((fields["moe_capacity_factor"] > 0) & (fields["ep_dispatcher"] != 1)).to(DTYPE) \
        * ints(0, 1)
    fields["rope_mscale"] = torch.where(ints(0, 3) == 0, 1.3466 * one_, one_)
    # 16-bit or fp8 Adam moments on a quarter of the designs, a 16-bit or no master copy on another (added last)
    fields["optimizer_state_dtype"] = torch.where(ints(0, 3) == 0, ints(1, 3), zero)
    fields["master_params"] = torch.where(ints(0, 3) == 0, ints(1, 3), zero)
    # Nemotron-style squared-ReLU MLPs on a quarter of the designs, an eager MLP activation beside fused norms on
    # another quarter (added last)
    fields["ffn_type"] = torch.where(ints(0, 3) == 0, 2.0 * one_, fields["ffn_type"])
    fields["elementwise"] = torch.where(ints(0, 3) == 0, 3.0 * one_, fields["elementwise"])
    fields["sp_keeps_gathered_input"] = ints(0, 1)  # DTensor's sequence parallelism (added last)
    fields["num_layers"] = torch.where(cnn, one_, fields["num_layers"])
    fields["seq_length"] = torch.where(cnn, one_, fields["seq_length"])
    return DesignBatch(**fields)


@pytest.fixture
def make_random_designs():
    """`make_random_designs(n, seed)` -> DesignBatch of n sampled designs."""
    return random_design_batch


@pytest.fixture(scope="session")
def random_designs_100k() -> DesignBatch:
    return random_design_batch(100_000, seed=1234)


@pytest.fixture(scope="session")
def random_designs_20k() -> DesignBatch:
    return random_design_batch(20_000, seed=99)
