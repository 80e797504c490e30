"""Every way a command ends: the line it says, its exit status, the record's status, the resume hint.

``python -m ssl_app fit|validate|test`` (and a probe) ends in one of these ways (:func:`command_ending`):

    done                         status 0
    a rejected input             ``error: <option>: <reason>``, status 2 (nothing was written)
    a file that cannot be written ``error: cannot write <file>: <reason>``, status 1
    a non-finite loss            ``error: …`` and where the last good state is, with the command that resumes it, status 1
    another rank failed          ``error: another process of this run failed …``, status 1
    a data worker that died      ``error: a data worker (pid p) was killed by SIGKILL: <likely cause>; <what to change>;
                                 <where the state is saved>``, status 1
    a stop signal                ``Interrupted by SIGTERM at epoch e, step s: saved <ckpt>`` and ``Resume with: …``,
                                 status 128 + the signal (SIGINT 130, SIGUSR1 138, SIGUSR2 140, SIGTERM 143)
    anything else                a bug: its traceback (after the resume hint, when a checkpoint was saved)

The reasons are read from the exception's causes (``ssl_app.errors.causes``, the one walk over them).
``export``, ``embed``, the sweep and the report end through :func:`say_error` / :func:`fail`: one
``error:`` line, status 2 for bad input (``ConfigError``), 1 for a file that cannot be written.
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, Optional, TextIO

from ssl_app.errors import ConfigError, NonFiniteError, OutputError, causes, find_cause
from ssl_app.signals import handling
from ssl_app.workers import WorkerDeath, worker_death

if TYPE_CHECKING:  # Lightning and torch are imported where a run's ending is read: the sweep's own errors need neither
    from ssl_app.checkpointing import InterruptCheckpoint
    from ssl_app.runs.recorder import RunRecorder

#: Exit status of a rejected input and of a command that could not finish (a file, a divergence, a peer).
BAD_INPUT, FAILURE = 2, 1


def signal_status(signum: int) -> int:
    """The exit status of a command stopped by signal ``signum``: 128 + its number, as a shell reports it."""
    return 128 + int(signum)


def say_error(error: BaseException | str, command: str = "", err: Optional[TextIO] = None) -> int:
    """Print ``error: [command: ]message`` (one line) and return its exit status: 1 for a file that cannot
    be written (``OutputError``), 2 for anything else a user gave (``ConfigError``, a plain message)."""
    prefix = f"{command}: " if command else ""
    print(f"error: {prefix}{error}", file=sys.stderr if err is None else err)
    return FAILURE if isinstance(error, OutputError) else BAD_INPUT


def fail(message: str) -> NoReturn:
    """A rejected input of a command of its own (the sweep's options): one ``error:`` line, exit status 2."""
    raise SystemExit(say_error(message))


@dataclass(frozen=True)
class Ending:
    """How a command ended: the line(s) it says and its exit status (``None``: a bug, whose traceback
    follows the line). ``every_rank``: every DDP process says it, not only rank 0."""

    message: str
    status: Optional[int]
    every_rank: bool = False


def command_ending(
    error: BaseException, argv: list[str], interrupt: InterruptCheckpoint, recorder: RunRecorder
) -> Optional[Ending]:
    """What ``python -m ssl_app`` says and exits with after ``error``; None: let it propagate unchanged
    (a parser's own exit, or a bug with nothing saved to point at)."""
    from lightning.pytorch.utilities.exceptions import SIGTERMException

    if isinstance(error, StartInterrupted):
        return Ending(f"Interrupted by {signal.Signals(error.signum).name} before the first step; nothing to save",
                      signal_status(error.signum))  # fmt: skip
    if isinstance(error, SIGTERMException):
        if interrupt.signal_number is None:
            return None
        name = signal.Signals(interrupt.signal_number).name
        if interrupt.saved_path is None:
            return Ending(f"Interrupted by {name} before the first step; nothing to save", signal_status(interrupt.signal_number))
        return Ending(
            f"Interrupted by {name} at epoch {interrupt.epoch}, step {interrupt.step}: saved {interrupt.saved_path}\n"
            f"Resume with: {resume_hint(argv, interrupt.saved_path)}",
            signal_status(interrupt.signal_number),
        )
    if isinstance(error, SystemExit):
        if isinstance(error.__context__, KeyboardInterrupt):  # Lightning's own Ctrl-C path (exit 1)
            return Ending("Interrupted by SIGINT; nothing to save", signal_status(signal.SIGINT))
        return None
    if not isinstance(error, Exception):
        return None
    nonfinite = find_cause(error, NonFiniteError)
    if nonfinite is not None:
        return Ending(f"error: {nonfinite}\n{last_good_state(argv, interrupt, recorder)}", FAILURE)
    saved = (
        f"\nThe state of step {interrupt.step} is saved in {interrupt.saved_path}; resume with: "
        f"{resume_hint(argv, interrupt.saved_path)}"
        if interrupt.saved_path is not None
        else ""
    )
    death = worker_death(error)
    if death is not None:
        return Ending(f"error: {dead_worker(death, recorder.config)}; {state_saved(argv, interrupt, recorder)}", FAILURE,
                      every_rank=True)  # fmt: skip
    reason = unwritable(error)
    if reason is not None:
        return Ending(f"error: {reason}{saved}", FAILURE, every_rank=True)
    reason = bad_input(error)
    if reason is not None:
        return Ending(f"error: {reason}{saved}", BAD_INPUT, every_rank=True)
    if peer_failed(error):
        return Ending("error: another process of this run failed (its error is above), so this one stopped too", FAILURE,
                      every_rank=True)  # fmt: skip
    return Ending(saved.strip(), None) if saved else None


#: Packages whose constructors validate their options: a ValueError/TypeError raised from one of
#: them while the config is instantiated is a bad input, reported like a ConfigError.
APP_PACKAGES = ("ssl_app", "callbacks", "datamodules")
_ROOT = Path(__file__).resolve().parents[2]


def record_ending(error: BaseException, trainer: Any, interrupt: Optional[InterruptCheckpoint]) -> tuple[str, str]:
    """The record's status and exit reason for a run that ended with ``error``."""
    from lightning.pytorch.utilities.exceptions import SIGTERMException

    from ssl_app.runs.record import DIVERGED, FAILED, INTERRUPTED

    nonfinite = find_cause(error, NonFiniteError)
    if nonfinite is not None:
        return DIVERGED, str(nonfinite).split("\n")[0]
    if isinstance(error, StartInterrupted):
        return INTERRUPTED, f"{signal.Signals(error.signum).name} before the first step"
    if isinstance(error, (SIGTERMException, KeyboardInterrupt)) or (
        isinstance(error, SystemExit) and isinstance(error.__context__, KeyboardInterrupt)
    ):
        number = interrupt.signal_number if interrupt is not None and interrupt.signal_number else signal.SIGINT
        where = f"{signal.Signals(number).name} at epoch {trainer.current_epoch}, step {trainer.global_step}"
        saved = interrupt.saved_path if interrupt is not None else None
        return INTERRUPTED, where + (f"; saved {saved}" if saved else "; nothing saved")
    if peer_failed(error):
        return FAILED, "another process of this run failed"
    death = worker_death(error)
    if death is not None:
        return FAILED, dead_worker(death, recorder_config(trainer))
    lines = [line for line in str(error).splitlines() if line.strip()]
    return FAILED, f"{type(error).__name__}: {lines[0] if lines else ''}".strip()


class StartInterrupted(BaseException):
    """A stop signal before training started (before ``InterruptCheckpoint`` takes the signals over)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


@contextmanager
def signals_before_training(recorder: RunRecorder) -> Iterator[None]:
    """Until training starts, the stop signals (``ssl_app.signals.STOP_SIGNALS``: SIGINT, SIGTERM, SIGUSR1,
    SIGUSR2) raise :class:`StartInterrupted`, so a start interrupted
    while it sets up still removes the folder it created and says one line; the previous handlers
    come back afterwards. From the first training step on, ``InterruptCheckpoint`` handles them (Lightning
    calls earlier SIGTERM handlers too, so this one stands down once ``recorder`` saw training start)."""
    owner = os.getpid()

    def as_if_unhandled(signum: int) -> None:
        if signum == signal.SIGINT:
            raise KeyboardInterrupt
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)

    def handler(signum: int, frame: Any) -> None:
        if os.getpid() != owner:  # a forked DataLoader worker inherited this handler: behave as without it
            as_if_unhandled(signum)
        elif not recorder.training_started:
            raise StartInterrupted(signum)
        elif not recorder.in_training:  # after training: the default behaviour again
            as_if_unhandled(signum)
        # during training Lightning calls InterruptCheckpoint's handler first, which stops the run cleanly

    with handling(handler):
        yield


def dead_worker(death: WorkerDeath, config: dict[str, Any]) -> str:
    """What happened to a data worker, its likely cause and what to change (the run's data options)."""
    workers, batch = data_option(config, "num_workers"), data_option(config, "batch_size")
    if death.signum == signal.SIGBUS:
        change = f"give the job more shared memory, or lower {workers}"
    elif death.for_memory:
        change = f"lower {workers} or {batch}, or give the job more memory"
    else:
        change = f"{workers.split(' ')[0]}=0 reads the data in the main process, where the error is shown"
    return f"a data worker (pid {death.pids}) {death.fate}, {death.cause}: {change}"


def data_option(config: dict[str, Any], name: str) -> str:
    """``data.init_args.<name> (now <value>)``: the run's own key for a data option (a linear probe's data
    nests its encoder's), with its value when the config has one."""
    from ssl_app.runs.spec import RunSpec

    key, value = RunSpec.from_config(config).data_option_key(name)
    return key if value is None else f"{key} (now {value})"


def state_saved(argv: list[str], interrupt: InterruptCheckpoint, recorder: RunRecorder) -> str:
    """Where the state of a failed run is: this step's checkpoint, else the newest ``last.ckpt`` of its run."""
    if interrupt.saved_path is not None:
        hint = resume_hint(argv, interrupt.saved_path)
        return f"the state of step {interrupt.step} is saved in {interrupt.saved_path} (resume with: {hint})"
    if recorder.folder is None:  # another rank than the one that writes the run folder
        return "this step's state was not saved; --ckpt_path last resumes the run's last checkpoint, if it has one"
    previous = _previous_last_checkpoint(recorder.folder)
    if previous is not None:
        hint = resume_hint(argv, str(previous))
        return f"this step's state was not saved; the last checkpoint is {previous} (resume with: {hint})"
    return "no state of this run was saved"


def recorder_config(trainer: Any) -> dict[str, Any]:
    """The run's config, as the trainer's RunRecorder keeps it ({} without one)."""
    from ssl_app.runs.recorder import RunRecorder

    found = [callback for callback in getattr(trainer, "callbacks", []) if isinstance(callback, RunRecorder)]
    return found[0].config if found else {}


def last_good_state(argv: list[str], interrupt: InterruptCheckpoint, recorder: RunRecorder) -> str:
    """The line after a divergence: where the last good state is and the command that resumes it with
    a lower learning rate (a resume takes this command's learning rate: ``ConfigWinsOnResume``)."""
    from ssl_app.runs.spec import LR_KEY

    lower = _lower_lr(recorder.config)
    replace = [f"--{LR_KEY}={lower:g}"] if lower else []
    advice = (
        " (a tenth of the learning rate that diverged; lower it further if it diverges again)"
        if lower
        else " (with a lower learning rate, or --health.on_nonfinite=skip)"
    )
    if interrupt.saved_path is not None:
        path = interrupt.saved_path
        return f"The last good state is in {path}; resume with: {resume_hint(argv, path, replace)}{advice}"
    previous = _previous_last_checkpoint(recorder.folder)
    reason = f"{interrupt.unsaved_reason}; " if interrupt.unsaved_reason else "no checkpoint was written for this step; "
    reason = reason[0].upper() + reason[1:]
    if previous is not None:
        return f"{reason}the last good state is {previous}; resume with: {resume_hint(argv, str(previous), replace)}{advice}"
    return f"{reason}no earlier checkpoint exists: start again{advice}"


def _lower_lr(config: dict[str, Any]) -> float | None:
    """A tenth of the run's learning rate (``RunSpec.lr``), when the config has one."""
    from ssl_app.runs.spec import RunSpec

    lr = RunSpec.from_config(config).lr
    return lr / 10 if lr is not None and lr > 0 else None


def _previous_last_checkpoint(folder: Path | None) -> Path | None:
    if folder is None:
        return None
    from ssl_app.checkpointing import LAST_CHECKPOINT

    found = [path for path in (folder / "checkpoints").glob("*.ckpt") if LAST_CHECKPOINT.fullmatch(path.name)]
    return max(found, key=lambda path: path.stat().st_mtime, default=None)


def unwritable(error: BaseException) -> str | None:
    """``cannot write <file>: <reason>`` when ``error`` comes from a full disk or an unwritable folder."""
    from ssl_app.checkpointing import output_error

    found = find_cause(error, OutputError)
    if found is not None:
        return str(found)
    reason = output_error(error)
    if reason is None:
        return None
    named = next((cause for cause in causes(error) if isinstance(cause, OSError) and cause.filename), None)
    return f"cannot write {named.filename}: {reason}" if named is not None else f"cannot write the run's files: {reason}"


def report(message: str, every_rank: bool = False) -> None:
    from lightning.fabric.utilities.rank_zero import rank_zero_only

    rank = rank_zero_only.rank
    if rank == 0:
        print(message, file=sys.stderr)
    elif every_rank:
        print(f"(rank {rank}) {message}", file=sys.stderr)


_PEER_GONE = ("Connection closed by peer", "Connection reset by peer", "remote worker crashing")


def peer_failed(error: BaseException) -> bool:
    """A collective failed because another rank exited (gloo/NCCL report a closed connection)."""
    from torch.distributed import DistNetworkError

    def gone(cause: BaseException) -> bool:
        return isinstance(cause, RuntimeError) and any(text in str(cause) for text in _PEER_GONE)

    return any(isinstance(cause, DistNetworkError) or gone(cause) for cause in causes(error))


def bad_input(error: BaseException) -> str | None:
    """The one-line message if ``error`` is a rejected input, else None (a bug: keep the traceback).

    Rejected inputs: a ConfigError anywhere in the chain; a ValueError or TypeError raised
    inside a constructor of this application's packages (callback and datamodule options
    validated with plain ValueErrors); Lightning's MisconfigurationException (trainer options).
    """
    from lightning.fabric.utilities.exceptions import MisconfigurationException

    config_error = find_cause(error, ConfigError)
    if config_error is not None:
        return _without_worker_traceback(str(config_error))
    for cause in causes(error):
        if isinstance(cause, MisconfigurationException):
            return f"trainer: {cause}"
        owner = _app_constructor(cause) if isinstance(cause, (ValueError, TypeError)) else None
        if owner is not None:
            message = str(cause)
            return message if message.startswith(owner) else f"{owner}: {message}"
    return None


def _without_worker_traceback(message: str) -> str:
    """A DataLoader worker's error re-raised in the main process carries the worker's traceback:
    keep its last line, the original message."""
    if "Original Traceback" not in message:
        return message
    last = [line for line in message.splitlines() if line.strip()][-1]
    return re.sub(r"^[\w.]+(Error|Exception): ", "", last)


def _app_constructor(error: BaseException) -> str | None:
    """The class whose ``__init__`` (in this application's packages) ``error`` passed through, else None."""
    tb = error.__traceback__
    while tb is not None:
        code = tb.tb_frame.f_code
        try:
            relative = Path(code.co_filename).resolve().relative_to(_ROOT)
        except ValueError:
            relative = None
        constructor = code.co_name == "__init__" and relative is not None and relative.parts[:2] != ("ssl_app", "cli")
        if constructor and relative.parts[0] in APP_PACKAGES:
            owner = tb.tb_frame.f_locals.get("self")
            return type(owner).__name__ if owner is not None else relative.stem
        tb = tb.tb_next
    return None


def resume_hint(argv: list[str], checkpoint: str, replace: list[str] | None = None) -> str:
    """The command line that resumes from ``checkpoint``: ``argv`` with ``--ckpt_path`` replaced, and
    each ``--option=value`` of ``replace`` instead of that option's earlier values."""
    dropped = {"--ckpt_path", *(option.split("=", 1)[0] for option in replace or [])}
    kept: list[str] = []
    skip = False
    for arg in argv:
        if skip:
            skip = False
            continue
        if arg in dropped:
            skip = True
            continue
        if arg.split("=", 1)[0] in dropped:
            continue
        kept.append(arg)
    return shlex.join([Path(sys.executable).name, "-m", "ssl_app", *kept, *(replace or []), f"--ckpt_path={checkpoint}"])
