"""The shipped configs: every experiment parses, fragments compose, paper setups match the papers.

Layout (configs/README.md): experiments (``configs/*.yaml``, ``configs/<data set>/*.yaml``) include a
base with ``config:`` and name their fragments (``model: model/x.yaml``); the loss overlays of
``configs/losses/table1/`` (data-set neutral: the loss only) compose on top with a second ``--config``.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from datamodules import ViewAugmentation
from datamodules.augment import CIFAR10_MEAN, IMAGENET_MEAN, IMAGENET_STD, SVHN_MEAN, SVHN_STD
from ssl_app.cli import main

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
FRAGMENT_DIRS = ("base", "trainer", "callbacks", "data", "model")
LOSS_OVERLAYS = sorted((CONFIGS / "losses").rglob("*.yaml"))
FRAGMENTS = sorted(p for p in CONFIGS.rglob("*.yaml") if p.relative_to(CONFIGS).parts[0] in FRAGMENT_DIRS)
# Linear evaluations of a trained checkpoint: configs/linear.yaml and configs/*/linear_*.yaml.
EVALUATIONS = sorted(p for p in CONFIGS.rglob("linear*.yaml") if p not in FRAGMENTS)
EXPERIMENTS = sorted(p for p in CONFIGS.rglob("*.yaml") if p not in FRAGMENTS and p not in LOSS_OVERLAYS and p not in EVALUATIONS)
METHOD_CONFIGS = EXPERIMENTS  # the name other tests and the README knew them by


def rel(path: Path) -> str:
    return str(path.relative_to(CONFIGS))


def composed(capsys, *configs: Path, extra: tuple[str, ...] = ()) -> dict:
    """The config LightningCLI resolves from ``--config`` files (and extra arguments), as a dict."""
    args = ["fit"]
    for config in configs:
        args += ["--config", str(config)]
    with pytest.raises(SystemExit) as exit_info:
        main([*args, *extra, "--print_config"])
    assert exit_info.value.code == 0, capsys.readouterr().err
    return yaml.safe_load(capsys.readouterr().out)


def get(config: Any, dotted: str) -> Any:
    """``config["a"]["b"][0]`` for ``"a.b.0"``; a missing key is a KeyError naming the path."""
    node = config
    for part in dotted.split("."):
        try:
            node = node[int(part)] if isinstance(node, list) else node[part]
        except (KeyError, IndexError, TypeError, ValueError):
            raise KeyError(f"{dotted} (missing at {part!r})") from None
    return node


def flatten(value: Any, prefix: str) -> dict[str, Any]:
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key, item in value.items():
            out.update(flatten(item, f"{prefix}.{key}" if prefix else str(key)))
        return out
    if isinstance(value, list) and any(isinstance(item, (dict, list)) for item in value):
        out = {}
        for index, item in enumerate(value):
            out.update(flatten(item, f"{prefix}.{index}"))
        return out
    return {prefix: value}


def load_fragment(path: Path) -> Any:
    """A fragment's value with the fragments it names (relative paths) loaded in their place."""
    assert path.is_file(), f"missing fragment {path}"

    def resolve(value: Any) -> Any:
        if isinstance(value, str) and value.endswith(".yaml"):
            return load_fragment(path.parent / value)
        if isinstance(value, dict):
            return {k: resolve(v) for k, v in value.items()}
        return value

    return resolve(yaml.safe_load(path.read_text()))


def declared(path: Path) -> dict[str, Any]:
    """Every leaf value a config declares, after its includes, as the scheme documents it:
    ``config:`` first, then each key in order; a fragment path replaces its whole group, a
    dotted key replaces one leaf."""
    raw = yaml.safe_load(path.read_text())
    flat: dict[str, Any] = {}
    if "config" in raw:
        flat.update(declared(path.parent / raw.pop("config")))
    for key, value in raw.items():
        if isinstance(value, str) and value.endswith(".yaml"):
            value = load_fragment(path.parent / value)
            flat = {k: v for k, v in flat.items() if k != key and not k.startswith(f"{key}.")}
        flat.update(flatten(value, key))
    return flat


