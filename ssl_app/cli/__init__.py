"""``python -m ssl_app``: the commands (``fit``, ``validate``, ``test``, ``list``, ``export``, ``embed``).

``app``: the LightningCLI subclass and ``main``; ``export``, ``embed``, ``listing``: the commands that
need no Trainer. ``main`` is re-exported here: ``from ssl_app.cli import main`` is the in-process entry.
"""

from ssl_app.cli.app import SSLCLI, main, trainer_defaults

__all__ = ["SSLCLI", "main", "trainer_defaults"]
