"""τ as a grid axis of the sweep: short presets for the temperature policies of ``ssl_app.temperature``.

    python -m ssl_app.sweep --config configs/quickstart.yaml \\
        --grid tau=0.1,0.5,cosine:0.1-1.0,cosine:0.1-1.0:T=200,linear:0.1-0.5:L=100,learnable:0.07,adaptive:0.1

``tau`` is short for the loss's ``model.init_args.loss.init_args.temperature`` (the full key takes the same
values). A value is a number (a constant τ, passed on as written, as before) or a preset, expanded into the
policy's class-path config (``{"class_path": "ssl_app.temperature.Cosine", "init_args": {...}}``):

    cosine:LOW-HIGH[:T=PERIOD][:unit=epoch|step]     Cosine(low, high, period, unit)
    linear:START-END:L=LENGTH[:unit=epoch|step]      Linear(start, end, length, unit)
    learnable:INIT[:min=MIN][:max=MAX]               Learnable(init, min, max)
    adaptive:BASE[:alpha=ALPHA][:a0=A0]              Adaptive(base, alpha, a0)

An option left out is the policy's default (Cosine's period included). Each value names its run folder:
the preset with its numbers in their shortest form and ``:`` as ``_`` (``cosine:0.1-1.0:T=200`` →
``temperature=cosine_0.1-1_T=200``), so two different policies never share a folder, and a value that
would name one twice is refused. Whether the numbers make a valid policy (``low <= high``, τ > 0) is the
policy's own check: each preset's policy is built once while the grid is expanded, so a bad one is one
``error:`` line before anything is written or run.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass

from ssl_app.errors import ConfigError
from ssl_app.temperature.labels import POLICY_MODULE

#: The loss option a τ axis sets, and its short name on the command line (``--grid tau=...``).
TAU_KEY = "model.init_args.loss.init_args.temperature"
TAU_ALIAS = "tau"
UNITS = ("epoch", "step")


@dataclass(frozen=True)
class Preset:
    """A policy's preset: its class, the init args its range or value gives (in order), and its ``KEY=VALUE``
    options (the key as written → the init arg); ``required``: options that must be given."""

    class_name: str
    positional: tuple[str, ...]
    options: dict[str, str]
    required: tuple[str, ...] = ()

    def form(self, kind: str) -> str:
        head = "-".join(name.upper() for name in self.positional)
        given = "".join(f":{key}={self.options[key].upper()}" for key in self.required)
        optional = "".join(
            f"[:{key}={'epoch|step' if key == 'unit' else arg.upper()}]"
            for key, arg in self.options.items()
            if key not in self.required
        )
        return f"{kind}:{head}{given}{optional}"


PRESETS = {
    "cosine": Preset("Cosine", ("low", "high"), {"T": "period", "unit": "unit"}),
    "linear": Preset("Linear", ("start", "end"), {"L": "length", "unit": "unit"}, required=("L",)),
    "learnable": Preset("Learnable", ("init",), {"min": "min", "max": "max"}),
    "adaptive": Preset("Adaptive", ("base",), {"alpha": "alpha", "a0": "a0"}),
}
CONSTANT = Preset("Constant", ("value",), {})  # a plain number's policy (no preset of its own)
_NUMBER = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?"


@dataclass(frozen=True)
class TauValue:
    """One value of a τ axis: ``text`` as written, ``value`` what the fit gets (the number, or the policy's
    class-path config as JSON), ``name`` its part of the run folder's name (before ``point_name``'s cleaning)."""

    text: str
    value: str
    name: str


def accepted_forms() -> str:
    return "a number, " + ", ".join(preset.form(kind) for kind, preset in PRESETS.items())


def is_tau_key(key: str) -> bool:
    """Whether a grid key sets a loss's temperature (so its values may be presets)."""
    return key in (TAU_KEY, TAU_ALIAS) or key.endswith(".loss.init_args.temperature")


def short(x: float) -> str:
    """A number in its shortest exact form: 1.0 → ``1``, 0.1 → ``0.1``, 1e-4 → ``0.0001``."""
    return f"{x:.15g}"


def tau_value(text: str, option: str = "--grid tau") -> TauValue:
    """``text`` (a number or a preset) as a τ axis value; a ``ConfigError`` naming ``option``, the value and
    the accepted forms when it is neither."""
    text = text.strip()
    number = _finite(text)
    if number is not None:
        _check(CONSTANT, {"value": number}, text, option)  # τ <= 0: refused here, as a preset's numbers are
        return TauValue(text, text, text)
    kind, _, rest = text.partition(":")
    preset = PRESETS.get(kind)
    init_args = _parse(preset, rest) if preset is not None and rest else None
    if init_args is None:
        raise ConfigError(f"{option}: {text!r} is not a τ; give {accepted_forms()}")
    _check(preset, init_args, text, option)
    positional = "-".join(short(init_args[name]) for name in preset.positional)
    options = [f"{key}={_shown(init_args[arg])}" for key, arg in preset.options.items() if arg in init_args]
    name = ":".join([f"{kind}:{positional}", *options])
    config = {"class_path": f"{POLICY_MODULE}.{preset.class_name}", "init_args": init_args}
    return TauValue(text, json.dumps(config), name)


def _check(preset: Preset, init_args: dict, text: str, option: str) -> None:
    """Build the policy once (this package's own class, from plain numbers) so that its own checks (``low <= high``,
    τ > 0, ``min < max``) refuse the value here, before any run starts: ``--print_config`` builds no class."""
    import ssl_app.temperature as policies

    try:
        getattr(policies, preset.class_name)(**init_args)
    except ConfigError as error:
        raise ConfigError(f"{option}: {text!r}: {error}") from None


def _parse(preset: Preset, rest: str) -> dict | None:
    """The init args of ``rest`` (``0.1-1.0:T=200``), or None when it does not follow the preset's form."""
    head, *extras = rest.split(":")
    pattern = "-".join(f"({_NUMBER})" for _ in preset.positional)
    match = re.fullmatch(pattern, head)
    if match is None:
        return None
    init_args: dict = {}
    for name, number in zip(preset.positional, match.groups()):
        init_args[name] = _finite(number)
        if init_args[name] is None:
            return None
    for extra in extras:
        key, sep, value = extra.partition("=")
        arg = preset.options.get(key)
        if not sep or arg is None or arg in init_args:
            return None
        if arg == "unit":
            if value not in UNITS:
                return None
            init_args[arg] = value
        else:
            init_args[arg] = _finite(value)
            if init_args[arg] is None:
                return None
    if any(preset.options[key] not in init_args for key in preset.required):
        return None
    return init_args


def _finite(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def _shown(value: float | str) -> str:
    return value if isinstance(value, str) else short(value)


def expand_axis(key: str, values: list[str]) -> tuple[str, list[TauValue]]:
    """A grid axis ``key=values`` with τ presets expanded: the full key (``tau`` → ``TAU_KEY``) and one
    ``TauValue`` per value. Other keys' values pass as they are. A bad preset, or two values naming one
    folder, is a ``ConfigError``."""
    if not is_tau_key(key):
        return key, [TauValue(v, v, v) for v in values]
    full = TAU_KEY if key == TAU_ALIAS else key
    expanded = [tau_value(v, f"--grid {key}") for v in values]
    names = [v.name for v in expanded]
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise ConfigError(f"--grid {key}: {', '.join(repeated)} given twice (each value is one run folder)")
    return full, expanded
