"""A sweep's run names as TensorBoard's run list shows them: short, and distinct where the list cuts them (issue 40).

TensorBoard names a run by its folder relative to ``--logdir``; the README opens ``tensorboard --logdir runs`` above
the sweeps (``--out runs/sweeps``), so a run is ``sweeps/<name>/<point>/seed<k>``. Time Series lists the runs in a
sidebar 20% of the window wide (``sideBarWidthInPercent: 20``, the core reducer's initial state in
tensorboard/webfiles.zip, TensorBoard 2.21) and clips a name at its edge, neither wrapping it nor ending it with
"…"; the name starts 53 px in (the checkbox column) and 13-px Roboto takes about 6.4 px a character: measured in
headless Chromium with docs/screenshots/take.py, a 1,400-px window shows 35 characters
(``sweeps/tau_small/temperature=0.2/se``) and a 1,280-px one 33 (``sweeps/loss+tau/tau=0.07,loss=Ha``).
:func:`visible` is that rule, on the safe side; the tests use a 1,280-px window.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from ssl_app.runs.layout import write_sweep_point
from ssl_app.runs.record import finish_record, start_record
from ssl_app.sweep.command import main, parse_args
from ssl_app.sweep.grid import axis_aliases, planned_runs, point_names, recorded_runs
from tests.ssl_app.cli.test_cli import QUICKSTART

TAU = "model.init_args.loss.init_args.temperature"
LOSS = "model.init_args.loss"
#: A sweep's plan as main wrote it at 8c8139a (``write_plan`` of ``--grid tau=0.2,0.5 --seeds 0,1 --out runs/sweeps``,
#: run from a folder with ``configs/``): the old names, ``temperature/temperature=0.2/seed0``.
OLD_PLAN = Path(__file__).parent / "data" / "old_naming" / "sweep_plan.json"
WINDOW = 1280


def visible(window_px: int = WINDOW) -> int:
    """How many characters of a run's name TensorBoard's Time Series run list shows in a window ``window_px`` wide."""
    return int((0.2 * window_px - 53) / 6.4)


def run_names(tmp_path: Path, grid: list[str], seeds: str) -> list[str]:
    """The TensorBoard names (relative to ``--logdir runs``) of the sweep's runs, planned by the sweep's own code."""
    args = parse_args(["--config", QUICKSTART, *[a for g in grid for a in ("--grid", g)], "--seeds", seeds,
                       "--out", str(tmp_path / "runs" / "sweeps")])  # fmt: skip
    _, runs = planned_runs(args)
    return [run.directory.relative_to(tmp_path / "runs").as_posix() for run in runs]


def test_the_rule_shows_what_the_issue_saw():
    assert visible(1400) == 35 and visible(1280) == 31


def test_a_tau_sweep_over_two_seeds_is_told_apart_in_the_run_list(tmp_path):
    """Catches ``sweeps/temperature/temperature=0.2/seed0``: cut at 31 characters, all four runs read the same."""
    names = run_names(tmp_path, ["tau=0.2,0.5"], "0,1")
    assert names == [
        "sweeps/tau/tau=0.2/seed0",
        "sweeps/tau/tau=0.2/seed1",
        "sweeps/tau/tau=0.5/seed0",
        "sweeps/tau/tau=0.5/seed1",
    ]
    assert len({name[: visible()] for name in names}) == 4


def test_a_loss_by_tau_grid_keeps_tau_and_the_loss_in_sight(tmp_path):
    """Catches ``loss=HardContrastive,temperature=0.07``: the class's long name first pushed τ out of the list."""
    losses = f"{LOSS}=ssl_app.losses.InfoNCE,ssl_app.losses.HardContrastive"
    names = run_names(tmp_path, [losses, "tau=0.07,0.2"], "0")
    assert names[0] == "sweeps/loss+tau/tau=0.07,loss=InfoNCE/seed0"
    assert len({name[: visible()] for name in names}) == 4


def test_two_keys_with_one_short_name_get_names_that_tell_them_apart():
    batch = ["data.init_args.batch_size", "model.init_args.batch_size"]
    assert axis_aliases(batch) == {batch[0]: "data.batch_size", batch[1]: "model.batch_size"}
    assert axis_aliases([TAU, "model.init_args.head.init_args.tau"]) == {
        TAU: "loss.temperature",
        "model.init_args.head.init_args.tau": "head.tau",
    }
    assert axis_aliases([TAU, LOSS, "trainer.max_epochs"]) == {TAU: "tau", LOSS: "loss", "trainer.max_epochs": "max_epochs"}
    names = point_names([{batch[0]: "32", batch[1]: "64"}, {batch[0]: "64", batch[1]: "32"}])
    assert names == ["data.batch_size=32,model.batch_size=64", "data.batch_size=64,model.batch_size=32"]


