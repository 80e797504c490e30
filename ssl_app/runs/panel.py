"""TensorBoard as the run's instrument panel: scalar descriptions, the Custom Scalars layout, the HParams config.

- **Descriptions.** TensorBoard keeps, per tag and run, the metadata of the tag's first event
  (``summary_description``, shown beside the chart). Lightning's ``TensorBoardLogger`` writes bare
  scalars, so :func:`describe_scalars` makes the logger write each tag's first value with its
  one-line description (``ssl_app.runs.tags``); later values are Lightning's own.
- **Custom Scalars.** :func:`write_layout` writes, once per run, charts that put related series on
  one plot (``LAYOUT``): positive against top-k negative similarity, uniformity and tolerance,
  the loss and its chance value, τ. Their tags are regular expressions, so a run that logs only
  some of them draws those.
- **HParams is the study's table.** :func:`write_hparams` writes, at the end of a fit, the plugin's
  experiment config (``hparams_config``) and the fit's row (``session_start_info``): one row per fit,
  named by what tells it from the other fits of its study (:func:`fit_row`: ``τ=0.2 · seed 0 · tau``
  in a sweep, ``InfoNCE τ=0.5 · seed 0 · quickstart/version_0`` alone); its columns are the
  comparison axes (``AXES``; a sweep's own axes marked as differing, which TensorBoard shows first),
  the run's constant diagnostics (``loss/chance``, ``loss/used_negatives``: their last value) and
  nothing else (the full config stays in the run folder). Every value is text as configured
  (``0.2``, ``128``: the plugin prints any number with five digits, ``0.20000``). The metric
  columns (:func:`metric_columns`) are real tags whose last value the plugin reads from their own
  series: the fit's own, then its evaluations'. An evaluation (validate, test, a linear probe)
  writes no row: :func:`write_evaluation` writes its final values into ``<run>/evaluations/<kind>/``,
  a folder of the fit's session, so they sit on the fit's row (the newest of each kind). The
  dashboard shows the first five hyper-parameters and metrics and draws a row in parallel
  coordinates only when it has all of them, so the probe's top-1 comes second when the fit's sweep
  probes it (``SweepPoint.probed``), else after the fit's own columns. Lightning's own
  ``log_hyperparams`` writes no summary (``without_placeholder``). With several studies under one
  ``--logdir`` the plugin takes the config of one of them (every fit writes the same columns; the
  axes marked first are that study's).
"""

from __future__ import annotations

import functools
import numbers
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from ssl_app.runs.headline import RunOptions
from ssl_app.runs.layout import SweepPoint
from ssl_app.runs.spec import (
    BACKBONE_KEY,
    BATCH_KEY,
    DATA_CLASS_KEY,
    DATA_KEY,
    EPOCHS_KEY,
    LOSS_CLASS_KEY,
    LOSS_KEY,
    LR_KEY,
    METHOD_KEY,
    OLD_LR_KEY,
    SEED_KEY,
    TAU_KEY,
    RunSpec,
)
from ssl_app.runs.tags import HEADLINE_SERIES, describe
from ssl_app.temperature.spelling import exact

#: The fit's own metric columns (its final values; kNN and the probe are fractions, not %): (tag, display name).
FIT_METRICS = (
    ("metrics/knn_acc", "kNN"),
    ("metrics/uniformity", "uniformity"),
    ("metrics/tolerance", "tolerance"),
    ("metrics/effective_rank", "eff. rank"),
    ("train/loss_epoch", "loss"),
)
#: The geometry beyond uniformity (−W₂, LiDAR, RankMe of the backbone): context columns after every other, so the
#: first five (what the dashboard shows and draws) stay the fit's headline ones; each only where the fit logged it.
CONTEXT_METRICS = (
    ("metrics/wasserstein_uniformity", "−W₂"),
    ("metrics/lidar", "LiDAR"),
    ("metrics/effective_rank_backbone", "RankMe (backbone)"),
)
#: What an evaluation of the fit (validate, test, a linear probe) puts on the fit's row: its final values of these
#: tags, written into ``<run>/evaluations/<kind>/`` (``EVALUATION_GROUP``), a folder of the fit's session.
EVALUATION_METRICS = {
    "linear": (("linear/top1", "linear top-1"), ("linear/many", "linear many"), ("linear/medium", "linear medium"),
               ("linear/few", "linear few")),
    "validate": (("metrics/knn_acc", "validate kNN"), ("metrics/uniformity", "validate uniformity")),
    "test": (("metrics/knn_acc", "test kNN"), ("metrics/uniformity", "test uniformity")),
}  # fmt: skip
#: Final values an evaluation also writes there, beside its columns: what the report reads of a probe filed in a run
#: (whose own curves are not TensorBoard events: ``ssl_app.cli.plan``).
EVALUATION_EXTRAS = {"linear": ("linear/top5",)}
#: The folder (under the fit's run folder) whose events hold the newest evaluation of each kind, for HParams.
EVALUATION_GROUP = "evaluations/{kind}"
#: Diagnostics that stay constant in most runs: HParams shows their last value as context (tag, HParams name, display).
CONSTANT_DIAGNOSTICS = (("loss/chance", "9_chance", "chance"), ("loss/used_negatives", "9_negatives", "negatives"))
#: A column a fit has no value for (a method without a loss has no τ): written, so the fit is still drawn.
MISSING = "—"


