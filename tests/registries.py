"""Parametrising tests from the registries (``ssl_app.registry``): one case per entry, its id the registered name.

    @pytest.mark.parametrize("entry", each(DATAMODULES))
    def test_something(entry): ...

runs as ``test_something[CIFAR10DataModule]``, so a failure names the class, and a class
registered tomorrow gets its own case without the test naming it.
"""

from __future__ import annotations

import pytest

from ssl_app.registering import Registry


def each(registry: Registry) -> list:
    """``pytest.param(entry, id=entry.name)`` for every entry of ``registry``, in registration order."""
    return [pytest.param(entry, id=entry.name) for entry in registry.values()]
