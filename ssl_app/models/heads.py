"""Projection heads (lightly's SimCLR head: Linear-[BN]-ReLU blocks, then Linear-[BN]).

Without BatchNorm on the output layer (``output_batch_norm=False``) the last block is a plain
Linear with a bias: the PaCo authors' LT head (``moco/builder.py``: Linear-BN-ReLU, then the fc).
"""

from __future__ import annotations

from lightly.models.modules import SimCLRProjectionHead
from lightly.models.modules.heads import ProjectionHead
from torch import nn

from ssl_app.errors import ConfigError


def build_projection_head(
    input_dim: int, hidden_dim: int, output_dim: int, num_layers: int, batch_norm: bool, output_batch_norm: bool = True
) -> nn.Module:
    """``num_layers=1`` is the paper's linear 128-d head; 2 is SimCLR v1's MLP; 3 is SimCLR v2's.

    ``batch_norm`` puts BatchNorm after every Linear of an MLP head; ``output_batch_norm=False``
    leaves the output layer's out (a Linear with a bias), the hidden ones as ``batch_norm`` says.
    """
    if num_layers < 1:
        raise ConfigError(f"proj_layers must be >= 1, got {num_layers}")
    if output_dim < 1 or hidden_dim < 1:
        raise ConfigError(f"proj_dim and proj_hidden_dim must be >= 1, got {output_dim} and {hidden_dim}")
    if num_layers == 1:
        return nn.Linear(input_dim, output_dim)
    if output_batch_norm or not batch_norm:
        return SimCLRProjectionHead(input_dim, hidden_dim, output_dim, num_layers=num_layers, batch_norm=batch_norm)
    widths = [input_dim] + [hidden_dim] * (num_layers - 2)  # inputs of the hidden blocks
    hidden = [(n_in, hidden_dim, nn.BatchNorm1d(hidden_dim), nn.ReLU()) for n_in in widths]
    return ProjectionHead([*hidden, (hidden_dim, output_dim, None, None)])
