"""MoCo on one device must not let a query meet its key through BatchNorm statistics."""

from __future__ import annotations

import pytest
import torch

from ssl_app.cli import main
from ssl_app.errors import ConfigError
from ssl_app.methods import MoCo
from ssl_app.methods.moco import resolve_key_bn
from ssl_app.models.split_batchnorm import SplitBatchNorm
from tests.helpers import tiny_data, tiny_trainer
from tests.ssl_app.cli.test_cli import QUICKSTART

B = 16


def batchnorm_moco(**kwargs) -> MoCo:
    torch.manual_seed(0)
    options = dict(backbone="small_cnn", proj_hidden_dim=32, proj_dim=16, queue_size=32, split_bn_groups=4)
    return MoCo(**{**options, **kwargs})


def group_mates(encode, images: torch.Tensor) -> list[frozenset[int]]:
    """For each sample i, the samples j whose input changes i's output (its BatchNorm group)."""
    with torch.no_grad():
        base = encode(images)
        mates: list[set[int]] = [set() for _ in range(images.shape[0])]
        for j in range(images.shape[0]):
            changed = images.clone()
            changed[j] += torch.randn_like(changed[j])
            moved = (encode(changed) - base).abs().amax(dim=1) > 1e-5
            for i in moved.nonzero().flatten().tolist():
                mates[i].add(j)
    return [frozenset(m) for m in mates]


def query_and_key_groups(model: MoCo) -> tuple[list, list]:
    images = torch.randn(B, 3, 8, 8, generator=torch.Generator().manual_seed(1))

    def keys(x):
        torch.manual_seed(5)  # the same key shuffle for every perturbed batch
        return model.global_keys(x)

    return group_mates(model.embed, images), group_mates(keys, images)


def test_split_gives_no_key_the_batchnorm_group_of_its_own_query():
    model = batchnorm_moco(key_bn="split").train()
    queries, keys = query_and_key_groups(model)
    assert all(len(group) == B // 4 for group in queries + keys)  # 4 groups of 4, really split
    assert all(q != k for q, k in zip(queries, keys))


def test_plain_batchnorm_in_one_process_leaks():
    """The negative control: without split, every key is normalised with its own query's batch."""
    model = batchnorm_moco(key_bn="none").train()
    queries, keys = query_and_key_groups(model)
    assert all(q == k == frozenset(range(B)) for q, k in zip(queries, keys))


def test_split_keys_are_returned_in_batch_order():
    """Shuffled before the key encoder, unshuffled after: key i is still the key of image i."""
    model = batchnorm_moco(key_bn="split").eval()  # eval: BatchNorm no longer depends on the group
    images = torch.randn(B, 3, 8, 8)
    torch.testing.assert_close(model._encode_permuted(images, torch.randperm(B)), model.key_embed(images))


@pytest.mark.parametrize(
    "key_bn,world,has_bn,expected",
    [("auto", 1, True, "split"), ("auto", 2, True, "shuffle"), ("auto", 1, False, "none"), ("auto", 4, False, "none"),
     ("shuffle", 1, True, "shuffle"), ("split", 2, True, "split"), ("none", 1, True, "none")],
)  # fmt: skip
def test_auto_resolves_by_process_count_and_batchnorm(key_bn, world, has_bn, expected):
    assert resolve_key_bn(key_bn, world, has_bn) == expected


def test_auto_in_one_process_splits_both_encoders_and_says_so(tmp_path, caplog):
    model = batchnorm_moco()
    assert model.key_bn == "auto" and not any(isinstance(m, SplitBatchNorm) for m in model.modules())
    trainer = tiny_trainer(tmp_path, max_steps=2)
    with caplog.at_level("INFO"):
        trainer.fit(model, datamodule=tiny_data(batch_size=8))
    for encoder in (model.backbone, model.projection_head, model.key_backbone, model.key_projection_head):
        assert any(isinstance(m, SplitBatchNorm) for m in encoder.modules())
    assert "key_bn=auto -> split" in caplog.text


def test_auto_without_batchnorm_changes_nothing(tmp_path):
    model = batchnorm_moco(backbone_norm="group", proj_batch_norm=False)
    tiny_trainer(tmp_path, max_steps=1).fit(model, datamodule=tiny_data(batch_size=8))
    assert model.resolved_key_bn == "none"


def test_a_batch_too_small_to_split_fails_before_training(tmp_path):
    model = batchnorm_moco(split_bn_groups=8)
    with pytest.raises(ConfigError, match="split_bn_groups=8"):
        tiny_trainer(tmp_path, max_steps=1).fit(model, datamodule=tiny_data(batch_size=8))  # 1 per group


def test_a_checkpoint_of_plain_batchnorm_loads_into_a_split_model():
    old = batchnorm_moco(key_bn="none")
    new = batchnorm_moco(key_bn="split")
    new.load_state_dict(old.state_dict())  # strict: same names and shapes
    images = torch.randn(4, 3, 8, 8)
    torch.testing.assert_close(new.eval().embed(images), old.eval().embed(images))


def test_split_bn_groups_is_a_documented_option(capsys):
    with pytest.raises(SystemExit):
        main(["fit", "--config", QUICKSTART, "--model=ssl_app.methods.MoCo", "--print_config"])
    printed = capsys.readouterr().out
    assert "key_bn: auto" in printed and "split_bn_groups: 8" in printed
    assert "backbone:" in printed and "proj_hidden_dim:" in printed  # the base options, through **kwargs


def test_bad_split_options_are_config_errors():
    with pytest.raises(ConfigError, match="split_bn_groups"):
        batchnorm_moco(split_bn_groups=1)
    with pytest.raises(ConfigError, match="key_bn"):
        batchnorm_moco(key_bn="groups")
