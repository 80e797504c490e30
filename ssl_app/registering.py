"""How a list of what can be chosen works: a :class:`Registry` of losses, methods, datamodules, backbones, τ policies.

A registry maps a name to an :class:`Entry`: the class (or, for backbones, the builder function),
a one-line summary (the first line of its docstring) and the command-line option that selects it.
``python -m ssl_app list`` prints them, and the tests iterate over them, so a class that is
registered is listed, documented and put through the contract tests of its kind without being
named anywhere else.

Registering is one line next to the class, in the module that defines it::

    from ssl_app.registry import LOSSES

    @LOSSES.register
    class MyLoss(ContrastiveLoss):
        \"\"\"What it computes, in one line (shown by ``python -m ssl_app list``).\"\"\"

Every built-in entry registers that way, above its class or function; the package's ``__init__``
only imports the module (in the order ``list`` shows). ``LOSSES.register(MyLoss)`` is the same
outside a class statement. Options: ``@LOSSES.register(name="other")`` lists it under another
name, ``summary=`` replaces the docstring's first line.

What an entry can do is read from its class attributes (a registry's ``capabilities``, e.g. a
loss's ``uses_labels``), never guessed from its name. Each registry lives in the package whose
entries it lists (``ssl_app/losses/registry.py``, ``ssl_app/methods/registry.py``,
``ssl_app/temperature/registry.py``, ``ssl_app/models/registry.py``, ``datamodules/registry.py``),
beside the base class its entries subclass: importing it imports its package first, whose
``__init__`` registers the built-in entries, so a registry is complete whoever reads it, and this
module imports nothing of the packages it serves (it stands on the ground floor, docs/design.md).
``ssl_app.registry`` gives the five under one address, for plug-ins.
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Optional, TypeVar, overload

T = TypeVar("T")

#: How an option names an entry: its import path (``--model=ssl_app.methods.MoCo``) or its name
#: (``--model.init_args.backbone=resnet18_cifar``).
SelectBy = Literal["class_path", "name"]


@dataclass(frozen=True)
class Entry:
    """One registered class or builder: ``name``, ``target``, a one-line ``summary``, and the ``option`` that selects it."""

    name: str
    target: Any
    summary: str
    registry: Registry = field(repr=False, compare=False)

    @property
    def value(self) -> str:
        """What the registry's option takes to select this entry: an import path, or the name."""
        if self.registry.select_by == "name":
            return self.name
        return self.registry.public_path(self.target)

    @property
    def option(self) -> str:
        """The command-line option that selects this entry, e.g. ``--model.init_args.loss=ssl_app.losses.InfoNCE``."""
        return f"{self.registry.option}={self.value}"

    @property
    def capabilities(self) -> dict[str, Any]:
        """The registry's declared capabilities that the target sets as plain class attributes.

        A capability the class computes per instance (a property, e.g. a datamodule whose class
        count depends on its options) is not a declaration and is left out.
        """
        found = {}
        for shown, attribute in self.registry.capabilities.items():
            value = _class_attribute(self.target, attribute)
            if value is not _MISSING and value is not None:  # None: the class declares nothing
                found[shown] = value
        return found


