"""The five registries under one address, for plug-ins: ``from ssl_app.registry import LOSSES``.

Each registry lives in the package whose entries it lists (``ssl_app.losses.registry``, …; how a registry
works: ``ssl_app.registering``). This module hands each out on first use, so importing it loads nothing
of the packages, and ``from ssl_app.registry import LOSSES`` (docs/extending.md) gets the one registry the
built-in losses are in. ``Registry``, ``Entry`` and ``first_line`` are ``ssl_app.registering``'s.
"""

from __future__ import annotations

from typing import Any

from ssl_app.registering import Entry, Registry, SelectBy, first_line

__all__ = ["BACKBONES", "DATAMODULES", "LOSSES", "METHODS", "TEMPERATURES", "Entry", "Registry", "SelectBy", "first_line"]  # noqa: F822


def __getattr__(name: str) -> Any:
    """``LOSSES``, ``METHODS``, ``TEMPERATURES``, ``BACKBONES`` and ``DATAMODULES``, from their packages."""
    if name == "LOSSES":
        from ssl_app.losses.registry import LOSSES

        return LOSSES
    if name == "METHODS":
        from ssl_app.methods.registry import METHODS

        return METHODS
    if name == "TEMPERATURES":
        from ssl_app.temperature.registry import TEMPERATURES

        return TEMPERATURES
    if name == "BACKBONES":
        from ssl_app.models.registry import BACKBONES

        return BACKBONES
    if name == "DATAMODULES":
        from datamodules.registry import DATAMODULES

        return DATAMODULES
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
