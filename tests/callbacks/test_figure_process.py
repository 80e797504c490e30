"""The evaluation figures drawn in a process of their own: the same images, each at its evaluation's
step, written by the end of ``fit``, also when the fit fails or is stopped by a signal, and drawn here
when the process cannot draw them."""

from __future__ import annotations

import copy
import io
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from lightning.pytorch.callbacks import Callback
from PIL import Image
from torch.utils.tensorboard._utils import figure_to_image

from callbacks import EmbeddingMetrics, figure_process
from callbacks.figure_process import MAX_PENDING, FigureDrawer
from callbacks.plane_path import PLANE_PATH_TAG, PlanePath
from callbacks.spectrum_plot import SPECTRUM_TAG, spectrum_drawing
from ssl_app.drawing.figures import SimilarityDensities
from tests.callbacks.helpers import events, tensorboard, tiny_data, tiny_model, tiny_trainer

REPO = Path(__file__).resolve().parents[2]
FIGURE_TAGS = ("similarity/positive_vs_top10_negative", PLANE_PATH_TAG, SPECTRUM_TAG)


def drawings() -> list:
    path = PlanePath()
    for epoch, (u, t) in enumerate([(0.5, 0.9), (2.0, 0.4), (3.5, 0.1)]):
        path.add(epoch, u, t)
    densities = tuple(float(x) for x in np.linspace(0.0, 14.0, 50))
    return [
        ("a", SimilarityDensities(densities, densities[::-1], 0.71, -0.02, 10, "run/version_0\nepoch 3: x")),
        ("b", path.drawing("run/version_0\nepoch 3: path")),
        ("c", spectrum_drawing({"projection": torch.logspace(0, -3, 16), "backbone": torch.linspace(5, 1, 32)}, "s")),
    ]


def pixels(png: bytes) -> np.ndarray:
    image = Image.open(io.BytesIO(png))
    assert image.mode == "RGB"  # add_figure writes RGB
    return np.asarray(image)


def test_the_process_draws_the_images_add_figure_would_write():
    """Catches the process drawing something else than this process would (another size, dpi, margins
    or data), or images that differ from what TensorBoard's ``add_figure`` writes for the same figure;
    and a job that is not written, or written twice."""
    written: list[tuple[str, bytes]] = []
    drawer = FigureDrawer(process=True)
    drawer.submit(drawings(), lambda images: written.extend((tag, image.png) for tag, image in images))
    drawer.finish()
    assert [where for _, where in drawer.drawn] == ["process"]
    here: list[tuple[str, bytes]] = []
    FigureDrawer(process=False).submit(drawings(), lambda images: here.extend((tag, image.png) for tag, image in images))
    assert [tag for tag, _ in written] == ["a", "b", "c"]
    assert written == here  # the same PNG bytes
    for (_, png), (_, spec) in zip(written, drawings()):
        expected = figure_to_image(spec.figure()).transpose(1, 2, 0)  # what add_figure encodes, [H, W, 3]
        assert np.array_equal(pixels(png), expected)


def test_a_copied_drawer_starts_without_the_process():
    """Catches a callback that cannot be pickled or deep-copied (``ddp_spawn``) once its drawing process
    runs, or a copy that shares the process and its jobs."""
    drawer = FigureDrawer(process=True)
    drawer.submit(drawings()[:1], lambda images: None)
    copied = copy.deepcopy(drawer)
    assert copied.process and copied.pending == 0 and copied._worker is None
    drawer.finish()
    assert drawer.pending == 0 and [where for _, where in drawer.drawn] == ["process"]


def test_a_dead_process_leaves_its_figures_to_this_one():
    """Catches figures lost when the drawing process dies (killed, out of memory) with jobs in hand, or
    a drawer that keeps sending to it: the pending job and the later ones are drawn here, one warning."""
    written: list[str] = []
    drawer = FigureDrawer(process=True)
    drawer.submit(drawings(), lambda images: written.extend(tag for tag, _ in images))
    drawer._worker.kill()  # before it could answer (it is still importing matplotlib)
    with pytest.warns(UserWarning, match="drawing process"):
        drawer.finish()
        drawer.submit(drawings()[:1], lambda images: written.extend(tag for tag, _ in images))
    assert written == ["a", "b", "c", "a"]
    assert [where for _, where in drawer.drawn] == ["here", "here"]


