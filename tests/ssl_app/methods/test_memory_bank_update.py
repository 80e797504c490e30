"""The memory bank through the method: the update with m ≠ 0.5 in a real ``Trainer.fit``, and the
SupCon label masks with sampled negatives (``num_negatives``).

Every older method-level bank test uses m = 0.5, where ``m`` and ``1 − m`` are the same number.
"""

from __future__ import annotations

import lightning as L
import pytest
import torch
import torch.nn.functional as F

from ssl_app import losses
from ssl_app.methods import MemoryBank
from tests.helpers import tiny_data, tiny_trainer

PROJ = 16


def make_bank(**kwargs) -> MemoryBank:
    torch.manual_seed(0)
    options = {
        "loss": losses.InfoNCE(temperature=0.1),
        "backbone": "small_cnn",
        "backbone_norm": "group",  # no BatchNorm: re-embedding a batch gives the step's z exactly
        "proj_dim": PROJ,
    }
    options.update(kwargs)
    return MemoryBank(**options)


class BankRecorder(L.Callback):
    """Before each batch: the bank, the batch and the z the step will compute (same weights, same input)."""

    def __init__(self) -> None:
        self.steps = []

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        views, labels, indices = batch
        with torch.no_grad():
            z = pl_module.embed(views[0])
        self.steps.append(
            {
                "features": pl_module.bank.features.clone(),
                "labels": pl_module.bank.labels.clone(),
                "z": z,
                "y": labels.clone(),
                "indices": indices.clone(),
            }
        )

    def on_train_end(self, trainer, pl_module) -> None:
        self.final = {"features": pl_module.bank.features.clone(), "labels": pl_module.bank.labels.clone()}


@pytest.mark.parametrize("m", [0.2, 0.9])
def test_training_steps_update_the_bank_with_m_on_the_old_entry(tmp_path, m):
    """Catches ``bank ← normalise((1 − m)·bank + m·z)`` (m and 1 − m swapped), invisible at m = 0.5."""
    model = make_bank(bank_momentum=m)
    recorder = BankRecorder()
    trainer = tiny_trainer(tmp_path, max_steps=3, callbacks=[recorder])
    trainer.fit(model, tiny_data(batch_size=8, train_size=48))
    assert len(recorder.steps) == 3
    afters = recorder.steps[1:] + [recorder.final]
    for step, (before, after) in enumerate(zip(recorder.steps, afters)):
        index = before["indices"]
        assert index.unique().numel() == index.numel()  # a plain sampler: no repeats in one batch
        old = before["features"][index].double()
        expected = F.normalize(m * old + (1 - m) * before["z"].double(), dim=1)
        torch.testing.assert_close(after["features"][index].double(), expected, atol=1e-6, rtol=0, msg=f"step {step}")
        untouched = torch.ones(model.bank.size, dtype=torch.bool)
        untouched[index] = False
        assert torch.equal(after["features"][untouched], before["features"][untouched])
        assert torch.equal(after["labels"][index], before["y"])
        assert torch.equal(after["labels"][untouched], before["labels"][untouched])


# --- SupCon with sampled negatives -----------------------------------------------------------
def identify_columns(model: MemoryBank, anchors: torch.Tensor, sim: torch.Tensor) -> torch.Tensor:
    """The bank index behind each column of ``sim``: the entry whose similarities to the anchors match.

    Independent of how the method draws its sample: the bank is random, so every entry's column
    of anchor similarities is unique.
    """
    with torch.no_grad():
        full = anchors @ model.bank.features.T  # [B, size]
    distance = (sim[:, :, None] - full[:, None, :]).abs().amax(dim=0)  # [M, size]
    best = distance.min(dim=1)
    assert (best.values < 1e-5).all()
    return best.indices


@pytest.mark.parametrize("seed", range(4))
def test_supcon_sampled_negatives_positives_are_own_entry_and_drawn_entries_with_the_label(seed):
    """Catches SupCon label positives dropped (or −1 matching −1) on the ``num_negatives`` path."""
    size, k = 20, 12
    model = make_bank(loss=losses.SupCon(temperature=0.1), bank_size=size, num_negatives=k)
    # Stored labels: entries 0..9 seen with labels 0/1/-1 (unlabelled); 10..19 never seen (-1).
    model.bank.labels[:10] = torch.tensor([0, 1, -1, 0, 1, -1, 0, 1, -1, 0])
    g = torch.Generator().manual_seed(seed)
    indices = torch.tensor([0, 4, 2, 15])
    labels = torch.tensor([0, 1, -1, -1])  # an unlabelled anchor with a seen entry, and one never seen
    views = (torch.randn(4, 3, 8, 8, generator=g), torch.randn(4, 3, 8, 8, generator=g))
    torch.manual_seed(seed)
    contrast = model.contrast((views, labels, indices))
    assert contrast.sim.shape == (4, 4 + k)  # the batch's own entries, then exactly K drawn ones
    with torch.no_grad():
        z = model.embed(views[0])
    column = identify_columns(model, z, contrast.sim)
    assert torch.equal(column[:4], indices)
    drawn = column[4:]
    assert drawn.unique().numel() == k  # drawn without replacement
    stored = model.bank.labels
    for i in range(4):
        for j in range(4 + k):
            entry = column[j].item()
            if j < 4:
                want_pos, want_neg = j == i, False
            elif entry == indices[i].item():  # own entry drawn again: neither
                want_pos, want_neg = False, False
            else:
                same = labels[i].item() >= 0 and stored[entry].item() == labels[i].item()
                want_pos, want_neg = same, not same
            assert contrast.pos_mask[i, j].item() == want_pos, (i, j, entry)
            assert contrast.neg_mask[i, j].item() == want_neg, (i, j, entry)
    # Unlabelled anchors: the only positive is the own entry.
    assert contrast.pos_mask[2:].sum(dim=1).tolist() == [1, 1]


def test_supcon_sampled_negatives_loss_matches_a_hand_computed_supcon():
    """Catches the label masks reaching the loss wrongly: the value equals SupCon over the identified candidates."""
    size, k = 20, 10
    model = make_bank(loss=losses.SupCon(temperature=0.2), bank_size=size, num_negatives=k)
    model.bank.labels[:] = torch.arange(size) % 3
    g = torch.Generator().manual_seed(3)
    indices, labels = torch.tensor([1, 5, 9]), torch.tensor([1, 2, 0])
    views = (torch.randn(3, 3, 8, 8, generator=g), torch.randn(3, 3, 8, 8, generator=g))
    torch.manual_seed(11)
    contrast = model.contrast((views, labels, indices))
    value = model.loss(contrast).value
    with torch.no_grad():
        z = model.embed(views[0]).double()
    column = identify_columns(model, z.float(), contrast.sim)
    bank = model.bank.features.double()
    total = 0.0
    for i in range(3):
        own = indices[i].item()
        candidates = [own] + [c.item() for c in column[3:] if c.item() != own]  # own entry, drawn others
        logits = torch.stack([z[i] @ bank[c] for c in candidates]) / 0.2
        positives = [a for a, c in enumerate(candidates) if a == 0 or (model.bank.labels[c].item() == labels[i].item())]
        log_prob = logits - torch.logsumexp(logits, dim=0)
        total += -log_prob[positives].mean().item()
    assert value.item() == pytest.approx(total / 3, abs=1e-5)
