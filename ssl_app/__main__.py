import os

# Must precede the first torch import. OpenMP's default is to spin while waiting for work; when
# DataLoader workers or any other process share the cores, the spinning threads starve them and
# a CPU training step was measured 7x slower (1.5 s vs 0.22 s). Sleeping instead costs nothing
# measurable here. An explicit OMP_WAIT_POLICY in the environment wins.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from ssl_app.cli import main  # noqa: E402

if __name__ == "__main__":
    main()