def assert_leaves(result: dict, expected: dict[str, Any], what: str) -> None:
    for key, value in expected.items():
        actual = get(result, key)
        if isinstance(value, float) or (isinstance(value, list) and value and isinstance(value[0], float)):
            assert actual == pytest.approx(value), f"{what}: {key} = {actual!r}, expected {value!r}"
        else:
            assert actual == value, f"{what}: {key} = {actual!r}, expected {value!r}"


# --- every experiment ---------------------------------------------------------------------------


def test_the_documented_experiments_are_all_there():
    names = {rel(p) for p in EXPERIMENTS}
    assert {"quickstart.yaml", "moco.yaml", "memory_bank.yaml", "cifar10/memory_bank.yaml", "cifar10/moco.yaml"} <= names
    assert {f"{data}/memory_bank.yaml" for data in ("cifar10", "cifar100", "svhn", "imagenet100")} <= names
    assert {f"{data}/linear.yaml" for data in ("cifar10", "cifar100", "svhn", "imagenet100")} <= {rel(p) for p in EVALUATIONS}
    assert len(FRAGMENTS) >= 5 and LOSS_OVERLAYS


def test_every_config_lives_where_the_readme_says():
    """Catches an experiment folder of its own (``configs/study/`` was a seventh place to look), a
    fragment or overlay outside its group's folder, and a folder or experiment configs/README.md
    does not name. Each file is then parsed by the tests of its kind: experiments, evaluations,
    fragments and overlays below."""
    readme = (CONFIGS / "README.md").read_text(encoding="utf-8")
    for path in sorted(CONFIGS.rglob("*.yaml")):
        parts = path.relative_to(CONFIGS).parts
        if parts[0] in FRAGMENT_DIRS:
            assert len(parts) == 2 and path in FRAGMENTS, f"{rel(path)}: a fragment sits directly in its group's folder"
        elif parts[0] == "losses":
            assert parts[1] in ("table1", "beyond_softmax") and len(parts) == 3, (
                f"{rel(path)}: overlays sit in losses/table1/ or losses/beyond_softmax/ (a plan's folder)"
            )
        else:
            assert path in EXPERIMENTS or path in EVALUATIONS, rel(path)
            assert len(parts) == 1 or (len(parts) == 2 and (CONFIGS / "data" / f"{parts[0]}.yaml").is_file()), (
                f"{rel(path)}: an experiment sits at the top of configs/ or in the folder of its data set "
                "(named as a fragment of configs/data/), as configs/README.md says"
            )
            assert path.name in readme, f"configs/README.md does not name {rel(path)}"
        if len(parts) > 1:
            assert f"{parts[0]}/" in readme, f"configs/README.md does not name the folder {parts[0]}/"


@pytest.mark.parametrize("config", EVALUATIONS, ids=rel)
def test_linear_evaluations_follow_the_papers_protocol(config, capsys):
    """Wang & Liu's linear evaluation (docs/science.md): 100 epochs, SGD lr 30, x0.2 at 40/60/80, flips only."""
    result = composed(capsys, config, extra=("--model.init_args.checkpoint=any.ckpt",))
    assert result["model"]["class_path"] == "ssl_app.evaluation.LinearProbe"
    assert result["data"]["class_path"] == "datamodules.LinearEvalDataModule"
    assert result["trainer"]["max_epochs"] == 100
    optim = result["model"]["init_args"]["optim"]
    assert (optim["optimizer"], optim["lr"], optim["momentum"], optim["weight_decay"]) == ("sgd", 30.0, 0.9, 0.0)
    assert (optim["schedule"], optim["milestones"], optim["gamma"]) == ("multistep", [40, 60, 80], 0.2)
    assert 0 < result["data"]["init_args"]["val_fraction"] < 1  # linear/val_top1 never reads the test split


