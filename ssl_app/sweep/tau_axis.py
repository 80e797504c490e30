"""τ as a grid axis of the sweep: short presets for the temperature policies of ``ssl_app.temperature``.

    python -m ssl_app.sweep --config configs/quickstart.yaml \\
        --grid tau=0.1,0.5,cosine:0.1-1.0,cosine:0.1-1.0:T=200,linear:0.1-0.5:L=100,learnable:0.07,adaptive:0.1

``tau`` is short for the loss's ``model.init_args.loss.init_args.temperature`` (``ssl_app.runs.spec.TAU_KEY``; the
full key takes the same values). A value is a number (a constant τ, passed on as written, as before) or a policy's
label (``ssl_app.temperature.spelling``, the one spelling the report and the panel show), expanded into the
policy's class-path config (``{"class_path": "ssl_app.temperature.Cosine", "init_args": {...}}``) with the
options it wrote:

    cosine:LOW-HIGH[:T=PERIOD][:unit=epoch|step]     Cosine(low, high, period, unit)
    linear:START-END:L=LENGTH[:unit=epoch|step]      Linear(start, end, length, unit)
    learnable:INIT[:min=MIN][:max=MAX]               Learnable(init, min, max)
    adaptive:BASE[:alpha=ALPHA][:a0=A0]              Adaptive(base, alpha, a0)

An option left out is the policy's default (Cosine's period included). Each value names its run folder:
the preset with its numbers in their shortest form and ``:`` as ``_`` (``cosine:0.1-1.0:T=200`` →
``tau=cosine_0.1-1_T=200``), so two different policies never share a folder, and a value that
would name one twice is refused. Whether the numbers make a valid policy (``low <= high``, τ > 0) is the
policy's own check: each preset's policy is built once while the grid is expanded, so a bad one is one
``error:`` line before anything is written or run.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from ssl_app.cli.tau_presets import is_temperature_option
from ssl_app.errors import ConfigError
from ssl_app.runs.spec import TAU_KEY
from ssl_app.temperature.labels import POLICY_MODULE, PolicySpec, not_a_tau
from ssl_app.temperature.spelling import spell

#: The short name of ``TAU_KEY`` on the command line (``--grid tau=...``).
TAU_ALIAS = "tau"


@dataclass(frozen=True)
class TauValue:
    """One value of a τ axis: ``text`` as written, ``value`` what the fit gets (the number, or the policy's
    class-path config as JSON), ``name`` its part of the run folder's name (before ``point_name``'s cleaning)."""

    text: str
    value: str
    name: str


def is_tau_key(key: str) -> bool:
    """Whether a grid key sets a loss's temperature (so its values may be presets)."""
    return key == TAU_ALIAS or is_temperature_option(key)


def short(x: float) -> str:
    """A number in its shortest form for a folder name: 1.0 → ``1``, 0.1 → ``0.1``, 1e-4 → ``0.0001``."""
    return f"{x:.15g}"


def tau_value(text: str, option: str = "--grid tau") -> TauValue:
    """``text`` (a number or a policy's label, ``ssl_app.temperature.spelling``) as a τ axis value; a
    ``ConfigError`` naming ``option``, the value and the accepted forms when it is neither."""
    text = text.strip()
    found = PolicySpec.read(text)
    cls = None if found is None else found[0].policy_class
    if cls is None or cls.label_form is None:
        raise not_a_tau(text, option)
    spec, written = found
    given = {key: value for key, value in spec.values.items() if key in cls.label_form.positional} | {
        cls.label_form.options[key]: spec.values[cls.label_form.options[key]] for key in written
    }
    try:
        cls(**given)  # the policy's own checks (low <= high, τ > 0) refuse the value here, before any run starts
    except ConfigError as error:
        raise ConfigError(f"{option}: {text!r}: {error}") from None
    if spec.constant is not None:
        return TauValue(text, text, text)  # a number passes as written, as before policies
    # The folder keeps what the value spelled out (a default written out stays in the name, as it always did).
    name = spell(cls.label_form, given, {}, number=short)
    config = {"class_path": f"{POLICY_MODULE}.{spec.name}", "init_args": given}
    return TauValue(text, json.dumps(config), name)


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
