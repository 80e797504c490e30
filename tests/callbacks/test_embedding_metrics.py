"""EmbeddingMetrics: what reaches TensorBoard, that it equals ssl_app.metrics, DDP, the collapse alarm."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
import yaml

from callbacks import CollapseCriteria, EmbeddingMetrics, embedding_report
from ssl_app.cli import main
from ssl_app.errors import ConfigError
from ssl_app.methods import SimCLR
from ssl_app.metrics import (
    alignment,
    effective_rank,
    positive_and_topk_negatives,
    registered_fields,
    tolerance,
    uniformity,
)
from ssl_app.metrics.geometry import lidar, wasserstein_uniformity
from tests.callbacks import ddp_worker
from tests.callbacks.helpers import (
    EPOCHS,
    LIDAR_SAMPLES,
    LIDAR_VIEWS,
    VAL_SIZE,
    RecordingLogger,
    embed_views,
    events,
    last_scalars,
    tiny_data,
    tiny_model,
    tiny_trainer,
)

REPO = Path(__file__).resolve().parents[2]
QUICKSTART = str(REPO / "configs" / "quickstart.yaml")
#: Every registered metric's tags at top_k = 10 (``ssl_app.metrics.registry``).
SCALARS = [metric.tag(field, 10) for metric, field in registered_fields()]
#: The callback's own flags, written when they change (``ssl_app.io.changes``).
FLAGS = ["nonfinite", "collapsed"]


# --------------------------------------------------------------------------- one tiny fit
def test_every_tag_is_logged_every_epoch(tiny_run):
    _, _, _, log_dir = tiny_run
    logged = events(log_dir)
    for name in SCALARS:
        assert len(logged.Scalars(f"metrics/{name}")) == EPOCHS, name
    positive = logged.Histograms("similarity/positive")
    negative = logged.Histograms("similarity/top10_negative")
    assert [h.histogram_value.num for h in positive] == [VAL_SIZE] * EPOCHS  # each sample once
    assert [h.histogram_value.num for h in negative] == [10 * VAL_SIZE] * EPOCHS
    figures = logged.Images("similarity/positive_vs_top10_negative")
    assert len(figures) == EPOCHS and figures[0].width > 100
    for flag in FLAGS:  # a healthy model: 0 at the first evaluation, never written again
        assert [e.value for e in logged.Scalars(f"metrics/{flag}")] == [0.0], flag


def clean_embeddings(model: SimCLR, data, split: str = "val") -> tuple[torch.Tensor, torch.Tensor]:
    """``(labels, z)`` of the eval-transform images of ``split``, by hand."""
    indices, labels, z, _ = embed_views(model, data.embedding_dataloader(split, views=1, augment=False))
    assert torch.equal(indices, torch.arange(len(indices)))
    return labels, z


def test_logged_values_equal_the_metric_functions(tiny_run):
    trainer, model, data, log_dir = tiny_run
    indices, labels, za, zb = embed_views(model, data.val_dataloader())
    assert torch.equal(indices, torch.arange(VAL_SIZE))
    clean_labels, clean = clean_embeddings(model, data)
    assert torch.equal(clean_labels, labels)
    sims = positive_and_topk_negatives(za, zb, k=10)
    expected = {
        "metrics/alignment": alignment(za, zb),  # the two augmented views
        "metrics/pos_sim": sims.positive.mean(),
        "metrics/top10_neg_sim": sims.negatives.mean(),
        "metrics/uniformity": uniformity(clean),  # the clean (eval-transform) embeddings
        "metrics/tolerance": tolerance(clean, labels),
        "metrics/effective_rank": effective_rank(clean),
        "metrics/effective_rank_backbone": rankme(clean_backbone_features(model, data)),
        "metrics/top10_train_neg_sim": train_negatives(za, clean_embeddings(model, data, "train")[1]).mean(),
        "metrics/wasserstein_uniformity": wasserstein_uniformity(clean),
        "metrics/lidar": lidar(augmented_views(model, data, LIDAR_VIEWS)[:LIDAR_SAMPLES]),
        "metrics/nonfinite": torch.tensor(0.0),
    }
    logged = last_scalars(log_dir)
    for name, value in expected.items():
        assert logged[name] == pytest.approx(float(value), abs=1e-5), name
        assert float(trainer.callback_metrics[name]) == pytest.approx(float(value), abs=1e-5), name
    # the clean inputs are a different quantity from the augmented ones
    assert abs(logged["metrics/uniformity"] - float(uniformity(za))) > 0.05
    assert abs(logged["metrics/effective_rank"] - float(effective_rank(za))) > 1e-3
    # the train-set negatives are another comparison than the other samples' second views
    assert abs(logged["metrics/top10_train_neg_sim"] - logged["metrics/top10_neg_sim"]) > 1e-3
    # RankMe on the backbone features is another number than the projections' effective rank
    assert abs(logged["metrics/effective_rank_backbone"] - logged["metrics/effective_rank"]) > 1e-2


def augmented_views(model: SimCLR, data, views: int, split: str = "val") -> torch.Tensor:
    """[N, views, d]: the embeddings of ``views`` augmented views of every image of ``split``, by hand."""
    model.eval()
    with torch.no_grad():
        loader = data.embedding_dataloader(split, views=views, augment=True)
        return torch.cat([torch.stack([model.embed(v) for v in batch], dim=1) for batch, _, _ in loader])


def clean_backbone_features(model: SimCLR, data, split: str = "val") -> torch.Tensor:
    """The backbone features (``model(images)``, unnormalised) of the eval-transform images, by hand."""
    model.eval()
    with torch.no_grad():
        return torch.cat([model(views[0]) for views, _, _ in data.embedding_dataloader(split, views=1, augment=False)])


def train_negatives(anchors: torch.Tensor, train: torch.Tensor, k: int = 10) -> torch.Tensor:
    """Each anchor's k largest cosine similarities to the train embeddings, by brute force in float64."""
    sim = F.normalize(anchors.double(), dim=1) @ F.normalize(train.double(), dim=1).T
    return sim.sort(dim=1, descending=True).values[:, :k]


