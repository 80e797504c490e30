"""Everything a lent GPU should measure, in one command that fits its lease (issues 34, 38): the device
tests, the training step against lightly's, an epoch of CIFAR-10 with the shipped configs (and one
compiled, in a process of its own), the host-device syncs of the training steps, and an
ImageNet-100-shaped loader against the ResNet-50 step.

    benchmarks/gpu_check.sh --device cuda --out $OUT          # on the GPU machine (benchmarks/README.md)
    benchmarks/gpu_check.sh --device cpu --quick --out DIR     # the same parts, CPU-sized, ~3 min here

Each part runs in its own process with its own time budget (``BUDGETS``; the whole run is capped at
their sum, 420 s on a GPU), so one part that overruns is killed and the next still runs: part i is
stopped when the budgets of parts 1..i are spent, so what an earlier part leaves unused goes to the
later ones. Every part adds its numbers to ``DIR/results.json`` as soon as it has them (per method,
per config, per worker count, per epoch), and the driver rewrites ``DIR/summary.md`` (one Markdown
table) after every part: a timeout still leaves what was measured, and a record the table cannot
read is one row saying so. ``DIR/log.txt`` holds every part's output. Three files in all: the GPU
call returns at most 8.

Parts (they run in the order of ``PARTS``: epoch, compiled, train_step, loader, syncs, tests;
``--parts`` picks some, e.g. to rerun one that failed):

- ``tests``: ``tests/benchmarks/test_on_device.py`` with ``SSL_APP_TEST_DEVICE`` = the device (each
  method's Trainer fit in bf16-mixed and channels_last with views made on the device, no sync in a
  step that does not log, the metrics, the batched views).
- ``train_step``: ``train_step.py``, SimCLR and MoCo, resnet18_cifar, batch 512, bf16, against
  lightly's step in the same process; first without compile, ours at its defaults (NHWC) and in
  NCHW, then SimCLR compiled in NHWC (one compile: about a minute; what dynamo compiled, and one
  profiled step per side: CUDA kernels and their time against the step's wall time, so a step the
  host holds up shows). Then one call of the batched training views (``BatchViewAugmentation``,
  CIFAR-10's augmentation, 512 images × 2 views of 32 px, keyed as training calls it, and from a
  generator): tensor ops, CUDA kernels and milliseconds per call (``augment.py --calls``, a few
  seconds). Then SimCLR's layouts with small_cnn and with resnet50 (224 px, batch 64), if the
  budget leaves time.
- ``epoch``: the shipped ``configs/cifar10/simclr.yaml``, ``moco.yaml`` and ``memory_bank.yaml``,
  ``augment_on: device``, on 50,000 + 10,000 random 32×32 images generated on the device: two
  epochs (the first warms up), an evaluation after each (the first builds the device images), each
  by piece (``evaluation.EvaluationTimer``: the validation loop, each metric callback with the kNN
  bank of 50,000, the projector at the end of training); then the metric functions alone at 50,000
  embeddings.
- ``compiled``: ``configs/cifar10/simclr.yaml`` with ``compile: true`` and ``channels_last: true``
  (the fastest documented settings), the same data, in a process of its own (a compiled fit after
  another fit in one process crashed on CUDA): two epochs (the first compiles), one evaluation, and
  the end of the fit (the projector), each saved as it comes.
- ``syncs``: 12 training steps of each CIFAR-10 method (logging every 5th) under
  ``torch.cuda.set_sync_debug_mode("warn")``: every sync by its line, and the syncs per step in the
  steps that do not log, where there should be none (``syncs.py``).
- ``loader``: the ImageNet-100 config's loader (``configs/imagenet100/memory_bank.yaml``: 224 crops,
  batch 128) over JPEGs of mixed sizes written to a temporary folder, at 8 and 16 workers, with the
  views made in the workers (PIL) and with the JPEGs decoded and augmented on the device
  (``augment_on: device``), against the ResNet-50 bf16 step on batches of it. The worker path also
  runs once at 8 workers started the other way (forks of this process on a GPU machine, before it
  touches CUDA; the fork server on the CPU), and each worker-path row says how its workers started,
  their CPU time per image and how busy they were in the timed window (``data.loader_rate``).

``--quick`` shrinks every part (small CNN, 2 batches per epoch of 640 CIFAR-sized images, 100 JPEGs,
1 and 2 workers, ResNet-50 at batch 2, SimCLR's step only, no compile, MoCo's syncs only, listed as
host reads) so that the CPU run tests the machinery; its numbers are not the GPU's.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PARTS = ("epoch", "compiled", "train_step", "loader", "syncs", "tests")
# Seconds per part: on the GPU (the whole run: 420 s, inside the 8 minutes of one GPU call with the
# machine's start and the transfers) and --quick on the CPU.
BUDGETS = {"epoch": 145, "compiled": 90, "train_step": 55, "loader": 60, "syncs": 30, "tests": 40}
QUICK_BUDGETS = {"epoch": 60, "compiled": 45, "train_step": 20, "loader": 50, "syncs": 30, "tests": 60}
AUGMENT_BEFORE = "5.2–5.6 ms and 608 kernels per call on an H200 before issue 38"  # the lead's probe, 2026-11-28
LIGHTLY_S_PER_EPOCH = 26.0  # lightly's published CIFAR-10 benchmark: SimCLR, batch 512, ResNet-18, one A6000
TARGET_S_PER_EPOCH = 1.5  # issue 38 item 4: SimCLR, ResNet-18, batch 512, the fastest documented settings, one H200
TARGET_EVALUATION_S = 1.0  # issue 38 item 3: one CIFAR-10 evaluation (bank 50,000 + val 10,000 + metrics)
TARGET_PROJECTOR_S = 1.0  # issue 38 item 3: the projector at the end of fit
#: What a callback other than the projector does at the end of fit (the projector's row shows its target).
FIT_END_NOTES = {"EmbeddingMetrics": "waits for the figures still being drawn (figure_process), once per fit"}

CIFAR10_CONFIGS = {
    "cifar10_simclr": ["--config", "configs/cifar10/simclr.yaml"],
    "cifar10_moco": ["--config", "configs/cifar10/moco.yaml"],
    "cifar10_memory_bank": ["--config", "configs/cifar10/memory_bank.yaml"],
}
COMPILED = ["--model.init_args.compile=true", "--model.init_args.channels_last=true"]  # the fastest documented settings


# ---------------------------------------------------------------- results and the summary table


def save(out: Path, key: str, value: Any) -> None:
    """Set ``results.json[key]`` (written whole through a temporary file: a kill leaves the old one)."""
    out.mkdir(parents=True, exist_ok=True)
    path = out / "results.json"
    results = json.loads(path.read_text()) if path.is_file() else {}
    results[key] = value
    temporary = path.with_suffix(".tmp")
    temporary.write_text(json.dumps(results, indent=1, default=str))
    os.replace(temporary, path)


def _f(value: Any, digits: int = 0) -> str:
    return "–" if value is None else f"{value:,.{digits}f}"


def summary_rows(results: dict[str, Any]) -> list[tuple[str, str, str, str, str]]:
    """(part, case, measure, value, against / notes) for every number in ``results``. A part whose
    records this table cannot read gets one row saying so, and the other parts are still shown."""
    rows = []
    for part, part_rows in (
        ("tests", _tests_rows), ("train_step", _train_step_rows), ("epoch", _epoch_rows), ("compiled", _compiled_rows),
        ("train_step", _augment_rows), ("syncs", _syncs_rows), ("loader", _loader_rows),
    ):  # fmt: skip
        try:
            rows += part_rows(results)
        except Exception as error:  # a record of another shape (an older or a partial one): say so, never crash
            rows.append((part, "(the summary)", "unreadable record", f"{type(error).__name__}: {error}", "see results.json"))
    for part, status in results.get("run", {}).get("parts", {}).items():
        if status["status"] != "ok":
            spent = f"after {status['seconds']:.0f} of {status['budget']} s"
            rows.append((part, "(the part)", "status", status["status"], spent))
    return rows


def _tests_rows(results: dict[str, Any]) -> list[tuple[str, str, str, str, str]]:
    rows = []
    tests = results.get("tests")
    if tests:
        failed = [case["name"] for case in tests["cases"] if case["outcome"] in ("failed", "error")]
        passed = sum(case["outcome"] == "passed" for case in tests["cases"])
        rows.append(("tests", f"test_on_device.py on {tests['device']}", "passed", f"{passed} of {len(tests['cases'])}",
                     "failed: " + ", ".join(failed) if failed else f"pytest exit {tests['rc']}"))  # fmt: skip
    return rows


def _train_step_rows(results: dict[str, Any]) -> list[tuple[str, str, str, str, str]]:
    rows = []
    for _, record in sorted((k, v) for k, v in results.items() if k.startswith("train_step/")):
        settings = record["settings"]
        for method, data in record["methods"].items():
            for side, numbers in data["sides"].items():
                size = "" if settings.get("size", 32) == 32 else f", {settings['size']} px"
                case = f"{method} {side} ({settings['backbone']}, b{settings['batch']}{size}, {settings['precision']})"
                notes = (f"{numbers['against']} {_f(numbers['reference_img_per_s'])} img/s; spread "
                         f"{numbers['ratio_spread'][0]:.2f}–{numbers['ratio_spread'][1]:.2f}; peak {_f(numbers['peak_mb'])} MB "
                         f"(reference {_f(numbers['reference_peak_mb'])} MB)")  # fmt: skip
                notes += _profile_note(numbers.get("profile"), numbers.get("reference_profile"))
                if "compile" in side and data.get("dynamo"):
                    dynamo = data["dynamo"]
                    notes += f"; dynamo: {dynamo['frames_compiled']} frame(s) compiled, {dynamo['graph_breaks']} graph breaks"
                value = f"{_f(numbers['img_per_s'])}; **{numbers['ratio']:.2f}**"
                rows.append(("train_step", case, "img/s; ratio to the reference", value, notes))
    return rows


def _profile_note(profile: dict | None, reference: dict | None) -> str:
    """One profiled step's GPU kernel time against its wall time (train_step.py --profile), and the reference's."""
    if not profile or profile.get("gpu_busy_ms") is None:
        return ""
    note = (f"; one profiled step {profile['wall_ms']:.1f} ms, {profile['kernels']} kernels busy "
            f"{profile['gpu_busy_ms']:.1f} ms ({profile['gpu_busy_ms'] / profile['wall_ms']:.0%})")  # fmt: skip
    if reference and reference.get("gpu_busy_ms") is not None:
        note += f" (reference {reference['wall_ms']:.1f} ms, busy {reference['gpu_busy_ms']:.1f} ms)"
    return note


def _epoch_rows(results: dict[str, Any]) -> list[tuple[str, str, str, str, str]]:
    rows = []
    for key, record in sorted((k, v) for k, v in results.items() if k.startswith("epoch/")):
        if key == "epoch/metrics":
            for name, seconds in record["seconds"].items():
                rows.append(("epoch", f"metric {name} at N = {record['n']:,}", "s", f"{seconds:.3f}", "median of 3, d = 128"))
            continue
        against = f"; lightly ~{LIGHTLY_S_PER_EPOCH:.0f} s (A6000); target ≤ {TARGET_S_PER_EPOCH:.1f} s (H200, fastest settings)"
        notes = f"{_f(record['img_per_s'])} img/s; first epoch {record['first_epoch_s']:.1f} s; {record['scaled']}"
        notes += against if "simclr" in key else ""
        name = f"{key[6:]} ({record['model']}, b{record['batch']}, {record['precision']})"
        rows.append(("epoch", name, "s per training epoch", f"**{record['seconds_per_epoch']:.1f}**", notes))
        rows += _epoch_against_step(results, key[6:], record)
        val_batch = f" (batches of {record['val_batch']})" if record.get("val_batch") else ""
        for number, evaluation in enumerate(record.get("evaluation_pieces") or record["evaluations"]):
            which = "first (builds the device images)" if number == 0 else "steady"
            rows.append(("epoch", f"{key[6:]} evaluation {number + 1}", "s (validation loop + metric callbacks)",
                         f"**{evaluation['eval']:.2f}**", f"{which}; loop {evaluation['loop']:.2f} s{val_batch}, callbacks "
                         f"{evaluation['eval'] - evaluation['loop']:.2f} s; kNN bank {record['train_images']:,}; "
                         f"target ≤ {TARGET_EVALUATION_S:.1f} s (H200)"))  # fmt: skip
            for callback, seconds in sorted(evaluation.get("callbacks", {}).items()):
                if seconds >= 0.0005:
                    rows.append(("epoch", f"{key[6:]} evaluation {number + 1}: {callback}", "s", f"{seconds:.3f}", which))
        figures = record.get("figures_async_s") or []
        if figures:
            rows.append(("epoch", f"{key[6:]} figures (async)", "s per evaluation", f"{max(figures):.3f}",
                         f"EmbeddingMetrics' figures drawn in their own process beside training (figure_process), "
                         f"not in the evaluation's time; the most of {len(figures)} evaluations"))  # fmt: skip
        for callback, seconds in sorted(record.get("fit_end_s", {}).items()):
            if seconds >= 0.0005:
                note = FIT_END_NOTES.get(callback, f"target ≤ {TARGET_PROJECTOR_S:.1f} s (H200)")
                rows.append(("epoch", f"{key[6:]} end of fit: {callback}", "s", f"{seconds:.3f}", note))
    return rows


def _epoch_against_step(results: dict[str, Any], name: str, record: dict[str, Any]) -> list[tuple[str, str, str, str, str]]:
    """``name``'s epoch over the bare step's time for the same images (the ``train_step`` part's, same
    method, backbone and batch, ours at its defaults), when both parts ran: 1.0 is no loop overhead;
    issue 38 item 4 asks ≥ 85% of the step's throughput (≤ 1.18) for SimCLR."""
    method = name.removeprefix("cifar10_")
    step = results.get(f"train_step/layouts/{method}")
    if not step or method not in step.get("methods", {}):
        return []
    settings = step["settings"]
    if (settings.get("batch"), settings.get("backbone")) != (record["batch"], record["model"].split("/")[-1]):
        return []
    step_rate = step["methods"][method]["sides"]["ours"]["img_per_s"]
    bare_s = record["train_images"] / step_rate
    ratio = record["seconds_per_epoch"] / bare_s
    note = f"bare step {_f(step_rate)} img/s = {bare_s:.2f} s per epoch; the epoch reaches {100 / ratio:.0f}% of its throughput"
    if method == "moco":
        note += f"; the bare step with key_bn {settings.get('key_bn', '?')}"
    if method == "simclr":
        note += "; target ≥ 85% (≤ 1.18)"
    return [("epoch", f"{name} s per epoch / bare step", "ratio", f"**{ratio:.2f}**", note)]


