"""Class lists: which class folders of a labelled image tree a data set uses (ImageNet-100 out of ImageNet).

A list is given as the name of one shipped with the package (``imagenet100``: ``datamodules/lists/``),
the path of a text file (one class folder name per line; blank lines and ``#`` comments ignored), or
the names themselves. :func:`read_class_list` returns the names sorted, so that the labels are the
ones torchvision's ``ImageFolder`` would give a tree holding only those folders.
"""

from __future__ import annotations

from pathlib import Path
from typing import Union

from ssl_app.errors import ConfigError

#: Where the shipped lists live: ``<name>.txt``.
SHIPPED_LISTS = Path(__file__).resolve().parent / "lists"

ClassList = Union[str, list[str]]


def shipped_lists() -> list[str]:
    """The names of the class lists shipped with the package."""
    return sorted(path.stem for path in SHIPPED_LISTS.glob("*.txt"))


def read_class_list(spec: ClassList, owner: str = "class_list") -> list[str]:
    """The class names ``spec`` means, sorted; an empty, repeated or unreadable list is a ConfigError."""
    if isinstance(spec, str):
        path = Path(spec).expanduser()
        if not path.is_file() and (SHIPPED_LISTS / f"{spec}.txt").is_file():
            path = SHIPPED_LISTS / f"{spec}.txt"
        if not path.is_file():
            raise ConfigError(f"{owner}: {spec!r} is neither a file nor a shipped class list ({', '.join(shipped_lists())})")
        try:
            lines = path.read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError) as error:
            raise ConfigError(f"{owner}: cannot read {str(path)!r} ({error})") from None
        names = [line.split("#", 1)[0].strip() for line in lines]
        names, where = [name for name in names if name], str(path)
    elif isinstance(spec, (list, tuple)) and all(isinstance(name, str) for name in spec):
        names, where = [name.strip() for name in spec], "the list given"
    else:
        raise ConfigError(f"{owner}: expected a file, a shipped list's name or a list of class names, got {spec!r}")
    if not names or not all(names):
        raise ConfigError(f"{owner}: {where} names no class" if not names else f"{owner}: {where} has an empty name")
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise ConfigError(f"{owner}: {where} names {repeated[:5]} more than once")
    bad = [name for name in names if "/" in name or "\\" in name or name in (".", "..")]
    if bad:
        raise ConfigError(f"{owner}: {where} names {bad[:5]}, which are not folder names")
    return sorted(names)
