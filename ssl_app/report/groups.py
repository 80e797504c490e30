"""Grouping runs into configurations (seeds are the repetitions), naming and ordering them.

- A run with ``sweep.json`` belongs to its sweep point: ``(sweep, point)``.
- A run made by hand belongs to its resolved config with the keys that only say *where* or
  *which repetition* left out (``IGNORED_KEYS``): two runs differing only in seed are one
  configuration.
- A run without a readable config is grouped with the runs of its parent folder.

Each run is read through its spec (``ssl_app.runs.spec.RunSpec``). The label names the loss and its
hyper-parameters (``InfoNCE τ=0.3``, ``HardContrastive τ=0.3 K=4095``, ``Simple``), then anything else that
differs between configurations (``MoCo``, ``batch_size=256``). A τ policy is named by its canonical label
(``InfoNCE τ=cosine:0.1-1:T=200``: ``ssl_app.temperature.spelling``, what a sweep's grid takes), read from the
saved config for this package's policies; any other class path is named from the config, never imported.
The label reports printed before it (``τ=cosine:0.1-1:T200``) is kept as an alias, which ``--baseline`` takes.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

from ssl_app.checks import Finite, is_a
from ssl_app.report.runs import Run
from ssl_app.runs.spec import LOSS_CLASS_KEY, LOSS_OPTIONS, METHOD_KEY, SEED_KEY, SYMBOLS, TAU_KEY, RunSpec

# Loss hyper-parameters shown in every label, with their symbols, in this order: the paper's τ, K, λ,
# and q for HardContrastive's quantile (not α, which names PaCo's alpha).
LOSS_SYMBOLS = SYMBOLS
# Other differing settings join a label in this order of key prefix, at most MAX_EXTRA_PARTS of
# them, and only when short (a differing callbacks list still separates rows, see `_label`).
KEY_PRIORITY = ("model.", "data.", "trainer.")
MAX_EXTRA_PARTS = 3
MAX_VALUE_CHARS = 20
# Row order of Table 1; other losses follow, by name.
PAPER_ORDER = ("InfoNCE", "Simple", "HardContrastive", "HardSimple")


@dataclass
class Configuration:
    """The runs of one configuration (failed and running ones included, see ``usable_runs``)."""

    key: tuple
    settings: dict[str, Any]
    runs: list[Run] = field(default_factory=list)
    label: str = ""
    series: str = ""  # the label without τ: the line this configuration sits on in a τ plot
    spec: RunSpec = field(default_factory=RunSpec)
    aliases: tuple[str, ...] = ()  # other labels that name it (``--baseline``): the one reports printed before

    @property
    def usable_runs(self) -> list[Run]:
        return [run for run in self.runs if run.usable]

    @property
    def loss(self) -> str | None:
        return None if self.spec.loss is None else self.spec.loss.name

    @property
    def method(self) -> str | None:
        return self.spec.method_name

    @property
    def temperature(self) -> float | None:
        """The constant τ (a number, or a ``Constant`` policy's value); None for a schedule or no τ."""
        tau = self.spec.loss.temperature if self.spec.loss is not None else None
        return None if tau is None else tau.constant

    @property
    def temperature_label(self) -> str | None:
        """τ as the label shows it: the policy's canonical label (``0.3``, ``cosine:0.1-1``); None without a τ."""
        tau = self.spec.loss.temperature if self.spec.loss is not None else None
        return None if tau is None else tau.label()

    @property
    def num_negatives(self) -> float | None:
        return _number(None if self.spec.loss is None else self.spec.loss.option("num_negatives"))


def spec_of(run: Run) -> RunSpec:
    """The run's spec: from its config; without one, a sweep run's grid stands in for it."""
    if run.config is not None:
        return RunSpec.from_config(run.config)
    return RunSpec.from_grid(run.sweep.grid) if run.sweep is not None else RunSpec()


def settings_of(run: Run) -> dict[str, Any]:
    """The run's configuration as flat keys, without the keys that never separate configurations (where it
    writes, ``RunSpec.settings``, and the repetition, its seed)."""
    return {key: value for key, value in spec_of(run).settings if key != SEED_KEY}


def group_runs(runs: list[Run]) -> list[Configuration]:
    """Configurations in Table 1's row order, each labelled."""
    groups: dict[tuple, Configuration] = {}
    for run in runs:
        settings = settings_of(run)
        key = _group_key(run, settings)
        if key not in groups:
            groups[key] = Configuration(key=key, settings=settings, spec=spec_of(run))
        group = groups[key]
        if run.usable and not group.usable_runs:
            group.settings, group.spec = settings, spec_of(run)  # prefer the settings of a run that finished
        group.runs.append(run)
    configurations = list(groups.values())
    _label(configurations)
    return sorted(configurations, key=_row_order)


def _group_key(run: Run, settings: dict[str, Any]) -> tuple:
    if run.sweep is not None:
        return ("sweep", run.sweep.sweep, run.sweep.point)
    if run.config is not None:
        return ("config", tuple(sorted((key, _hashable(value)) for key, value in settings.items())))
    return ("folder", run.path.parent.name)


def _label(configurations: list[Configuration]) -> None:
    configured = [c for c in configurations if c.settings]  # runs without a config say nothing
    differing = _differing_keys([c.settings for c in configured])
    methods = {c.method for c in configured}
    for configuration in configurations:
        settings = configuration.settings
        parts: list[tuple[str, str]] = []  # (key, text)
        if len(methods) > 1 and configuration.method:
            parts.append((METHOD_KEY, configuration.method))
        if configuration.loss:
            parts.append((LOSS_CLASS_KEY, configuration.loss))
        loss = configuration.spec.loss
        for name, symbol in LOSS_SYMBOLS.items():
            value = configuration.temperature_label if name == "temperature" else None if loss is None else loss.option(name)
            if value is not None:
                parts.append((LOSS_OPTIONS + name, f"{symbol}={_format(value)}"))
        shown = {LOSS_CLASS_KEY, METHOD_KEY} | {LOSS_OPTIONS + name for name in LOSS_SYMBOLS}
        unshown = [key for key in differing if key not in shown and not key.startswith(TAU_KEY + ".")]  # a policy's own keys
        others = _extra_keys(unshown, configured) if settings else []
        others = [key for key in others if settings.get(key) is not None]  # None: an option of another loss, not this one's
        for key in others[:MAX_EXTRA_PARTS]:
            parts.append((key, f"{_short_name(key, others)}={_format(settings.get(key))}"))
        if len(others) > MAX_EXTRA_PARTS:
            parts.append(("", "…"))
        if not parts:
            parts.append(("", _fallback_name(configuration)))
        configuration.label = " ".join(text for _, text in parts)
        configuration.series = " ".join(text for key, text in parts if key != TAU_KEY) or "runs"
        tau = loss.temperature if loss is not None else None
        if tau is not None and tau.legacy_label() != tau.label():
            old = [(key, f"τ={tau.legacy_label()}" if key == TAU_KEY else text) for key, text in parts]
            configuration.aliases = (" ".join(text for _, text in old),)
    seen: dict[str, int] = {}
    for configuration in configurations:
        seen[configuration.label] = seen.get(configuration.label, 0) + 1
    for configuration in configurations:
        if seen[configuration.label] > 1:  # identical settings, told apart by where they come from
            suffix = f" [{_fallback_name(configuration)}]"
            configuration.label += suffix
            configuration.series += suffix
            configuration.aliases = tuple(alias + suffix for alias in configuration.aliases)


def _extra_keys(keys: list[str], configurations: list[Configuration]) -> list[str]:
    """The differing keys worth a place in a label: short values only, model first, then data,
    then trainer settings."""
    short = [key for key in keys if all(len(_format(c.settings.get(key))) <= MAX_VALUE_CHARS for c in configurations)]

    def priority(key: str) -> int:
        return next((index for index, prefix in enumerate(KEY_PRIORITY) if key.startswith(prefix)), len(KEY_PRIORITY))

    return sorted(short, key=lambda key: (priority(key), key))


def _differing_keys(all_settings: list[dict[str, Any]]) -> list[str]:
    keys = sorted({key for settings in all_settings for key in settings})
    return [key for key in keys if len({_hashable(settings.get(key)) for settings in all_settings}) > 1]


def _row_order(configuration: Configuration) -> tuple:
    loss = configuration.loss or ""
    rank = PAPER_ORDER.index(loss) if loss in PAPER_ORDER else len(PAPER_ORDER)
    temperature = configuration.temperature
    negatives = configuration.num_negatives
    return (
        rank,
        loss,
        configuration.method or "",
        math.inf if temperature is None else temperature,
        math.inf if negatives is None else negatives,
        configuration.label,
    )


def _fallback_name(configuration: Configuration) -> str:
    kind, *rest = configuration.key
    if kind == "sweep":
        return rest[1]
    if kind == "folder":
        return rest[0]
    return configuration.runs[0].name


def _short_name(key: str, keys: list[str]) -> str:
    """The last segment of a dotted key, or the last two when another key ends the same way."""
    last = key.rsplit(".", 1)[-1]
    clashes = [other for other in keys if other.rsplit(".", 1)[-1] == last]
    return last if len(clashes) == 1 else ".".join(key.rsplit(".", 2)[-2:])


def _number(value: Any) -> float | None:
    if not is_a(Finite, value):
        return None
    return float(value)


def _format(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def _hashable(value: Any) -> Any:
    try:
        hash(value)
        return value
    except TypeError:
        return json.dumps(value, sort_keys=True, default=str)