@pytest.mark.parametrize("config", EXPERIMENTS, ids=rel)
def test_experiment_parses_with_the_metric_callbacks(config, capsys):
    result = composed(capsys, config)
    callbacks = [c["class_path"] for c in result["trainer"]["callbacks"]]
    assert "callbacks.EmbeddingMetrics" in callbacks and "callbacks.KNNMonitor" in callbacks
    # The header says where the run writes; the logger must agree.
    where = re.search(r"runs/([\w.]+)/version_<n>", config.read_text())
    name = result["trainer"]["logger"]["init_args"]["name"]
    assert name == (where.group(1) if where else f"{config.parent.name}_{config.stem}"), rel(config)


@pytest.mark.parametrize("config", EXPERIMENTS, ids=rel)
def test_experiment_resolves_to_every_value_its_fragments_declare(config, capsys):
    # Nothing a fragment says is lost in composition (e.g. the callbacks list, or the model's
    # class_path when a later key touches the same group), and every override lands.
    expected = declared(config)
    assert any(k.startswith("trainer.callbacks.") for k in expected), "the experiment names no callbacks"
    assert_leaves(composed(capsys, config), expected, rel(config))


def test_every_fragment_is_used_by_some_config():
    used: set[Path] = set()
    for path in [*EXPERIMENTS, *EVALUATIONS, *FRAGMENTS]:
        for value in re.findall(r"^\s*[\w.+]+:\s*(\S+\.yaml)\s*$", path.read_text(), flags=re.MULTILINE):
            target = (path.parent / value).resolve()
            assert target.is_file(), f"{rel(path)} names {value}, which does not exist"
            used.add(target)
    orphans = [rel(p) for p in FRAGMENTS if p.resolve() not in used]
    assert not orphans, f"fragments no config uses: {orphans}"


#: configs/callbacks/metrics.yaml: what every shipped experiment measures.
METRIC_CALLBACKS = ["callbacks.EmbeddingMetrics", "callbacks.KNNMonitor", "callbacks.EmbeddingProjector"]


def test_the_long_tail_callbacks_add_the_evaluation_to_the_metric_callbacks(capsys):
    result = composed(
        capsys, CONFIGS / "quickstart.yaml", extra=(f"--trainer.callbacks={CONFIGS / 'callbacks' / 'long_tail.yaml'}",)
    )
    callbacks = [c["class_path"] for c in result["trainer"]["callbacks"]]
    assert callbacks[:3] == ["callbacks.EmbeddingMetrics", "callbacks.KNNMonitor", "callbacks.LongTailAccuracy"]
    lt = result["trainer"]["callbacks"][2]["init_args"]
    assert (lt["many_shot_above"], lt["few_shot_below"]) == (100, 20)  # the literature's groups


@pytest.mark.parametrize(
    "config,data",
    [
        ("linear_shapes_lt.yaml", "SyntheticDataModule"),
        ("cifar100/linear_lt.yaml", "CIFAR100DataModule"),
        ("cifar10/linear_lt.yaml", "CIFAR10DataModule"),
    ],
)
def test_the_long_tailed_linear_evaluations_read_long_tailed_data_and_log_lt(config, data, capsys):
    result = composed(capsys, CONFIGS / config, extra=("--model.init_args.checkpoint=any.ckpt",))
    inner = result["data"]["init_args"]["data"]
    assert inner["class_path"] == f"datamodules.{data}" and inner["init_args"]["imbalance_factor"] == 100
    assert [c["class_path"] for c in result["trainer"]["callbacks"]] == ["callbacks.LongTailAccuracy"]


