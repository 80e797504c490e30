"""``python -m ssl_app export``: the backbone alone, loadable as the README says, giving the checkpoint's features."""

from __future__ import annotations

import io
import json
import math
import os
import re
from pathlib import Path
from typing import Optional

import pytest
import torch
from torch import nn
from torchvision.models import resnet18

from datamodules.synthetic import SYNTHETIC_MEAN, SYNTHETIC_STD
from ssl_app.cli.export import load_encoder, main
from ssl_app.methods import SimCLR
from ssl_app.resume import RECORDER_STATE_KEY
from tests.helpers import tiny_data, tiny_trainer

REPO = Path(__file__).resolve().parents[3]

#: The data config ``tiny_data()`` is built from, as a run's saved config records it.
TINY_DATA_CONFIG = {
    "class_path": "datamodules.SyntheticDataModule",
    "init_args": {
        "num_classes": 3, "train_size": 48, "val_size": 16, "test_size": 16, "image_size": 8, "batch_size": 8,
        "num_workers": 0, "augmentation": {"crop_size": 8, "mean": list(SYNTHETIC_MEAN), "std": list(SYNTHETIC_STD)},
    },
}  # fmt: skip


def trained_checkpoint(
    folder: Path, backbone: str = "small_cnn", loss: Optional[nn.Module] = None, config: Optional[dict] = None
) -> Path:
    """A SimCLR checkpoint after one step on tiny data, as ``fit`` writes it: with the method's class
    path (LightningCLI's) and the run's config (the RunRecorder's state)."""
    torch.manual_seed(0)
    model = SimCLR(backbone=backbone, proj_dim=8, proj_hidden_dim=16, **({"loss": loss} if loss is not None else {}))
    trainer = tiny_trainer(folder, max_steps=1)
    trainer.fit(model, tiny_data())
    path = folder / f"{backbone}.ckpt"
    trainer.save_checkpoint(path)
    saved = torch.load(path, weights_only=True)
    saved["hyper_parameters"]["_class_path"] = "ssl_app.methods.SimCLR"
    saved.setdefault("callbacks", {})[RECORDER_STATE_KEY] = {
        "run_id": "test",
        "config": {"data": TINY_DATA_CONFIG, **(config or {})},
    }
    torch.save(saved, path)
    return path


def checkpoint_backbone(path: Path) -> nn.Module:
    """The backbone as the training code holds it: SimCLR's, loaded through Lightning."""
    return SimCLR.load_from_checkpoint(path, map_location="cpu", weights_only=True).eval().backbone


@pytest.fixture(scope="module")
def resnet_checkpoint(tmp_path_factory) -> Path:
    return trained_checkpoint(tmp_path_factory.mktemp("resnet"), "resnet18_cifar")


@pytest.fixture(scope="module")
def small_checkpoint(tmp_path_factory) -> Path:
    return trained_checkpoint(tmp_path_factory.mktemp("small"), "small_cnn")


def export(tmp_path: Path, checkpoint: Path, *extra: str, name: str = "encoder.pt") -> Path:
    out = tmp_path / name
    err = io.StringIO()
    status = main(["--ckpt", str(checkpoint), "--out", str(out), *extra], out=io.StringIO(), err=err)
    assert status == 0, err.getvalue()
    return out


def readme_blocks() -> list[str]:
    """The python blocks of the README's "Use the trained encoder" section, as pasted."""
    text = (REPO / "README.md").read_text()
    section = text.split("## Use the trained encoder", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"^```python\n(.*?)^```", section, flags=re.MULTILINE | re.DOTALL)


