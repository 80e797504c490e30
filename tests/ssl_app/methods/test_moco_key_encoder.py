"""MoCo's keys come from the momentum encoder, checked through a real ``Trainer.fit``.

The key check in ``test_moco`` runs at start-up, when query and key encoders are identical, so
keys computed by the *query* encoder pass it. Here we train a few optimiser steps with m < 1,
record the query encoder's weights around every step, track the EMA of those snapshots
ourselves, and compare the keys MoCo stored in its queue with (a) the output of that EMA and
(b) the output of the query encoder at the time: (a) must match, (b) must not.
"""

from __future__ import annotations

import copy

import lightning as L
import pytest
import torch
import torch.nn.functional as F

from ssl_app.losses import InfoNCE
from ssl_app.methods import MoCo
from ssl_app.optim import Optimization
from tests.helpers import tiny_data, tiny_trainer

BATCH = 4
STEPS = 4
MOMENTUM = 0.6


def make_moco(**kwargs) -> MoCo:
    torch.manual_seed(0)
    options = {
        "loss": InfoNCE(temperature=0.2),
        "backbone": "small_cnn",
        "backbone_norm": "group",  # no BatchNorm: an encoder's output depends only on its weights
        "proj_layers": 2,
        "proj_hidden_dim": 32,
        "proj_dim": 16,
        "proj_batch_norm": False,
        "queue_size": 64,  # holds every key of the run, in order
        "momentum": MOMENTUM,
        "optim": Optimization(lr=0.5, momentum=0.0, weight_decay=0.0, schedule="constant"),
    }
    options.update(kwargs)
    return MoCo(**options)


def query_weights(model: MoCo) -> dict[str, torch.Tensor]:
    return {
        **{f"backbone.{k}": v.detach().clone() for k, v in model.backbone.state_dict().items()},
        **{f"projection_head.{k}": v.detach().clone() for k, v in model.projection_head.state_dict().items()},
    }


class Recorder(L.Callback):
    """Before each batch: the batch and the query weights; after the run: the final weights."""

    def __init__(self) -> None:
        self.batches, self.weights = [], []

    def on_train_start(self, trainer, pl_module) -> None:
        self.initial = query_weights(pl_module)

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        views, _labels, _indices = batch
        self.batches.append(tuple(v.clone() for v in views))
        self.weights.append(query_weights(pl_module))

    def on_train_end(self, trainer, pl_module) -> None:
        self.weights.append(query_weights(pl_module))


def encode(reference: MoCo, weights: dict[str, torch.Tensor], images: torch.Tensor) -> torch.Tensor:
    """L2-normalised output of a query-encoder copy carrying ``weights``."""
    encoder = copy.deepcopy(reference)
    encoder.backbone.load_state_dict({k[len("backbone.") :]: v for k, v in weights.items() if k.startswith("backbone.")})
    encoder.projection_head.load_state_dict(
        {k[len("projection_head.") :]: v for k, v in weights.items() if k.startswith("projection_head.")}
    )
    with torch.no_grad():
        return F.normalize(encoder.projection_head(encoder.backbone(images)), dim=1)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    model = make_moco()
    recorder = Recorder()
    trainer = tiny_trainer(tmp_path_factory.mktemp("moco_ema"), max_steps=STEPS, callbacks=[recorder])
    trainer.fit(model, tiny_data(batch_size=BATCH, train_size=32))
    return model, recorder


def test_keys_come_from_the_ema_of_past_query_weights_not_the_query_encoder(run):
    """Catches keys computed by the query encoder (or an EMA that uses 1 − m) once the encoders diverge."""
    model, recorder = run
    assert model.queue.filled.item() == STEPS * BATCH
    ema = {k: v.double() for k, v in recorder.initial.items()}
    differed = 0
    for step in range(STEPS):
        # The keys of batch `step` come from the key encoder as it was before this step's update:
        # θ_k = EMA over the query weights after each of the previous optimiser steps.
        view_2 = recorder.batches[step][1]
        stored = model.queue.features[step * BATCH : (step + 1) * BATCH]
        expected = encode(model, {k: v.float() for k, v in ema.items()}, view_2)
        torch.testing.assert_close(stored, expected, atol=2e-5, rtol=0, msg=f"step {step}")
        from_query = encode(model, recorder.weights[step], view_2)
        if step >= 2:  # by now θ_k ≠ θ_q: the query encoder's keys are measurably different
            assert (stored - from_query).abs().max() > 1e-3, f"step {step}: keys equal the query encoder's"
            differed += 1
        after = recorder.weights[step + 1]  # the query weights after this step's optimiser update
        ema = {k: MOMENTUM * v + (1 - MOMENTUM) * after[k].double() for k, v in ema.items()}
    assert differed == STEPS - 2
    # And the final key encoder is the EMA of all STEPS updates.
    for name, value in model.key_backbone.state_dict().items():
        torch.testing.assert_close(value, ema[f"backbone.{name}"].float(), atol=1e-6, rtol=0, msg=name)
    for name, value in model.key_projection_head.state_dict().items():
        torch.testing.assert_close(value, ema[f"projection_head.{name}"].float(), atol=1e-6, rtol=0, msg=name)


def test_query_and_key_encoders_really_diverged(run):
    """Control: the run moved the query weights, so the test above compares two different encoders."""
    model, recorder = run
    moved = max((recorder.weights[-1][k] - recorder.initial[k]).abs().max().item() for k in recorder.initial)
    assert moved > 1e-2
    gap = max((recorder.weights[-1][f"backbone.{k}"] - v).abs().max().item() for k, v in model.key_backbone.state_dict().items())
    assert gap > 1e-3
