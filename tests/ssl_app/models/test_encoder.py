"""ssl_app.models.encoder: one encoder pass (backbone → head → normalise), compiled once for every encoder."""

from __future__ import annotations

import torch

from ssl_app.models import build_backbone, build_projection_head, compiled_encoder, encode_with
from tests.helpers import compile_cheaply, dynamo_compiles


def _encoder(seed: int) -> tuple[torch.nn.Module, torch.nn.Module]:
    torch.manual_seed(seed)
    backbone, width = build_backbone("small_cnn")
    return backbone.eval(), build_projection_head(width, 16, 8, 2, True).eval()


def test_one_compiled_pass_serves_two_encoders_with_their_own_weights(monkeypatch):
    """MoCo's query and key encoders go through one compiled function. Catches weights baked into the
    graph as constants (the second encoder would get the first's outputs) and a graph per encoder
    (a compile for each, where their weights are the graph's inputs)."""
    compile_cheaply(monkeypatch)
    compiled = compiled_encoder()
    images = torch.randn(4, 3, 8, 8)
    first, second = _encoder(0), _encoder(1)
    with torch.no_grad():
        for backbone, head in (first, second, first):
            for got, expected in zip(compiled(backbone, head, images), encode_with(backbone, head, images)):
                torch.testing.assert_close(got, expected)
        assert not torch.allclose(compiled(*first, images)[1], compiled(*second, images)[1])
    assert dynamo_compiles() == 1
