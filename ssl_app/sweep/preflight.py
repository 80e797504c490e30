"""Checks before a sweep starts anything: ``--out`` can be written, and every distinct command parses
(``python -m ssl_app … --print_config``), so a grid key that does not exist or a value of the wrong
type is one ``error:`` line naming the point, and nothing runs."""

from __future__ import annotations

import contextlib
import io
import os
import tempfile
from pathlib import Path

from ssl_app.cli.endings import fail
from ssl_app.runs.spec import ENCODER_CHECKPOINT_KEY
from ssl_app.sweep.stages import PlannedRun


def check_out(out: Path) -> None:
    """``--out`` must be (or be creatable as) a folder this process can write in; nothing is created."""
    existing = out
    while not existing.exists():
        if existing.parent == existing:
            break
        existing = existing.parent
    if not existing.is_dir():
        fail(f"--out {out}: {existing} is a file, not a folder")
    try:
        handle, probe = tempfile.mkstemp(dir=existing, prefix=".ssl_app_sweep_probe_")
        os.close(handle)
        os.remove(probe)
    except OSError as error:
        fail(f"--out {out}: cannot write in {existing} ({error.strerror or error})")


def validate(runs: list[PlannedRun]) -> None:
    """Parse every distinct command with ``--print_config``; the first error ends the sweep."""
    from ssl_app.cli import main  # heavy: imports torch and Lightning

    seen: set[tuple[str, ...]] = set()
    for run in runs:
        for args in (run.fit_args, run.linear_args):
            if args is None:
                continue
            key = tuple(
                a for a in args if not a.startswith(("--seed_everything", "--trainer.logger", f"--{ENCODER_CHECKPOINT_KEY}"))
            )
            if key in seen:
                continue
            seen.add(key)
            errors, printed = io.StringIO(), io.StringIO()
            code = 0
            with contextlib.redirect_stdout(printed), contextlib.redirect_stderr(errors):
                try:
                    main([*args, "--print_config"])
                except SystemExit as exit_:
                    code = exit_.code if isinstance(exit_.code, int) else 1
            if code != 0:
                message = errors.getvalue().strip().splitlines()
                first = next((line for line in message if line.startswith("error:")), message[0] if message else "")
                fail(f"point {run.point}: {first.removeprefix('error: ')}")
            if _fast_dev_run(printed.getvalue()):
                fail(
                    f"point {run.point}: trainer.fast_dev_run: a sweep reads each run's folder and record, which "
                    "fast_dev_run does not write; smoke-test one command first (python -m ssl_app fit ... "
                    "--trainer.fast_dev_run=true), or see the sweep's commands with --dry-run"
                )


def _fast_dev_run(printed_config: str) -> bool:
    """Whether the config ``--print_config`` printed sets ``trainer.fast_dev_run`` (true or a count > 0)."""
    import yaml

    try:
        config = yaml.safe_load(printed_config)
    except yaml.YAMLError:
        return False
    trainer = config.get("trainer") if isinstance(config, dict) else None
    return isinstance(trainer, dict) and bool(trainer.get("fast_dev_run"))
