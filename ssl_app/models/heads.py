"""Projection heads (lightly's SimCLR head: Linear-[BN]-ReLU blocks, then Linear-[BN])."""

from __future__ import annotations

from lightly.models.modules import SimCLRProjectionHead
from torch import nn

from ssl_app.errors import ConfigError


def build_projection_head(input_dim: int, hidden_dim: int, output_dim: int, num_layers: int, batch_norm: bool) -> nn.Module:
    """``num_layers=1`` is the paper's linear 128-d head; 2 is SimCLR v1's MLP; 3 is SimCLR v2's."""
    if num_layers < 1:
        raise ConfigError(f"proj_layers must be >= 1, got {num_layers}")
    if output_dim < 1 or hidden_dim < 1:
        raise ConfigError(f"proj_dim and proj_hidden_dim must be >= 1, got {output_dim} and {hidden_dim}")
    if num_layers == 1:
        return nn.Linear(input_dim, output_dim)
    return SimCLRProjectionHead(input_dim, hidden_dim, output_dim, num_layers=num_layers, batch_norm=batch_norm)