def rankme(features: torch.Tensor) -> torch.Tensor:
    """RankMe from a direct SVD in float64: exp(entropy of σ/Σσ), rows unnormalised."""
    sigma = torch.linalg.svdvals(features.double())
    p = sigma / sigma.sum()
    return torch.exp(-torch.special.xlogy(p, p).sum())


def test_the_histograms_hold_every_value_in_the_fixed_bins(tiny_run):
    """Catches ``similarity/negative`` missing, holding the positives, only the top-k, or bins
    that are not the fixed [-1, 1] ones the report reads; and ``similarity/positive`` or
    ``similarity/top10_negative`` (counted on the device since issue 38) holding other values, other
    bins, or moments that are not the values' own."""
    _, model, data, log_dir = tiny_run
    _, _, za, zb = embed_views(model, data.val_dataloader())
    sims = F.normalize(za.double(), dim=1) @ F.normalize(zb.double(), dim=1).T
    off_diagonal = ~torch.eye(VAL_SIZE, dtype=torch.bool)
    expected_values = {
        "similarity/negative": sims[off_diagonal].numpy(),
        "similarity/positive": sims.diagonal().numpy(),
        "similarity/top10_negative": sims.masked_fill(~off_diagonal, -2).topk(10, dim=1).values.flatten().numpy(),
    }
    for tag, values in expected_values.items():
        logged = events(log_dir).Histograms(tag)
        assert len(logged) == EPOCHS, tag
        final = logged[-1].histogram_value
        assert final.num == values.size, tag
        assert final.sum == pytest.approx(values.sum(), abs=1e-3), tag
        assert final.sum_squares == pytest.approx((values**2).sum(), abs=1e-3), tag
        assert (final.min, final.max) == pytest.approx((values.min(), values.max()), abs=1e-5), tag
        expected, edges = np.histogram(values, bins=200, range=(-1.0, 1.0))
        assert list(final.bucket_limit) == pytest.approx([-1.0, *edges[1:]]), tag
        assert final.bucket[0] == 0, tag  # the leading empty bucket that carries the left edge
        # float32 on the device against float64 here: a value on a bin edge may fall either side
        assert np.abs(np.asarray(final.bucket[1:]) - expected).sum() <= 4, tag