def test_a_later_command_line_value_overrides_a_fragment(capsys):
    result = composed(
        capsys,
        CONFIGS / "quickstart.yaml",
        extra=("--trainer.max_epochs=3", "--model.init_args.loss.init_args.temperature=0.2"),
    )
    assert result["trainer"]["max_epochs"] == 3
    assert result["model"]["init_args"]["loss"]["init_args"]["temperature"] == 0.2
    assert result["model"]["class_path"] == "ssl_app.methods.SimCLR"
    assert [c["class_path"] for c in result["trainer"]["callbacks"]] == METRIC_CALLBACKS


# --- the loss overlays of Table 1 ---------------------------------------------------------------


def test_paper_settings_are_all_there():
    names = {p.stem for p in LOSS_OVERLAYS}
    for t in ("0.07", "0.3", "0.7", "1.0"):
        assert {f"infonce_t{t}", f"hard_t{t}"} <= names
    assert {"simple", "hard_simple"} <= names


def test_loss_overlays_set_the_loss_and_nothing_else():
    """Catches an overlay that names the run after one data set, or changes anything besides the loss."""
    for overlay in LOSS_OVERLAYS:
        keys = flatten(yaml.safe_load(overlay.read_text()), "")
        assert keys and all(key.startswith("model.init_args.loss.") for key in keys), f"{rel(overlay)}: {sorted(keys)}"


@pytest.mark.parametrize("overlay", LOSS_OVERLAYS, ids=lambda p: p.stem)
@pytest.mark.parametrize("method", ["memory_bank", "moco"])
def test_loss_overlay_composes_with_the_cifar10_methods(overlay, method, capsys):
    expected = yaml.safe_load(overlay.read_text())["model"]["init_args"]["loss"]
    result = composed(capsys, CONFIGS / "cifar10" / f"{method}.yaml", overlay)
    model = result["model"]
    assert model["class_path"] == {"memory_bank": "ssl_app.methods.MemoryBank", "moco": "ssl_app.methods.MoCo"}[method]
    assert model["init_args"]["loss"]["class_path"] == expected["class_path"]
    for key, value in expected["init_args"].items():
        assert model["init_args"]["loss"]["init_args"][key] == value
    assert result["trainer"]["logger"]["init_args"]["name"] == f"cifar10_{method}"
    assert [c["class_path"] for c in result["trainer"]["callbacks"]] == METRIC_CALLBACKS


# --- configs that claim a paper's setup match the paper -----------------------------------------

_PAPER_AUGMENTATION = {"crop_size": 32, "brightness": 0.4, "contrast": 0.4, "saturation": 0.4, "blur_prob": 0.0}

# Wang & Liu 2021 (docs/science.md#their-setup): memory bank, ResNet-18 (3×3 stem), linear 128-d head,
# SGD lr 0.03, momentum 0.9, wd 5e-4, batch 128, 200 epochs, lr ×0.1 at 160 and 190;
# RandomResizedCrop(32, scale 0.2–1), ColorJitter(0.4, 0.4, 0.4, 0.4) on every image,
# RandomGrayscale(0.2), horizontal flip; kNN monitor k = 200, σ = 0.07.
WANG_LIU_2021 = {
    "source": "Wang & Liu",
    "values": {
        "model.class_path": "ssl_app.methods.MemoryBank",
        "model.init_args.backbone": "resnet18_cifar",
        "model.init_args.proj_dim": 128,
        "model.init_args.proj_layers": 1,
        "model.init_args.bank_momentum": 0.5,
        "model.init_args.bank_size": None,  # every training image
        "model.init_args.optim.optimizer": "sgd",
        "model.init_args.optim.lr": 0.03,
        "model.init_args.optim.momentum": 0.9,
        "model.init_args.optim.weight_decay": 5e-4,
        "model.init_args.optim.schedule": "multistep",
        "model.init_args.optim.milestones": [160, 190],
        "model.init_args.optim.gamma": 0.1,
        "model.init_args.optim.warmup_epochs": 0,
        "model.init_args.optim.scale_lr": "none",
        "data.class_path": "datamodules.CIFAR10DataModule",
        "data.init_args.batch_size": 128,
        "trainer.max_epochs": 200,
        "trainer.callbacks.1.class_path": "callbacks.KNNMonitor",
        "trainer.callbacks.1.init_args.k": 200,
        "trainer.callbacks.1.init_args.temperature": 0.07,
        **{f"data.init_args.augmentation.{k}": v for k, v in _PAPER_AUGMENTATION.items()},
        "data.init_args.augmentation.min_scale": 0.2,
        "data.init_args.augmentation.hue": 0.4,
        "data.init_args.augmentation.jitter_prob": 1.0,
        "data.init_args.augmentation.grayscale_prob": 0.2,
        "data.init_args.augmentation.hflip_prob": 0.5,
    },
    # Table 1's first column; the loss overlays replace it.
    "loss": {"model.init_args.loss.class_path": "ssl_app.losses.InfoNCE", "model.init_args.loss.init_args.temperature": 0.07},
}

