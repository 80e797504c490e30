"""Process-wide CPU settings that the entry points apply (``python -m ssl_app``, ``ssl-app``, benchmarks).

glibc's ``malloc`` serves every block above a threshold (at most 32 MB) with a fresh ``mmap``
and unmaps it on ``free``. A CPU training step allocates and frees activations of that size
every layer, so each one came back as new pages that the kernel had to fault in and zero: at
batch 512 the small CNN's step ran ~1.7× slower than two steps at 256, all of it in page faults
(benchmarks/README.md, "Tuning notes"). :func:`keep_freed_memory` makes ``malloc`` take every
block from its heap and keep freed memory for reuse, as PyTorch's CUDA caching allocator does
on a GPU. The process's resident memory then stays near its peak instead of shrinking between
steps.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys

# mallopt parameters (glibc's malloc.h).
_M_TRIM_THRESHOLD = -1
_M_MMAP_MAX = -4
#: Freed memory kept at the top of the heap before malloc gives it back to the kernel.
_TRIM_THRESHOLD = 1 << 30

_applied = False


def keep_freed_memory() -> bool:
    """Serve large blocks from the heap and keep freed memory (glibc on Linux only); idempotent.

    Returns whether the setting is in force. Skipped when the environment already tunes malloc
    (any ``MALLOC_*`` variable, e.g. ``MALLOC_MMAP_MAX_``) or sets ``SSL_APP_MALLOC=default``,
    and on platforms without glibc's ``mallopt``. Inherited by forked DataLoader workers.
    """
    global _applied
    if _applied:
        return True
    if not sys.platform.startswith("linux") or os.environ.get("SSL_APP_MALLOC") == "default":
        return False
    if any(name.startswith("MALLOC_") for name in os.environ):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # musl or another libc without mallopt
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    _applied = bool(mallopt(_M_MMAP_MAX, 0)) and bool(mallopt(_M_TRIM_THRESHOLD, _TRIM_THRESHOLD))
    return _applied
