import pytest
import torch
from lightly.loss import NTXentLoss

from ssl_app.errors import ConfigError
from ssl_app.losses import InfoNCE
from ssl_app.methods import SimCLR


def small_simclr(**kwargs) -> SimCLR:
    torch.manual_seed(0)
    return SimCLR(backbone="small_cnn", proj_hidden_dim=32, proj_dim=16, **kwargs)


def batch(size=8, image=16):
    g = torch.Generator().manual_seed(0)
    views = (torch.randn(size, 3, image, image, generator=g), torch.randn(size, 3, image, image, generator=g))
    return views, torch.arange(size) % 3, torch.arange(size)


def test_simclr_infonce_equals_lightly_ntxent():
    model = small_simclr(loss=InfoNCE(temperature=0.3)).eval()
    views, labels, index = batch()
    contrast = model.contrast((views, labels, index))
    ours = model.loss(contrast).value
    with torch.no_grad():
        z1, z2 = model.embed(views[0]), model.embed(views[1])
    reference = NTXentLoss(temperature=0.3)(z1, z2)
    torch.testing.assert_close(ours, reference, atol=1e-5, rtol=0)


def test_label_based_loss_gets_class_positives():
    class LabelLoss(InfoNCE):
        uses_labels = True

    model = small_simclr(loss=LabelLoss(temperature=0.3)).eval()
    views, labels, index = batch()
    contrast = model.contrast((views, labels, index))
    all_labels = labels.repeat(2)
    expected = (all_labels[:, None] == all_labels[None, :]) & ~torch.eye(16, dtype=torch.bool)
    assert torch.equal(contrast.pos_mask, expected)
    assert torch.equal(contrast.neg_mask, all_labels[:, None] != all_labels[None, :])


def test_similarity_is_float32_under_bf16_autocast():
    model = small_simclr()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        contrast = model.contrast(batch())
    assert contrast.sim.dtype == torch.float32
    assert contrast.sim.diagonal().sub(1).abs().max() < 1e-2  # bf16 encoder, fp32 product of its unit rows


def test_loss_must_be_a_strategy():
    with pytest.raises(ConfigError, match="model.loss"):
        SimCLR(loss=torch.nn.MSELoss(), backbone="small_cnn")


def test_unknown_backbone_names_the_choices():
    with pytest.raises(ConfigError, match="unknown backbone 'resnet9'"):
        SimCLR(backbone="resnet9")


def test_epoch_milestones_hold_for_a_run_bounded_by_max_steps():
    """4 batches an epoch, max_steps=6: the epoch-1 milestone must apply after step 4."""
    import lightning as L

    from datamodules import SyntheticDataModule
    from ssl_app.optim import Optimization

    model = small_simclr(optim=Optimization(schedule="multistep", milestones=[1], lr=0.1))
    data = SyntheticDataModule(train_size=64, val_size=16, test_size=16, image_size=16, batch_size=16, num_workers=0)
    trainer = L.Trainer(
        max_steps=6,
        max_epochs=-1,
        accelerator="cpu",
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        limit_val_batches=0,
    )
    trainer.fit(model, data)
    assert trainer.optimizers[0].param_groups[0]["lr"] == pytest.approx(0.01)


def test_negatives_per_anchor_are_the_other_images_views():
    """Catches a count (read by the "keeps every negative" warning) that includes the anchor's own
    other view, or forgets the other processes' images; checked against a step's masks."""
    model = small_simclr().train()
    contrast = model.contrast(batch(size=8))
    assert int(contrast.neg_mask.sum(dim=1).max()) == model.negatives_per_anchor(8, 1) == 2 * (8 - 1)
    assert model.negatives_per_anchor(8, 2) == 2 * (16 - 1)
