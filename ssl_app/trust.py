"""Class paths read from a file are compared as text, never imported.

A checkpoint carries its run's config and the method's hyper-parameters, and both name classes
(``model.init_args.loss.class_path: mylosses.Loss``). Handing such a name to jsonargparse or
``importlib`` imports its module, and a module's top-level code runs on import: any importable
module with a side effect could be named by a stranger's checkpoint. So before anything reads a
saved config, every class path in it must name a class that is already known: one of the
registries' (``ssl_app.registry``; this application's own packages are imported first) or one whose
module is already imported — the classes of the user's own config and command line, which
jsonargparse imported because the user named them. Looking a name up in ``sys.modules`` runs no code.
"""

from __future__ import annotations

import importlib
import re
import sys
from collections.abc import Iterator
from typing import Any, Optional

#: Keys whose value is a class path (jsonargparse's ``class_path``, LightningCLI's ``_class_path``).
CLASS_PATH_KEYS = ("class_path", "_class_path")
#: A bare string jsonargparse may also take as a class (``loss: mylosses.Loss``): dotted names, a capitalised last part.
_LOOKS_LIKE_CLASS = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*\.[A-Z]\w*")
#: The parts of a run config that are parsed again from a checkpoint (``validate``/``test``: the model;
#: ``embed``: the data), where a bare string may be taken as a class; elsewhere only ``class_path`` names one.
PARSED_AGAIN = ("model", "data")


def import_own_packages() -> None:
    """Import this application's packages whose classes a saved config names (importing them is importing
    ourselves; the registries live in them). The linear probe (``ssl_app.evaluation``) is not among them: it
    reads checkpoints through this module, and whoever builds a probe has imported it already."""
    import callbacks  # noqa: F401
    import datamodules  # noqa: F401
    import ssl_app.losses  # noqa: F401
    import ssl_app.methods  # noqa: F401


def is_known_class(path: str) -> bool:
    """Whether ``path`` names a class of an already imported module (after importing our own packages)."""
    import_own_packages()
    module_name, _, name = path.rpartition(".")
    module = sys.modules.get(module_name) if module_name else None
    return module is not None and isinstance(vars(module).get(name), type)


def class_paths(value: Any, key: str = "", bare: Optional[bool] = None) -> Iterator[tuple[str, str]]:
    """Every ``(key, class path)`` in a run config (``bare`` None) or hyper-parameters (``bare`` True):
    each ``class_path``, and where ``bare``, each string that looks like one (under ``PARSED_AGAIN``
    of a run config)."""
    if isinstance(value, dict):
        for name, item in value.items():
            where = f"{key}.{name}" if key else str(name)
            if name in CLASS_PATH_KEYS and isinstance(item, str):
                yield where, item
            else:
                yield from class_paths(item, where, name in PARSED_AGAIN if bare is None else bare)
    elif isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            yield from class_paths(item, f"{key}[{index}]", bare)
    elif bare and isinstance(value, str) and _LOOKS_LIKE_CLASS.fullmatch(value):
        yield key, value


def first_unknown_class(value: Any, bare: Optional[bool] = None) -> Optional[tuple[str, str]]:
    """The first ``(key, class path)`` of ``value`` that :func:`is_known_class` does not know, or None."""
    for key, path in class_paths(value, bare=bare):
        if not is_known_class(path):
            return key, path
    return None


def check_class_paths(value: Any, what: str, bare: Optional[bool] = None) -> None:
    """Raise a ConfigError naming the first unknown class path of ``value`` (``what``: whose config it is;
    ``bare``: as in :func:`class_paths`)."""
    from ssl_app.errors import ConfigError

    found = first_unknown_class(value, bare)
    if found is not None:
        key, path = found
        raise ConfigError(
            f"{what} names {path} ({key}), which is neither a registered class nor one already imported; a class "
            f"path read from a file is never imported (to trust it, import its module first, e.g. by naming it in "
            "your own config)"
        )


def parsed_again(config: Any) -> Any:
    """The parts of a saved run config that a command may build objects from (``PARSED_AGAIN``: the
    model, the data); the rest (trainer, callbacks, logger) is only compared as text, so a class named
    there is neither imported nor refused (a run trained with a callback of its own resumes without it)."""
    if not isinstance(config, dict):
        return config
    return {key: config[key] for key in PARSED_AGAIN if key in config}


def import_trusted(modules: Optional[list[str]], option: str = "--import") -> None:
    """Import the modules the user names on the command line (``export``/``embed --import mylosses``),
    so that a checkpoint of their own loss, method or datamodule is known: the user's word is the trust
    a class path read from a file lacks. A module that cannot be imported is a ConfigError naming it."""
    from ssl_app.errors import ConfigError

    for name in modules or ():
        try:
            importlib.import_module(name)
        except ImportError as error:
            raise ConfigError(f"{option} {name}: cannot import it ({error})") from error
