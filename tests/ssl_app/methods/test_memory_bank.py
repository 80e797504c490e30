"""MemoryBank in one process: the update formula, masks, sizing, checkpoints, every loss, the configs."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F

from ssl_app import losses
from ssl_app.errors import ConfigError
from ssl_app.methods import MemoryBank
from ssl_app.methods.stores import LabelledBank
from tests.helpers import tiny_data, tiny_trainer

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """Tiny tensors: a second intra-op thread only adds synchronisation (see test_moco)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


# --- helpers ---------------------------------------------------------------------------------
def small_bank(**kwargs) -> MemoryBank:
    torch.manual_seed(0)
    options = dict(backbone="small_cnn", proj_dim=16, bank_size=20)
    options.update(kwargs)
    return MemoryBank(**options)


def batch(indices, image=8, seed=0, labels=None):
    indices = torch.as_tensor(indices)
    g = torch.Generator().manual_seed(seed)
    size = len(indices)
    views = (torch.randn(size, 3, image, image, generator=g), torch.randn(size, 3, image, image, generator=g))
    labels = indices % 3 if labels is None else torch.as_tensor(labels)
    return views, labels, indices


def bank_state(model) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items() if k.startswith("bank.")}


def train_step(model, data):
    contrast = model.contrast(data)
    loss = model.loss(contrast).value
    loss.backward()
    model.on_after_backward()
    return loss


# --- the update ------------------------------------------------------------------------------
def test_updated_rows_follow_the_formula_and_the_rest_is_untouched():
    model = small_bank(bank_momentum=0.5)
    data = batch([3, 7, 11, 0])
    before = model.bank.features.clone()
    with torch.no_grad():
        z = model.embed(data[0][0])  # train mode, same batch: the z the step uses
    train_step(model, data)
    index = data[2]
    expected = F.normalize(0.5 * before[index] + 0.5 * z, dim=1)
    torch.testing.assert_close(model.bank.features[index], expected, atol=1e-6, rtol=0)
    others = torch.ones(20, dtype=torch.bool)
    others[index] = False
    assert torch.equal(model.bank.features[others], before[others])
    assert model.bank.labels[index].tolist() == data[1].tolist()
    assert (model.bank.labels[others] == -1).all()


def test_repeated_indices_get_the_mean_of_their_embeddings():
    bank = LabelledBank(5, 3)
    before = bank.features.clone()
    z = F.normalize(torch.randn(3, 3), dim=1)
    bank.update(torch.tensor([1, 4, 1]), z, torch.tensor([7, 8, 7]), momentum=0.25)
    torch.testing.assert_close(bank.features[1], F.normalize(0.25 * before[1] + 0.75 * (z[0] + z[2]) / 2, dim=0))
    torch.testing.assert_close(bank.features[4], F.normalize(0.25 * before[4] + 0.75 * z[1], dim=0))


def test_bank_starts_on_the_sphere_identically_everywhere():
    a, b = LabelledBank(50, 8), LabelledBank(50, 8)
    torch.testing.assert_close(a.features.norm(dim=1), torch.ones(50))
    assert torch.equal(a.features, b.features)


# --- masks -----------------------------------------------------------------------------------
def test_full_bank_masks_own_entry_positive_all_others_negative():
    model = small_bank()
    contrast = model.contrast(batch([3, 7, 11, 0]))
    assert contrast.sim.shape == (4, 20)
    expected = torch.zeros(4, 20, dtype=torch.bool)
    expected[torch.arange(4), torch.tensor([3, 7, 11, 0])] = True
    assert torch.equal(contrast.pos_mask, expected)
    assert torch.equal(contrast.neg_mask, ~expected)


@pytest.mark.parametrize("k,seed", [(19, 0), (5, 1), (5, 2), (12, 3)])
def test_sampled_negatives_are_exactly_k_per_anchor(k, seed):
    """Catches a drawn sample of the wrong size, or an anchor's own entry (drawn again) counted as a negative:
    each anchor has exactly K negatives, or K − 1 when its own entry is among the K drawn."""
    model = small_bank(num_negatives=k)
    data = batch([3, 7, 11, 0])
    torch.manual_seed(seed)
    contrast = model.contrast(data)
    assert contrast.sim.shape == (4, 4 + k)
    assert torch.equal(contrast.pos_mask[:, :4], torch.eye(4, dtype=torch.bool))
    assert not contrast.pos_mask[:, 4:].any() and not contrast.neg_mask[:, :4].any()
    # Which entry is behind each drawn column: the bank is random, so a column of similarities
    # identifies its entry (independently of how the method draws).
    with torch.no_grad():
        full = model.embed(data[0][0]) @ model.bank.features.T
    drawn = (contrast.sim[:, 4:, None] - full[:, None, :]).abs().amax(dim=0).argmin(dim=1)
    assert drawn.unique().numel() == k
    own_drawn = (drawn[None, :] == data[2][:, None]).any(dim=1)
    assert contrast.neg_mask.sum(dim=1).tolist() == (k - own_drawn.long()).tolist()


