"""A τ policy as data (:class:`PolicySpec`): read from a saved config or a label, spelled by one label, never built
from a stranger's class path.

The report, the HParams panel, the sweep and a run's spec (``ssl_app.runs.spec``) name a run's τ by its canonical
label (``ssl_app.temperature.spelling``: ``0.5``, ``cosine:0.1-1:T=200``), which parses back:
``PolicySpec.parse(spec.label()) == spec`` for every registered policy. A saved config may come from another
version or another person, so a policy is only ever *described* here: this package's policies (those registered
in ``TEMPERATURES``) get their defaults filled from their constructors' signatures; any other class path is kept
as written and named ``Name(key=value, ...)`` from the config alone, and nothing is imported or built.
"""

from __future__ import annotations

import difflib
import numbers
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Optional

from ssl_app.errors import ConfigError
from ssl_app.temperature.base import TemperaturePolicy
from ssl_app.temperature.registry import TEMPERATURES
from ssl_app.temperature.spelling import LabelForm, read, spell, spell_generic, why_not

#: The package whose policies are named by their class (``ssl_app.temperature.Cosine``).
POLICY_MODULE = "ssl_app.temperature"
#: Cosine's period before labels were canonical (its old label wrote ``:T<period>`` only for another one).
_OLD_DEFAULT_PERIOD = 400.0


@dataclass(frozen=True)
class PolicySpec:
    """A τ policy as data: ``name`` (a registered policy's name, ``Cosine``; else the class path as written) and
    its constructor ``options``, in the constructor's order, defaults filled in for a registered policy."""

    name: str
    options: tuple[tuple[str, Any], ...] = ()

    @property
    def values(self) -> dict[str, Any]:
        return dict(self.options)

    @property
    def policy_class(self) -> Optional[type[TemperaturePolicy]]:
        """The registered class this spec names (None: another class, never imported)."""
        entry = TEMPERATURES.get(self.name)
        return None if entry is None else entry.target

    @property
    def constant(self) -> Optional[float]:
        """τ when it is a constant (a number in the config, or ``Constant``); None for any other policy."""
        value = self.values.get("value")
        return float(value) if self.name == "Constant" and _is_number(value) else None

    def label(self) -> str:
        """The canonical label (``ssl_app.temperature.spelling``)."""
        cls = self.policy_class
        if cls is None or cls.label_form is None:
            return spell_generic(self.name.rsplit(".", 1)[-1], self.values)
        return spell(cls.label_form, self.values, cls.defaults())

    def legacy_label(self) -> str:
        """The label reports printed before labels were canonical (``cosine:0.1-1:T200steps``, ``linear:0.1-0.5``):
        a ``--baseline`` written then still names its row."""
        v, name = self.values, self.name.rsplit(".", 1)[-1]

        def g(key: str) -> str:
            return f"{v[key]:g}" if _is_number(v.get(key)) else str(v.get(key))

        if name == "Constant":
            return g("value")
        if name == "Cosine":
            text = f"cosine:{g('low')}-{g('high')}"
            if v.get("period") != _OLD_DEFAULT_PERIOD or v.get("unit") != "epoch":
                text += f":T{g('period')}" + ("steps" if v.get("unit") == "step" else "")
            return text
        kinds = {
            "Linear": ("linear", "start", "end"),
            "Learnable": ("learnable", "init", None),
            "Adaptive": ("adaptive", "base", None),
        }
        if name in kinds:
            kind, first, second = kinds[name]
            return f"{kind}:{g(first)}" + (f"-{g(second)}" if second else "")
        return f"{name}({', '.join(f'{key}={g(key)}' for key in v)})"

    def config(self) -> Any:
        """What a config's ``temperature`` holds for it: the number of a constant, else ``{class_path, init_args}``."""
        if self.constant is not None:
            return self.constant
        class_path = f"{POLICY_MODULE}.{self.name}" if self.policy_class is not None else self.name
        return {"class_path": class_path, "init_args": self.values}

    def build(self) -> TemperaturePolicy:
        """The policy (a registered one only: a class path read from a file is never imported)."""
        cls = self.policy_class
        if cls is None:
            raise ConfigError(f"temperature: {self.name} is not a registered policy ({', '.join(TEMPERATURES)})")
        return cls(**self.values)

    @classmethod
    def of(cls, policy: TemperaturePolicy) -> PolicySpec:
        """The spec of a live policy."""
        entry = next((entry for entry in TEMPERATURES.values() if entry.target is type(policy)), None)
        name = entry.name if entry is not None else f"{type(policy).__module__}.{type(policy).__qualname__}"
        return cls._filled(name, policy.options())

    @classmethod
    def parse(cls, text: str, option: str = "temperature") -> PolicySpec:
        """The spec a label spells (also the grid's forms, ``cosine:0.1-1.0:T=400``); a ``ConfigError`` naming
        ``option``, the text and the accepted forms when it follows none."""
        found = cls.read(text)
        if found is None:
            raise not_a_tau(text, option)
        return found[0]

    @classmethod
    def read(cls, text: str) -> Optional[tuple[PolicySpec, tuple[str, ...]]]:
        """``(spec, the option keys the text wrote)`` of a label, or None."""
        found = read(text, _forms())
        if found is None:
            return None
        name, values, keys = found
        return cls._filled(name, values), keys

    @classmethod
    def from_config(cls, value: Any) -> Optional[PolicySpec]:
        """The spec of a config's ``temperature``: a number (a constant), ``{class_path, init_args}``, or None
        (no temperature, or a value no policy could be)."""
        if _is_number(value):
            return cls("Constant", (("value", value),))
        class_path = value.get("class_path") if isinstance(value, Mapping) else None
        if not (isinstance(class_path, str) and class_path):
            return None
        class_path = value["class_path"]
        init_args = value.get("init_args")
        init_args = dict(init_args) if isinstance(init_args, Mapping) else {}
        module, _, name = class_path.rpartition(".")
        entry = TEMPERATURES.get(name)
        if entry is not None and class_path in (f"{POLICY_MODULE}.{name}", f"{entry.target.__module__}.{name}"):
            return cls._filled(name, init_args)
        return cls(class_path, tuple(init_args.items()))

    @classmethod
    def _filled(cls, name: str, values: Mapping[str, Any]) -> PolicySpec:
        entry = TEMPERATURES.get(name)
        if entry is None:
            return cls(name, tuple(values.items()))
        defaults = entry.target.defaults(required=True)
        filled = {**defaults, **values}
        return cls(name, tuple((key, filled[key]) for key in [*defaults, *(k for k in values if k not in defaults)]))


