"""MoCo in one process: queue ring buffer, masks, EMA, checkpoints, every loss, the config."""

from __future__ import annotations

import collections
import os
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from ssl_app import losses
from ssl_app.errors import ConfigError
from ssl_app.methods import MoCo
from ssl_app.methods.stores import LabelledQueue
from tests.helpers import tiny_data, tiny_trainer

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """These tensors are tiny: a second intra-op thread only adds synchronisation, and on a busy
    machine its spinning made every Trainer run ~20× slower."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


# --- helpers ---------------------------------------------------------------------------------
def small_moco(**kwargs) -> MoCo:
    torch.manual_seed(0)
    options = dict(backbone="small_cnn", proj_hidden_dim=32, proj_dim=16, queue_size=40, split_bn_groups=2)
    options.update(kwargs)
    return MoCo(**options)


def batch(size=4, image=8, seed=0, labels=None):
    g = torch.Generator().manual_seed(seed)
    views = (torch.randn(size, 3, image, image, generator=g), torch.randn(size, 3, image, image, generator=g))
    labels = torch.arange(size) % 3 if labels is None else labels
    return views, labels, torch.arange(size)


def persistent_state(model) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items() if k.startswith(("queue.", "key_"))}


# --- the queue -------------------------------------------------------------------------------
@pytest.mark.parametrize("size,chunk", [(7, 3), (6, 3), (4, 10)])
def test_queue_keeps_exactly_the_last_vectors(size, chunk):
    queue = LabelledQueue(size, 2)
    reference: collections.deque = collections.deque(maxlen=size)
    counter = 0
    for _ in range(5):
        vectors = torch.arange(counter, counter + chunk, dtype=torch.float32)[:, None].repeat(1, 2)
        labels = torch.arange(counter, counter + chunk)
        queue.enqueue(vectors, labels)
        reference.extend(range(counter, counter + chunk))
        counter += chunk
        assert queue.ptr.item() == counter % size
        assert queue.filled.item() == min(counter, size)
        valid = queue.valid()
        assert sorted(queue.labels[valid].tolist()) == sorted(reference)
        # Slot order: the ring starting at ptr is the oldest → newest order once full.
        if counter >= size:
            order = [(queue.ptr.item() + i) % size for i in range(size)]
            assert queue.labels[order].tolist() == list(reference)
            assert torch.equal(queue.features[order, 0], torch.tensor(list(reference), dtype=torch.float32))


def test_queue_starts_with_random_unit_vectors_marked_unusable():
    queue = LabelledQueue(5, 8)
    torch.testing.assert_close(queue.features.norm(dim=1), torch.ones(5))
    assert not queue.valid().any()
    assert (queue.labels == -1).all()


# --- masks -----------------------------------------------------------------------------------
def test_masks_positive_is_the_other_views_key_and_empty_slots_are_ignored():
    model = small_moco(queue_size=10, key_bn="none", batch_negatives=True)  # keys then equal key_embed of the plain batch
    model.queue.enqueue(torch.nn.functional.normalize(torch.randn(3, 16), dim=1), torch.tensor([0, 1, 2]))
    contrast = model.contrast(batch(4))
    assert contrast.sim.shape == (4, 4 + 10)
    assert torch.equal(contrast.pos_mask[:, :4], torch.eye(4, dtype=torch.bool))
    assert not contrast.pos_mask[:, 4:].any()
    assert torch.equal(contrast.neg_mask[:, :4], ~torch.eye(4, dtype=torch.bool))
    assert contrast.neg_mask[:, 4:7].all() and not contrast.neg_mask[:, 7:].any()
    # the positive is the momentum key of view 2
    with torch.no_grad():
        q = model.embed(batch(4)[0][0])
        k = model.key_embed(batch(4)[0][1])
    torch.testing.assert_close(contrast.sim[:, :4].diagonal(), (q * k).sum(1), atol=1e-5, rtol=0)


@pytest.mark.parametrize("loss", [losses.InfoNCE(0.2), losses.SupCon(0.2)], ids=["instance", "labels"])
def test_symmetric_own_key_is_never_a_negative(loss):
    model = small_moco(queue_size=8, symmetric=True, loss=loss, batch_negatives=True)
    views, labels, index = batch(4, labels=torch.tensor([0, 0, 1, 1]))
    contrast = model.contrast((views, labels, index))
    assert contrast.sim.shape == (8, 8 + 8)
    own = torch.eye(8, dtype=torch.bool)
    other_view = own.roll(4, dims=1)
    keys_pos, keys_neg = contrast.pos_mask[:, :8], contrast.neg_mask[:, :8]
    assert not (keys_pos & own).any() and not (keys_neg & own).any()  # own-view key: neither
    assert (keys_pos & other_view).sum() == 8  # other view's key: positive
    if loss.uses_labels:
        all_labels = labels.repeat(2)
        assert torch.equal(keys_pos, (all_labels[:, None] == all_labels[None, :]) & ~own)
    else:
        assert torch.equal(keys_pos, other_view)
        assert torch.equal(keys_neg, ~own & ~other_view)
    # The loss is finite and both queries get a gradient
    value = model.loss(contrast).value
    value.backward()
    assert torch.isfinite(value)
    assert all(p.grad is None for p in model.key_backbone.parameters())


def test_label_positives_come_from_keys_and_filled_queue_slots():
    model = small_moco(queue_size=6, loss=losses.SupCon(0.1), batch_negatives=True)
    queue_labels = torch.tensor([0, 1, 2, 0])
    model.queue.enqueue(torch.nn.functional.normalize(torch.randn(4, 16), dim=1), queue_labels)
    labels = torch.tensor([0, 1, -1, 0])  # -1: unlabelled, only its own key is a positive
    contrast = model.contrast((batch(4)[0], labels, torch.arange(4)))
    expected_keys = (labels[:, None] == labels[None, :]) & (labels[:, None] >= 0) | torch.eye(4, dtype=torch.bool)
    assert torch.equal(contrast.pos_mask[:, :4], expected_keys)
    expected_queue = torch.zeros(4, 6, dtype=torch.bool)
    expected_queue[:, :4] = (labels[:, None] == queue_labels[None, :]) & (labels[:, None] >= 0)
    assert torch.equal(contrast.pos_mask[:, 4:], expected_queue)
    valid = torch.tensor([True] * 4 + [False] * 2)
    assert torch.equal(contrast.neg_mask[:, 4:], valid & ~expected_queue)
    assert not (contrast.pos_mask & contrast.neg_mask).any()


def test_validation_contrast_does_not_touch_the_queue():
    model = small_moco(queue_size=8).eval()
    before = persistent_state(model)
    model.contrast(batch(4))
    model.on_after_backward()
    after = persistent_state(model)
    assert all(torch.equal(before[k], after[k]) for k in before)


# --- options ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "kwargs,option",
    [
        ({"queue_size": 0}, "queue_size"),
        ({"queue_size": 2.5}, "queue_size"),
        ({"momentum": 1.0}, "momentum"),
        ({"momentum": -0.1}, "momentum"),
        ({"momentum_schedule": "linear"}, "momentum_schedule"),
        ({"key_bn": "ghost"}, "key_bn"),
    ],
)
def test_bad_options_raise_config_error_naming_them(kwargs, option):
    with pytest.raises(ConfigError, match=option):
        small_moco(**kwargs)


def test_sync_key_bn_is_rejected_for_several_cpu_processes():
    model = small_moco(key_bn="sync")
    assert any(isinstance(m, torch.nn.SyncBatchNorm) for m in model.key_backbone.modules())
    model._trainer = SimpleNamespace(world_size=2, strategy=SimpleNamespace(root_device=torch.device("cpu")))
    with pytest.raises(ConfigError, match="key_bn='sync'"):
        model.setup("fit")
    model._trainer = None
    # In one process SyncBatchNorm falls back to BatchNorm and the step runs.
    contrast = model.contrast(batch(4))
    assert torch.isfinite(model.loss(contrast).value)


def test_cosine_momentum_goes_from_m_to_one():
    model = small_moco(momentum=0.9, momentum_schedule="cosine")
    model._total_steps = 11
    values = [model.momentum_at(step) for step in range(11)]
    assert values[0] == pytest.approx(0.9) and values[-1] == pytest.approx(1.0)
    assert values[5] == pytest.approx(0.95)
    assert all(a <= b for a, b in zip(values, values[1:]))
    assert small_moco(momentum=0.9).momentum_at(7) == 0.9


# --- through the Trainer -----------------------------------------------------------------------
def test_ema_once_per_optimizer_step_with_gradient_accumulation(tmp_path):
    model = small_moco(momentum=0.9, queue_size=64)
    calls = []
    original = model.update_key_encoder

    def recording_update(momentum):
        keys_before = [p.detach().clone() for p in model.key_backbone.parameters()]
        original(momentum)
        queries = [p.detach().clone() for p in model.backbone.parameters()]
        keys_after = [p.detach().clone() for p in model.key_backbone.parameters()]
        calls.append((momentum, keys_before, queries, keys_after))

    model.update_key_encoder = recording_update
    trainer = tiny_trainer(tmp_path, max_steps=2, accumulate_grad_batches=2)
    trainer.fit(model, tiny_data(batch_size=8))

    assert trainer.global_step == 2
    assert len(calls) == 2  # 4 batches, 2 optimiser steps
    assert model.queue.filled.item() == 4 * 8  # but every batch's keys were enqueued
    for momentum, before, queries, after in calls:
        assert momentum == 0.9
        for b, q, a in zip(before, queries, after):
            torch.testing.assert_close(a, 0.9 * b + 0.1 * q, atol=1e-6, rtol=1e-5)
    # the key encoder moved, received no gradient and is not trained
    assert any(not torch.equal(b, a) for b, a in zip(calls[0][1], calls[-1][3]))
    for p in list(model.key_backbone.parameters()) + list(model.key_projection_head.parameters()):
        assert not p.requires_grad and p.grad is None
    optimised = {id(p) for group in trainer.optimizers[0].param_groups for p in group["params"] if p.grad is not None}
    assert not optimised & {id(p) for p in model.key_backbone.parameters()}


def test_checkpoint_resume_restores_queue_and_key_encoder(tmp_path):
    data = tiny_data(batch_size=8)
    model = small_moco(queue_size=36)  # not a multiple of the 8 keys per step: the ring wraps
    trainer = tiny_trainer(tmp_path, max_steps=5)
    trainer.fit(model, data)
    path = tmp_path / "step5.ckpt"
    trainer.save_checkpoint(path)
    saved = persistent_state(model)
    assert saved["queue.ptr"].item() == (5 * 8) % 36 and saved["queue.filled"].item() == 36

    restored = small_moco(queue_size=36, proj_hidden_dim=32)
    torch.manual_seed(123)
    for p in restored.key_backbone.parameters():
        p.data.normal_()
    resumed = tiny_trainer(tmp_path, max_steps=5)
    resumed.fit(restored, data, ckpt_path=path, weights_only=False)
    assert resumed.global_step == 5
    state = persistent_state(restored)
    assert state.keys() == saved.keys()
    for key in saved:
        assert torch.equal(state[key], saved[key]), key

    continued = small_moco(queue_size=36)
    more = tiny_trainer(tmp_path, max_steps=6)
    more.fit(continued, data, ckpt_path=path, weights_only=False)
    assert more.global_step == 6
    assert continued.queue.ptr.item() == (6 * 8) % 36
    untouched = [(saved["queue.ptr"].item() + 8 + i) % 36 for i in range(36 - 8)]
    assert torch.equal(continued.queue.features[untouched], saved["queue.features"][untouched])


def test_validate_from_checkpoint_leaves_the_state_alone(tmp_path):
    data = tiny_data(batch_size=8)
    model = small_moco(queue_size=24)
    trainer = tiny_trainer(tmp_path, max_steps=2)
    trainer.fit(model, data)
    path = tmp_path / "last.ckpt"
    trainer.save_checkpoint(path)
    saved = persistent_state(model)

    fresh = small_moco(queue_size=24)
    results = tiny_trainer(tmp_path, limit_val_batches=2).validate(fresh, data, ckpt_path=path, verbose=False, weights_only=False)
    assert torch.isfinite(torch.tensor(results[0]["val/loss"]))
    state = persistent_state(fresh)
    for key in saved:
        assert torch.equal(state[key], saved[key]), key


# --- the configs -----------------------------------------------------------------------------
TINY_CLI = [
    "--trainer.max_steps=3",
    "--trainer.limit_val_batches=1",
    "--trainer.enable_progress_bar=false",
    "--data.init_args.train_size=128",
    "--data.init_args.val_size=32",
    "--data.init_args.test_size=32",
    "--data.init_args.batch_size=32",
]


@pytest.mark.slow
def test_moco_config_fits_and_validates_through_the_cli(tmp_path, monkeypatch, capsys):
    from ssl_app.cli import main

    config = str(REPO / "configs" / "moco.yaml")
    monkeypatch.chdir(tmp_path)
    main(["fit", "--config", config, *TINY_CLI])
    checkpoint = next(tmp_path.glob("runs/*/version_0/checkpoints/last.ckpt"))
    state = torch.load(checkpoint, map_location="cpu", weights_only=False)["state_dict"]
    assert state["queue.filled"].item() == 3 * 32
    main(["validate", "--config", config, *TINY_CLI, f"--ckpt_path={checkpoint}"])
    assert "val/loss" in capsys.readouterr().out
    assert os.path.exists(checkpoint)


def test_negatives_per_anchor_are_the_other_keys_and_the_queue_once_full():
    """Catches a count (read by the "keeps every negative" warning) that forgets the queue, the
    other processes' keys, or symmetric MoCo's second view; checked against the masks of a step
    with a full queue."""
    for options, in_batch in [({}, 0), ({"batch_negatives": True}, 3), ({"batch_negatives": True, "query_candidates": True}, 6)]:
        model = small_moco(queue_size=8, key_bn="none", **options).train()
        for step in range(3):  # 4 keys per step: the queue of 8 is full after 2
            contrast = model.contrast(batch(seed=step))
            model.on_after_backward()
        assert model.queue.is_full()
        assert int(contrast.neg_mask.sum(dim=1).max()) == model.negatives_per_anchor(4, 1) == in_batch + 8
    assert small_moco(batch_negatives=True, queue_size=8).negatives_per_anchor(8, 2) == 8 * 2 - 1 + 8
    assert small_moco(queue_size=8).negatives_per_anchor(8, 2) == 8
    assert small_moco(queue_size=33, symmetric=True, batch_negatives=True).negatives_per_anchor(8, 1) == 2 * (8 - 1) + 33
    assert small_moco(queue_size=33, symmetric=True, query_candidates=True).negatives_per_anchor(8, 1) == 2 * (8 - 1) + 33


def test_a_constant_key_momentum_is_written_once_and_a_cosine_one_every_logged_step(tmp_path):
    """Catches the constant momentum written at every step (a flat series) and the cosine schedule's
    values lost or written off the logged steps."""
    from tests.callbacks.helpers import RecordingLogger

    for schedule, expected in (("constant", 1), ("cosine", 2)):
        logger = RecordingLogger()
        model = small_moco(momentum_schedule=schedule)
        trainer = tiny_trainer(tmp_path, logger=logger, max_steps=4, log_every_n_steps=2)
        trainer.fit(model, datamodule=tiny_data())
        assert len(logger.values("train/key_momentum")) == expected, schedule
        assert "train/key_momentum" in trainer.callback_metrics
