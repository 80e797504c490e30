"""The third-party warnings and notices a run is known to print, and why each is harmless here.

Every command (``python -m ssl_app fit|validate|test``, the linear probe, ``ssl_app.report``,
``ssl_app.sweep``) runs inside :func:`known_noise_silenced`, so its console shows the run's own
lines and its summary, not the same third-party lines on every start. Each entry names one exact
message (a regular expression matched at the message's start, with its category or logger): a
warning that is not listed here, or the same category with another message, still shows. Nothing
is installed at import time; the filters end with the command.

Avoided at their source instead, so not listed: Lightning's "`weights_only` was not set" when an
interrupted fit saves (``checkpointing.save_last`` says it saves the full state), ModelCheckpoint's
"The dirpath has changed" in ``validate``/``test`` (``checkpointing.FitOnlyCheckpointState``), and
Lightning's and torch's advice on DataLoader workers (``num_workers: null``, the default, fits the
machine: ``datamodules.base.default_num_workers``; an explicit value is the user's, advice included).

Not listed: matplotlib's layout warnings from the report's figures (none was seen in a report of
21 configurations; a figure whose layout failed is worth hearing about).
"""

from __future__ import annotations

import logging
import re
import warnings
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass


@dataclass(frozen=True)
class KnownWarning:
    """A ``warnings.warn`` message (``message``: a regex matched at its start) of ``category``."""

    message: str
    category: type[Warning]
    emitted_by: str
    why: str


@dataclass(frozen=True)
class KnownNotice:
    """A log record (``message``: a regex matched at its start) of one of ``loggers``."""

    message: str
    loggers: tuple[str, ...]
    emitted_by: str
    why: str


#: Lightning's advice to sync a value logged per epoch under DDP, for the tags the metric callbacks log.
IDENTICAL_VALUE_ADVICE = r"It is recommended to use `self\.log\('(metrics|lt)/"

KNOWN_WARNINGS: tuple[KnownWarning, ...] = (
    KnownWarning(
        r"`isinstance\(treespec, LeafSpec\)` is deprecated",
        FutureWarning,
        "torch, when Lightning's lightning.pytorch.utilities._pytree builds a LeafSpec (every step's results)",
        "a deprecation inside Lightning's own code (torch still supports the class); nothing a run can change",
    ),
    KnownWarning(
        r"The number of training batches \(\d+\) is smaller than the logging interval",
        UserWarning,  # Lightning's PossibleUserWarning, a UserWarning (not imported: the report stays light)
        "Lightning's fit loop, when an epoch has fewer batches than trainer.log_every_n_steps",
        "the step counter runs across epochs, so per-step values are still logged every log_every_n_steps steps "
        "and per-epoch values at every epoch's end; only short runs (the quickstart, smoke tests) meet it",
    ),
    KnownWarning(
        r"Checkpoint directory .* exists and is not empty\.",
        UserWarning,
        "Lightning's ModelCheckpoint.setup, for a fit whose checkpoint folder already holds a file",
        "a fresh run gets a new version folder, so the folder holds files only on a resume, which continues in "
        "the checkpoint's own run by design (the file it resumes from is one of them); ModelCheckpoint removes only "
        "the files it wrote itself",
    ),
    KnownWarning(
        IDENTICAL_VALUE_ADVICE,
        UserWarning,  # Lightning's PossibleUserWarning, a UserWarning (not imported: the report stays light)
        "Lightning, for a value logged per epoch without sync_dist under DDP (the metrics/ and lt/ tags)",
        "callbacks.EmbeddingMetrics, KNNMonitor and LongTailAccuracy log values that are identical on every rank "
        "by construction (gathered inputs, metrics that all-reduce), so the sync would change nothing",
    ),
    KnownWarning(
        r"LightningCLI's args parameter is intended to run from within Python",
        UserWarning,
        "LightningCLI, given args while sys.argv has some, which python -m ssl_app does when a τ is a preset",
        "the args are this command line itself with each τ preset as its policy's config (ssl_app.cli.tau_presets)",
    ),
)

#: Only while a linear probe trains (``ssl_app.evaluation.LinearProbe``).
PROBE_WARNINGS: tuple[KnownWarning, ...] = (
    KnownWarning(
        r"Found \d+ module\(s\) in eval mode at the start of training",
        UserWarning,  # Lightning's PossibleUserWarning, a UserWarning (not imported: the report stays light)
        "Lightning's fit loop, for modules left in eval mode",
        "the probe keeps its frozen backbone in eval mode on purpose (batch-norm statistics stay those of the trained encoder)",
    ),
    KnownWarning(
        r"Experiment logs directory .* exists and is not empty\. Previous log files",
        UserWarning,
        "Lightning's CSVLogger, whose folder already holds files when its first row is written",
        "a probe filed in its run logs its curves as CSV into its own folder (ssl_app.cli.plan.curves_as_csv), which "
        "holds its record and config by then; a resumed probe's earlier metrics.csv was kept as metrics_<n>.csv first",
    ),
)

_RANK_ZERO_LOGGERS = ("lightning.pytorch.utilities.rank_zero", "lightning.fabric.utilities.rank_zero")

KNOWN_NOTICES: tuple[KnownNotice, ...] = (
    KnownNotice(
        r"💡 Tip: For seamless cloud logging and experiment tracking, try installing \[litlogger\]",
        _RANK_ZERO_LOGGERS,
        "Lightning's logger connector (rank_zero_info), whenever a run has no LitLogger",
        "an advertisement for an optional cloud service; runs log to TensorBoard in their run folder",
    ),
)


class _DropNotices(logging.Filter):
    """Drops the records whose message starts like one of ``notices``."""

    def __init__(self, notices: tuple[KnownNotice, ...]) -> None:
        super().__init__()
        self.patterns = [re.compile(notice.message) for notice in notices]

    def filter(self, record: logging.LogRecord) -> bool:
        text = record.getMessage()
        return not any(pattern.match(text) for pattern in self.patterns)


@contextmanager
def known_noise_silenced(
    known: tuple[KnownWarning, ...] = KNOWN_WARNINGS, notices: tuple[KnownNotice, ...] = KNOWN_NOTICES
) -> Iterator[None]:
    """While the block runs, ignore the ``known`` warnings and drop the ``notices``; both come back after."""
    with ExitStack() as stack:
        stack.enter_context(warnings.catch_warnings())
        for entry in known:
            warnings.filterwarnings("ignore", message=entry.message, category=entry.category)
        drop = _DropNotices(notices)
        for name in sorted({name for notice in notices for name in notice.loggers}):
            logger = logging.getLogger(name)
            logger.addFilter(drop)
            stack.callback(logger.removeFilter, drop)
        yield
