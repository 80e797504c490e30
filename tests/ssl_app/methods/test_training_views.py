"""The datamodule builds only the training views a method consumes (the memory bank uses one)."""

from __future__ import annotations

from tests.helpers import tiny_data, tiny_trainer


def test_training_batches_carry_the_views_the_method_uses(method_case, tmp_path):
    """Catches a datamodule that ignores the method's ``train_views`` (every registered method:
    tests/generic.py), e.g. two augmented views built for the memory bank, which reads one."""
    model = method_case.build(backbone_norm="group", proj_batch_norm=False)
    views = model.train_views
    assert views == method_case.target.train_views >= 1
    seen = []
    model.on_train_batch_start = lambda batch, batch_idx: seen.append(len(batch[0]))
    tiny_trainer(tmp_path, max_steps=2).fit(model, datamodule=tiny_data())
    assert seen == [views, views]
