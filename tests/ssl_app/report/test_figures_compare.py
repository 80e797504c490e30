"""The report's figures compare a study's runs (issue 40, item 5): every run drawn, constants included; one epoch
axis for every per-epoch figure; a run named by its policy's canonical label; legends outside the data."""

from __future__ import annotations

import math

import numpy as np
import pytest

from ssl_app.losses import InfoNCE
from ssl_app.report.figures import EPOCH_AXIS_LABEL, draw_all
from ssl_app.report.groups import group_runs
from ssl_app.report.runs import load_runs
from ssl_app.report.summary import build_rows
from ssl_app.report.tau_figures import draw_tau_figures
from tests.ssl_app.report.conftest import hardness
from tests.ssl_app.report.fakes import run_config, write_run
from tests.ssl_app.report.test_tau_figures import COSINE, cosine

EPOCHS = 3
PER_EPOCH_FIGURES = ("metric_curves.png", "temperature_curves.png")


def write_mixed_study(root, constants=(0.2, 0.5), seeds=(0, 1)):
    """Constant τs and a cosine schedule, ``seeds`` each, with the histograms the penalty, similarity and hardness
    figures read. τ is written as the methods wrote it before ``OnChange.hold``: on change only, so a constant τ is
    one point at the first step (the issue's sweep) while the schedule is a point at every step."""
    rng = np.random.default_rng(0)
    for seed in seeds:
        for index, tau in enumerate((*constants, None)):
            final = {"knn_acc": 0.4 + 0.01 * index, "uniformity": 2.0 + 0.2 * index, "tolerance": 0.5 - 0.03 * index}
            name = f"t{tau}" if tau is not None else "cosine"
            write_run(
                root / name / f"seed{seed}",
                run_config("InfoNCE", seed, temperature=tau if tau is not None else COSINE),
                final,
                epochs=EPOCHS,
                positive=rng.uniform(0.3, 1.0, 200),
                negatives=rng.uniform(-0.4, 0.9, 2000),
                temperature=(lambda t, tau=tau: tau) if tau is not None else cosine,
                temperature_on_change=True,
                hardness=hardness(InfoNCE(tau or 0.5), seed),
            )
    return build_rows(group_runs(load_runs(root)))


def every_figure(rows, out_dir):
    return {result.name: result for result in draw_all(rows, out_dir) + draw_tau_figures(rows, out_dir, "fake")}


@pytest.fixture(scope="module")
def mixed(tmp_path_factory):
    root = tmp_path_factory.mktemp("mixed")
    rows = write_mixed_study(root / "runs")
    return rows, every_figure(rows, root / "out")


def test_temperature_curves_draw_every_run_constants_included(mixed):
    """Catches the issue's figure: a constant τ logged once (written on change) drew a one-point line, which
    matplotlib draws as nothing, so only the schedule was seen."""
    rows, figures = mixed
    tau_axis = figures["temperature_curves.png"].figure.axes[0]
    drawn = [line for line in tau_axis.get_lines() if len(line.get_xdata()) >= 2]
    assert len(drawn) == sum(len(row.runs) for row in rows) == 6
    for tau in (0.2, 0.5):
        flat = [line for line in drawn if set(np.round(line.get_ydata(), 6)) == {tau}]
        assert len(flat) == 2, f"τ={tau}: one flat line per seed"
        for line in flat:  # across the whole run, from its start to its last epoch
            assert min(line.get_xdata()) == 0.0 and max(line.get_xdata()) == EPOCHS


def test_per_epoch_figures_share_one_epoch_axis(mixed):
    """Catches metric_curves on Lightning's 0-based epoch (0–2) beside temperature_curves on epochs trained (1–3):
    the same final value at two different x."""
    _, figures = mixed
    axes = [axis for name in PER_EPOCH_FIGURES for axis in figures[name].figure.axes if axis.get_visible()]
    assert len(axes) > 3
    shown = [axis for axis in axes if axis.get_xlabel()]
    assert shown and {axis.get_xlabel() for axis in shown} == {EPOCH_AXIS_LABEL}
    assert len({tuple(np.round(axis.get_xlim(), 9)) for axis in axes}) == 1
    # the last epoch's uniformity sits at the same x in both figures: after EPOCHS epochs of training
    metric_axis = next(axis for axis in figures["metric_curves.png"].figure.axes if "uniformity" in axis.get_ylabel())
    tau_axis = figures["temperature_curves.png"].figure.axes[1]
    for axis in (metric_axis, tau_axis):
        assert {float(max(line.get_xdata())) for line in axis.get_lines() if len(line.get_xdata())} == {EPOCHS}


