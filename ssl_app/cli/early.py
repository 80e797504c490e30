"""What ``python -m ssl_app`` says and checks before Lightning is imported (``ssl_app.cli.entry``): the commands
and the top-level help, every ``--config`` file a YAML mapping of options, every class path on the command line
a class (``--model.init_args.loss=ssl_app.losses.InfoNCe``: the module it names is imported to tell, as
jsonargparse would; "did you mean" from the option's registry, ``ssl_app.cli.suggest``)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import yaml

from ssl_app.cli.suggest import REGISTRY_OF_OPTION, class_path_problem, class_suggestion
from ssl_app.errors import ConfigError

PROG = "python -m ssl_app"
#: LightningCLI's subcommands (``predict`` is not offered: ``embed`` writes features).
TRAINER_COMMANDS = {
    "fit": "train a method (or a linear probe) from a config; --ckpt_path last resumes",
    "validate": "one evaluation epoch over the validation set of a checkpoint (filed with its run)",
    "test": "one evaluation epoch over the test set of a checkpoint (filed with its run)",
}
#: Subcommands ``main`` runs itself, not through LightningCLI: name → module with ``main(args) -> status``.
OWN_SUBCOMMANDS = {"list": "ssl_app.cli.listing", "export": "ssl_app.cli.export", "embed": "ssl_app.cli.embed"}
OWN_HELP = {
    "list": "print what can be chosen (losses, temperatures, methods, metrics, datamodules, backbones), one line each",
    "export": "write the trained backbone of a checkpoint (--ckpt CKPT --out encoder.pt)",
    "embed": "write the features of a data set (--ckpt CKPT [--data PATH] --out features.npz)",
}
LIST_HELP = (
    f"Also: {PROG} list [losses|temperatures|methods|metrics|datamodules|backbones] prints what can be chosen, one line "
    f"each, with the option that selects it; {PROG} export --ckpt CKPT --out encoder.pt writes the trained backbone; "
    f"{PROG} embed --ckpt CKPT [--data PATH] --out features.npz writes features of a data set."
)


def top_help() -> str:
    """The commands, one line each: what ``python -m ssl_app --help`` prints (a command's options: ``fit --help``)."""
    width = max(map(len, [*TRAINER_COMMANDS, *OWN_SUBCOMMANDS]))
    lines = [
        f"usage: {PROG} [-c CONFIG] {{{','.join(TRAINER_COMMANDS)}}} ...",
        f"       {PROG} {{{','.join(OWN_SUBCOMMANDS)}}} ...",
        "",
        "Contrastive self-supervised learning with Lightning: train, evaluate, list, export, embed.",
        "",
        "commands (add --help after one for its options):",
        *(f"  {name:<{width}}  {text}" for name, text in {**TRAINER_COMMANDS, **OWN_HELP}.items()),
        "",
        "options:",
        "  -h, --help            Show this help message and exit.",
        "  -c CONFIG, --config CONFIG",
        "                        A configuration file in yaml or json format.",
        "",
        LIST_HELP,
    ]
    return "\n".join(lines)


def check_class_paths(argv: list[str]) -> None:
    """Raise a ``ConfigError`` for a class path given on the command line that names no class, with the closest
    registered ones: ``--model.init_args.loss=ssl_app.losses.InfoNCe`` or ``--model.init_args.loss.class_path=...``
    (``--model``, ``--data``, a loss, a τ policy; any ``*.class_path``). Config files are checked by the parser."""
    for option, value in given_options(argv):
        key = option.removesuffix(".class_path")
        if not (option.endswith(".class_path") or (key in REGISTRY_OF_OPTION and key != "--model.init_args.backbone")):
            continue
        problem = class_path_problem(value)
        if problem is not None:
            raise ConfigError(f"{option.lstrip('-')}: {problem}{class_suggestion(key, value)}")


def given_options(argv: list[str]) -> list[tuple[str, str]]:
    """``(--option, value)`` of each ``--option=value`` and ``--option value`` of ``argv``."""
    found = []
    for i, arg in enumerate(argv):
        if not arg.startswith("--"):
            continue
        option, sep, value = arg.partition("=")
        if sep:
            found.append((option, value))
        elif i + 1 < len(argv) and not argv[i + 1].startswith("-"):
            found.append((option, argv[i + 1]))
    return found


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
