"""Screenshots of TensorBoard for the docs: a small study (a sweep with linear probes) as a user sees it.

    python docs/screenshots/take.py                  # the study: sweep, then every shot in STUDY
    python docs/screenshots/take.py --study-dir DIR  # the same, the sweep kept in DIR (re-used if done)
    python docs/screenshots/take.py LOGDIR [--shots timeseries,scalars,...]  # shots of a log folder you have

Without ``LOGDIR`` it first runs ``study_command`` (``python -m ssl_app.sweep``: the quickstart at τ 0.5 and
0.2, seeds 0 and 1, 3 epochs each, a 2-epoch linear probe on each fit) into ``--study-dir`` (by default a
temporary folder, removed at the end). Then it serves the log folder with TensorBoard in this process
(127.0.0.1, a free port), opens each shot in headless Chromium (``chromium --headless --screenshot``,
``--virtual-time-budget`` to let the page load its data) through a page of its own (``PRIME``) that closes Time
Series' settings pane, asks for SVG charts and, for a view behind a tab of the HParams dashboard, clicks that
tab; and writes ``<shot>.png``, reduced to an adaptive palette (and scaled down if need be) so each stays under
``--max-kb``. The parallel-coordinates shot is checked: the lines the page drew must be as many as the rows the
hparams plugin serves, else it stops with an ``error:`` line. Needs ``chromium`` on the PATH (Debian:
``apt-get install -y chromium``); prints what it wrote and the size of each.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from PIL import Image

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]


@dataclass(frozen=True)
class Shot:
    """One picture: TensorBoard's tab (the URL's fragment; empty: the page TensorBoard opens on), the ``view-id``
    of a tab inside it to click first (the HParams dashboard's views), and the window (width, height)."""

    tab: str
    click: Optional[str] = None
    window: tuple[int, int] = (1400, 1000)


#: Every shot by name (``<name>.png``). The windows are larger where 1400 × 1000 hides what the page is for:
#: the landing page's and Time Series' headline cards and figures below the first row, Images' similarity figures
#: below the spectrum, the HParams table's metric columns right of its axes, parallel coordinates' lower axes.
SHOTS = {
    "landing": Shot("", window=(1400, 1750)),
    "timeseries": Shot("timeseries", window=(1400, 1750)),
    "scalars": Shot("scalars"),
    "custom_scalars": Shot("custom_scalars", window=(1400, 900)),
    "images": Shot("images", window=(1400, 1400)),
    "text": Shot("text"),
    "hparams": Shot("hparams", window=(2300, 700)),
    "parallel_coordinates": Shot("hparams", click="parallel-coords-view", window=(2300, 850)),
    "projector": Shot("projector"),
}
#: What the study mode takes (and the docs show): the landing page, the HParams table and its parallel
#: coordinates, Custom Scalars, the per-run figures and the projector.
STUDY = ("landing", "hparams", "parallel_coordinates", "custom_scalars", "images", "projector")
#: The study's sweep: 2 τ × 2 seeds of the quickstart, each fit probed (so HParams has kNN and linear top-1 on
#: every row). 3 epochs and a 2-epoch probe keep it to a few minutes on 2 CPU cores.
STUDY_GRID = ("tau=0.5,0.2",)
STUDY_SEEDS = (0, 1)
STUDY_NAME = "study"


def study_command(
    out: Path, fit_extra: Sequence[str] = (), linear_extra: Sequence[str] = (), python: str = sys.executable
) -> list[str]:
    """The ``python -m ssl_app.sweep`` command that writes the study to ``out/STUDY_NAME``; ``fit_extra`` and
    ``linear_extra`` are added to every fit's and every probe's options (the tests shrink the data with them)."""
    grid = [item for axis in STUDY_GRID for item in ("--grid", axis)]
    quiet = "--trainer.enable_progress_bar=false"
    probe = ["--trainer.max_epochs=2", "--trainer.check_val_every_n_epoch=1", quiet, *linear_extra]
    return [
        python, "-m", "ssl_app.sweep", "--config", str(ROOT / "configs" / "quickstart.yaml"), *grid,
        "--seeds", ",".join(map(str, STUDY_SEEDS)),
        "--linear", str(ROOT / "configs" / "linear.yaml"), "--linear-args", shlex.join(probe),
        "--out", str(out), "--name", STUDY_NAME,
        "--", "--trainer.max_epochs=3", quiet, *fit_extra,
    ]  # fmt: skip


def run_study(out: Path, fit_extra: Sequence[str] = (), linear_extra: Sequence[str] = ()) -> Path:
    """Runs (or, where ``out`` holds it already, finishes) the study's sweep in the repository's root, this tree's
    ``ssl_app`` first on the path; returns the folder TensorBoard reads (``out/STUDY_NAME``)."""
    command = study_command(out, fit_extra, linear_extra)
    print("$ python " + shlex.join(command[1:]).replace(str(ROOT) + os.sep, ""), flush=True)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    done = subprocess.run(command, cwd=ROOT, env=env, check=False)
    if done.returncode != 0:
        raise SystemExit(f"error: the study's sweep failed (exit {done.returncode}); its logs are under {out}")
    return out / STUDY_NAME


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


#: Served at ``PRIME`` beside TensorBoard: sets TensorBoard's stored settings in this origin's localStorage
#: (Time Series' settings pane closed, as a returning user has it), then opens the tab named in the fragment
#: with SVG charts (``forceSVG``). With ``?click=<view-id>`` it opens TensorBoard in a frame filling the window
#: instead, clicks that element (searched through the shadow roots of TensorBoard's Polymer dashboards) once it
#: exists, and posts to ``REPORT`` whether it clicked and how many lines parallel coordinates draws, each time that
#: changes (the last report stands for the picture, taken when the virtual time is spent).
PRIME = "/__screenshot"
REPORT = "/__screenshot/report"
PRIME_PAGE = b"""<!doctype html>
<style>
html, body { margin: 0; height: 100%; overflow: hidden }
iframe { border: 0; width: 100%; height: 100%; display: block }
</style>
<script>
localStorage.setItem("_tb_global_settings", JSON.stringify({timeSeriesSettingsPaneOpened: false}));
const tab = location.hash.slice(1), click = new URLSearchParams(location.search).get("click");
const board = "/?forceSVG=true" + (tab ? "#" + tab : "");
const deep = (root, selector) => {
  const found = [...root.querySelectorAll(selector)];
  for (const element of root.querySelectorAll("*")) if (element.shadowRoot) found.push(...deep(element.shadowRoot, selector));
  return found;
};
if (!click) location.replace(board);
else addEventListener("DOMContentLoaded", () => {
  const frame = document.body.appendChild(document.createElement("iframe"));
  frame.src = board;
  let clicked = false, posted = "";
  const step = () => {
    const page = frame.contentDocument;
    if (page && !clicked) {
      const target = deep(page, '[view-id="' + click + '"]')[0];
      if (target) { target.click(); clicked = true; }
    }
    const drawn = p => p.getAttribute("d") && p.getAttribute("visibility") !== "hidden";
    const report = JSON.stringify({click, clicked, lines: clicked ? deep(page, "g.foreground path").filter(drawn).length : 0});
    if (report !== posted) fetch("/__screenshot/report", {method: "POST", body: posted = report});
    setTimeout(step, 250);
  };
  step();
});
</script>"""


def with_prime_page(app, reports: list[dict]):
    """The TensorBoard WSGI ``app`` with ``PRIME_PAGE`` at ``PRIME``; what the page posts to ``REPORT`` is appended
    to ``reports``."""

    def wrapped(environ, start_response):
        path = environ.get("PATH_INFO")
        if path == PRIME:
            start_response("200 OK", [("Content-Type", "text/html"), ("Content-Length", str(len(PRIME_PAGE)))])
            return [PRIME_PAGE]
        if path == REPORT:
            size = int(environ.get("CONTENT_LENGTH") or 0)
            reports.append(json.loads(environ["wsgi.input"].read(size) or b"{}"))
            start_response("204 No Content", [])
            return [b""]
        return app(environ, start_response)

    return wrapped


def serve(logdir: Path, reports: list[dict]) -> str:
    """TensorBoard on ``logdir`` in a daemon thread of this process, its logs read; returns its URL once it answers."""
    from tensorboard import program

    def server(app, flags):
        return program.WerkzeugServer(with_prime_page(app, reports), flags)

    board = program.TensorBoard(server_class=server)
    port = str(free_port())
    # Every event file read once, before the server starts: the logs do not change while the shots are taken.
    static = ["--load_fast=false", "--reload_task=blocking", "--reload_interval=0"]
    board.configure(argv=[None, "--logdir", str(logdir), "--host", "127.0.0.1", "--port", port, *static])
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


def hparams_rows(url: str) -> list[str]:
    """The names of the rows (session groups) TensorBoard's hparams plugin serves, through its HTTP handler."""
    request = {"experimentName": "", "allowedStatuses": ["STATUS_UNKNOWN", "STATUS_SUCCESS", "STATUS_FAILURE", "STATUS_RUNNING"],
               "startIndex": 0, "sliceSize": 10000}  # fmt: skip
    post = urllib.request.Request(f"{url}/data/plugin/hparams/session_groups", data=json.dumps(request).encode(),
                                  headers={"Content-Type": "application/json"})  # fmt: skip
    with urllib.request.urlopen(post, timeout=60) as answer:
        return [group["name"] for group in json.load(answer).get("sessionGroups", [])]


def shot_url(url: str, shot: Shot) -> str:
    return f"{url}{PRIME}{'?click=' + shot.click if shot.click else ''}#{shot.tab}"


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
        done = subprocess.run(command, capture_output=True, text=True, timeout=180, check=False)
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


def check_lines(report: Optional[dict], rows: list[str]) -> str:
    """What the page reported for parallel coordinates, against the hparams plugin's rows: a line per row."""
    if report is None or not report.get("clicked"):
        raise SystemExit("error: parallel_coordinates: the HParams dashboard's parallel-coordinates tab was not found")
    if report["lines"] != len(rows):
        raise SystemExit(f"error: parallel_coordinates draws {report['lines']} lines for {len(rows)} rows: {rows}")
    return f"{report['lines']} lines, one per row"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "logdir", type=Path, nargs="?", help="a folder TensorBoard reads; without it: the study (a sweep run first)"
    )
    parser.add_argument(
        "--study-dir", type=Path, help="where the study's sweep goes (kept; re-used where done) instead of a temporary folder"
    )
    parser.add_argument("--out", type=Path, default=HERE, help="where the PNGs go (default: docs/screenshots)")
    parser.add_argument(
        "--shots", "--tabs", dest="shots", help=f"comma-separated, of {','.join(SHOTS)} (default: {','.join(STUDY)})"
    )
    parser.add_argument("--width", type=int, help="window width for every shot (default: the shot's own in SHOTS)")
    parser.add_argument("--height", type=int, help="window height for every shot (default: the shot's own in SHOTS)")
    parser.add_argument("--budget-ms", type=int, default=15000, help="virtual time Chromium gives each page to load")
    parser.add_argument("--max-kb", type=int, default=150, help="largest PNG, in KB")
    return parser