# MoCo v2 (Chen et al. 2020), the MoCo authors' CIFAR-10 demo: ResNet-18 (CIFAR stem), linear
# 128-d head, queue 4096, momentum 0.99, τ = 0.1, SGD lr 0.06, momentum 0.9, wd 5e-4, cosine,
# batch 512, 200 epochs; RandomResizedCrop(32) (scale 0.08–1), RandomApply(ColorJitter(0.4, 0.4,
# 0.4, 0.1), p = 0.8), RandomGrayscale(0.2), flip, Normalize(CIFAR mean, (0.2023, 0.1994, 0.2010)).
MOCO_V2_CIFAR_DEMO = {
    "source": "MoCo v2",
    "values": {
        "model.class_path": "ssl_app.methods.MoCo",
        "model.init_args.backbone": "resnet18_cifar",
        "model.init_args.proj_dim": 128,
        "model.init_args.proj_layers": 1,
        "model.init_args.queue_size": 4096,
        "model.init_args.key_bn": "auto",  # one device: split BatchNorm into 8 groups, as the demo
        "model.init_args.split_bn_groups": 8,
        "model.init_args.momentum": 0.99,
        "model.init_args.symmetric": False,
        "model.init_args.optim.optimizer": "sgd",
        "model.init_args.optim.lr": 0.06,
        "model.init_args.optim.momentum": 0.9,
        "model.init_args.optim.weight_decay": 5e-4,
        "model.init_args.optim.schedule": "cosine",
        "model.init_args.optim.warmup_epochs": 0,
        "model.init_args.optim.scale_lr": "none",
        "data.class_path": "datamodules.CIFAR10DataModule",
        "data.init_args.batch_size": 512,
        "trainer.max_epochs": 200,
        **{f"data.init_args.augmentation.{k}": v for k, v in _PAPER_AUGMENTATION.items()},
        "data.init_args.augmentation.min_scale": 0.08,
        "data.init_args.augmentation.hue": 0.1,
        "data.init_args.augmentation.jitter_prob": 0.8,
        "data.init_args.augmentation.grayscale_prob": 0.2,
        "data.init_args.augmentation.hflip_prob": 0.5,
        "data.init_args.augmentation.mean": list(CIFAR10_MEAN),
        "data.init_args.augmentation.std": [0.2023, 0.1994, 0.2010],
    },
    "loss": {"model.init_args.loss.class_path": "ssl_app.losses.InfoNCE", "model.init_args.loss.init_args.temperature": 0.1},
}

