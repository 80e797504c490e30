"""The debiased contrastive loss against a transcription of its authors' code, with their clamp active
and not, its relation to InfoNCE at τ⁺ = 0, and τ⁺'s check."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from lightly.loss import NTXentLoss

from ssl_app.errors import ConfigError
from ssl_app.losses import Debiased
from tests.ssl_app.losses import test_chance as chance
from tests.ssl_app.losses.in_batch import assert_same_value_and_gradient, embeddings, simclr_handover


def get_negative_mask(batch_size):
    negative_mask = torch.ones((batch_size, 2 * batch_size), dtype=bool)
    for i in range(batch_size):
        negative_mask[i, i] = 0
        negative_mask[i, i + batch_size] = 0
    return torch.cat((negative_mask, negative_mask), 0)


def authors_debiased_loss(out_1, out_2, temperature, tau_plus):
    """Transcribed from github.com/chingyaoc/DCL, ``main.py`` (``train``, ``debiased=True``), the authors'
    code; only the projection head's normalisation (their ``Model.forward``) is added here."""
    out_1, out_2 = F.normalize(out_1, dim=-1), F.normalize(out_2, dim=-1)
    batch_size = out_1.shape[0]
    out = torch.cat([out_1, out_2], dim=0)
    neg = torch.exp(torch.mm(out, out.t().contiguous()) / temperature)
    mask = get_negative_mask(batch_size)
    neg = neg.masked_select(mask).view(2 * batch_size, -1)
    pos = torch.exp(torch.sum(out_1 * out_2, dim=-1) / temperature)
    pos = torch.cat([pos, pos], dim=0)
    N = batch_size * 2 - 2
    Ng = (-tau_plus * N * pos + neg.sum(dim=-1)) / (1 - tau_plus)
    Ng = torch.clamp(Ng, min=N * np.e ** (-1 / temperature))
    return (-torch.log(pos / (pos + Ng))).mean()


@pytest.mark.parametrize(
    "temperature,tau_plus,clamped",
    [(0.5, 0.1, False), (0.5, 0.2, True)],
    ids=["authors_defaults", "clamp_active"],
)
def test_equals_the_authors_code_in_value_and_gradient(temperature, tau_plus, clamped):
    """Catches a wrong n (all candidates, not the negatives), τ⁺ applied to the negatives instead of the
    positive, a missing or wrong clamp and a sum over anchors, against chingyaoc/DCL ``main.py``
    (value and gradient w.r.t. the embeddings, 1e-5; the reference in float64)."""
    out0, out1 = embeddings(3, dtype=torch.float64)
    ours = Debiased(temperature=temperature, tau_plus=tau_plus)
    assert_same_value_and_gradient(
        lambda a, b: ours(simclr_handover(a, b)).value,
        lambda a, b: authors_debiased_loss(a, b, temperature, tau_plus),
        out0,
        out1,
    )
    # At τ⁺ = 0.2 the clamp holds for half the anchors (else this case would test nothing new).
    z = F.normalize(torch.cat([out0, out1]), dim=1)
    pos = torch.exp((z[:8] * z[8:]).sum(1) / temperature)
    negatives = torch.exp(z[:8] @ z.T / temperature).sum(1) - math.exp(1 / temperature) - pos
    held = int(((negatives - tau_plus * 14 * pos) / (1 - tau_plus) < 14 * math.exp(-1 / temperature)).sum())
    assert (held == 4) if clamped else (held == 0)


def test_without_a_class_prior_it_is_infonce():
    """Catches a debiasing term left in at τ⁺ = 0 (the loss must then be lightly's NT-Xent)."""
    out0, out1 = embeddings(4)
    ours = Debiased(temperature=0.3, tau_plus=0.0)
    assert_same_value_and_gradient(lambda a, b: ours(simclr_handover(a, b)).value, NTXentLoss(temperature=0.3), out0, out1)


def test_the_chance_value_is_the_mean_log_of_one_plus_the_negatives():
    """Catches InfoNCE's log(|P| + K) declared where each positive is scored against the negatives alone."""
    pos, neg = chance.masks(several_positives=True)
    anchors = [i for i in range(chance.N) if pos[i].any()]
    expected = sum(math.log(1 + chance.negatives(neg)[i]) for i in anchors) / len(anchors)
    assert Debiased().chance_value(pos, neg).item() == pytest.approx(expected, rel=1e-6)


@pytest.mark.parametrize("tau_plus", [-0.1, 1.0, 1.5])
def test_a_class_prior_outside_zero_to_one_is_one_error_naming_it(tau_plus):
    with pytest.raises(ConfigError, match=r"^Debiased: tau_plus \(the class prior\) must be in \[0, 1\)"):
        Debiased(tau_plus=tau_plus)
