"""Screenshots of TensorBoard's tabs for the docs: ``docs/screenshots/<tab>.png``.

    python docs/screenshots/take.py LOGDIR [--out docs/screenshots] [--tabs timeseries,scalars,...]

Serves ``LOGDIR`` with TensorBoard in this process (127.0.0.1, a free port), opens each tab in
headless Chromium (``chromium --headless --screenshot``, ``--virtual-time-budget`` to let the page
load its data) through a page that closes Time Series' settings pane and asks for SVG charts
(``/?forceSVG=true#<tab>``), and writes one PNG per tab, reduced to an adaptive palette (and scaled
down if need be) so each stays under ``--max-kb``. Needs ``chromium`` on the PATH (Debian:
``apt-get install -y chromium``); prints what it wrote and the size of each.
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from PIL import Image

HERE = Path(__file__).resolve().parent
#: TensorBoard's tab names in the URL's fragment, in the order the docs show them.
TABS = ("timeseries", "scalars", "custom_scalars", "images", "text", "hparams", "projector")
#: The window (width, height) each tab is taken in, where the default 1400 × 1000 hides what it is for:
#: Time Series' curves sit below the epoch card and the figures, Images' similarity figures below the
#: spectrum and the plane's path, and HParams' metric columns right of its comparison axes.
WINDOWS = {"timeseries": (1400, 1750), "images": (1400, 1400), "hparams": (2300, 650)}


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


#: Served at ``PRIME`` beside TensorBoard: sets TensorBoard's stored settings in this origin's localStorage
#: (Time Series' settings pane closed, as a returning user has it), then opens the tab named in the
#: fragment with SVG charts (``forceSVG``: headless Chromium has no WebGL for the default renderer).
PRIME = "/__screenshot"
PRIME_PAGE = b"""<!doctype html><script>
localStorage.setItem("_tb_global_settings", JSON.stringify({timeSeriesSettingsPaneOpened: false}));
location.replace("/?forceSVG=true#" + location.hash.slice(1));
</script>"""


def with_prime_page(app):
    """The TensorBoard WSGI ``app`` with ``PRIME_PAGE`` at ``PRIME``."""

    def wrapped(environ, start_response):
        if environ.get("PATH_INFO") == PRIME:
            start_response("200 OK", [("Content-Type", "text/html"), ("Content-Length", str(len(PRIME_PAGE)))])
            return [PRIME_PAGE]
        return app(environ, start_response)

    return wrapped


def serve(logdir: Path) -> str:
    """TensorBoard on ``logdir`` in a daemon thread of this process; returns its URL once it answers."""
    from tensorboard import program

    board = program.TensorBoard(server_class=lambda app, flags: program.WerkzeugServer(with_prime_page(app), flags))
    board.configure(argv=[None, "--logdir", str(logdir), "--host", "127.0.0.1", "--port", str(free_port()), "--load_fast=false"])
    url = board.launch().rstrip("/")
    for _ in range(120):  # until the runs are loaded: /data/runs lists them
        try:
            with urllib.request.urlopen(f"{url}/data/runs", timeout=5) as answer:
                if answer.read().strip() not in (b"", b"[]"):
                    return url
        except OSError:
            pass
        time.sleep(0.5)
    raise SystemExit(f"error: TensorBoard at {url} lists no run under {logdir} after 60 s")


def shoot(chromium: str, url: str, path: Path, width: int, height: int, budget_ms: int) -> None:
    """One headless Chromium screenshot of ``url`` (a fresh profile each time, so no tab state carries over)."""
    with tempfile.TemporaryDirectory() as profile:
        command = [
            chromium,
            "--headless",
            "--no-sandbox",  # root in a container has no user namespace for the sandbox
            "--disable-gpu",
            "--enable-unsafe-swiftshader",  # software WebGL for the projector
            "--hide-scrollbars",
            f"--user-data-dir={profile}",
            f"--window-size={width},{height}",
            f"--virtual-time-budget={budget_ms}",
            f"--screenshot={path}",
            url,
        ]
        done = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    if done.returncode != 0 or not path.is_file():
        raise SystemExit(f"error: chromium could not take {url}: {done.stderr.strip()[-500:]}")


def compress(path: Path, max_kb: int) -> None:
    """An adaptive 128-colour palette, then 85% smaller steps until the PNG is under ``max_kb``."""
    image = Image.open(path).convert("RGB")
    while True:
        image.quantize(colors=128, method=Image.Quantize.MEDIANCUT).save(path, optimize=True)
        if path.stat().st_size <= max_kb * 1024 or image.width < 400:
            return
        image = image.resize((int(image.width * 0.85), int(image.height * 0.85)), Image.Resampling.LANCZOS)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("logdir", type=Path, help="the folder TensorBoard reads (e.g. runs/quickstart)")
    parser.add_argument("--out", type=Path, default=HERE, help="where the PNGs go (default: docs/screenshots)")
    parser.add_argument("--tabs", default=",".join(TABS), help=f"comma-separated tabs (default: {','.join(TABS)})")
    parser.add_argument("--width", type=int, help="window width for every tab (default: 1400, or the tab's own in WINDOWS)")
    parser.add_argument("--height", type=int, help="window height for every tab (default: 1000, or the tab's own in WINDOWS)")
    parser.add_argument("--budget-ms", type=int, default=15000, help="virtual time Chromium gives each page to load")
    parser.add_argument("--max-kb", type=int, default=150, help="largest PNG, in KB")
    args = parser.parse_args(argv)
    if not args.logdir.is_dir():
        print(f"error: logdir {args.logdir} is not a folder", file=sys.stderr)
        return 2
    chromium = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    if chromium is None:
        print("error: no chromium on the PATH (Debian: apt-get install -y chromium)", file=sys.stderr)
        return 2
    tabs = [tab.strip() for tab in args.tabs.split(",") if tab.strip()]
    unknown = sorted(set(tabs) - set(TABS))
    if unknown:
        print(f"error: --tabs {','.join(unknown)}: not one of {','.join(TABS)}", file=sys.stderr)
        return 2
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    url = serve(args.logdir)
    args.out.mkdir(parents=True, exist_ok=True)
    for tab in tabs:
        path = args.out / f"{tab}.png"
        width, height = WINDOWS.get(tab, (1400, 1000))
        shoot(chromium, f"{url}{PRIME}#{tab}", path, args.width or width, args.height or height, args.budget_ms)
        compress(path, args.max_kb)
        with Image.open(path) as image:
            print(f"wrote {path} ({image.width}×{image.height}, {path.stat().st_size // 1024} KB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
