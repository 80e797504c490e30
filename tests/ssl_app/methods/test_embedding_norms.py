"""The projections' norms in the hand-over (``MaskedSimilarities.anchor_norms``/``candidate_norms``) for a
loss that ``needs_embedding_norms``: every method fills them from the same pass as its embeddings, its
stores keep them (only then: other losses' state dicts are unchanged), checkpoints carry them, and a
method that leaves them out is one ConfigError. Every registered method; the losses read from the
registry's declarations, none named."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
import torch
import torch.nn.functional as F

from ssl_app.errors import ConfigError
from ssl_app.losses.base import ContrastiveLoss, LossTerms, masked_mean
from ssl_app.methods import MaskedSimilarities, MemoryBank, MoCo, SimCLR
from ssl_app.resume import check_state_dict
from tests.generic import TINY_MODEL, first_examples, loss_cases, set_up
from tests.ssl_app.methods.test_resume import EPOCHS, STEPS_PER_EPOCH, fit

BATCH = 4

#: The registered losses that declare ``needs_embedding_norms``, each in its first example.
NORM_LOSSES = [
    pytest.param(case, id=case.id)
    for case in first_examples(loss_cases())
    if case.entry.capabilities.get("needs_embedding_norms")
]


class ReadsNorms(ContrastiveLoss):
    """A loss whose value moves with every norm it is handed: the mean of ``s_ij n_i n_j`` over the
    positives and negatives (so a norm without gradient, or in the wrong column, changes the gradient)."""

    needs_embedding_norms = True

    def terms(self, handover: MaskedSimilarities, tau: Any, with_stats: bool) -> LossTerms:
        dot = handover.sim.float() * handover.anchor_norms.float()[:, None] * handover.candidate_norms.float()[None, :]
        return LossTerms(masked_mean(dot, handover.pos_mask | handover.neg_mask))


class Projections:
    """Every output of a projection head (a forward hook), in call order."""

    def __init__(self, head: torch.nn.Module) -> None:
        self.outputs: list[torch.Tensor] = []
        head.register_forward_hook(lambda module, inputs, output: self.outputs.append(output))


def batch(views: int, seed: int = 0) -> tuple:
    g = torch.Generator().manual_seed(seed)
    images = tuple(torch.randn(BATCH, 3, 8, 8, generator=g) for _ in range(views))
    return images, torch.arange(BATCH) % 3, torch.arange(BATCH) * 5 + seed


def stores(model: torch.nn.Module) -> list[torch.nn.Module]:
    return [module for module in model.modules() if hasattr(module, "keep_norms")]


def test_every_method_hands_a_loss_that_needs_them_the_norms_of_its_projections(method_case):
    """Catches a method that forgets the norms (in training or evaluation), hands the normalised
    embeddings' norms (all 1) or norms from another pass, cuts their gradient, hands a candidate a norm
    that is neither one of this step's projections' nor one its store keeps, or lets its queue or bank
    keep no norm or a stale one: the anchors' norms are those of the online head's output, and the
    norms written to a store are those of the step's candidates (two steps, so a queue has entries)."""
    model = set_up(method_case.build(loss=ReadsNorms())).train()
    for step in range(2):
        online = Projections(model.projection_head)
        key_head = getattr(model, "key_projection_head", None)
        keys = Projections(key_head) if key_head is not None else None
        kept = torch.cat(
            [store.norms[store.valid()] if hasattr(store, "valid") else store.norms for store in stores(model)]
            or [torch.zeros(0)]
        )
        contrast = model.contrast(batch(model.train_views, seed=step))
        assert contrast.anchor_norms is not None and contrast.candidate_norms is not None
        assert contrast.anchor_norms.shape == contrast.sim.shape[:1]
        assert contrast.candidate_norms.shape == contrast.sim.shape[1:]
        raw = online.outputs[0]
        torch.testing.assert_close(contrast.anchor_norms, raw.norm(dim=1))
        assert not torch.allclose(contrast.anchor_norms, torch.ones_like(contrast.anchor_norms))
        assert contrast.anchor_norms.requires_grad
        encoded = torch.cat([output.detach().norm(dim=1) for output in online.outputs + (keys.outputs if keys else [])])
        allowed = torch.cat([encoded, kept])
        used = (contrast.pos_mask | contrast.neg_mask).any(dim=0)
        distance = (contrast.candidate_norms.detach()[used][:, None] - allowed[None, :]).abs().min(dim=1).values
        assert (distance < 1e-5).all(), f"step {step}: candidate norms that no projection of the step and no store has"
        model.compute_loss(contrast).value.backward()
        model.on_after_backward()  # the step's keys / entries join the store with their norms
        for store in stores(model):
            assert store.keep_norms and store.norms.shape == store.labels.shape
            source = keys.outputs[0] if keys is not None else raw
            expected = source.detach().norm(dim=1)
            if hasattr(store, "valid"):  # a queue: the slots the step's keys went to
                slots = (store.ptr - len(expected) + torch.arange(len(expected))) % store.size
            else:  # a bank: the batch's entries
                slots = batch(1, seed=step)[2]
            written = store.norms[slots]
            torch.testing.assert_close(torch.sort(written).values, torch.sort(expected).values)
    model.eval()
    with torch.no_grad():
        evaluated = model.contrast(batch(2, seed=2))
    assert evaluated.anchor_norms.shape == evaluated.sim.shape[:1]
    assert evaluated.candidate_norms.shape == evaluated.sim.shape[1:]
    assert torch.isfinite(model.compute_loss(evaluated).value)