def test_the_inputs_of_every_tag_are_described_in_tensorboard(tiny_run):
    _, _, _, log_dir = tiny_run
    texts = events(log_dir).Tensors("metrics/inputs/text_summary")
    assert len(texts) == 1  # once per run
    table = texts[0].tensor_proto.string_val[0].decode()  # Markdown, escaped (rendered: tests/ssl_app/runs/test_panel.py)
    assert "| metrics/uniformity |" in table and r"clean \(eval\-transform\) embeddings |" in table
    assert "| metrics/alignment |" in table and "two augmented views |" in table
    assert r"| metrics/effective\_rank |" in table


def test_augmented_inputs_reproduce_the_views_only_values():
    model, data = tiny_model(), tiny_data()
    logger = RecordingLogger()
    callback = EmbeddingMetrics(uniformity_inputs="augmented", log_histograms=False)
    tiny_trainer([callback], logger=logger).validate(model, data, verbose=False)
    _, labels, za, zb = embed_views(model, data.val_dataloader())
    assert logger.values("metrics/uniformity") == [pytest.approx(float(uniformity(za)), abs=1e-5)]
    assert logger.values("metrics/tolerance") == [pytest.approx(float(tolerance(za, labels)), abs=1e-5)]
    assert logger.values("metrics/alignment") == [pytest.approx(float(alignment(za, zb)), abs=1e-5)]
    assert logger.values("metrics/effective_rank") == [pytest.approx(float(effective_rank(za)), abs=1e-5)]


def test_augmented_inputs_need_no_datamodule():
    model, data = tiny_model(), tiny_data()
    data.setup("validate")
    logger = RecordingLogger()
    callback = EmbeddingMetrics(uniformity_inputs="augmented", log_histograms=False)
    tiny_trainer([callback], logger=logger).validate(model, dataloaders=data.val_dataloader(), verbose=False)
    assert len(logger.values("metrics/uniformity")) == 1
    with pytest.raises(ConfigError, match="uniformity_inputs"):
        tiny_trainer([EmbeddingMetrics()]).validate(model, dataloaders=data.val_dataloader(), verbose=False)


class SimCLRWithoutEmbeddings(SimCLR):
    """A method whose validation_step hands no embeddings over (like MoCo)."""

    def validation_step(self, batch, batch_idx):
        return {"loss": super().validation_step(batch, batch_idx)["loss"], "embeddings": None}


def test_embeds_the_views_itself_and_keeps_the_first_max_samples(caplog):
    model, data = tiny_model(SimCLRWithoutEmbeddings), tiny_data()
    logger = RecordingLogger()
    with pytest.warns(UserWarning, match="no TensorBoardLogger") as warned:
        tiny_trainer([EmbeddingMetrics(max_samples=20)], logger=logger).validate(model, data, verbose=False)
    assert sum("no TensorBoardLogger" in str(w.message) for w in warned) == 1
    _, labels, za, zb = embed_views(model, data.val_dataloader())
    _, clean = clean_embeddings(model, data)
    report = embedding_report(za[:20], zb[:20], labels[:20], clean=clean[:20], clean_labels=labels[:20])
    assert logger.values("metrics/uniformity") == [pytest.approx(report.value("uniformity"), abs=1e-5)]
    assert logger.values("metrics/alignment") == [pytest.approx(report.value("alignment"), abs=1e-5)]
    assert logger.values("metrics/collapsed") == [0.0]  # an untrained small CNN is not collapsed
    assert "collapse" not in caplog.text


def test_clean_inputs_cover_only_the_samples_the_loop_saw():
    model, data = tiny_model(), tiny_data()
    logger = RecordingLogger()
    tiny_trainer([EmbeddingMetrics(log_histograms=False)], logger=logger, limit_val_batches=1).validate(
        model, data, verbose=False
    )
    labels, clean = clean_embeddings(model, data)
    batch = data.batch_size
    assert logger.values("metrics/uniformity") == [pytest.approx(float(uniformity(clean[:batch])), abs=1e-5)]
    assert logger.values("metrics/tolerance") == [pytest.approx(float(tolerance(clean[:batch], labels[:batch])), abs=1e-5)]