def test_the_export_loads_strictly_into_torchvisions_resnet18_and_gives_the_checkpoints_features(resnet_checkpoint, tmp_path):
    """Catches exported keys that are not torchvision's (a ``backbone.`` prefix left on, head weights
    mixed in) and weights that differ from the checkpoint's (a BatchNorm statistic dropped)."""
    saved = torch.load(export(tmp_path, resnet_checkpoint), weights_only=True)
    assert all(not key.startswith(("backbone.", "projection_head.", "fc.")) for key in saved["state_dict"])
    encoder = resnet18()
    encoder.conv1 = nn.Conv2d(3, 64, kernel_size=3, stride=1, padding=1, bias=False)
    encoder.maxpool = nn.Identity()
    encoder.fc = nn.Identity()
    encoder.load_state_dict(saved["state_dict"], strict=True)
    images = torch.randn(4, 3, 8, 8)
    with torch.no_grad():
        assert torch.allclose(encoder.eval()(images), checkpoint_backbone(resnet_checkpoint)(images), atol=1e-5)
    meta = saved["meta"]
    described = (meta["backbone"], meta["feature_dim"], meta["torchvision"], meta["cifar_stem"])
    assert described == ("resnet18_cifar", 512, "resnet18", True)
    assert meta["input"]["mean"] == pytest.approx(list(SYNTHETIC_MEAN)) and meta["input"]["crop_size"] == 8
    assert "projection_head" not in saved and meta["head"] is None


def test_the_readmes_loading_lines_work_as_pasted(resnet_checkpoint, small_checkpoint, tmp_path, monkeypatch):
    """Catches README lines that no longer load the exported file (a renamed key, a changed layout) or
    that load it into something giving other features than the checkpoint's backbone."""
    torchvision_block, any_backbone_block = readme_blocks()
    monkeypatch.chdir(tmp_path)
    export(tmp_path, resnet_checkpoint)
    pasted: dict = {}
    exec(torchvision_block, pasted)  # noqa: S102 - the README's own lines
    mean, std, images = pasted["mean"], pasted["std"], pasted["images"]
    with torch.no_grad():
        expected = checkpoint_backbone(resnet_checkpoint)((images - mean) / std)
    assert pasted["features"].shape == (8, 512) and torch.allclose(pasted["features"], expected, atol=1e-5)

    for checkpoint in (small_checkpoint, resnet_checkpoint):  # every backbone through ssl_app.models
        export(tmp_path, checkpoint, "--overwrite")
        pasted = {}
        exec(any_backbone_block, pasted)  # noqa: S102
        images = torch.randn(2, 3, 8, 8)
        with torch.no_grad():
            assert torch.allclose(pasted["encoder"](images), checkpoint_backbone(checkpoint)(images), atol=1e-5)


def test_with_head_exports_the_projection_head_that_rebuilds_from_its_meta(small_checkpoint, tmp_path):
    """Catches a head exported with other arguments than it was trained with, or not exported at all."""
    from ssl_app.models import build_projection_head

    saved = torch.load(export(tmp_path, small_checkpoint, "--with-head"), weights_only=True)
    head = build_projection_head(**saved["meta"]["head"])
    head.load_state_dict(saved["projection_head"], strict=True)
    method = SimCLR.load_from_checkpoint(small_checkpoint, map_location="cpu", weights_only=True).eval()
    features = torch.randn(4, saved["meta"]["feature_dim"])
    with torch.no_grad():
        assert torch.allclose(head.eval()(features), method.projection_head(features), atol=1e-6)


def test_the_torch_export_format_runs_without_ssl_app_and_gives_the_same_features(small_checkpoint, tmp_path):
    """Catches a program traced in training mode (BatchNorm on batch statistics) or with the batch size fixed."""
    path = export(tmp_path, small_checkpoint, "--format", "torch_export", "--with-head", name="encoder.pt2")
    extra = {"meta.json": ""}
    program = torch.export.load(path, extra_files=extra).module()
    method = SimCLR.load_from_checkpoint(small_checkpoint, map_location="cpu", weights_only=True).eval()
    images = torch.randn(5, 3, 8, 8)  # another batch size than the trace's
    features, z = program(images)
    with torch.no_grad():
        expected_features, expected_z = method.encode(images)
    assert torch.allclose(features, expected_features, atol=1e-5) and torch.allclose(z, expected_z, atol=1e-5)
    assert json.loads(extra["meta.json"])["backbone"] == "small_cnn"


