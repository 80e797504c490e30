"""Settings that silently do nothing are named once, at the start of training."""

from __future__ import annotations

import warnings

import torch

from ssl_app.losses import HardContrastive, HardSimple, InfoNCE
from ssl_app.methods import MemoryBank, MoCo, SimCLR
from tests.helpers import tiny_data, tiny_trainer

SMALL = dict(backbone="small_cnn", backbone_norm="group", proj_batch_norm=False, proj_hidden_dim=16, proj_dim=8)


def start_warnings(model, tmp_path, batch_size=8) -> list[str]:
    torch.manual_seed(0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        tiny_trainer(tmp_path, max_steps=1).fit(model, datamodule=tiny_data(batch_size=batch_size))
    return [str(w.message) for w in caught]


def test_a_hard_loss_keeping_every_negative_is_named(method_case, tmp_path):
    """Catches the warning missing, repeated, or naming another count than the method's own
    ``negatives_per_anchor`` (every registered method: tests/generic.py; each method's count is a
    fact of its own unit tests)."""
    model = method_case.build(loss=HardSimple(num_negatives=10_000), backbone_norm="group", proj_batch_norm=False)
    messages = [m for m in start_warnings(model, tmp_path) if "keeps every negative" in m]
    available = model.negatives_per_anchor(8, 1)
    if available is None:
        assert not messages  # the method does not say how many negatives an anchor has
        return
    assert len(messages) == 1
    assert "num_negatives=10000" in messages[0] and f"has {available} negatives" in messages[0]
    assert f"exactly {HardSimple.same_as_with_every_negative}" in messages[0]


def test_a_hard_loss_with_fewer_negatives_is_silent(tmp_path):
    model = SimCLR(loss=HardContrastive(num_negatives=13), **SMALL)  # one fewer than the 2·(8 − 1) = 14 negatives
    assert model.negatives_per_anchor(8, 1) == 14
    assert not [m for m in start_warnings(model, tmp_path) if "keeps every negative" in m]


def test_head_options_a_linear_head_ignores_are_named(tmp_path):
    model = MemoryBank(loss=InfoNCE(0.1), **{**SMALL, "proj_hidden_dim": 64})
    messages = start_warnings(model, tmp_path)
    assert any("model.proj_hidden_dim" in m and "ignored" in m for m in messages)
    quiet = MemoryBank(loss=InfoNCE(0.1), backbone="small_cnn", backbone_norm="group", proj_dim=8)
    assert not [m for m in start_warnings(quiet, tmp_path) if "ignored" in m]


def test_moco_names_a_key_bn_that_cannot_work(tmp_path):
    model = MoCo(loss=InfoNCE(0.2), queue_size=16, key_bn="shuffle", backbone="small_cnn", proj_hidden_dim=16, proj_dim=8)
    messages = start_warnings(model, tmp_path)
    assert any("key_bn=shuffle -> shuffle: has no effect in one process" in m for m in messages)
    no_bn = MoCo(loss=InfoNCE(0.2), queue_size=16, split_bn_groups=4, **SMALL)
    messages = start_warnings(no_bn, tmp_path)
    assert any("model.split_bn_groups" in m for m in messages)