def test_split_option_embeds_the_train_split_in_an_own_pass():
    model, data = tiny_model(), tiny_data()
    logger = RecordingLogger()
    callback = EmbeddingMetrics(split="train", max_samples=50, log_histograms=False)
    tiny_trainer([callback], logger=logger).validate(model, data, verbose=False)
    loader = data.embedding_dataloader("train", views=2, augment=True)
    _, labels, za, zb = embed_views(model, loader)
    assert len(labels) == 64  # the train split, not the 45 validation samples
    _, clean = clean_embeddings(model, data, "train")
    report = embedding_report(za[:50], zb[:50], labels[:50], clean=clean[:50], clean_labels=labels[:50])
    assert logger.values("metrics/uniformity") == [pytest.approx(report.value("uniformity"), abs=1e-5)]
    assert logger.values("metrics/tolerance") == [pytest.approx(report.value("tolerance"), abs=1e-5)]
    assert logger.values("metrics/alignment") == [pytest.approx(report.value("alignment"), abs=1e-5)]


@pytest.mark.parametrize(
    "option,value",
    [
        ("uniformity_inputs", "raw"),
        ("collapse.uniformity_drop", 1.0),
        ("collapse.uniformity_drop", 0.0),
        ("collapse.drop_min_best", 0.0),
        ("collapse.drop_similarity", 1.5),
        ("collapse.concentrating_evaluations", 2),
        ("collapse.chance_tolerance", float("inf")),
        ("top_k", 0),
        ("every_n_epochs", 0),
        ("max_samples", 1),
        ("lidar_views", 1),
        ("lidar_views", -2),
        ("lidar_samples", 1),
    ],
)
def test_bad_options_are_config_errors_naming_the_option(option, value):
    """Catches an option out of range that reaches training (the alarm's through its one object, ``collapse``)."""
    with pytest.raises(ConfigError, match=option.replace(".", r"\.")):
        if option.startswith("collapse."):
            EmbeddingMetrics(collapse=CollapseCriteria(**{option.removeprefix("collapse."): value}))
        else:
            EmbeddingMetrics(**{option: value})


def test_a_config_written_before_the_alarm_s_options_were_one_object_is_read_as_it():
    """Catches a run folder's ``config.yaml`` of an earlier version (``collapse_uniformity: 0.05``, …, as every run
    wrote them) refused by this one, a legacy value dropped on the way, and two spellings of one value that
    disagree passing silently."""
    from ssl_app.cli.parsing import upgrade_config

    old = {"trainer": {"callbacks": [{"class_path": "callbacks.EmbeddingMetrics", "init_args": {
        "top_k": 5, "collapse_uniformity": None, "collapse_drop_min_best": 0.5}}]}}  # fmt: skip
    upgraded = yaml.safe_load(upgrade_config(yaml.safe_dump(old)))
    args = upgraded["trainer"]["callbacks"][0]["init_args"]
    assert args == {"top_k": 5, "collapse": {"uniformity_below": None, "drop_min_best": 0.5}}
    assert EmbeddingMetrics(**{**args, "collapse": CollapseCriteria(**args["collapse"])}).alarm.criteria.uniformity_below is None
    new = yaml.safe_dump({"trainer": {"callbacks": [{"class_path": "callbacks.EmbeddingMetrics", "init_args": {"top_k": 5}}]}})
    assert upgrade_config(new) == new
    old["trainer"]["callbacks"][0]["init_args"]["collapse"] = {"drop_min_best": 0.7}
    with pytest.raises(ConfigError, match="collapse_drop_min_best=0.5 and collapse.drop_min_best=0.7"):
        upgrade_config(yaml.safe_dump(old))


def test_unknown_split_is_named():
    with pytest.raises(ConfigError, match="split must be"):
        EmbeddingMetrics(split="holdout")


def test_train_negatives_need_another_evaluation_split():
    """Catches the train-set comparison run on the train split itself, where each anchor's own
    clean embedding would be its hardest "negative", and an unknown negatives_from accepted."""
    with pytest.raises(ConfigError, match="negatives_from=train"):
        EmbeddingMetrics(split="train", negatives_from="train")
    with pytest.raises(ConfigError, match="negatives_from must be"):
        EmbeddingMetrics(negatives_from="bank")