def test_label_positives_come_from_seen_entries_with_the_same_label():
    model = small_bank(loss=losses.SupCon(0.1))
    train_step(model, batch([0, 1, 2, 3, 4, 5], labels=[0, 1, 2, 0, 1, 2]))
    data = batch([6, 7], labels=[0, -1])
    contrast = model.contrast(data)
    expected = torch.zeros(2, 20, dtype=torch.bool)
    expected[0, [0, 3, 6]] = True  # seen entries of class 0, and its own (unseen) entry
    expected[1, 7] = True  # unlabelled: only its own entry
    assert torch.equal(contrast.pos_mask, expected)
    assert torch.equal(contrast.neg_mask, ~expected)


def test_evaluation_contrast_reads_but_never_writes_the_bank():
    model = small_bank()
    train_step(model, batch([0, 1, 2, 3]))
    saved = bank_state(model)
    model.eval()
    contrast = model.contrast(batch([0, 1, 2], seed=5))
    model.on_after_backward()
    assert contrast.sim.shape == (3, 3 + 20)
    assert torch.equal(contrast.pos_mask, torch.cat([torch.eye(3, dtype=torch.bool), torch.zeros(3, 20, dtype=torch.bool)], 1))
    assert torch.equal(contrast.neg_mask, ~contrast.pos_mask)
    for key, value in bank_state(model).items():
        assert torch.equal(value, saved[key])


# --- options ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "kwargs,option",
    [
        ({"bank_momentum": 1.0}, "bank_momentum"),
        ({"bank_momentum": -0.5}, "bank_momentum"),
        ({"bank_size": 0}, "bank_size"),
        ({"num_negatives": 0}, "num_negatives"),
    ],
)
def test_bad_options_raise_config_error_naming_them(kwargs, option):
    with pytest.raises(ConfigError, match=option):
        small_bank(**kwargs)


def fake_trainer(train_size):
    return SimpleNamespace(datamodule=SimpleNamespace(num_samples=lambda split: {"train": train_size}[split]))


def test_setup_sizes_the_bank_from_the_train_split_or_rejects_a_mismatch():
    model = small_bank(bank_size=None)
    assert model.bank.size == 0
    model._trainer = fake_trainer(33)
    model.setup("fit")
    assert model.bank.size == 33 and model.bank.features.shape == (33, 16)

    mismatched = small_bank(bank_size=20)
    mismatched._trainer = fake_trainer(33)
    with pytest.raises(ConfigError, match="bank_size is 20 but the train split has 33"):
        mismatched.setup("fit")

    too_many = small_bank(bank_size=None, num_negatives=33)
    too_many._trainer = fake_trainer(33)
    with pytest.raises(ConfigError, match="num_negatives"):
        too_many.setup("fit")


def test_loading_a_checkpoint_into_an_empty_bank_takes_its_size():
    model = small_bank(bank_size=12)
    train_step(model, batch([0, 5, 9]))
    fresh = small_bank(bank_size=None)
    fresh.load_state_dict(model.state_dict())
    assert torch.equal(fresh.bank.features, model.bank.features)
    wrong = small_bank(bank_size=13)
    with pytest.raises(ConfigError, match="12 entries"):
        wrong.load_state_dict(model.state_dict())


# --- through the Trainer -----------------------------------------------------------------------
def test_a_resume_with_sampled_negatives_equals_the_uninterrupted_run(tmp_path):
    """Catches negatives drawn from the global RNG, whose state a checkpoint does not carry: the
    resumed run (its global RNG seeded otherwise) would contrast other entries and its weights and
    bank would differ from the uninterrupted run's. Mid-epoch, so the data's order and views are
    resumed exactly too (tests/datamodules/test_resume_views.py)."""
    import lightning as L
    from lightning.pytorch.callbacks import ModelCheckpoint

    def run(seed, ckpt_path=None):
        L.seed_everything(0)
        model = small_bank(bank_size=None, num_negatives=5)
        every_3 = ModelCheckpoint(
            dirpath=tmp_path, filename="step{step}", auto_insert_metric_name=False, every_n_train_steps=3, save_top_k=-1
        )
        trainer = tiny_trainer(tmp_path, max_steps=5, enable_checkpointing=True, callbacks=[every_3])
        torch.manual_seed(seed)  # the global RNG at the first step: only the checkpoint may matter
        trainer.fit(model, tiny_data(batch_size=8, train_size=48), ckpt_path=ckpt_path, weights_only=False)
        return model

    straight = run(seed=1)
    resumed = run(seed=2, ckpt_path=tmp_path / "step3.ckpt")
    expected = straight.state_dict()
    for key, value in resumed.state_dict().items():
        assert torch.equal(value, expected[key]), key


