"""Every bad input through the CLI: exit status 2, one ``error:`` line naming the option or
file, no traceback, and nothing written in the working directory (no run folder, event file,
config or checkpoint)."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import pytest
from PIL import Image

from ssl_app.cli import main

REPO = Path(__file__).resolve().parents[2]
QUICKSTART = str(REPO / "configs" / "quickstart.yaml")
SMALL = [
    "--trainer.max_epochs=1",
    "--trainer.limit_train_batches=1",
    "--trainer.limit_val_batches=1",
    "--trainer.enable_progress_bar=false",
    "--trainer.callbacks=[]",
    "--data.init_args.train_size=64",
    "--data.init_args.val_size=32",
    "--data.init_args.batch_size=16",
]
HARD = "--model.init_args.loss=ssl_app.losses.HardContrastive"


def image_folder(root: Path, corrupt: bool = False, classes: bool = True, per_class: int = 4, truncated: bool = False) -> Path:
    """A tiny ``root/{train,val}/<class>/*.png`` set; ``corrupt``: one train file is not an image (found at
    setup); ``truncated``: its header reads but its pixels do not (found when a DataLoader reads it)."""
    for split in ("train", "val"):
        (root / split).mkdir(parents=True)
        if not classes:
            continue
        for label in ("a", "b"):
            folder = root / split / label
            folder.mkdir()
            for i in range(per_class):
                Image.new("RGB", (40, 40), (60 * i, 100, 30)).save(folder / f"{i}.png")
    if corrupt:
        (root / "train" / "a" / "broken.png").write_bytes(b"this is not a png")
    if truncated:
        buffer = io.BytesIO()
        Image.effect_noise((40, 40), 64).convert("RGB").save(buffer, "PNG")
        (root / "train" / "a" / "broken.png").write_bytes(buffer.getvalue()[: len(buffer.getvalue()) // 2])
    return root


def with_dot(root: Path) -> Path:
    """One 1×1-pixel image among the others (it used to fail deep in the first step with "Output size is too small")."""
    Image.new("RGB", (1, 1)).save(root / "train" / "b" / "dot.png")
    return root


def image_args(root: Path) -> list[str]:
    return [
        "--data=datamodules.ImageFolderDataModule",
        f"--data.root={root}",
        "--data.batch_size=9",
        "--data.num_workers=0",
        "--data.augmentation.crop_size=32",
    ]


def write(path: Path, text: str) -> str:
    path.write_text(text)
    return str(path)


def fake_checkpoint(path: Path, class_path: str | None, proj_dim: int = 128) -> str:
    """A checkpoint of an untrained quickstart-shaped SimCLR, written by Lightning's own
    ``Trainer.save_checkpoint`` (optionally claiming, in its saved hyper-parameters, another method)."""
    import lightning as L

    from ssl_app.methods import SimCLR

    model = SimCLR(backbone="small_cnn", proj_dim=proj_dim, proj_hidden_dim=256, proj_layers=2)
    if class_path:
        model.hparams["_class_path"] = class_path  # what LightningCLI stores for the method it built
    trainer = L.Trainer(accelerator="cpu", logger=False, enable_checkpointing=False, enable_progress_bar=False)
    trainer.strategy.connect(model)
    trainer.save_checkpoint(path, weights_only=False)
    return str(path)


# (id, extra args built from tmp_path, text the error line must contain)
CASES = [
    ("temperature_zero", lambda t: ["--model.init_args.loss.init_args.temperature=0"], ["temperature"]),
    ("temperature_negative", lambda t: ["--model.init_args.loss.init_args.temperature=-1"], ["temperature"]),
    ("temperature_nan_cli", lambda t: ["--model.init_args.loss.init_args.temperature=nan"], ["temperature"]),
    (
        "temperature_nan_yaml",
        lambda t: [
            "--config",
            write(t / "nan.yaml", "model:\n  init_args:\n    loss:\n      init_args:\n        temperature: .nan\n"),
        ],
        ["temperature", "finite"],
    ),
    (
        "temperature_inf_yaml",
        lambda t: [
            "--config",
            write(t / "inf.yaml", "model:\n  init_args:\n    loss:\n      init_args:\n        temperature: .inf\n"),
        ],
        ["temperature", "finite"],
    ),
    ("k_zero", lambda t: [HARD, "--model.init_args.loss.init_args.num_negatives=0"], ["num_negatives"]),
    (
        "k_and_quantile",
        lambda t: [HARD, "--model.init_args.loss.init_args.num_negatives=4", "--model.init_args.loss.init_args.quantile=0.5"],
        ["num_negatives", "quantile"],
    ),
    ("batch_size_zero", lambda t: ["--data.init_args.batch_size=0"], ["batch_size"]),
    (
        "devices_beyond_cores",
        lambda t: ["--trainer.accelerator=cpu", f"--trainer.devices={(os.cpu_count() or 1) + 1}"],
        ["trainer.devices"],
    ),
    ("gpu_without_gpu", lambda t: ["--trainer.accelerator=gpu"], ["trainer", "gpu"]),
    # Lightning raises a TypeError, not a MisconfigurationException, for these (issue 40): once a traceback
    ("devices_not_a_count", lambda t: ["--trainer.devices=abc"], ["trainer.devices: must be auto", "'abc'"]),
    (
        "devices_not_a_count_on_cpu",
        lambda t: ["--trainer.accelerator=cpu", "--trainer.devices=abc"],
        ["trainer.devices: must be auto", "'abc'"],
    ),
    ("data_root_missing", lambda t: image_args(t / "no_such_folder"), ["no_such_folder"]),
    (
        "data_root_without_classes",
        lambda t: image_args(image_folder(t / "empty_set", classes=False)),
        ["empty_set", "class folders"],
    ),
    ("corrupt_image", lambda t: image_args(image_folder(t / "broken_set", corrupt=True)), ["broken.png"]),
    ("image_too_small", lambda t: image_args(with_dot(image_folder(t / "dot_set"))), ["train/b/dot.png", "1×1 pixels"]),
    (
        "corrupt_image_in_worker",
        lambda t: [*image_args(image_folder(t / "broken_set", truncated=True)), "--data.num_workers=1"],
        ["broken.png"],
    ),
    ("unknown_key_cli", lambda t: ["--model.init_args.no_such_option=1"], ["no_such_option"]),
    ("unknown_key_yaml", lambda t: ["--config", write(t / "key.yaml", "trainer:\n  no_such_option: 1\n")], ["no_such_option"]),
    (
        "misspelled_trainer_option",
        lambda t: ["--trainer.max_epoch=3"],
        ["--trainer.max_epoch=3", "did you mean --trainer.max_epochs?"],
    ),
    (
        "misspelled_model_option",
        lambda t: ["--model.init_args.los=ssl_app.losses.InfoNCE"],
        ["'los'", "did you mean model.init_args.loss?"],
    ),
    (
        "misspelled_loss_option",
        lambda t: ["--model.init_args.loss.init_args.temperatur=0.3"],
        ["'temperatur'", "did you mean model.init_args.loss.init_args.temperature?"],
    ),
    (
        "misspelled_loss_class_cli",
        lambda t: ["--model.init_args.loss=ssl_app.losses.InfoNCe"],
        ["ssl_app.losses has no class InfoNCe", "did you mean ssl_app.losses.InfoNCE?"],
    ),
    (
        "misspelled_loss_class_yaml",
        lambda t: [
            "--config",
            write(t / "cls.yaml", "model:\n  init_args:\n    loss:\n      class_path: ssl_app.losses.InfoNCe\n"),
        ],
        ["ssl_app.losses has no class InfoNCe", "did you mean ssl_app.losses.InfoNCE?"],
    ),
    ("wrong_type", lambda t: ["--data.init_args.batch_size=many"], ["batch_size"]),
    ("wrong_type_trainer", lambda t: ["--trainer.max_epochs=lots"], ["max_epochs"]),
    (
        "callback_option_yaml",
        lambda t: [
            "--config",
            write(
                t / "cb.yaml",
                "trainer:\n  callbacks:\n    - class_path: callbacks.EmbeddingMetrics\n"
                "      init_args:\n        every_n_epochs: 0\n",
            ),
        ],
        ["EmbeddingMetrics", "every_n_epochs"],
    ),
    (
        "callback_option_cli",
        lambda t: ["--trainer.callbacks+=callbacks.KNNMonitor", "--trainer.callbacks.k=0"],
        ["KNNMonitor", "k "],
    ),
    ("health_option", lambda t: ["--health.on_nonfinite=ignore"], ["health.on_nonfinite"]),
    ("imbalance_below_one", lambda t: ["--data.init_args.imbalance_factor=0.5"], ["imbalance_factor", ">= 1", "0.5"]),
    ("eval_batch_size_zero", lambda t: ["--data.init_args.eval_batch_size=0"], ["eval_batch_size", "0"]),
    ("imbalance_nan", lambda t: ["--data.init_args.imbalance_factor=nan"], ["imbalance_factor", "nan"]),
    (
        "imbalance_inf_yaml",
        lambda t: ["--config", write(t / "lt.yaml", "data:\n  init_args:\n    imbalance_factor: .inf\n")],
        ["imbalance_factor", "finite"],
    ),
    ("imbalance_not_a_number", lambda t: ["--data.init_args.imbalance_factor=steep"], ["imbalance_factor"]),
    ("imbalance_seed_negative", lambda t: ["--data.init_args.imbalance_seed=-1"], ["imbalance_seed"]),
    # 64 shapes of 10 classes: n_max = 7, and class 4 is the first the profile empties: int(7 × 100^(−4/9)) = 0
    (
        "imbalance_empties_a_class",
        lambda t: ["--data.init_args.imbalance_factor=100"],
        ["imbalance_factor=100", "class 4", "0 training images", "int(7 × 100^(−4/9)) = 0"],
    ),
    # fails at the callback's setup, after class_counts.json was written: the run folder goes too
    (
        "long_tail_callback_without_classifier",
        lambda t: ["--data.init_args.imbalance_factor=2", "--trainer.callbacks+=callbacks.LongTailAccuracy"],
        ["LongTailAccuracy", "class_logits", "SimCLR"],
    ),
    (
        "long_tail_callback_option",
        lambda t: ["--trainer.callbacks+=callbacks.LongTailAccuracy", "--trainer.callbacks.few_shot_below=200"],
        ["LongTailAccuracy", "few_shot_below"],
    ),
    ("ckpt_missing", lambda t: [f"--ckpt_path={t / 'gone.ckpt'}"], ["--ckpt_path", "gone.ckpt"]),
    ("ckpt_folder", lambda t: [f"--ckpt_path={t}"], ["--ckpt_path", "folder"]),
    (
        "ckpt_not_a_checkpoint",
        lambda t: [f"--ckpt_path={write(t / 'notes.ckpt', 'hello')}"],
        ["--ckpt_path", "notes.ckpt", "not a readable checkpoint"],
    ),
    (
        "ckpt_other_method",
        lambda t: [f"--ckpt_path={fake_checkpoint(t / 'moco.ckpt', 'ssl_app.methods.MoCo')}"],
        ["moco.ckpt", "ssl_app.methods.MoCo", "ssl_app.methods.SimCLR"],
    ),
    (
        "ckpt_other_shape",
        lambda t: [f"--ckpt_path={fake_checkpoint(t / 'small.ckpt', None, proj_dim=64)}"],
        ["small.ckpt", "shape", "[64, 256]", "[128, 256]"],
    ),
]


@pytest.mark.parametrize(("extra", "named"), [pytest.param(c[1], c[2], id=c[0]) for c in CASES])
def test_bad_input_is_one_line_and_leaves_nothing(extra, named, tmp_path, monkeypatch, capsys):
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    args = ["fit", "--config", QUICKSTART, *SMALL, *extra(tmp_path)]
    with pytest.raises(SystemExit) as exit_info:
        main(args)
    err = capsys.readouterr().err
    assert exit_info.value.code == 2, err[-3000:]
    lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(lines) == 1, err[-3000:]
    for text in named:
        assert text in lines[0], (text, lines[0])
    assert "Traceback" not in err, err[-3000:]
    assert list(work.iterdir()) == [], f"left behind: {sorted(str(p) for p in work.rglob('*'))}"


def test_a_failed_resume_does_not_touch_the_existing_run(tmp_path, monkeypatch, capsys):
    """A start that fails inside an existing version folder must not remove that folder."""
    monkeypatch.chdir(tmp_path)
    run = tmp_path / "runs" / "quickstart" / "version_0"
    (run / "checkpoints").mkdir(parents=True)
    (run / "events.out.tfevents.0").write_text("earlier curves")
    broken = fake_checkpoint(run / "checkpoints" / "last.ckpt", "ssl_app.methods.MoCo")
    with pytest.raises(SystemExit):
        main(["fit", "--config", QUICKSTART, *SMALL, f"--ckpt_path={broken}"])
    assert "ssl_app.methods.MoCo" in capsys.readouterr().err
    assert Path(broken).is_file() and (run / "events.out.tfevents.0").is_file()


def test_corrupt_data_on_one_rank_fails_every_rank_without_hanging(tmp_path):
    """2 gloo processes, one batch each (5 images per rank, all in it): the rank that reads the
    broken file names it; the other rank's collective fails and it says why, in one line; the
    run ends well within the timeout."""
    data = image_folder(tmp_path / "set", truncated=True, per_class=5)
    (data / "train" / "b" / "4.png").unlink()  # 9 good + 1 broken: 5 per rank, no padding
    args = [
        *image_args(data),
        "--data.batch_size=5",
        "--trainer.accelerator=cpu",
        "--trainer.devices=2",
        "--trainer.strategy=ddp",
        "--trainer.max_epochs=1",
        "--trainer.callbacks=[]",
        "--trainer.enable_progress_bar=false",
        "--trainer.num_sanity_val_steps=0",
        # The PIL path reads each image in its rank's shard only, so one rank names the broken file.
        "--data.augment_on=workers",
    ]
    result = subprocess.run(
        [sys.executable, "-m", "ssl_app", "fit", "--config", QUICKSTART, *args],
        cwd=tmp_path,
        check=False,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=240,
    )
    err = result.stderr
    assert result.returncode in (1, 2), err[-3000:]
    named = [line for line in err.splitlines() if "error: corrupted or unreadable image" in line]
    assert len(named) == 1 and "broken.png" in named[0], err[-3000:]
    assert "another process of this run failed" in err, err[-3000:]
    assert "Traceback" not in err, err[-3000:]


@pytest.mark.parametrize("accelerator", ["auto", "cpu"])
def test_devices_no_accelerator_reads_is_one_line_after_the_imports_too(accelerator, tmp_path, monkeypatch, capsys):
    """Catches Lightning's TypeError while the Trainer is built (``devices`` selected with ``CPUAccelerator`` should
    be an int > 0) ending in a traceback (issue 40), and its line differing from the early check's: the Trainer
    command is run past the early check (``ssl_app.cli.app.main``)."""
    from ssl_app.cli.app import main as trainer_command
    from ssl_app.cli.trainer_values import devices_problem

    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exit_info:
        trainer_command(["fit", "--config", QUICKSTART, *SMALL, f"--trainer.accelerator={accelerator}", "--trainer.devices=abc"])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2, err[-3000:]
    assert [line for line in err.splitlines() if line.startswith("error:")] == [f"error: {devices_problem('abc')}"]
    assert "Traceback" not in err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "given", ["accumulate_grad_batches=0", "check_val_every_n_epoch=0", "val_check_interval=0", "min_epochs=-3"]
)
def test_a_trainer_value_lightning_cannot_use_is_one_line_after_the_imports_too(given, tmp_path, monkeypatch, capsys):
    """Catches ``accumulate_grad_batches=0``, ``check_val_every_n_epoch=0`` and ``val_check_interval=0`` ending in a
    ZeroDivisionError traceback once training starts, and ``min_epochs=-3`` being trained with (issue 40): the
    Trainer command run past the early check says the early check's line, and writes nothing."""
    from ssl_app.cli.app import main as trainer_command
    from ssl_app.cli.trainer_values import trainer_problem

    monkeypatch.chdir(tmp_path)
    name, _, text = given.partition("=")
    with pytest.raises(SystemExit) as exit_info:
        trainer_command(["fit", "--config", QUICKSTART, *SMALL, f"--trainer.{given}"])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2, err[-3000:]
    assert [line for line in err.splitlines() if line.startswith("error:")] == [f"error: {trainer_problem({name: int(text)})}"]
    assert "Traceback" not in err
    assert list(tmp_path.iterdir()) == []


def test_fast_dev_run_trains_a_step_and_writes_nothing(tmp_path, monkeypatch, capsys):
    """Catches ``--trainer.fast_dev_run=true`` ending in a TypeError (Lightning's stand-in logger has no folder,
    and the run record claimed one) and leaving ``./checkpoints/last.ckpt`` behind (ModelCheckpoint's
    ``save_last`` at the end of training, which fast_dev_run does not stop in Lightning 2.6)."""
    from ssl_app.cli.app import main as trainer_command

    monkeypatch.chdir(tmp_path)
    trainer_command(["fit", "--config", QUICKSTART, *SMALL, "--trainer.fast_dev_run=true"])
    out = capsys.readouterr().out
    assert "fit done, finished at epoch 1, step 1 (no run folder: fast_dev_run logs and saves nothing)" in out
    assert list(tmp_path.iterdir()) == []
