import os
import sys

# Must precede the first torch import. OpenMP's default is to spin while waiting for work, which
# starves DataLoader workers or any other process sharing the cores (benchmarks/README.md,
# "Tuning notes"). An explicit OMP_WAIT_POLICY in the environment wins.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

# Ctrl-C while the application is still importing (seconds: torch, Lightning) comes before the CLI
# handles signals: one line and status 130, as later, not a traceback through the imports.
try:
    from ssl_app.runtime import keep_freed_memory

    keep_freed_memory()  # before torch allocates (ssl_app/runtime.py)

    from ssl_app.cli import main
except KeyboardInterrupt:
    sys.stderr.write("Interrupted by SIGINT while starting; nothing written\n")
    sys.exit(130)


def run() -> None:
    """The ``ssl-app`` console script: importing this module first gives it the same start as
    ``python -m ssl_app`` (OMP_WAIT_POLICY, the quiet Ctrl-C during the imports)."""
    main()


if __name__ == "__main__":
    main()