def _compiled_rows(results: dict[str, Any]) -> list[tuple[str, str, str, str, str]]:
    rows = []
    for key, record in sorted((k, v) for k, v in results.items() if k.startswith("compiled/")):
        settings = f"compile {str(record['compile']).lower()}, channels_last {str(record['channels_last']).lower()}"
        name = f"{key[9:]} ({settings}; {record['model']}, b{record['batch']}, {record['precision']})"
        epochs = record["epochs_s"]
        later = f"**{epochs[-1]:.1f}**" if len(epochs) > 1 else "–"
        notes = f"first epoch {epochs[0]:.1f} s{' (compiling)' * record['compile']}" if epochs else "no epoch finished"
        notes += f"; {record['scaled']}; a process of its own"
        if record.get("dynamo"):  # frames dynamo compiled (recompilations included) at each epoch's end and evaluation's
            counts = ", ".join(f"{'evaluation' if d['validating'] else 'epoch'} {d['epoch'] + 1}: {d['frames_compiled']}"
                               for d in record["dynamo"])  # fmt: skip
            notes += f"; frames compiled so far at the end of {counts}; {record['dynamo'][-1]['graph_breaks']} graph breaks"
        rows.append(("compiled", name, "s per training epoch", later, notes))
        for evaluation in record["evaluations"]:
            seconds, loop = evaluation["eval"], evaluation["loop"]
            rows.append(("compiled", f"{key[9:]} evaluation", "s (validation loop + metric callbacks)", f"{seconds:.1f}",
                         f"loop {loop:.1f} s, callbacks {seconds - loop:.1f} s"))  # fmt: skip
        if record.get("after_last_evaluation_s") is not None:
            rows.append(("compiled", f"{key[9:]} end of fit", "s", f"{record['after_last_evaluation_s']:.1f}",
                         "after the last evaluation: the projector's pass, the last checkpoint"))  # fmt: skip
    return rows