def test_checkpoint_resume_restores_the_bank_and_continues(tmp_path):
    data = tiny_data(batch_size=8, train_size=48)
    model = small_bank(bank_size=None)
    trainer = tiny_trainer(tmp_path, max_steps=3)
    trainer.fit(model, data)
    assert model.bank.size == 48
    assert (model.bank.labels >= 0).sum() == 24  # 3 steps × 8 distinct images seen
    path = tmp_path / "step3.ckpt"
    trainer.save_checkpoint(path)
    saved = bank_state(model)

    restored = small_bank(bank_size=None)
    resumed = tiny_trainer(tmp_path, max_steps=3)
    resumed.fit(restored, data, ckpt_path=path, weights_only=False)
    assert resumed.global_step == 3
    for key, value in bank_state(restored).items():
        assert torch.equal(value, saved[key]), key

    continued = small_bank(bank_size=None)
    more = tiny_trainer(tmp_path, max_steps=4)
    more.fit(continued, data, ckpt_path=path, weights_only=False)
    assert more.global_step == 4
    changed = (continued.bank.features != saved["bank.features"]).any(dim=1)
    assert changed.sum() == 8  # exactly one more batch was written

    # validate from the checkpoint: no training data needed, the bank is read, not written
    fresh = small_bank(bank_size=None)
    results = tiny_trainer(tmp_path, limit_val_batches=2).validate(fresh, data, ckpt_path=path, weights_only=False, verbose=False)
    assert torch.isfinite(torch.tensor(results[0]["val/loss"]))
    for key, value in bank_state(fresh).items():
        assert torch.equal(value, saved[key]), key


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
def test_memory_bank_config_fits_and_validates_through_the_cli(tmp_path, monkeypatch, capsys):
    from ssl_app.cli import main

    config = str(REPO / "configs" / "memory_bank.yaml")
    monkeypatch.chdir(tmp_path)
    main(["fit", "--config", config, *TINY_CLI])
    checkpoint = next(tmp_path.glob("runs/*/version_0/checkpoints/last.ckpt"))
    state = torch.load(checkpoint, map_location="cpu", weights_only=False)["state_dict"]
    assert state["bank.features"].shape == (128, 128)
    assert (state["bank.labels"] >= 0).sum() == 3 * 32
    main(["validate", "--config", config, *TINY_CLI, f"--ckpt_path={checkpoint}"])
    assert "val/loss" in capsys.readouterr().out


@pytest.mark.parametrize(
    "configs",
    [
        ["cifar10/memory_bank.yaml"],
        ["cifar10/moco.yaml"],
        ["cifar10/memory_bank.yaml", "losses/table1/hard_t0.3.yaml"],
    ],
    ids=["memory_bank", "moco", "memory_bank+hard"],
)
def test_cifar10_configs_parse(configs, capsys):
    from ssl_app.cli import main

    paths = [arg for name in configs for arg in ("--config", str(REPO / "configs" / name))]
    missing = [p for p in paths[1::2] if not Path(p).exists()]
    assert not missing, f"configs missing (a shipped config was removed or renamed): {missing}"
    with pytest.raises(SystemExit) as exit_info:
        main(["fit", *paths, "--print_config"])
    assert exit_info.value.code in (0, None)
    printed = capsys.readouterr().out
    assert "datamodules.CIFAR10DataModule" in printed and "resnet18_cifar" in printed


def test_negatives_per_anchor_are_the_other_entries_or_the_drawn_ones():
    """Catches a count (read by the "keeps every negative" warning) that includes the anchor's own
    entry, or ignores ``num_negatives``; unknown (None) before the bank is sized."""
    assert small_bank(bank_size=48).negatives_per_anchor(8, 1) == 47
    assert small_bank(bank_size=48, num_negatives=5).negatives_per_anchor(8, 2) == 5
    assert small_bank(bank_size=None).negatives_per_anchor(8, 1) is None
    model = small_bank().train()
    contrast = model.contrast(batch([0, 1, 2, 3]))
    assert int(contrast.neg_mask.sum(dim=1).max()) == model.negatives_per_anchor(4, 1) == 20 - 1
