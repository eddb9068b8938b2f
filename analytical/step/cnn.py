"""Convolutional networks as tensors: each design's layer table (`analytical.cnns`) walked with its
image size.

A convolution runs as an implicit GEMM (cuDNN's default algorithm family): per image an
(H_out W_out) x c_out output, reducing over c_in k^2. A 3 x 3 stride-1 convolution in fp32 (CUDA
cores, no tensor cores) runs as a Winograd minimal-filtering convolution instead, with fewer
multiplies (`WINOGRAD_MULTIPLY_REDUCTION`, `executed_gemms`); a fully connected layer is a 1 x c_out GEMM
per image; a point network (PointNet) is the same over points, with kernels of width 1. Batch
norm, ReLU, residual additions and pooling are memory-bound kernels. Activations
kept for the backward pass follow PyTorch's eager autograd: a convolution followed by batch norm
and ReLU keeps two tensors of its output's size (the norm's input, the ReLU's output that the next
layer saves as its input), one without the norm or without the ReLU; a residual addition keeps its
ReLU's output; max pooling keeps int64 indices; the first convolution keeps the image.

Every function returns per-image quantities for a whole batch: `(batch, slots)` GEMM shapes,
`(batch,)` counts. Designs of other kinds get zeros. Computed only for chunks that hold a CNN
(`any_cnn`), so the other kinds pay nothing.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch

from analytical.cnns import ARCHITECTURES, CLASSES, Add, Block, Conv, Linear, Network, Pool, Transform
from analytical.codes import CNN_ARCH_CODES, KIND_CODES, PRECISION_CODES
from analytical.design import DesignBatch, per_evaluation

# GEMM slots of the widest network (convolutions and FC layers)
MAX_SLOTS = max(sum(isinstance(op, (Conv, Linear, Transform)) for op in net.ops) for net in ARCHITECTURES.values())
INDEX_BYTES = 8.0  # max pooling's saved argmax indices are int64 (PyTorch max_pool2d_with_indices)
# Lavin & Gray 2016, "Fast Algorithms for Convolutional Neural Networks" (CVPR, arXiv 1509.09308): Winograd's
# F(2x2, 3x3) computes a 2 x 2 output tile of a 3 x 3 filter with (2 + 3 - 1)^2 = 16 multiplies where direct
# convolution takes 2^2 x 3^2 = 36, 2.25x fewer (F(4x4, 3x3): 4x, the paper's "up to a factor of 4"); cuDNN
# offers it for 3 x 3 stride-1 convolutions, forward, backward-data and backward-filter (the WINOGRAD and
# WINOGRAD_NONFUSED members of cudnnConvolutionFwdAlgo_t / BwdDataAlgo_t / BwdFilterAlgo_t). The smallest tile's
# factor is taken: the larger tiles' transforms cost memory traffic the model does not price.
WINOGRAD_MULTIPLY_REDUCTION = 16.0 / 36.0  # multiplies per output, Winograd F(2x2, 3x3) over direct


@per_evaluation
def any_cnn(d: DesignBatch) -> bool:
    return bool((d.kind == KIND_CODES["cnn"]).any())


@dataclass
class CnnTerms:
    """Per-image terms of every design's network (zeros for designs that are not CNNs).

    `m`, `n`, `k`: `(batch, slots)` implicit-GEMM shapes, one slot per convolution or FC layer
    (m per image); `params`: weights, biases and batch-norm scales and shifts; `kept_elements`:
    activation elements kept for the backward pass; `index_bytes`: max-pool indices;
    `memory_bound_elements` / `memory_bound_kernels`: element reads + writes and kernel launches
    of the forward pass's memory-bound layers; `backward_transient_elements`: the gradients of the
    largest layer's output and input, live together on top of the kept activations while the
    backward pass runs through that layer.
    """

    m: torch.Tensor
    n: torch.Tensor
    k: torch.Tensor
    params: torch.Tensor
    kept_elements: torch.Tensor
    index_bytes: torch.Tensor
    memory_bound_elements: torch.Tensor
    memory_bound_kernels: torch.Tensor
    backward_transient_elements: torch.Tensor
    winograd: torch.Tensor


def _conv_out(size: torch.Tensor, kernel: int, stride: int, padding: int) -> torch.Tensor:
    return torch.floor((size + 2 * padding - kernel) / stride) + 1.0


def _walk(net: Network, image: torch.Tensor, classes: torch.Tensor) -> tuple[list, list, list, list, dict]:
    """One network over `(batch,)` image sizes (points, for a point network): its GEMM slots
    `(m, n, k, winograd)` per image and its summed per-image terms."""
    zero = torch.zeros_like(image)
    one_d = net.points

    def area(size: torch.Tensor) -> torch.Tensor:  # spatial positions of a feature map
        return size if one_d else size * size

    ms, ns, ks, wino = [], [], [], []
    terms = dict(params=zero, kept=3.0 * area(image), index=zero, mb=zero, kernels=zero, largest=zero)

    def add(key: str, value) -> None:
        terms[key] = terms[key] + value

    def output(elements: torch.Tensor) -> None:
        terms["largest"] = torch.maximum(terms["largest"], elements)

    size, block_in, channels = image, image, 3.0
    for op in net.ops:
        if isinstance(op, Block):
            block_in = size
        elif isinstance(op, Conv):
            kernel_area = op.kernel if one_d else op.kernel**2
            out = _conv_out(block_in if op.shortcut else size, op.kernel, op.stride, op.padding)
            elements = op.c_out * area(out)
            ms.append(area(out))
            ns.append(zero + op.c_out)
            ks.append(zero + op.c_in * kernel_area)
            wino.append(zero + float(op.kernel == 3 and op.stride == 1 and not one_d))
            add("params", op.c_out * op.c_in * kernel_area + op.bias * op.c_out + op.bn * 2 * op.c_out)
            add("kept", elements * (1.0 + float(op.bn and op.relu)))
            add("mb", elements * (3.0 * op.bn + 2.0 * op.relu))
            add("kernels", float(op.bn) + float(op.relu))
            output(elements)
            if not op.shortcut:
                size, channels = out, float(op.c_out)
        elif isinstance(op, Add):
            elements = channels * area(size)
            add("kept", elements)
            add("mb", 5.0 * elements)  # add: 2 reads + 1 write; ReLU: 1 + 1
            add("kernels", 2.0)
        elif isinstance(op, Pool):
            out = zero + op.out if op.out else _conv_out(size, op.kernel, op.stride, op.padding)
            in_elements, elements = channels * area(size), channels * area(out)
            add("kept", elements)
            add("index", (op.kind == "max") * INDEX_BYTES * elements)
            add("mb", in_elements + elements)
            add("kernels", 1.0)
            size = out
        elif isinstance(op, Linear):
            c_out = classes if op.c_out == CLASSES else zero + op.c_out
            ms.append(zero + 1.0)
            ns.append(c_out)
            ks.append(zero + op.c_in)
            wino.append(zero)
            add("params", (op.c_in + 1.0 + 2.0 * op.bn) * c_out)
            add("kept", c_out * (float(op.bn) + float(op.relu)))
            add("mb", c_out * (3.0 * op.bn + 2.0 * op.relu))
            add("kernels", float(op.bn) + float(op.relu))
            size, channels = zero + 1.0, c_out
        elif isinstance(op, Transform):  # every point of the block's input times a c x c matrix
            elements = op.c * area(block_in)
            ms.append(area(block_in))
            ns.append(zero + op.c)
            ks.append(zero + op.c)
            wino.append(zero)
            add("kept", elements)
            size, channels = block_in, float(op.c)
    return ms, ns, ks, wino, terms


@per_evaluation
def cnn_terms(d: DesignBatch) -> CnnTerms:
    """Every design's per-image CNN terms (`CnnTerms`); the slot count is the largest network's."""
    is_cnn = d.kind == KIND_CODES["cnn"]
    present = [(name, code) for name, code in CNN_ARCH_CODES.items()
               if bool((is_cnn & (d.cnn_arch == code)).any())]
    walks = []
    for name, code in present:
        mask = (is_cnn & (d.cnn_arch == code)).to(d.tp.dtype)
        walks.append((mask, _walk(ARCHITECTURES[name], d.image_size, d.num_classes)))
    slots = MAX_SLOTS  # the widest network's, whichever are present (chunking cannot change a sum)
    zero = torch.zeros_like(d.tp)
    shapes = []
    for column in range(4):
        table = torch.zeros(d.batch_size, slots, dtype=d.tp.dtype, device=d.tp.device)
        for mask, walk in walks:
            values = walk[column]
            table[:, :len(values)] += torch.stack(values, dim=-1) * mask.unsqueeze(-1)
        shapes.append(table)

    def summed(key: str) -> torch.Tensor:
        return sum((mask * walk[4][key] for mask, walk in walks), zero)

    return CnnTerms(m=shapes[0], n=shapes[1], k=shapes[2], params=summed("params"), kept_elements=summed("kept"),
                    index_bytes=summed("index"), memory_bound_elements=summed("mb"),
                    memory_bound_kernels=summed("kernels"), backward_transient_elements=2.0 * summed("largest"),
                    winograd=shapes[3])


def executed_gemms(d: DesignBatch, gemms):
    """The GEMM table (`workload.Gemms`, from `workload.layer_gemms`) as the kernels execute it: a CNN's
    3 x 3 stride-1 convolutions in fp32 (CUDA cores) run as Winograd convolutions (`WINOGRAD_MULTIPLY_REDUCTION`
    of the multiplies, in their reduction dimension k: forward, input- and weight-gradient alike,
    `Gemms.backward`); every other slot as it is. The step's time and energy take this table, its model FLOPs
    (MFU) the direct one."""
    if not any_cnn(d):
        return gemms
    winograd = cnn_terms(d).winograd
    slots = torch.zeros_like(gemms.k)
    slots[:, gemms.k.shape[-1] - winograd.shape[-1]:] = winograd  # the CNN slots come last (`layer_gemms`)
    fp32 = (d.precision == PRECISION_CODES["fp32"]).to(gemms.k.dtype).unsqueeze(-1)
    return dataclasses.replace(gemms, k=gemms.k * (1.0 - fp32 * slots * (1.0 - WINOGRAD_MULTIPLY_REDUCTION)))
