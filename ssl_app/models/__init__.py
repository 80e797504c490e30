"""Backbones and projection heads."""

from ssl_app.models.backbones import BACKBONES, BackboneName, build_backbone, channels_last_pays, eager
from ssl_app.models.encoder import EncoderPass, compiled_encoder, encode_with
from ssl_app.models.heads import build_projection_head

__all__ = [
    "BACKBONES", "BackboneName", "EncoderPass", "build_backbone", "build_projection_head", "channels_last_pays",
    "compiled_encoder", "eager", "encode_with",
]  # fmt: skip