# --------------------------------------------------------------------------- 2 ranks
@pytest.mark.parametrize("eval_on", ["device", "workers"])
@pytest.mark.parametrize("inputs", ["clean", "augmented"])
def test_two_ranks_measure_what_one_process_measures(ddp_results, inputs, eval_on):
    """The ranks read their clean shards from the device (``eval_on: auto``); one process reads
    them from the device or through the workers: the same values."""
    single = ddp_worker.callback_report(0, 1, inputs, eval_on).scalars()
    assert {
        "uniformity",
        "tolerance",
        "effective_rank",
        "alignment",
        "pos_sim",
        "top10_neg_sim",
        "wasserstein_uniformity",
    } <= set(single)
    # RankMe's backbone rows come with the clean pass only, gathered like the projections
    assert ("effective_rank_backbone" in single) == (inputs == "clean")
    assert ("top10_train_neg_sim" in single) == (inputs == "clean")  # negatives_from=train there
    for result in ddp_results:
        double = result[f"{inputs}_scalars"]
        assert set(double) == set(single)
        for name, value in single.items():
            assert double[name] == pytest.approx(value, abs=1e-6), name


def test_two_ranks_count_the_negatives_one_process_counts(ddp_results):
    """Catches the all-negatives histogram of one rank's anchors only (no all-reduce), or the
    extremes summed instead of taken over ranks."""
    single = ddp_worker.callback_report(0, 1, "clean").negative_histogram.summary()
    assert single.count == ddp_worker.CALLBACK_MAX_SAMPLES * (ddp_worker.CALLBACK_MAX_SAMPLES - 1)
    for result in ddp_results:
        double = result["negative_histogram"]
        assert double.counts == single.counts and double.count == single.count
        assert (double.min, double.max) == pytest.approx((single.min, single.max), abs=1e-6)
        # float32 similarities of other block shapes: equal up to rounding
        assert double.sum == pytest.approx(single.sum, rel=1e-6)
        assert double.sum_squares == pytest.approx(single.sum_squares, rel=1e-6)


def test_clean_and_augmented_callback_reports_differ(ddp_results):
    clean, augmented = ddp_results[0]["clean_scalars"], ddp_results[0]["augmented_scalars"]
    assert clean["alignment"] == augmented["alignment"]  # the views are the same in both
    assert abs(clean["uniformity"] - augmented["uniformity"]) > 0.05


def test_two_ranks_gather_each_sample_once(ddp_results):
    za, zb, labels = ddp_worker.views_and_labels()
    expected = embedding_report(za, zb, labels)
    assert [r["local_rows"] for r in ddp_results] == [23, 23]  # 45 samples: one padding repeat
    for result in ddp_results:
        assert torch.equal(result["indices"], torch.arange(ddp_worker.N))
        assert torch.equal(result["labels"], labels)
        torch.testing.assert_close(result["features"], torch.stack([za, zb], dim=1))
        for field in ("alignment", "uniformity", "tolerance", "effective_rank"):
            assert result["report"].value(field) == pytest.approx(expected.value(field), abs=1e-6), field
        torch.testing.assert_close(result["report"]["neg_sim"], expected["neg_sim"])
        assert float(result["effective_rank"]) == pytest.approx(float(effective_rank(za)), abs=1e-9)
        assert torch.equal(result["subset_indices"], torch.arange(ddp_worker.MAX_SAMPLES))
        assert torch.equal(result["lonely_indices"], torch.tensor([0]))  # rank 1 contributed nothing
        assert result["lonely_shape"] == (1, 2, ddp_worker.DIM)


