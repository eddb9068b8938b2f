"""The allowed values of the specs' fields (`analytical.specs`, `analytical.chip`), with what each one means,
and `SpecError`, the error that names a field holding anything else.

Plain tuples of names and the checks of a field against them, below every other module: `analytical.codes`
numbers the names for the tensors of a `DesignBatch`, the specs (`analytical.specs`, the chip and technology
tables of `analytical.chip`) check their fields here, the CLI lists the names in its errors.
"""

from __future__ import annotations

from typing import Any

from analytical.cnns import CNN_ARCHS  # noqa: F401  (the cnn model kind's networks, a choice like these)


class SpecError(ValueError):
    """A specification field holds a value outside its allowed set or range."""

    def __init__(self, spec: str, field: str, value: Any, allowed: str):
        self.spec, self.field, self.value, self.allowed = spec, field, value, allowed
        super().__init__(f"{spec}.{field} = {value!r} is invalid: allowed {allowed}")


def check_positive(spec: str, obj: Any, names: tuple[str, ...], allow_zero: bool = False) -> None:
    """Each of `names` is a number > 0 (>= 0 with `allow_zero`)."""
    for name in names:
        value = getattr(obj, name)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise SpecError(spec, name, value, "a number")
        if value != value or value < 0 or (value == 0 and not allow_zero):
            raise SpecError(spec, name, value, ">= 0" if allow_zero else "> 0")


# The largest counts a spec accepts: sizes beyond any buildable system or trainable model are a typo or a unit
# slip, named like a negative size rather than evaluated into figures no system has (`system.num_devices=1e20`
# once gave a static energy of 1.3e14 GJ a step).
# Devices: 2**24 = 16,777,216. The largest training clusters built hold about 100k-200k GPUs (xAI Colossus,
# 2024-25; Meta's 2 x 24k H100 clusters) and the largest announced about 1M: 2**24 is 16x that. It bounds every
# count of devices: the system's, a node's, a scale-up domain's, each parallel degree and the parameter servers.
MAX_DEVICES = 2**24
DEVICE_COUNTS = ("num_devices", "devices_per_node", "scale_up_domain", "tp", "pp", "dp", "cp", "ep", "etp",
                 "dp_shard", "ps_shards")
# Every other integer size: 2**30 = 1,073,741,824: 10x the longest context claimed (100M tokens) and far above
# the largest vocabulary (~256k), width (~25k), layer count (~126), expert count (~384) or global batch (tens of
# thousands of sequences) trained; GEMM dimensions, images, tiles, jobs and layer counts of a mapping alike.
MAX_SIZE = 2**30
SIZE_COUNTS = ("compute_units", "tile_m", "tile_n", "num_layers", "hidden_size", "num_heads", "num_kv_heads",
               "head_dim", "kv_lora_rank", "q_lora_rank", "qk_rope_head_dim", "v_head_dim", "ffn_hidden_size",
               "vocab_size", "seq_length", "num_experts", "top_k", "moe_ffn_hidden_size", "num_shared_experts",
               "moe_router_num_groups", "moe_router_group_topk", "window_size", "window_attn_skip_freq", "gemm_m",
               "gemm_n", "gemm_k", "image_size", "num_classes", "vp", "micro_batch_size", "global_batch_size",
               "offload_layers", "fused_jobs", "staleness", "recompute_layers", "flops_per_cycle_per_unit",
               "scale_out_lanes")


def count_limit(name: str) -> int:
    """The largest value of integer field `name`: `MAX_DEVICES` for a count of devices, else `MAX_SIZE`."""
    return MAX_DEVICES if name in DEVICE_COUNTS else MAX_SIZE


def count_range(name: str, minimum: int = 1) -> str:
    """The allowed values of integer field `name`, in words (the end of a SpecError's line)."""
    return f"an integer from {minimum} to {count_limit(name):,} ({count_reason(name)})"