def _syncs_rows(results: dict[str, Any]) -> list[tuple[str, str, str, str, str]]:
    rows = []
    for key, record in sorted((k, v) for k, v in results.items() if k.startswith("syncs/")):
        rows.append(("syncs", key[6:], "syncs per step that does not log", f"**{syncs_per_unlogged_step(record):.1f}**",
                     syncs_notes(record)))  # fmt: skip
    return rows


def _augment_rows(results: dict[str, Any]) -> list[tuple[str, str, str, str, str]]:
    rows = []
    augment = results.get("augment")
    if augment:
        for path, numbers in augment["paths"].items():
            if "error" in numbers:
                rows.append(("train_step", f"batched views, {path}", "ms per call", "–", numbers["error"]))
                continue
            kernels = "" if numbers["kernels_per_call"] is None else f", {numbers['kernels_per_call']} CUDA kernels"
            rows.append(("train_step", f"batched views, {path} (b{augment['batch']} × 2 views, 32 px)", "ms per call",
                         f"**{numbers['ms_per_call']:.2f}**",
                         f"{numbers['ops_per_call']} tensor ops{kernels} per call; target ≤ 2 ms; {AUGMENT_BEFORE}"))  # fmt: skip
    return rows


def _loader_rows(results: dict[str, Any]) -> list[tuple[str, str, str, str, str]]:
    rows = []
    loader = results.get("loader")
    if loader:
        step = loader.get("step_img_per_s")
        for key, made in (("loader_img_per_s", "views in the workers"), ("decoded_on_device_img_per_s", "decoded on the device")):
            for workers, rate in loader.get(key, {}).items():
                ratio = f"loader / step **{rate / step:.2f}**" if step else "step not measured"
                used = _workers_note(loader.get("workers", {}).get(workers) if key == "loader_img_per_s" else None)
                rows.append(("loader", f"ImageNet-100 shape, b{loader['batch']}, {made}, workers={workers}", "img/s",
                             _f(rate), f"{ratio}; {loader['images']:,} JPEGs {loader['sizes']}{used}"))  # fmt: skip
        other = loader.get("other_start")
        if other:
            name = f"ImageNet-100 shape, b{loader['batch']}, views in the workers, workers={other['workers']}, {other['start']}"
            rows.append(("loader", name, "img/s", _f(other["img_per_s"]),
                         f"the start the application does not take on this machine{_workers_note(other)}"))  # fmt: skip
        if step:
            name = f"ResNet-50 step, b{loader['batch']}, {loader['precision']}"
            rows.append(("loader", name, "img/s", _f(step, 1 if step < 10 else 0), "bare step"))
    return rows


