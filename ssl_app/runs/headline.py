"""The headline columns: what a finished run's console summary shows and the report's table is made of,
and the run options their tags depend on.

Both ``ssl_app.runs.summary`` (the console lines after a command) and ``ssl_app.report`` (the table,
the figures) read them from here: a column is declared once (``OWN_COLUMNS``, or a field of the
metric registry), in Table 1's order (``TABLE_ORDER``) then registration order (``table_columns``),
then the long-tail groups (``LONG_TAIL_COLUMNS``), which a table shows only when a run logged them.
A column's texts may hold ``{k}`` (``EmbeddingMetrics.top_k``), ``{knn_k}`` and ``{knn_temperature}``
(``KNNMonitor``'s k and σ); :class:`RunOptions` fills them with a run's own saved options.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from typing import Any

from ssl_app.errors import ConfigError
from ssl_app.metrics.knn import DEFAULT_K, DEFAULT_TEMPERATURE
from ssl_app.metrics.registry import DEFAULT_TOP_K, registered_fields
from ssl_app.runs.spec import RunSpec


@dataclass(frozen=True)
class RunOptions:
    """The callback options a run's tags and column meanings depend on, from its saved config.

    ``top_k``: ``EmbeddingMetrics.top_k`` (the tags ``metrics/top{k}_neg_sim`` and
    ``similarity/top{k}_negative``); ``knn_k``, ``knn_temperature``: ``KNNMonitor.k`` and
    ``temperature`` (σ). A run whose config does not say has the callbacks' defaults.
    """

    top_k: int = DEFAULT_TOP_K
    knn_k: int = DEFAULT_K
    knn_temperature: float = DEFAULT_TEMPERATURE

    def fill(self, text: str) -> str:
        """``text`` with the placeholders ``{k}`` (top-k), ``{knn_k}`` and ``{knn_temperature}`` filled in."""
        return fill(text, {"k": str(self.top_k), "knn_k": str(self.knn_k), "knn_temperature": f"{self.knn_temperature:g}"})


def fill(text: str, values: dict[str, str]) -> str:
    """Replace each ``{name}`` of ``values`` in ``text``; any other brace (a formula's ``mean_{i<j}``) stays."""
    for name, value in values.items():
        text = text.replace("{" + name + "}", value)
    return text


def callback_args(config: dict[str, Any] | None, name: str) -> dict[str, Any] | None:
    """The ``init_args`` of the callback class ``name`` in a saved config (``{}`` when it has none), or None when
    the config lists no such callback (``RunSpec.callback``)."""
    return RunSpec.from_config(config).callback(name)


def read_options(config: dict[str, Any] | None, problems: list[str]) -> RunOptions:
    """The run's ``RunOptions`` from its config; a value the callback would have refused (a
    hand-edited config) is a problem of the run, and the default stands in for it."""
    defaults = RunOptions()
    spec = RunSpec.from_config(config)
    embedding = spec.callback("EmbeddingMetrics") or {}
    knn = spec.callback("KNNMonitor") or {}
    wanted = (
        ("top_k", embedding, "EmbeddingMetrics", "top_k", _positive_int),
        ("knn_k", knn, "KNNMonitor", "k", _positive_int),
        ("knn_temperature", knn, "KNNMonitor", "temperature", _positive_number),
    )
    values: dict[str, Any] = {}
    for option, args, owner, key, valid in wanted:
        value = args.get(key)
        if value is None:
            continue
        if valid(value):
            values[option] = value
        else:
            default = getattr(defaults, option)
            problems.append(f"config: {owner} {key}={value!r} is not valid (the callback would refuse it); read as {default}")
    return RunOptions(**values)


def _positive_int(value: Any) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool) and value >= 1


def _positive_number(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool) and 0 < value < math.inf


