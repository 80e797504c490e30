"""Plans (``python -m ssl_app.sweep --plan table1 --data D``): Table 1 as one command per data set."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys

import pytest
import yaml

from ssl_app.cli import main as cli_main
from ssl_app.runs.record import read_record
from ssl_app.sweep.command import main
from ssl_app.sweep.plans import DATA_SETS, PLANS, TABLE1_COLUMNS
from tests.ssl_app.cli.test_cli import REPO

FIT_TINY = ["--", "--trainer.max_epochs=1", "--trainer.limit_train_batches=2", "--trainer.limit_val_batches=1",
            "--trainer.enable_progress_bar=false", "--data.init_args.train_size=64", "--data.init_args.val_size=32",
            "--data.init_args.test_size=32", "--data.init_args.batch_size=32"]  # fmt: skip
LINEAR_TINY = ("--trainer.max_epochs=1 --trainer.check_val_every_n_epoch=1 --trainer.enable_progress_bar=false "
               "--model.init_args.cache_features=flips --data.init_args.data.init_args.train_size=64 "
               "--data.init_args.data.init_args.test_size=32")  # fmt: skip


@pytest.mark.parametrize("data", ["cifar10", "cifar100", "svhn", "imagenet100"])
def test_the_dry_run_prints_one_line_per_column_and_seed_with_its_recipe_overlay_and_linear_evaluation(
    data, tmp_path, capsys, monkeypatch
):
    """Catches a plan that drops or repeats a column, puts two runs in one folder, composes another data
    set's recipe, or leaves out the linear evaluation that follows each fit."""
    monkeypatch.chdir(REPO)
    assert main(["--plan", "table1", "--data", data, "--seeds", "0,1,2", "--out", str(tmp_path), "--dry-run"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 10 * 3
    folders = set()
    for line in lines:
        fit, linear = (shlex.split(part) for part in line.split(" && "))
        assert fit[:3] == ["python", "-m", "ssl_app"] and fit[3] == "fit"
        assert fit[fit.index("--config") + 1] == f"configs/{data}/memory_bank.yaml"
        [overlay] = [a for a in fit[fit.index("--config") + 2 :] if a.startswith("configs/losses/")]
        column = re.fullmatch(r"configs/losses/table1/(.+)\.yaml", overlay).group(1)
        name = next(a.split("=", 1)[1] for a in fit if a.startswith("--trainer.logger.init_args.name="))
        version = next(a.split("=", 1)[1] for a in fit if a.startswith("--trainer.logger.init_args.version="))
        assert name == column and f"--seed_everything={version.removeprefix('seed')}" in fit
        folders.add((name, version))
        assert linear[4:6] == ["--config", f"configs/{data}/linear.yaml"]
        assert f"table1_{data}/{column}/{version}/checkpoints/last.ckpt" in linear[6]
    assert len(folders) == 30 and {name for name, _ in folders} == set(TABLE1_COLUMNS)
    assert not list(tmp_path.iterdir())


def test_a_dry_run_read_by_a_reader_that_leaves_early_ends_quietly(tmp_path):
    """Catches ``--dry-run | head`` ending in a BrokenPipeError traceback: 210 lines (more than a pipe
    holds) are printed to a reader that takes one and closes."""
    seeds = ",".join(str(seed) for seed in range(21))
    command = [sys.executable, "-m", "ssl_app.sweep", "--plan", "table1", "--data", "cifar10", "--seeds", seeds]
    command += ["--out", str(tmp_path), "--dry-run"]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    process = subprocess.Popen(command, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    first = process.stdout.readline()
    process.stdout.close()
    err = process.communicate(timeout=120)[1].decode()
    assert first.startswith(b"python -m ssl_app fit ") and process.returncode == 0
    assert "Traceback" not in err and "BrokenPipeError" not in err, err[-2000:]


def test_plan_options_that_do_not_go_together_are_one_error(capsys):
    """Catches a --plan silently combined with a hand-written --config (two recipes in one run)."""
    for argv in (["--plan", "table1", "--data", "cifar10", "--config", "configs/quickstart.yaml"], ["--plan", "table1"], []):
        with pytest.raises(SystemExit) as exit_:
            main([*argv, "--dry-run"])
        assert exit_.value.code == 2 and capsys.readouterr().err.startswith("error: ")
    assert set(DATA_SETS) >= {"cifar10", "cifar100", "svhn", "imagenet100"}


def printed_config(argv: list[str], capsys) -> dict:
    """The config one stage's command resolves to (``--print_config``; nothing is built or run)."""
    with pytest.raises(SystemExit) as exit_:
        cli_main([*argv, "--print_config"])
    out, err = capsys.readouterr()
    assert exit_.value.code == 0, err[-1500:]
    return yaml.safe_load(out)


@pytest.mark.parametrize("data", ["cifar100", "imagenet100"])
def test_data_root_reaches_the_fit_and_the_linear_evaluation_under_each_ones_key(data, tmp_path, capsys, monkeypatch):
    """Catches a root that reaches only the fit (the linear evaluation wraps its data module, so its key
    differs: the ImageNet-100 linear stage then read data/imagenet), a relative root that a job started
    elsewhere reads differently, and a --data-root that overrides the root a user gives after --."""
    monkeypatch.chdir(REPO)
    root = tmp_path / "images"
    (root / "train").mkdir(parents=True)
    assert main(["--plan", "table1", "--data", data, "--out", str(tmp_path / "runs"), "--data-root", str(root), "--dry-run"]) == 0
    fit, linear = (shlex.split(part)[3:] for part in capsys.readouterr().out.splitlines()[0].split(" && "))
    assert printed_config(fit, capsys)["data"]["init_args"]["root"] == root.as_posix()
    linear_data = printed_config(linear, capsys)["data"]["init_args"]["data"]
    assert linear_data["init_args"]["root"] == root.as_posix()

    other = (tmp_path / "other").as_posix()
    argv = ["--plan", "table1", "--data", data, "--out", str(tmp_path / "runs"), "--data-root", str(root)]
    assert main([*argv, "--dry-run", "--", f"--data.init_args.root={other}"]) == 0
    fit = shlex.split(capsys.readouterr().out.splitlines()[0].split(" && ")[0])[3:]
    assert printed_config(fit, capsys)["data"]["init_args"]["root"] == other


def test_data_root_is_refused_where_it_cannot_mean_anything(tmp_path, capsys, monkeypatch):
    """Catches a missing ImageNet folder found only when the first of 10 fits starts, and a root given
    to generated data or to a hand-written sweep, where it would be silently ignored."""
    monkeypatch.chdir(REPO)
    missing = tmp_path / "no_such_folder"
    cases = {
        ("--plan", "table1", "--data", "imagenet100", "--data-root", str(missing)): "no such folder",
        ("--plan", "table1", "--data", "shapes", "--data-root", str(tmp_path)): "generated",
        ("--config", "configs/quickstart.yaml", "--data-root", str(tmp_path)): "needs --plan",
    }
    for argv, says in cases.items():
        with pytest.raises(SystemExit) as exit_:
            main([*argv, "--out", str(tmp_path / "runs")])
        err = capsys.readouterr().err
        assert exit_.value.code == 2 and err.startswith("error: --data-root") and says in err
    assert not (tmp_path / "runs").exists()  # refused before anything was written
    # a preview may name a folder of the machine the plan will run on
    argv = ["--plan", "table1", "--data", "imagenet100", "--data-root", str(missing), "--out", str(tmp_path / "runs")]
    assert main([*argv, "--dry-run"]) == 0
    assert f"--data.init_args.data.init_args.root={missing.as_posix()}" in capsys.readouterr().out
    # a data set torchvision downloads may name a folder that does not exist yet
    argv = ["--plan", "table1", "--data", "svhn", "--data-root", str(missing), "--out", str(tmp_path / "runs")]
    assert main([*argv, "--dry-run"]) == 0
    assert f"--data.init_args.root={missing.as_posix()}" in capsys.readouterr().out


def test_the_estimate_times_the_plan_here_and_says_what_it_is(capsys, monkeypatch):
    """Catches an estimate that runs nothing (no timing), forgets the linear stage, or does not say it is one."""
    monkeypatch.chdir(REPO)
    assert main(["--plan", "table1", "--data", "shapes", "--estimate"]) == 0
    out = capsys.readouterr().out
    assert "10 runs" in out and "ms per training image" in out and "an estimate" in out
    per_run = re.search(
        r"per run: ([\d.]+) device-hours fit \+ ([\d.]+) linear = ([\d.]+) \(([\d.]+) \+ ([\d.]+) min\); whole plan: ([\d.]+)",
        out,
    )
    fit, linear, total, fit_minutes, linear_minutes, plan = map(float, per_run.groups())
    # minutes say what two decimals of device-hours round away for a small plan
    assert fit_minutes + linear_minutes > 0
    assert fit == pytest.approx(fit_minutes / 60, abs=0.006) and linear == pytest.approx(linear_minutes / 60, abs=0.006)
    # two decimals of device-hours: a fast machine prints 0.00 for the tiny plan's fit
    assert fit >= 0 and linear >= 0 and total == pytest.approx(fit + linear, abs=0.011)
    per_image = re.search(r"([\d.]+) ms per training image", out)
    assert float(per_image.group(1)) > 0  # something was timed
    assert plan == pytest.approx(10 * total, abs=0.11)


def test_the_estimates_arithmetic_by_hand(capsys, monkeypatch):
    """Catches a slip in ``--estimate``'s per-image arithmetic (a step counted for the last partial batch,
    which the training loader drops, a validation pass or the linear stage's held-out images left out,
    minutes for hours): the
    tiny plan's device-seconds computed here by hand from fixed calibration numbers, compared exactly."""
    import ssl_app.sweep.estimate as estimate
    from ssl_app.sweep.command import parse_args
    from ssl_app.sweep.grid import planned_runs

    monkeypatch.chdir(REPO)
    # the estimate resolves the first column's config: SimCLR's CIFAR ResNet-18 at batch 512, 200 epochs
    monkeypatch.setattr(estimate, "calibrate", lambda backbone, crop, batch: estimate.Calibration("fake", batch, 0.5, 0.25))
    linear = "--trainer.max_epochs=4 --trainer.check_val_every_n_epoch=1"
    fit = ["--trainer.max_epochs=3", "--trainer.check_val_every_n_epoch=2", "--data.init_args.batch_size=32"]
    args = parse_args(["--plan", "table1", "--data", "shapes", "--estimate", "--linear-args", linear, "--", *fit])
    _, runs = planned_runs(args)
    fit_seconds, linear_seconds = estimate.print_estimate("table1", "shapes", runs)
    train, held = 2_000, 500  # DATA_SETS["shapes"]
    assert (DATA_SETS["shapes"].train_images, DATA_SETS["shapes"].eval_images) == (train, held)
    # 3 epochs of 62 whole batches of 32 (drop_last: the last 16 images do not train) at 0.5 s per image; one
    # validation pass (epoch 2) encoding the training and held-out images at 0.25 s each
    assert fit_seconds == 3 * 62 * 32 * 0.5 + 1 * (train + held) * 0.25 == 3601.0
    # 4 epochs encoding the training images, 4 validation passes over the held-out ones
    assert linear_seconds == (4 * train + 4 * held) * 0.25 == 2500.0
    out = capsys.readouterr().out
    assert "per run: 1.00 device-hours fit + 0.69 linear = 1.69 (60.02 + 41.67 min); whole plan: 16.9 device-hours" in out
    assert "500.000 ms per training image, 250.000 ms per encoded image" in out


@pytest.mark.slow
def test_the_cpu_plan_runs_end_to_end_each_fit_then_its_linear_evaluation(tmp_path, capsys, monkeypatch):
    """Catches a plan whose runs parse but do not train, or whose linear stage is not filed in its run.
    Two columns, the first and the last (an in-batch InfoNCE and a HardSimple): the plan runs each
    column the same way, and every column's overlay is checked on its own below."""
    monkeypatch.chdir(REPO)
    folder, columns = PLANS["table1"]
    monkeypatch.setitem(PLANS, "table1", (folder, (columns[0], columns[-1])))
    args = ["--plan", "table1", "--data", "shapes", "--out", str(tmp_path), "--jobs", "2", "--linear-args", LINEAR_TINY]
    assert main([*args, *FIT_TINY]) == 0
    for column in (columns[0], columns[-1]):
        run = tmp_path / "table1_shapes" / column / "seed0"
        assert read_record(run).status == "done", column
        assert read_record(run / "evaluations" / "linear_0").status == "done", column
    capsys.readouterr()
    assert main(["--plan", "table1", "--data", "shapes", "--out", str(tmp_path), "--status"]) == 0
    assert capsys.readouterr().out.count("done") >= 2


@pytest.mark.parametrize("column", TABLE1_COLUMNS)
def test_each_table1_overlay_sets_the_loss_and_tau_its_column_names(column):
    """Catches an overlay whose loss or τ is not its column's (``infonce_t0.3.yaml`` setting 0.7): its
    file name, the report's Table-1 column at the same position (``ssl_app.report.reference.COLUMNS``,
    whose paper numbers its runs are compared with) and its header comment must all name what it sets."""
    from ssl_app.report.reference import COLUMNS, column_of

    path = REPO / "configs" / "losses" / "table1" / f"{column}.yaml"
    loss = yaml.safe_load(path.read_text())["model"]["init_args"]["loss"]
    loss_class, tau = loss["class_path"].rsplit(".", 1)[-1], loss["init_args"].get("temperature")
    family, _, named_tau = re.fullmatch(r"(infonce|simple|hard|hard_simple)(_t([\d.]+))?", column).group(1, 2, 3)
    expected_class = {"infonce": "InfoNCE", "simple": "Simple", "hard": "HardContrastive", "hard_simple": "HardSimple"}[family]
    assert loss_class == expected_class
    assert tau == (None if named_tau is None else float(named_tau))  # None: the loss has no τ (Simple, HardSimple)
    paper_column = COLUMNS[TABLE1_COLUMNS.index(column)]
    assert column_of(loss_class, tau) == paper_column
    header = path.read_text().splitlines()[0]  # '# Table 1, "Hard τ=0.3": ...'
    assert re.findall(r"τ=([\d.]+)", header) == ([] if named_tau is None else [named_tau]), header


def test_the_hardness_plan_expands_for_cifar10_on_one_simclr_recipe(tmp_path, capsys, monkeypatch):
    """Catches a hardness plan that drops or repeats a loss, gives a column another loss's class path or
    options, composes the memory-bank recipe instead of SimCLR's, or times another model in --estimate,
    or a column whose loss options do not build (the dry run's pre-flight builds each)."""
    import ssl_app.losses
    import ssl_app.sweep.estimate as estimate
    from ssl_app.sweep.command import parse_args
    from ssl_app.sweep.grid import planned_runs
    from ssl_app.sweep.plans import HARDNESS_LOSSES

    monkeypatch.chdir(REPO)
    argv = ["--plan", "hardness", "--data", "cifar10", "--seeds", "0,1", "--out", str(tmp_path)]
    _, runs = planned_runs(parse_args(argv))
    assert len(runs) == 10 * 2 and [run.point for run in runs[::2]] == list(HARDNESS_LOSSES)
    assert len(HARDNESS_LOSSES) == 10
    assert {"dcl", "dclw", "debiased_tp0.1", "hcl_b0.5", "hcl_b1.0", "hypersphere", "macl"} <= set(HARDNESS_LOSSES)
    for run in runs:
        fit = run.fit_args
        assert fit[fit.index("--config") + 1] == "configs/cifar10/simclr.yaml" and fit.count("--config") == 1
        [loss] = [json.loads(a.split("=", 1)[1]) for a in fit if a.startswith("--model.init_args.loss=")]
        name, options = HARDNESS_LOSSES[run.point]
        assert loss == {"class_path": f"ssl_app.losses.{name}", "init_args": options}
        assert run.linear_args[1:3] == ["--config", "configs/cifar10/linear.yaml"]
    assert HARDNESS_LOSSES["hcl_b0.5"] == ("HCL", {"beta": 0.5}) and HARDNESS_LOSSES["debiased_tp0.1"][1] == {"tau_plus": 0.1}

    assert all(hasattr(ssl_app.losses, name) for name, _ in HARDNESS_LOSSES.values())
    assert main([*argv, "--dry-run"]) == 0  # the pre-flight builds every column's loss
    assert len(capsys.readouterr().out.strip().splitlines()) == 20

    # the estimate resolves the first column's config: SimCLR's CIFAR ResNet-18 at batch 512, 200 epochs
    monkeypatch.setattr(estimate, "calibrate", lambda backbone, crop, batch: estimate.Calibration(backbone, batch, 0.5, 0.25))
    estimate.print_estimate("hardness", "cifar10", runs[::2])
    out = capsys.readouterr().out
    assert (
        "plan hardness on cifar10: 10 runs, each 200 epochs of 50,000 images at batch 512 (resnet18_cifar, 32x32 px, 2 views"
        in out
    )


def test_the_hardness_plan_names_the_data_sets_it_has_a_recipe_for(tmp_path, capsys):
    """Catches --plan hardness on a data set without a SimCLR recipe ending in a traceback, or running its memory bank."""
    with pytest.raises(SystemExit) as exit_:
        main(["--plan", "hardness", "--data", "svhn", "--out", str(tmp_path), "--dry-run"])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and err == "error: --plan hardness has a SimCLR recipe for cifar10, shapes only, not svhn\n"


def test_the_tau_schedules_plan_expands_both_long_tailed_data_sets(tmp_path, capsys, monkeypatch):
    """Catches a schedules plan that drops a constant, runs the cosine schedule with another period than the
    authors' (their t_max = 200 in cos(π e / t_max) is a period of 400 epochs), composes another recipe or the
    balanced linear evaluation, puts two columns in one folder, a schedule the CLI cannot parse (the dry run's
    pre-flight parses it and the linear stage), or times another model in --estimate, or counts one view of each
    image where SimCLR trains on two (half the device-hours)."""
    import ssl_app.sweep.command as command
    import ssl_app.sweep.estimate as estimate
    from ssl_app.sweep.command import parse_args
    from ssl_app.sweep.grid import planned_runs
    from ssl_app.sweep.tau_axis import TAU_KEY

    monkeypatch.chdir(REPO)
    # The pre-flight parses the schedule's column and the linear stage (the constants' commands are the recipe, which
    # test_configs parses, with another number): a third of the parses, each a second or more on 2 cores.
    parse = command.validate
    monkeypatch.setattr(command, "validate", lambda runs: parse([run for run in runs if "cosine" in run.point]))
    cosine = {"class_path": "ssl_app.temperature.Cosine", "init_args": {"low": 0.1, "high": 1.0, "period": 400}}
    expected = {"tau_0.1": 0.1, "tau_0.2": 0.2, "tau_0.5": 0.5, "tau_1.0": 1.0, "tau_cosine_0.1-1_T=400": cosine}
    folders = set()
    for data, linear in (("cifar10_lt", "cifar10/linear_lt.yaml"), ("cifar100_lt", "cifar100/linear_lt.yaml")):
        assert main(["--plan", "tau_schedules", "--data", data, "--seeds", "0,1", "--out", str(tmp_path), "--dry-run"]) == 0
        lines = capsys.readouterr().out.strip().splitlines()
        assert len(lines) == 5 * 2
        taus = {}
        for line in lines:
            fit, linear_stage = (shlex.split(part)[3:] for part in line.split(" && "))
            assert fit[fit.index("--config") + 1] == f"configs/{data}/simclr.yaml" and fit.count("--config") == 1
            assert linear_stage[1:3] == ["--config", f"configs/{linear}"]
            [tau] = [json.loads(a.split("=", 1)[1]) for a in fit if a.startswith(f"--{TAU_KEY}=")]
            name = next(a.split("=", 1)[1] for a in fit if a.startswith("--trainer.logger.init_args.name="))
            version = next(a.split("=", 1)[1] for a in fit if a.startswith("--trainer.logger.init_args.version="))
            taus[name] = tau
            folders.add((data, name, version))
        assert taus == expected
    assert len(folders) == 2 * 5 * 2 and not list(tmp_path.iterdir())

    # the estimate resolves the first column's config: SimCLR's CIFAR ResNet-18 at batch 512, 2000 epochs
    _, runs = planned_runs(parse_args(["--plan", "tau_schedules", "--data", "cifar100_lt", "--out", str(tmp_path)]))
    monkeypatch.setattr(estimate, "calibrate", lambda backbone, crop, batch: estimate.Calibration(backbone, batch, 0.5, 0.25))
    fit_seconds, _ = estimate.print_estimate("tau_schedules", "cifar100_lt", runs)
    out = capsys.readouterr().out
    assert "plan tau_schedules on cifar100_lt: 5 runs, each 2000 epochs of 10,847 images at batch 512 (resnet18_cifar" in out
    # SimCLR trains on both views of each image: 2000 epochs of 21 whole batches of 512 × 2 views at 0.5 s, and a
    # validation every 20 epochs encoding the training and test images at 0.25 s
    assert "2 views an image" in out and fit_seconds == 2000 * 21 * 512 * 2 * 0.5 + 100 * (10_847 + 10_000) * 0.25


def test_plans_refuse_the_data_sets_they_have_no_recipe_for(tmp_path, capsys):
    """Catches Table 1 run on a long-tailed set (it has no memory-bank recipe: an empty --config) and the
    schedules plan on a balanced one, each ending in a traceback instead of one line naming what exists."""
    cases = {
        (
            "table1",
            "cifar10_lt",
        ): "error: --plan table1 has a memory-bank recipe for cifar10, cifar100, svhn, imagenet100, shapes only",
        ("tau_schedules", "cifar10"): "error: --plan tau_schedules has a recipe for cifar100_lt, cifar10_lt only, not cifar10",
    }
    for (plan, data), says in cases.items():
        with pytest.raises(SystemExit) as exit_:
            main(["--plan", plan, "--data", data, "--out", str(tmp_path), "--dry-run"])
        err = capsys.readouterr().err
        assert exit_.value.code == 2 and err.startswith(says) and err.count("\n") == 1, err


@pytest.mark.parametrize("data", ["cifar10", "cifar100"])
def test_the_beyond_softmax_plan_expands_to_its_five_overlays_on_the_memory_bank_recipe(data, tmp_path, capsys, monkeypatch):
    """Catches a beyond_softmax plan that drops or repeats a column, points a column at another loss or τ,
    leaves out the learnable scale and bias of SigLIP, composes another data set's recipe or leaves out the
    linear evaluation, or a column that does not build (the dry run's pre-flight builds each)."""
    from ssl_app.sweep.command import parse_args
    from ssl_app.sweep.grid import planned_runs
    from ssl_app.sweep.plans import BEYOND_SOFTMAX_COLUMNS

    monkeypatch.chdir(REPO)
    argv = ["--plan", "beyond_softmax", "--data", data, "--seeds", "0,1,2", "--out", str(tmp_path)]
    _, runs = planned_runs(parse_args(argv))
    assert len(runs) == 5 * 3 and [run.point for run in runs[::3]] == list(BEYOND_SOFTMAX_COLUMNS)
    expected = {
        "infonce_t0.2": ("ssl_app.losses.InfoNCE", {"temperature": 0.2}),
        "infonce_t0.5": ("ssl_app.losses.InfoNCE", {"temperature": 0.5}),
        "dcl": ("ssl_app.losses.DCL", {"temperature": 0.1}),
        "spectral": ("ssl_app.losses.Spectral", {"mu": 1.0}),
        "sigmoid": (
            "ssl_app.losses.Sigmoid",
            {"temperature": {"class_path": "ssl_app.temperature.Learnable", "init_args": {"init": 0.1, "min": 0.01, "max": 1.0}},
             "bias": -10.0},
        ),
    }  # fmt: skip
    assert set(expected) == set(BEYOND_SOFTMAX_COLUMNS)
    for run in runs:
        fit = run.fit_args
        assert fit[fit.index("--config") + 1] == f"configs/{data}/memory_bank.yaml"
        overlay = fit[fit.index("--config") + 3]
        assert overlay == f"configs/losses/beyond_softmax/{run.point}.yaml"
        loss = yaml.safe_load((REPO / overlay).read_text())["model"]["init_args"]["loss"]
        assert (loss["class_path"], loss["init_args"]) == expected[run.point]
        assert run.linear_args[1:3] == ["--config", f"configs/{data}/linear.yaml"]
    assert main([*argv, "--dry-run"]) == 0  # the pre-flight builds every column's loss
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 15 and all(f"beyond_softmax_{data}/" in line for line in lines)


def test_the_beyond_softmax_plan_estimates_the_memory_bank_recipe(capsys, monkeypatch):
    """Catches --estimate failing on the plan, or timing another model than its recipe's."""
    import ssl_app.sweep.estimate as estimate
    from ssl_app.sweep.command import parse_args
    from ssl_app.sweep.grid import planned_runs

    monkeypatch.chdir(REPO)
    _, runs = planned_runs(parse_args(["--plan", "beyond_softmax", "--data", "cifar100", "--out", "unused"]))
    monkeypatch.setattr(estimate, "calibrate", lambda backbone, crop, batch: estimate.Calibration(backbone, batch, 0.5, 0.25))
    estimate.print_estimate("beyond_softmax", "cifar100", runs)
    out = capsys.readouterr().out
    assert "plan beyond_softmax on cifar100: 5 runs, each 200 epochs of 50,000 images at batch 128 (resnet18_cifar" in out
    assert main(["--plan", "beyond_softmax", "--data", "shapes", "--estimate"]) == 0  # timed here, on the CPU stand-in
    assert "5 runs" in capsys.readouterr().out