def _workers_note(used: dict | None) -> str:
    """How the workers started and what they did in the timed window (data.py ``loader_rate``)."""
    if not used:
        return ""
    note = f"; workers started by {used['start']}"
    if used.get("cpu_ms_per_image") is not None:
        note += f", their CPU {used['cpu_ms_per_image']:.1f} ms per image, busy {used['busy']:.0%}"
    return note


def syncs_record(listing: Any, device: str) -> dict[str, Any]:
    """What the ``syncs`` part saves for one fit watched by a ``syncs.SyncListing``."""
    return {
        "steps": listing.steps, "logged": listing.logged, "unlogged_steps": listing.unlogged_steps,
        "sites": listing.sites(), "device": device, "host_reads": listing.host_reads,
    }  # fmt: skip


def syncs_per_unlogged_step(record: dict[str, Any]) -> float:
    return sum(row["unlogged"] for row in record["sites"]) / max(record["unlogged_steps"], 1)


def syncs_notes(record: dict[str, Any]) -> str:
    what = "host reads (the CPU: no sync debug mode)" if record["host_reads"] else "syncs"
    unlogged = [f"{row['ours']} ({row['unlogged']}× in {row['unlogged_steps']})" for row in record["sites"] if row["unlogged"]]
    logged = [f"{row['ours']} ({row['count']}×)" for row in record["sites"] if not row["unlogged"]]
    notes = f"{record['unlogged_steps']} such steps of {record['steps']} (the first left out; logged: {record['logged']}); "
    notes += f"{what} there: {'; '.join(unlogged) or 'none'}"
    return notes + (f"; elsewhere (logged or first steps): {'; '.join(logged[:4])}" if logged else "")


