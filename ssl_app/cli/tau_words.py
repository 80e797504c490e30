"""A loss's τ option given a value that is no τ, in one line said before torch is imported (``ssl_app.cli.early_values``)
and by the parser (``ssl_app.cli.parsing``), in the sweep's words (``ssl_app.temperature.labels.not_a_tau``).

    model.init_args.loss.init_args.temperature: 'abc' is not a τ; give a number, cosine:LOW-HIGH[...], ..., or a
    TemperaturePolicy class path (python -m ssl_app list temperatures)

The forms are held here as text because the policies' module imports torch; tests hold ``TAU_FORMS`` equal to
``accepted_forms()``. Imports nothing heavy.
"""

from __future__ import annotations

import difflib
from typing import Any, Optional

#: ``ssl_app.temperature.labels.accepted_forms()`` (tests/ssl_app/cli/test_early_values.py holds them equal).
TAU_FORMS = (
    "a number, cosine:LOW-HIGH[:T=PERIOD][:unit=epoch|step], linear:START-END:L=LENGTH[:unit=epoch|step], "
    "learnable:INIT[:min=MIN][:max=MAX], adaptive:BASE[:alpha=ALPHA][:a0=A0]"
)
CLASS_FORM = "or a TemperaturePolicy class path (python -m ssl_app list temperatures)"
TAU_MODULE = "ssl_app.temperature"


def is_tau_option(option: str) -> bool:
    """Whether ``option`` (no ``--``, ``init_args`` written or not) is a loss's temperature."""
    return option.replace(".init_args.", ".").endswith("loss.temperature")


def kinds() -> list[str]:
    """The presets' kinds (``cosine``, ``linear``, ...), read from ``TAU_FORMS``."""
    return [form.partition(":")[0] for form in TAU_FORMS.split(", ")[1:]]


def not_a_tau_line(option: str, text: str) -> str:
    """``option: 'text' is not a τ[ (did you mean kind:…?)]; give <forms>, or a class path`` (the sweep's words,
    ``ssl_app.temperature.labels.not_a_tau``, with the class path ``fit`` also takes)."""
    text = text.strip()
    kind, colon, rest = text.partition(":")
    close = difflib.get_close_matches(kind, kinds(), n=1) if kind and colon else []
    hint = f" (did you mean {close[0]}:{rest}?)" if close else ""
    return f"{option}: {text!r} is not a τ{hint}; give {TAU_FORMS}, {CLASS_FORM}"


def tau_problem(option: str, value: Any) -> Optional[str]:
    """The line for ``value`` of a τ ``option`` when it is surely no τ: text that is no number, no preset of a known
    kind (those are read, and checked, by ``ssl_app.cli.tau_presets``), no class path (``a.B``, checked by
    ``ssl_app.cli.early.check_class_paths``) and no policy's short class name; else None."""
    if not isinstance(value, str):
        return None
    text = value.strip()
    try:
        float(text)
        return None
    except ValueError:
        pass
    if text.startswith("{"):
        return None  # a mapping as JSON: the parser's business
    kind, colon, _ = text.partition(":")
    if colon:
        return None if kind.lower() in kinds() else not_a_tau_line(option, text)
    if "." in text:
        return None
    from ssl_app.cli.source_classes import public_classes

    classes = public_classes(TAU_MODULE)
    if classes is None or classes.get(text) == "class":
        return None
    return not_a_tau_line(option, text)
