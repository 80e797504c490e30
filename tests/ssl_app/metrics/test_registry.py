"""Effective rank of known matrices, and the metric registry: inputs, NaN fields, non-finite rows."""

from __future__ import annotations

import ast
import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from ssl_app.errors import ConfigError
from ssl_app.metrics import (
    EMBEDDING_METRICS,
    EmbeddingInputs,
    alignment,
    drop_nonfinite,
    effective_rank,
    evaluate_metrics,
    registered_fields,
    registry,
    tolerance,
    uniformity,
)
from ssl_app.metrics.embedding import topk_similarities
from ssl_app.metrics.geometry import wasserstein_uniformity
from ssl_app.metrics.rank import moments, power_law_exponent, singular_values, spectrum_effective_rank
from tests.helpers import HostSyncRecorder


def orthogonal(d: int, seed: int = 0) -> torch.Tensor:
    q, _ = torch.linalg.qr(torch.randn(d, d, generator=torch.Generator().manual_seed(seed), dtype=torch.float64))
    return q


# ------------------------------------------------------------------------------ effective rank
def test_rank_one_embeddings_have_effective_rank_one():
    direction = torch.randn(1, 16)
    z = torch.cat([direction * 2.0, -direction, direction * 0.5])  # one line, both signs
    assert effective_rank(z).item() == pytest.approx(1.0, abs=1e-6)


@pytest.mark.parametrize("d", [1, 8, 128])
def test_orthonormal_columns_have_effective_rank_d(d):
    q = orthogonal(d)  # rows unit-norm, columns orthonormal: all singular values equal
    z = torch.cat([q, q]).float()  # N = 2d rows
    assert effective_rank(z).item() == pytest.approx(d, rel=1e-5)


def test_effective_rank_matches_the_svd_formula_and_chunks_do_not_matter():
    z = torch.randn(300, 12, dtype=torch.float64) * torch.linspace(0.1, 3.0, 12, dtype=torch.float64)
    sigma = torch.linalg.svdvals(F.normalize(z, dim=1))
    p = sigma / sigma.sum()
    expected = math.exp(-(p * p.log()).sum().item())
    assert effective_rank(z).item() == pytest.approx(expected, rel=1e-10)
    assert effective_rank(z, chunk_size=7).item() == pytest.approx(expected, rel=1e-10)
    assert 1.0 < expected < 12.0


def test_unnormalised_effective_rank_is_rankme_on_the_rows_as_given():
    """Catches the backbone's effective rank (RankMe) normalising its rows like the projection's:
    rows of very different norms give another spectrum than their unit rows."""
    g = torch.Generator().manual_seed(0)
    z = torch.randn(200, 10, generator=g, dtype=torch.float64) * torch.linspace(0.2, 2.0, 10, dtype=torch.float64)
    z = z * torch.rand(200, 1, generator=g, dtype=torch.float64).mul(20)  # row norms from 0 to ~40
    sigma = torch.linalg.svdvals(z)
    p = sigma / sigma.sum()
    expected = math.exp(-(p * p.log()).sum().item())
    assert effective_rank(z, normalize=False).item() == pytest.approx(expected, rel=1e-10)
    assert effective_rank(z.float(), normalize=False, chunk_size=9).item() == pytest.approx(expected, rel=1e-5)
    assert abs(effective_rank(z).item() - expected) > 1e-2


def test_backbone_effective_rank_is_registered_and_nan_without_backbone_features():
    """Catches the RankMe metric missing from the registry (so from TensorBoard and the report),
    reading the projections instead of the backbone features, or failing when no clean pass kept
    backbone features (``uniformity_inputs: augmented``)."""
    g = torch.Generator().manual_seed(1)
    z = F.normalize(torch.randn(30, 8, generator=g), dim=1)
    features = torch.randn(30, 16, generator=g) * torch.linspace(0.1, 5.0, 16)
    labels = torch.arange(30) % 3
    report = evaluate_metrics(EmbeddingInputs(z, labels, z, z, backbone=features))
    assert report.value("effective_rank_backbone") == pytest.approx(effective_rank(features, normalize=False).item())
    assert report.value("effective_rank") == pytest.approx(effective_rank(z).item())
    assert "effective_rank_backbone" in report.scalars()
    without = evaluate_metrics(EmbeddingInputs(z, labels, z, z))
    assert math.isnan(without.value("effective_rank_backbone")) and "effective_rank_backbone" not in without.scalars()
    bad = features.clone()
    bad[0, 0] = math.nan  # a non-finite backbone row goes with its clean row
    dropped = evaluate_metrics(EmbeddingInputs(z, labels, z.clone(), z, backbone=bad))
    assert dropped.nonfinite == 1
    assert dropped.value("effective_rank_backbone") == pytest.approx(effective_rank(features[1:], normalize=False).item())