def write_summary(out: Path) -> str:
    results = json.loads((out / "results.json").read_text())
    run = results.get("run", {})
    device = run.get("device_name", run.get("device", "?"))
    versions = results.get("versions", {})
    head = (
        f"# gpu_check: {device} ({'quick' if run.get('quick') else 'full'}), {run.get('cpus', '?')} CPUs, "
        f"{', '.join(f'{k} {v}' for k, v in versions.items())}, {run.get('started', '')}\n\n"
    )
    lines = ["| part | case | measure | value | against / notes |", "| --- | --- | --- | ---: | --- |"]
    lines += ["| " + " | ".join(str(cell).replace("|", "/") for cell in row) + " |" for row in summary_rows(results)]
    text = head + "\n".join(lines) + "\n"
    (out / "summary.md").write_text(text)
    return text


# ---------------------------------------------------------------- the driver


def drive(args: argparse.Namespace) -> int:
    args.out.mkdir(parents=True, exist_ok=True)
    budgets = QUICK_BUDGETS if args.quick else BUDGETS
    run = {
        "device": args.device, "quick": args.quick, "started": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
        "cpus": os.cpu_count(), "python": platform.python_version(), "parts": {},
    }  # fmt: skip
    if args.device == "cuda":  # (torch is imported here only on the GPU: each import costs seconds on 2 busy cores)
        import torch

        run |= {"device_name": torch.cuda.get_device_name(0), "torch": torch.__version__, "cuda": torch.version.cuda}
    save(args.out, "run", run)
    deadline = time.monotonic()
    env = os.environ | {"PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "benchmarks"), os.environ.get("PYTHONPATH", "")])}
    env |= {"PYTHONUNBUFFERED": "1", "OMP_WAIT_POLICY": "PASSIVE"}
    with open(args.out / "log.txt", "a") as log:
        for part in args.parts:
            deadline += budgets[part]  # this part's own budget plus what the earlier ones left
            budget = deadline - time.monotonic()
            command = [sys.executable, __file__, "--part", part, "--device", args.device, "--out", str(args.out)]
            command += ["--quick"] * args.quick
            log.write(f"\n===== {part} (budget {budget:.0f} s)\n")
            log.flush()
            start = time.monotonic()
            process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
            try:
                status = "ok" if process.wait(timeout=max(budget, 1)) == 0 else f"failed (exit {process.returncode})"
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)  # the part and its workers
                process.wait()
                status = "timeout (partial)"
            run["parts"][part] = {"status": status, "seconds": time.monotonic() - start, "budget": round(budget)}
            save(args.out, "run", run)
            write_summary(args.out)
            print(f"{part}: {status} in {run['parts'][part]['seconds']:.0f} s", flush=True)
    print(write_summary(args.out))
    return 0 if all(part["status"] == "ok" for part in run["parts"].values()) else 1


# ---------------------------------------------------------------- the parts (each in its own process)


def part_tests(args: argparse.Namespace) -> None:
    """The device tests on the device; one row per test case in results.json."""
    import pytest

    junit = Path(tempfile.mkdtemp(prefix="gpu_check_")) / "junit.xml"
    os.environ["SSL_APP_TEST_DEVICE"] = args.device
    os.chdir(ROOT)  # in this process: a second interpreter's start-up and teardown cost ~20 s on 2 busy cores
    rc = int(
        pytest.main(
            [
                "tests/benchmarks/test_on_device.py",
                "-q",
                "-s",
                "-o",
                "addopts=-ra",
                "-p",
                "no:cacheprovider",
                f"--junitxml={junit}",
            ]
        )
    )
    cases = []
    for case in ET.parse(junit).getroot().iter("testcase") if junit.is_file() else []:
        outcome = next((child.tag for child in case if child.tag in ("failure", "error", "skipped")), "passed")
        message = next((child.get("message", "") for child in case if child.tag in ("failure", "error", "skipped")), "")
        outcome = {"failure": "failed"}.get(outcome, outcome)
        seconds = float(case.get("time", 0))
        cases.append({"name": case.get("name"), "outcome": outcome, "seconds": seconds, "message": message[:300]})
    save(args.out, "tests", {"device": args.device, "rc": rc, "cases": cases})


def part_train_step(args: argparse.Namespace) -> None:
    """train_step.py per method: first the layouts (fast), then compiled (slow to compile), then the
    batched views, then the other backbones' layouts (last: the budget may cut them)."""
    import train_step

    methods = ["simclr", "moco"]
    # Ours runs at its defaults (channels_last: auto, NHWC on CUDA) and in NCHW (the contiguous variant):
    # the layout's gain per backbone, which `auto` rests on (ssl_app.models.channels_last_pays).
    if args.quick:  # the machinery only: SimCLR, no compile (MoCo's step runs in train_step.py's own test)
        common = ["--backbone", "small_cnn", "--batch", "16", "--rounds", "1", "--steps", "1", "--warm-up", "1"]
        passes, methods = {"layouts": ["--variants", "contiguous"], "views": []}, ["simclr"]
    else:
        common = ["--backbone", "resnet18_cifar", "--batch", "512", "--precision", "bf16", "--rounds", "3", "--steps", "5"]
        common += ["--threads", "8"]
        passes = {
            "layouts": ["--variants", "contiguous", "--warm-up", "3"],
            # one profiled step per side: GPU busy against wall time (a compiled step the host holds up shows);
            # before the views' pass, whose profiler and CUDA graph would otherwise precede the compile in this process
            "compiled": ["--variants", "channels_last_compile", "--warm-up", "3", "--profile"],
            "views": [],  # the batched training views (augment.py --calls): a few seconds
            # the other backbones' layouts, SimCLR only, a few rounds each (~15 s), last: the budget may cut them
            "layouts_small_cnn": ["--variants", "contiguous", "--warm-up", "3", "--backbone", "small_cnn"],
            "layouts_resnet50": ["--variants", "contiguous", "--warm-up", "3", "--backbone", "resnet50", "--batch", "64"]
            + ["--size", "224", "--steps", "3"],
        }
    temporary = Path(tempfile.mkdtemp(prefix="gpu_check_")) / "step.json"
    for name, options in passes.items():
        if name == "views":
            part_augment(args)
            continue
        for method in methods:
            if name != "layouts" and method == "moco":  # a compile takes ~a minute: SimCLR's only; other layouts: SimCLR's
                continue
            train_step.main([*common, *options, "--device", args.device, "--methods", method, "--json", str(temporary)])
            save(args.out, f"train_step/{name}/{method}", json.loads(temporary.read_text()))


