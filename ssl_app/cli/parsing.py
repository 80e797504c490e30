"""What ``python -m ssl_app`` reads before LightningCLI does: its parser, whose errors are one line,
and a check that every ``--config`` file is a YAML mapping of options (naming the file and the line)."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any, NoReturn, Optional

import yaml
from lightning.pytorch.cli import LightningArgumentParser

from ssl_app.checks import in_words
from ssl_app.cli.tau_presets import expand_in_config
from ssl_app.errors import ConfigError


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
        sys.stderr.write(f"error: {condense_parser_error(message)}\n(options: {prog} --help)\n")
        sys.exit(2)


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


def condense_parser_error(message: str) -> str:
    """jsonargparse's nested report → ``<option>: <innermost reason>`` (one line).

    ``Parser key "model": ... Problem with given class_path 'X': Parser key "loss": ...
    Expected a <class 'float'>. Got value: nan`` becomes
    ``model.init_args.loss.init_args.temperature: Expected a <class 'float'>. Got value: nan``.
    Alternatives that merely say a value is not ``None`` are ignored. A message without that
    structure is returned with its lines joined.
    """
    lines = [line for line in message.splitlines() if line.strip()]
    if not lines or not lines[0].startswith("Parser key"):
        return " ".join(line.strip() for line in lines)
    keys: list[str] = []
    depth_of: list[int] = []
    reason = ""
    class_path = ""
    skipping_indent: int | None = None
    for line in lines:
        indent = len(line) - len(line.lstrip())
        text = line.strip()
        if skipping_indent is not None:
            if indent > skipping_indent:
                continue
            skipping_indent = None
        if text.startswith(("- Expected a <class 'NoneType'>", "Given value")):
            skipping_indent = indent
            continue
        while depth_of and indent <= depth_of[-1]:
            depth_of.pop()
            keys.pop()
        match = re.match(r'(?:- )?Parser key "([^"]+)":', text)
        if match:
            prefix = "init_args." if class_path and keys else ""
            keys.append(prefix + match.group(1))
            depth_of.append(indent)
            class_path = ""
            continue
        match = re.match(r"(?:- )?Problem with given class_path '([^']+)':", text)
        if match:
            class_path = match.group(1)
            continue
        if text.startswith(("Does not validate against", "Subtypes:", "Errors:", "- Problem with")):
            continue
        if not reason:
            reason = text.lstrip("- ")
            if class_path and reason.startswith("Option"):
                reason += f" by {class_path}"
            restricted = re.match(r"Not of type (\w+): (.*) does not conform to restriction", reason)
            if restricted:  # a range of ssl_app.checks, said in words
                reason = in_words(*restricted.groups()) or reason
            break
    option = ".".join(keys)
    if not reason:
        return " ".join(line.strip() for line in lines)
    return f"{option}: {reason}" if option else reason


def check_config_files(argv: list[str]) -> None:
    """Raise a ConfigError naming the ``--config`` file (and the line) that is not a YAML mapping of options.

    jsonargparse says ``Problems parsing config`` or ``Unexpected config`` without the file's name, and
    composed configs include others (their ``config:`` key, relative to the including file's folder).
    """
    given = [argv[i + 1] for i, arg in enumerate(argv[:-1]) if arg in ("--config", "-c")]
    given += [arg.split("=", 1)[1] for arg in argv if arg.startswith("--config=")]
    for name in given:
        _check_config_file(Path(name), None, set())


def _check_config_file(path: Path, included_by: Optional[Path], seen: set[Path]) -> None:
    if not path.is_file() or path.resolve() in seen:
        return  # not a file (jsonargparse reports it), or already read
    seen.add(path.resolve())
    where = f"--config {path}" if included_by is None else f"--config {included_by}: the config it includes, {path},"
    try:
        loaded = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark or error.context_mark
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        raise ConfigError(f"{where} is not valid YAML{at}: {error.problem or error.context}") from None
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as error:
        raise ConfigError(f"{where} cannot be read: {error}") from None
    if loaded is None:
        raise ConfigError(f"{where} is empty; a config is a mapping of options (key: value)")
    if not isinstance(loaded, dict):
        raise ConfigError(f"{where} holds a {type(loaded).__name__}, not a mapping of options (key: value)")
    included = loaded.get("config")
    for name in included if isinstance(included, list) else [included]:
        if isinstance(name, str):
            _check_config_file(path.parent / name, path, seen)