def with_headline(metrics: Mapping[str, Any]) -> dict[str, Any]:
    """``metrics`` and, for each headline tag in it (``HEADLINE_SERIES``), its copy under ``HEADLINE_GROUP``."""
    return {**metrics, **{HEADLINE_SERIES[tag]: value for tag, value in metrics.items() if tag in HEADLINE_SERIES}}


def _tau(spec: RunSpec) -> Any:
    """τ: the policy's label (``0.2``, ``cosine:0.1-1:T=3``, ``learnable:0.07``)."""
    tau = spec.loss.temperature if spec.loss is not None else None
    return None if tau is None else tau.label()


#: The columns every fit has: HParams name (TensorBoard sorts the study's axes first, then by name), display name,
#: what of the run's spec it shows, and the config keys a sweep's grid sets it by.
AXES: tuple[tuple[str, str, Callable[[RunSpec], Any], tuple[str, ...]], ...] = (
    ("0_method", "method", lambda spec: spec.method_name, (METHOD_KEY,)),
    ("1_loss", "loss", lambda spec: None if spec.loss is None else spec.loss.name, (LOSS_KEY, LOSS_CLASS_KEY)),
    ("2_tau", "τ", _tau, (TAU_KEY,)),
    ("3_batch", "batch", lambda spec: spec.batch_size, (BATCH_KEY,)),
    ("4_backbone", "backbone", lambda spec: spec.backbone, (BACKBONE_KEY,)),
    ("5_data", "data", lambda spec: spec.data_name, (DATA_KEY, DATA_CLASS_KEY)),
    ("6_lr", "lr", lambda spec: spec.lr, (LR_KEY, OLD_LR_KEY)),
    ("7_epochs", "epochs", lambda spec: spec.epochs, (EPOCHS_KEY,)),
    ("8_seed", "seed", lambda spec: spec.seed, (SEED_KEY,)),
)
SEED_AXIS = "8_seed"


def shown(value: Any) -> str:
    """A column's value as configured: ``0.2``, ``128``, ``1e-05`` (never ``0.20000``: the hparams plugin prints
    every number with 5 significant digits, so every value is written as text), ``MISSING`` for None."""
    if value is None:
        return MISSING
    if isinstance(value, bool):
        return str(value).lower()
    return exact(value) if isinstance(value, numbers.Real) else str(value)


def axis_values(spec: RunSpec) -> dict[str, str]:
    """Every comparison axis (``AXES``) of the run's spec, by HParams name, as text (``shown``)."""
    return {name: shown(read(spec)) for name, _, read, _ in AXES}


@dataclass(frozen=True)
class Row:
    """A fit's HParams row: its name (the session group), its values, and which columns are the study's axes."""

    name: str
    values: dict[str, str]
    displays: dict[str, str]
    study_axes: tuple[str, ...]
    probed: bool


def fit_row(spec: RunSpec, point: Optional[SweepPoint], where: str) -> Row:
    """The row of a fit: in a sweep, named by the grid's values and the seed, then the sweep (``τ=0.2 · seed 0 ·
    tau``: what tells it from the sweep's other fits first, the sweep's name keeping two sweeps' rows apart); a
    fit of no sweep by its loss's label, its seed and ``where`` (its folder, ``quickstart/version_0``)."""
    values = axis_values(spec)
    displays = {name: display for name, display, _, _ in AXES}
    if point is None:
        loss = spec.loss.label() if spec.loss is not None else spec.method_name or "run"
        return Row(f"{loss} · seed {values[SEED_AXIS]} · {where}", values, displays, (), False)
    touched: list[str] = []
    parts: list[str] = []
    for key, text in point.grid.items():
        axis = next((name for name, _, _, keys in AXES if key in keys), None)
        if axis is None:  # a grid key no axis shows: a column of its own, named by the key's last part
            last = key.rsplit(".", 1)[-1]
            axis = f"2_{last}"
            values[axis], displays[axis] = text, last
        if axis not in touched and axis != SEED_AXIS:
            touched.append(axis)
            parts.append(f"{displays[axis]}={values[axis]}")
    values[SEED_AXIS] = shown(point.seed)
    name = " · ".join([*parts, f"seed {point.seed}", point.sweep])
    return Row(name, values, displays, (*touched, SEED_AXIS), point.probed)