def every_tag_callbacks(folder: Path) -> Path:
    """``configs/callbacks/metrics_train_negatives.yaml`` with LiDAR on (3 views of the first 60 images), as a file."""
    callbacks = yaml.safe_load((REPO / "configs" / "callbacks" / "metrics_train_negatives.yaml").read_text())
    lidar_on = (REPO / "configs" / "callbacks" / "metrics_lidar.yaml").read_text()
    assert "lidar_views:" in lidar_on  # the option the shipped config shows
    callbacks[0]["init_args"].update(lidar_views=3, lidar_samples=60)
    path = folder / "every_tag_callbacks.yaml"
    path.write_text(yaml.safe_dump(callbacks))
    return path


@pytest.mark.slow
def test_validate_logs_the_same_metrics_on_one_and_two_processes(tmp_path, monkeypatch):
    sizes = [
        "--data.init_args.train_size=96",
        "--data.init_args.val_size=101",
        "--data.init_args.test_size=32",
        "--data.init_args.batch_size=32",
        "--data.init_args.image_size=16",
        "--trainer.enable_progress_bar=false",
        # every registered tag, the train-set negatives (the memory-bank recipes' callbacks) and LiDAR included
        f"--trainer.callbacks={every_tag_callbacks(tmp_path)}",
    ]
    monkeypatch.chdir(tmp_path)
    main(["fit", "--config", QUICKSTART, *sizes, "--trainer.max_steps=2", "--trainer.limit_val_batches=0"])
    checkpoint = tmp_path / "runs" / "quickstart" / "version_0" / "checkpoints" / "last.ckpt"
    validate = ["validate", "--config", QUICKSTART, *sizes, f"--ckpt_path={checkpoint}"]
    main(validate)
    run = checkpoint.parent.parent
    single = last_scalars(run / "evaluations" / "validate_0")  # filed with the run it evaluates
    ddp_dir = tmp_path / "ddp"
    ddp_dir.mkdir()
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    ddp = ["--trainer.accelerator=cpu", "--trainer.devices=2", "--trainer.strategy=ddp"]
    result = subprocess.run(
        [sys.executable, "-m", "ssl_app", *validate, *ddp],
        cwd=ddp_dir, env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    double = last_scalars(run / "evaluations" / "validate_1")
    assert not (ddp_dir / "runs").exists()
    names = {f"metrics/{name}" for name in SCALARS} | {"metrics/knn_acc"}
    assert names <= set(single) and set(single) == set(double)
    for name in names:
        assert double[name] == pytest.approx(single[name], abs=1e-4), name


# --------------------------------------------------------------------------- collapse
class ConstantSimCLR(SimCLR):
    """Every image gets the same embedding (the parameters stay in the graph, with zero gradient)."""

    def embed(self, images):
        z = self.projection_head(self.backbone(images))
        return F.normalize(0 * z + torch.ones_like(z), dim=1)


def collapse_warnings(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if "Representation collapse" in r.getMessage()]


def test_a_constant_encoder_is_reported_once_and_its_flag_written_once(caplog):
    logger = RecordingLogger()
    callback = EmbeddingMetrics(log_histograms=False)
    trainer = tiny_trainer([callback], logger=logger)
    model, data = tiny_model(ConstantSimCLR), tiny_data()
    with caplog.at_level(logging.WARNING):
        for _ in range(2):
            trainer.validate(model, data, verbose=False)
    assert logger.values("metrics/collapsed") == [1.0]  # written when it changes
    assert trainer.callback_metrics["metrics/collapsed"] == 1.0  # still there for the run record
    messages = collapse_warnings(caplog)
    assert len(messages) == 1, messages
    assert messages[0].startswith("Representation collapse at epoch 0 (sudden): uniformity 0.0000 (random points: ~3.51)")
    assert "continues" in messages[0] and callback.collapsed_at == 0


def test_stop_on_collapse_ends_training_after_the_first_epoch(caplog):
    logger = RecordingLogger()
    callback = EmbeddingMetrics(stop_on_collapse=True, log_histograms=False)
    with caplog.at_level(logging.WARNING):
        trainer = tiny_trainer([callback], logger=logger, max_epochs=3)
        trainer.fit(tiny_model(ConstantSimCLR), tiny_data())
    assert trainer.current_epoch == 1 and trainer.global_step == 2
    assert logger.values("metrics/collapsed") == [1.0]
    messages = collapse_warnings(caplog)
    assert len(messages) == 1 and "Stopping training" in messages[0]
