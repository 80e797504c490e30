"""The stored-candidate buffers (MoCo's queue, the memory bank) as checkpointed state: dtypes,
fresh contents after a resize, and loading checkpoints that do not fit. Written to kill mutants
that survived ``mutmut`` (docs/testing.md)."""

from __future__ import annotations

import pytest
import torch

from ssl_app.errors import ConfigError
from ssl_app.methods import MemoryBank
from ssl_app.methods.stores import LabelledBank, LabelledQueue


def test_queue_buffers_are_integer_counters():
    """Catches ``filled``/``labels``/``ptr`` stored as floats (checkpoints, index arithmetic, label equality)."""
    queue = LabelledQueue(6, 4)
    assert queue.labels.dtype == queue.ptr.dtype == queue.filled.dtype == torch.long
    queue.enqueue(torch.nn.functional.normalize(torch.randn(4, 4), dim=1), torch.arange(4))
    queue.enqueue(torch.nn.functional.normalize(torch.randn(4, 4), dim=1), torch.arange(4))
    assert queue.filled.dtype == torch.long and queue.filled.item() == 6
    assert "size=6, dim=4" in repr(queue)


def test_bank_resize_gives_fresh_unseen_unit_entries():
    """Catches a resize that leaves labels other than −1 ("never seen") or non-unit entries."""
    bank = LabelledBank(0, 5)
    bank.resize(7)
    assert bank.features.shape == (7, 5) and bank.labels.dtype == torch.long
    assert bank.labels.tolist() == [-1] * 7
    torch.testing.assert_close(bank.features.norm(dim=1), torch.ones(7))
    assert "size=7, dim=5" in repr(bank)


def small_bank(**kwargs) -> MemoryBank:
    torch.manual_seed(0)
    return MemoryBank(**{"backbone": "small_cnn", "proj_dim": 8, "bank_size": None, **kwargs})


def test_a_checkpoint_bank_of_another_dimension_names_proj_dim():
    """Catches a wrong-width bank loaded into an empty bank with a generic size error (or silently)."""
    state = small_bank(bank_size=4).state_dict()
    state["bank.features"] = torch.randn(4, 6)
    with pytest.raises(ConfigError, match=r"shape \(4, 6\).*8 dimensions \(model.proj_dim\)"):
        small_bank().load_state_dict(state)


def test_strict_loading_still_reports_unexpected_and_mismatched_bank_keys():
    """Catches the bank's custom loader swallowing PyTorch's own strict-loading errors."""
    state = small_bank(bank_size=4).state_dict()
    extra = dict(state)
    extra["bank.surplus"] = torch.zeros(1)
    with pytest.raises(RuntimeError, match="bank.surplus"):
        small_bank().load_state_dict(extra)
    missing = {k: v for k, v in state.items() if k != "bank.labels"}
    with pytest.raises(RuntimeError, match="bank.labels"):
        small_bank().load_state_dict(missing)
    wrong = dict(state)
    wrong["bank.labels"] = torch.zeros(5, dtype=torch.long)
    with pytest.raises(RuntimeError, match="bank.labels"):
        small_bank().load_state_dict(wrong)


def test_resize_and_valid_stay_on_the_stores_device():
    """Catches a resize that puts a GPU model's bank back on the CPU (a device-mismatch crash at the
    next step), or a queue mask built on the default device. "meta" stands in for an accelerator."""
    bank = LabelledBank(0, 4).to("meta")
    bank.resize(3)
    assert bank.features.device.type == "meta" and bank.labels.device.type == "meta"
    assert bank.features.shape == (3, 4) and bank.labels.dtype == torch.long
    queue = LabelledQueue(5, 4).to("meta")
    assert queue.valid().device.type == "meta"


def test_a_non_finite_key_is_not_enqueued_and_its_slot_keeps_its_content():
    """Catches a NaN key (a diverged, skipped step) entering the queue and poisoning every later loss."""
    queue = LabelledQueue(4, 2)
    queue.enqueue(torch.tensor([[1.0, 0.0], [0.0, 1.0]]), torch.tensor([5, 6]))
    before = queue.features.clone()
    queue.enqueue(torch.tensor([[float("nan"), 0.0], [0.6, 0.8]]), torch.tensor([7, 8]))
    assert torch.isfinite(queue.features).all()
    assert torch.equal(queue.features[2], before[2]) and queue.labels[2].item() == -1  # slot 2 unchanged
    assert torch.equal(queue.features[3], torch.tensor([0.6, 0.8])) and queue.labels[3].item() == 8
    assert queue.ptr.item() == 0 and queue.filled.item() == 4  # the ring still advances


def test_a_non_finite_embedding_leaves_its_bank_entry_and_only_that_one():
    """Catches one NaN row spreading through the repeat-averaging matmul to the whole batch's update."""
    bank = LabelledBank(4, 2)
    before = bank.features.clone()
    indices = torch.tensor([0, 1, 1, 2])
    features = torch.tensor([[1.0, 0.0], [0.0, 1.0], [float("inf"), 0.0], [0.6, 0.8]])
    bank.update(indices, features, torch.tensor([3, 4, 4, 5]), momentum=0.0)
    assert torch.isfinite(bank.features).all()
    assert torch.equal(bank.features[1], before[1]) and bank.labels[1].item() == -1  # one occurrence was inf
    torch.testing.assert_close(bank.features[0], torch.tensor([1.0, 0.0]))
    torch.testing.assert_close(bank.features[2], torch.tensor([0.6, 0.8]))
    assert bank.labels[[0, 2]].tolist() == [3, 5] and torch.equal(bank.features[3], before[3])