def metric_columns(results: Mapping[str, float], probed: bool) -> list[tuple[str, str, str]]:
    """HParams' metric columns, ``(tag, group, display name)``: the fit's own that it logged, the probe's top-1
    second when the fit's sweep probes it (TensorBoard shows the first five and draws a fit in parallel coordinates
    only when it has every column shown), then the evaluations' columns, then the context (``CONTEXT_METRICS``)
    that the fit logged."""
    own = [(tag, "", display) for tag, display in FIT_METRICS if tag in results]
    evaluations = [
        (tag, EVALUATION_GROUP.format(kind=kind), display)
        for kind, columns in EVALUATION_METRICS.items()
        for tag, display in columns
    ]
    if probed:
        own.insert(min(1, len(own)), evaluations.pop(0))
    context = [(tag, "", display) for tag, display in CONTEXT_METRICS if tag in results]
    return own + evaluations + context


def write_hparams(
    logger: Any, config: Mapping[str, Any], results: Mapping[str, float], point: Optional[SweepPoint] = None
) -> bool:
    """Write the fit's HParams row (``fit_row``) and the experiment's columns with ``logger`` (a TensorBoardLogger;
    anything else: nothing written, ``False``). ``results``: the fit's final scalars, from which its constant
    diagnostics (``CONSTANT_DIAGNOSTICS``) become context columns; ``point``: its ``sweep.json``. Closes the writer
    (``finalize``), which Lightning had closed already and this opened again."""
    from lightning.pytorch.loggers import TensorBoardLogger
    from tensorboard.plugins.hparams import api_pb2, metadata, plugin_data_pb2

    if not isinstance(logger, TensorBoardLogger):
        return False
    version = logger.version if isinstance(logger.version, str) else f"version_{logger.version}"
    row = fit_row(RunSpec.from_config(config), point, f"{logger.name}/{version}" if logger.name else version)
    values, displays = dict(row.values), dict(row.displays)
    descriptions: dict[str, str] = {}
    for tag, name, display in CONSTANT_DIAGNOSTICS:
        if tag in results:
            values[name], displays[name], descriptions[name] = shown(results[tag]), display, describe(tag)
    infos = [
        api_pb2.HParamInfo(
            name=name,
            display_name=displays[name],
            description=descriptions.get(name, ""),
            type=api_pb2.DATA_TYPE_STRING,
            differs=name in row.study_axes,
        )
        for name in values
    ]
    metrics = [
        api_pb2.MetricInfo(name=api_pb2.MetricName(tag=tag, group=group), display_name=display, description=describe(tag) or "")
        for tag, group, display in metric_columns(results, row.probed)
    ]
    writer = logger.experiment._get_file_writer()  # as Lightning's own log_hyperparams writes its summaries
    now = time.time()
    experiment = api_pb2.Experiment(hparam_infos=infos, metric_infos=metrics, time_created_secs=now)
    start = plugin_data_pb2.SessionStartInfo(group_name=row.name, start_time_secs=now)
    for name, value in values.items():
        start.hparams[name].string_value = value
    end = plugin_data_pb2.SessionEndInfo(status=api_pb2.STATUS_SUCCESS, end_time_secs=now)
    writer.add_summary(_hparams_summary(metadata.EXPERIMENT_TAG, plugin_data_pb2.HParamsPluginData(experiment=experiment)))
    writer.add_summary(
        _hparams_summary(metadata.SESSION_START_INFO_TAG, plugin_data_pb2.HParamsPluginData(session_start_info=start))
    )
    writer.add_summary(_hparams_summary(metadata.SESSION_END_INFO_TAG, plugin_data_pb2.HParamsPluginData(session_end_info=end)))
    logger.finalize("success")
    return True


