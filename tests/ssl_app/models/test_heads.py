"""Projection heads: where BatchNorm sits (``proj_batch_norm``, ``proj_output_batch_norm``)."""

from torch import nn

from ssl_app.losses import InfoNCE
from ssl_app.methods import MoCo, SimCLR
from ssl_app.models import build_projection_head


def layer_kinds(head: nn.Module) -> list[str]:
    return [type(layer).__name__ for layer in head.modules() if not list(layer.children())]


def test_the_default_head_keeps_batchnorm_on_every_layer():
    """Catches the new option changing the other recipes' head (lightly's SimCLR head, BN on the output too)."""
    head = SimCLR(loss=InfoNCE(0.5), backbone="small_cnn", proj_hidden_dim=16, proj_dim=8).projection_head
    assert layer_kinds(head) == ["Linear", "BatchNorm1d", "ReLU", "Linear", "BatchNorm1d"]


def test_without_output_batchnorm_the_last_layer_is_a_linear_with_a_bias():
    """Catches BN left on the output layer (not the PaCo authors' LT head), BN dropped from the hidden layers
    too, or an output Linear without the bias its missing BN no longer provides."""
    head = build_projection_head(32, 16, 8, 3, batch_norm=True, output_batch_norm=False)
    assert layer_kinds(head) == ["Linear", "BatchNorm1d", "ReLU", "Linear", "BatchNorm1d", "ReLU", "Linear"]
    last = list(head.modules())[-1]
    assert last.out_features == 8 and last.bias is not None
    plain = build_projection_head(32, 16, 8, 2, batch_norm=False, output_batch_norm=False)
    assert "BatchNorm1d" not in layer_kinds(plain)


def test_moco_keys_come_from_the_same_head():
    """Catches the key encoder's head built with the default (BN on the output) while the query's has none."""
    model = MoCo(loss=InfoNCE(0.2), queue_size=16, backbone="small_cnn", proj_hidden_dim=16, proj_dim=8,
                 proj_output_batch_norm=False)  # fmt: skip
    assert layer_kinds(model.projection_head) == ["Linear", "BatchNorm1d", "ReLU", "Linear"]
    assert layer_kinds(model.key_projection_head)[-1] == "Linear"
