"""Files that are either the old version or the new one, never half of either.

A reader (another process, or this one after a crash) must never see a half-written checkpoint or
run record. :func:`atomic_file` writes to a temporary file in the target's own folder, flushes
and fsyncs it, renames it over the target (``os.replace``, atomic within one POSIX filesystem)
and fsyncs the folder so the rename itself survives a power cut. The order matters: a rename
before the data is on disk can leave, after a crash, a complete-looking name with missing bytes.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any


@contextmanager
def atomic_file(target: str | os.PathLike[str]) -> Iterator[IO[bytes]]:
    """A binary file object whose content replaces ``target`` atomically when the block ends.

    If the block raises, the temporary file is removed and ``target`` is untouched.
    """
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "wb") as file:
            yield file
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, target)
    except BaseException:
        if os.path.exists(temporary):
            os.remove(temporary)
        raise
    fsync_folder(target.parent)


def fsync_folder(folder: str | os.PathLike[str]) -> None:
    """Make a rename in ``folder`` durable (a no-op where folders cannot be opened, e.g. Windows)."""
    try:
        descriptor = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(descriptor)
    except OSError:
        pass
    finally:
        os.close(descriptor)


def write_json(target: str | os.PathLike[str], data: Any) -> None:
    """``data`` as indented, key-sorted JSON, written atomically (``NaN`` is written as ``null``)."""
    text = json.dumps(_finite(data), indent=2, sort_keys=True, allow_nan=False) + "\n"
    with atomic_file(target) as file:
        file.write(text.encode("utf-8"))


def _finite(value: Any) -> Any:
    """JSON has no NaN/inf: they become ``None`` (a value that was not measured)."""
    if isinstance(value, float) and (value != value or value in (float("inf"), float("-inf"))):
        return None
    if isinstance(value, dict):
        return {str(key): _finite(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(item) for item in value]
    return value
