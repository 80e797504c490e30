"""The known names closest to a misspelled class, option or command, for "did you mean …" (``difflib``).

A class path is compared with what its option's registry lists (``--model.init_args.loss`` → the losses,
``ssl_app.registering``) and with the public classes of the module it names; an option with the options of
its parser or of the class it configures. Importing this module imports nothing of the library: a registry
is read only when a class path has to be matched, so an error found before Lightning is imported stays so.
"""

from __future__ import annotations

import difflib
import importlib
import importlib.util
import inspect
import sys
from collections.abc import Iterable
from typing import Any, Optional

#: The option each registry's entries are selected by → its name in ``ssl_app.registry`` (checked against the
#: registries' own ``option`` in the tests), so a misspelled loss reads the losses alone, not every package.
REGISTRY_OF_OPTION = {
    "--model": "METHODS",
    "--data": "DATAMODULES",
    "--model.init_args.loss": "LOSSES",
    "--model.init_args.loss.init_args.temperature": "TEMPERATURES",
    "--model.init_args.backbone": "BACKBONES",
}


def closest(word: str, known: Iterable[str]) -> list[str]:
    """The names of ``known`` closest to ``word`` (case ignored; ``difflib``'s ratio of at least 0.6): the best
    one, and any as close as it; [] when none is close."""
    by_folded: dict[str, str] = {}
    for name in known:
        by_folded.setdefault(name.casefold(), name)
    folded = word.casefold()
    found = difflib.get_close_matches(folded, list(by_folded), n=3, cutoff=0.6)
    ratio = {name: difflib.SequenceMatcher(None, folded, name).ratio() for name in found}
    return [by_folded[name] for name in found if found and ratio[name] == ratio[found[0]]]


def did_you_mean(word: str, known: Iterable[str]) -> str:
    """``"; did you mean X?"`` (or ``X or Y``) for the names of ``known`` closest to ``word``; "" when none is close."""
    found = [name for name in closest(word, known) if name != word]
    return f"; did you mean {' or '.join(found)}?" if found else ""


def class_path_problem(value: str) -> Optional[str]:
    """Why ``value`` (``package.module.Name``) names no class: the module cannot be found, or it has no
    ``Name``; None when it names one (or is no dotted path: not a class path). Imports the module, as
    jsonargparse would."""
    module, _, name = value.rpartition(".")
    if not module or not name.isidentifier() or not all(part.isidentifier() for part in module.split(".")):
        return None
    try:
        found = importlib.util.find_spec(module)
    except (ImportError, ValueError):  # a parent that is not a package
        found = None
    if found is None:
        return f"no module named {module}"
    try:
        loaded = importlib.import_module(module)
    except Exception:  # noqa: BLE001 - a module that fails to import: jsonargparse reports it as it would have
        return None
    if isinstance(getattr(loaded, name, None), type):
        return None
    return f"{module} has no class {name}"


def class_candidates(option: str, value: str) -> list[str]:
    """The class paths a misspelled ``value`` of ``option`` may have meant: the entries of the option's
    registry (every registry's when the option has none of its own) and the public classes of the module
    ``value`` names, when that module exists."""
    option = "--" + option.lstrip("-").removesuffix(".class_path")
    candidates = registered_values(REGISTRY_OF_OPTION.get(option))
    module = value.rpartition(".")[0]
    loaded = sys.modules.get(module)
    if loaded is not None:
        public = getattr(loaded, "__all__", None) or [name for name in vars(loaded) if not name.startswith("_")]
        candidates += [f"{module}.{name}" for name in public if inspect.isclass(getattr(loaded, name, None))]
    return list(dict.fromkeys(candidates))


def registered_values(registry_name: Optional[str]) -> list[str]:
    """What the options of one registry take (``ssl_app.losses.InfoNCE``), or of all of them (``None``)."""
    from ssl_app import registry

    names = [registry_name] if registry_name else list(REGISTRY_OF_OPTION.values())
    return [entry.value for name in names for entry in getattr(registry, name).values()]


def class_suggestion(option: str, value: str) -> str:
    """``"; did you mean ssl_app.losses.InfoNCE?"`` for a misspelled class path ``value`` of ``option``: the
    closest whole paths, else (a right class in a misspelled module) the paths whose class name is closest."""
    candidates = class_candidates(option, value)
    hint = did_you_mean(value, candidates)
    if hint:
        return hint
    by_name = {path.rpartition(".")[2]: path for path in candidates}
    found = [by_name[name] for name in closest(value.rpartition(".")[2], by_name)]
    return f"; did you mean {' or '.join(found)}?" if found else ""


def parameters_of(class_path: str) -> list[str]:
    """The init options ``class_path`` takes, as jsonargparse reads them (its bases' through ``**kwargs`` too)."""
    from jsonargparse._parameter_resolvers import get_signature_parameters

    module, _, name = class_path.rpartition(".")
    try:
        cls: Any = getattr(importlib.import_module(module), name)
        return [param.name for param in get_signature_parameters(cls, None, logger=False)]
    except Exception:  # noqa: BLE001 - a suggestion is a courtesy: without one the error still stands
        return []