def test_every_bad_input_is_one_line_naming_it_and_writes_nothing(small_checkpoint, tmp_path):
    """Catches a traceback or a half-written file for a missing checkpoint, a file that is not one,
    a linear probe's checkpoint, an existing output, a missing option."""
    not_a_checkpoint = tmp_path / "notes.txt"
    not_a_checkpoint.write_text("hello")
    plain = tmp_path / "plain.pt"
    torch.save({"weights": torch.zeros(2)}, plain)
    probe = tmp_path / "probe.ckpt"
    saved = torch.load(small_checkpoint, weights_only=True)
    saved["hyper_parameters"] = {"_class_path": "ssl_app.evaluation.LinearProbe", "checkpoint": "runs/x/last.ckpt"}
    torch.save(saved, probe)
    exists = tmp_path / "exists.pt"
    exists.write_bytes(b"keep")
    cases = [
        (["--ckpt", str(tmp_path / "missing.ckpt"), "--out", str(tmp_path / "a.pt")], "no such file"),
        (["--ckpt", str(not_a_checkpoint), "--out", str(tmp_path / "a.pt")], "not a readable checkpoint"),
        (["--ckpt", str(plain), "--out", str(tmp_path / "a.pt")], "not a Lightning checkpoint"),
        (["--ckpt", str(probe), "--out", str(tmp_path / "a.pt")], "export the encoder it probes: runs/x/last.ckpt"),
        (["--ckpt", str(small_checkpoint), "--out", str(exists)], "exists; pass --overwrite"),
        (["--out", str(tmp_path / "a.pt")], "required: --ckpt"),
    ]
    for args, expected in cases:
        err = io.StringIO()
        assert main(args, out=io.StringIO(), err=err) == 2
        lines = err.getvalue().strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: export: ") and expected in lines[0], (args, lines)
    assert exists.read_bytes() == b"keep"
    assert sorted(os.listdir(tmp_path)) == ["exists.pt", "notes.txt", "plain.pt", "probe.ckpt"]


def test_a_moco_checkpoint_exports_its_query_backbone(tmp_path):
    """Catches a loader that reads a method's other encoder (MoCo's ``key_backbone.*``) or fails on its keys."""
    from ssl_app.methods import MoCo

    torch.manual_seed(0)
    model = MoCo(backbone="small_cnn", proj_dim=8, proj_hidden_dim=16, queue_size=16, split_bn_groups=2)
    trainer = tiny_trainer(tmp_path, max_steps=1)
    trainer.fit(model, tiny_data())
    path = tmp_path / "moco.ckpt"
    trainer.save_checkpoint(path)
    state = torch.load(path, weights_only=True)["state_dict"]
    assert any(key.startswith("key_backbone.") for key in state)
    encoder = load_encoder(str(path))
    images = torch.randn(3, 3, 8, 8)
    with torch.no_grad():
        assert torch.allclose(encoder.backbone(images), model.eval().backbone(images), atol=1e-6)


def test_a_learned_temperature_is_exported_with_the_loss(tmp_path):
    """Catches a learnable τ lost on export (issue 31: "saved, resumed and exported with the loss"):
    the file carries the loss's state and config, and the τ the run ended with, clamped to its bounds."""
    from ssl_app.losses import InfoNCE
    from ssl_app.temperature import Learnable

    policy = {"class_path": "ssl_app.temperature.Learnable", "init_args": {"init": 0.5, "min": 0.45, "max": 1.0}}
    loss_config = {"class_path": "ssl_app.losses.InfoNCE", "init_args": {"temperature": policy}}
    config = {"model": {"class_path": "ssl_app.methods.SimCLR", "init_args": {"loss": loss_config}}}
    loss = InfoNCE(temperature=Learnable(init=0.5, min=0.45, max=1.0))
    checkpoint = trained_checkpoint(tmp_path, loss=loss, config=config)
    trained = torch.load(checkpoint, weights_only=True)["state_dict"]["loss.temperature.log_scale"]
    saved = torch.load(export(tmp_path, checkpoint), weights_only=True)
    assert torch.equal(saved["loss_state_dict"]["temperature.log_scale"], trained)
    assert saved["meta"]["loss"] == loss_config
    assert saved["meta"]["temperature"] == pytest.approx(min(max(math.exp(-trained.item()), 0.45), 1.0))
    assert trained.item() != pytest.approx(math.log(1 / 0.5))  # one step moved it


def test_a_fixed_temperature_exports_no_learned_value(small_checkpoint, tmp_path):
    saved = torch.load(export(tmp_path, small_checkpoint), weights_only=True)
    assert saved["meta"]["temperature"] is None and saved["loss_state_dict"] == {}
