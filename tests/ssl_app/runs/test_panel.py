"""What TensorBoard shows of a run, read through TensorBoard's own code (its data provider, the
text, hparams and custom-scalars plugins), on one tiny quickstart run through the CLI in this
process (~7 s), shared by every test of the module."""

from __future__ import annotations

import json
import re
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest
from lightning.pytorch.loggers import CSVLogger, TensorBoardLogger
from tensorboard.backend.event_processing.data_provider import MultiplexerDataProvider
from tensorboard.backend.event_processing.plugin_event_multiplexer import EventMultiplexer
from tensorboard.context import RequestContext
from tensorboard.plugins.base_plugin import TBContext
from tensorboard.plugins.custom_scalar.custom_scalars_plugin import CustomScalarsPlugin
from tensorboard.plugins.hparams import api_pb2, backend_context, get_experiment
from tensorboard.plugins.text.text_plugin import text_array_to_html

from ssl_app.metrics import registered_fields
from ssl_app.runs.panel import AXES, HEADLINE_METRICS, write_hparams
from ssl_app.runs.record import read_record
from ssl_app.runs.tags import describe
from tests.helpers import cli_in

CONFIGS = Path(__file__).resolve().parents[3] / "configs"
#: The quickstart, shrunk to seconds: 2 epochs of 2 steps, every step logged, one validation batch.
TINY = [
    "fit", "--config", str(CONFIGS / "quickstart.yaml"), "--trainer.max_epochs=2", "--trainer.limit_train_batches=2",
    "--trainer.limit_val_batches=1", "--trainer.log_every_n_steps=1", "--trainer.enable_progress_bar=false",
    "--data.init_args.train_size=32", "--data.init_args.val_size=32", "--data.init_args.test_size=16",
    "--data.init_args.batch_size=16",
]  # fmt: skip


class Panel:
    """The run folder and TensorBoard's view of it (one run, experiment id "")."""

    def __init__(self, run: Path) -> None:
        self.run = run
        multiplexer = EventMultiplexer()
        multiplexer.AddRunsFromDirectory(str(run))
        multiplexer.Reload()
        self.provider = MultiplexerDataProvider(multiplexer, str(run))
        self.context = TBContext(data_provider=self.provider, multiplexer=multiplexer, logdir=str(run))
        self.ctx = RequestContext()
        self.scalars = self.provider.list_scalars(self.ctx, experiment_id="", plugin_name="scalars")["."]

    def series(self, tag: str) -> list[float]:
        data = self.provider.read_scalars(
            self.ctx, experiment_id="", plugin_name="scalars", downsample=10_000, run_tag_filter=_only(tag)
        )
        return [point.value for point in data["."][tag]]


def _only(tag: str):
    from tensorboard.data.provider import RunTagFilter

    return RunTagFilter(runs=["."], tags=[tag])


@pytest.fixture(scope="module")
def panel(tmp_path_factory) -> Panel:
    workdir = tmp_path_factory.mktemp("panel")
    cli_in(workdir, TINY)
    (run,) = (workdir / "runs" / "quickstart").iterdir()
    return Panel(run)


