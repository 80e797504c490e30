"""A τ policy's label from a saved config, without trusting the config's class path.

The report and the HParams panel name a run's τ as the policy's own ``label()`` (``cosine:0.1-1``).
They read it from a run's saved config, which may come from another version or another person, so
only this package's policies are built (from the saved numbers, which their own checks read); any
other class, or numbers a policy refuses, is named from the config alone: ``Name(key=value, ...)``.
"""

from __future__ import annotations

from typing import Any

#: The policies built to name themselves (this package's, by class path).
POLICY_MODULE = "ssl_app.temperature"
KNOWN_POLICIES = ("Constant", "Cosine", "Linear", "Learnable", "Adaptive")


def policy_label(class_path: str, init_args: dict[str, Any]) -> str:
    """The policy's ``label()`` for one of this package's policies; else ``Name(key=value, ...)``."""
    module, _, name = class_path.rpartition(".")
    if module == POLICY_MODULE and name in KNOWN_POLICIES:
        try:
            import ssl_app.temperature as policies

            return getattr(policies, name)(**init_args).label()
        except Exception:  # an older or newer policy, or numbers it refuses: named from the config below
            pass
    return f"{name}({', '.join(f'{key}={_number(value)}' for key, value in init_args.items())})"


def _number(value: Any) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)
