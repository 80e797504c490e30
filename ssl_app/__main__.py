import os

# Must precede the first torch import. OpenMP's default is to spin while waiting for work, which
# starves DataLoader workers or any other process sharing the cores (benchmarks/README.md,
# "Tuning notes"). An explicit OMP_WAIT_POLICY in the environment wins.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from ssl_app.runtime import keep_freed_memory  # noqa: E402

keep_freed_memory()  # before torch allocates (ssl_app/runtime.py)

from ssl_app.cli import main  # noqa: E402

if __name__ == "__main__":
    main()
