"""SimCLR + SupCon with unlabelled samples (label −1, e.g. STL-10's unlabelled split)."""

from __future__ import annotations

import torch

from ssl_app.losses import SupCon
from ssl_app.methods import SimCLR

B = 4


def test_unlabelled_anchor_positive_is_only_its_other_view():
    """Catches label −1 treated as a class: unlabelled images pulled together as if they shared a label."""
    torch.manual_seed(0)
    model = SimCLR(
        loss=SupCon(temperature=0.1),
        backbone="small_cnn",
        backbone_norm="group",
        proj_dim=8,
        proj_hidden_dim=16,
        proj_batch_norm=False,
    )
    g = torch.Generator().manual_seed(0)
    views = (torch.randn(B, 3, 8, 8, generator=g), torch.randn(B, 3, 8, 8, generator=g))
    labels = torch.tensor([0, -1, 0, -1])
    contrast = model.contrast((views, labels, torch.arange(B)))
    for anchor in (1, 3, 1 + B, 3 + B):  # the unlabelled images, both views
        assert contrast.pos_mask[anchor].nonzero().flatten().tolist() == [(anchor + B) % (2 * B)]
    # labelled anchors: other view plus the other image of class 0 (both views)
    assert contrast.pos_mask[0].nonzero().flatten().tolist() == [2, 4, 6]
