"""A command's ``--help`` text kept in the user's cache, so that the next identical ``--help`` imports nothing.

``fit --help`` needs LightningCLI's parser (seconds of imports: Lightning, torchmetrics, torchvision); the report's
help lists the table's columns, read from the metric registry (torch). The text is a function of what the parser is
built from, so it is kept under a key of all of it:

- the tool and its whole command line (``--config X``, ``--model SimCLR`` change the defaults and options shown);
- the bytes of every file the command line names, and of every file those name in turn (a config's ``config:``
  includes, a ``model: model.yaml``), each under the name it was given and found by;
- the sources and versions ``list``'s cache is keyed by (``ssl_app.cli.listing_cache.sources_key``) plus the
  distributions that shape a help text (jsonargparse, its docstring reader, torchmetrics, lightly);
- the terminal width argparse wraps to, and the ``JSONARGPARSE_*`` environment.

A command line or config naming a class of any other package (a plug-in, whose source is not in the key) is never
kept, nor served. One file per key, ``help-<sources>-<entry>.json`` under ``ssl_app.cli.listing_cache.cache_folder``,
written whole or not at all (``ssl_app.io.atomic``: two processes writing at once leave one of two whole files); a
file that cannot be read or parsed, or whose key differs, is ignored and the parser answers. Entries of other
sources are removed when a new one is written.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import re
import shutil
import sys
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Optional

from ssl_app.cli import listing_cache

#: Distributions besides ``listing_cache.DISTRIBUTIONS`` whose versions change a help text.
HELP_DISTRIBUTIONS = ("jsonargparse", "docstring-parser", "typeshed-client", "torchmetrics", "lightly")
#: Top-level packages a class path may name without making the text depend on sources outside the key: ours (their
#: sources are hashed) and the distributions whose versions are.
KNOWN_TOP_LEVEL = (*listing_cache.PACKAGES, "torch", "torchvision", "lightning", "torchmetrics", "lightly", "jsonargparse")
#: How deep ``file names a file names a file`` is followed.
MAX_DEPTH = 8
_DOTTED = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)+$")
_FILE_SUFFIXES = (".yaml", ".yml", ".json", ".jsonnet", ".txt", ".py", ".ckpt", ".pt")


def help_key(tool: str, argv: list[str], cwd: Optional[Path] = None) -> Optional[tuple[str, str]]:
    """``(sources, entry)``: the key of ``tool``'s help for ``argv`` (run in ``cwd``), or None when it cannot be kept
    (a class path of another package, a file that cannot be read)."""
    cwd = Path.cwd() if cwd is None else cwd
    digest = hashlib.sha256()
    digest.update(json.dumps([tool, argv]).encode())
    digest.update(f"\0columns={shutil.get_terminal_size().columns}".encode())
    for name in sorted(os.environ):
        if name.startswith("JSONARGPARSE_"):
            digest.update(f"\0{name}={os.environ[name]}".encode())
    try:
        for line in _named_files(argv, cwd):
            digest.update(b"\0" + line)
    except _NotKept:
        return None
    versions = listing_cache.installed_versions(HELP_DISTRIBUTIONS)
    digest.update("\0".join(versions).encode())
    try:
        sources = listing_cache.sources_key(listing_cache.package_folders())
    except OSError:
        return None
    return sources[:16], digest.hexdigest()[:32]


class _NotKept(Exception):
    """The text depends on something the key cannot hold."""


def _named_files(argv: list[str], cwd: Path) -> Iterator[bytes]:
    """For each string of ``argv`` and of the files they name (recursively): the file's bytes under the name it was
    given and the folder it was found from; raises ``_NotKept`` for a class path of a package outside the key."""
    seen: set[Path] = set()
    pending: list[tuple[str, list[Path], int]] = []
    for arg in argv:
        value = arg.split("=", 1)[1] if arg.startswith("-") and "=" in arg else arg
        pending.append((value, [cwd], 0))
    while pending:
        value, folders, depth = pending.pop(0)
        _refuse_foreign_class(value)
        for folder in folders:
            path = folder / value if value and "\0" not in value else None
            try:
                if path is None or not path.is_file():
                    continue
                resolved = path.resolve()
                content = path.read_bytes()
            except (OSError, ValueError):
                raise _NotKept from None
            yield f"{folder}|{value}".encode() + b"\0" + content
            if resolved in seen or depth >= MAX_DEPTH:
                continue
            seen.add(resolved)
            pending += [(string, [path.parent, cwd], depth + 1) for string in _strings_in(content)]


def _strings_in(content: bytes) -> list[str]:
    """Every string value of a YAML/JSON file (nothing for another kind of file). Keys are option names
    (``trainer.max_epochs``), never a file or a class: a key that looked like a class path of another package (a
    ``data`` folder in the working directory) would keep the text from being kept."""
    import yaml

    try:
        loaded = yaml.safe_load(content)
    except (yaml.YAMLError, UnicodeDecodeError, ValueError):
        return []
    found: list[str] = []
    stack = [loaded]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            found.append(item)
        elif isinstance(item, dict):
            stack += list(item.values())
        elif isinstance(item, list):
            stack += item
    return found


def _refuse_foreign_class(value: str) -> None:
    if not _DOTTED.match(value) or value.lower().endswith(_FILE_SUFFIXES):
        return
    top = value.split(".")[0]
    if top in KNOWN_TOP_LEVEL:
        return
    try:
        importable = importlib.util.find_spec(top) is not None
    except (ImportError, ValueError):
        importable = False
    if importable:  # a module of another package: its source is not in the key
        raise _NotKept


def _file(key: tuple[str, str]) -> Path:
    return listing_cache.cache_folder() / f"help-{key[0]}-{key[1]}.json"


def cached(key: Optional[tuple[str, str]]) -> Optional[str]:
    """The text kept under ``key``, or None (none kept, or a file that cannot be read or is not one of ours)."""
    if key is None:
        return None
    try:
        kept = json.loads(_file(key).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(kept, dict) or kept.get("key") != list(key):
        return None
    text = kept.get("text")
    return text if isinstance(text, str) else None


def keep(key: Optional[tuple[str, str]], text: str) -> None:
    """Keep ``text`` under ``key`` (entries of other sources removed); nothing on any error."""
    from ssl_app.io.atomic import atomic_file

    if key is None or not text:
        return
    target = _file(key)
    try:
        with atomic_file(target) as file:
            file.write(json.dumps({"key": list(key), "text": text}, ensure_ascii=False).encode("utf-8"))
        for other in target.parent.glob("help-*.json"):
            if not other.name.startswith(f"help-{key[0]}-"):
                other.unlink(missing_ok=True)
    except OSError:
        return


def serve(tool: str, argv: list[str], write: Optional[Callable[[str], Any]] = None) -> bool:
    """Write the help kept for ``tool`` and ``argv`` (on stdout) and return True, or return False when none is kept."""
    text = cached(help_key(tool, argv))
    if text is None:
        return False
    try:
        (write or sys.stdout.write)(text)
        sys.stdout.flush()
    except BrokenPipeError:  # `fit --help | head`: the reader has what it wanted
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - Python flushes stdout again at exit
    return True


class _Tee:
    """A text stream that writes through to ``stream`` and keeps a copy."""

    def __init__(self, stream: Any) -> None:
        self.stream = stream
        self.parts: list[str] = []

    def write(self, text: str) -> int:
        self.parts.append(text)
        return self.stream.write(text)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.stream, name)


#: Modules whose import changes a LightningCLI help text (the "known subclasses" it lists): a process that imported
#: any of them before the command (``main(args)`` called in-process) prints a text a fresh process would not.
SHAPING_MODULES = ("lightning", "datamodules", "callbacks", "ssl_app.methods", "ssl_app.losses", "ssl_app.evaluation")


def fresh_process() -> bool:
    """Whether nothing that shapes a help text has been imported yet (as in ``python -m ssl_app ... --help``)."""
    return not any(name in sys.modules for name in SHAPING_MODULES)


@contextmanager
def keeping_help(tool: str, argv: list[str], fresh: bool = True) -> Iterator[None]:
    """Run a block that prints ``--help`` and exits with status 0; what it printed on stdout is kept for ``tool`` and
    ``argv`` when the process was ``fresh`` (see :func:`fresh_process`). Any other way out keeps nothing."""
    key = help_key(tool, argv) if fresh else None
    tee = _Tee(sys.stdout)
    sys.stdout = tee
    try:
        yield
    except SystemExit as stop:
        if stop.code in (0, None):
            keep(key, "".join(tee.parts))
        raise
    finally:
        if sys.stdout is tee:
            sys.stdout = tee.stream


def wants_help(argv: Iterable[str]) -> bool:
    """Whether ``argv`` asks for a help text before any ``--``: ``-h``, ``--help``, or jsonargparse's help of a class
    option (``--model.help SimCLR``)."""
    for arg in argv:
        if arg == "--":
            return False
        if arg in ("-h", "--help") or (arg.startswith("--") and arg.split("=", 1)[0].endswith(".help")):
            return True
    return False
