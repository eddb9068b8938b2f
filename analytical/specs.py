"""Human-facing specifications of one design, one dataclass per layer.

These are the edge of the model: field names carry human units (TFLOP/s, GB/s, GiB, us) as they appear on
datasheets and in configs. `analytical.design.DesignBatch` converts them to SI tensors. The same dataclasses are
registered as Hydra structured-config schemas by `deepflow.config`, so a typo or a wrong type in a YAML preset fails
when the config is loaded.

Every spec has `validate()`, which raises `SpecError` (defined in `analytical.choices`, below the technology
tables that raise it too; imported from here as well) naming the field and the allowed values. Validation is about
*bad input* (a negative size, an unknown category). Whether a valid design can run (memory, divisibility of the
mapping) is a feasibility answer, not an error: see `analytical.step.feasibility`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from analytical.chip.technology import LINK_TECHS, LOGIC_NODES, MEMORY_TECHS
from analytical.choices import (ATTENTION_KERNELS, CNN_ARCHS, CUDA_GRAPHS, DP_MODES, ELEMENTWISE,  # noqa: F401
                               EP_DISPATCHERS, FFN_TYPES, MASTER_PARAMS, MEGATRON_RECOMPUTE, MODEL_KINDS,
                               OPTIMIZER_STATE_DTYPES, PEAK_FORMATS, PRECISION_FORMAT, PRECISIONS, RECOMPUTE,
                               TOPOLOGIES, SpecError, check_bool, check_choice, check_int, check_positive)
from analytical.stack import OVERLAP_KINDS, stack_overlap


@dataclass
class AcceleratorSpec:
    """One accelerator (GPU/TPU). Peak rates are dense (no structured sparsity); 0 = unsupported."""

    name: str = "accelerator"
    peak_tflops_fp32: float = 0.0
    peak_tflops_tf32: float = 0.0
    peak_tflops_fp16: float = 0.0
    peak_tflops_bf16: float = 0.0
    peak_tflops_fp8: float = 0.0
    peak_tflops_fp4: float = 0.0  # dense NVFP4 (Blackwell); 0 on chips without fp4 tensor cores
    compute_units: int = 1  # SMs (NVIDIA) or TensorCores (TPU)
    # exponentials per second of the special-function units (NVIDIA MUFU.EX2, 10^12/s): the softmax of a fused
    # attention kernel runs on them between its two matmuls; 0 = not modelled (no such term)
    peak_tera_exp_per_s: float = 0.0
    sram_mib: float = 0.0  # last-level on-chip SRAM (L2 / CMEM)
    sram_bw_tb_per_s: float = 0.0
    hbm_gib: float = 0.0
    hbm_bw_gb_per_s: float = 0.0
    scale_up_bw_gb_per_s: float = 0.0  # NVLink-class, per direction per device
    scale_out_gbit_per_s: float = 0.0  # NIC, per direction per device
    # devices one scale-up (NVLink) domain of the platform the part ships in holds (GB200 / GB300 NVL72: 72);
    # 0: one node. A system states its own domain (`SystemSpec.scale_up_domain`); this is the default of a
    # measured run that does not (`deepflow.validation`: min(this, the run's devices), never below its node)
    scale_up_domain: int = 0
    kernel_launch_us: float = 0.0
    tile_m: int = 128  # output tile of the tensor-core GEMM kernels (rows)
    tile_n: int = 128  # (columns)
    tdp_w: float = 0.0  # device power budget; 0 = none (the energy model then flags nothing)
    # a power limit set below the TDP (nvidia-smi -pl): slows the clock (analytical.power_cap); None = TDP
    power_limit_w: Optional[float] = None
    # the rating at which its die runs at the nominal supply, where another part rates the same die lower (GB200:
    # HGX B200's 1,000 W and 2,250 dense 16-bit TFLOPS): the part then sustains the clock its extra watts buy on the
    # V/f model, at most its datasheet's (analytical.power_cap). Both or neither; None: its own datasheet at its TDP
    nominal_tdp_w: Optional[float] = None
    nominal_peak_tflops_bf16: Optional[float] = None
    # technology (energy model, analytical/step/energy.py): rows of analytical/chip/technology.py, A100's by default;
    # static_power_w, when set, overrides the node's leakage (analytical.chip.silicon's share of peak power, nominal V)
    logic_node: str = "N7"
    memory_technology: str = "HBM2e"
    scale_up_link: str = "NVLink3"
    scale_out_link: str = "IB-HDR"
    static_power_w: Optional[float] = None

    def validate(self) -> "AcceleratorSpec":
        spec = f"hardware[{self.name}]"
        for name, table in (("logic_node", LOGIC_NODES), ("memory_technology", MEMORY_TECHS),
                            ("scale_up_link", LINK_TECHS), ("scale_out_link", LINK_TECHS)):
            value = getattr(self, name)
            if not isinstance(value, str) or value.casefold() not in {k.casefold() for k in table}:
                raise SpecError(spec, name, value, "one of " + ", ".join(table))
        for name in ("static_power_w", "power_limit_w", "nominal_tdp_w", "nominal_peak_tflops_bf16"):
            if getattr(self, name) is not None:
                check_positive(spec, self, (name,), allow_zero=name == "static_power_w")
        peaks = tuple(f"peak_tflops_{f}" for f in PEAK_FORMATS)
        check_positive(spec, self, peaks + ("kernel_launch_us", "tdp_w", "scale_out_gbit_per_s",
                                             "peak_tera_exp_per_s"), allow_zero=True)
        check_positive(spec, self, ("sram_mib", "sram_bw_tb_per_s", "hbm_gib", "hbm_bw_gb_per_s",
                                     "scale_up_bw_gb_per_s"))
        check_int(spec, self, ("compute_units", "tile_m", "tile_n"))
        check_int(spec, self, ("scale_up_domain",), minimum=0)
        if max(getattr(self, name) for name in peaks) <= 0:
            raise SpecError(spec, "peak_tflops_*", 0, "at least one precision with a peak > 0")
        rating = (self.nominal_tdp_w, self.nominal_peak_tflops_bf16)
        if (rating[0] is None) != (rating[1] is None):
            raise SpecError(spec, "nominal_tdp_w" if rating[0] is None else "nominal_peak_tflops_bf16", None,
                            "a value set with its pair (nominal_tdp_w, nominal_peak_tflops_bf16), or both null")
        if rating[1] is not None and rating[1] > max(self.peak_tflops_fp16, self.peak_tflops_bf16):
            raise SpecError(spec, "nominal_peak_tflops_bf16", rating[1],
                            "at most the datasheet's 16-bit peak, or null with nominal_tdp_w (no rating)")
        return self


@dataclass
class SystemSpec:
    """A cluster of identical accelerators: nodes joined by a scale-out network."""

    name: str = "system"
    num_devices: int = 8
    devices_per_node: int = 8
    scale_up_domain: int = 8  # devices that share the NVLink-class fabric (8 for DGX, 72 for NVL72)
    topology: str = "rail-optimized"
    scale_out_gbit_per_device: Optional[float] = None  # overrides the accelerator's NIC when set
    scale_up_latency_us: float = 2.0
    scale_out_latency_us: float = 5.0
    oversubscription: float = 1.0  # fat-tree taper above the leaf switches (1 = full bisection)
    # parameter servers (mapping.dp_mode ps_*): machines outside the accelerators' nodes (BytePS's CPU machines,
    # DistBelief's shards), each with this NIC and summing gradients at this rate (0: as fast as its NIC delivers)
    ps_server_gbit: float = 100.0
    ps_server_sum_gb_per_s: float = 0.0
    # spread of a worker's step time (standard deviation / mean) from noise the model does not describe (shared
    # machines, data loading, thermal throttling): what a synchronous step waits for
    straggler_cv: float = 0.0
    host_link_gb_per_s: float = 0.0  # device to host memory, per direction (PCIe); 0: offload copies not priced

    def validate(self) -> "SystemSpec":
        spec = f"system[{self.name}]"
        check_int(spec, self, ("num_devices", "devices_per_node", "scale_up_domain"))
        check_choice(spec, self, "topology", TOPOLOGIES)
        check_positive(spec, self, ("scale_up_latency_us", "scale_out_latency_us", "host_link_gb_per_s"),
                        allow_zero=True)
        check_positive(spec, self, ("oversubscription",))
        if self.oversubscription < 1:
            raise SpecError(spec, "oversubscription", self.oversubscription, ">= 1")
        if self.scale_out_gbit_per_device is not None:
            check_positive(spec, self, ("scale_out_gbit_per_device",))
        check_positive(spec, self, ("ps_server_gbit",))
        check_positive(spec, self, ("ps_server_sum_gb_per_s", "straggler_cv"), allow_zero=True)
        if self.scale_up_domain < self.devices_per_node and self.topology != "torus":
            raise SpecError(spec, "scale_up_domain", self.scale_up_domain,
                            f">= devices_per_node ({self.devices_per_node})")
        return self


@dataclass
class ModelSpec:
    """The workload. `transformer` covers GPT, LLaMA (GQA via num_kv_heads, SwiGLU) and MoE
    (num_experts > 1 with top_k routing); `lstm` uses num_layers, hidden_size, vocab_size and
    seq_length; `gemm` is a single gemm_m x gemm_n x gemm_k matrix product per step; `cnn` is the
    convolutional network `cnn_arch` (its layer table in `analytical.cnns`) on image_size x
    image_size images with a num_classes-way classifier (one image is one "token": seq_length 1)."""

    name: str = "model"
    kind: str = "transformer"
    num_layers: int = 1
    hidden_size: int = 1
    num_heads: int = 1
    num_kv_heads: Optional[int] = None  # None = num_heads (multi-head attention)
    # width of one attention head (Megatron kv_channels, Hugging Face head_dim); None = hidden_size /
    # num_heads. Qwen3, gpt-oss and others set it so that num_heads * head_dim != hidden_size
    head_dim: Optional[int] = None
    # multi-head latent attention (DeepSeek-V2/V3, Kimi K2), on when kv_lora_rank > 0: the key-value
    # latent's width, the query latent's (0: full-rank query), the rotary key part shared by the heads,
    # and the value head (None: head_dim); head_dim is then each head's query-key width without rope
    kv_lora_rank: int = 0
    q_lora_rank: int = 0
    qk_rope_head_dim: int = 0
    v_head_dim: Optional[int] = None
    ffn_hidden_size: Optional[int] = None  # None = 4 * hidden_size
    ffn_type: str = "gelu"
    vocab_size: int = 1
    seq_length: int = 1
    num_experts: int = 1
    top_k: int = 1
    moe_ffn_hidden_size: Optional[int] = None  # width of one routed expert's MLP; None = ffn_hidden_size
    num_shared_experts: int = 0  # experts every token passes through besides its top_k (DeepSeek-style)
    # group-limited routing (DeepSeek-V3's node-limited routing; Megatron-Core moe_router_num_groups
    # and moe_router_group_topk): the experts form `moe_router_num_groups` contiguous groups and a
    # token picks its top_k experts inside `moe_router_group_topk` of them; 1 and 1: no limit
    moe_router_num_groups: int = 1
    moe_router_group_topk: int = 1
    # sliding-window attention (Megatron-Core window_size / window_attn_skip_freq; gpt-oss, Mistral 7B):
    # a windowed layer's query sees the `window_size` latest keys, itself included (0: every layer
    # attends to the whole causal prefix); with `window_attn_skip_freq` N > 0 every N-th layer
    # (1-indexed) attends in full and the others through the window, with 0 every layer does
    window_size: int = 0
    window_attn_skip_freq: int = 0
    # a clamped gated MLP (gpt-oss: Megatron-Core `activation_func_clamp_value`, Hugging Face `swiglu_limit`
    # 7.0): the gate is clamped from above and the linear half on both sides at this value; 0 = no clamp
    activation_clamp: float = 0.0
    # the linear layers carry biases (Megatron-Core `add_bias_linear`: GPT-3, gpt-oss; LLaMA has none)
    linear_bias: bool = False
    rope_mscale: float = 1.0  # YaRN's attention factor on RoPE's cos / sin (1: none; analytical.step.eager_ops)
    gemm_m: int = 1
    gemm_n: int = 1
    gemm_k: int = 1
    cnn_arch: Optional[str] = None  # kind cnn: one of CNN_ARCHS
    image_size: int = 224  # kind cnn: input height = width (224 for ImageNet, 32 for CIFAR-10)
    num_classes: int = 1000  # kind cnn: outputs of the classifier

    @property
    def kv_heads(self) -> int:
        return self.num_heads if self.num_kv_heads is None else self.num_kv_heads

    @property
    def ffn_size(self) -> int:
        return 4 * self.hidden_size if self.ffn_hidden_size is None else self.ffn_hidden_size

    @property
    def expert_ffn_size(self) -> int:
        return self.ffn_size if self.moe_ffn_hidden_size is None else self.moe_ffn_hidden_size

    def validate(self) -> "ModelSpec":
        spec = f"model[{self.name}]"
        check_choice(spec, self, "kind", MODEL_KINDS)
        check_choice(spec, self, "ffn_type", FFN_TYPES)
        check_int(spec, self, ("num_layers", "hidden_size", "num_heads", "vocab_size", "seq_length",
                                "num_experts", "top_k", "gemm_m", "gemm_n", "gemm_k"))
        if self.num_kv_heads is not None:
            check_int(spec, self, ("num_kv_heads",))
        if self.ffn_hidden_size is not None:
            check_int(spec, self, ("ffn_hidden_size",))
        if self.moe_ffn_hidden_size is not None:
            check_int(spec, self, ("moe_ffn_hidden_size",))
        check_int(spec, self, ("num_shared_experts",), minimum=0)
        if self.head_dim is not None:
            check_int(spec, self, ("head_dim",))
        check_int(spec, self, ("kv_lora_rank", "q_lora_rank", "qk_rope_head_dim"), minimum=0)
        if self.v_head_dim is not None:
            check_int(spec, self, ("v_head_dim",))
        if self.kv_lora_rank == 0:
            for name in ("q_lora_rank", "qk_rope_head_dim", "v_head_dim"):
                if getattr(self, name):
                    raise SpecError(spec, name, getattr(self, name),
                                    "0 (None for v_head_dim) unless kv_lora_rank > 0 (multi-head latent attention)")
        elif self.head_dim is None or self.kv_heads != self.num_heads:
            field = "head_dim" if self.head_dim is None else "num_kv_heads"
            raise SpecError(spec, field, getattr(self, field),
                            "a head_dim given, and num_kv_heads = num_heads, with multi-head latent attention")
        if self.kind == "transformer":
            if self.head_dim is None and self.hidden_size % self.num_heads:
                raise SpecError(spec, "num_heads", self.num_heads,
                                f"a divisor of hidden_size ({self.hidden_size}) unless head_dim is given")
            if self.num_heads % self.kv_heads:
                raise SpecError(spec, "num_kv_heads", self.num_kv_heads,
                                f"a divisor of num_heads ({self.num_heads})")
        if self.top_k > self.num_experts:
            raise SpecError(spec, "top_k", self.top_k, f"<= num_experts ({self.num_experts})")
        check_int(spec, self, ("image_size", "num_classes"))
        if self.kind == "cnn":
            check_choice(spec, self, "cnn_arch", CNN_ARCHS)
            if self.seq_length != 1 or self.num_layers != 1:
                field = "seq_length" if self.seq_length != 1 else "num_layers"
                raise SpecError(spec, field, getattr(self, field),
                                "1 for kind cnn (a network is one layer table; an image is one token)")
        elif self.cnn_arch is not None:
            raise SpecError(spec, "cnn_arch", self.cnn_arch, "null unless kind is cnn")
        check_int(spec, self, ("moe_router_num_groups", "moe_router_group_topk"))
        check_int(spec, self, ("window_size", "window_attn_skip_freq"), minimum=0)
        check_positive(spec, self, ("activation_clamp",), allow_zero=True)
        check_positive(spec, self, ("rope_mscale",))
        check_bool(spec, self, ("linear_bias",))
        if self.num_experts % self.moe_router_num_groups:
            raise SpecError(spec, "moe_router_num_groups", self.moe_router_num_groups,
                            f"a divisor of num_experts ({self.num_experts})")
        if self.moe_router_num_groups > 1 and self.moe_router_group_topk > self.moe_router_num_groups:
            raise SpecError(spec, "moe_router_group_topk", self.moe_router_group_topk,
                            f"<= moe_router_num_groups ({self.moe_router_num_groups})")
        return self


@dataclass
class MappingSpec:
    """How the workload is laid onto the system (the software layer).

    dp = None derives data parallelism from the device count. vp > 1 selects the interleaved
    1F1B schedule with vp model chunks per device; vp = 1 is plain 1F1B.
    """

    name: str = "mapping"
    tp: int = 1
    pp: int = 1
    dp: Optional[int] = None
    cp: int = 1
    ep: int = 1
    vp: int = 1
    sequence_parallel: bool = False
    micro_batch_size: int = 1
    global_batch_size: int = 1
    recompute: str = "none"
    zero_stage: int = 0
    # ZeRO-3 as PyTorch FSDP2 / Megatron-FSDP run it (whole-block all-gathers prefetched one block ahead, reduce-
    # scatters overlapped with the next block's backward), not DeepSpeed 2021's per-module ones; needs zero_stage 3
    fsdp: bool = False
    # HSDP: the sharded states (ZeRO >= 1, the distributed optimizer, FSDP) split over dp_shard x cp ranks,
    # dp / dp_shard replicas all-reducing the shard's gradients (torchtitan data_parallel_shard_degree with
    # data_parallel_replicate_degree dp / dp_shard; Megatron-Core num_distributed_optimizer_instances); 0: all dp
    dp_shard: int = 0
    distributed_optimizer: bool = False
    precision: str = "bf16"
    flash_attention: bool = True
    # overlap of the data-parallel reduction and weight gather with compute (Megatron-Core overlap_grad_reduce /
    # overlap_param_gather), of tensor-parallel traffic with the GEMMs (Transformer Engine userbuffers), and of the
    # steady-1F1B pipeline sends (Megatron-Core overlap_p2p_comm: fill and flush exposed). None: the stack's default,
    # `stack_overlap` (on where the distributed optimizer marks Megatron-Core as NeMo / Megatron-Bridge run it)
    overlap_dp_comm: Optional[bool] = None
    overlap_tp_comm: Optional[bool] = None
    overlap_pp_comm: Optional[bool] = None
    # EP dispatch and combine of one micro-batch beside another's compute (overlap_moe_expert_parallel_comm)
    overlap_ep_comm: bool = False
    ep_dispatcher: str = "alltoall"  # one of EP_DISPATCHERS
    # MoE token dropping (Megatron-Core moe_expert_capacity_factor): an expert takes at most this factor times its
    # balanced share of tokens (routing is balanced here: below 1 drops, 1 or more keeps all); 0: dropless. Padded
    # (moe_pad_expert_input_to_capacity): each expert computes and receives its whole capacity in static shapes (no
    # host-device sync in the dispatcher); not with the deepep dispatcher (Megatron-Core refuses it)
    moe_capacity_factor: float = 0.0
    moe_pad_to_capacity: bool = False
    cuda_graph: str = "none"  # one of CUDA_GRAPHS
    # layers of each pipeline stage whose activations wait in host memory between the forward and backward passes
    # (Megatron-Core cpu_offloading_num_layers); their copies overlap compute as far as SystemSpec.host_link allows
    offload_layers: int = 0
    # independent single-device jobs of one model fused (HFTA, Wang et al. MLSys 2021): each operator of the B jobs
    # runs as one batched kernel; 1 = one job
    fused_jobs: int = 1
    dp_mode: str = "allreduce"  # one of DP_MODES
    ps_shards: int = 0  # parameter-server shards (one per server machine) for dp_mode ps_*
    staleness: int = 0  # ps_sync: steps a worker may run ahead of the slowest (0 = BSP)
    # the loss as one fused (or compiled) cross-entropy over the 16-bit logits and one fp32 copy (Megatron's
    # vocab-parallel cross entropy); false: PyTorch's eager F.cross_entropy on logits.float() (torchtitan before it
    # compiled the loss, 2025-04), whose backward holds three fp32 copies: saved log-softmax, its gradient, result
    fused_cross_entropy: bool = True
    # with recompute=full, the layers of each pipeline stage that are recomputed, the others keeping all their
    # activations (Megatron recompute_method=block, recompute_num_layers; torchtitan's selective_ac_option k
    # checkpoints every k-th block: num_layers / k); 0: every layer
    recompute_layers: int = 0
    # 16-bit training keeps fp32 main gradients and reduces them in fp32 (Megatron-LM forces accumulate_allreduce_
    # grads_in_fp32 with --bf16, arguments.py; FSDP2's reduce_dtype float32 in torchtitan); false: gradients accumulate
    # and reduce in the 16-bit parameter dtype, 2 bytes a parameter (Megatron-Bridge's perf recipes set it False)
    grad_reduce_in_fp32: bool = True
    optimizer_state_dtype: str = "fp32"  # Adam's moments as kept between steps: one of OPTIMIZER_STATE_DTYPES
    master_params: str = "fp32"  # the optimizer's copy of 16-bit or narrower weights: one of MASTER_PARAMS
    # expert tensor parallelism: the experts' weights split over etp ranks instead of tp (Megatron-Core expert_tensor_
    # parallel_size; Megatron-Bridge's MoE perf recipes set 1: with tp > 1 each expert is whole on a rank and the ep
    # group spans the tp ranks); 0: etp = tp (Megatron's default)
    etp: int = 0
    # fp8 primary weights (Megatron `fp8_param_gather`, Transformer Engine fp8 parameters): under per-tensor fp8
    # (`precision: fp8`) the compute weights exist only in fp8, cast from the fp32 master weights, and the distributed
    # optimizer all-gathers them in fp8: 1 byte a parameter held and sent instead of a 16-bit weight plus its fp8 cast
    # (Megatron-Core MoE README, FP8 training: "Eliminate BF16 weight copies", "50% parameter all-gather", "except
    # MXFP8"). Under FSDP, FSDP2's float8 all-gather (torchtitan `enable_fsdp_float8_all_gather`): each rank casts its
    # 16-bit shard to fp8 and the gathers move fp8, the sharded weights staying 16-bit. The embedding and output layer
    # gather 16 bits (no fp8 GEMM runs them). No effect on other precisions or under DeepSpeed's ZeRO-3
    fp8_param_gather: bool = False
    # fp8 attention (Megatron `fp8_dot_product_attention`, Transformer Engine's cuDNN FP8 fused attention): under a
    # narrow precision the fused attention's matmuls run at the fp8 peak. No effect in 16 bits or unfused
    fp8_attention: bool = False
    # the experts' MLP as one fused kernel chain (Megatron-Core's cuteDSL fused grouped MLP; Megatron-Bridge's
    # `cutedsl_fused_grouped_mlp` / `use_transformer_engine_op_fuser`): the activation's clamp (`ModelSpec.
    # activation_clamp`) and the experts' weighted output bias run inside it, else as eager ops (`step.eager_ops`)
    fused_expert_mlp: bool = False
    elementwise: str = "fused"  # one of ELEMENTWISE
    attention_kernel: str = "native"  # one of ATTENTION_KERNELS
    # with sequence parallelism, a column-parallel GEMM keeps its all-gathered input for the weight gradient: PyTorch
    # DTensor's ColwiseParallel behind PrepareModuleInput (torchtitan), whose autograd saves the gathered tensor;
    # false: Megatron-Core / Transformer Engine keep the 1/tp shard and gather it again in backward (TE linear.py
    # `backward_input_needs_gather`): a layer's QKV and fc1 inputs and the output layer's input held whole, not 1/tp.
    # DTensor also lays activations out batch first and gathers and scatters along the sequence, so each of its
    # sequence-parallel collectives copies the whole tensor (`step.eager_ops`; Megatron's sequence-first layout: none)
    sp_keeps_gathered_input: bool = False

    def validate(self) -> "MappingSpec":
        spec = f"mapping[{self.name}]"
        check_int(spec, self, ("tp", "pp", "cp", "ep", "vp", "micro_batch_size", "global_batch_size", "fused_jobs"))
        if self.dp is not None:
            check_int(spec, self, ("dp",))
        check_int(spec, self, ("zero_stage", "offload_layers", "recompute_layers", "etp", "dp_shard"), minimum=0)
        if self.recompute_layers and self.recompute != "full":
            raise SpecError(spec, "recompute_layers", self.recompute_layers, "0 unless recompute is full")
        if self.zero_stage > 3:
            raise SpecError(spec, "zero_stage", self.zero_stage, "0, 1, 2 or 3")
        if self.fsdp and self.zero_stage != 3:
            raise SpecError(spec, "fsdp", self.fsdp, "false unless zero_stage is 3 (FSDP shards weights)")
        for name, choices in (("recompute", RECOMPUTE), ("precision", PRECISIONS), ("ep_dispatcher", EP_DISPATCHERS),
                              ("cuda_graph", CUDA_GRAPHS), ("dp_mode", DP_MODES), ("elementwise", ELEMENTWISE),
                              ("attention_kernel", ATTENTION_KERNELS),
                              ("optimizer_state_dtype", OPTIMIZER_STATE_DTYPES), ("master_params", MASTER_PARAMS)):
            check_choice(spec, self, name, choices)
        if self.master_params != "fp32" and self.precision in ("fp32", "tf32"):
            raise SpecError(spec, "master_params", self.master_params,
                            "fp32 unless precision is 16-bit or narrower (fp32 / tf32 training steps its own weights)")
        check_int(spec, self, ("ps_shards", "staleness"), minimum=0)
        check_positive(spec, self, ("moe_capacity_factor",), allow_zero=True)
        if self.moe_pad_to_capacity and (self.moe_capacity_factor == 0 or self.ep_dispatcher == "deepep"):
            raise SpecError(spec, "moe_pad_to_capacity", self.moe_pad_to_capacity,
                            "false unless moe_capacity_factor > 0 and ep_dispatcher is not deepep")
        if self.staleness and self.dp_mode != "ps_sync":
            raise SpecError(spec, "staleness", self.staleness,
                            "0 unless dp_mode is ps_sync (ps_async has no bound, allreduce no slack)")
        check_bool(spec, self, tuple(OVERLAP_KINDS.values()), optional=True)
        check_bool(spec, self, ("sequence_parallel", "fsdp", "distributed_optimizer", "flash_attention",
                                 "overlap_ep_comm", "fused_cross_entropy", "grad_reduce_in_fp32", "fp8_param_gather",
                                 "fp8_attention", "fused_expert_mlp", "moe_pad_to_capacity", "sp_keeps_gathered_input"))
        if self.overlap_ep_comm and self.recompute == "full":
            raise SpecError(spec, "overlap_ep_comm", self.overlap_ep_comm, "false with recompute=full (Megatron-Core's "
                            "expert-parallel overlap schedules the forward and backward of two micro-batches "
                            "together, which full recomputation breaks)")
        return self

    def overlap(self, kind: str) -> bool:
        """Whether `kind` ("dp", "tp" or "pp") traffic overlaps compute: the field where set, else `stack_overlap`."""
        value = getattr(self, OVERLAP_KINDS[kind])
        return stack_overlap(self, kind) if value is None else value
