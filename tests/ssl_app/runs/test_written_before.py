"""A run folder written by main before issue 39 (``tests/fixtures/main_run``) still loads, reports and resumes.

The folder's files are main's own (its README says how they were made); ``expected.json`` is what main's code said
of it. The run spec, the canonical τ labels and the moved plumbing must read it as main did: the same identity and
config hash (what a resume and a re-launched sweep compare), a report row for it under the new label, with main's
label still taken by ``--baseline``, and a run started from main's ``config.yaml`` that resumes.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from ssl_app.errors import ConfigError
from ssl_app.report.cli import make_report
from ssl_app.runs.identity import config_hash, identity
from ssl_app.runs.record import read_record
from ssl_app.runs.spec import RunSpec
from tests.helpers import cli_in

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "main_run"


@pytest.fixture
def main_run(tmp_path) -> Path:
    """A copy of the folder (the report writes nothing into it, but a test must not be able to change the fixture)."""
    return Path(shutil.copytree(FIXTURE, tmp_path / "main_run"))


def expected() -> dict:
    return json.loads((FIXTURE / "expected.json").read_text(encoding="utf-8"))


def test_its_record_spec_identity_and_hash_read_as_main_read_them(main_run):
    """Catches the spec reading main's config by other keys than main did: a resume would refuse the run (another
    identity) or a sweep re-launch would run it again (another config hash)."""
    folder = main_run / "version_0"
    config = yaml.safe_load((folder / "config.yaml").read_text(encoding="utf-8"))
    record = read_record(folder)
    assert record.status == "done" and record.config == config
    assert identity(config) == expected()["identity"]
    assert config_hash(config) == expected()["config_hash"] == record.config_hash
    spec = RunSpec.from_config(config)
    assert (spec.method_name, spec.backbone, spec.batch_size, spec.epochs, spec.seed) == ("SimCLR", "small_cnn", 16, 2, 0)
    assert spec.loss.label() == "InfoNCE τ=cosine:0.1-1:T=3"
    assert spec.callback("EmbeddingMetrics") is not None and spec.callback("KNNMonitor") is not None


def test_the_report_gives_it_a_row_under_the_new_label_and_takes_main_s_label_as_baseline(main_run, tmp_path):
    """Catches a folder of main's that the report skips or cannot read (no row), and a ``--baseline`` copied from a
    report main printed (``InfoNCE τ=cosine:0.1-1:T3``) refused now that the label is the grid's spelling."""
    [old_label] = expected()["report_labels"]
    report = make_report(main_run, tmp_path / "report", baseline=old_label)  # an unknown label would stop it here
    rows = [line for line in report.markdown.splitlines() if line.startswith("| InfoNCE")]  # one per table
    assert rows[0].startswith("| InfoNCE τ=cosine:0.1-1:T=3 | 1 | 9.38 | 1.483 | 0.305 |")  # kNN, uniformity, tolerance
    assert all(row.startswith("| InfoNCE τ=cosine:0.1-1:T=3 | 1 |") for row in rows) and old_label != "InfoNCE τ=cosine:0.1-1:T=3"
    with pytest.raises(ConfigError, match="is no configuration of the table"):
        make_report(main_run, tmp_path / "other", baseline="InfoNCE τ=cosine:0.1-1:T4")


@pytest.mark.slow  # two short fits through the CLI (docs/testing.md)
def test_a_run_from_main_s_config_trains_and_resumes(tmp_path):
    """Catches a config main wrote that no longer parses (a renamed or moved option), and a run started from it that
    cannot be resumed by this version (its saved config read as another experiment)."""
    config = str(FIXTURE / "version_0" / "config.yaml")
    cli_in(tmp_path, ["fit", "--config", config, "--trainer.max_epochs=1"])
    cli_in(tmp_path, ["fit", "--config", config, "--trainer.max_epochs=2", "--ckpt_path=last"])
    record = read_record(tmp_path / "runs" / "main_run" / "version_0")
    assert record.status == "done" and record.results and not list((tmp_path / "runs" / "main_run").glob("version_1"))
