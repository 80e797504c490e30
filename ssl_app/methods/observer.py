"""What a method shows of its training, and when: the one collaborator a ``ContrastiveMethod`` owns for it.

The method trains (``contrast`` → loss → backward); :class:`LossObserver` observes. Each hook takes the
LightningModule it logs through (``pl_module``), as a callback's do:

- every training step: ``train/loss_step`` (for the loggers, not the progress bar: :meth:`training_step`) and the
  epoch's mean ``train/loss_epoch`` (kept here rather than by Lightning's logger connector, so a checkpoint saved
  mid-epoch carries it: :meth:`save_to`; emptied at each fresh epoch's start: :meth:`epoch_start`);
- the steps whose values reach the logger (every ``trainer.log_every_n_steps``, the only steps the method asks the
  loss for diagnostics): ``loss/<key>``, where the constant ones (``LOGGED_ON_CHANGE``) reach the loggers only when
  they change (``ssl_app.io.changes``) and ``loss/used_neg_sim`` only from a loss that keeps fewer than every
  negative; their hardness profiles are summed into the epoch's (``ssl_app.losses.hardness``);
- each epoch's end: ``loss/temperature_epoch`` (the τ of its last training step) and the epoch's hardness
  profile as the TensorBoard histograms ``hardness/*``;
- validation and test batches: ``{stage}/loss`` and what the loss measures of itself on them
  (``ContrastiveLoss.evaluation_metrics``: PaCo's ``classifier_top1``).

It also keeps the last training step's ``(loss, chance value)`` for ``callbacks.EmbeddingMetrics``' loss-at-chance
rule (``ContrastiveMethod.loss_and_chance``).
"""

from __future__ import annotations

from typing import Any, Optional, Union

from lightning.pytorch.loggers import TensorBoardLogger
from lightning.pytorch.utilities import rank_zero_warn
from torch import Tensor, nn
from torchmetrics import MeanMetric

from ssl_app.handover import MaskedSimilarities
from ssl_app.io.changes import OnChange, logs_this_step
from ssl_app.losses.base import LossResult
from ssl_app.losses.hardness import HardnessProfile, write_profile

#: Loss diagnostics that stay constant in most runs: written to the loggers when they change (``ssl_app.io.changes``).
LOGGED_ON_CHANGE = ("loss/chance", "loss/used_negatives", "loss/temperature")
#: Where a checkpoint keeps the mean training loss of the epoch it was saved in.
TRAIN_LOSS_KEY = "ssl_app_train_loss_mean"


