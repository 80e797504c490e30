"""The exception types the CLI turns into a single readable line."""


class ConfigError(ValueError):
    """A user-facing configuration or input error.

    The message must name the offending option, path or value; ``python -m ssl_app`` prints
    it as ``error: <message>`` and exits with status 2, without a traceback.
    """


class NonFiniteError(RuntimeError):
    """Training produced a non-finite loss or gradient (``ssl_app.health.NumericalHealth``).

    Raised on every rank at the same step; the message names the step, the value and the last
    finite loss. ``python -m ssl_app`` prints it as ``error: <message>`` and exits with status 1.
    """


class OutputError(OSError):
    """A file of the run could not be written: a full disk, a quota, a read-only folder.

    The message names the file and the reason (``cannot write checkpoint …: No space left on
    device``); ``python -m ssl_app`` prints it as ``error: <message>`` without a traceback and
    exits with status 1 (2 when nothing had started yet).
    """