def test_a_run_is_named_by_its_policy_never_by_a_last_value(mixed):
    """Catches relative_penalty.png's ``τ=0.995621`` (the cosine run's last τ) as the schedule's name: every run
    legend names a configuration by its canonical label, the one the table prints."""
    rows, figures = mixed
    labels = {row.configuration.label for row in rows}
    assert "InfoNCE τ=cosine:0.1-1:T=2" in labels
    for name in ("relative_penalty.png", "temperature_curves.png", "metric_curves.png", "uniformity_tolerance_paths.png"):
        texts = legend_texts(figures[name].figure)
        named = {label for label in labels if any(text == label or text.startswith(label + " (") for text in texts)}
        assert named == labels, (name, texts)
    penalty = legend_texts(figures["relative_penalty.png"].figure)
    assert not any(text.startswith("τ=") for text in penalty), penalty  # the old ``τ=0.6625`` (its last τ)


def test_legends_sit_outside_the_data_with_many_runs(tmp_path):
    """Catches a legend drawn over the curves (matplotlib's ``loc="best"`` inside the axes): with seven
    configurations no legend of any report figure overlaps a panel's data area."""
    rows = write_mixed_study(tmp_path / "runs", constants=(0.05, 0.1, 0.2, 0.3, 0.5, 1.0), seeds=(0,))
    assert len(rows) == 7
    figures = every_figure(rows, tmp_path / "out")
    checked = 0
    for name, result in figures.items():
        assert result.figure is not None, (name, result.note)
        renderer = result.figure.canvas.get_renderer()
        panels = [axis.get_window_extent(renderer) for axis in result.figure.axes if axis.get_visible()]
        for legend in legends(result.figure):
            box = legend.get_window_extent(renderer)
            for panel in panels:
                assert not overlap(box, panel), f"{name}: a legend covers a panel"
            checked += 1
    assert checked >= len(figures) - 1  # the plane has a legend only for the paper's points (--reference)


def legends(figure):
    axes_legends = [axis.get_legend() for axis in figure.axes if axis.get_visible()]
    return list(figure.legends) + [legend for legend in axes_legends if legend is not None]


def legend_texts(figure) -> list[str]:
    return [text.get_text() for legend in legends(figure) for text in legend.get_texts()]


def overlap(a, b, tolerance: float = 1.0) -> bool:
    """Whether two pixel boxes overlap by more than ``tolerance`` pixels each way."""
    width = min(a.x1, b.x1) - max(a.x0, b.x0)
    height = min(a.y1, b.y1) - max(a.y0, b.y0)
    return width > tolerance and height > tolerance and not math.isclose(width, 0.0)


def test_a_long_title_runs_over_no_legend(tmp_path):
    """Catches the heading of a figure with its legend beside the panels running over that legend (the beyond
    study's ``--title`` hid the start of ``temperature_curves.png``'s legend): the heading is wrapped until clear."""
    from ssl_app.report.figures import draw_all
    from ssl_app.report.tau_figures import draw_tau_figures

    rows = write_mixed_study(tmp_path / "runs", constants=(0.1, 0.5), seeds=(0,))
    title = "Beyond-softmax study, CIFAR-10 at CPU scale, with a title as long as a study's"
    figures = {
        result.name: result
        for result in draw_all(rows, tmp_path / "out", title) + draw_tau_figures(rows, tmp_path / "out", title)
    }
    checked = 0
    for name, result in figures.items():
        if result.figure is None:
            continue
        renderer = result.figure.canvas.get_renderer()
        heading = result.figure.get_suptitle()
        assert heading.replace("\n", " ").startswith(title), name
        box = result.figure._suptitle.get_window_extent(renderer)
        for legend in legends(result.figure):
            assert not overlap(box, legend.get_window_extent(renderer)), f"{name}: the heading runs over a legend"
            checked += 1
    assert checked >= 3
