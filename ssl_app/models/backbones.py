"""Backbones by name: torchvision ResNets (with the CIFAR stem), the CIFAR ResNet-32 and a small CNN for CPU runs.

Each builder returns ``(module, feature_dim)``; the module maps images [B, 3, H, W] to pooled
features [B, feature_dim]. ``BACKBONES`` (``ssl_app.models.registry``) lists them: a new backbone is a
builder ``(norm="batch") -> (module, feature_dim)`` with ``@BACKBONES.register(name=...)`` above
it, plus its name in ``BackboneName`` (the option's choices, which the CLI checks).
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable
from typing import Literal, get_args

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torchvision.models import resnet18, resnet50

from ssl_app.errors import ConfigError
from ssl_app.models.registry import BACKBONES

BackboneName = Literal["small_cnn", "resnet32_cifar", "resnet18_cifar", "resnet18", "resnet50"]
NormName = Literal["batch", "group", "none"]


#: Device types on which ``channels_last: auto`` trains the backbones in NHWC (benchmarks/README.md,
#: "Tuning notes"): the CPU (oneDNN; every shipped backbone's step 1.15–1.8× faster) and CUDA (cuDNN's
#: tensor-core convolutions take NHWC: ResNet-18's SimCLR step 2.4×, MoCo's 1.7× on an H200 in bf16).
CHANNELS_LAST_DEVICES = frozenset({"cpu", "cuda"})


def channels_last_pays(device: torch.device) -> bool:
    """Whether the backbones train faster in the channels-last layout (NHWC) on ``device``, the
    layout ``channels_last: auto`` picks; elsewhere (MPS, XLA, …: not measured) PyTorch's default."""
    return device.type in CHANNELS_LAST_DEVICES


def eager() -> contextlib.AbstractContextManager:
    """Inside, compiled modules (``compile: true``) run their eager code: ``torch.compiler.set_stance("force_eager")``
    when anything can have been compiled (dynamo is loaded); else nothing, since importing dynamo for the stance
    costs a second. Validation, test and the callbacks' evaluation passes run under it: a backbone's graphs were
    traced in training mode with the training batch's shape, and would otherwise be recompiled for eval mode and
    each new batch shape (seconds to a minute per evaluation)."""
    if "torch._dynamo" not in sys.modules:
        return contextlib.nullcontext()
    return torch.compiler.set_stance("force_eager")


def _norm_layer(norm: NormName, channels: int) -> nn.Module:
    if norm == "batch":
        return nn.BatchNorm2d(channels)
    if norm == "group":
        return nn.GroupNorm(num_groups=min(8, channels), num_channels=channels)
    return nn.Identity()


@BACKBONES.register
def small_cnn(norm: NormName = "batch") -> tuple[nn.Module, int]:
    """Four 3×3 conv blocks (16-32-64-128 channels), global average pool: ~0.1M parameters.

    Fast enough to train on a laptop CPU; the quickstart's backbone.
    """
    channels = [3, 16, 32, 64, 128]
    layers: list[nn.Module] = []
    for i, (c_in, c_out) in enumerate(zip(channels[:-1], channels[1:])):
        layers += [nn.Conv2d(c_in, c_out, 3, padding=1, bias=norm == "none"), _norm_layer(norm, c_out), nn.ReLU(inplace=True)]
        if i < len(channels) - 2:
            layers.append(nn.MaxPool2d(2))
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten()]
    return nn.Sequential(*layers), channels[-1]