class Cells(HTMLParser):
    """The text of every ``<td>``/``<th>`` cell, row by row."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[list[str]] = []
        self.cell: list[str] | None = None

    def handle_starttag(self, tag, attrs):
        if tag == "tr":
            self.rows.append([])
        elif tag in ("td", "th"):
            self.cell = []

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self.cell is not None:
            self.rows[-1].append("".join(self.cell))
            self.cell = None

    def handle_data(self, data):
        if self.cell is not None:
            self.cell.append(data)


@pytest.mark.slow  # the CLI through training (docs/testing.md)
def test_the_metric_table_renders_every_logged_formula_whole(panel):
    """The ``metrics/inputs`` text through the text plugin's Markdown rendering. Catches an unescaped
    ``|`` (‖z_a − z_b‖² split the cells), ``_``/``*`` read as emphasis, ``<`` eaten as HTML, and a
    row for a metric the run does not log (``top10_train_neg_sim`` without ``negatives_from: train``)."""
    data = panel.provider.read_tensors(
        panel.ctx, experiment_id="", plugin_name="text", downsample=10, run_tag_filter=_only("metrics/inputs/text_summary")
    )
    (datum,) = data["."]["metrics/inputs/text_summary"]  # torch's add_text names it so
    cells = Cells()
    cells.feed(text_array_to_html(datum.numpy, enable_markdown=True))
    rows = {row[0]: row[1:] for row in cells.rows if row}  # the plugin wraps the text in a table of its own
    logged = {f"metrics/{metric.tag(name, 10)}": metric.formula(name, 10) for metric, name in registered_fields()}
    logged = {tag: formula for tag, formula in logged.items() if tag in panel.scalars}
    assert "metrics/uniformity" in logged and "metrics/alignment" in logged
    for tag, formula in logged.items():
        assert len(rows[tag]) == 2 and rows[tag][0] == formula, (tag, rows.get(tag))
    assert "metrics/top10_train_neg_sim" not in rows and set(rows) - {"tag"} == {*logged, "metrics/nonfinite"}


@pytest.mark.slow  # the CLI through training (docs/testing.md)
def test_no_final_copies_and_no_series_repeating_one_value(panel):
    """Catches the one-dot ``final/*`` cards, a constant (``loss/chance``, ``loss/used_negatives``,
    a fixed τ) or a flag that stays 0 (``metrics/collapsed``) written at every step, and
    ``loss/used_neg_sim`` logged beside the identical ``loss/mean_neg_sim`` (InfoNCE keeps every
    negative); the values stay in the run record."""
    assert not [tag for tag in panel.scalars if tag.startswith("final/")]
    flat = [tag for tag in panel.scalars if len(values := panel.series(tag)) > 1 and len(set(values)) == 1]
    assert not flat, flat
    for tag in ("loss/chance", "loss/used_negatives", "loss/temperature", "metrics/collapsed", "metrics/nonfinite"):
        assert len(panel.series(tag)) == 1, tag  # written once: the value never changed
    assert panel.series("loss/temperature") == [pytest.approx(0.5)]
    assert "loss/used_neg_sim" not in panel.scalars and len(panel.series("loss/mean_neg_sim")) == 4
    results = read_record(panel.run).results
    assert results["loss/chance"] == pytest.approx(panel.series("loss/chance")[0]) and results["metrics/collapsed"] == 0


@pytest.mark.slow  # the CLI through training (docs/testing.md)
def test_every_scalar_carries_its_description(panel):
    """Through the data provider (the first event's metadata wins): catches tags written bare."""
    for tag in ("metrics/uniformity", "metrics/knn_acc", "loss/chance", "train/loss_step", "epoch"):
        assert panel.scalars[tag].description == describe(tag), tag
    assert not [tag for tag, series in panel.scalars.items() if not series.description]


def hparams_experiment(panel: Panel) -> api_pb2.Experiment:
    """The experiment the HParams tab shows, from the hparams plugin's own handler."""
    request = api_pb2.GetExperimentRequest(experiment_name="")
    handler = get_experiment.Handler(panel.ctx, backend_context.Context(panel.context), "", request)
    return handler.run()


@pytest.mark.slow  # the CLI through training (docs/testing.md)
def test_hparams_shows_the_comparison_axes_first_and_the_headline_metrics(panel):
    """Catches the axes sorted among 100 config keys (TensorBoard orders them by name), a metric
    column that is not a real tag (``final/*``, ``hp_metric``), and τ or the method missing."""
    experiment = hparams_experiment(panel)
    names = [info.name for info in experiment.hparam_infos]
    axes = [name for name, *_ in AXES]
    assert names[: len(axes)] == axes, names[:12]
    assert [info.display_name for info in experiment.hparam_infos[:3]] == ["method", "loss", "τ"]
    assert [info.name.tag for info in experiment.metric_infos] == [tag for tag, _ in HEADLINE_METRICS]
    assert names[len(axes) : len(axes) + 2] == ["9_chance", "9_negatives"]  # the run's constants, then the config
    assert "model.init_args.loss.init_args.temperature" in names


@pytest.mark.slow  # the CLI through training (docs/testing.md)
def test_the_custom_scalars_layout_names_tags_the_run_logs(panel):
    """Through the custom-scalars plugin: catches a chart whose tags (regular expressions) match
    nothing the run logs, e.g. after a tag is renamed."""
    layout = json.loads(CustomScalarsPlugin(panel.context).layout_impl(panel.ctx, ""))
    charts = [chart for category in layout["category"] for chart in category["chart"]]
    assert len(charts) == 4
    for chart in charts:
        for pattern in chart["multiline"]["tag"]:
            assert any(re.search(pattern, tag) for tag in panel.scalars), (chart["title"], pattern)


def test_only_a_tensorboard_logger_gets_an_hparams_config(tmp_path):
    """Catches a CSV logger handed TensorBoard's summaries."""
    assert not write_hparams(CSVLogger(str(tmp_path)), {"seed_everything": 0}, {})
    assert not list(tmp_path.rglob("events.*"))
    assert write_hparams(TensorBoardLogger(str(tmp_path)), {"seed_everything": 0}, {})


def test_the_tau_axis_names_a_policy_by_its_label_and_never_imports_a_strangers_class():
    """Catches a schedule shown by its class name only (two schedules would share one τ value in
    HParams) and a saved class path being imported to name it."""
    from ssl_app.runs.panel import axis_values
    from ssl_app.runs.spec import RunSpec

    def tau_of(temperature):
        loss = {"class_path": "ssl_app.losses.InfoNCE", "init_args": {"temperature": temperature}}
        return axis_values(RunSpec.from_config({"model": {"init_args": {"loss": loss}}}))["2_tau"]

    assert tau_of({"class_path": "ssl_app.temperature.Cosine", "init_args": {"low": 0.1, "high": 1.0}}) == "cosine:0.1-1"
    assert tau_of({"class_path": "ssl_app.temperature.Cosine", "init_args": {"period": 3}}) == "cosine:0.1-1:T=3"
    assert tau_of(0.5) == 0.5
    stranger = {"class_path": "no_such_module_anywhere.Policy", "init_args": {"rate": 0.25}}
    assert tau_of(stranger) == "Policy(rate=0.25)"
    assert "no_such_module_anywhere" not in sys.modules
