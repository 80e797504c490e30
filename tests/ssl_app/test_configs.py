"""Every shipped config parses, and the paper's loss overlays compose with the method configs."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from ssl_app.cli import main

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
METHOD_CONFIGS = sorted(p for p in CONFIGS.rglob("*.yaml") if p.parent.name != "losses")
LOSS_OVERLAYS = sorted((CONFIGS / "cifar10" / "losses").glob("*.yaml"))


def composed(capsys, *configs: Path) -> dict:
    args = ["fit"]
    for config in configs:
        args += ["--config", str(config)]
    with pytest.raises(SystemExit) as exit_info:
        main([*args, "--print_config"])
    assert exit_info.value.code == 0
    return yaml.safe_load(capsys.readouterr().out)


@pytest.mark.parametrize("config", METHOD_CONFIGS, ids=lambda p: str(p.relative_to(CONFIGS)))
def test_method_config_parses_with_the_metric_callbacks(config, capsys):
    result = composed(capsys, config)
    callbacks = [c["class_path"] for c in result["trainer"]["callbacks"]]
    assert "callbacks.EmbeddingMetrics" in callbacks and "callbacks.KNNMonitor" in callbacks


def test_paper_settings_are_all_there():
    names = {p.stem for p in LOSS_OVERLAYS}
    for t in ("0.07", "0.3", "0.7", "1.0"):
        assert {f"infonce_t{t}", f"hard_t{t}"} <= names
    assert {"simple", "hard_simple"} <= names


@pytest.mark.parametrize("overlay", LOSS_OVERLAYS, ids=lambda p: p.stem)
def test_loss_overlay_composes_with_the_memory_bank(overlay, capsys):
    expected = yaml.safe_load(overlay.read_text())["model"]["init_args"]["loss"]
    result = composed(capsys, CONFIGS / "cifar10" / "memory_bank.yaml", overlay)
    model = result["model"]
    assert model["class_path"] == "ssl_app.methods.MemoryBank"
    assert model["init_args"]["loss"]["class_path"] == expected["class_path"]
    for key, value in expected["init_args"].items():
        assert model["init_args"]["loss"]["init_args"][key] == value
    assert result["trainer"]["logger"]["init_args"]["name"] == f"cifar10_{overlay.stem}"
