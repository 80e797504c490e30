"""One encoder pass: backbone → projection head → L2 normalisation, the function ``compile: true``
compiles as one graph (``methods.base.ContrastiveMethod.run_encoder``)."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

#: What an encoder pass is called with: ``(backbone, head, images) -> (features, z)``.
EncoderPass = Callable[[nn.Module, nn.Module, Tensor], tuple[Tensor, Tensor]]


def encode_with(backbone: nn.Module, head: nn.Module, images: Tensor) -> tuple[Tensor, Tensor]:
    """``(features, z)``: the backbone's features [B, feature_dim] of ``images`` and their projections
    by ``head``, L2-normalised [B, proj_dim]."""
    features = backbone(images)
    return features, F.normalize(head(features), dim=1)


def compiled_encoder() -> EncoderPass:
    """:func:`encode_with` compiled (``torch.compile``): the modules are its arguments, so one compiled
    function serves every encoder (their weights are graph inputs, not constants of it), and
    parameter names and checkpoints stay as they are."""
    return torch.compile(encode_with)
