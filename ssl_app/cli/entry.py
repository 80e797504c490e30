"""``python -m ssl_app``'s first step: what it can answer before Lightning is imported.

Importing Lightning takes seconds (6 on a quiet 2-core machine, most of it torchmetrics, torchvision and scipy,
which Lightning imports in turn; benchmarks/README.md, "Errors and --help before the imports"), so ``main``
answers first what needs none of it: ``list``, ``export`` and ``embed`` (their own modules, which import what
they use; the options of the last two are parsed first by ``ssl_app.cli.tool_options``), the top-level ``--help``,
a missing or misspelled command, and the inputs ``ssl_app.cli.early`` checks
(a ``--config`` file that is not a YAML mapping, a class path on the command line that names no class, an option
no parser would take: its names are read from the classes' source, ``ssl_app.cli.source_signatures``), and a
``--help`` printed before for the same command line, configs and sources (``ssl_app.cli.help_cache``).
Everything else goes to LightningCLI (``ssl_app.cli.app``), whose parser errors say "did you mean" too
(``ssl_app.cli.parsing``).
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, NoReturn, Optional

from ssl_app.cli.early import (
    OWN_SUBCOMMANDS,
    PROG,
    TRAINER_COMMANDS,
    check_class_paths,
    check_config_files,
    check_option_names,
    top_help,
)
from ssl_app.cli.early_values import check_values
from ssl_app.cli.suggest import did_you_mean
from ssl_app.errors import ConfigError


def main(args: Optional[list[str]] = None) -> Any:
    """Run ``python -m ssl_app`` with ``args`` (default: ``sys.argv[1:]``) and return the LightningCLI of a
    Trainer command; the other commands, ``--help`` and the inputs refused here exit (status 0 or 2)."""
    argv = list(sys.argv[1:] if args is None else args)
    if argv[:1] and argv[0] in OWN_SUBCOMMANDS:  # not a Trainer subcommand: no Trainer, no run folder
        from ssl_app.cli.tool_options import early_answer  # (export, embed: their parsers; a few ms, not for --help)

        answered = early_answer(argv[0], argv[1:])  # export/embed: --help and bad options before torch
        if answered is not None:
            sys.exit(answered)
        with starting():
            command_module = importlib.import_module(OWN_SUBCOMMANDS[argv[0]])
        sys.exit(command_module.main(argv[1:]))
    if argv[:1] in (["-h"], ["--help"]):
        print(top_help())
        sys.exit(0)
    command = argv[0] if argv and not argv[0].startswith("-") else None  # else a top-level option first: LightningCLI's
    if not argv or (command is not None and command not in TRAINER_COMMANDS):
        known = [*TRAINER_COMMANDS, *OWN_SUBCOMMANDS]
        given = f"invalid choice: {command!r}{did_you_mean(command, known)}" if command else "no command given"
        refuse(f"{given}; choose from {', '.join(known)}", PROG)
    from ssl_app.cli import help_cache  # (hashing the sources: not for the top-level --help)

    wants, fresh = help_cache.wants_help(argv), help_cache.fresh_process()
    if wants and help_cache.serve(PROG, argv):  # the same help printed before, for the same sources and configs
        sys.exit(0)
    if command is not None:
        try:
            check_config_files(argv)
        except ConfigError as error:
            refuse(str(error))
        try:
            with starting():  # it imports the modules the class paths name
                check_class_paths(argv)
                check_option_names(command, argv)
                check_values(argv)  # a value its type refuses (ssl_app.cli.early_values), before torch too
        except ConfigError as error:
            refuse(str(error), f"{PROG} {command}")
    with starting():
        from ssl_app.cli.app import main as run_trainer_command

    if wants:  # LightningCLI prints the help and exits 0: kept for the next one (ssl_app.cli.help_cache)
        with help_cache.keeping_help(PROG, argv, fresh):
            return run_trainer_command(argv)
    return run_trainer_command(argv)


@contextmanager
def starting() -> Iterator[None]:
    """Ctrl-C while the block imports (seconds: torch, Lightning), before the commands handle signals: one
    line and status 130, as ``ssl_app.__main__`` says it for its own imports, not a traceback through them."""
    try:
        yield
    except KeyboardInterrupt:
        sys.stderr.write("Interrupted by SIGINT while starting; nothing written\n")
        sys.exit(130)


def refuse(message: str, prog: Optional[str] = None) -> NoReturn:
    """One ``error:`` line, exit status 2; with ``prog``, where its options are listed (as the parser says its errors)."""
    sys.stderr.write(f"error: {message}\n" + (f"(options: {prog} --help)\n" if prog else ""))
    sys.exit(2)
