"""The measured hardness profile in the report: a sweep of four losses, logged by the writer the
methods use, read back and drawn as one figure with a curve per configuration."""

from __future__ import annotations

import numpy as np
import pytest

from ssl_app.losses import HardContrastive, InfoNCE, Simple
from ssl_app.report.figures import draw_hardness_profiles
from ssl_app.report.groups import group_runs
from ssl_app.report.hardness import hardness_curves
from ssl_app.report.runs import load_runs
from ssl_app.report.summary import build_rows
from tests.ssl_app.report.conftest import hardness
from tests.ssl_app.report.fakes import run_config, write_run
from tests.ssl_app.report.test_figures import assert_valid_png

BATCH = 16
K = 2 * BATCH - 2  # negatives per anchor: every other view but the anchor's positive


def test_a_sweep_of_four_losses_gets_one_curve_each_pooled_over_seeds(tmp_path):
    """Catches a configuration's curve missing, seeds averaged without their counts, the writer's
    leading bucket read as a bin (a shifted curve), or a hard loss's dropped negatives drawn as
    penalised."""
    runs = tmp_path / "runs"
    logged = {}
    sweep = (("InfoNCE", InfoNCE(0.2), 0.2, None), ("InfoNCE", InfoNCE(0.5), 0.5, None))
    sweep += (("HardContrastive", HardContrastive(0.5, num_negatives=3), 0.5, 3), ("Simple", Simple(), None, None))
    for index, (name, loss, tau, kept) in enumerate(sweep):
        for seed in (0, 1):
            profile = hardness(loss, seed=10 * index + seed, batch=BATCH)
            logged[(index, seed)] = profile
            config = run_config(name, seed, temperature=tau, num_negatives=kept)
            write_run(runs / f"c{index}s{seed}", config, {"uniformity": 3.0}, hardness=profile)

    rows = build_rows(group_runs(load_runs(runs)))
    curves = hardness_curves(rows)

    assert len(curves) == 4 and all(curve.runs == 2 for curve in curves)
    assert len({curve.label for curve in curves}) == 4
    by_label = {curve.label: curve for curve in curves}
    for index, (name, _, tau, _) in enumerate(sweep):
        [curve] = [c for c in curves if name in c.label and (tau is None or f"{tau:g}" in c.label)]
        sums = logged[(index, 0)][0] + logged[(index, 1)][0]
        counts = logged[(index, 0)][1] + logged[(index, 1)][1]
        held = (counts > 0).numpy()
        np.testing.assert_allclose(curve.share, (sums / counts.clamp_min(1)).numpy()[held], rtol=1e-5, atol=1e-7)
        np.testing.assert_allclose(curve.negatives, counts.numpy()[held])
        np.testing.assert_allclose(curve.similarity, (np.arange(20) * 0.1 - 0.95)[held], atol=1e-6)
        assert curve.per_anchor == pytest.approx(K, rel=1e-4)
    simple = next(curve for label, curve in by_label.items() if label.startswith("Simple"))
    np.testing.assert_allclose(simple.share, 1 / K, rtol=1e-5)  # no hardness-awareness: flat
    hard = next(curve for label, curve in by_label.items() if label.startswith("HardContrastive"))
    assert hard.share[0] == 0 and hard.share[-1] > 1 / K  # drops the easiest, weighs the hardest

    figure = draw_hardness_profiles(rows, tmp_path / "hardness_profile.png", "four losses")
    assert figure.path is not None, figure.note
    assert_valid_png(figure.path)


def test_a_run_whose_profile_changes_between_epochs_is_drawn_from_its_last_epoch(tmp_path):
    """Catches the curve read from the first epoch's histograms, pooled over every epoch, or its shares
    and counts taken from different epochs: two seeds of one configuration whose profile sharpens as
    τ falls (1.0, 0.3, 0.05, one profile an epoch of other views, logged by the methods' writer) must
    give exactly the last epoch's pooled profile, whose shares and counts differ from every earlier one."""
    runs = tmp_path / "runs"
    logged = []
    for seed in (0, 1):
        profiles = [hardness(InfoNCE(tau), seed=10 * seed + epoch, batch=BATCH) for epoch, tau in enumerate((1.0, 0.3, 0.05))]
        logged.append(profiles)
        write_run(runs / f"s{seed}", run_config("InfoNCE", seed, temperature=0.05), {"uniformity": 3.0}, hardness=profiles)

    [curve] = hardness_curves(build_rows(group_runs(load_runs(runs))))

    def pooled(epoch: int) -> tuple[np.ndarray, np.ndarray]:
        sums = sum(profiles[epoch][0] for profiles in logged).numpy()
        counts = sum(profiles[epoch][1] for profiles in logged).numpy()
        return sums / np.maximum(counts, 1), counts

    share, counts = pooled(-1)
    held = counts > 0
    assert curve.runs == 2
    np.testing.assert_allclose(curve.negatives, counts[held])
    np.testing.assert_allclose(curve.share, share[held], rtol=1e-5, atol=1e-7)
    for epoch in (0, 1):  # the test tells the epochs apart
        earlier, earlier_counts = pooled(epoch)
        assert np.abs(earlier[held] - share[held]).max() > 0.01 and not np.array_equal(earlier_counts, counts)