def cifar10_run(name: str, args: argparse.Namespace, root: Path, logs: Path, extra: list[str]):
    """The CLI's model, datamodule and trainer of a CIFAR-10 config on the device, not run."""
    from common import build_run

    cuda = args.device == "cuda"
    config = [*CIFAR10_CONFIGS[name], f"--data.init_args.root={root}", "--data.init_args.augment_on=device"]
    config += [f"--trainer.accelerator={'gpu' if cuda else 'cpu'}", f"--trainer.precision={'bf16-mixed' if cuda else '32-true'}"]
    config += [f"--trainer.logger.init_args.save_dir={logs}", "--trainer.enable_progress_bar=false"]
    config += ["--trainer.num_sanity_val_steps=0", "--trainer.enable_model_summary=false"]
    if args.quick:
        config += ["--model.init_args.backbone=small_cnn", "--data.init_args.num_workers=0", "--data.init_args.batch_size=64"]
    return build_run(config + extra)


def part_epoch(args: argparse.Namespace) -> None:
    """Seconds per CIFAR-10 epoch and per evaluation for SimCLR, MoCo and the memory bank; then the metrics at 50,000."""
    import common
    import torch
    from evaluation import EvaluationTimer
    from loop import EpochTimer

    train, test = (640, 128) if args.quick else (50000, 10000)
    work = Path(tempfile.mkdtemp(prefix="gpu_check_"))
    root = common.fake_cifar10(work / "cifar10", train, test, args.device)
    for name in ("cifar10_simclr", "cifar10_moco", "cifar10_memory_bank"):  # MoCo and the bank: within 1.3× of SimCLR?
        # an evaluation after each epoch: the first builds the device image cache, the second is the steady one
        extra = ["--trainer.max_epochs=2", "--trainer.check_val_every_n_epoch=1"]
        extra += ["--trainer.limit_train_batches=2"] * args.quick
        cli = cifar10_run(name, args, root, work / "runs", extra)
        timer, pieces = EpochTimer(), EvaluationTimer(ignore=(EpochTimer,))
        cli.trainer.callbacks += [timer, pieces]
        cli.trainer.fit(cli.model, cli.datamodule)
        batches = len(cli.datamodule.train_dataloader())
        seconds, images = timer.train[-1]
        scale = batches * cli.datamodule.batch_size / images  # 1 unless limit_train_batches
        save(args.out, f"epoch/{name}", {
            "model": f"{type(cli.model).__name__}/{cli.model.hparams['backbone']}", "batch": cli.datamodule.batch_size,
            "train_images": train, "seconds_per_epoch": seconds * scale, "img_per_s": images / seconds,
            "first_epoch_s": timer.train[0][0] * scale, "evaluations": timer.evaluations,
            "evaluation_pieces": pieces.evaluations, "fit_end_s": pieces.fit_end,
            "figures_async_s": pieces.summary()["figures_async"],
            "val_batch": cli.datamodule.val_batch_size or cli.datamodule.batch_size,
            "scaled": f"scaled ×{scale:.0f} from {images} images" if scale > 1.01 else "a whole epoch",
            "precision": str(cli.trainer.precision),
        })  # fmt: skip
        del cli
    from ssl_app.metrics import alignment, positive_and_topk_negatives, tolerance, uniformity

    n = 2000 if args.quick else 50000
    generator = torch.Generator(device=args.device).manual_seed(0)
    za = torch.nn.functional.normalize(torch.randn(n, 128, device=args.device, generator=generator), dim=1)
    zb = torch.nn.functional.normalize(za + 0.5 * torch.randn(n, 128, device=args.device, generator=generator), dim=1)
    labels = torch.randint(0, 10, (n,), device=args.device, generator=generator)
    cases = {
        "uniformity": lambda: uniformity(za), "alignment": lambda: alignment(za, zb), "tolerance": lambda: tolerance(za, labels),
        "positive_and_top10_negatives": lambda: positive_and_topk_negatives(za, zb, k=10),
    }  # fmt: skip
    seconds = {}
    for name, case in cases.items():
        times = []
        for _ in range(4):  # the first warms up
            synchronize(args.device)
            start = time.perf_counter()
            case()
            synchronize(args.device)
            times.append(time.perf_counter() - start)
        seconds[name] = statistics.median(times[1:])
        save(args.out, "epoch/metrics", {"n": n, "seconds": seconds})