@dataclass(frozen=True)
class Column:
    """One column of the table.

    ``key`` names the column's values (``Row.values``) and, filled, its CSV fields
    (``<key>_mean``, …). ``tag`` is read from the run's events (``source="run"``) or from its
    ``linear/`` events (``source="linear"``); the value shown is ``scale ×`` the final value
    (see ``final_value``), with ``digits`` decimals. ``key``, ``header``, ``tag`` and ``meaning``
    may hold the placeholders of ``RunOptions.fill``.
    """

    key: str
    header: str
    tag: str
    meaning: str
    source: str = "run"
    scale: float = 1.0
    digits: int = 3
    per_step: bool = False
    when_logged: bool = False

    def tag_of(self, run: Any) -> str:
        """The tag this column reads in ``run`` (a report's run: anything with ``options``, a ``RunOptions``):
        ``tag`` with the run's own options filled in."""
        return run.options.fill(self.tag)

    @property
    def per_epoch_metric(self) -> bool:
        """A per-epoch value of the training run: drawn as a curve over epochs."""
        return self.source == "run" and not self.per_step


# The columns that are not registered metrics: the linear probe, the kNN monitor, the loss's diagnostic.
OWN_COLUMNS = (
    Column(
        "linear_top1",
        "linear top-1 (%)",
        "linear/top1",
        "linear-probe top-1 accuracy on the test split, %",
        source="linear",
        scale=100.0,
        digits=2,
    ),
    Column(
        "knn_acc",
        "kNN (%)",
        "metrics/knn_acc",
        "weighted kNN accuracy (k={knn_k}, σ={knn_temperature}) against the train split, %",
        scale=100.0,
        digits=2,
    ),
    Column(
        "effective_negatives",
        "eff. negatives",
        "loss/effective_negatives",
        "exp(entropy of the relative penalties r_i), mean over the final epoch's steps",
        digits=1,
        per_step=True,
    ),
)


def _group_columns(source: str, prefix: str, key: str, header: str, what: str) -> tuple[Column, ...]:
    """One ``when_logged`` column per long-tail group (``ssl_app.metrics.long_tail``), in % of 2 decimals."""
    sizes = {"many": "> 100", "medium": "20–100", "few": "< 20"}  # the thresholds' defaults
    return tuple(
        Column(
            f"{key}_{group}",
            f"{header} {group} (%)",
            f"{prefix}{group}",
            f"{what}, mean per-class accuracy of the {group}-shot classes ({size} training images by default), %",
            source=source,
            scale=100.0,
            digits=2,
            when_logged=True,
        )
        for group, size in sizes.items()
    )


#: The many/medium/few-shot accuracies, after every other column, each shown when some run logged it.
LONG_TAIL_COLUMNS = (
    *_group_columns("run", "metrics/knn_", "knn", "kNN", "weighted kNN vote of the KNNMonitor.tail_k nearest train rows"),
    *_group_columns("linear", "linear/", "linear", "linear", "linear-probe top-1 on the test split"),
    *_group_columns("run", "lt/", "lt", "classifier", "the method's own classifier (LongTailAccuracy) on the evaluation split"),
)


# Table 1's columns, in its order, by key (a registered field's key is its tag template).
TABLE_ORDER = (
    "linear_top1",
    "knn_acc",
    "uniformity",
    "tolerance",
    "alignment",
    "pos_sim",
    "top{k}_neg_sim",
    "effective_negatives",
)


# Short headers of registered fields (by tag template); any other field's header is its tag with spaces.
HEADERS = {"pos_sim": "pos. sim.", "top{k}_neg_sim": "top-{k} neg. sim."}


def registry_columns() -> list[Column]:
    """One column per field of the metric registry, in registration order."""
    columns = []
    for metric, field_name in registered_fields():
        tag = metric.tags[field_name]
        header = HEADERS.get(tag, tag.replace("_", " "))
        columns.append(Column(tag, header, f"metrics/{tag}", metric.formula(field_name)))
    return columns


def table_columns() -> list[Column]:
    """Every column of the table, in the order of the module docstring (read from the registry
    now, so a metric registered at any time is a column)."""
    own = {column.key: column for column in (*OWN_COLUMNS, *LONG_TAIL_COLUMNS)}
    registered = registry_columns()
    for column in registered:
        if column.key in own:
            raise ConfigError(
                f"the registered metric tag {column.key!r} is also the key of the report's own column "
                f"{own[column.key].header!r}; register it under another tag"
            )
    by_key = own | {column.key: column for column in registered}
    first = [by_key[key] for key in TABLE_ORDER if key in by_key]
    return first + [column for column in registered if column.key not in TABLE_ORDER] + list(LONG_TAIL_COLUMNS)
