"""What makes two runs the same run: the resolved config, flattened, hashed, compared.

A resolved LightningCLI config (``config.yaml``, the record's ``config``) is a nested dict; its flat keys
(``ssl_app.runs.spec.flatten``) make it comparable key by key, and its spec (``ssl_app.runs.spec.RunSpec``)
says which keys identify the experiment.

- :func:`config_hash`: a short hash of the whole resolved config less the keys that only say
  *where* a run writes or *what it resumed from* (``WHERE_KEYS``), so the same experiment started
  in two folders has one hash. Everything else counts, the seed and the data's root folder included
  (for an image folder the root *is* the data; the hash cannot tell a copy from other images).
- :func:`identity`: the keys a run cannot change and stay the same run — the method, its backbone,
  its loss, and the data (every datamodule option except how it is loaded: workers, pinned memory,
  where the views and the evaluation images are made, the evaluation's batch size, whether to
  download). Resuming a checkpoint whose identity differs would continue one experiment on
  another's data or loss and mix both in one curve; the CLI
  refuses it (``--resume_anyway`` overrides). Everything else (learning rate, epochs, callbacks)
  may change on resume and the resume line says so.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from ssl_app.runs.spec import WHERE_KEYS, RunSpec, flatten, without_where

__all__ = ["WHERE_KEYS", "config_hash", "describe_differences", "differences", "flatten", "identity"]


def config_hash(config: dict[str, Any]) -> str:
    """First 16 hex digits of the SHA-256 of the config's canonical JSON, ``WHERE_KEYS`` left out."""
    text = json.dumps(without_where(flatten(config)), sort_keys=True, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def identity(config: dict[str, Any]) -> dict[str, Any]:
    """The flat keys that identify the experiment: method, backbone, loss and data (``RunSpec.identity``)."""
    return RunSpec.from_config(config).identity()


def differences(before: dict[str, Any], after: dict[str, Any]) -> list[tuple[str, Any, Any]]:
    """``(key, value before, value after)`` for every flat key whose value differs (missing: ``None``)."""
    keys = sorted(set(before) | set(after))
    return [(key, before.get(key), after.get(key)) for key in keys if before.get(key) != after.get(key)]


def describe_differences(found: list[tuple[str, Any, Any]], before: str, after: str, limit: int = 6) -> str:
    """``key = A (before) / B (after), ...`` for at most ``limit`` differences, then how many more."""
    parts = [f"{key} = {_short(old)} ({before}) / {_short(new)} ({after})" for key, old, new in found[:limit]]
    if len(found) > limit:
        parts.append(f"and {len(found) - limit} more")
    return ", ".join(parts)


def _short(value: Any, width: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= width else text[: width - 1] + "…"
