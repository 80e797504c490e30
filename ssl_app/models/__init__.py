"""Backbones and projection heads."""

from ssl_app.models.backbones import BACKBONES, BackboneName, build_backbone, channels_last_pays, eager
from ssl_app.models.heads import build_projection_head

__all__ = ["BACKBONES", "BackboneName", "build_backbone", "build_projection_head", "channels_last_pays", "eager"]