def test_a_process_found_dead_between_evaluations_is_not_replaced():
    """Catches a drawer that, finding at the next evaluation that its process died with a job in hand, draws
    that job here but sends the new one to a fresh process (a second warning-less process per failure):
    both are drawn here, in order, and no process is started."""
    written: list[str] = []
    drawer = FigureDrawer(process=True)
    drawer.submit(drawings()[:1], lambda images: written.append("first"))
    drawer._worker.kill()
    while drawer._answers.empty():  # the reader sees the process's output end
        time.sleep(0.01)
    with pytest.warns(UserWarning, match="the drawing process ended"):
        drawer.submit(drawings()[:1], lambda images: written.append("second"))
    assert written == ["first", "second"] and drawer._worker is None and drawer.pending == 0
    assert [where for _, where in drawer.drawn] == ["here", "here"]


def test_a_process_that_stops_answering_cannot_hang_the_fit(monkeypatch):
    """Catches a fit blocked for good by a drawing process that no longer reads its jobs (stopped, stuck
    in a draw: evaluation after evaluation would fill its pipe, and ``finish`` wait for it forever) or a
    process left behind: past ``MAX_PENDING`` jobs the drawer waits ``FINISH_TIMEOUT_S``, ends the
    process, and draws every job here, in order."""
    monkeypatch.setattr(figure_process, "FINISH_TIMEOUT_S", 0.2)
    written: list[int] = []
    drawer = FigureDrawer(process=True)
    drawer.start()
    worker = drawer._worker
    os.kill(worker.pid, signal.SIGSTOP)
    with pytest.warns(UserWarning, match="did not answer within 0.2 s"):
        for job in range(MAX_PENDING + 2):
            drawer.submit(drawings()[:1], lambda images, job=job: written.append(job))
    assert written == list(range(MAX_PENDING + 2)) and drawer.pending == 0
    assert worker.poll() is not None and drawer._worker is None  # killed and reaped, not left behind
    assert [where for _, where in drawer.drawn] == ["here"] * (MAX_PENDING + 2)


def test_finish_ends_a_process_that_does_not_answer():
    """Catches ``finish`` (the end of ``fit``, ``on_exception``) waiting forever for a stuck process, or
    leaving it running: after ``timeout`` its job is drawn here and the process is killed."""
    written: list[str] = []
    drawer = FigureDrawer(process=True)
    drawer.start()
    worker = drawer._worker
    os.kill(worker.pid, signal.SIGSTOP)
    drawer.submit(drawings()[:1], lambda images: written.extend(tag for tag, _ in images))
    with pytest.warns(UserWarning, match="did not finish its figures within 0.2 s"):
        drawer.finish(timeout=0.2)
    assert written == ["a"] and worker.poll() is not None and drawer.pending == 0


def test_a_figure_the_process_cannot_draw_fails_here_as_it_would_have():
    """Catches a drawing error swallowed by the process (a figure silently missing): the job is drawn
    here, where the error is raised, after a warning that quotes the process's traceback."""
    bad = SimilarityDensities((1.0, 2.0, 3.0), (1.0,) * 50, 0.5, 0.1, 10, "three bins for fifty")
    drawer = FigureDrawer(process=True)
    drawer.submit([("bad", bad)], lambda images: None)
    with pytest.warns(UserWarning, match="failed on a figure"), pytest.raises(ValueError):
        drawer.finish()


class FailAfterEvaluation(Callback):
    """Raises at the end of the first evaluation, after ``EmbeddingMetrics`` handed its figures over."""

    def on_validation_epoch_end(self, trainer: Any, pl_module: Any) -> None:
        raise RuntimeError("boom")


def image_steps(log_dir: str) -> dict[str, list[int]]:
    logged = events(log_dir)
    return {tag: [image.step for image in logged.Images(tag)] for tag in FIGURE_TAGS if tag in logged.Tags()["images"]}


def test_a_failed_fit_still_writes_the_figures_of_its_evaluation(tmp_path):
    """Catches the figures of an evaluation lost when the fit fails before they are written (the drawing
    process still holding them): they are written in ``on_exception``, before the loggers close, at the
    evaluation's step."""
    logger = tensorboard(tmp_path)
    callback = EmbeddingMetrics()
    trainer = tiny_trainer([callback, FailAfterEvaluation()], logger=logger)
    with pytest.raises(RuntimeError, match="boom"):
        trainer.fit(tiny_model(), tiny_data())
    assert [where for _, where in callback.figures.drawer.drawn] == ["process"]
    steps = [event.step for event in events(logger.log_dir).Histograms("similarity/positive")]
    assert steps == [2]  # one evaluation (its scalars are not logged: the fit failed in its hooks)
    assert image_steps(logger.log_dir) == {tag: steps for tag in FIGURE_TAGS}