WANG_LIU_2021_CIFAR100 = {
    **WANG_LIU_2021,
    "values": {**WANG_LIU_2021["values"], "data.class_path": "datamodules.CIFAR100DataModule"},
}
# PaCo (Cui et al. 2021), the authors' CIFAR-100-LT runs (dvlab-research/Parametric-Contrastive-Learning,
# LT/sh/CIFAR100_train_imb0.01.sh and the defaults of LT/paco_cifar.py): MoCo on ResNet-32 (64-d), MLP head
# 64-64-64 with BatchNorm on the hidden layer only (moco/builder.py), queue 1024, key momentum 0.999, τ = 0.05,
# α = 0.02; SGD lr 0.02, momentum 0.9, wd 5e-4, batch 128, 400 epochs, 10 warm-up epochs, lr × 0.1 after epochs
# 320 and 360; IF 100; their key view (RandomResizedCrop(32, 0.2-1), flip, ColorJitter(0.4, 0.4, 0.4, 0.1) p 0.8,
# grayscale 0.2, blur p 0.5) and query view (RandomCrop(32, pad 4), flip, CIFAR10Policy, Cutout 16, always).
PACO_CIFAR100_LT = {
    "source": "PaCo",
    "values": {
        "model.class_path": "ssl_app.methods.MoCo",
        "model.init_args.backbone": "resnet32_cifar",
        "model.init_args.proj_dim": 64,
        "model.init_args.proj_hidden_dim": 64,
        "model.init_args.proj_layers": 2,
        "model.init_args.proj_batch_norm": True,
        "model.init_args.proj_output_batch_norm": False,
        "model.init_args.queue_size": 1024,
        "model.init_args.momentum": 0.999,
        "model.init_args.symmetric": False,
        "model.init_args.optim.optimizer": "sgd",
        "model.init_args.optim.lr": 0.02,
        "model.init_args.optim.momentum": 0.9,
        "model.init_args.optim.weight_decay": 5e-4,
        "model.init_args.optim.schedule": "multistep",
        "model.init_args.optim.milestones": [321, 361],
        "model.init_args.optim.gamma": 0.1,
        "model.init_args.optim.warmup_epochs": 10,
        "model.init_args.optim.scale_lr": "none",
        "data.class_path": "datamodules.CIFAR100DataModule",
        "data.init_args.batch_size": 128,
        "data.init_args.imbalance_factor": 100,
        "trainer.max_epochs": 400,
        **{f"data.init_args.augmentation.{k}": v for k, v in _PAPER_AUGMENTATION.items()},
        "data.init_args.augmentation.min_scale": 0.2,
        "data.init_args.augmentation.hue": 0.1,
        "data.init_args.augmentation.jitter_prob": 0.8,
        "data.init_args.augmentation.grayscale_prob": 0.2,
        "data.init_args.augmentation.hflip_prob": 0.5,
        "data.init_args.augmentation.blur_prob": 0.5,
        "data.init_args.augmentation.mean": [0.4914, 0.4822, 0.4465],
        "data.init_args.augmentation.std": [0.2023, 0.1994, 0.2010],
        "data.init_args.augmentation.query_policy": "autoaugment_cifar10",
        "data.init_args.augmentation.query_erasing_prob": 1.0,
    },
    "loss": {
        "model.init_args.loss.class_path": "ssl_app.losses.PaCo",
        "model.init_args.loss.init_args.temperature": 0.05,
        "model.init_args.loss.init_args.alpha": 0.02,
        "model.init_args.loss.init_args.normalise_weights": True,
    },
}
SUPCON_CIFAR100_LT = {
    **PACO_CIFAR100_LT,
    "loss": {"model.init_args.loss.class_path": "ssl_app.losses.SupCon", "model.init_args.loss.init_args.temperature": 0.05},
}
# SVHN: the same setup (the paper states one augmentation for all data sets, flip included), SVHN's statistics.
WANG_LIU_2021_SVHN = {
    **WANG_LIU_2021,
    "values": {
        **WANG_LIU_2021["values"],
        "data.class_path": "datamodules.SVHNDataModule",
        "data.init_args.augmentation.mean": list(SVHN_MEAN),
        "data.init_args.augmentation.std": list(SVHN_STD),
    },
}
# ImageNet-100: CMC's 100 classes, ResNet-50, the same optimiser and schedule, the paper's augmentation at
# 224 px (RandomResizedCrop(224, 0.2-1)), ImageNet statistics, evaluation resize 256 + centre crop 224.
WANG_LIU_2021_IMAGENET100 = {
    **WANG_LIU_2021,
    "values": {
        **WANG_LIU_2021["values"],
        "model.init_args.backbone": "resnet50",
        "data.class_path": "datamodules.ImageFolderDataModule",
        "data.init_args.class_list": "imagenet100",
        "data.init_args.augmentation.crop_size": 224,
        "data.init_args.augmentation.mean": list(IMAGENET_MEAN),
        "data.init_args.augmentation.std": list(IMAGENET_STD),
        "data.init_args.augmentation.eval_crop_fraction": 0.875,
    },
}
# Kukleva et al. (ICLR 2023), the authors' code (Annusha/temperature_schedules): README.md's CIFAR-10 command and
# train_simCLR.py's defaults; the recipe of the tau_schedules plan (τ given by the plan's columns).
KUKLEVA_2023_CIFAR10_LT = {
    "source": "Kukleva et al.",
    "values": {
        "model.class_path": "ssl_app.methods.SimCLR",
        "model.init_args.backbone": "resnet18_cifar",
        "model.init_args.proj_dim": 128,
        "model.init_args.proj_hidden_dim": 512,
        "model.init_args.optim.optimizer": "sgd",
        "model.init_args.optim.lr": 0.5,
        "model.init_args.optim.momentum": 0.9,
        "model.init_args.optim.weight_decay": 1e-4,
        "model.init_args.optim.schedule": "cosine",
        "model.init_args.optim.warmup_epochs": 10,
        "data.class_path": "datamodules.CIFAR10DataModule",
        "data.init_args.imbalance_factor": 100.0,
        "data.init_args.batch_size": 512,
        "data.init_args.augmentation.min_scale": 0.1,
        "data.init_args.augmentation.hue": 0.1,
        "data.init_args.augmentation.jitter_prob": 0.8,
        "data.init_args.augmentation.grayscale_prob": 0.2,
        "data.init_args.augmentation.blur_prob": 0.0,
        "trainer.max_epochs": 2000,
        "trainer.callbacks.1.class_path": "callbacks.KNNMonitor",
    },
    "loss": {"model.init_args.loss.class_path": "ssl_app.losses.InfoNCE", "model.init_args.loss.init_args.temperature": 0.5},
}
PAPER_SETUPS = {
    "cifar10/memory_bank.yaml": WANG_LIU_2021,
    "cifar100/memory_bank.yaml": WANG_LIU_2021_CIFAR100,
    "svhn/memory_bank.yaml": WANG_LIU_2021_SVHN,
    "imagenet100/memory_bank.yaml": WANG_LIU_2021_IMAGENET100,
    "cifar10/moco.yaml": MOCO_V2_CIFAR_DEMO,
    "cifar100_lt/paco.yaml": PACO_CIFAR100_LT,
    "cifar100_lt/supcon.yaml": SUPCON_CIFAR100_LT,
    "cifar10_lt/simclr.yaml": KUKLEVA_2023_CIFAR10_LT,
}
_CLAIM = re.compile(r"setup of|following the", re.IGNORECASE)


