"""What both launchers share (``ssl_app.sweep.stages``): a run's pending stages, read from its folder."""

from __future__ import annotations

import ssl_app.sweep.stages as stages
from ssl_app.runs.layout import SweepPoint, newest_done_evaluation, write_sweep_point
from ssl_app.runs.record import FAILED, finish_record, start_record
from ssl_app.sweep.stages import PlannedRun


def test_stages_read_sweep_json_once_and_a_probe_counts_only_when_done_and_exited_0(tmp_path, monkeypatch):
    run = PlannedRun("s", "base", {}, 0, tmp_path / "base" / "seed0", ["fit"], ["fit", "--config", "linear.yaml"])
    fit = start_record(run.directory, "fit", {})
    finish_record(run.directory, fit, "done", "finished")
    probes = run.directory / "evaluations"
    for name, status in (("linear_0", "done"), ("linear_1", FAILED)):
        finish_record(probes / name, start_record(probes / name, "linear", {}), status, status)
    (probes / "linear_2").mkdir()
    (probes / "linear_2" / "run.json").write_text("{not json", encoding="utf-8")
    problems: list[str] = []
    assert newest_done_evaluation(run.directory, "linear", problems) == probes / "linear_0" and len(problems) == 1

    reads = []
    original = stages.read_sweep_point
    monkeypatch.setattr(stages, "read_sweep_point", lambda folder: reads.append(folder) or original(folder))
    assert run.stages() == [] and len(reads) == 1  # the fit and its probe are done: one read of sweep.json
    write_sweep_point(run.directory, SweepPoint(sweep="s", point="base", grid={}, seed=0, exits={"linear": 1}))
    assert run.stages() == [("linear", run.linear_args)]  # the last probe's process exited 1: probe again


def test_sweep_json_says_whether_the_sweep_probes_the_run(tmp_path):
    """Catches the fit of a probed sweep not knowing it (HParams then hides the probe's top-1 behind the fit's own
    columns) and the flag lost when the sweep rewrites sweep.json with a stage's command or exit."""
    from ssl_app.runs.layout import read_sweep_point

    probed = PlannedRun("s", "base", {}, 0, tmp_path / "a", ["fit"], ["fit", "--config", "linear.yaml"])
    alone = PlannedRun("s", "base", {}, 1, tmp_path / "b", ["fit"], None)
    for run, expected in ((probed, True), (alone, False)):
        stages.prepare_stage(run, "fit", run.fit_args)
        stages.note_exit(run, "fit", 0)
        assert read_sweep_point(run.directory).probed is expected
