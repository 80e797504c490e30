"""The evaluation figures: fixed axes at every epoch, titles naming the run, the plane's path in the
checkpoint state, the spectrum's α beside the effective rank."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from callbacks import EmbeddingMetrics
from callbacks.plane_path import PLANE_PATH_TAG, PlanePath, PlanePoint
from callbacks.plots import figure_title, similarity_figure
from callbacks.spectrum_plot import SPECTRUM_TAG, local_spectra, spectrum_figure
from ssl_app.drawing.figures import DENSITY_LIMIT
from ssl_app.errors import ConfigError
from ssl_app.metrics.rank import power_law_exponent, singular_values
from tests.callbacks.helpers import EPOCHS, events, last_scalars
from tests.callbacks.test_embedding_metrics import clean_backbone_features, clean_embeddings


def axes_of(figure):
    """``(xlim, ylim, x edges of every bar)`` of a one-panel figure."""
    axes = figure.axes[0]
    edges = sorted({round(patch.get_x(), 9) for patch in axes.patches})
    return axes.get_xlim(), axes.get_ylim(), edges


def test_figures_of_two_epochs_share_their_axes_and_bins():
    early = similarity_figure(torch.rand(40) * 0.8 + 0.2, torch.rand(40, 10) * 0.3 + 0.6, 10, "epoch 0")
    late = similarity_figure(torch.rand(40) * 1.6 - 0.6, torch.rand(40, 10) * 1.2 - 0.6, 10, "epoch 9")
    assert axes_of(early)[0] == axes_of(late)[0] == (-1.0, 1.0)
    assert axes_of(early)[2] == axes_of(late)[2] and len(axes_of(early)[2]) == 50  # the 50 fixed bins
    assert axes_of(early)[1] == axes_of(late)[1] == (0.0, DENSITY_LIMIT)  # the density axis does not follow the data
    collapsed = similarity_figure(torch.full((40,), 0.99), torch.full((40, 10), 0.99), 10, "collapsed")
    assert axes_of(collapsed)[1] == (0.0, DENSITY_LIMIT)
    assert max(patch.get_height() for patch in collapsed.axes[0].patches) == DENSITY_LIMIT  # cut at the top
    assert [len(line.get_xdata()) for line in collapsed.axes[0].lines] == [1, 1]  # and marked, for each series
    narrowed = similarity_figure(torch.tensor([-0.9, 0.1]), torch.tensor([[0.95]]), 1, "t", x_range=(0.0, 0.5))
    assert axes_of(narrowed)[0] == (0.0, 0.5)
    counts = [patch.get_height() for patch in narrowed.axes[0].patches]
    assert counts[0] > 0 and counts[-1] > 0  # values outside the range land in the edge bins
    with pytest.raises(ConfigError, match="similarity_range"):
        EmbeddingMetrics(similarity_range=(0.5, 0.5))

    few = PlanePath()
    few.add(0, 1.0, 0.5)
    many = PlanePath()
    for epoch, (u, t) in enumerate([(0.5, 0.9), (2.0, 0.4), (3.5, 0.1)]):
        many.add(epoch, u, t)
    assert few.figure("a").axes[0].get_xlim() == many.figure("b").axes[0].get_xlim() == (0.0, 4.0)
    assert few.figure("a").axes[0].get_ylim() == many.figure("b").axes[0].get_ylim() == (0.0, 1.0)
    small = spectrum_figure({"projection": torch.tensor([3.0, 1.0])}, "a")
    wide = spectrum_figure({"projection": torch.logspace(0, -3, 16)}, "b")
    assert small.axes[0].get_ylim() == wide.axes[0].get_ylim()


def test_a_fit_logs_the_path_and_spectrum_every_epoch_and_keeps_the_path_in_its_state(tiny_run):
    trainer, model, data, log_dir = tiny_run
    logged = events(log_dir)
    for tag in (PLANE_PATH_TAG, SPECTRUM_TAG, "similarity/positive_vs_top10_negative"):
        assert len(logged.Images(tag)) == EPOCHS, tag
    title = figure_title(trainer, model, "x")
    assert title.startswith("run/version_0 (InfoNCE τ=0.5)\nepoch") and title.endswith(": x")
    callback = next(c for c in trainer.callbacks if isinstance(c, EmbeddingMetrics))
    state = callback.state_dict()
    uniformity = [e.value for e in logged.Scalars("metrics/uniformity")]
    tolerance = [e.value for e in logged.Scalars("metrics/tolerance")]
    assert [point[0] for point in state["plane_path"]] == list(range(EPOCHS))
    assert np.allclose([point[1:] for point in state["plane_path"]], list(zip(uniformity, tolerance)), atol=1e-5)
    resumed = EmbeddingMetrics()
    resumed.load_state_dict(state)
    assert resumed.figures.path.points == callback.figures.path.points
    logged = last_scalars(log_dir)
    _, clean = clean_embeddings(model, data)
    backbone = clean_backbone_features(model, data)
    assert logged["metrics/spectrum_alpha"] == pytest.approx(float(power_law_exponent(singular_values(clean))), abs=1e-5)
    alpha_backbone = float(power_law_exponent(singular_values(backbone, normalize=False)))
    assert logged["metrics/spectrum_alpha_backbone"] == pytest.approx(alpha_backbone, abs=1e-5)
    assert logged["metrics/spectrum_alpha"] > 0  # a decaying spectrum


def test_the_path_replaces_a_repeated_epoch_and_skips_unlabelled_points():
    path = PlanePath()
    path.add(0, 1.0, 0.5)
    path.add(0, 2.0, 0.4)
    path.add(1, 2.5, float("nan"))
    assert path.points == [PlanePoint(0, 2.0, 0.4)]
    assert PlanePath().figure("empty") is None


def test_the_spectrum_leaves_out_non_finite_rows_and_a_missing_backbone():
    clean = torch.randn(6, 4)
    clean[2, 1] = float("nan")
    spectra = local_spectra(clean, None)
    assert list(spectra) == ["projection"]
    assert torch.allclose(spectra["projection"], singular_values(clean[[0, 1, 3, 4, 5]]))
    assert local_spectra(clean[:1], torch.full((1, 3), float("inf"))) == {}


def test_a_validation_of_a_checkpoint_names_its_run_epoch_and_step(tmp_path, monkeypatch):
    """``validate`` of an epoch-2 checkpoint, as the CLI files it (``<run>/evaluations/validate_0``): catches the
    figures titled by the evaluation's own folder at "epoch 0" (Lightning restores only the weights, so the trainer's
    epoch and step stay 0) and the plane's current point placed at epoch 0 (main before issue 40)."""
    from lightning.pytorch.callbacks import ModelCheckpoint
    from lightning.pytorch.loggers import TensorBoardLogger

    from callbacks.evaluation_figures import EvaluationFigures
    from tests.callbacks.helpers import tiny_data, tiny_model, tiny_trainer

    run = tmp_path / "sweep" / "tau=0.2" / "seed1"
    saving = ModelCheckpoint(dirpath=run / "checkpoints", filename="last")
    trainer = tiny_trainer([saving], logger=False, max_epochs=3, limit_val_batches=0, enable_checkpointing=True)
    data, model = tiny_data(), tiny_model()
    trainer.fit(model, data)
    checkpoint = run / "checkpoints" / "last.ckpt"
    saved = torch.load(checkpoint, weights_only=True)
    assert saved["epoch"] == 2 and saved["global_step"] == 6
    titles, currents = [], []
    drawings = EvaluationFigures.drawings

    def spy(self, trainer, pl_module, report, distributions, clean, fitting):
        found = drawings(self, trainer, pl_module, report, distributions, clean, fitting)
        titles.extend(drawing.title.split("\n") for _, drawing in found)
        currents.extend(drawing.points[-1][0] for tag, drawing in found if tag == PLANE_PATH_TAG)
        return found

    monkeypatch.setattr(EvaluationFigures, "drawings", spy)
    logger = TensorBoardLogger(str(run), name="evaluations", version="validate_0")
    validating = tiny_trainer([EmbeddingMetrics()], logger=logger)
    validating.validate(tiny_model(), data, ckpt_path=str(checkpoint), weights_only=True)
    assert len(titles) == 3 and {run for run, _ in titles} == {"tau=0.2/seed1 (InfoNCE τ=0.5)"}, titles
    assert all(where.startswith("validate of epoch 2, step 6: ") for _, where in titles), titles
    assert currents == [2]
    assert len(events(logger.log_dir).Images(SPECTRUM_TAG)) == 1
