"""The one exception type the CLI turns into a single readable line."""


class ConfigError(ValueError):
    """A user-facing configuration or input error.

    The message must name the offending option, path or value; ``python -m ssl_app`` prints
    it as ``error: <message>`` and exits with status 2, without a traceback.
    """