class Registry(Mapping[str, Entry]):
    """Name → :class:`Entry` of one kind, in registration order.

    Args:
        kind: what the entries are, in plural (``losses``), for messages and ``list``.
        option: the command-line option whose value selects an entry (``--model.init_args.loss``).
        package: the name of the package that registers the built-in entries and exports them (the
            one the registry's module is in, so it is imported before anyone reads the registry): where
            :meth:`unregistered` looks for classes left out, and the import path the docs and configs write.
        base: the class every entry must subclass (``None``: any callable, for builder functions).
        select_by: the option takes the entry's import path (``class_path``) or its ``name``.
        capabilities: class attributes that declare what an entry can do, as
            ``{shown name: attribute}`` (a tuple when the two are the same).
    """

    def __init__(
        self,
        kind: str,
        option: str,
        *,
        package: str,
        base: Optional[type] = None,
        select_by: SelectBy = "class_path",
        capabilities: Mapping[str, str] | tuple[str, ...] = (),
    ) -> None:
        if select_by not in ("class_path", "name"):
            raise ValueError(f"Registry {kind!r}: select_by must be 'class_path' or 'name', got {select_by!r}")
        self.kind = kind
        self.option = option
        self.package = package
        self.base = base
        self.select_by = select_by
        self.capabilities = dict(capabilities) if isinstance(capabilities, Mapping) else {name: name for name in capabilities}
        self._entries: dict[str, Entry] = {}

    # --- registering -------------------------------------------------------------------------
    @overload
    def register(self, target: T, /) -> T: ...

    @overload
    def register(self, *, name: Optional[str] = None, summary: Optional[str] = None) -> Callable[[T], T]: ...

    def register(self, target: Any = None, /, *, name: Optional[str] = None, summary: Optional[str] = None) -> Any:
        """Add ``target`` under ``name`` (default: its ``__name__``) and return it unchanged.

        Use as ``@REGISTRY.register``, ``@REGISTRY.register(name=..., summary=...)`` or
        ``REGISTRY.register(Class)``. Registering the same target under the same name again does
        nothing (so a line may move from a package's ``__init__`` into the class's module without
        both failing on the way). Raises ``ValueError`` for a name taken by another target, a
        target already registered under another name, or a target without a summary;
        ``TypeError`` for a target that is not of the registry's base class.
        """
        if target is None:
            return lambda decorated: self.register(decorated, name=name, summary=summary)
        self._add(target, name, summary)
        return target

    def _add(self, target: Any, name: Optional[str], summary: Optional[str]) -> None:
        what = self.describe_target(target)
        self._check_type(target, what)
        name = target.__name__ if name is None else name
        if not isinstance(name, str) or not name.isidentifier():
            raise ValueError(f"{self.kind}: cannot register {what} as {name!r}: a name must be a Python identifier")
        taken = self._entries.get(name)
        if taken is not None and taken.target is target:
            return
        if taken is not None:
            raise ValueError(
                f"{self.kind}: cannot register {what} as {name!r}: {self.describe_target(taken.target)} is already "
                "registered under that name (choose another name with register(name=...))"
            )
        for other in self._entries.values():
            if other.target is target:
                raise ValueError(f"{self.kind}: {what} is already registered as {other.name!r}; cannot add it again as {name!r}")
        line = summary if summary is not None else first_line(target.__doc__)
        if not line or not line.strip():
            raise ValueError(
                f"{self.kind}: cannot register {what}: it has no docstring to take the one-line summary from "
                "(write one, or pass register(summary=...))"
            )
        self._entries[name] = Entry(name, target, line.strip(), self)

    def _check_type(self, target: Any, what: str) -> None:
        if self.base is None:
            if not callable(target) or not hasattr(target, "__name__"):
                raise TypeError(f"{self.kind}: can only register a named function or class, got {what}")
            return
        base = self.base_class
        if not (isinstance(target, type) and issubclass(target, base)):
            raise TypeError(f"{self.kind}: can only register subclasses of {base.__module__}.{base.__qualname__}, got {what}")

    def unregister(self, name: str) -> Entry:
        """Remove and return the entry ``name`` (tests that register a throwaway entry clean up with it)."""
        if name not in self._entries:
            raise KeyError(self._unknown(name))
        return self._entries.pop(name)

    # --- reading -----------------------------------------------------------------------------
    def __getitem__(self, name: str) -> Entry:
        try:
            return self._entries[name]
        except KeyError:
            raise KeyError(self._unknown(name)) from None

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._entries))

    def __len__(self) -> int:
        return len(self._entries)

    def names(self) -> list[str]:
        """The registered names, in registration order."""
        return list(self)

    def _unknown(self, name: str) -> str:
        return f"no {self.kind} entry named {name!r}; registered: {', '.join(self._entries) or 'none'}"

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}, {list(self._entries)})"

    # --- what the entries are ----------------------------------------------------------------
    @property
    def base_class(self) -> type:
        """The class every entry subclasses."""
        if self.base is None:
            raise TypeError(f"{self.kind}: this registry has no base class")
        return self.base

    def public_path(self, target: Any) -> str:
        """``package.Name`` when the package exports the target under its own name (what the docs
        and configs write), else its defining module's path."""
        package = sys.modules.get(self.package)
        if package is not None and getattr(package, target.__name__, None) is target:
            return f"{self.package}.{target.__name__}"
        return f"{target.__module__}.{target.__qualname__}"

    def describe_target(self, target: Any) -> str:
        """How messages name a target: its import path, or its repr if it has none."""
        module, qualname = getattr(target, "__module__", None), getattr(target, "__qualname__", None)
        return f"{module}.{qualname}" if module and qualname else repr(target)

    def unregistered(self) -> list[str]:
        """Import paths of the classes the package exports (``__all__``) that subclass the base
        class but are not registered: each is a class ``list`` and the tests would miss."""
        if self.base is None:
            return []
        package = sys.modules[self.package]
        base = self.base_class
        registered = [entry.target for entry in self._entries.values()]
        missing = []
        for exported in getattr(package, "__all__", ()):
            value = getattr(package, exported, None)
            if not (isinstance(value, type) and issubclass(value, base)) or value is base:
                continue
            if not any(value is target for target in registered):
                missing.append(f"{self.package}.{exported}")
        return missing


def first_line(doc: Optional[str]) -> str:
    """The first non-blank line of a docstring ('' when there is none)."""
    for line in inspect.cleandoc(doc or "").splitlines():
        if line.strip():
            return line.strip()
    return ""


_MISSING = object()


def _class_attribute(target: Any, attribute: str) -> Any:
    """``target.attribute`` when it is a plain value set on the class or a base class, else ``_MISSING``."""
    try:
        raw = inspect.getattr_static(target, attribute)
    except AttributeError:
        return _MISSING
    if hasattr(type(raw), "__get__"):  # a property, method or other descriptor: computed, not declared
        return _MISSING
    return raw
