"""Seeds grouped into configurations, labelled by what differs, in Table 1's order."""

from __future__ import annotations

from ssl_app.report.groups import group_runs
from ssl_app.report.runs import load_runs
from tests.ssl_app.report.fakes import run_config, write_run

FINAL = {"uniformity": 3.5, "tolerance": 0.2}


def test_runs_made_by_hand_group_by_config_without_seed_or_log_location(tmp_path):
    for seed in (0, 1):  # written to different save_dirs: still one configuration
        write_run(tmp_path / f"hard_s{seed}", run_config("HardContrastive", seed, 0.3, 4095, save_dir=f"d{seed}"), FINAL)
        write_run(tmp_path / f"infonce03_s{seed}", run_config("InfoNCE", seed, 0.3), FINAL)
    write_run(tmp_path / "simple", run_config("Simple", 0), FINAL)
    write_run(tmp_path / "hardsimple", run_config("HardSimple", 0, None, 4095), FINAL)
    write_run(tmp_path / "supcon", run_config("SupCon", 0, 0.1), FINAL)
    write_run(tmp_path / "infonce007", run_config("InfoNCE", 3, 0.07), FINAL)

    configurations = group_runs(load_runs(tmp_path))

    assert [c.label for c in configurations] == [
        "InfoNCE τ=0.07",
        "InfoNCE τ=0.3",
        "Simple",
        "HardContrastive τ=0.3 K=4095",
        "HardSimple K=4095",
        "SupCon τ=0.1",
    ]
    assert [sorted(run.name for run in c.runs) for c in configurations] == [
        ["infonce007"],
        ["infonce03_s0", "infonce03_s1"],
        ["simple"],
        ["hard_s0", "hard_s1"],
        ["hardsimple"],
        ["supcon"],
    ]
    assert configurations[1].series == "InfoNCE"


def test_other_settings_that_differ_join_the_label(tmp_path):
    write_run(tmp_path / "small", run_config("InfoNCE", 0, 0.3, batch_size=128), FINAL)
    write_run(tmp_path / "large", run_config("InfoNCE", 0, 0.3, batch_size=256), FINAL)

    labels = [c.label for c in group_runs(load_runs(tmp_path))]

    assert labels == ["InfoNCE τ=0.3 batch_size=128", "InfoNCE τ=0.3 batch_size=256"]


def test_sweep_runs_group_by_point_failed_ones_kept_but_not_usable(study):
    configurations = group_runs(load_runs(study.root))

    assert [c.label for c in configurations] == ["InfoNCE τ=0.3", "InfoNCE τ=0.7"]
    assert [(len(c.runs), len(c.usable_runs)) for c in configurations] == [(3, 2), (2, 2)]


def test_runs_without_config_group_by_their_parent_folder(tmp_path):
    write_run(tmp_path / "mystery" / "version_0", None, FINAL)
    write_run(tmp_path / "mystery" / "version_1", None, FINAL)
    write_run(tmp_path / "known" / "version_0", run_config("InfoNCE", 0, 0.5), FINAL)

    configurations = group_runs(load_runs(tmp_path))

    assert [(c.label, len(c.runs)) for c in configurations] == [("InfoNCE τ=0.5", 1), ("mystery", 2)]


def test_long_or_many_differences_keep_labels_short_and_distinct(tmp_path):
    for index, callbacks in enumerate(([{"class_path": "callbacks.EmbeddingMetrics", "init_args": {"top_k": 10}}], [])):
        config = run_config("InfoNCE", 0, 0.5, batch_size=32 * (index + 1))
        config["trainer"]["callbacks"] = callbacks
        config["trainer"].update(max_epochs=index + 1, limit_val_batches=index, limit_train_batches=index + 2)
        write_run(tmp_path / f"r{index}", config, FINAL)

    labels = [c.label for c in group_runs(load_runs(tmp_path))]

    assert labels == [
        "InfoNCE τ=0.5 batch_size=32 limit_train_batches=2 limit_val_batches=0 …",
        "InfoNCE τ=0.5 batch_size=64 limit_train_batches=3 limit_val_batches=1 …",
    ]


def test_the_quantile_is_labelled_q_not_pacos_alpha(tmp_path):
    """Catches the quantile labelled α, the symbol PaCo's ``alpha`` goes by: a table with both
    losses would show two different α's."""
    hard = run_config("HardContrastive", 0, 0.3)
    hard["model"]["init_args"]["loss"]["init_args"]["quantile"] = 0.9
    paco = run_config("PaCo", 0, 0.3)
    paco["model"]["init_args"]["loss"]["init_args"]["alpha"] = 0.05
    write_run(tmp_path / "hard", hard, FINAL)
    write_run(tmp_path / "paco", paco, FINAL)

    hard_label, paco_label = (c.label for c in group_runs(load_runs(tmp_path)))

    assert hard_label.startswith("HardContrastive τ=0.3 q=0.9") and paco_label.startswith("PaCo τ=0.3")
    assert "alpha=0.05" in paco_label and "α" not in hard_label + paco_label


def test_an_option_another_loss_has_is_not_in_a_label(tmp_path):
    """Catches labels that list every option of every loss in the table, as "=None" where this loss has
    no such option (the hardness study's "InfoNCE τ=0.5 a_0=None alpha=None beta=None …")."""
    infonce = run_config("InfoNCE", 0, 0.5)
    hcl, macl = run_config("HCL", 0, 0.5), run_config("MACL", 0, 0.5)
    hcl["model"]["init_args"]["loss"]["init_args"].update(beta=1.0, tau_plus=0.1)
    macl["model"]["init_args"]["loss"]["init_args"].update(alpha=0.5, a_0=0.0)
    for name, config in (("infonce", infonce), ("hcl", hcl), ("macl", macl)):
        write_run(tmp_path / name, config, FINAL)

    labels = sorted(c.label for c in group_runs(load_runs(tmp_path)))

    assert labels == ["HCL τ=0.5 beta=1 tau_plus=0.1", "InfoNCE τ=0.5", "MACL τ=0.5 a_0=0 alpha=0.5"]
