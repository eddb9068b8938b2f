"""Layer tables of the convolutional networks the `cnn` model kind trains (plain Python, no tensors).

A network is a list of operations in execution order; `analytical.step.cnn` walks it with each
design's image size to get every convolution's implicit-GEMM shape, the memory-bound layers'
traffic, the activations kept for the backward pass and the parameter count. The tables follow
torchvision's definitions (`torchvision/models/resnet.py`, `vgg.py`), whose published parameter
counts and GFLOPS (multiply-accumulates per 224 x 224 image) are the check
(`tests/analytical/test_cnns.py`); PointNet follows the code HFTA trained (`pointnet_cls`):

    resnet18 11,689,512 params, 1.81 GMAC; resnet34 21,797,672, 3.66; resnet50 25,557,032, 4.09;
    vgg16 138,357,544, 15.47   (pytorch.org/vision/stable/models, each model's weights table)

ResNet-50 is torchvision's "V1.5" (stride on the 3x3 convolution of a bottleneck); He et al. 2016
Table 1 lists 3.8 GMAC for the original (stride on the first 1x1).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Union


@dataclass(frozen=True)
class Conv:
    """A 2-D convolution (bias only where `bias`), then batch norm (`bn`) and ReLU (`relu`).
    `shortcut`: it reads the input of the current residual block (a ResNet downsample), not the
    previous operation's output, and its output joins the block at the next `Add`."""

    c_in: int
    c_out: int
    kernel: int
    stride: int = 1
    padding: int = 0
    bias: bool = False
    bn: bool = True
    relu: bool = True
    shortcut: bool = False


@dataclass(frozen=True)
class Pool:
    """Max or average pooling; `out` > 0: adaptive pooling to `out` x `out` (torchvision's
    AdaptiveAvgPool2d), whatever the input size."""

    kernel: int = 1
    stride: int = 1
    padding: int = 0
    kind: str = "max"
    out: int = 0


@dataclass(frozen=True)
class Linear:
    """A fully connected layer on the flattened input (with bias), then batch norm (`bn`) and ReLU
    (`relu`)."""

    c_in: int
    c_out: int
    relu: bool = False
    bn: bool = False


@dataclass(frozen=True)
class Transform:
    """A point network's learned c x c transform applied to every point of the current block's input
    (PointNet's `torch.bmm` with the T-Net's output): a GEMM without weights of its own."""

    c: int


@dataclass(frozen=True)
class Block:
    """The start of a residual block: its input is what a `shortcut` convolution reads and `Add`
    adds."""


@dataclass(frozen=True)
class Add:
    """The residual addition closing a block, then ReLU."""


Op = Union[Conv, Pool, Linear, Block, Add, Transform]


@dataclass(frozen=True)
class Network:
    """A layer table; `points`: a point network (1-D over `image_size` points with 3 coordinates,
    kernels of width 1) instead of an image network (image_size x image_size RGB pixels)."""

    ops: tuple
    points: bool = False


def _basic(c_in: int, c_out: int, stride: int) -> list[Op]:
    ops: list[Op] = [Block(), Conv(c_in, c_out, 3, stride, 1), Conv(c_out, c_out, 3, 1, 1, relu=False)]
    if stride != 1 or c_in != c_out:
        ops.append(Conv(c_in, c_out, 1, stride, 0, relu=False, shortcut=True))
    return ops + [Add()]


def _bottleneck(c_in: int, width: int, stride: int) -> list[Op]:
    c_out = 4 * width
    ops: list[Op] = [Block(), Conv(c_in, width, 1), Conv(width, width, 3, stride, 1),
                     Conv(width, c_out, 1, relu=False)]
    if stride != 1 or c_in != c_out:
        ops.append(Conv(c_in, c_out, 1, stride, 0, relu=False, shortcut=True))
    return ops + [Add()]


CLASSES = 0  # a Linear's c_out of 0: the design's `num_classes`


