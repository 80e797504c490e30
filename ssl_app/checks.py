"""Validation of option values shared by the methods: each failure names the option."""

from __future__ import annotations

import numbers
from typing import Optional

from ssl_app.errors import ConfigError


def check_momentum(value: float, option: str) -> float:
    """Return ``value`` as a float; raise ``ConfigError`` naming ``option`` unless it is in [0, 1)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not 0.0 <= value < 1.0:
        raise ConfigError(f"{option} must be in [0, 1), got {value!r}")
    return float(value)


def check_int(value: int, option: str, minimum: int = 1) -> int:
    """Return ``value`` as an int; raise ``ConfigError`` naming ``option`` unless it is an int >= minimum."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
        raise ConfigError(f"{option} must be an int >= {minimum}, got {value!r}")
    return int(value)


def check_optional_int(value: Optional[int], option: str, minimum: int = 1) -> Optional[int]:
    """``None`` stays ``None``; anything else as :func:`check_int` (the message says null is allowed)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
        raise ConfigError(f"{option} must be an int >= {minimum} (or null), got {value!r}")
    return int(value)