def _old_sweep(tmp_path: Path, done: list[tuple[str, int]]) -> Path:
    """The old sweep's folder (its plan as main wrote it), with a run folder for each planned run and the runs
    ``done`` (point, seed) finished, written by the sweep's and the run record's own writers."""
    sweep = tmp_path / "runs" / "sweeps" / "temperature"
    sweep.mkdir(parents=True)
    shutil.copyfile(OLD_PLAN, sweep / "sweep_plan.json")
    for run in recorded_runs(sweep):
        run.directory.mkdir(parents=True)
        write_sweep_point(run.directory, run.sidecar())
        if (run.point, run.seed) in done:
            finish_record(run.directory, start_record(run.directory, "fit", {}), "done", "finished")
    return sweep


def test_a_rerun_in_a_sweep_of_the_old_names_finds_its_runs(tmp_path, monkeypatch, capsys):
    """Catches the same command, re-run after the names changed, training every run again under ``tau/tau=0.2``."""
    monkeypatch.chdir(tmp_path)
    sweep = _old_sweep(tmp_path, [("temperature=0.2", 0), ("temperature=0.2", 1), ("temperature=0.5", 0)])
    command = ["--config", QUICKSTART, "--grid", "tau=0.2,0.5", "--seeds", "0,1", "--out", "runs/sweeps"]
    sweep_dir, runs = planned_runs(parse_args(command))
    assert sweep_dir == Path("runs/sweeps/temperature")
    assert [r.directory.as_posix() for r in runs] == [
        f"runs/sweeps/temperature/temperature={tau}/seed{seed}" for tau in ("0.2", "0.5") for seed in (0, 1)
    ]
    todo = [(run.point, run.seed, stage) for run in runs for stage, _ in run.stages()]
    assert todo == [("temperature=0.5", 1, "fit")]
    assert "--trainer.logger.init_args.name=temperature=0.5" in runs[3].fit_args  # its events land in its folder

    assert main([*command, "--status"]) == 0
    status = capsys.readouterr().out.splitlines()
    assert [line.split()[:4] for line in status[:4]] == [
        ["temperature=0.2", "seed", "0", "done"], ["temperature=0.2", "seed", "1", "done"],
        ["temperature=0.5", "seed", "0", "done"], ["temperature=0.5", "seed", "1", "unknown"],
    ]  # fmt: skip
    assert main(["--status", str(sweep)]) == 0
    assert capsys.readouterr().out.splitlines()[:4] == status[:4]
    assert not (tmp_path / "runs" / "sweeps" / "tau").exists()


def test_a_new_sweep_beside_an_old_one_of_other_points_gets_the_new_names(tmp_path, monkeypatch):
    """Only a folder of the old names that is there is re-used: the sweep's new points take the short names."""
    monkeypatch.chdir(tmp_path)
    _old_sweep(tmp_path, [("temperature=0.2", 0)])
    command = ["--config", QUICKSTART, "--grid", "tau=0.2,0.1", "--seeds", "0", "--out", "runs/sweeps"]
    _, runs = planned_runs(parse_args(command))
    assert [run.point for run in runs] == ["temperature=0.2", "tau=0.1"]


#: HParams' table names a row in its "Trial ID" column, 10em wide (``<vaadin-grid-column flex-grow="0" width="10em">``
#: of tf-hparams-session-group-table, TensorBoard 2.21), the rest cut with "…": docs/screenshots/hparams.png shows
#: ``τ=0.2 · seed 0 · …``, 17 characters.
TRIAL_ID_CHARACTERS = 16


def test_hparams_names_a_loss_by_tau_row_by_tau_first(tmp_path):
    """Catches ``loss=HardContrastive · τ=0.07 · …``: the row's name follows sweep.json's grid, which kept the
    grid's order, and the Trial ID column cut τ off."""
    from ssl_app.runs.panel import fit_row
    from ssl_app.runs.spec import RunSpec

    losses = f"{LOSS}=ssl_app.losses.InfoNCE,ssl_app.losses.HardContrastive"
    args = parse_args(["--config", QUICKSTART, "--grid", losses, "--grid", "tau=0.07,0.2", "--out", str(tmp_path)])
    _, runs = planned_runs(args)
    rows = []
    for run in runs:
        loss = {"class_path": run.grid[LOSS], "init_args": {"temperature": float(run.grid[TAU])}}
        spec = RunSpec.from_config({"model": {"class_path": "ssl_app.methods.SimCLR", "init_args": {"loss": loss}}})
        rows.append(fit_row(spec, run.sidecar(), "").name)
    assert rows[2] == "τ=0.07 · loss=HardContrastive · seed 0 · loss+tau"
    assert len({row[:TRIAL_ID_CHARACTERS] for row in rows}) == 4
    assert all(run.fit_args.index(f"--{LOSS}={run.grid[LOSS]}") < run.fit_args.index(f"--{TAU}={run.grid[TAU]}") for run in runs)
