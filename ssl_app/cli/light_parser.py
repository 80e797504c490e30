"""argparse parsers that answer ``--help`` and their own errors before the library is imported.

The sweep, the report, ``export`` and ``embed`` parse plain options, but some of their texts come from the library:
the sweep's plans and data sets (``ssl_app.sweep.plans``, which reads the run spec, which reads the τ policies:
torch), the report's columns (the metric registry). :class:`LazyChoices` reads such a list only when it is needed
(a given ``--plan``, the help text), and :class:`CachedHelpParser` keeps its help text in the user's cache
(``ssl_app.cli.help_cache``, under the sources' key), so that only the first ``--help`` after an install or an
edit imports what the text names. An argument error prints without any of it.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Iterable, Iterator
from typing import IO, Any, Optional


class LazyChoices:
    """An argparse ``choices`` read on first use (``in``, iteration): kept under ``name`` and the sources' key
    (``ssl_app.cli.help_cache``), else from ``load`` (and kept). Give the option a ``metavar``, else the usage line
    lists them, and every error prints the usage."""

    def __init__(self, name: str, load: Callable[[], Iterable[str]]) -> None:
        self.name = name
        self._load = load
        self._values: Optional[list[str]] = None

    def _get(self) -> list[str]:
        if self._values is None:
            from ssl_app.cli import help_cache

            key = help_cache.help_key(self.name, ["--choices"])
            kept = help_cache.cached(key)
            try:
                values = json.loads(kept) if kept is not None else None
            except ValueError:
                values = None
            if isinstance(values, list) and all(isinstance(value, str) for value in values):
                self._values = values
            else:
                self._values = [str(value) for value in self._load()]
                help_cache.keep(key, json.dumps(self._values))
        return self._values

    def __contains__(self, value: object) -> bool:
        return value in self._get()

    def __iter__(self) -> Iterator[str]:
        return iter(self._get())

    def __len__(self) -> int:
        return len(self._get())


class CachedHelpParser(argparse.ArgumentParser):
    """An ``argparse.ArgumentParser`` whose ``--help`` text is kept under the sources' key (its ``prog`` names it);
    ``epilog_from`` computes the epilog when the text is made (not when the parser is)."""

    def __init__(self, *args: Any, epilog_from: Optional[Callable[[], str]] = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._epilog_from = epilog_from

    def format_help(self) -> str:
        if self._epilog_from is not None:
            self.epilog, self._epilog_from = self._epilog_from(), None
        return super().format_help()

    def print_help(self, file: Optional[IO[str]] = None) -> None:
        self._print_message(help_text(self), sys.stdout if file is None else file)


def help_text(parser: argparse.ArgumentParser) -> str:
    """``parser``'s help text: the one kept for its ``prog`` and these sources, else made (and kept)."""
    from ssl_app.cli import help_cache

    key = help_cache.help_key(parser.prog, ["--help"])
    text = help_cache.cached(key)
    if text is None:
        text = parser.format_help()
        help_cache.keep(key, text)
    return text


def keep_help(parser: argparse.ArgumentParser) -> None:
    """Keep ``parser``'s help text (and so its lazy choices) for the next ``--help`` unless kept already: called by a
    command that has imported what the text needs anyway (a real sweep or report), so that the first ``--help``
    after it imports nothing."""
    help_text(parser)
