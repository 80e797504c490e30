"""Every figure is a readable PNG, or is skipped with a note when its data is absent."""

from __future__ import annotations

import matplotlib.image
import numpy as np
from PIL import Image

from ssl_app.report.figures import draw_all
from ssl_app.report.groups import group_runs
from ssl_app.report.runs import load_runs
from ssl_app.report.summary import build_rows
from tests.ssl_app.report.fakes import run_config, write_run

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
FIGURES = [
    "uniformity_tolerance_vs_temperature.png",
    "uniformity_tolerance_plane.png",
    "similarity_distributions.png",
    "metric_curves.png",
    "relative_penalty.png",
    "hardness_profile.png",
]


def assert_valid_png(path):
    assert path.read_bytes()[:8] == PNG_MAGIC
    with Image.open(path) as image:
        image.verify()
    height, width, _ = matplotlib.image.imread(path).shape
    assert height > 100 and width > 100


def test_every_figure_is_a_valid_png(study, tmp_path):
    results = draw_all(build_rows(group_runs(load_runs(study.root))), tmp_path, title="fake")

    assert [result.name for result in results] == FIGURES
    for result in results:
        assert result.path == tmp_path / result.name, result.note
        assert_valid_png(result.path)


def test_figures_without_their_data_are_skipped_with_a_note(tmp_path):
    runs_dir = tmp_path / "runs"
    for seed in (0, 1):  # one τ, no histograms
        write_run(runs_dir / f"s{seed}", run_config("InfoNCE", seed, 0.5), {"uniformity": 3.0 + seed, "tolerance": 0.3})
    write_run(runs_dir / "simple", run_config("Simple", 0), {"uniformity": 1.7, "tolerance": 0.6})

    results = {r.name: r for r in draw_all(build_rows(group_runs(load_runs(runs_dir))), tmp_path / "out")}

    assert results["uniformity_tolerance_vs_temperature.png"].path is None
    assert "temperature" in results["uniformity_tolerance_vs_temperature.png"].note
    assert results["similarity_distributions.png"].path is None
    assert results["relative_penalty.png"].path is None and "top<k>_negative" in results["relative_penalty.png"].note
    assert "similarity/positive" in results["similarity_distributions.png"].note
    assert results["hardness_profile.png"].path is None and "hardness/mean_share" in results["hardness_profile.png"].note
    for name in ("uniformity_tolerance_plane.png", "metric_curves.png"):
        assert_valid_png(results[name].path)
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["metric_curves.png", "uniformity_tolerance_plane.png"]


def test_panels_share_their_axes_drop_what_nothing_logged_and_say_their_counts(tmp_path):
    """Two τ whose similarities span different ranges and whose uniformities differ by 0.003;
    no run logs anything but uniformity and tolerance."""
    runs_dir = tmp_path / "runs"
    rng = np.random.default_rng(0)
    for tau, low, uniformity in ((0.2, 0.6, 3.500), (0.5, -0.4, 3.503)):
        write_run(
            runs_dir / f"t{tau}",
            run_config("InfoNCE", 0, tau),
            {"uniformity": uniformity, "tolerance": 0.3},
            epochs=2,
            positive=rng.uniform(low + 0.2, 1.0, 200),
            negatives=rng.uniform(low, 0.9, 2000),
        )
    results = {r.name: r for r in draw_all(build_rows(group_runs(load_runs(runs_dir))), tmp_path / "out")}

    panels = [axis for axis in results["similarity_distributions.png"].figure.axes if axis.get_visible()]
    assert len(panels) == 2
    assert {axis.get_xlim() for axis in panels} == {(-1.0, 1.0)} and len({axis.get_ylim() for axis in panels}) == 1
    assert all(axis.get_ylabel() == "density" for axis in panels)
    steps = [{round(float(x), 9) for x in axis.patches[0].get_path().vertices[:, 0]} for axis in panels]
    assert steps[0] == steps[1]  # the same bins

    curves = [axis.get_ylabel() for axis in results["metric_curves.png"].figure.axes if axis.get_visible()]
    assert len(curves) == 2 and all("uniformity" in label or "tolerance" in label for label in curves), curves

    uniformity_axis = results["uniformity_tolerance_vs_temperature.png"].figure.axes[0]
    low, high = uniformity_axis.get_ylim()
    assert high - low >= 0.4  # 0.003 apart does not fill the panel

    penalty = results["relative_penalty.png"].figure
    legends = [axis.get_legend() for axis in penalty.axes]
    said = [legend.get_title().get_text() or text.get_text() for legend in legends for text in legend.get_texts()]
    assert said and all("evaluation negatives per anchor" in text for text in said), said
    assert "loss/used_negatives" in penalty.get_supxlabel()
