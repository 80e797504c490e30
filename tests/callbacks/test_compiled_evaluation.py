"""``compile: true`` compiles the training steps only: an evaluation (the validation loop, the metric
callbacks' passes) and the projector run the eager code, so they never recompile the training graphs
for eval mode, no gradients and new batch shapes (issue 38: 12.9 s per evaluation, 55.7 s for the
projector on a GPU)."""

from __future__ import annotations

import torch
from lightning.pytorch.callbacks import Callback

from callbacks import EmbeddingMetrics, EmbeddingProjector, KNNMonitor
from tests.callbacks.helpers import tensorboard, tiny_data, tiny_model, tiny_trainer
from tests.helpers import compile_cheaply
from tests.helpers import dynamo_compiles as compiled_so_far


class GraphCounts(Callback):
    """The compiled-graph count at the edges of each evaluation and of the end of training."""

    def __init__(self) -> None:
        self.after_training_steps = 0
        self.evaluations: list[tuple[int, int]] = []
        self.at_train_end: list[int] = []

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self.after_training_steps = compiled_so_far()

    def on_validation_start(self, trainer, pl_module) -> None:
        self._start = compiled_so_far()

    def on_validation_end(self, trainer, pl_module) -> None:
        self.evaluations.append((self._start, compiled_so_far()))

    def on_train_end(self, trainer, pl_module) -> None:
        self.at_train_end.append(compiled_so_far())


def test_an_evaluation_and_the_projector_after_compiled_training_steps_compile_nothing(monkeypatch, tmp_path):
    """Catches an evaluation pass, a validation step or the projector going through the compiled
    backbone (dynamo then traces it again in eval mode, without gradients, for each batch shape).
    Dynamo traces for real; the eager backend skips inductor's C++ build."""
    compile_cheaply(monkeypatch, "eager")
    before, after = GraphCounts(), GraphCounts()
    callbacks = [
        before,
        KNNMonitor(batch_size=7),
        EmbeddingMetrics(negatives_from="train"),
        EmbeddingProjector(max_samples=12, thumbnail_size=8),
        after,
    ]
    model = tiny_model(compile=True)
    try:
        tiny_trainer(callbacks, logger=tensorboard(tmp_path)).fit(model, tiny_data())
    finally:
        torch._dynamo.reset()
    assert before.after_training_steps > 0  # the training steps ran compiled code
    assert len(before.evaluations) == 2
    for start, end in before.evaluations:
        assert end == start, "an evaluation compiled a graph"
    assert after.at_train_end == before.at_train_end, "the projector compiled a graph"