def count_reason(name: str) -> str:
    """Why `count_limit(name)` is the limit, in a few words."""
    if count_limit(name) == MAX_DEVICES:
        return "2**24: above any cluster built"
    return "2**30: above any model or batch trained"


def check_int(spec: str, obj: Any, names: tuple[str, ...], minimum: int = 1) -> None:
    """Each of `names` is an integer from `minimum` to its `count_limit`."""
    for name in names:
        value = getattr(obj, name)
        if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= count_limit(name):
            raise SpecError(spec, name, value, count_range(name, minimum))


def check_choice(spec: str, obj: Any, name: str, choices: tuple[str, ...]) -> None:
    """Field `name` is one of `choices`."""
    value = getattr(obj, name)
    if value not in choices:
        raise SpecError(spec, name, value, "one of " + ", ".join(choices))


def check_bool(spec: str, obj: Any, names: tuple[str, ...], optional: bool = False) -> None:
    """Each of `names` is a bool (or, `optional`, None: the stack's default, `MappingSpec.overlap`)."""
    for name in names:
        value = getattr(obj, name)
        if not isinstance(value, bool) and not (optional and value is None):
            allowed = "true, false or null (the stack's default)" if optional else "true or false"
            raise SpecError(spec, name, value, allowed)


PRECISIONS = ("fp32", "tf32", "fp16", "bf16", "fp8", "mxfp8", "nvfp4")
# the precisions whose GEMMs run in an 8- or 4-bit format with 16-bit activations between them (Transformer Engine's
# recipes; `analytical.step.workload.is_narrow`: every code from fp8's on)
NARROW_PRECISIONS = PRECISIONS[PRECISIONS.index("fp8"):]
# the precisions under which the gradients' dtype is a choice (`MappingSpec.grad_reduce_in_fp32`): fp32 main
# gradients or the bf16 parameter dtype (`analytical.step.param_bytes.grad_bytes_per_param`)
GRAD_DTYPE_PRECISIONS = ("bf16", *NARROW_PRECISIONS)
# Tensor-core number formats with a peak rate of their own; a training precision runs its GEMMs at the peak of its
# format: mxfp8 (OCP microscaling, 32-element blocks with an e8m0 scale) at fp8's, nvfp4 (16-element blocks with an
# e4m3 scale) at fp4's (NVIDIA Blackwell architecture brief, 2024).
PEAK_FORMATS = ("fp32", "tf32", "fp16", "bf16", "fp8", "fp4")
PRECISION_FORMAT = {"fp32": "fp32", "tf32": "tf32", "fp16": "fp16", "bf16": "bf16", "fp8": "fp8",
                    "mxfp8": "fp8", "nvfp4": "fp4"}
