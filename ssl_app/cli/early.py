"""What ``python -m ssl_app`` says and checks before Lightning is imported (``ssl_app.cli.entry``): the commands
and the top-level help, every ``--config`` file a YAML mapping of options, every class path on the command line
a class (``--model.init_args.loss=ssl_app.losses.InfoNCe``: read from source, ``ssl_app.cli.source_classes``,
else the module it names is imported to tell, as jsonargparse would; "did you mean" from the option's registry,
``ssl_app.cli.suggest``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

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
    (``--model``, ``--data``, a loss, a τ policy, ``--trainer.logger``, ``--trainer.callbacks+``; any
    ``*.class_path``), and for a class's name alone no class of the option's type has (``ssl_app.cli.short_names``).
    Config files are checked by the parser.
    Told from source where it can be (``ssl_app.cli.source_classes``), else by importing the module, as the parser
    does (and the registries, for "did you mean")."""
    from ssl_app.cli import source_classes
    from ssl_app.cli.short_names import SHORT_NAME_OPTIONS, class_path_packages, short_name_problem

    packages: Optional[list[str]] = None
    for option, value in given_options(argv):
        key = option.removesuffix(".class_path").rstrip("+")
        by_name = key.lstrip("-") in SHORT_NAME_OPTIONS
        if by_name and Path(value).exists():
            continue  # a config file of the option's class
        if by_name and "." not in value:
            if packages is None:
                from ssl_app.cli.given_config import given_tree

                packages = class_path_packages(given_tree(argv))
            found = short_name_problem(key, value, packages)
            if isinstance(found, str):
                raise ConfigError(f"{key.lstrip('-')}: {found}")
            continue
        if not (option.endswith(".class_path") or by_name or (key in REGISTRY_OF_OPTION and key != "--model.init_args.backbone")):
            continue
        problem = source_classes.class_path_problem(value)
        if problem is source_classes.UNSETTLED:  # the module it names is imported to tell, as jsonargparse would
            problem = class_path_problem(value)
        if problem is None:
            continue
        hint = source_classes.class_suggestion(key, value)
        if hint is source_classes.UNSETTLED:
            hint = class_suggestion(key, value)
        raise ConfigError(f"{key.lstrip('-')}: {problem}{hint}")  # the parser names the option, not its class_path


def given_options(argv: list[str]) -> list[tuple[str, str]]:
    """``(--option, value)`` of each ``--option=value`` and ``--option value`` of ``argv``."""
    from ssl_app.cli.given_config import options_and_values

    return [(option, value) for option, value in options_and_values(argv) if option.startswith("--") and value is not None]


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


#: The core and added groups of every Trainer command's parser (``lightning.pytorch.cli``, ``ssl_app.cli.app``): the
#: class a group configures (None: the one its config names, ``subclass_mode``), or None for a plain option.
#: The tests hold this equal to the parser's own top-level options.
GROUPS: dict[str, Optional[str]] = {
    "trainer": "lightning.pytorch.trainer.trainer.Trainer",
    "checkpoint": "lightning.pytorch.callbacks.model_checkpoint.ModelCheckpoint",
    "health": "ssl_app.health.NumericalHealth",
}
SUBCLASS_GROUPS = ("model", "data")
PLAIN_OPTIONS = ("config", "print_config", "seed_everything", "resume_anyway", "attach_to_run")
#: The arguments of ``Trainer.<command>`` LightningCLI leaves out (it passes the model and data itself).
SKIPPED_METHOD_ARGUMENTS = {"model", "train_dataloaders", "val_dataloaders", "dataloaders", "datamodule"}


def top_level_options(command: str) -> Optional[list[str]]:
    """The top-level options of ``command``'s parser, or None when ``Trainer.<command>``'s source cannot be read."""
    from ssl_app.cli.source_signatures import method_parameters

    method = method_parameters(GROUPS["trainer"], command)
    if method is None:
        return None
    own = [name for name in method if name not in SKIPPED_METHOD_ARGUMENTS]
    return [*PLAIN_OPTIONS, *GROUPS, *SUBCLASS_GROUPS, *own]


def check_option_names(command: str, argv: list[str], cwd: Optional[Path] = None) -> None:
    """Raise a ``ConfigError`` for an option ``command`` does not take, said as its parser would say it with "did
    you mean" (``ssl_app.cli.parsing``), read from source (``ssl_app.cli.source_signatures``) and the configs
    (``ssl_app.cli.given_config``) instead of importing Lightning. An option whose class cannot be settled that way
    is left to the parser."""
    from ssl_app.cli.given_config import given_tree, options_and_values
    from ssl_app.cli.suggest import did_you_mean

    top = top_level_options(command)
    if top is None:
        return
    tree = given_tree(argv, cwd)
    for option, value in options_and_values(argv):
        if option in ("-c", "--help") or not option.startswith("--"):
            continue
        parts = option[2:].rstrip("+").split(".")
        shown = option if value is None else f"{option}={value}" if f"{option}={value}" in argv else f"{option} {value}"
        if parts[0] not in top:
            known = [f"--{name}" for name in top]
            raise ConfigError(f"unrecognized arguments: {shown}{did_you_mean(option.split('=')[0], known)}")
        if len(parts) == 1 or parts[-1] == "help":
            continue
        group = parts[0]
        if group in GROUPS:
            _check_plain_group(group, GROUPS[group], parts[1:], tree.get(group), shown)
        elif group in SUBCLASS_GROUPS:
            _check_class_node(group, tree.get(group), parts[1:])


def _check_plain_group(group: str, class_path: Optional[str], rest: list[str], subtree: Any, shown: str) -> None:
    """``--trainer.max_epochs``: a group of a class's options (no ``init_args``), refused as an unrecognised argument."""
    from ssl_app.cli.source_signatures import init_parameters
    from ssl_app.cli.suggest import did_you_mean

    options = init_parameters(class_path) if class_path else None
    if options is None:
        return
    if rest[0] not in options:
        known = [f"--{group}.{name}" for name in options]
        raise ConfigError(f"unrecognized arguments: {shown}{did_you_mean(f'--{group}.{rest[0]}', known)}")
    child = subtree.get(rest[0]) if isinstance(subtree, dict) else None
    if len(rest) > 1:
        _check_class_node(f"{group}.{rest[0]}", child, rest[1:])


def _check_class_node(key: str, subtree: Any, rest: list[str]) -> None:
    """``--model.init_args.loss.init_args.temperature``: each option after a class (``init_args.`` optional) must be
    one that class takes, down to where the configs no longer name a class."""
    from ssl_app.cli.source_signatures import init_parameters
    from ssl_app.cli.suggest import did_you_mean

    class_path = subtree.get("class_path") if isinstance(subtree, dict) else None
    if not isinstance(class_path, str) or not rest or rest[0] == "class_path":
        return
    if rest[0] == "init_args":
        rest = rest[1:]
        if not rest:
            return
    options = init_parameters(class_path)
    if options is None:
        return
    name = rest[0]
    if name not in options:
        known = [f"{key}.init_args.{option}" for option in options]
        raise ConfigError(
            f"{key}: Option '{name}' is not accepted by {class_path}{did_you_mean(f'{key}.init_args.{name}', known)}"
        )
    init_args = subtree.get("init_args")
    if len(rest) > 1:
        _check_class_node(f"{key}.init_args.{name}", init_args.get(name) if isinstance(init_args, dict) else None, rest[1:])