def part_compiled(args: argparse.Namespace) -> None:
    """The CIFAR-10 SimCLR with ``compile: true`` and ``channels_last: true``, in a process of its own
    (a compiled fit after another fit in one process crashed on CUDA): two epochs (the first compiles),
    one evaluation after the second, the end of the fit (the projector), each saved as it comes."""
    import common
    from lightning.pytorch.callbacks import Callback
    from loop import EpochTimer

    class SaveAsItGoes(Callback):
        """``save()`` after each training epoch and evaluation (a timeout keeps what was measured)."""

        def __init__(self) -> None:
            self.last = time.perf_counter()  # when the last of them ended

        def on_train_epoch_end(self, trainer, pl_module) -> None:
            self.last = time.perf_counter()
            save_now(trainer)

        def on_validation_end(self, trainer, pl_module) -> None:
            self.last = time.perf_counter()
            save_now(trainer)

    train, test = (640, 128) if args.quick else (50000, 10000)
    work = Path(tempfile.mkdtemp(prefix="gpu_check_"))
    root = common.fake_cifar10(work / "cifar10", train, test, args.device)
    extra = [*COMPILED, "--trainer.max_epochs=2", "--trainer.check_val_every_n_epoch=2"]
    # --quick: the machinery (its own process, the records) without compiling (a minute and more on 2 CPU cores)
    extra += ["--trainer.limit_train_batches=2", "--model.init_args.compile=false"] * args.quick
    cli = cifar10_run("cifar10_simclr", args, root, work / "runs", extra)
    timer = EpochTimer()
    record = {
        "model": f"{type(cli.model).__name__}/{cli.model.hparams['backbone']}", "batch": cli.datamodule.batch_size,
        "train_images": train, "precision": str(cli.trainer.precision), "epochs_s": [], "evaluations": [],
        "scaled": "", "after_last_evaluation_s": None, "compile": bool(cli.model.hparams["compile"]),
        "channels_last": cli.model.hparams["channels_last"], "dynamo": [],
    }  # fmt: skip

    def save_now(trainer: Any) -> None:
        from train_step import dynamo_record

        record["dynamo"].append({"epoch": trainer.current_epoch, "validating": trainer.validating, **dynamo_record()})
        epoch = len(trainer.train_dataloader) * cli.datamodule.batch_size  # images in a whole epoch
        record["epochs_s"] = [seconds * epoch / max(images, 1) for seconds, images in timer.train]  # 1 unless limited
        record["evaluations"] = list(timer.evaluations)
        images = timer.train[-1][1] if timer.train else epoch
        record["scaled"] = f"scaled ×{epoch / max(images, 1):.0f} from {images} images" if images < epoch else "whole epochs"
        save(args.out, "compiled/cifar10_simclr", record)

    saving = SaveAsItGoes()
    cli.trainer.callbacks += [timer, saving]
    cli.trainer.fit(cli.model, cli.datamodule)
    record["after_last_evaluation_s"] = time.perf_counter() - saving.last
    save(args.out, "compiled/cifar10_simclr", record)


def synchronize(device: str) -> None:
    import torch

    if device == "cuda":
        torch.cuda.synchronize()


def part_syncs(args: argparse.Namespace) -> None:
    """A few training steps of each CIFAR-10 method with every host-device sync listed."""
    import common
    from syncs import SyncListing

    work = Path(tempfile.mkdtemp(prefix="gpu_check_"))
    root = common.fake_cifar10(work / "cifar10", 640 if args.quick else 50000, 128 if args.quick else 10000, args.device)
    steps = 6 if args.quick else 12
    # --quick: MoCo alone (its queue makes it the likeliest to sync), with the host reads listed instead
    for name in ["cifar10_moco"] if args.quick else ["cifar10_simclr", "cifar10_moco", "cifar10_memory_bank"]:
        extra = ["--trainer.max_epochs=1", f"--trainer.limit_train_batches={steps}", "--trainer.limit_val_batches=0"]
        extra += [f"--trainer.log_every_n_steps={3 if args.quick else 5}"]
        # on the CPU NumericalHealth reads its flag every step (free there): decide on the device, as a GPU does
        extra += ["--health.read_every_step=false"] * (args.device == "cpu")
        cli = cifar10_run(name, args, root, work / "runs", extra)
        listing = SyncListing()
        cli.trainer.callbacks.insert(0, listing)  # first: its window opens before any other callback's hook
        cli.trainer.fit(cli.model, cli.datamodule)
        record = syncs_record(listing, args.device)
        save(args.out, f"syncs/{name}", record)
        print(f"{name}: {syncs_per_unlogged_step(record):.1f} syncs per step that does not log; {syncs_notes(record)}")