def test_train_negatives_are_the_k_largest_similarities_to_the_train_set():
    """Catches the train-set top-k excluding a candidate it must keep (the evaluation anchors are
    not in the train set), reading the second views, or a chunk boundary dropping rows."""
    g = torch.Generator().manual_seed(2)
    za, zb, train = torch.randn(30, 8, generator=g), torch.randn(30, 8, generator=g), 4 * torch.randn(50, 8, generator=g)
    brute = (F.normalize(za.double(), dim=1) @ F.normalize(train.double(), dim=1).T).sort(dim=1, descending=True).values
    found = topk_similarities(za, train, 10, chunk_size=7)
    torch.testing.assert_close(found.double(), brute[:, :10], atol=1e-6, rtol=0)
    report = evaluate_metrics(EmbeddingInputs(za, torch.arange(30) % 3, za, zb, top_k=10, train=train))
    assert report["train_neg_sim"].shape == (30, 10)
    assert report.value("train_neg_sim") == pytest.approx(brute[:, :10].mean().item(), abs=1e-6)
    assert "top10_train_neg_sim" in report.scalars()
    assert math.isnan(evaluate_metrics(EmbeddingInputs(za, torch.arange(30) % 3, za, zb)).value("train_neg_sim"))
    small = evaluate_metrics(EmbeddingInputs(za, torch.arange(30) % 3, za, zb, top_k=10, train=train[:4]))
    assert small["train_neg_sim"].shape == (30, 4)  # k is capped at the train rows


def test_two_equal_and_two_zero_singular_values_give_two():
    assert spectrum_effective_rank(torch.tensor([3.0, 3.0, 0.0, 0.0], dtype=torch.float64)).item() == pytest.approx(2.0)


def test_effective_rank_ignores_scale_and_autocast():
    z = torch.randn(64, 8)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert effective_rank(z.bfloat16() * 5).item() == pytest.approx(effective_rank(z).item(), rel=1e-2)


# ------------------------------------------------------------------------------ registry
def inputs(n: int = 40, d: int = 8, seed: int = 0, **overrides) -> EmbeddingInputs:
    g = torch.Generator().manual_seed(seed)
    clean = torch.randn(n, d, generator=g)
    view_a = clean + 0.3 * torch.randn(n, d, generator=g)
    view_b = clean + 0.3 * torch.randn(n, d, generator=g)
    backbone = 3 * torch.randn(n, 2 * d, generator=g)
    values = dict(clean=clean, labels=torch.arange(n) % 3, view_a=view_a, view_b=view_b, top_k=5, backbone=backbone)
    return EmbeddingInputs(**{**values, **overrides})


def test_each_metric_reads_the_inputs_it_declares():
    x = inputs()
    report = evaluate_metrics(x)
    assert report.value("uniformity") == pytest.approx(uniformity(x.clean).item())
    assert report.value("tolerance") == pytest.approx(tolerance(x.clean, x.labels).item())
    assert report.value("effective_rank") == pytest.approx(effective_rank(x.clean).item())
    assert report.value("effective_rank_backbone") == pytest.approx(effective_rank(x.backbone, normalize=False).item())
    assert report.value("alignment") == pytest.approx(alignment(x.view_a, x.view_b).item())
    assert report["neg_sim"].shape == (40, 5) and report["pos_sim"].shape == (40,)
    declared = {name: metric.reads for name, metric in EMBEDDING_METRICS.items()}
    assert declared["uniformity"] == ("clean",) and declared["alignment"] == ("views",)
    assert declared["tolerance"] == ("clean", "labels") and declared["effective_rank"] == ("clean",)
    assert declared["effective_rank_backbone"] == ("backbone",)
    assert declared["wasserstein_uniformity"] == ("clean",) and declared["lidar"] == ("multiview",)
    assert report.value("wasserstein_uniformity") == pytest.approx(wasserstein_uniformity(x.clean).item())
    assert math.isnan(report.value("lidar"))  # no multiview input: not computed, not logged
    assert "lidar" not in report.scalars()


