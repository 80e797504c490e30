"""The exception types the CLI turns into a single readable line, and the walk over an exception's causes."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Optional, TypeVar

E = TypeVar("E", bound=BaseException)


class ConfigError(ValueError):
    """A user-facing configuration or input error.

    The message must name the offending option, path or value; ``python -m ssl_app`` prints
    it as ``error: <message>`` and exits with status 2, without a traceback.
    """


class NonFiniteError(RuntimeError):
    """The run diverged: a non-finite loss or gradient (``ssl_app.health.NumericalHealth``), non-finite
    embeddings (``callbacks.EmbeddingMetrics``) or a state that would have to be checkpointed with
    NaN/inf (``ssl_app.checkpointing.AtomicCheckpointIO``).

    Raised on every rank at the same step; the message names the step and the value or tensor.
    ``state_is_good``: the model's state at this step may be resumed from (NumericalHealth stops
    *before* the bad update, so the state holds only finite updates); when False, the last good
    state is the checkpoint written before. ``python -m ssl_app`` prints it as
    ``error: <message>`` and exits with status 1.
    """

    def __init__(self, message: str, state_is_good: bool = False) -> None:
        super().__init__(message)
        self.state_is_good = state_is_good


class OutputError(OSError):
    """A file of the run could not be written: a full disk, a quota, a read-only folder.

    The message names the file and the reason (``cannot write checkpoint …: No space left on
    device``); ``python -m ssl_app`` prints it as ``error: <message>`` without a traceback and
    exits with status 1 (2 when nothing had started yet).
    """


def causes(error: BaseException) -> Iterator[BaseException]:
    """``error`` and what caused it, outermost first: each ``__cause__`` (``raise … from``), else its
    ``__context__`` (raised while handling); a chain that loops is walked once. The one walk over an
    exception's causes: what a command says when it ends (``ssl_app.cli.endings``) is read from it."""
    seen: set[int] = set()
    current: Optional[BaseException] = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def find_cause(error: BaseException, kind: type[E]) -> Optional[E]:
    """The outermost exception of type ``kind`` among ``error``'s :func:`causes` (None: none is)."""
    return next((cause for cause in causes(error) if isinstance(cause, kind)), None)