def resnet(blocks: tuple[int, int, int, int], bottleneck: bool) -> list[Op]:
    """torchvision's ResNet: a 7x7/2 stem and 3x3/2 max pool, four stages of basic or bottleneck
    blocks (widths 64-512, the first block of stages 2-4 strided), global average pool, one FC."""
    ops: list[Op] = [Conv(3, 64, 7, 2, 3), Pool(3, 2, 1, "max")]
    c_in = 64
    for stage, count in enumerate(blocks):
        width = 64 * 2**stage
        for i in range(count):
            stride = 2 if stage > 0 and i == 0 else 1
            if bottleneck:
                ops += _bottleneck(c_in, width, stride)
                c_in = 4 * width
            else:
                ops += _basic(c_in, width, stride)
                c_in = width
    return ops + [Pool(kind="avg", out=1), Linear(c_in, CLASSES)]


def vgg(config: tuple) -> list[Op]:
    """torchvision's VGG without batch norm: 3x3 convolutions with bias and ReLU ("M": 2x2 max
    pool), adaptive average pool to 7x7, and the classifier 25088-4096-4096-classes."""
    ops: list[Op] = []
    c_in = 3
    for item in config:
        if item == "M":
            ops.append(Pool(2, 2, 0, "max"))
        else:
            ops.append(Conv(c_in, int(item), 3, 1, 1, bias=True, bn=False))
            c_in = int(item)
    return ops + [Pool(kind="avg", out=7), Linear(c_in * 49, 4096, relu=True), Linear(4096, 4096, relu=True),
                  Linear(4096, CLASSES)]


# torchvision vgg.py cfgs["D"]
VGG16 = (64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M")

def _tnet(c: int) -> list[Op]:
    """PointNet's T-Net (spatial transformer) on c-channel points: shared MLP c-64-128-1024, max
    over the points, FC 1024-512-256-c^2 (batch norm and ReLU but on the last), then the transform."""
    return [Block(), Conv(c, 64, 1, bias=True), Conv(64, 128, 1, bias=True), Conv(128, 1024, 1, bias=True),
            Pool(kind="max", out=1),
            Linear(1024, 512, relu=True, bn=True), Linear(512, 256, relu=True, bn=True), Linear(256, c * c),
            Transform(c)]


def pointnet_cls() -> list[Op]:
    """PointNet classification with the feature transform (Qi et al. CVPR 2017, Fig. 2; the
    fxia22/pointnet.pytorch `PointNetCls(feature_transform=True)` that HFTA's artifact trains,
    hfta examples/pointnet/model.py): input T-Net, 3-64 MLP, feature T-Net on 64 channels, 64-128-1024
    MLP (no ReLU on the last), max pool, classifier 1024-512-256-classes. Convolutions of width 1
    with biases (PyTorch Conv1d's default). Qi et al. Table 6: 3.5M parameters, 440M FLOPs (multiply-
    accumulates) per 1,024-point sample for ModelNet40's 40 classes."""
    return (_tnet(3) + [Conv(3, 64, 1, bias=True)] + _tnet(64)
            + [Conv(64, 128, 1, bias=True), Conv(128, 1024, 1, bias=True, relu=False), Pool(kind="max", out=1),
               Linear(1024, 512, relu=True, bn=True), Linear(512, 256, relu=True, bn=True), Linear(256, CLASSES)])


ARCHITECTURES: dict[str, Network] = {
    "resnet18": Network(tuple(resnet((2, 2, 2, 2), False))),  # He et al. 2016 Table 1
    "resnet34": Network(tuple(resnet((3, 4, 6, 3), False))),
    "resnet50": Network(tuple(resnet((3, 4, 6, 3), True))),
    "vgg16": Network(tuple(vgg(VGG16))),  # Simonyan & Zisserman 2015 Table 1, configuration D
    "pointnet_cls": Network(tuple(pointnet_cls()), points=True),
}
CNN_ARCHS = tuple(ARCHITECTURES)
