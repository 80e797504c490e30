"""One encoder pass: backbone → projection head → L2 normalisation, the function ``compile: true``
compiles as one graph (``methods.base.ContrastiveMethod.run_encoder``)."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

#: What an encoder pass is called with: ``(backbone, head, images[, with_norms]) -> (features, z[, norms])``.
EncoderPass = Callable[..., tuple[Tensor, ...]]


def encode_with(backbone: nn.Module, head: nn.Module, images: Tensor, with_norms: bool = False) -> tuple[Tensor, ...]:
    """``(features, z)``: the backbone's features [B, feature_dim] of ``images`` and their projections
    ``h`` by ``head``, L2-normalised, ``z = h/‖h‖`` [B, proj_dim]; ``with_norms``: also ``‖h‖`` [B]
    (float32, with gradient), for a loss that reads the norms (``ContrastiveLoss.needs_embedding_norms``)."""
    features = backbone(images)
    projections = head(features)
    z = F.normalize(projections, dim=1)
    if with_norms:
        return features, z, torch.linalg.vector_norm(projections.float(), dim=1)
    return features, z


def compiled_encoder() -> EncoderPass:
    """:func:`encode_with` compiled (``torch.compile``): the modules are its arguments, so one compiled
    function serves every encoder (their weights are graph inputs, not constants of it), and
    parameter names and checkpoints stay as they are."""
    return torch.compile(encode_with)
