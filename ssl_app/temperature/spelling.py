"""How a τ policy is spelled: one canonical label per policy, which parses back (``read(spell(p)) == p``).

The label is what a user types in a sweep's grid (``--grid tau=cosine:0.1-1:T=200``) and what the report,
the run folders and the HParams panel show: the policy's kind, its leading numbers joined by ``-``, then
``KEY=VALUE`` for each option that differs from the policy's default (an option the form marks
``required`` is always shown)::

    0.5                          Constant(0.5): a plain number
    cosine:0.1-1                 Cosine(low=0.1, high=1), the default period (400 epochs)
    cosine:0.1-1:T=200:unit=step Cosine(low=0.1, high=1, period=200, unit="step")
    linear:0.1-0.5:L=100         Linear(start=0.1, end=0.5, length=100)
    learnable:0.07:max=0.5       Learnable(init=0.07, max=0.5)
    adaptive:0.1:alpha=0.9       Adaptive(base=0.1, alpha=0.9)

Numbers are written in their shortest exact form (``repr``: ``0.1``, ``1``, ``1e-05``), so a label is
exact. A policy declares its form (:class:`LabelForm`, ``TemperaturePolicy.label_form``); one without a
form is spelled ``Name(key=value, ...)`` with every option, which :func:`read` also takes. Reading is
lenient where typing is (``cosine:0.1-1.0:T=400`` is ``cosine:0.1-1``); spelling is canonical.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Optional

#: The units a schedule counts in (``unit=epoch|step``).
UNITS = ("epoch", "step")
_NUMBER = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?"


@dataclass(frozen=True)
class LabelForm:
    """How one policy class is spelled: ``kind`` (``cosine``; ``""``: a bare number, the Constant), its
    ``positional`` init args (written first, joined by ``-``), its ``options`` (the key as written → the
    init arg) and which of them are ``required`` (always written)."""

    kind: str
    positional: tuple[str, ...]
    options: Mapping[str, str] = field(default_factory=dict)
    required: tuple[str, ...] = ()

    def form(self) -> str:
        """The form for a message: ``cosine:LOW-HIGH[:T=PERIOD][:unit=epoch|step]``."""
        head = "-".join(name.upper() for name in self.positional)
        given = "".join(f":{key}={self.options[key].upper()}" for key in self.required)
        optional = "".join(
            f"[:{key}={'epoch|step' if key == 'unit' else arg.upper()}]"
            for key, arg in self.options.items()
            if key not in self.required
        )
        return f"{self.kind}:{head}{given}{optional}" if self.kind else head


def exact(value: float) -> str:
    """``value`` in its shortest exact form: ``0.1``, ``1`` (not ``1.0``), ``1e-05``."""
    text = repr(float(value))
    return text[:-2] if text.endswith(".0") else text


def shown(value: Any, number: Callable[[float], str] = exact) -> str:
    """An option's value as a label writes it: a number by ``number``, anything else as text."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return number(value)
    return str(value)


def spell(
    form: LabelForm,
    values: Mapping[str, Any],
    defaults: Mapping[str, Any],
    keep: tuple[str, ...] = (),
    number: Callable[[float], str] = exact,
) -> str:
    """The label of the options ``values`` (init arg → value) in ``form``: an option is written when it
    differs from ``defaults``, is ``required``, or its key is in ``keep`` (the sweep's folder names keep
    what a grid value spelled out); ``number`` writes the numbers (default: :func:`exact`)."""
    head = "-".join(shown(values[name], number) for name in form.positional)
    parts = [f"{form.kind}:{head}" if form.kind else head]
    for key, arg in form.options.items():
        if arg not in values:
            continue
        if key in form.required or key in keep or arg not in defaults or values[arg] != defaults[arg]:
            parts.append(f"{key}={shown(values[arg], number)}")
    return ":".join(parts)


def spell_generic(name: str, values: Mapping[str, Any]) -> str:
    """``Name(key=value, ...)``: a policy without a form, with every option."""
    return f"{name}({','.join(f'{key}={shown(value)}' for key, value in values.items())})"


