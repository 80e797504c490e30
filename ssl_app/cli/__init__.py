"""``python -m ssl_app``: the commands (``fit``, ``validate``, ``test``, ``list``, ``export``, ``embed``).

``entry``: ``main``, which answers ``--help``, ``list`` and the errors it can find before importing Lightning;
``app``: the LightningCLI subclass and the Trainer commands; ``plan``: which folder and checkpoint a command uses;
``endings``: every way a command ends (its line, exit status and resume hint); ``parsing``: the
parser whose errors are one line; ``export``, ``embed``, ``listing``: the commands that need no Trainer.

``from ssl_app.cli import main`` is the in-process entry (``entry``: what it answers before Lightning is
imported); ``SSLCLI`` and ``trainer_defaults`` import Lightning when first asked for.
"""

from __future__ import annotations

import importlib
from typing import Any

from ssl_app.cli.entry import main

__all__ = ["SSLCLI", "main", "trainer_defaults"]


def __getattr__(name: str) -> Any:
    if name in ("SSLCLI", "trainer_defaults"):
        return getattr(importlib.import_module("ssl_app.cli.app"), name)
    raise AttributeError(f"module 'ssl_app.cli' has no attribute {name!r}")
