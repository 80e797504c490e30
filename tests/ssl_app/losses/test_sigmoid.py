"""The pairwise sigmoid loss against a transcription of open_clip's ``SigLipLoss``
(mlfoundations/open_clip, ``src/open_clip/loss.py``), with a constant and a learnable τ and its
learnable bias, SimCLR's masks against the formula from the embeddings, and the bias's optimiser group."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from ssl_app.errors import ConfigError
from ssl_app.losses import MaskedSimilarities, Sigmoid
from ssl_app.methods import SimCLR
from ssl_app.temperature import Learnable
from tests.generic import TINY_MODEL
from tests.ssl_app.losses.in_batch import assert_same_value_and_gradient, embeddings, simclr_handover


def open_clip_siglip(image: torch.Tensor, text: torch.Tensor, logit_scale: torch.Tensor, logit_bias: torch.Tensor):
    """open_clip's ``SigLipLoss`` in one process (``_loss``), transcribed (reading only): logits
    ``scale · image textᵀ + bias``; labels +1 on the diagonal and −1 off it; the loss is minus the sum of
    logsigmoid(labels · logits) over every pair, divided by the number of images. ``logit_scale`` is
    the scale itself (open_clip's model hands over ``logit_scale.exp()``)."""
    logits = logit_scale * image @ text.T + logit_bias
    labels = 2 * torch.eye(image.shape[0]) - 1
    return -F.logsigmoid(labels * logits).sum() / image.shape[0]


def cross_view_handover(out0: torch.Tensor, out1: torch.Tensor) -> MaskedSimilarities:
    """open_clip's pairs: view-1 anchors (its images) against view-2 candidates (its texts)."""
    a, b = F.normalize(out0, dim=1), F.normalize(out1, dim=1)
    eye = torch.eye(a.shape[0], dtype=torch.bool)
    return MaskedSimilarities(a @ b.T, eye, ~eye)


@pytest.mark.parametrize(("tau", "bias"), [(0.1, -10.0), (0.5, 0.0), (0.05, -3.0)])
def test_equals_open_clips_siglip_loss_in_value_and_gradient(tau, bias):
    """Catches τ multiplied instead of divided, the bias left out or added to the positives only, the
    sign of the negatives' labels, a mean over pairs instead of a sum per anchor, in value and in the
    gradient on the embeddings (1e-5), at SigLIP's start (t = 10, b = −10) and elsewhere."""
    out0, out1 = embeddings(4, batch=7)
    ours = Sigmoid(temperature=tau, bias=bias)
    assert_same_value_and_gradient(
        lambda a, b: ours(cross_view_handover(a, b)).value,
        lambda a, b: open_clip_siglip(F.normalize(a, dim=1), F.normalize(b, dim=1), torch.tensor(1 / tau), torch.tensor(bias)),
        out0,
        out1,
    )


def test_a_learnable_tau_and_the_bias_get_open_clips_gradients():
    """Catches a bias that does not train (no gradient, or not the reference's), and a learnable τ whose
    parameter is not SigLIP's t' (scale = exp t'): the gradients on t' and b against open_clip's (1e-5)."""
    out0, out1 = embeddings(2, batch=6)
    handover = cross_view_handover(out0, out1)
    ours = Sigmoid(temperature=Learnable(init=0.1), bias=-10.0)
    value = ours(handover).value
    value.backward()
    t_prime = torch.tensor(math.log(10.0), requires_grad=True)
    bias = torch.tensor(-10.0, requires_grad=True)
    a, b = F.normalize(out0, dim=1), F.normalize(out1, dim=1)
    expected = open_clip_siglip(a, b, t_prime.exp(), bias)
    expected.backward()
    torch.testing.assert_close(value.detach(), expected.detach(), atol=1e-5, rtol=0)
    assert abs(float(bias.grad)) > 1e-3
    torch.testing.assert_close(ours.bias.grad, bias.grad, atol=1e-5, rtol=0)
    torch.testing.assert_close(ours.temperature.log_scale.grad, t_prime.grad, atol=1e-5, rtol=0)


def test_with_simclr_masks_each_view_is_an_anchor_against_every_other_embedding():
    """Catches the anchor itself entering as a negative, or the within-view pairs left out: SimCLR's
    hand-over against the per-anchor sum over the other 2B − 1 embeddings, averaged over 2B anchors."""
    out0, out1 = embeddings(6, batch=5)
    tau, bias = 0.2, -2.0

    def definition(a, b):
        z = F.normalize(torch.cat([a, b]), dim=1)
        batch = a.shape[0]
        image = torch.arange(2 * batch) % batch
        logits = z @ z.T / tau + bias
        labels = torch.where(image[:, None] == image[None, :], 1.0, -1.0)
        terms = -F.logsigmoid(labels * logits) * (1 - torch.eye(2 * batch))
        return terms.sum(dim=1).mean()

    ours = Sigmoid(temperature=tau, bias=bias)
    assert_same_value_and_gradient(lambda a, b: ours(simclr_handover(a, b)).value, definition, out0, out1)


def test_the_bias_trains_without_weight_decay_in_the_taus_group():
    """Catches the bias left in the decayed group (5e-4 would pull it from −10 towards 0 for no reason of
    the loss; open_clip decays neither scale nor bias), and a group of its own instead of the τ's."""
    model = SimCLR(loss=Sigmoid(temperature=Learnable(init=0.1)), **TINY_MODEL)
    decayed, undecayed = model.parameter_groups()
    assert undecayed["weight_decay"] == 0.0
    assert {id(p) for p in undecayed["params"]} == {id(model.loss.bias), id(model.loss.temperature.log_scale)}
    assert all(p is not model.loss.bias for p in decayed["params"])
    constant = SimCLR(loss=Sigmoid(temperature=0.1), **TINY_MODEL)
    assert [len(group["params"]) for group in constant.parameter_groups()][1:] == [1]


@pytest.mark.parametrize("bias", [float("nan"), float("inf")])
def test_a_bad_bias_is_one_config_error_naming_it(bias):
    with pytest.raises(ConfigError, match="Sigmoid: bias"):
        Sigmoid(bias=bias)
