"""Reading event files: a resumed run's later values win, and what orders the files of one folder.

What decides the order: TensorBoard's reader loads a folder's files in the sorted order of their
names, ``events.out.tfevents.<10-digit seconds>.<host>.<pid>.<n>`` (torch's ``SummaryWriter``),
and ``read_events`` keeps the last value read at each step. Files from different seconds order
by time. Within one second the name decides: host, then process id, then ``n`` (a per-process
counter, compared as text). A resumed run is a new process, started seconds after the last
write of the run it resumes, so its file sorts later; two writers of one process in one second
order by their counter (while it has the same number of digits); two processes within one
second order by process id, whatever their order in time (``xfail`` below).
"""

from __future__ import annotations

import types
from pathlib import Path

import pytest
from tensorboard.summary.writer import event_file_writer
from torch.utils.tensorboard import SummaryWriter

from ssl_app.report.events import read_events

FIRST_SECOND = 1_700_000_000
# values exact in float32, as the event files store them


def write(folder: Path, values: dict[int, float], second: float, monkeypatch, pid: int | None = None) -> str:
    """One real ``SummaryWriter`` run logging ``metrics/uniformity`` at the given steps; its file
    name is stamped with ``second`` (and ``pid``) instead of the clock's."""
    monkeypatch.setattr(event_file_writer, "time", types.SimpleNamespace(time=lambda: second))
    if pid is not None:
        monkeypatch.setattr(event_file_writer.os, "getpid", lambda: pid)
    writer = SummaryWriter(log_dir=str(folder))
    name = Path(writer._get_file_writer().event_writer._file_name).name
    for step, value in values.items():
        writer.add_scalar("metrics/uniformity", value, step)
    writer.close()
    monkeypatch.undo()
    return name


def test_a_resumed_run_keeps_the_later_files_values_for_the_steps_both_logged(tmp_path, monkeypatch):
    """Catches ``read_events`` keeping the first value written at a step (or ordering files in any
    way other than TensorBoard's): the report would show the interrupted run's numbers for the
    epochs the resumed run redid."""
    first = write(tmp_path, {0: 1.0, 1: 1.5, 2: 2.0}, FIRST_SECOND, monkeypatch)
    resumed = write(tmp_path, {1: 1.25, 2: 2.25, 3: 2.5}, FIRST_SECOND + 7, monkeypatch)
    assert sorted(p.name for p in tmp_path.iterdir()) == [first, resumed]
    assert read_events(tmp_path).scalars["metrics/uniformity"] == [(0, 1.0), (1, 1.25), (2, 2.25), (3, 2.5)]


def test_two_writers_of_one_process_in_one_second_order_by_their_counter(tmp_path, monkeypatch):
    """Catches (documents) the within-a-second rule: same second, same host and process, so the
    per-process counter, and with it the creation order, decides."""
    first = write(tmp_path, {0: 1.0, 1: 1.5}, FIRST_SECOND, monkeypatch)
    second = write(tmp_path, {1: 1.25}, FIRST_SECOND, monkeypatch)
    counters = [int(name.rsplit(".", 1)[1]) for name in (first, second)]
    if len(str(counters[0])) != len(str(counters[1])):
        pytest.skip(f"the counter crossed a power of ten ({counters}): text order differs from creation order there")
    assert sorted([second, first]) == [first, second]
    assert read_events(tmp_path).scalars["metrics/uniformity"] == [(0, 1.0), (1, 1.25)]


@pytest.mark.xfail(
    strict=True, raises=AssertionError, reason="known limit: within one second, process ids order the files, not time"
)
def test_a_resume_in_the_same_second_by_a_lower_process_id_still_wins(tmp_path, monkeypatch):
    """The case the file names cannot order: a resumed process with a lower id writing within the
    same second. Strict: if ``read_events`` learns to order by the events' wall times, this passes
    and the marker must go."""
    # Fixed ids of one length: names compare as text, so ids of different lengths (9999 vs 10000)
    # would order the other way and make this test pass by accident.
    write(tmp_path, {0: 1.0, 1: 1.5}, FIRST_SECOND, monkeypatch, pid=52000)
    write(tmp_path, {1: 1.25}, FIRST_SECOND, monkeypatch, pid=41000)
    assert read_events(tmp_path).scalars["metrics/uniformity"] == [(0, 1.0), (1, 1.25)]