# A Transformer layer's MLP and the conventions around it (`analytical.step.workload`): `gelu`, GPT-style (biases,
# LayerNorm, learned positions, tied output embedding, dropout); `swiglu`, LLaMA-style (gated, no biases, RMSNorm,
# rotary positions, untied output layer, no dropout); `squared_relu`, Nemotron-style: a 2-matrix MLP with relu(x)^2,
# LayerNorm, no biases, rotary positions, untied output layer, no dropout (NeMo NemotronConfig, Nemotron-4 15B / 340B)
FFN_TYPES = ("gelu", "swiglu", "squared_relu")
MODEL_KINDS = ("transformer", "lstm", "gemm", "cnn")
# Activation recomputation: `selective` is Megatron's (the attention core; with fused attention the norms and MLP
# activation), `full` every layer's forward, `op` torchtitan's per-op selective checkpointing (selective_ac_option
# "op": matmul and attention-kernel outputs saved, every other matmul and all element-wise ops recomputed;
# torchtitan parallelize_llama.py, _custom_policy)
RECOMPUTE = ("none", "selective", "full", "op")
# what the mapping search and the validation's `recompute=auto` try unless told otherwise
MEGATRON_RECOMPUTE = ("none", "selective", "full")
TOPOLOGIES = ("fat-tree", "rail-optimized", "torus")
# How an expert-parallel group moves tokens (Megatron-Core moe_token_dispatcher_type / moe_flex_dispatcher_backend):
# `alltoall` sends one copy of a token per chosen expert; `deepep` (DeepEP) and `hybridep` (HybridEP) send it once to
# each other scale-up domain holding one of its experts, fanned out inside (DeepSeek-V3, arXiv 2412.19437, 3.2.2)
EP_DISPATCHERS = ("alltoall", "deepep", "hybridep")
# How much of a step replays from CUDA graphs (Megatron-Core cuda_graph_impl / cuda_graph_scope): `none` (eager);
# `partial`, per-layer graphs of some modules (scope attn, moe_router, ...), the experts and dispatch eager; `layer`,
# whole layers (`enable_cuda_graph`); `full`, the whole step ("full_iteration"). Only `full` takes the host out: rows
# with whole-layer graphs still show per-layer gaps (the schedule stays on the host): `partial`, `layer` time as `none`
CUDA_GRAPHS = ("none", "partial", "layer", "full")
# How data-parallel replicas combine their gradients: `allreduce` (NCCL-style collectives); `ps_sync`, workers push
# gradients to and pull weights from `ps_shards` parameter-server shards and wait for each other (BSP; with `staleness`
# s > 0 the stale-synchronous SSP of Ho et al. NIPS 2013); `ps_async`, DistBelief's Downpour SGD (Dean et al. NIPS 2012)
DP_MODES = ("allreduce", "ps_sync", "ps_async")
# How a Transformer layer's norms, rotary embedding and MLP activation run (analytical.step.eager_ops):
# `fused` kernels (Megatron-Core / Transformer Engine, or torch.compile); `eager`: the PyTorch ops of torchtitan's
# Llama block without torch.compile; `eager_fused_norm` with its Triton `fused_rmsnorm` (its 2024-04 default);
# `eager_activation`: fused norms and rotary embedding, the MLP's activation as eager PyTorch ops (NeMo 2.x's Nemotron
# squared ReLU, `torch.pow(relu(x), 2)` without a jit: nemo/collections/llm/fn/activation.py)
ELEMENTWISE = ("fused", "eager", "eager_fused_norm", "eager_activation")
# Fused attention kernel (analytical.step.kernels.attention_peak): `native`, the generation's own (Transformer Engine's
# cuDNN kernels, FlashAttention-3 on Hopper); `fa2`, FlashAttention-2 on Ampere's instructions (PyTorch SDPA's flash)
ATTENTION_KERNELS = ("native", "fa2")
# Dtype of Adam's two moments (exp_avg, exp_avg_sq) as kept between steps: Megatron-Core's precision-aware optimizer
# (`use_precision_aware_optimizer`, `exp_avg_dtype` / `exp_avg_sq_dtype`: fp32, fp16, bf16, fp8; megatron/training/
# arguments.py), Apex DistributedFusedAdam's `dtype` (NeMo 1.x `optim.dtype`); DeepSeek-V3 tracks them in bf16 (arXiv
# 2412.19437, section 3.3 FP8 Training, "Low-Precision Storage and Communication"). The update itself runs in fp32
OPTIMIZER_STATE_DTYPES = ("fp32", "bf16", "fp16", "fp8")
# The optimizer's copy of the weights under 16-bit or narrower training: `fp32` master weights; `fp16` (Megatron-Core
# precision-aware `main_params_dtype` fp16); `remainder`, the 16 low bits of each fp32 master weight beside its bf16
# weight (Apex DistributedFusedAdam `store_param_remainders`, NeMo 1.x's default with fp32 states and bf16 weights,
# megatron_base_model.py); `none`, the optimizer steps the 16-bit weights themselves (Apex `store_params` false with
# 16-bit states). fp32 / tf32 training steps its fp32 weights, no copy: only `fp32` is allowed there
MASTER_PARAMS = ("fp32", "fp16", "remainder", "none")
