"""LinearProbe keeps its frozen backbone in eval mode while the probe trains (``LinearProbe.train``)."""

from __future__ import annotations

from pathlib import Path

import lightning as L
import pytest
import torch
from lightning.pytorch.callbacks import Callback

from datamodules import LinearEvalDataModule
from ssl_app.evaluation import LinearProbe
from ssl_app.methods import SimCLR
from ssl_app.optim import Optimization
from tests.helpers import tiny_data, tiny_trainer


def method_checkpoint(tmp_path: Path) -> Path:
    """A small-CNN SimCLR (BatchNorm in the backbone) after two steps, saved as ``fit`` would save it
    (LightningCLI adds the method's ``_class_path``, which ``LinearProbe`` reads)."""
    torch.manual_seed(0)
    model = SimCLR(backbone="small_cnn", proj_dim=16, proj_hidden_dim=32)
    trainer = tiny_trainer(tmp_path, max_steps=2)
    trainer.fit(model, tiny_data())
    path = tmp_path / "method.ckpt"
    trainer.save_checkpoint(path)
    saved = torch.load(path, weights_only=False)
    saved["hyper_parameters"]["_class_path"] = "ssl_app.methods.SimCLR"
    torch.save(saved, path)
    return path


class BackboneModes(Callback):
    """Records, around every training batch, whether any backbone module was in training mode."""

    def __init__(self) -> None:
        self.training: list[bool] = []
        self.first_classifier: torch.Tensor | None = None

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if self.first_classifier is None:
            self.first_classifier = pl_module.classifier.weight.detach().clone()
        self.training.append(any(m.training for m in pl_module.backbone.modules()))

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self.training.append(any(m.training for m in pl_module.backbone.modules()))


@pytest.mark.parametrize("train_called", [False, True], ids=["as_built", "after_train()"])
def test_probe_training_never_puts_the_backbone_in_training_mode_nor_moves_its_batchnorm(tmp_path, train_called):
    """Catches the backbone left in training mode: BatchNorm would normalise with batch statistics
    and overwrite the running statistics the method learned (even under ``no_grad``), so the probe
    would read other features than the checkpoint's. Lightning 2.6 never calls ``model.train()``
    in ``fit`` (it keeps each module's mode and restores it after validation), so ``as_built``
    guards the ``backbone.eval()`` of the constructor, and ``after_train()`` the override of
    ``LinearProbe.train``, which is what holds when anything calls ``train()``: ``unfreeze()``, a
    ``on_validation_model_train`` hook calling ``super()``, Lightning versions that did, user code."""
    probe = LinearProbe(
        str(method_checkpoint(tmp_path)),
        optim=Optimization(optimizer="adamw", lr=0.05, weight_decay=0.0, schedule="constant"),
    )
    if train_called:
        probe.train()
    buffers = {name: b.clone() for name, b in probe.backbone.named_buffers()}
    assert any("running_mean" in name for name in buffers)  # there is BatchNorm to protect
    modes = BackboneModes()
    data = LinearEvalDataModule(tiny_data(num_classes=3), val_fraction=0.25, batch_size=8)
    trainer = L.Trainer(
        accelerator="cpu", max_epochs=2, limit_train_batches=3, limit_val_batches=1, num_sanity_val_steps=0,
        logger=False, enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
        callbacks=[modes], default_root_dir=str(tmp_path),
    )  # fmt: skip
    trainer.fit(probe, datamodule=data)
    assert modes.training == [False] * 12  # 2 epochs x 3 batches, before and after each; a validation in between
    for name, before in buffers.items():
        assert torch.equal(before, probe.backbone.get_buffer(name)), name
    assert not torch.equal(modes.first_classifier, probe.classifier.weight)  # while the probe itself trained