def _hparams_summary(tag: str, data: Any) -> Any:
    """A summary holding the hparams plugin's ``data`` (``HParamsPluginData``), as the plugin's own ``summary_v2``
    writes its experiment and session start (its ``summary`` module, which takes these protos, needs TensorFlow)."""
    from tensorboard.compat.proto.summary_pb2 import Summary
    from tensorboard.plugins.hparams import metadata

    return Summary(value=[Summary.Value(tag=tag, metadata=metadata.create_summary_metadata(data), tensor=metadata.NULL_TENSOR)])


def write_evaluation(run: Path, kind: str, results: Mapping[str, float], step: int = 0) -> bool:
    """Put an evaluation's final values (``EVALUATION_METRICS[kind]``) on its fit's HParams row: written into
    ``<run>/evaluations/<kind>/`` at ``step`` (the evaluated checkpoint's). The newest evaluation of a kind is the one
    the row shows (TensorBoard reads a tag's last value). Nothing to write (another kind, no value): ``False``."""
    from torch.utils.tensorboard import SummaryWriter

    found = {tag: results[tag] for tag, _ in EVALUATION_METRICS.get(kind, ()) if tag in results}
    if not found:
        return False
    extra = {tag: results[tag] for tag in EVALUATION_EXTRAS.get(kind, ()) if tag in results}
    writer = SummaryWriter(str(run / EVALUATION_GROUP.format(kind=kind)))
    try:
        for tag, value in with_headline({**found, **extra}).items():
            writer.add_scalar(tag, float(value), step)
    finally:
        writer.close()
    return True


def layout(options: RunOptions | None = None) -> dict[str, dict[str, list[Any]]]:
    """The Custom Scalars layout (``SummaryWriter.add_custom_scalars``): ``{category: {chart: ["Multiline", [regex, ...]]}}``."""
    k = (options or RunOptions()).top_k
    return {
        "embedding": {
            f"positive vs top-{k} negative similarity": ["Multiline", ["^metrics/pos_sim$", f"^metrics/top{k}_neg_sim$"]],
            "uniformity and tolerance": ["Multiline", ["^metrics/uniformity$", "^metrics/tolerance$"]],
        },
        "loss": {
            "loss and its chance value": ["Multiline", ["^train/loss_step$", "^loss/chance$"]],
            "τ": ["Multiline", ["^loss/temperature$"]],
        },
    }


def write_layout(loggers: list[Any], options: RunOptions | None = None) -> None:
    """Write ``layout(options)`` with every TensorBoard logger of ``loggers`` (rank 0 writes)."""
    from lightning.pytorch.loggers import TensorBoardLogger

    for logger in loggers:
        if isinstance(logger, TensorBoardLogger):
            logger.experiment.add_custom_scalars(layout(options))


def describe_scalars(loggers: list[Any], options: RunOptions | None = None) -> None:
    """Make every TensorBoard logger of ``loggers`` write each scalar tag's first value with its
    description (``ssl_app.runs.tags.describe``); tags without one are written as before.

    The logger's ``log_metrics`` is wrapped on this instance (Lightning calls it for every scalar;
    a subclass would have to be named in every config)."""
    from lightning.pytorch.loggers import TensorBoardLogger

    for logger in loggers:
        if isinstance(logger, TensorBoardLogger) and not getattr(logger, "_ssl_app_described", False):
            logger.log_metrics = _describing(logger, logger.log_metrics, options or RunOptions())
            logger._ssl_app_described = True


def _describing(logger: Any, log_metrics: Callable[..., None], options: RunOptions) -> Callable[..., None]:
    from lightning.pytorch.utilities import rank_zero_only
    from tensorboard.compat.proto.summary_pb2 import Summary, SummaryMetadata

    seen: set[str] = set()

    @functools.wraps(log_metrics)
    def described(metrics: Mapping[str, Any], step: int | None = None) -> None:
        if rank_zero_only.rank != 0:  # as Lightning's own log_metrics: rank 0 writes
            return
        rest = {}
        for tag, value in with_headline(metrics).items():
            text = None if tag in seen else describe(tag, options)
            seen.add(tag)
            try:
                number = float(value)
            except (TypeError, ValueError, RuntimeError):
                text = None
            if text is None:
                rest[tag] = value
                continue
            metadata = SummaryMetadata(summary_description=text)
            metadata.plugin_data.plugin_name = "scalars"
            summary = Summary(value=[Summary.Value(tag=tag, simple_value=number, metadata=metadata)])
            logger.experiment._get_file_writer().add_summary(summary, step)
        if rest:
            log_metrics(rest, step)

    return described
