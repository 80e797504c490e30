"""``python -m ssl_app list [KIND ...]``: what can be chosen, read from the registries.

One line per loss, temperature policy, method, embedding metric, datamodule and backbone: its name, what it is (the
first line of its docstring, or a metric's formula and the tags it logs, plus the capabilities
its class declares) and the option that selects it. Nothing here names an entry: a class
registered anywhere (``ssl_app.registering``, ``ssl_app.metrics.register``) is listed, and one that
is not registered is not. ``ssl_app.cli.main`` hands ``list`` over before Lightning is imported, and a kind
imports only its own registry's package (``list losses`` needs no Lightning; ``methods`` and ``datamodules``,
Lightning's subclasses, do), so listing builds no model, no data and no run folder; what it printed is kept in
the user's cache under a key of the sources (``ssl_app.cli.listing_cache``), so the next ``list`` imports nothing.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ssl_app import registry as registries
from ssl_app.registering import Registry

#: Every registered embedding metric runs in this callback, which logs each field as
#: ``metrics/<tag>``; adding the callback is what selects the metrics.
METRICS_OPTION = "--trainer.callbacks+=callbacks.EmbeddingMetrics"
METRICS_TAG_PREFIX = "metrics/"

USAGE = (
    "usage: python -m ssl_app list [KIND ...]\n\n"
    "Print what can be chosen, one line each: name, what it is, and the option that selects it.\n"
    "KIND: {kinds} (default: all; the singular works too)."
)


@dataclass(frozen=True)
class Row:
    """One listed line: ``name``, ``summary`` (what it is) and the ``option`` that selects it."""

    name: str
    summary: str
    option: str


def registry_rows(registry: Registry) -> list[Row]:
    """One row per entry, its declared capabilities after the summary (a True flag by name)."""
    rows = []
    for entry in registry.values():
        summary = entry.summary.replace("``", "")  # reST literals read as plain words on a terminal
        shown = [name if value is True else f"{name}={value}" for name, value in entry.capabilities.items() if value is not False]
        summary = f"{summary} [{', '.join(shown)}]" if shown else summary
        rows.append(Row(entry.name, summary, entry.option))
    return rows


def metric_rows() -> list[Row]:
    """One row per registered embedding metric: its formula and the tags it logs (``{k}``: the callback's ``top_k``)."""
    from ssl_app.metrics import EMBEDDING_METRICS

    rows = []
    for name, metric in EMBEDDING_METRICS.items():
        tags = ", ".join(METRICS_TAG_PREFIX + tag for tag in metric.tags.values())
        formulas = "; ".join(dict.fromkeys(metric.formula(field) for field in metric.tags))  # one text per distinct formula
        rows.append(Row(name, f"{formulas} [logs {tags}]", METRICS_OPTION))
    return rows


#: The kinds ``list`` prints, in order, each with the function that reads its registry.
KINDS: dict[str, Callable[[], list[Row]]] = {
    "losses": lambda: registry_rows(registries.LOSSES),
    "temperatures": lambda: registry_rows(registries.TEMPERATURES),
    "methods": lambda: registry_rows(registries.METHODS),
    "metrics": metric_rows,
    "datamodules": lambda: registry_rows(registries.DATAMODULES),
    "backbones": lambda: registry_rows(registries.BACKBONES),
}
_SINGULAR = {kind[:-2] if kind.endswith("ses") else kind[:-1]: kind for kind in KINDS}


def format_kind(kind: str, rows: list[Row]) -> list[str]:
    """A heading and one aligned line per row."""
    if not rows:
        return [f"{kind}: none registered"]
    name_width = max(len(row.name) for row in rows)
    summary_width = max(len(row.summary) for row in rows)
    lines = [f"{kind}:"]
    lines += [f"  {row.name:<{name_width}}  {row.summary:<{summary_width}}  {row.option}" for row in rows]
    return lines


def main(args: Sequence[str], out: Any = None, err: Any = None) -> int:
    """Print the kinds named in ``args`` (all when empty) and return the exit status: 0, or 2 with
    one ``error:`` line for an unknown kind or option."""
    out = sys.stdout if out is None else out
    err = sys.stderr if err is None else err
    usage = USAGE.format(kinds=", ".join(KINDS))
    if any(arg in ("-h", "--help") for arg in args):
        print(usage, file=out)
        return 0
    kinds = []
    for arg in args:
        kind = _SINGULAR.get(arg, arg)
        if kind not in KINDS:
            what = "option" if arg.startswith("-") else "kind"
            print(
                f"error: list: unknown {what} {arg!r}; choose from {', '.join(KINDS)} (python -m ssl_app list --help)", file=err
            )
            return 2
        if kind not in kinds:
            kinds.append(kind)
    lines: list[str] = []
    for kind, rows in rows_of(kinds or list(KINDS)).items():
        if lines:
            lines.append("")
        lines += format_kind(kind, rows)
    try:
        print("\n".join(lines), file=out)
    except BrokenPipeError:  # `list | head`: the reader has what it wanted
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - Python flushes stdout again at exit
    return 0


#: The packages whose import fills a registry. Before any of them is imported, only their sources can register
#: anything, so the lines kept for those sources are the lines; after, a class registered at run time (a plug-in,
#: a test) may be missing from them, and the registries are read (and nothing kept).
REGISTRY_PACKAGES = (
    "ssl_app.losses", "ssl_app.temperature", "ssl_app.methods", "ssl_app.metrics", "ssl_app.models", "datamodules",
)  # fmt: skip


def rows_of(kinds: list[str]) -> dict[str, list[Row]]:
    """The rows of each kind: in a process that has not loaded the registries, those kept from an earlier ``list``
    of the same sources (``ssl_app.cli.listing_cache``: no import), else read from the registries and kept for the
    next one."""
    from ssl_app.cli import listing_cache

    if any(name in sys.modules for name in REGISTRY_PACKAGES):  # imported before: something may have registered more
        return {kind: KINDS[kind]() for kind in kinds}
    key = listing_cache.sources_key(listing_cache.package_folders())
    kept = listing_cache.cached(kinds, key)
    if kept is not None:
        return {kind: [Row(*row) for row in kept[kind]] for kind in kinds}
    read = {kind: KINDS[kind]() for kind in kinds}
    listing_cache.keep({kind: [[row.name, row.summary, row.option] for row in rows] for kind, rows in read.items()}, key)
    return read
