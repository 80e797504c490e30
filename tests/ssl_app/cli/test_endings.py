"""Every way a command ends (``ssl_app.cli.endings``), classified from the exception alone: no Trainer, no run."""

from __future__ import annotations

import errno
import signal

from lightning.pytorch.utilities.exceptions import SIGTERMException

from ssl_app.checkpointing import InterruptCheckpoint
from ssl_app.cli.endings import BAD_INPUT, FAILURE, StartInterrupted, command_ending, say_error
from ssl_app.errors import ConfigError, NonFiniteError, OutputError, causes
from ssl_app.runs.recorder import RunRecorder

ARGV = ["fit", "--config", "configs/quickstart.yaml"]


def chained(outer: BaseException, inner: BaseException) -> BaseException:
    """``outer`` raised from ``inner``, as jsonargparse and Lightning wrap what a constructor raised."""
    try:
        try:
            raise inner
        except BaseException as error:
            raise outer from error
    except BaseException as error:
        return error


def ending(error: BaseException, saved: str | None = None, signal_number: int | None = None):
    interrupt = InterruptCheckpoint()
    interrupt.saved_path, interrupt.signal_number, interrupt.epoch, interrupt.step = saved, signal_number, 1, 7
    return command_ending(error, ARGV, interrupt, RunRecorder())


def test_each_ending_has_its_line_and_exit_status():
    bad = ending(chained(RuntimeError("while instantiating"), ConfigError("model.init_args.loss: temperature must be > 0")))
    assert (bad.status, bad.message) == (BAD_INPUT, "error: model.init_args.loss: temperature must be > 0")
    full = ending(chained(RuntimeError("save failed"), OSError(errno.ENOSPC, "No space left on device", "runs/x/last.ckpt")))
    assert (full.status, full.message) == (FAILURE, "error: cannot write runs/x/last.ckpt: No space left on device")
    diverged = ending(NonFiniteError("loss is nan at step 7"))
    assert diverged.status == FAILURE and diverged.message.startswith("error: loss is nan at step 7\n")
    assert "no earlier checkpoint exists: start again" in diverged.message
    peer = ending(RuntimeError("[gloo] Connection closed by peer"))
    assert peer.status == FAILURE and peer.every_rank and "another process of this run failed" in peer.message
    assert ending(StartInterrupted(signal.SIGTERM)).status == 143
    stopped = ending(SIGTERMException(), saved="runs/x/checkpoints/last.ckpt", signal_number=signal.SIGTERM)
    assert stopped.status == 143 and "at epoch 1, step 7: saved runs/x/checkpoints/last.ckpt" in stopped.message
    assert stopped.message.splitlines()[1].endswith(
        "fit --config configs/quickstart.yaml --ckpt_path=runs/x/checkpoints/last.ckpt"
    )
    ctrl_c = chained(SystemExit(1), KeyboardInterrupt())
    ctrl_c.__context__ = ctrl_c.__cause__  # Lightning exits while handling the KeyboardInterrupt
    assert ending(ctrl_c).status == 130


def test_a_bug_or_a_parser_exit_keeps_its_own_way_out():
    """None: re-raised unchanged (a traceback for a bug, the parser's own status); with a saved state, the
    line that says where it is comes first and the traceback still follows (status None)."""
    assert ending(SystemExit(2)) is None
    assert ending(KeyError("bug")) is None
    assert ending(SIGTERMException()) is None  # Lightning's SIGTERM without this run's handler: not ours to explain
    saved = ending(KeyError("bug"), saved="runs/x/checkpoints/last.ckpt")
    assert saved.status is None and saved.message.startswith("The state of step 7 is saved in runs/x/checkpoints/last.ckpt")


def test_the_cause_walk_visits_each_exception_once_even_in_a_loop():
    first, second = ValueError("a"), RuntimeError("b")
    first.__context__, second.__context__ = second, first
    assert list(causes(first)) == [first, second]


def test_say_error_is_one_line_with_the_status_of_its_kind(capsys):
    assert say_error(ConfigError("--out: exists"), "export") == BAD_INPUT
    assert say_error(OutputError("cannot write x: No space left on device")) == FAILURE
    assert capsys.readouterr().err == "error: export: --out: exists\nerror: cannot write x: No space left on device\n"
