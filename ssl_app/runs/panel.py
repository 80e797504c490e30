"""TensorBoard as the run's instrument panel: scalar descriptions, the Custom Scalars layout, the HParams config.

- **Descriptions.** TensorBoard keeps, per tag and run, the metadata of the tag's first event
  (``summary_description``, shown beside the chart). Lightning's ``TensorBoardLogger`` writes bare
  scalars, so :func:`describe_scalars` makes the logger write each tag's first value with its
  one-line description (``ssl_app.runs.tags``); later values are Lightning's own.
- **Custom Scalars.** :func:`write_layout` writes, once per run, charts that put related series on
  one plot (``LAYOUT``): positive against top-k negative similarity, uniformity and tolerance,
  the loss and its chance value, τ. Their tags are regular expressions, so a run that logs only
  some of them draws those.
- **HParams.** :func:`write_hparams` writes the plugin's experiment config (``hparams_config``) and
  the run's values (``session_start_info``): the comparison axes first (``AXES``, short display
  names; TensorBoard orders the axes by name, so theirs begin with a digit), then the run's constant
  diagnostics (``loss/chance``, ``loss/used_negatives``: their last value), then the rest of the
  flattened config; the metric columns are the real tags (``HEADLINE_METRICS``), whose last value
  the plugin reads from their own series, so nothing is logged twice. Lightning's own
  ``log_hyperparams`` writes no summary (``without_placeholder``), so the plugin sees one config.
  With several runs under one ``--logdir`` the plugin takes the config of one of them (every run
  writes the same axes and metrics; a config key that only other runs have, another method's
  option, is then not a column, though each run's values still list it).
"""

from __future__ import annotations

import functools
import numbers
import time
from collections.abc import Callable, Mapping
from typing import Any

from ssl_app.runs.headline import RunOptions
from ssl_app.runs.spec import RunSpec
from ssl_app.runs.tags import describe

#: HParams' metric columns: the headline tags (kNN and the linear probe are fractions, not %).
HEADLINE_METRICS = (
    ("metrics/knn_acc", "kNN"),
    ("linear/top1", "linear top-1"),
    ("metrics/uniformity", "uniformity"),
    ("metrics/tolerance", "tolerance"),
    ("metrics/effective_rank", "eff. rank"),
)
#: Diagnostics that stay constant in most runs (logged only when they change): HParams shows their last value,
#: right after the axes (tag, HParams name, display name).
CONSTANT_DIAGNOSTICS = (("loss/chance", "9_chance", "chance"), ("loss/used_negatives", "9_negatives", "negatives"))


def _tau(spec: RunSpec) -> Any:
    """τ: the number of a constant, else the policy's label (``cosine:0.1-1``, ``learnable:0.07``)."""
    tau = spec.loss.temperature if spec.loss is not None else None
    if tau is None:
        return None
    return tau.constant if tau.constant is not None else tau.label()


#: The comparison axes: HParams name (sorted first), display name, and what of the run's spec it shows.
AXES: tuple[tuple[str, str, Callable[[RunSpec], Any]], ...] = (
    ("0_method", "method", lambda spec: spec.method_name),
    ("1_loss", "loss", lambda spec: None if spec.loss is None else spec.loss.name),
    ("2_tau", "τ", _tau),
    ("3_batch", "batch", lambda spec: spec.batch_size),
    ("4_backbone", "backbone", lambda spec: spec.backbone),
    ("5_data", "data", lambda spec: spec.data_name),
    ("6_lr", "lr", lambda spec: spec.lr),
    ("7_epochs", "epochs", lambda spec: spec.epochs),
    ("8_seed", "seed", lambda spec: spec.seed),
)


def _plain(value: Any) -> bool | float | str:
    """A value the hparams plugin stores: bool, number or text (``None`` and the rest as text)."""
    if isinstance(value, bool):
        return value
    if isinstance(value, numbers.Real):
        return float(value)
    return str(value)


def axis_values(spec: RunSpec) -> dict[str, bool | float | str]:
    """The comparison axes (``AXES``) the run's spec has, by HParams name."""
    values = {name: read(spec) for name, _, read in AXES}
    return {name: _plain(value) for name, value in values.items() if value is not None}


def write_hparams(logger: Any, config: Mapping[str, Any], results: Mapping[str, float]) -> bool:
    """Write the run's HParams config and values with ``logger`` (a TensorBoardLogger; anything else:
    nothing written, ``False``). ``results``: the run's final scalars, from which the constant
    diagnostics (``CONSTANT_DIAGNOSTICS``) become hyper-parameters of the run. Closes the writer
    (``finalize``), which Lightning had closed already and this opened again."""
    from lightning.pytorch.loggers import TensorBoardLogger
    from tensorboard.plugins.hparams import summary_v2

    if not isinstance(logger, TensorBoardLogger):
        return False
    spec = RunSpec.from_config(config)
    flat = spec.flat
    values: dict[str, bool | float | str] = axis_values(spec)
    infos = [summary_v2.HParam(name, display_name=display) for name, display, _ in AXES if name in values]
    for tag, name, display in CONSTANT_DIAGNOSTICS:
        if tag in results:
            values[name] = float(results[tag])
            infos.append(summary_v2.HParam(name, display_name=display, description=describe(tag)))
    for key, value in flat.items():
        values[key] = _plain(value)
        infos.append(summary_v2.HParam(key))
    metrics = [summary_v2.Metric(tag, display_name=display, description=describe(tag)) for tag, display in HEADLINE_METRICS]
    writer = logger.experiment._get_file_writer()  # as Lightning's own log_hyperparams writes its summaries
    now = time.time()
    writer.add_summary(summary_v2.hparams_config_pb(infos, metrics, time_created_secs=now))
    writer.add_summary(summary_v2.hparams_pb(values, start_time_secs=now))  # grouped by its values, as TensorBoard does
    logger.finalize("success")
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
        for tag, value in metrics.items():
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
