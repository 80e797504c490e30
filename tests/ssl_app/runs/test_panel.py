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
from ssl_app.runs.panel import AXES, CONTEXT_METRICS, FIT_METRICS, metric_columns, write_hparams
from ssl_app.runs.record import read_record
from ssl_app.runs.tags import HEADLINE_SERIES, describe
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
        self.scalars = self.provider.list_scalars(self.ctx, experiment_id="", plugin_name="scalars").get(".", {})

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
    a fixed τ) or a flag that stays 0 (``metrics/collapsed``) written at every step, a constant left
    as one dot (it is written again at each epoch's end, so it draws as a line), and
    ``loss/used_neg_sim`` logged beside the identical ``loss/mean_neg_sim`` (InfoNCE keeps every
    negative); the values stay in the run record."""
    assert not [tag for tag in panel.scalars if tag.startswith("final/")]
    held = ("loss/chance", "loss/used_negatives", "loss/temperature", "loss/temperature_epoch")
    held += (HEADLINE_SERIES["loss/temperature"],)  # τ's copy in the group Time Series opens first
    flat = [tag for tag in panel.scalars if len(values := panel.series(tag)) > 1 and len(set(values)) == 1]
    assert not [tag for tag in flat if tag not in held], flat
    for tag in held:  # the first step, then each epoch's end: a line across the run (issue 40), not a value per step
        assert len(panel.series(tag)) == (2 if tag == "loss/temperature_epoch" else 3), (tag, panel.series(tag))
    for tag in ("metrics/collapsed", "metrics/nonfinite"):
        assert len(panel.series(tag)) == 1, tag  # written once: the value never changed
    assert panel.series("loss/temperature") == [pytest.approx(0.5)] * 3
    assert "loss/used_neg_sim" not in panel.scalars and len(panel.series("loss/mean_neg_sim")) == 4
    results = read_record(panel.run).results
    assert results["loss/chance"] == pytest.approx(panel.series("loss/chance")[0]) and results["metrics/collapsed"] == 0


@pytest.mark.slow  # the CLI through training (docs/testing.md)
def test_every_scalar_carries_its_description(panel):
    """Through the data provider (the first event's metadata wins): catches tags written bare."""
    for tag in ("metrics/uniformity", "metrics/knn_acc", "loss/chance", "train/loss_step", "epoch"):
        assert panel.scalars[tag].description == describe(tag), tag
    assert not [tag for tag, series in panel.scalars.items() if not series.description]


def compare_tag_names(a: str, b: str) -> int:
    """TensorBoard's Time Series order of two tags (webapp/metrics/utils.ts, ``compareTagNames``): character by
    character, a run of digits compared as a number, ``/`` and digits before any other character."""

    def number_end(text: str, i: int) -> int:
        while i < len(text) and (text[i].isdigit() or text[i] in ".eE+-"):  # close enough for tag names
            i += 1
        return i

    i = j = 0
    while True:
        if i == len(a):
            return 0 if j == len(b) else -1
        if j == len(b):
            return 1
        if a[i].isdigit() and b[j].isdigit():
            i_end, j_end = number_end(a, i + 1), number_end(b, j + 1)
            x, y = float(a[i:i_end].rstrip(".eE+-")), float(b[j:j_end].rstrip(".eE+-"))
            if x != y:
                return -1 if x < y else 1
            i, j = i_end, j_end
            continue
        a_break, b_break = a[i] == "/" or a[i].isdigit(), b[j] == "/" or b[j].isdigit()
        if a_break and not b_break:
            return -1
        if b_break and not a_break:
            return 1
        if not a_break and a[i] != b[j]:
            return -1 if a[i] < b[j] else 1
        i, j = i + 1, j + 1


def time_series_groups(provider, ctx) -> list[tuple[str, list[str]]]:
    """The card groups TensorBoard's Time Series shows, in its order: every scalar, histogram and image tag of every
    run (from the data provider, as the metrics plugin lists them), sorted by ``compare_tag_names``, grouped by the
    part before the first ``/`` in order of first appearance (utils.ts, ``groupCardIdWithMetdata``). The dashboard
    opens the first two groups (metrics_reducers.ts: ``cardGroups.slice(0, 2)``)."""
    import functools

    tags: set[tuple[str, str]] = set()
    for plugin, listing in (("scalars", provider.list_scalars), ("histograms", provider.list_tensors),
                            ("images", provider.list_blob_sequences)):  # fmt: skip
        for run_tags in listing(ctx, experiment_id="", plugin_name=plugin).values():
            tags.update((tag, plugin) for tag in run_tags)
    groups: dict[str, list[str]] = {}
    for tag, plugin in sorted(tags, key=functools.cmp_to_key(lambda x, y: compare_tag_names(x[0], y[0]))):
        groups.setdefault(tag.split("/", 1)[0], []).append(f"{plugin}:{tag}")
    return list(groups.items())


@pytest.mark.slow  # the CLI through training (docs/testing.md)
def test_time_series_opens_on_the_headline_scalars(panel):
    """Through the data provider and TensorBoard's own ordering of Time Series groups: catches the page opening on
    Lightning's ``epoch`` card and the per-epoch spectrum images while kNN, uniformity, τ and the loss sit in
    collapsed groups below (main before issue 40: the open groups were ``epoch`` and ``figures``)."""
    groups = time_series_groups(panel.provider, panel.ctx)
    first, cards = groups[0]
    sources = ("metrics/knn_acc", "metrics/uniformity", "metrics/tolerance", "loss/temperature", "train/loss_epoch")
    headline = [f"scalars:{HEADLINE_SERIES[tag]}" for tag in sources]
    assert set(headline) <= set(cards) and all(card.startswith("scalars:") for card in cards), groups[:2]
    opened = [card for _, cards in groups[:2] for card in cards]
    assert not [card for card in opened if card.startswith(("images:", "histograms:"))], groups[:2]
    assert [name for name, _ in groups].index("epoch") > 0
    for tag, copy in HEADLINE_SERIES.items():  # the copy is the same series as its source
        if tag in panel.scalars:
            assert panel.series(copy) == panel.series(tag), tag


def hparams_experiment(panel: Panel) -> api_pb2.Experiment:
    """The experiment the HParams tab shows, from the hparams plugin's own handler."""
    request = api_pb2.GetExperimentRequest(experiment_name="")
    handler = get_experiment.Handler(panel.ctx, backend_context.Context(panel.context), "", request)
    return handler.run()


@pytest.mark.slow  # the CLI through training (docs/testing.md)
def test_hparams_shows_the_comparison_axes_and_the_headline_metrics(panel):
    """Catches the axes sorted among 100 config keys (TensorBoard orders them by name), a metric
    column that is not a real tag (``final/*``, ``hp_metric``), τ or the method missing, and the
    full config offered as columns (it stays in the run folder)."""
    experiment = hparams_experiment(panel)
    names = [info.name for info in experiment.hparam_infos]
    axes = [name for name, *_ in AXES]
    assert names == [*axes, "9_chance", "9_negatives"], names  # a lone fit: no axis differs, so by name
    assert [info.display_name for info in experiment.hparam_infos[:3]] == ["method", "loss", "τ"]
    assert [info.name.tag for info in experiment.metric_infos][:5] == [tag for tag, _ in FIT_METRICS]


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


@pytest.mark.parametrize("probed", [False, True])
def test_the_geometry_metrics_are_context_columns_after_the_headline_ones(probed):
    """Catches −W₂, LiDAR or RankMe pushing a headline column out of the five the dashboard shows and draws, and a
    context column offered for a fit that did not log it (LiDAR is off by default)."""
    results = {tag: 0.5 for tag, _ in FIT_METRICS} | {"metrics/wasserstein_uniformity": -0.3}
    tags = [tag for tag, _, _ in metric_columns(results, probed)]
    headline = [tag for tag, _ in FIT_METRICS]
    assert tags[:5] == (headline[:1] + ["linear/top1"] + headline[1:4] if probed else headline)
    assert tags[-1] == "metrics/wasserstein_uniformity" and "metrics/lidar" not in tags
    everything = results | {tag: 1.0 for tag, _ in CONTEXT_METRICS}
    assert [tag for tag, _, _ in metric_columns(everything, probed)][-3:] == [tag for tag, _ in CONTEXT_METRICS]


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
    assert tau_of(0.5) == "0.5"  # as configured: the plugin prints a number as 0.50000
    stranger = {"class_path": "no_such_module_anywhere.Policy", "init_args": {"rate": 0.25}}
    assert tau_of(stranger) == "Policy(rate=0.25)"
    assert "no_such_module_anywhere" not in sys.modules


# --- HParams as the study's table (issue 40 item 1) -----------------------------------------------------------------
def _study_config(tau: float, seed: int) -> dict:
    loss = {"class_path": "ssl_app.losses.InfoNCE", "init_args": {"temperature": tau}}
    return {
        "seed_everything": seed,
        "model": {"class_path": "ssl_app.methods.SimCLR", "init_args": {"loss": loss, "backbone": "resnet18"}},
        "data": {"class_path": "datamodules.SyntheticShapesDataModule", "init_args": {"batch_size": 128}},
        "trainer": {"max_epochs": 3},
    }


def _fit(root: Path, sweep: str, tau: float, seed: int, knn: float, probed: bool = True) -> Path:
    """A sweep's fit folder as the CLI leaves it: its scalars and its row, written by the real writers."""
    from ssl_app.runs.layout import SweepPoint

    logger = TensorBoardLogger(str(root / sweep), name=f"temperature={tau}", version=f"seed{seed}", default_hp_metric=False)
    results = {"metrics/knn_acc": knn, "metrics/uniformity": 2.5, "metrics/tolerance": 0.4, "metrics/effective_rank": 9.0,
               "train/loss_epoch": 5.0, "loss/chance": 5.54}  # fmt: skip
    logger.log_metrics(results, step=29)
    grid = {"model.init_args.loss.init_args.temperature": str(tau)}
    point = SweepPoint(sweep=sweep, point=f"temperature={tau}", grid=grid, seed=seed, probed=probed)
    assert write_hparams(logger, _study_config(tau, seed), results, point)
    return Path(logger.log_dir)


def _probe(run: Path, top1: float, step: int = 29) -> None:
    """A linear probe of ``run``: its own folder (``evaluations/linear_<n>``, its curves) and its values on the row."""
    from ssl_app.runs.layout import next_evaluation_name
    from ssl_app.runs.panel import write_evaluation

    logger = TensorBoardLogger(str(run), name="evaluations", version=next_evaluation_name(run, "linear"), default_hp_metric=False)
    values = {"linear/top1": top1, "linear/many": top1 + 0.1, "linear/medium": top1, "linear/few": top1 - 0.1}
    for epoch in range(3):
        logger.log_metrics({"linear/top1": top1 * (epoch + 1) / 3}, step=epoch)
    logger.finalize("success")
    assert write_evaluation(run, "linear", values, step)


def study_view(root: Path) -> tuple[api_pb2.Experiment, list[api_pb2.SessionGroup]]:
    """The experiment and the session groups (rows) the hparams plugin serves for ``root``, by its own handlers."""
    from tensorboard.plugins.hparams import list_session_groups

    panel = Panel(root)
    context = backend_context.Context(panel.context)
    experiment = get_experiment.Handler(panel.ctx, context, "", api_pb2.GetExperimentRequest(experiment_name="")).run()
    request = api_pb2.ListSessionGroupsRequest(
        experiment_name="", allowed_statuses=list(api_pb2.Status.values()), start_index=0, slice_size=1000
    )
    groups = list(list_session_groups.Handler(panel.ctx, context, "", request).run().session_groups)
    return experiment, groups


def drawn(experiment: api_pb2.Experiment, groups: list[api_pb2.SessionGroup]) -> list[str]:
    """The rows parallel coordinates and the scatter plots draw on opening the tab: the hparams dashboard shows the
    first 5 hyper-parameters (in the order served: the differing ones first) and the first 5 metrics, and draws a
    row only when it has a value in every column shown (tf-hparams-parallel-coords-plot: _computeValidSessionGroups)."""
    shown_hparams = [info.name for info in experiment.hparam_infos[:5]]
    shown_metrics = [info.name for info in experiment.metric_infos[:5]]
    rows = []
    for group in groups:
        values = {(m.name.group, m.name.tag) for m in group.metric_values}
        if all(name in group.hparams for name in shown_hparams) and all((m.group, m.tag) in values for m in shown_metrics):
            rows.append(group.name)
    return rows


def test_hparams_is_the_studys_table_one_row_per_fit_with_its_probe(tmp_path):
    """A sweep of 3 τ × 2 seeds, each probed (one twice): catches a probe or an evaluation as a row of its own, rows
    named by hashes, a probe's top-1 missing from its fit's row (parallel coordinates then draws nothing), the full
    config offered as columns, numbers shown as the plugin prints floats (0.20000), and an older probe's value shown."""
    runs = {}
    for i, tau in enumerate((0.5, 0.2, 0.07)):
        for seed in (0, 1):
            runs[tau, seed] = _fit(tmp_path, "tau", tau, seed, knn=0.4 + i / 10 + seed / 100)
            _probe(runs[tau, seed], top1=0.3 + i / 10 + seed / 100)
    _probe(runs[0.2, 1], top1=0.77)  # the same probe again: the newest is the row's value
    experiment, groups = study_view(tmp_path)
    names = sorted(group.name for group in groups)
    assert names == sorted(f"τ={tau} · seed {seed} · tau" for tau in (0.5, 0.2, 0.07) for seed in (0, 1)), names
    assert all(len(group.sessions) == 1 for group in groups)  # nothing averaged into a row
    assert [info.display_name for info in experiment.hparam_infos[:2]] == ["τ", "seed"]  # the study's axes first
    assert len(experiment.hparam_infos) <= 12, [info.name for info in experiment.hparam_infos]
    assert {info.type for info in experiment.hparam_infos} == {api_pb2.DATA_TYPE_STRING}
    metrics = [(info.name.group, info.name.tag) for info in experiment.metric_infos]
    assert metrics[:2] == [("", "metrics/knn_acc"), ("evaluations/linear", "linear/top1")], metrics
    row = {group.name: group for group in groups}["τ=0.2 · seed 1 · tau"]
    assert row.hparams["2_tau"].string_value == "0.2" and row.hparams["3_batch"].string_value == "128"
    assert row.hparams["8_seed"].string_value == "1" and row.hparams["9_chance"].string_value == "5.54"
    values = {(m.name.group, m.name.tag): m.value for m in row.metric_values}
    assert values[("evaluations/linear", "linear/top1")] == pytest.approx(0.77)
    assert values[("", "metrics/knn_acc")] == pytest.approx(0.51)
    assert values[("evaluations/linear", "linear/few")] == pytest.approx(0.77 - 0.1)
    assert sorted(drawn(experiment, groups)) == names


def test_twenty_fits_two_sweeps_and_a_lone_fit_each_keep_their_own_row(tmp_path):
    """Catches two sweeps' fits with the same τ and seed merged (averaged) into one row, a fit of a sweep without
    probes left undrawn for want of a probe's column, and a lone fit (no sweep) named by nothing."""
    for i in range(10):
        _fit(tmp_path, "first", 0.05 * (i + 1), 0, knn=0.5, probed=False)
        _fit(tmp_path, "second", 0.05 * (i + 1), 0, knn=0.6, probed=False)
    logger = TensorBoardLogger(str(tmp_path / "runs"), name="quickstart", default_hp_metric=False)
    logger.log_metrics({"metrics/knn_acc": 0.3}, step=1)
    assert write_hparams(logger, _study_config(0.5, 0), {"metrics/knn_acc": 0.3})
    experiment, groups = study_view(tmp_path)
    assert len(groups) == 21 and all(len(group.sessions) == 1 for group in groups)
    assert "InfoNCE τ=0.5 · seed 0 · quickstart/version_0" in {group.name for group in groups}
    assert {group.name for group in groups if group.name.endswith("· first")} >= {"τ=0.05 · seed 0 · first"}
    assert ("evaluations/linear", "linear/top1") not in [(m.name.group, m.name.tag) for m in experiment.metric_infos[:5]]
    assert len(drawn(experiment, [group for group in groups if "quickstart" not in group.name])) == 20


def test_an_evaluation_writes_no_row_of_its_own(tmp_path):
    """Catches validate/test/a probe writing HParams summaries into its own folder (TensorBoard made it a row, or
    averaged it with the fit into a fake one) and an evaluation's values missing from its fit's row."""
    from ssl_app.runs.panel import write_evaluation

    run = _fit(tmp_path, "tau", 0.2, 0, knn=0.5)
    assert write_evaluation(run, "test", {"metrics/knn_acc": 0.488, "val/loss": 1.0}, step=29)
    assert write_evaluation(run, "validate", {"metrics/knn_acc": 0.496}, step=29)
    assert not write_evaluation(run, "embed", {"metrics/knn_acc": 0.1})
    assert not write_evaluation(run, "linear", {"val/loss": 1.0})
    _, groups = study_view(tmp_path)
    assert [group.name for group in groups] == ["τ=0.2 · seed 0 · tau"]
    values = {(m.name.group, m.name.tag): m.value for m in groups[0].metric_values}
    assert values[("evaluations/test", "metrics/knn_acc")] == pytest.approx(0.488)
    assert values[("evaluations/validate", "metrics/knn_acc")] == pytest.approx(0.496)
    assert values[("", "metrics/knn_acc")] == pytest.approx(0.5)


@pytest.mark.slow  # the CLI through training and a probe (docs/testing.md)
def test_a_fits_probe_and_validation_land_on_its_row_through_the_cli(panel):
    """The quickstart fit, then ``validate`` and a linear probe of its last checkpoint, as a user runs them. Catches
    the probe and the validation as rows of their own (main before issue 40: three rows, the probe's without loss, τ
    or seed, so parallel coordinates drew nothing with kNN and linear top-1 both shown)."""
    last = panel.run / "checkpoints" / "last.ckpt"
    workdir = panel.run.parents[2]
    cli_in(workdir, ["validate", "--config", str(CONFIGS / "quickstart.yaml"), f"--ckpt_path={last}", *TINY[3:]])
    probe = ["fit", "--config", str(CONFIGS / "linear.yaml"), f"--model.init_args.checkpoint={last}",
             "--data.init_args.data.init_args.train_size=40", "--data.init_args.data.init_args.test_size=20",
             "--trainer.max_epochs=1", "--trainer.check_val_every_n_epoch=1", "--trainer.enable_progress_bar=false"]  # fmt: skip
    cli_in(workdir, probe)
    _, groups = study_view(panel.run.parents[1])  # TensorBoard on runs/: the fit's session is quickstart/version_0
    assert len(groups) == 1 and len(groups[0].sessions) == 1, [group.name for group in groups]
    assert groups[0].name.endswith(" · seed 0 · quickstart/version_0"), groups[0].name
    values = {(m.name.group, m.name.tag) for m in groups[0].metric_values}
    assert {("", "metrics/knn_acc"), ("evaluations/linear", "linear/top1"), ("evaluations/validate", "metrics/knn_acc")} <= values


@pytest.mark.slow  # two fits and their probes through the CLI (docs/testing.md)
def test_a_sweeps_run_list_holds_each_fit_and_its_probes_values_and_one_formula_table(tmp_path):
    """Two fits of a sweep (``sweep.json`` as the sweep writes it before the fit), each probed as the sweep probes
    it, then TensorBoard on the sweep's folder. Catches the probe's training curves as a run of their own beside its
    values (main before issue 40: 3 runs per fit), the probe's top-1 missing from its fit's row or from the report,
    and the formula table written by every fit of the study (identical in each)."""
    from ssl_app.report.runs import read_run
    from ssl_app.runs.layout import SweepPoint, write_sweep_point
    from ssl_app.runs.spec import TAU_KEY

    sweep = tmp_path / "tau"
    for seed in (0, 1):
        folder = sweep / "temperature=0.5" / f"seed{seed}"
        folder.mkdir(parents=True)
        write_sweep_point(folder, SweepPoint("tau", "temperature=0.5", {TAU_KEY: "0.5"}, seed, probed=True))
        where = [f"--trainer.logger.init_args.save_dir={sweep}", "--trainer.logger.init_args.name=temperature=0.5",
                 f"--trainer.logger.init_args.version=seed{seed}", f"--seed_everything={seed}"]  # fmt: skip
        cli_in(tmp_path, [*TINY, *where])
        last = folder / "checkpoints" / "last.ckpt"
        probe = ["fit", "--config", str(CONFIGS / "linear.yaml"), f"--model.init_args.checkpoint={last}",
                 "--data.init_args.data.init_args.train_size=40", "--data.init_args.data.init_args.test_size=20",
                 "--trainer.max_epochs=1", "--trainer.check_val_every_n_epoch=1",
                 "--trainer.enable_progress_bar=false"]  # fmt: skip
        cli_in(tmp_path, probe)
        assert (folder / "evaluations" / "linear_0" / "metrics.csv").is_file()  # the probe's curves, beside its record
    view = Panel(sweep)
    runs = sorted(run.run_name for run in view.provider.list_runs(view.ctx, experiment_id=""))
    fits = [f"temperature=0.5/seed{seed}" for seed in (0, 1)]
    assert runs == sorted([*fits, *(f"{fit}/evaluations/linear" for fit in fits)]), runs
    texts = view.provider.list_tensors(view.ctx, experiment_id="", plugin_name="text")
    assert [run for run, tags in texts.items() if "metrics/inputs/text_summary" in tags] in ([fits[0]], [fits[1]]), texts
    _, groups = study_view(sweep)
    assert sorted(group.name for group in groups) == ["τ=0.5 · seed 0 · tau", "τ=0.5 · seed 1 · tau"]
    for group in groups:
        assert ("evaluations/linear", "linear/top1") in {(m.name.group, m.name.tag) for m in group.metric_values}
    report = read_run(sweep / fits[0], fits[0])
    assert report.linear is not None and report.linear.last("linear/top1") is not None
    assert report.linear.last("linear/top5") is not None