class LossObserver(nn.Module):
    """The method's logging policy and the epoch's summaries (module docstring); a submodule of the method, so its
    metrics move with it (their states are not in the state dict: checkpoints are as before)."""

    def __init__(self, every_negative_used: bool = True) -> None:
        super().__init__()
        # "disable": no NaN check, which would sync with the host every step (the health check watches the loss
        # instead). Each process's own mean, as Lightning's unsynced epoch value was: a synced compute would
        # gather whenever any rank first reads ``callback_metrics``, which the ranks do not do in step.
        self.train_loss_mean = MeanMetric(nan_strategy="disable", sync_on_compute=False)
        self.hardness = HardnessProfile()
        self.changes = OnChange()
        #: Whether the loss keeps every negative, so ``loss/used_neg_sim`` is ``loss/mean_neg_sim`` (not logged twice).
        self.every_negative_used = every_negative_used
        #: The last training step's ``(loss, chance value)``, detached; None on steps without the chance value.
        self.loss_and_chance: Optional[tuple[Tensor, Tensor]] = None
        self._pending: Optional[tuple[dict[str, Tensor], int]] = None
        self._resumed: Optional[dict[str, Any]] = None  # a loaded checkpoint's epoch mean, until ``train_start``
        self._epoch_tau: Union[float, Tensor, None] = None

    # --- steps --------------------------------------------------------------------------------------------
    @staticmethod
    def logs_this_step(trainer: Any) -> bool:
        """Whether values logged with ``on_step=True`` now reach the logger (``ssl_app.io.changes.logs_this_step``;
        True without a Trainer): the steps on which the method asks the loss for its diagnostics."""
        return trainer is None or logs_this_step(trainer)

    def training_step(self, pl_module: Any, result: LossResult, batch_size: int) -> None:
        """Log a training step's loss (and, when computed, its diagnostics), keep what the epoch's end needs."""
        loss = result.value
        # Not in the progress bar: Lightning turns every prog_bar value into a number after each batch, a host sync
        # per step on a GPU (the bar shows train/loss_epoch; the loggers get every logged step;
        # tests/ssl_app/methods/test_loop_syncs.py).
        pl_module.log("train/loss_step", loss, on_step=True, on_epoch=False, batch_size=batch_size)
        # Weighted by the batch size as Lightning's epoch mean is (the metric ignores ``weight`` when its NaN check
        # is disabled, so the value is repeated instead: a view, no copy).
        self.train_loss_mean.update(loss.detach().expand(batch_size))
        pl_module.log("train/loss_epoch", self.train_loss_mean, prog_bar=True, on_step=False, on_epoch=True)
        stats = {f"loss/{key}": value for key, value in result.stats.items()}
        if stats:
            self._log_diagnostics(pl_module, stats, batch_size)
        if result.hardness is not None:
            self.hardness.update(result.hardness)
        chance = result.stats.get("chance")
        self.loss_and_chance = None if chance is None else (loss.detach(), chance)
        # The epoch's τ is its last training step's (validation, which runs before the epoch's end, computes one
        # of its own: an adaptive τ, from its own batches).
        self._epoch_tau = result.tau

    def _log_diagnostics(self, pl_module: Any, stats: dict[str, Tensor], batch_size: int) -> None:
        if self.every_negative_used:
            stats.pop("loss/used_neg_sim", None)
        steady = {tag: stats.pop(tag) for tag in LOGGED_ON_CHANGE if tag in stats}
        pl_module.log_dict(stats, on_step=True, on_epoch=False, batch_size=batch_size)
        if steady:
            pl_module.log_dict(steady, on_step=True, on_epoch=False, batch_size=batch_size, logger=False)
            self._pending = (steady, pl_module.global_step)  # written in batch_end

    def batch_end(self, pl_module: Any) -> None:
        """Write the step's ``LOGGED_ON_CHANGE`` diagnostics that changed: once the step's backward and optimiser
        step are queued, since comparing them reads them on the host (as Lightning's own logging does next),
        which inside ``training_step`` would stall a GPU before its backward."""
        pending, self._pending = self._pending, None
        if pending is not None:
            self.changes.write(pl_module.loggers, *pending)

    def evaluation_step(self, pl_module: Any, result: LossResult, contrast: MaskedSimilarities, stage: str) -> None:
        """Log a validation or test batch's loss, and what the loss measures of itself on it."""
        batch_size = contrast.sim.shape[0]
        pl_module.log(f"{stage}/loss", result.value, prog_bar=True, on_epoch=True, sync_dist=True, batch_size=batch_size)
        for name, metric in pl_module.loss.evaluation_metrics(contrast, stage).items():
            pl_module.log(f"{stage}/{name}", metric, on_epoch=True, batch_size=batch_size)

    # --- the epoch's start and end -------------------------------------------------------------------------
    def epoch_start(self) -> None:
        """A fresh epoch's mean training loss starts empty: a run resumed from a checkpoint written during the
        previous epoch's validation got that epoch's mean back, which no training step of this process logged, so
        Lightning never reset it. (Lightning calls no ``on_train_epoch_start`` for an epoch resumed in its middle,
        whose mean :meth:`train_start` restores.)"""
        self.train_loss_mean.reset()

    def epoch_end(self, pl_module: Any) -> None:
        """Log ``loss/temperature_epoch`` (the τ of the epoch's last training step; written when it changes), write
        the values written on change (``LOGGED_ON_CHANGE``, and that τ) once more at the epoch's last step
        (``OnChange.hold``: a constant draws as a line), and
        the epoch's hardness profile, summed over processes (every rank computes it, since the sum is a
        collective; rank 0 writes it to the first TensorBoard logger), and reset it."""
        # A constant (a fixed τ, the chance value, the negatives) once more at the epoch's last training step, so it
        # draws as a line across the run (one that changed at that step is not written twice).
        self.changes.hold(pl_module.loggers, pl_module.global_step - 1, LOGGED_ON_CHANGE)
        tau, self._epoch_tau = self._epoch_tau, None
        if tau is not None:  # the same on every rank (a global batch's or the progress's): no sync needed
            # in callback_metrics every epoch; written when it changes (a fixed τ: once), and held at each epoch
            pl_module.log("loss/temperature_epoch", tau, on_step=False, on_epoch=True, logger=False)
            self.changes.write(pl_module.loggers, {"loss/temperature_epoch": tau}, pl_module.global_step)
            self.changes.hold(pl_module.loggers, pl_module.global_step, ("loss/temperature_epoch",))
        if not self.hardness.update_called:
            return
        mean_share, negatives = self.hardness.compute()
        self.hardness.reset()
        tensorboard = next((logger for logger in pl_module.loggers if isinstance(logger, TensorBoardLogger)), None)
        if tensorboard is not None and pl_module.trainer.is_global_zero:
            write_profile(tensorboard.experiment, mean_share, negatives, pl_module.global_step)

    def train_start(self, pl_module: Any) -> None:
        """Before the first step (once the loops are restored, ``current_epoch`` the resumed one): go on with the
        epoch's mean training loss of a checkpoint saved mid-epoch (:meth:`restore`), and settle whether the loss
        keeps every negative (a hard loss whose K reaches the negatives an anchor has: then it is exactly the loss
        it names, which a warning says, and ``loss/used_neg_sim`` would repeat ``loss/mean_neg_sim``)."""
        saved, self._resumed = self._resumed, None
        self.restore(saved, pl_module.current_epoch)
        trainer, loss = pl_module.trainer, pl_module.loss
        batch_size = getattr(trainer.datamodule, "batch_size", None) if trainer.datamodule is not None else None
        kept = getattr(loss, "num_negatives", None)
        available = None if batch_size is None else pl_module.negatives_per_anchor(batch_size, trainer.world_size)
        same_as = loss.same_as_with_every_negative
        keeps_all = kept is not None and available is not None and kept >= available
        self.every_negative_used = same_as is None or keeps_all
        if same_as is not None and keeps_all:
            rank_zero_warn(
                f"{type(loss).__name__}: num_negatives={kept} keeps every negative: an anchor of "
                f"{type(pl_module).__name__} has {available} negatives (batch {batch_size} per process × "
                f"{trainer.world_size} process(es)), so this loss is exactly {same_as}; lower num_negatives"
            )

    # --- the epoch's mean training loss across a checkpoint -------------------------------------------------
    def save_to(self, checkpoint: dict[str, Any], epoch: int) -> None:
        """Into ``checkpoint``: the running mean of this epoch's training loss (sum and weight), with the epoch it
        belongs to."""
        state = {name: value.detach().clone() for name, value in self.train_loss_mean.metric_state.items()}
        checkpoint[TRAIN_LOSS_KEY] = {"epoch": epoch, "state": state}

    def load_from(self, checkpoint: dict[str, Any]) -> None:
        """Keep a loaded checkpoint's epoch mean (none in an older version's) for :meth:`train_start`."""
        self._resumed = checkpoint.get(TRAIN_LOSS_KEY)

    def restore(self, saved: Optional[dict[str, Any]], epoch: int) -> None:
        """Resumed mid-epoch: the epoch's mean training loss goes on from the steps before the stop, so
        ``train/loss_epoch`` equals the uninterrupted run's. A checkpoint of an epoch's end (the resumed run
        starts the next epoch) or of an older version leaves the mean empty."""
        if saved is not None and saved.get("epoch") == epoch:
            for name, value in saved["state"].items():
                setattr(self.train_loss_mean, name, value.to(self.train_loss_mean.device))
