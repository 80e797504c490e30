"""τ written as the sweep writes it, in ``fit``'s options and config files: one spelling everywhere.

    python -m ssl_app fit --config configs/quickstart.yaml --model.init_args.loss.init_args.temperature=cosine:0.1-1:T=3

A loss's ``temperature`` given as a policy's label (``ssl_app.temperature.spelling``: ``cosine:LOW-HIGH[:T=..]``,
``linear:START-END:L=..``, ``learnable:INIT``, ``adaptive:BASE``) becomes the policy's class-path config
(``{"class_path": "ssl_app.temperature.Cosine", "init_args": {...}}``) before LightningCLI reads it, by the
sweep's own expansion (``ssl_app.sweep.tau_axis.tau_value``), so a grid value, a folder name, the report's
label and ``fit``'s option are one spelling. A number, a class path or a config mapping passes as written;
a value that starts with a policy's kind but is not one of its forms is one ``error:`` line naming the option.
"""

from __future__ import annotations

import json
from typing import Any

from ssl_app.sweep.tau_axis import is_tau_key, tau_value
from ssl_app.temperature.labels import TEMPERATURES


def _kinds() -> set[str]:
    """The label kinds of the registered policies (``cosine``, ``linear``, ...; the Constant has none)."""
    forms = (entry.target.label_form for entry in TEMPERATURES.values())
    return {form.kind for form in forms if form is not None and form.kind}


def is_preset(value: Any) -> bool:
    """Whether ``value`` is written as a policy's label (its kind, then ``:``), right or wrong."""
    return isinstance(value, str) and value.strip().partition(":")[0].lower() in _kinds() and ":" in value


def _expanded(option: str, value: str) -> str:
    return tau_value(value, option).value


def expand_in_argv(argv: list[str]) -> list[str]:
    """``argv`` with each τ preset given to a loss's ``temperature`` (``--KEY=VALUE`` or ``--KEY VALUE``)
    as its class-path config (JSON); a bad preset raises ``ConfigError`` naming the option."""
    out: list[str] = []
    index = 0
    while index < len(argv):
        arg = argv[index]
        key, equals, value = arg[2:].partition("=") if arg.startswith("--") else ("", "", "")
        if key and is_tau_key(key):
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
            init_args["temperature"] = json.loads(_expanded("a config's loss temperature", init_args["temperature"]))
            changed = True
        for value in config.values():
            changed |= expand_in_config(value)
    elif isinstance(config, list):
        for value in config:
            changed |= expand_in_config(value)
    return changed