def read(text: str, forms: Mapping[str, LabelForm]) -> Optional[tuple[str, dict[str, Any], tuple[str, ...]]]:
    """``(class name, init args as written, option keys written)`` of a label, or None when ``text`` follows
    no form of ``forms`` (class name → form; a form whose ``kind`` is ``""`` takes a bare number)."""
    text = text.strip()
    number = finite(text)
    if number is not None:
        bare = next((name for name, form in forms.items() if not form.kind), None)
        return None if bare is None else (bare, {forms[bare].positional[0]: number}, ())
    generic = re.fullmatch(r"([A-Za-z_]\w*)\((.*)\)", text)
    if generic is not None:
        return _read_generic(generic.group(1), generic.group(2))
    kind, _, rest = text.partition(":")
    name = next((name for name, form in forms.items() if form.kind and form.kind == kind), None)
    if name is None or not rest:
        return None
    form = forms[name]
    head, *extras = rest.split(":")
    match = re.fullmatch("-".join(f"({_NUMBER})" for _ in form.positional), head)
    if match is None:
        return None
    values: dict[str, Any] = {}
    for arg, written in zip(form.positional, match.groups()):
        values[arg] = finite(written)
        if values[arg] is None:
            return None
    keys = []
    for extra in extras:
        key, sep, written = extra.partition("=")
        arg = form.options.get(key)
        if not sep or arg is None or arg in values:
            return None
        if arg == "unit":
            if written not in UNITS:
                return None
            values[arg] = written
        else:
            values[arg] = finite(written)
            if values[arg] is None:
                return None
        keys.append(key)
    if any(form.options[key] not in values for key in form.required):
        return None
    return name, values, tuple(keys)


def why_not(text: str, forms: Mapping[str, LabelForm]) -> str:
    """What keeps ``text`` from following its form, for a label :func:`read` refused: the part that is missing
    (``linear:1-0.1`` lacks ``L=LENGTH``), not a number, or not an option of its kind; "" when ``text`` names no
    kind of ``forms`` (a number of a kind without a bare form included)."""
    kind, _, rest = text.strip().partition(":")
    form = next((form for form in forms.values() if form.kind and form.kind == kind), None)
    if form is None:
        return ""
    head, *extras = rest.split(":")
    names = [name.upper() for name in form.positional]
    if not head:
        return f"{'-'.join(names)} is missing"
    for count in range(len(form.positional), 0, -1):
        if re.fullmatch("-".join(f"({_NUMBER})" for _ in range(count)), head):
            if count < len(form.positional):
                return f"{'-'.join(names[count:])} is missing after {head}"
            break
    else:
        return f"{head!r} is not {'-'.join(names)} (numbers)"
    given: list[str] = []
    for extra in extras:
        key, sep, written = extra.partition("=")
        if key not in form.options:
            known = ", ".join(form.options) or "none"
            return f"{kind} takes no option {key!r} (its options: {known})"
        if key in given:
            return f"{key}= is given twice"
        if not sep or not written:
            return f"{key}= has no value ({key}={_placeholder(form, key)})"
        if form.options[key] == "unit" and written not in UNITS:
            return f"unit={written}: unit is {' or '.join(UNITS)}"
        if form.options[key] != "unit" and finite(written) is None:
            return f"{key}={written}: not a finite number"
        given.append(key)
    missing = [f"{key}={_placeholder(form, key)}" for key in form.required if key not in given]
    return f"{', '.join(missing)} is missing" if missing else ""


def _placeholder(form: LabelForm, key: str) -> str:
    return "epoch|step" if form.options[key] == "unit" else form.options[key].upper()


def _read_generic(name: str, inside: str) -> Optional[tuple[str, dict[str, Any], tuple[str, ...]]]:
    values: dict[str, Any] = {}
    for part in filter(None, (p.strip() for p in inside.split(","))):
        key, sep, written = part.partition("=")
        if not sep or not key.strip().isidentifier():
            return None
        number = finite(written.strip())
        values[key.strip()] = number if number is not None else written.strip()
    return name, values, tuple(values)


def finite(text: str) -> Optional[float]:
    """``text`` as a finite float, or None."""
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None
