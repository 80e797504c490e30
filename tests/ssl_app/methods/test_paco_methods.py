"""PaCo inside the methods: the loss owns its centres and prior, sized through ``prepare`` from the
datamodule; the methods hand over anchor features; evaluation through ``class_logits``; checkpoints."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from datamodules.synthetic import SyntheticDataModule
from ssl_app import losses
from ssl_app.errors import ConfigError
from ssl_app.methods import MaskedSimilarities, MoCo, SimCLR
from ssl_app.methods.base import similarity
from ssl_app.methods.masks import contrast_masks, gathered_views, views_of
from tests.helpers import tiny_data, tiny_trainer

# tiny_data: 48 training images, labels (arange(48) % 3) shuffled → 16 per class.
TINY_COUNTS = [16, 16, 16]
SMALL = dict(backbone="small_cnn", proj_hidden_dim=16, proj_dim=8)
MOCO = {"queue_size": 16, "split_bn_groups": 2}


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


class CountedShapes(SyntheticDataModule):
    """Shapes that report their training class counts (the contract PaCo reads), optionally skewed."""

    def __init__(self, reported: list[int] | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.reported = reported

    def train_class_counts(self) -> list[int]:
        if self.reported is not None:
            return self.reported
        labels = torch.tensor([label for _, label in self.dataset("train")])
        return torch.bincount(labels, minlength=self.num_classes).tolist()


class UncountedShapes(SyntheticDataModule):
    """Shapes that do not report class counts (a datamodule without ``train_class_counts``)."""

    train_class_counts = None


def uncounted_data() -> UncountedShapes:
    base = tiny_data()
    return UncountedShapes(
        num_classes=3, train_size=48, val_size=16, test_size=16, image_size=8, batch_size=8, num_workers=0,
        augmentation=base.augmentation,
    )  # fmt: skip


def counted_data(**overrides: Any) -> CountedShapes:
    base = tiny_data()
    options = dict(num_classes=3, train_size=48, val_size=16, test_size=16, image_size=8, batch_size=8, num_workers=0)
    return CountedShapes(augmentation=base.augmentation, **{**options, **overrides})


def build(num_classes: int | None = None, **kwargs: Any):
    """MoCo with a PaCo loss (or ``loss``); with ``num_classes`` its centres are built as ``setup``
    would build them (``ContrastiveLoss.prepare``), so the tests can use them without a Trainer."""
    torch.manual_seed(0)
    loss = kwargs.pop("loss", None) or losses.PaCo(temperature=0.2, alpha=0.1)
    model = MoCo(loss=loss, **SMALL, **{**MOCO, **kwargs})
    if num_classes is not None:
        model.loss.prepare(model.feature_dim, num_classes, None, fitting=False)
    return model


def batch(size: int = 8, labels: torch.Tensor | None = None):
    g = torch.Generator().manual_seed(0)
    views = (torch.randn(size, 3, 8, 8, generator=g), torch.randn(size, 3, 8, 8, generator=g))
    labels = torch.arange(size) % 3 if labels is None else labels
    return views, labels, torch.arange(size)


# --- the hand-over -------------------------------------------------------------------------------
def test_moco_hands_the_queries_backbone_features_and_labels_to_the_loss():
    """Catches centre logits computed on the wrong view (the key, or view 2) or with labels out of order."""
    model = build(num_classes=3, key_bn="none", loss=losses.PaCo(0.2, alpha=0.1, class_counts=TINY_COUNTS))
    views, labels, index = batch()
    contrast = model.contrast((views, labels, index))
    torch.testing.assert_close(contrast.anchor_features, model.backbone(views[0]))  # the same batch statistics
    assert torch.equal(contrast.anchor_labels, labels)
    assert contrast.anchor_features.requires_grad


def test_symmetric_moco_anchors_are_both_views():
    model = build(num_classes=3, symmetric=True, loss=losses.PaCo(0.2, alpha=0.1, class_counts=TINY_COUNTS))
    views, labels, index = batch()
    contrast = model.contrast((views, labels, index))
    assert contrast.anchor_features.shape == (16, model.feature_dim)
    assert torch.equal(contrast.anchor_labels, labels.repeat(2))


def test_one_step_trains_the_classifier_and_the_backbone_through_the_centre_term():
    """Catches centre logits that are detached, or computed but never handed to the loss."""
    model = build(num_classes=3, loss=losses.PaCo(0.2, alpha=0.1, class_counts=TINY_COUNTS)).train()
    loss = model.compute_loss(model.contrast(batch())).value
    loss.backward()
    assert model.loss.classifier.weight.grad is not None and model.loss.classifier.weight.grad.abs().sum() > 0
    assert all(p.grad is None for p in model.key_backbone.parameters())
    # The centre term alone reaches the backbone too (α = 0: no sample term).
    model = build(num_classes=3, loss=losses.PaCo(0.2, alpha=0.0, class_counts=TINY_COUNTS)).train()
    model.compute_loss(model.contrast(batch())).value.backward()
    assert model.loss.classifier.weight.grad.abs().sum() > 0
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in model.backbone.parameters())


def test_unlabelled_samples_train_without_touching_the_centres():
    """Catches label -1 reaching the classifier (as the last class, or as a NaN)."""
    # PaCo's candidates (the batch's keys and queries): the queue is still empty at this first step
    model = build(
        num_classes=3, loss=losses.PaCo(0.2, alpha=0.1, class_counts=TINY_COUNTS), batch_negatives=True, query_candidates=True
    ).train()
    loss = model.compute_loss(model.contrast(batch(labels=torch.full((8,), -1)))).value
    loss.backward()
    assert torch.isfinite(loss)
    assert model.loss.classifier.weight.grad is None or (model.loss.classifier.weight.grad == 0).all()
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in model.backbone.parameters())


def test_centre_logits_are_float32_under_autocast():
    """Catches bf16 centre logits: unlike s they are not divided by τ, but the prior and softmax read them as they are."""
    model = build(num_classes=3, loss=losses.PaCo(0.2, class_counts=TINY_COUNTS))
    features = torch.randn(4, model.feature_dim)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        logits = model.loss.classify(features)
    assert logits.dtype == torch.float32
    torch.testing.assert_close(logits, model.loss.classifier(features))


def test_other_losses_are_called_the_same_way_and_give_no_classifier():
    """Catches a method that builds classifier state, or hands backbone features, for a loss that has no
    centres (and a second call signature for such losses)."""
    model = build(loss=losses.SupCon(0.1))
    eye = torch.eye(2, dtype=torch.bool)
    assert model.loss.evaluation_metrics(MaskedSimilarities(torch.zeros(2, 2), eye, ~eye), "val") == {}
    assert not hasattr(model.loss, "classify")
    assert not hasattr(model, "class_logits")  # what callbacks.LongTailAccuracy checks
    calls = []
    original = model.loss.forward
    model.loss.forward = lambda *args, **kwargs: calls.append((len(args), kwargs)) or original(*args, **kwargs)
    contrast = model.contrast(batch())
    assert contrast.anchor_features is None  # embed(), not encode(): an override of embed keeps working
    model.compute_loss(contrast)
    assert calls == [(2, {})]  # loss(contrast, with_stats): the one entrance
    with pytest.raises(AttributeError, match="'MoCo' object has no attribute 'class_logits'"):
        model.class_logits(batch()[0][0])


class BareMethod(SimCLR):
    """A method written before anchor features existed: it hands over only the similarities."""

    def contrast(self, batch: Any) -> MaskedSimilarities:
        views, labels, _ = batch
        z = self.embed(torch.cat(list(views)))
        pos, neg = contrast_masks(
            views_of(0, len(labels), 2, labels, z.device), gathered_views(len(labels), 2, None, 1, z.device), False
        )
        return MaskedSimilarities(similarity(z, z), pos, neg)


def test_a_method_without_anchor_features_is_a_config_error_naming_both():
    torch.manual_seed(0)
    model = BareMethod(loss=losses.PaCo(0.2, class_counts=TINY_COUNTS), **SMALL)
    with pytest.raises(ConfigError, match="BareMethod does not hand its anchors' features.*PaCo needs"):
        model.compute_loss(model.contrast(batch()))


# --- through the Trainer: every method, the prior, evaluation -------------------------------------
def test_training_moves_the_classifier_and_logs_its_accuracy(method_case, tmp_path):
    """Catches a classifier left out of the optimiser, or a prior not taken from the datamodule, with
    every registered method (tests/generic.py)."""
    model = method_case.build(loss=losses.PaCo(temperature=0.2, alpha=0.1))
    model.loss.prepare(model.feature_dim, 3, None, fitting=False)  # the centres, to compare with after training
    before = model.loss.classifier.weight.detach().clone()
    data = counted_data(reported=[30, 12, 6])
    trainer = tiny_trainer(tmp_path, max_epochs=1, limit_train_batches=3, limit_val_batches=2, log_every_n_steps=1)
    trainer.fit(model, data)
    expected = torch.log(torch.tensor([30, 12, 6]) / 48.0)
    torch.testing.assert_close(model.loss.log_prior, expected)
    assert not torch.equal(before, model.loss.classifier.weight)
    metrics = trainer.callback_metrics
    assert torch.isfinite(metrics["train/loss_step"]) and 0 <= metrics["val/classifier_top1"].item() <= 1
    assert 0 < metrics["loss/centre_prob"].item() < 1
    logits = model.class_logits(batch()[0][0])
    assert logits.shape == (8, 3)


def test_class_logits_are_the_classifier_on_the_backbone_without_the_prior():
    model = build(num_classes=3, loss=losses.PaCo(0.2, class_counts=[30, 12, 6])).eval()
    assert hasattr(build(), "class_logits")  # also before setup sizes the centres
    with pytest.raises(ConfigError, match="the centres are not built yet"):
        build().class_logits(images := batch()[0][0])
    torch.testing.assert_close(model.class_logits(images), model.loss.classifier(model.backbone(images)))


def test_checkpoint_round_trip_keeps_the_prior_and_the_centres(tmp_path):
    """Catches a prior lost in the checkpoint: validate/test from it would then fail or differ."""
    data = counted_data(reported=[30, 12, 6])
    model = build()
    trainer = tiny_trainer(tmp_path, max_steps=2)
    trainer.fit(model, data)
    assert model.loss.classifier.out_features == 3  # the datamodule's num_classes
    path = tmp_path / "paco.ckpt"
    trainer.save_checkpoint(path)
    saved = torch.load(path, map_location="cpu", weights_only=True)
    assert saved["state_dict"]["loss.classifier.weight"].shape == (3, model.feature_dim)  # with the loss

    fresh = build()  # no counts, no classifier yet: both come from the checkpoint (and the datamodule's width)
    results = tiny_trainer(tmp_path, limit_val_batches=1).validate(fresh, data, ckpt_path=path, verbose=False, weights_only=True)
    torch.testing.assert_close(fresh.loss.log_prior, model.loss.log_prior)
    torch.testing.assert_close(fresh.loss.classifier.weight, model.loss.classifier.weight)
    assert "val/classifier_top1" in results[0]

    loaded = MoCo.load_from_checkpoint(path, loss=losses.PaCo(0.2, alpha=0.1), weights_only=True)
    torch.testing.assert_close(loaded.loss.log_prior, model.loss.log_prior)
    images = batch()[0][0]
    torch.testing.assert_close(loaded.eval().class_logits(images), model.eval().class_logits(images))


def test_resume_continues_with_the_same_prior(tmp_path):
    data = counted_data(reported=[30, 12, 6])
    model = build()
    trainer = tiny_trainer(tmp_path, max_steps=2)
    trainer.fit(model, data)
    path = tmp_path / "step2.ckpt"
    trainer.save_checkpoint(path)
    resumed = build()
    more = tiny_trainer(tmp_path, max_steps=3)
    more.fit(resumed, data, ckpt_path=path, weights_only=True)
    assert more.global_step == 3
    torch.testing.assert_close(resumed.loss.log_prior, model.loss.log_prior)


# --- what the datamodule must provide -------------------------------------------------------------
def test_a_datamodule_without_class_counts_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match=r"PaCo needs a labelled datamodule with class counts \(train_class_counts\(\)\)"):
        tiny_trainer(tmp_path, max_steps=1).fit(build(), uncounted_data())


def test_counts_given_to_the_loss_serve_a_datamodule_without_them(tmp_path):
    model = build(loss=losses.PaCo(0.2, alpha=0.1, class_counts=[20, 20, 8]))
    tiny_trainer(tmp_path, max_steps=1).fit(model, uncounted_data())
    torch.testing.assert_close(model.loss.log_prior, torch.log(torch.tensor([20, 20, 8]) / 48.0))


@pytest.mark.parametrize(
    "model_options,data_options,match",
    [
        ({"loss": losses.PaCo(0.2, class_counts=[1, 1, 1])}, {"reported": [30, 12, 6]}, "class_counts disagree"),
        ({}, {"reported": [30, 12]}, "train_class_counts\\(\\) has 2 classes but PaCo's centres have 3"),
        ({"loss": losses.PaCo(0.2, num_classes=4)}, {}, "PaCo: num_classes is 4 but the datamodule has 3 classes"),
        ({"loss": losses.PaCo(0.2, class_counts=[5, 5, 5, 5])}, None, "PaCo: num_classes is 4 but the datamodule has 3"),
    ],
    ids=["counts-disagree", "counts-width", "num-classes", "loss-counts-width"],
)
def test_inconsistent_class_information_is_a_config_error(model_options, data_options, match, tmp_path):
    data = uncounted_data() if data_options is None else counted_data(**data_options)
    with pytest.raises(ConfigError, match=match):
        tiny_trainer(tmp_path, max_steps=1).fit(build(**model_options), data)


def test_bad_num_classes_is_a_config_error():
    with pytest.raises(ConfigError, match="PaCo: num_classes"):
        losses.PaCo(0.2, num_classes=1)


def test_a_checkpoint_from_before_the_centres_moved_into_the_loss_still_loads():
    """Catches PaCo checkpoints of the previous layout (the centres as the method's ``classifier.*``)
    refused by ``--ckpt_path``'s check or by the state-dict load."""
    from ssl_app.resume import check_state_dict

    model = build(num_classes=3, loss=losses.PaCo(0.2, class_counts=TINY_COUNTS))
    old_layout = {
        ("classifier." + key[len("loss.classifier.") :] if key.startswith("loss.classifier.") else key): value
        for key, value in model.state_dict().items()
    }
    assert "classifier.weight" in old_layout and "loss.classifier.weight" not in old_layout
    fresh = build(loss=losses.PaCo(0.2))
    check_state_dict({"state_dict": old_layout, "hyper_parameters": {}}, fresh, "old.ckpt")
    checkpoint = {"state_dict": dict(old_layout)}
    fresh.on_load_checkpoint(checkpoint)
    fresh.load_state_dict(checkpoint["state_dict"])
    torch.testing.assert_close(fresh.loss.classifier.weight, model.loss.classifier.weight)
