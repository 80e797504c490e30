"""τ written as the sweep writes it, in ``fit``'s options and config files: one spelling everywhere.

    python -m ssl_app fit --config configs/quickstart.yaml --model.init_args.loss.init_args.temperature=cosine:0.1-1:T=3

A loss's ``temperature`` given as a policy's label (``ssl_app.temperature.spelling``: ``cosine:LOW-HIGH[:T=..]``,
``linear:START-END:L=..``, ``learnable:INIT``, ``adaptive:BASE``) becomes the policy's class-path config
(``{"class_path": "ssl_app.temperature.Cosine", "init_args": {...}}``, every option filled in) before
LightningCLI reads it, read as the sweep reads it (``PolicySpec.parse``) and checked by the policy itself,
so a grid value, a folder name, the report's label and ``fit``'s option are one spelling. A number, a class
path or a config mapping passes as written; a value that starts with a policy's kind but is not one of its
forms is one ``error:`` line naming the option.
"""

from __future__ import annotations

import json
from typing import Any

from ssl_app.errors import ConfigError
from ssl_app.runs.spec import TAU_KEY
from ssl_app.temperature.labels import TEMPERATURES, PolicySpec

#: How the key of any loss's temperature ends (a method's loss: ``TAU_KEY``; a probe's or a nested one).
TEMPERATURE_SUFFIX = ".loss.init_args.temperature"


def is_temperature_option(key: str) -> bool:
    """Whether an option (without ``--``) sets a loss's temperature."""
    return key == TAU_KEY or key.endswith(TEMPERATURE_SUFFIX)


def _kinds() -> set[str]:
    """The label kinds of the registered policies (``cosine``, ``linear``, ...; the Constant has none)."""
    forms = (entry.target.label_form for entry in TEMPERATURES.values())
    return {form.kind for form in forms if form is not None and form.kind}


def is_preset(value: Any) -> bool:
    """Whether ``value`` is written as a policy's label (its kind, then ``:``), right or wrong."""
    return isinstance(value, str) and value.strip().partition(":")[0].lower() in _kinds() and ":" in value


def policy_config(value: str, option: str) -> Any:
    """The class-path config of the policy ``value`` spells; a ``ConfigError`` naming ``option`` and ``value``
    when it spells none (with the accepted forms) or the policy refuses its numbers (with its reason)."""
    spec = PolicySpec.parse(value.strip(), option)
    try:
        spec.build()  # the policy's own checks (low <= high, τ > 0), before any run starts
    except ConfigError as error:
        raise ConfigError(f"{option}: {value!r}: {error}") from None
    return spec.config()


def _expanded(option: str, value: str) -> str:
    return json.dumps(policy_config(value, option))


def expand_in_argv(argv: list[str]) -> list[str]:
    """``argv`` with each τ preset given to a loss's ``temperature`` (``--KEY=VALUE`` or ``--KEY VALUE``)
    as its class-path config (JSON); a bad preset raises ``ConfigError`` naming the option."""
    out: list[str] = []
    index = 0
    while index < len(argv):
        arg = argv[index]
        key, equals, value = arg[2:].partition("=") if arg.startswith("--") else ("", "", "")
        if key and is_temperature_option(key):
            if equals and is_preset(value):
                arg = f"--{key}={_expanded(f'--{key}', value)}"
            elif not equals and index + 1 < len(argv) and is_preset(argv[index + 1]):
                out += [arg, _expanded(arg, argv[index + 1])]
                index += 2
                continue
        out.append(arg)
        index += 1
    return out


def expand_in_config(config: Any) -> bool:
    """Replace, in place, each preset under a ``loss``'s ``init_args.temperature`` anywhere in a config
    mapping (a method's loss, a linear probe's, a nested one) by its class-path config; whether any was."""
    changed = False
    if isinstance(config, dict):
        loss = config.get("loss")
        init_args = loss.get("init_args") if isinstance(loss, dict) else None
        if isinstance(init_args, dict) and is_preset(init_args.get("temperature")):
            init_args["temperature"] = policy_config(init_args["temperature"], "a config's loss temperature")
            changed = True
        for value in config.values():
            changed |= expand_in_config(value)
    elif isinstance(config, list):
        for value in config:
            changed |= expand_in_config(value)
    return changed
