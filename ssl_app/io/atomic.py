"""Files that are either the old version or the new one, never half of either.

A reader (another process, or this one after a crash) must never see a half-written checkpoint or
run record. :func:`atomic_file` writes to a temporary file in the target's own folder, flushes
and fsyncs it, renames it over the target (``os.replace``, atomic within one POSIX filesystem)
and fsyncs the folder so the rename itself survives a power cut. The order matters: a rename
before the data is on disk can leave, after a crash, a complete-looking name with missing bytes.

The file gets the permissions a plain ``open(target, "w")`` would give: a new file
``0o666 & ~umask`` (``tempfile.mkstemp`` would make it owner-only, 0600, unreadable to colleagues
on a shared filesystem), a replaced file its old mode.
"""

from __future__ import annotations

import json
import os
import secrets
import stat
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
    handle, temporary = _temporary_beside(target)
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


def _temporary_beside(target: Path) -> tuple[int, str]:
    """A new file beside ``target`` (descriptor, path) with the mode a plain write of ``target`` gives.

    Created with mode 0o666, which the kernel reduces by the umask, as ``open`` does; when
    ``target`` exists its mode is copied instead (``open(..., "w")`` keeps an existing file's mode).
    """
    try:
        kept: int | None = stat.S_IMODE(os.stat(target).st_mode)
    except OSError:
        kept = None
    for _ in range(100):
        temporary = str(target.parent / f".{target.name}.{secrets.token_hex(4)}.tmp")
        try:
            handle = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o666)
        except FileExistsError:
            continue
        if kept is not None and hasattr(os, "fchmod"):
            try:
                os.fchmod(handle, kept)
            except OSError:  # a filesystem without modes (or a file of another owner's): the new file's mode stays
                pass
        return handle, temporary
    raise FileExistsError(f"no free temporary name beside {target}")


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
