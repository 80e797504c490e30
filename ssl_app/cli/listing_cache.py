"""What ``python -m ssl_app list`` printed, kept in the user's cache so that the next ``list`` needs no import.

Listing reads the registries, and the registries are the packages themselves: ``list losses`` imports torch and
torchmetrics (seconds), ``list methods`` Lightning. The lines depend only on the installed sources, so they are kept
under a key of those sources: the bytes and relative path of every ``.py`` file of ``ssl_app``, ``datamodules``
and ``callbacks`` (about 180 files, read in milliseconds) and the versions of Python, torch, torchvision and
Lightning. Any change of them is a new key, so a cached answer is never one of another version; the first ``list``
after an install or an edit reads the registries as before and keeps what it printed.

The folder is ``$SSL_APP_CACHE``, else ``$XDG_CACHE_HOME/ssl_app``, else ``~/.cache/ssl_app``; one file
``list-<key>.json``, written atomically, older keys removed. A folder that cannot be written, or a file that cannot
be read, only costs the imports.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
from collections.abc import Iterable
from importlib import metadata
from pathlib import Path
from typing import Optional

#: The top-level packages whose registered entries ``list`` prints.
PACKAGES = ("ssl_app", "datamodules", "callbacks")
#: The distributions whose versions can change what is listed (torchvision: the backbones).
DISTRIBUTIONS = ("torch", "torchvision", "lightning")
Rows = list[list[str]]


def cache_folder() -> Path:
    if os.environ.get("SSL_APP_CACHE"):
        return Path(os.environ["SSL_APP_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "ssl_app"


def package_folders() -> list[Path]:
    """The folders of ``PACKAGES``, found as Python finds them (none imported)."""
    import importlib.util

    folders = []
    for name in PACKAGES:
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            continue
        folders += [Path(folder) for folder in (spec.submodule_search_locations or [])] if spec else []
    return folders


def installed_versions(names: Iterable[str]) -> list[str]:
    """``name=version`` of each installed distribution, ``name=-`` for one that is not installed."""
    found = []
    for name in names:
        try:
            found.append(f"{name}={metadata.version(name)}")
        except metadata.PackageNotFoundError:
            found.append(f"{name}=-")
    return found


def sources_key(folders: list[Path]) -> str:
    """A hash of every ``.py`` file under ``folders`` (path relative to its package's parent, and bytes) and of the
    versions in ``DISTRIBUTIONS``."""
    digest = hashlib.sha256()
    versions = [platform.python_version(), *installed_versions(DISTRIBUTIONS)]
    digest.update("\n".join(versions).encode())
    for folder in folders:
        for path in sorted(folder.rglob("*.py")):
            if "__pycache__" in path.parts:
                continue
            digest.update(str(path.relative_to(folder.parent)).encode() + b"\0")
            digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()[:32]


def _cache_file(key: str) -> Path:
    return cache_folder() / f"list-{key}.json"


def cached(kinds: list[str], key: Optional[str] = None) -> Optional[dict[str, Rows]]:
    """The rows of each of ``kinds`` kept under the current sources' key, or None unless all of them are kept."""
    try:
        key = key or sources_key(package_folders())
        kept = json.loads(_cache_file(key).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(kept, dict) or not all(_rows_shaped(kept.get(kind)) for kind in kinds):
        return None
    return {kind: kept[kind] for kind in kinds}


def _rows_shaped(rows: object) -> bool:
    return isinstance(rows, list) and all(
        isinstance(row, list) and len(row) == 3 and all(isinstance(cell, str) for cell in row) for row in rows
    )


def keep(rows_by_kind: dict[str, Rows], key: Optional[str] = None) -> None:
    """Add ``rows_by_kind`` to the current key's file (other keys' files removed); nothing on any error."""
    from ssl_app.io.atomic import atomic_file

    try:
        target = _cache_file(key or sources_key(package_folders()))
        try:
            kept = json.loads(target.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            kept = {}
        kept = {**(kept if isinstance(kept, dict) else {}), **rows_by_kind}
        with atomic_file(target) as file:
            file.write(json.dumps(kept, ensure_ascii=False).encode("utf-8"))
        for other in target.parent.glob("list-*.json"):
            if other != target:
                other.unlink(missing_ok=True)
    except OSError:
        return
