"""The parser of ``python -m ssl_app``'s Trainer commands: its errors are one line, with "did you mean" for a
misspelled option or class (``ssl_app.cli.suggest``); configs an earlier version wrote are read upgraded."""

from __future__ import annotations

import re
import sys
from typing import Any, NoReturn

import yaml
from lightning.pytorch.cli import LightningArgumentParser

from ssl_app.cli.parser_errors import condense_parser_error
from ssl_app.cli.short_names import short_name_problem
from ssl_app.cli.suggest import class_path_problem, class_suggestion, did_you_mean, parameters_of
from ssl_app.cli.tau_presets import expand_in_config
from ssl_app.cli.tau_words import is_tau_option, tau_problem


class OneLineParser(LightningArgumentParser):
    """A parser whose errors are one line, not the 80-line usage and nested report that precede it.

    It takes no abbreviations (``--trainer.max_epoch`` is not ``max_epochs``): the subcommands' parsers
    and the parsers jsonargparse makes for a class's options (``--model.init_args.*``) are of this class too.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def _load_config_parser_mode(self, content: str, *args: Any, **kwargs: Any) -> Any:
        """A config file, with what an earlier version wrote upgraded first (``upgrade_config``)."""
        return super()._load_config_parser_mode(upgrade_config(content), *args, **kwargs)

    def error(self, message: str, ex: Exception | None = None) -> NoReturn:
        if not self.exit_on_error:
            super().error(message, ex)
        prog = self.prog.replace(" [options]", "")
        sys.stderr.write(f"error: {with_suggestion(condense_parser_error(message), self)}\n(options: {prog} --help)\n")
        sys.exit(2)

    def option_names(self) -> list[str]:
        """Every ``--option`` this parser and its subcommands' parsers take."""
        names = [name for name in self._option_string_actions if name.startswith("--")]
        for action in self._actions:
            for parser in (getattr(action, "_name_parser_map", None) or {}).values():
                if isinstance(parser, OneLineParser):
                    names += parser.option_names()
        return names


#: How Python says a module lacks a name (jsonargparse passes it on for a class path's missing class).
NO_ATTRIBUTE = r"module '([\w.]+)' has no attribute '(\w+)'"


def with_suggestion(line: str, parser: OneLineParser) -> str:
    """A condensed parser error with "did you mean …" (``ssl_app.cli.suggest``): for an unrecognised
    ``--option``, the parser's closest options; for an option a class does not take, the class's closest
    init options; for a class path that names no class, why (no such module, or no such class in it, in place
    of jsonargparse's "Expected a path") and the closest registered classes; for a class's name alone that no class
    of the option's type has, the closest of those (``ssl_app.cli.short_names``)."""
    unknown = re.fullmatch(r"unrecognized arguments: (.*)", line)
    if unknown:
        hints = [did_you_mean(arg.split("=", 1)[0], parser.option_names()) for arg in unknown.group(1).split()]
        hints = [hint for hint in hints if hint]
        return line + (hints[0] if len(hints) == 1 else "".join(hints))
    option = re.fullmatch(r"(?:(\S+): )?Option '(\w+)' is not accepted by ([\w.]+)", line)
    if option:
        key, name, class_path = option.groups()
        prefix = f"{key}.init_args." if key else ""
        return line + did_you_mean(prefix + name, [prefix + known for known in parameters_of(class_path)])
    tau = re.fullmatch(r"(\S+): Expected a path but (\S+) either not accessible or invalid", line)
    if tau and is_tau_option(tau.group(1)):
        found = tau_problem(tau.group(1), tau.group(2))
        if found is not None:
            return found
    bare = re.fullmatch(
        r"(\S+): Expected (?:a path but (\w+) either not accessible or invalid|a dot import path string: (\w+))", line
    )
    if bare:  # a class's name alone (``--trainer.logger=TensorBoardLoger``, ``….class_path=``): no such class
        found = short_name_problem(bare.group(1), bare.group(2) or bare.group(3))
        if isinstance(found, str):
            return f"{bare.group(1)}: {found}"
    path = re.fullmatch(r"(\S+): (?:Expected a path but (\S+) either not accessible or invalid|" + NO_ATTRIBUTE + ")", line)
    if path:
        key = path.group(1)
        value = path.group(2) or f"{path.group(3)}.{path.group(4)}"
        problem = class_path_problem(value)
        if problem is not None:
            return f"{key}: {problem}{class_suggestion(key, value)}"
    return line


def upgrade_config(content: str) -> str:
    """A config's text with the options an earlier version wrote in their current form: ``EmbeddingMetrics``'
    ``collapse_*`` options (every run folder's ``config.yaml`` before issue 39 has them) as its ``collapse`` object
    (``callbacks.collapse.upgrade_legacy_options``), and a loss's τ written as a preset (``cosine:0.1-1``) as its
    policy's class-path config (``ssl_app.cli.tau_presets``). Anything else, or text that is not a YAML mapping,
    as it was."""
    if "collapse_" not in content and "temperature" not in content:
        return content
    from callbacks.collapse import upgrade_legacy_options

    try:
        config = yaml.safe_load(content)
    except yaml.YAMLError:
        return content
    presets = expand_in_config(config)
    callbacks = ((config or {}).get("trainer") or {}).get("callbacks") if isinstance(config, dict) else None
    listed = [callbacks] if isinstance(callbacks, dict) else callbacks if isinstance(callbacks, list) else []
    changed = False
    for callback in listed:
        init_args = callback.get("init_args") if isinstance(callback, dict) else None
        if str(callback.get("class_path", "")).endswith("EmbeddingMetrics") and isinstance(init_args, dict):
            changed |= upgrade_legacy_options(init_args)
    return yaml.safe_dump(config, sort_keys=False) if changed or presets else content