def test_each_input_is_decomposed_once_per_evaluation_and_the_report_keeps_its_spectrum(monkeypatch):
    """Catches the effective rank, the power-law exponent and −W₂ of one input (and the spectrum figure after
    them) each summing its own Gram matrix again: a pass over the rows and a decomposition each per evaluation."""
    calls = []

    def counted(rows, **options):
        calls.append(options["normalize"])
        return moments(rows, **options)

    monkeypatch.setattr(registry, "moments", counted)
    x = inputs()
    report = evaluate_metrics(x)
    assert sorted(calls) == [False, True]  # the backbone as given, the clean rows normalised: once each
    assert torch.equal(report.spectra["clean"], singular_values(x.clean))
    assert torch.equal(report.spectra["backbone"], singular_values(x.backbone, normalize=False))
    assert report.value("spectrum_alpha") == pytest.approx(power_law_exponent(singular_values(x.clean)).item())
    alpha = power_law_exponent(singular_values(x.backbone, normalize=False)).item()
    assert report.value("spectrum_alpha_backbone") == pytest.approx(alpha)
    assert report.value("wasserstein_uniformity") == pytest.approx(wasserstein_uniformity(x.clean).item())


def test_the_report_reads_every_scalar_in_one_transfer():
    """Catches a report that reads its fields one ``float()`` at a time (on a GPU, a host sync per
    field: a dozen per evaluation) or whose one read gives other values than each field's mean."""
    report = evaluate_metrics(inputs(train=torch.randn(50, 8)))
    with HostSyncRecorder() as recorder:
        values = report.values()
    assert recorder.syncs == []  # one ``tolist`` per device, no scalar reads
    assert set(values) == set(report.fields)
    for name, tensor in report.fields.items():
        assert values[name] == pytest.approx(float(tensor.float().mean()), nan_ok=True), name
    assert report.scalars() == {tag: value for tag, value in report.scalars().items() if not math.isnan(value)}


def test_scalars_are_the_logged_tags_with_k_filled_in():
    """Catches a tag logged with its template unfilled (``top{k}_neg_sim``) or with the default k
    instead of the inputs' top_k, and a registered field left out of the scalars."""
    scalars = evaluate_metrics(inputs(train=torch.randn(50, 8), multiview=torch.randn(40, 3, 8))).scalars()  # top_k = 5
    assert set(scalars) == {metric.tag(name, 5) for metric, name in registered_fields()}
    assert "top5_neg_sim" in scalars and not any("{" in tag or "top10" in tag for tag in scalars)


def test_unlabelled_rows_are_left_out_of_tolerance_and_no_labels_leave_it_nan():
    x = inputs()
    labels = x.labels.clone()
    labels[:10] = -1
    partly = evaluate_metrics(inputs(labels=labels))
    assert partly.value("tolerance") == pytest.approx(tolerance(x.clean[10:], labels[10:]).item())
    unlabelled = evaluate_metrics(inputs(labels=torch.full((40,), -1)))
    assert math.isnan(unlabelled.value("tolerance")) and "tolerance" not in unlabelled.scalars()
    assert "uniformity" in unlabelled.scalars()


def test_too_few_rows_give_nan_fields_not_missing_ones():
    report = evaluate_metrics(inputs(view_a=torch.randn(1, 8), view_b=torch.randn(1, 8)))
    assert math.isnan(report.value("alignment")) and math.isnan(report.value("neg_sim"))
    assert set(report.fields) == {field for metric in EMBEDDING_METRICS.values() for field in metric.tags}
    assert "alignment" not in report.scalars() and "uniformity" in report.scalars()


def test_nonfinite_rows_are_dropped_and_counted():
    x = inputs()
    clean, view_b = x.clean.clone(), x.view_b.clone()
    clean[3, 0] = float("nan")
    view_b[7, 2] = float("inf")
    kept, bad, total = drop_nonfinite(inputs(clean=clean, view_b=view_b))
    assert (bad, total) == (2, 120)
    assert kept.clean.shape[0] == 39 and kept.labels.shape[0] == 39 and kept.view_a.shape[0] == 39
    report = evaluate_metrics(inputs(clean=clean, view_b=view_b))
    assert (report.nonfinite, report.total) == (2, 120)
    keep = torch.arange(40) != 3
    assert report.value("uniformity") == pytest.approx(uniformity(x.clean[keep]).item())
    pairs = torch.arange(40) != 7
    assert report.value("alignment") == pytest.approx(alignment(x.view_a[pairs], x.view_b[pairs]).item())
    assert all(math.isfinite(v) for v in report.scalars().values())


def test_clean_rows_taken_from_the_first_view_are_counted_once():
    x = inputs()
    view_a = x.view_a.clone()
    view_a[5, 1] = float("nan")
    kept, bad, total = drop_nonfinite(inputs(clean=view_a, view_a=view_a))
    assert (bad, total) == (1, 80)
    assert kept.clean.shape[0] == kept.view_a.shape[0] == 39


