"""``python -m ssl_app``: the commands (``fit``, ``validate``, ``test``, ``list``, ``export``, ``embed``).

``app``: the LightningCLI subclass and ``main``; ``plan``: which folder and checkpoint a command uses;
``endings``: every way a command ends (its line, exit status and resume hint); ``parsing``: the
parser whose errors are one line; ``export``, ``embed``, ``listing``: the commands that need no Trainer.

``from ssl_app.cli import main`` is the in-process entry; it imports Lightning when first asked for.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["SSLCLI", "main", "trainer_defaults"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        return getattr(importlib.import_module("ssl_app.cli.app"), name)
    raise AttributeError(f"module 'ssl_app.cli' has no attribute {name!r}")