def part_loader(args: argparse.Namespace) -> None:
    """The ImageNet-100 loader at two worker counts, the views made in the workers (PIL) and from JPEGs
    decoded on the device (``augment_on: device``), against the ResNet-50 step on its batches."""
    import torch
    from common import build_run, workers_started_by, write_jpeg_tree
    from data import loader_rate
    from train_step import autocast

    per_class, batch, workers, batches = (1, 2, (1, 2), 4) if args.quick else (32, 128, (8, 16), 20)
    work = Path(tempfile.mkdtemp(prefix="gpu_check_"))
    start = start_time = time.perf_counter()
    images = write_jpeg_tree(work, per_class, os.cpu_count() or 1)
    print(f"{images} training JPEGs written in {time.perf_counter() - start:.1f} s", flush=True)
    cuda = args.device == "cuda"
    config = ["--config", "configs/imagenet100/memory_bank.yaml", f"--data.init_args.root={work}"]
    config += [f"--data.init_args.batch_size={batch}", f"--trainer.accelerator={'gpu' if cuda else 'cpu'}"]
    cli = build_run(config)
    model, datamodule = cli.model, cli.datamodule
    datamodule.train_views = lambda: model.train_views  # no Trainer attached: ask the method directly
    datamodule.setup("fit")
    model.bank.resize(datamodule.num_samples("train"))
    print(f"model and data built ({time.perf_counter() - start:.0f} s into the part)", flush=True)
    record = {"batch": batch, "images": images, "sizes": "240–520 px a side", "loader_img_per_s": {}, "precision": ""}
    record |= {"decoded_on_device_img_per_s": {}, "workers": {}}
    device = torch.device(args.device)
    taken: list = []
    # The worker path first: forked workers are safe only before this process touches CUDA (pinning does).
    # First the start the application does not take here (forks on a GPU machine, the fork server on the CPU),
    # at the first worker count: whether the workers' start changes their pace; then the application's own.
    other = "fork" if cuda else "fork_server"
    runs = [("workers", workers[0], other)] + [("workers", count, "auto") for count in workers]
    runs += [("device", count, "auto") for count in workers]
    for augment_on, count, started_by in runs:
        datamodule.augment_on, datamodule.num_workers = augment_on, count
        on = device if augment_on == "device" else None
        with workers_started_by(started_by):
            rate, batches_taken, used = loader_rate(datamodule, min(batches, images // batch - 1), model.train_views, on)
        if augment_on == "workers" and started_by == "auto":
            taken = batches_taken
            record["loader_img_per_s"][str(count)] = rate
            record["workers"][str(count)] = used
        elif augment_on == "workers":
            record["other_start"] = {"workers": count, "img_per_s": rate, **used}
        else:
            record["decoded_on_device_img_per_s"][str(count)] = rate
        save(args.out, "loader", record)
        print(f"loader, views made on {augment_on}, {count} workers started by {used['start']}: {rate:.0f} img/s "
              f"({time.perf_counter() - start_time:.0f} s into the part)", flush=True)  # fmt: skip
    precision = "bf16" if cuda else "32"
    model.to(device).train()
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
    on_device = [([v.to(device) for v in views], labels.to(device), indices.to(device)) for views, labels, indices in taken]

    def step(batch_: Any) -> None:
        optimizer.zero_grad(set_to_none=True)
        with autocast(device, precision):
            loss = model.loss(model.contrast(batch_)).value
        loss.backward()
        model.on_after_backward()
        optimizer.step()

    warm_up = 1 if args.quick else 3
    for item in on_device[:warm_up]:  # cuDNN's algorithm choice, the allocator's pools
        step(item)
    synchronize(args.device)
    start = time.perf_counter()
    timed = on_device[warm_up : warm_up + 1] if args.quick else on_device[warm_up:] * 2
    for item in timed:
        step(item)
    synchronize(args.device)
    record |= {"step_img_per_s": len(timed) * batch / (time.perf_counter() - start), "precision": precision}
    save(args.out, "loader", record)


def part_augment(args: argparse.Namespace) -> None:
    """One call of the batched training views: tensor ops, CUDA kernels, ms (augment.py --calls);
    run in the train_step part after the compiled step (its profiler and CUDA graph capture do not
    precede the compile)."""
    import torch
    from augment import call_cases, time_calls

    from datamodules import device_augment

    device, batch = torch.device(args.device), 64 if args.quick else 512
    cases = call_cases(device_augment, device, batch)
    time_calls(cases, device, calls=3 if args.quick else 50, rounds=1 if args.quick else 3)
    paths = {path: {key: value for key, value in case.items() if key != "call"} for path, case in cases.items()}
    save(args.out, "augment", {"batch": batch, "paths": paths})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=["cpu", "cuda"], required=True)
    parser.add_argument("--quick", action="store_true", help="CPU-sized parts (tests the machinery; < 3 min on 2 cores)")
    parser.add_argument("--out", type=Path, required=True, help="summary.md, results.json and log.txt go here")
    parser.add_argument("--parts", nargs="+", choices=PARTS, default=list(PARTS), help="some of them (e.g. a rerun)")
    parser.add_argument("--part", choices=PARTS, help=argparse.SUPPRESS)  # one part, in this process (the driver's child)
    args = parser.parse_args(argv)
    if args.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            parser.error("--device cuda: torch sees no CUDA device")
    if args.part is None:
        return drive(args)
    import lightning
    import torch

    save(args.out, "versions", {"torch": torch.__version__, "lightning": lightning.__version__})
    torch.set_num_threads(2 if args.quick else min(8, os.cpu_count() or 1))
    parts = {
        "tests": part_tests, "train_step": part_train_step, "epoch": part_epoch, "compiled": part_compiled,
        "syncs": part_syncs, "loader": part_loader,
    }  # fmt: skip
    parts[args.part](args)
    # Everything is saved: skip the interpreter's teardown (loader workers, logger threads), which took
    # several seconds on 2 busy cores, enough to run a part past its budget after it had finished.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main())
