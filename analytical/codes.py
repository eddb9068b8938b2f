"""Codes and units every layer shares: the tensor dtype, the integer codes of categorical
parameters, SI unit factors, and the reasons a design cannot run. Below every other module."""

from __future__ import annotations

from enum import IntEnum

import torch

from analytical.choices import (ATTENTION_KERNELS, CNN_ARCHS, CUDA_GRAPHS, DP_MODES, ELEMENTWISE, EP_DISPATCHERS,
                                FFN_TYPES, MASTER_PARAMS, MODEL_KINDS, OPTIMIZER_STATE_DTYPES, PEAK_FORMATS,
                                PRECISION_FORMAT, PRECISIONS, RECOMPUTE, TOPOLOGIES)

DTYPE = torch.float64  # every tensor of the model
# integer codes of the categorical parameters (a DesignBatch stores them as float64)
PRECISION_CODES = {name: i for i, name in enumerate(PRECISIONS)}
# index into PEAK_FORMATS of each precision code: which peak (and J/FLOP) field its GEMMs use
PRECISION_FORMAT_INDEX = tuple(PEAK_FORMATS.index(PRECISION_FORMAT[p]) for p in PRECISIONS)
FFN_CODES = {name: i for i, name in enumerate(FFN_TYPES)}
KIND_CODES = {name: i for i, name in enumerate(MODEL_KINDS)}
RECOMPUTE_CODES = {name: i for i, name in enumerate(RECOMPUTE)}
TOPOLOGY_CODES = {name: i for i, name in enumerate(TOPOLOGIES)}
EP_DISPATCHER_CODES = {name: i for i, name in enumerate(EP_DISPATCHERS)}
CUDA_GRAPH_CODES = {name: i for i, name in enumerate(CUDA_GRAPHS)}
CNN_ARCH_CODES = {name: i + 1 for i, name in enumerate(CNN_ARCHS)}  # 0: not a CNN
DP_MODE_CODES = {name: i for i, name in enumerate(DP_MODES)}
ELEMENTWISE_CODES = {name: i for i, name in enumerate(ELEMENTWISE)}
ATTENTION_KERNEL_CODES = {name: i for i, name in enumerate(ATTENTION_KERNELS)}
OPTIMIZER_STATE_DTYPE_CODES = {name: i for i, name in enumerate(OPTIMIZER_STATE_DTYPES)}
MASTER_PARAMS_CODES = {name: i for i, name in enumerate(MASTER_PARAMS)}

# SI factors of the specs' human units
TFLOPS = 1e12
GB = 1e9
GIB = 2.0**30
MIB = 2.0**20
US = 1e-6


# why a design cannot run: the first rule it breaks (analytical.step.feasibility, analytical.chip.derive)
class Reason(IntEnum):
    OK = 0
    DEGREES_NOT_DEVICES = 1
    TP_NOT_DIVIDING_HEADS = 2
    PP_NOT_DIVIDING_LAYERS = 3
    BATCH_NOT_DIVISIBLE = 4
    CP_NOT_DIVIDING_SEQUENCE = 5
    EP_INVALID = 6
    VP_INVALID = 7
    MAPPING_UNSUPPORTED_BY_MODEL = 8
    ZERO_WITH_PIPELINE = 9
    PRECISION_UNSUPPORTED = 10
    NO_SCALE_OUT_LINK = 11
    OUT_OF_MEMORY = 12
    POWER_OVER_BUDGET = 13  # analytical.step.energy: average power per device > tdp_w
    # chip derivation (analytical.chip.derive): the budgets cannot build the chip
    NO_COMPUTE_UNIT = 14
    COMPUTE_POWER_TOO_LOW = 15
    NO_MEMORY_STACK = 16
    SHORELINE_EXCEEDED = 17
    PACKAGE_AREA_EXCEEDED = 18
    NETWORK_POWER_TOO_LOW = 19
    FUSED_JOBS_INVALID = 20  # checked beside the mapping rules (after MAPPING_UNSUPPORTED_BY_MODEL)
    PARAMETER_SERVER_INVALID = 21  # likewise
    DP_SHARD_INVALID = 22  # likewise


REASON_TEXT = {
    Reason.OK: "ok",
    Reason.DEGREES_NOT_DEVICES: "tp * pp * dp * cp differs from the number of devices",
    Reason.TP_NOT_DIVIDING_HEADS: "tp does not divide the attention (or key-value) heads, or the "
                                  "sequence under sequence parallelism",
    Reason.PP_NOT_DIVIDING_LAYERS: "pp * vp exceeds the number of layers + 2 (a model chunk with nothing to run)",
    Reason.BATCH_NOT_DIVISIBLE: "global batch is not a multiple of dp * micro_batch_size",
    Reason.CP_NOT_DIVIDING_SEQUENCE: "2 * cp does not divide the sequence length",
    Reason.EP_INVALID: "ep must divide num_experts, and etp * ep (etp = tp unless set) must divide dp * cp * tp",
    Reason.VP_INVALID: "interleaving (vp > 1) needs pp > 1 and a micro-batch count divisible by pp",
    Reason.MAPPING_UNSUPPORTED_BY_MODEL: "tp, cp, ep and sequence parallelism apply to Transformers only; "
                                         "a CNN trains data-parallel only (pp 1, no recompute)",
    Reason.FUSED_JOBS_INVALID: "fused_jobs > 1 fuses single-device jobs: it needs tp = pp = cp = ep = dp = 1",
    Reason.PARAMETER_SERVER_INVALID: "dp_mode ps_sync / ps_async needs ps_shards >= 1 and plain data "
                                     "parallelism (zero_stage 0, no distributed optimizer)",
    Reason.DP_SHARD_INVALID: "dp_shard (HSDP's shard degree) must divide dp",
    Reason.ZERO_WITH_PIPELINE: "ZeRO stages 2 and 3 cannot be combined with pipeline parallelism (FSDP can)",
    Reason.PRECISION_UNSUPPORTED: "the accelerator has no peak rate for this precision",
    Reason.NO_SCALE_OUT_LINK: "the devices span several scale-up domains but have no scale-out bandwidth",
    Reason.OUT_OF_MEMORY: "does not fit in device memory",
    Reason.POWER_OVER_BUDGET: "average power per device exceeds its power budget (tdp_w)",
    Reason.NO_COMPUTE_UNIT: "the compute area cannot hold one compute unit",
    Reason.COMPUTE_POWER_TOO_LOW: "the compute power budget cannot run the compute units at the lowest "
                                  "supply (or at the given vdd)",
    Reason.NO_MEMORY_STACK: "the memory shoreline, PHY area or interposer cannot hold one memory stack",
    Reason.SHORELINE_EXCEEDED: "the network shoreline or PHY area cannot hold the scale-out lanes and one "
                               "scale-up lane",
    Reason.PACKAGE_AREA_EXCEEDED: "the die exceeds the reticle limit or the interposer",
    Reason.NETWORK_POWER_TOO_LOW: "the network power budget cannot drive the scale-out lanes",
}
