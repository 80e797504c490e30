"""The CIFAR ResNet-32 of the long-tail literature (He et al. 2016, §4.2): shape, size, shortcut."""

from __future__ import annotations

import pytest
import torch

from ssl_app.errors import ConfigError
from ssl_app.models import build_backbone
from ssl_app.models.backbones import resnet_cifar


def test_resnet32_cifar_has_the_papers_size_and_a_64d_feature():
    """Catches a wrong depth, width or a projection shortcut: He et al. report 0.46M parameters."""
    net, dim = build_backbone("resnet32_cifar")
    assert dim == 64
    convs = [m for m in net.modules() if isinstance(m, torch.nn.Conv2d)]
    assert len(convs) == 1 + 3 * 5 * 2  # stem + 3 stages × 5 blocks × 2 convs = 31 (+ the classifier = 32 layers)
    assert all(m.kernel_size == (3, 3) for m in convs)
    params = sum(p.numel() for p in net.parameters())
    assert 0.455e6 < params < 0.47e6, params
    features = net(torch.randn(2, 3, 32, 32))
    assert features.shape == (2, 64)


def test_the_stages_halve_the_resolution_and_double_the_channels():
    net, _ = resnet_cifar(1)  # ResNet-8: one block per stage
    shapes = []
    for module in net:
        if type(module).__name__ == "_CifarBasicBlock":
            module.register_forward_hook(lambda _m, _i, out: shapes.append(tuple(out.shape[1:])))
    net(torch.randn(1, 3, 32, 32))
    assert shapes == [(16, 32, 32), (32, 16, 16), (64, 8, 8)]


def test_the_shortcut_is_the_identity_padded_with_zero_channels():
    """Option A: with the convolutions' branch zeroed, the block passes its input through (subsampled, zero-padded)."""
    net, _ = resnet_cifar(1)
    block = net[4]  # the first block of the 32-channel stage
    for bn in (block.bn2,):
        torch.nn.init.zeros_(bn.weight)
        torch.nn.init.zeros_(bn.bias)
    x = torch.rand(1, 16, 8, 8)  # non-negative: the final ReLU keeps it
    out = block.eval()(x)
    assert out.shape == (1, 32, 4, 4)
    torch.testing.assert_close(out[:, 8:24], x[:, :, ::2, ::2])
    assert (out[:, :8] == 0).all() and (out[:, 24:] == 0).all()


def test_resnet32_uses_batch_norm_only():
    with pytest.raises(ConfigError, match="only available for small_cnn"):
        build_backbone("resnet32_cifar", norm="group")