def test_a_fit_writes_each_figure_at_its_evaluations_step(tiny_run):
    """Catches figures written at the step they were collected at (a later one) instead of their
    evaluation's, missing at the end of the fit, or drawn in the training process during ``fit``."""
    trainer, _, _, log_dir = tiny_run
    callback = next(c for c in trainer.callbacks if isinstance(c, EmbeddingMetrics))
    steps = [event.step for event in events(log_dir).Histograms("similarity/positive")]  # written at the evaluation
    assert steps == [2, 4]  # after each epoch's 2 training steps
    assert image_steps(log_dir) == {tag: steps for tag in FIGURE_TAGS}
    assert {where for _, where in callback.figures.drawer.drawn} == {"process"}
    assert callback.figures.drawer.pending == 0 and callback.figures.drawer._worker is None  # ended with the fit


class WorkerAtFirstStep(Callback):
    """Notes the drawing process of ``metrics`` at the first training step of each fit (before any evaluation)."""

    def __init__(self, metrics: EmbeddingMetrics) -> None:
        self.metrics = metrics
        self.workers: list[Any] = []

    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> None:
        if trainer.global_step == 0:
            self.workers.append(self.metrics.figures.drawer._worker)


def test_each_fit_starts_its_own_process_with_training_and_ends_it(tmp_path):
    """Catches a process started only at the first evaluation (its imports and fonts then delay that
    evaluation's figures), one that outlives its fit, or a second fit with the same callback (the same
    command run again in one session) that reuses or loses it: each fit starts one at the start of
    training, writes every figure at its evaluation's step and ends it."""
    callback = EmbeddingMetrics()
    seen = WorkerAtFirstStep(callback)
    for run in range(2):
        logger = tensorboard(tmp_path / str(run))
        tiny_trainer([callback, seen], logger=logger).fit(tiny_model(), tiny_data())
        steps = [event.step for event in events(logger.log_dir).Histograms("similarity/positive")]
        assert steps == [2, 4] and image_steps(logger.log_dir) == {tag: steps for tag in FIGURE_TAGS}
    assert len(seen.workers) == 2 and all(worker is not None for worker in seen.workers)
    assert seen.workers[0].pid != seen.workers[1].pid
    assert all(worker.poll() is not None for worker in seen.workers) and callback.figures.drawer._worker is None
    assert [where for _, where in callback.figures.drawer.drawn] == ["process"] * 4


class SignalGroupAfterEvaluation(Callback):
    """Sends SIGTERM to the run's whole process group (the drawing process too) at the end of the first
    evaluation, after ``EmbeddingMetrics`` handed its figures over (as SLURM's scancel does)."""

    def on_validation_epoch_end(self, trainer: Any, pl_module: Any) -> None:
        if trainer.current_epoch == 0:
            os.killpg(os.getpgid(0), signal.SIGTERM)


@pytest.mark.slow
def test_a_run_stopped_by_sigterm_writes_the_figures_of_its_evaluations(tmp_path):
    """Catches the figures of an evaluation lost when a stop signal to the whole group ends the run (the
    drawing process killed by it, or never asked for them), and a drawing process left running: a real
    ``python -m ssl_app fit``, the signal sent while the figures are being drawn."""
    args = [
        sys.executable, "-m", "ssl_app", "fit", "--config", str(REPO / "configs" / "quickstart.yaml"),
        "--trainer.max_epochs=3", "--trainer.limit_train_batches=3", "--trainer.enable_progress_bar=false",
        "--trainer.num_sanity_val_steps=0", "--trainer.check_val_every_n_epoch=1",
        "--data.init_args.train_size=96", "--data.init_args.val_size=40", "--data.init_args.test_size=16",
        "--data.init_args.batch_size=32", f"--trainer.callbacks+={__name__}.SignalGroupAfterEvaluation",
        f"--trainer.logger.init_args.save_dir={tmp_path}",
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(REPO), "PYTHONUNBUFFERED": "1"}
    run = subprocess.Popen(args, cwd=tmp_path, env=env, stderr=subprocess.PIPE, text=True, start_new_session=True)
    _, stderr = run.communicate(timeout=300)
    assert run.returncode == 128 + signal.SIGTERM, stderr[-3000:]
    assert "Interrupted by SIGTERM" in stderr
    log_dir = next(tmp_path.glob("quickstart/version_*"))
    steps = [event.step for event in events(log_dir).Histograms("similarity/positive")]
    assert steps == [3]  # the first evaluation only, after 3 training steps
    assert image_steps(str(log_dir)) == {tag: steps for tag in FIGURE_TAGS}
    with pytest.raises(ProcessLookupError):  # nothing of the run's group is left running
        os.killpg(run.pid, 0)