class _CifarBasicBlock(nn.Module):
    """Two 3×3 conv-BN layers plus the parameter-free shortcut of He et al.'s CIFAR ResNets ("option A").

    Where the block halves the resolution and widens the channels, the shortcut takes every
    second pixel and pads the new channels with zeros, so it adds no parameters.
    """

    def __init__(self, c_in: int, c_out: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(c_in, c_out, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(c_out)
        self.conv2 = nn.Conv2d(c_out, c_out, 3, stride=1, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(c_out)
        self.stride = stride
        self.extra_channels = c_out - c_in

    def forward(self, x: Tensor) -> Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        shortcut = x[:, :, :: self.stride, :: self.stride] if self.stride > 1 else x
        if self.extra_channels:
            half = self.extra_channels // 2
            shortcut = F.pad(shortcut, (0, 0, 0, 0, half, self.extra_channels - half))
        return F.relu(out + shortcut)


def resnet_cifar(blocks_per_stage: int, norm: NormName = "batch") -> tuple[nn.Module, int]:
    """He et al. 2016's CIFAR ResNet of depth 6n + 2 (n = ``blocks_per_stage``): 3×3 stem with 16
    channels, three stages of n basic blocks (16, 32, 64 channels, stride 1, 2, 2), global average
    pool → 64-d. n = 5 is ResNet-32 (0.46M parameters), the backbone of the long-tail literature.
    """
    layers: list[nn.Module] = [nn.Conv2d(3, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16), nn.ReLU(inplace=True)]
    c_in = 16
    for stage, c_out in enumerate((16, 32, 64)):
        for block in range(blocks_per_stage):
            layers.append(_CifarBasicBlock(c_in, c_out, stride=2 if stage > 0 and block == 0 else 1))
            c_in = c_out
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten()]
    net = nn.Sequential(*layers)
    for module in net.modules():
        if isinstance(module, nn.Conv2d):
            nn.init.kaiming_normal_(module.weight, mode="fan_out", nonlinearity="relu")
    return net, 64


def _torchvision_resnet(builder: Callable[..., nn.Module], feature_dim: int, cifar_stem: bool) -> tuple[nn.Module, int]:
    net = builder(weights=None)
    if cifar_stem:
        # 32×32 inputs: a 3×3 stride-1 stem and no max-pool keep the spatial resolution.
        net.conv1 = nn.Conv2d(3, 64, kernel_size=3, stride=1, padding=1, bias=False)
        net.maxpool = nn.Identity()
    net.fc = nn.Identity()
    return net, feature_dim


@BACKBONES.register(name="resnet32_cifar")
def _resnet32_cifar(norm: NormName = "batch") -> tuple[nn.Module, int]:
    """He et al.'s CIFAR ResNet-32 (0.46M parameters, 64-d features): the long-tail literature's backbone."""
    return resnet_cifar(5)


@BACKBONES.register(name="resnet18_cifar")
def _resnet18_cifar(norm: NormName = "batch") -> tuple[nn.Module, int]:
    """torchvision's ResNet-18 with a 3×3 stride-1 stem and no max-pool, for 32×32 images (512-d features)."""
    return _torchvision_resnet(resnet18, 512, cifar_stem=True)


@BACKBONES.register(name="resnet18")
def _resnet18(norm: NormName = "batch") -> tuple[nn.Module, int]:
    """torchvision's ResNet-18 with its ImageNet stem (512-d features)."""
    return _torchvision_resnet(resnet18, 512, cifar_stem=False)


@BACKBONES.register(name="resnet50")
def _resnet50(norm: NormName = "batch") -> tuple[nn.Module, int]:
    """torchvision's ResNet-50 with its ImageNet stem (2048-d features)."""
    return _torchvision_resnet(resnet50, 2048, cifar_stem=False)


assert set(BACKBONES) == set(get_args(BackboneName))


def build_backbone(name: str, norm: NormName = "batch") -> tuple[nn.Module, int]:
    """Build a backbone by name; ``norm`` applies to ``small_cnn`` (ResNets use BatchNorm)."""
    if name not in BACKBONES:
        raise ConfigError(f"unknown backbone {name!r}; choose one of {sorted(BACKBONES)}")
    if norm not in get_args(NormName):
        raise ConfigError(f"backbone_norm must be one of {list(get_args(NormName))}, got {norm!r}")
    if name != "small_cnn" and norm != "batch":
        raise ConfigError(f"backbone_norm={norm!r} is only available for small_cnn; {name} uses BatchNorm")
    return BACKBONES[name].target(norm=norm)