def test_a_new_metric_is_one_function_and_one_registration(monkeypatch):
    monkeypatch.setattr(registry, "EMBEDDING_METRICS", dict(registry.EMBEDDING_METRICS))

    @registry.register("mean_norm", reads=("clean",), formula="mean ||z_i|| (before normalising)")
    def _mean_norm(x: EmbeddingInputs) -> dict[str, torch.Tensor]:
        return {"mean_norm": x.clean.norm(dim=1).mean()}

    x = inputs()
    assert evaluate_metrics(x).scalars()["mean_norm"] == pytest.approx(x.clean.norm(dim=1).mean().item())
    with pytest.raises(ValueError, match="already registered"):
        registry.register("mean_norm", reads=("clean",), formula="")
    with pytest.raises(ValueError, match="reads must be"):
        registry.register("other", reads=("pixels",), formula="")


def test_a_field_or_tag_already_taken_is_refused_naming_both_metrics_and_the_field():
    """Catches a registry that lets a second metric log a tag another already logs (one field's
    value overwriting the other's in the report and in TensorBoard) or shadow a field name; each
    registration is a throwaway, removed afterwards."""
    before = dict(EMBEDDING_METRICS)
    attempts = {
        "same tag": ({"hardest": "top{k}_neg_sim"}, r"'hardest'.*'neg_sim'.*'positive_vs_topk_negatives'"),
        "the tag at one k": ({"hardest": "top5_neg_sim"}, r"'hardest'.*'neg_sim'.*'positive_vs_topk_negatives'"),
        "same field": ({"alignment": "alignment_again"}, r"'alignment'.*'alignment'.*metric 'alignment'"),
        "a callback's tag": ({"alarm": "collapsed"}, r"'alarm'.*metrics/collapsed.*callbacks\.EmbeddingMetrics"),
    }
    for what, (tags, message) in attempts.items():
        with pytest.raises(ConfigError, match=message) as refused:
            registry.register("throwaway", reads=("views",), formula="", tags=tags)
        assert "register('throwaway')" in str(refused.value), what
        assert EMBEDDING_METRICS == before, what  # nothing half-registered
    registry.register("throwaway", reads=("views",), formula="", tags={"hardest": "top{k}_hardest"})(lambda x: {})
    try:
        assert registry.EMBEDDING_METRICS["throwaway"].tag("hardest", 3) == "top3_hardest"  # a free tag is taken
        with pytest.raises(ConfigError, match=r"field 'hardest' \(metrics/top\{k\}_hardest\).*metric 'throwaway'"):
            registry.register("throwaway_2", reads=("clean",), formula="", tags={"hardest": "hardest"})
    finally:
        del EMBEDDING_METRICS["throwaway"]
    assert EMBEDDING_METRICS == before


def test_a_tag_with_another_placeholder_or_a_formula_per_unknown_field_is_refused():
    """Catches tags that would fail only when logged (``{n}`` has no value) and formulas that
    describe fields the metric does not have (the report's column meaning would be missing)."""
    with pytest.raises(ConfigError, match=r"\{k\}"):
        registry.register("throwaway", reads=("clean",), formula="", tags={"x": "top{n}_x"})
    with pytest.raises(ConfigError, match=r"one text per field \['x'\]"):
        registry.register("throwaway", reads=("clean",), formula={"y": ""}, tags={"x": "x"})
    assert "throwaway" not in EMBEDDING_METRICS


def test_a_metric_returning_undeclared_fields_is_an_error(monkeypatch):
    monkeypatch.setattr(registry, "EMBEDDING_METRICS", {})
    registry.register("bad", reads=("clean",), formula="")(lambda x: {"other": x.clean.sum()})
    with pytest.raises(ValueError, match="declared"):
        evaluate_metrics(inputs())


def test_metrics_package_imports_neither_lightning_nor_callbacks():
    package = Path(registry.__file__).parent
    imported = set()
    for source in package.rglob("*.py"):
        for node in ast.walk(ast.parse(source.read_text())):
            if isinstance(node, ast.Import):
                imported |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module:
                imported.add(node.module.split(".")[0])
    assert "torch" in imported  # the walk sees the imports
    assert not imported & {"lightning", "pytorch_lightning", "callbacks", "datamodules"}


def test_no_metric_module_imports_another_modules_private_names():
    """Catches a module reaching into another's private helpers (as ``rank`` did into
    ``embedding``'s): what modules share is public, in ``rows``."""
    package = Path(registry.__file__).parent
    private = []
    for source in package.rglob("*.py"):
        for node in ast.walk(ast.parse(source.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("ssl_app."):
                private += [f"{source.name}: {node.module}.{alias.name}" for alias in node.names if alias.name.startswith("_")]
    assert not private, private