def chosen_shots(names: Optional[str]) -> list[str]:
    """The shots asked for, in the order given; raises ``ValueError`` naming the unknown ones."""
    shots = [name.strip() for name in (names or ",".join(STUDY)).split(",") if name.strip()]
    unknown = [name for name in shots if name not in SHOTS]
    if unknown or not shots:
        raise ValueError(f"--shots {','.join(unknown) or repr(names)}: not one of {','.join(SHOTS)}")
    return shots


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        shots = chosen_shots(args.shots)
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    if args.logdir is not None and not args.logdir.is_dir():
        print(f"error: logdir {args.logdir} is not a folder", file=sys.stderr)
        return 2
    if args.logdir is not None and args.study_dir is not None:
        print("error: --study-dir is for the study (no LOGDIR); give one or the other", file=sys.stderr)
        return 2
    chromium = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    if chromium is None:
        print("error: no chromium on the PATH (Debian: apt-get install -y chromium)", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="ssl_app_study_") as scratch:
        logdir = args.logdir or run_study((args.study_dir or Path(scratch)).resolve())
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
        reports: list[dict] = []
        url = serve(logdir, reports)
        args.out.mkdir(parents=True, exist_ok=True)
        for name in shots:  # each taken in the scratch folder and moved into --out once checked and compressed
            shot, taken, path = SHOTS[name], Path(scratch) / f"{name}.png", args.out / f"{name}.png"
            del reports[:]
            width, height = args.width or shot.window[0], args.height or shot.window[1]
            shoot(chromium, shot_url(url, shot), taken, width, height, args.budget_ms)
            checked = check_lines(reports[-1] if reports else None, hparams_rows(url)) if name == "parallel_coordinates" else ""
            compress(taken, args.max_kb)
            with Image.open(taken) as image:
                size = f"{image.width}×{image.height}, {taken.stat().st_size // 1024} KB"
            shutil.copyfile(taken, path)
            print(f"wrote {path} ({size}){'; ' + checked if checked else ''}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