def test_a_loss_that_reads_no_norm_keeps_every_state_dict_as_it_was(method_case):
    """Catches norms allocated for every loss (a checkpoint of any other loss would gain keys, and old
    checkpoints would not load); and a store that keeps norms but cannot load a checkpoint written
    without them (every norm 1, as the loss that wrote it read them), nor pass ``--ckpt_path``'s check."""
    plain = set_up(method_case.build())
    assert not [key for key in plain.state_dict() if key.endswith("norms")]
    reading = set_up(method_case.build(loss=ReadsNorms()))
    kept = [store for store in stores(reading)]
    assert all(store.keep_norms for store in kept)
    state = plain.state_dict()
    check_state_dict({"state_dict": dict(state), "hyper_parameters": {}}, reading, "old.ckpt")
    reading.load_state_dict(state)
    for store in kept:
        assert torch.equal(store.norms, torch.ones_like(store.norms))


class LeavesNormsOut(SimCLR):
    """A method written before the norms existed: its hand-over has none."""

    def contrast(self, batch: Any) -> MaskedSimilarities:
        return dataclasses.replace(super().contrast(batch), anchor_norms=None, candidate_norms=None)


def test_a_method_that_leaves_the_norms_out_is_a_config_error_naming_both():
    """Catches a loss that silently reads missing norms as 1 when a method forgot them."""
    torch.manual_seed(0)
    model = LeavesNormsOut(loss=ReadsNorms(), **TINY_MODEL)
    with pytest.raises(ConfigError, match=r"LeavesNormsOut does not hand the norms of its projections.*ReadsNorms needs"):
        model.compute_loss(model.contrast(batch(2)))


@pytest.mark.parametrize("norm_loss", NORM_LOSSES)
def test_resume_with_a_loss_that_reads_norms_equals_the_uninterrupted_run(tmp_path, method_case, norm_loss):
    """Catches stored norms that a checkpoint loses or restores wrongly (a queue's or bank's ``norms``
    missing from the state dict, or reset on load): as tests/ssl_app/methods/test_resume.py, with the
    registered loss that reads the norms."""
    straight, trainer, _ = fit(method_case, tmp_path / "straight", loss=norm_loss.build())
    assert trainer.global_step == EPOCHS * STEPS_PER_EPOCH
    halfway = tmp_path / "straight" / "ckpt" / "epoch=0.ckpt"
    resumed, _, _ = fit(method_case, tmp_path / "resumed", ckpt_path=halfway, loss=norm_loss.build())
    a, b = straight.state_dict(), resumed.state_dict()
    assert a.keys() == b.keys()
    for key in a:
        assert torch.equal(a[key], b[key]), key
    for store in stores(straight):
        assert not torch.equal(store.norms, torch.ones_like(store.norms))  # the norms were written, and compared


def test_the_stores_hand_over_each_entrys_kept_norm_in_its_column():
    """Catches a queue or bank whose hand-over gives its entries other norms than the ones it keeps, or
    in another order (MoCo: the keys, then the queue; the memory bank: every entry, in evaluation after
    the view-2 embeddings)."""
    torch.manual_seed(0)
    moco = MoCo(loss=ReadsNorms(), queue_size=8, split_bn_groups=2, **TINY_MODEL).train()
    moco.queue.enqueue(F.normalize(torch.randn(8, 8), dim=1), torch.arange(8) % 3, torch.ones(8))
    moco.queue.norms.copy_(torch.linspace(0.5, 2.0, 8))
    contrast = moco.contrast(batch(2))
    assert torch.equal(contrast.candidate_norms[BATCH : BATCH + 8], moco.queue.norms)
    bank = MemoryBank(loss=ReadsNorms(), bank_size=20, **TINY_MODEL).train()
    bank.bank.norms.copy_(torch.linspace(0.5, 2.0, 20))
    assert torch.equal(bank.contrast(batch(1)).candidate_norms, bank.bank.norms)
    bank.eval()
    with torch.no_grad():
        assert torch.equal(bank.contrast(batch(2)).candidate_norms[BATCH:], bank.bank.norms)