def _forms() -> dict[str, LabelForm]:
    """The registered policies' label forms, by class name."""
    return {name: entry.target.label_form for name, entry in TEMPERATURES.items() if entry.target.label_form is not None}


def not_a_tau(text: str, option: str) -> ConfigError:
    """The error for ``text`` given as ``option`` that no policy's form reads: what it lacks and its kind's form
    (``linear:1-0.1``: ``L=LENGTH is missing``), else the forms accepted, with the closest kind."""
    text = text.strip()
    forms = _forms()
    reason = why_not(text, forms)
    kind = text.partition(":")[0]
    form = next((form for form in forms.values() if form.kind and form.kind == kind), None)
    if reason and form is not None:
        return ConfigError(f"{option}: {text!r}: {reason}; the form is {form.form()}")
    kinds = [form.kind for form in forms.values() if form.kind]
    close = difflib.get_close_matches(kind, kinds, n=1) if kind and ":" in text else []
    hint = f" (did you mean {close[0]}:{text.partition(':')[2]}?)" if close else ""
    return ConfigError(f"{option}: {text!r} is not a τ{hint}; give {accepted_forms()}")


def accepted_forms() -> str:
    """The label forms of the registered policies, for messages: ``a number, cosine:LOW-HIGH[:T=PERIOD]...``."""
    forms = [entry.target.label_form for entry in TEMPERATURES.values() if entry.target.label_form is not None]
    return "a number, " + ", ".join(form.form() for form in forms if form.kind)


def policy_label(class_path: str, init_args: dict[str, Any]) -> str:
    """The canonical label of a saved ``{class_path, init_args}`` (a registered policy's; else ``Name(key=value, ...)``)."""
    spec = PolicySpec.from_config({"class_path": class_path, "init_args": init_args})
    return spec.label() if spec is not None else class_path


def _is_number(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)