def header(path: Path) -> str:
    lines = path.read_text().splitlines()
    first_code = next((i for i, line in enumerate(lines) if not line.startswith("#")), len(lines))
    return "\n".join(lines[:first_code])


@pytest.mark.parametrize("config", [*EXPERIMENTS, *FRAGMENTS, *LOSS_OVERLAYS], ids=rel)
def test_a_config_that_claims_a_papers_setup_names_its_source_and_is_checked(config):
    text = header(config)
    source = re.search(r"^# Source: (.+)$", text, flags=re.MULTILINE)
    if rel(config) in PAPER_SETUPS:
        assert source, f"{rel(config)}: no '# Source:' line in its header"
        assert PAPER_SETUPS[rel(config)]["source"] in source.group(1)
    else:
        assert not source, f"{rel(config)} names a source but no test checks it against the paper (PAPER_SETUPS)"
        assert not _CLAIM.search(text), f"{rel(config)} claims a setup: add it to PAPER_SETUPS"


# Recipes Table 1's loss overlays are never run on (a plan gives them their τ on the command line): checked alone.
NOT_TABLE1_RECIPES = {"cifar10_lt/simclr.yaml"}


@pytest.mark.parametrize(
    ("config", "overlay"),
    [
        (config, overlay)
        for config in sorted(PAPER_SETUPS)
        for overlay in [None, *LOSS_OVERLAYS]
        if overlay is None or config not in NOT_TABLE1_RECIPES
    ],
    ids=lambda p: p.stem if isinstance(p, Path) else (p or "alone"),
)
def test_paper_setup_configs_match_the_paper(config, overlay, capsys):
    setup = PAPER_SETUPS[config]
    files = [CONFIGS / config] + ([overlay] if overlay else [])
    result = composed(capsys, *files)
    expected = dict(setup["values"])
    if overlay is None:
        expected.update(setup["loss"])
    # The overlay sets the loss only: the run keeps the recipe's (data set's) name.
    expected["trainer.logger.init_args.name"] = declared(CONFIGS / config)["trainer.logger.init_args.name"]
    assert_leaves(result, expected, " + ".join(rel(f) for f in files))


