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


def test_rows_are_labelled_by_their_tau_policy_and_an_unknown_class_is_never_imported(tmp_path):
    """Catches a policy's row labelled by its config keys (``InfoNCE high=1 low=0.1 period=200``, or no τ at all),
    two schedules that differ only in their period under one label, a label that is not the policy's own
    ``label()`` (the sweep, the report and the folders would name one policy three ways), a ``Constant``
    policy off the τ axis, and a class path from a run's config imported to name it."""
    import sys

    from ssl_app.temperature import Constant, Cosine, Learnable

    def policy(name: str, **init_args) -> dict:
        return {"class_path": f"ssl_app.temperature.{name}", "init_args": init_args}

    taus = {
        "number": 0.2,
        "constant": policy("Constant", value=0.5),
        "cosine": policy("Cosine", low=0.1, high=1.0, period=400.0, unit="epoch"),
        "cosine_t200": policy("Cosine", low=0.1, high=1.0, period=200.0, unit="epoch"),
        "learnable": policy("Learnable", init=0.07, min=0.01, max=1.0),
        "foreign": {"class_path": "no_such_package_here.Tau", "init_args": {"a": 1}},
    }
    for name, tau in taus.items():
        write_run(tmp_path / name, run_config("InfoNCE", 0, temperature=tau), FINAL)

    configurations = group_runs(load_runs(tmp_path))
    labels = [c.label for c in configurations]

    own = [Constant(0.5).label(), Cosine(0.1, 1.0, 400.0).label(), Cosine(0.1, 1.0, 200.0).label(), Learnable(0.07).label()]
    assert own == ["0.5", "cosine:0.1-1", "cosine:0.1-1:T=200", "learnable:0.07"]  # what a sweep's grid takes
    # constants on the τ axis in order, then the policies by label
    assert labels == ["InfoNCE τ=0.2", "InfoNCE τ=0.5", *sorted(f"InfoNCE τ={label}" for label in own[1:] + ["Tau(a=1)"])]
    assert [c.temperature for c in configurations[:2]] == [0.2, 0.5]
    assert {c.series for c in configurations} == {"InfoNCE"}
    assert "no_such_package_here" not in sys.modules
    t200 = next(c for c in configurations if c.label == "InfoNCE τ=cosine:0.1-1:T=200")
    assert t200.aliases == ("InfoNCE τ=cosine:0.1-1:T200",)  # as reports printed it before: --baseline takes it
