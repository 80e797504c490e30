"""When an evaluation callback runs: after every n-th epoch of ``fit``, and always on ``validate``/``test``.

``KNNMonitor`` and ``EmbeddingMetrics`` share the option and its check, so a bad value gives one
message, ``error: <Callback>: every_n_epochs must be an int >= 1, got 0``, before training.
"""

from __future__ import annotations

import lightning as L
from lightning.pytorch.trainer.states import TrainerFn

from ssl_app.checks import check_int


def check_every_n_epochs(every_n_epochs: int, callback: str) -> int:
    """``every_n_epochs`` as an int; ``ConfigError`` naming ``callback``'s option unless it is an int >= 1."""
    return check_int(every_n_epochs, f"{callback}: every_n_epochs")


def evaluation_due(trainer: L.Trainer, every_n_epochs: int) -> bool:
    """Whether an evaluation at the end of this validation or test epoch is due.

    Never in the sanity check; during ``fit``, after epochs n, 2n, ... (``current_epoch + 1``
    divisible by ``every_n_epochs``); on ``validate`` and ``test``, always.
    """
    if trainer.sanity_checking:
        return False
    return trainer.state.fn != TrainerFn.FITTING or (trainer.current_epoch + 1) % every_n_epochs == 0