@pytest.mark.parametrize("config", sorted(PAPER_SETUPS))
def test_the_paper_augmentation_reaches_the_transform(config, capsys):
    values = composed(capsys, CONFIGS / config)["data"]["init_args"]["augmentation"]
    steps = ViewAugmentation(**values).train_transform().transforms
    crop = next(s for s in steps if type(s).__name__ == "RandomResizedCrop")
    side = values["crop_size"]
    assert side == PAPER_SETUPS[config]["values"].get("data.init_args.augmentation.crop_size", 32)
    assert crop.size == [side, side] or tuple(crop.size) == (side, side)
    assert crop.scale == pytest.approx((values["min_scale"], 1.0))
    jitter_wrapper = next(s for s in steps if type(s).__name__ == "RandomApply")
    jitter = jitter_wrapper.transforms[0]
    assert jitter_wrapper.p == values["jitter_prob"]
    assert jitter.hue == pytest.approx((-values["hue"], values["hue"]))
    assert jitter.brightness == pytest.approx((0.6, 1.4))
    grayscale = next(s for s in steps if type(s).__name__ == "RandomGrayscale")
    assert grayscale.p == 0.2


@pytest.mark.parametrize("config", ["cifar100_lt/paco.yaml", "cifar100_lt/supcon.yaml"])
def test_the_paco_query_view_reaches_the_transform(config, capsys):
    """Catches the PaCo recipe's query view lost on the way to the pipeline (AutoAugment or the erasing
    missing, or applied to the key view as well), the comparison the recipe's numbers rest on."""
    values = composed(capsys, CONFIGS / config)["data"]["init_args"]["augmentation"]
    query, key = (transform.transforms for transform in ViewAugmentation(**values).view_transforms(2))
    autoaugment = next(s for s in query if type(s).__name__ == "AutoAugment")
    assert autoaugment.policy.name == "CIFAR10"
    erasing = next(s for s in query if type(s).__name__ == "RandomErasing")
    assert erasing.p == 1.0 and erasing.scale == (0.25, 0.25) and erasing.value == [0.0]
    crop = next(s for s in query if type(s).__name__ == "RandomCrop")
    assert crop.padding == [4, 4, 4, 4]
    key_names = {type(s).__name__ for s in key}
    assert not key_names & {"AutoAugment", "RandomErasing", "RandomCrop"} and "RandomResizedCrop" in key_names
