"""The pairwise sigmoid loss (SigLIP, Zhai et al., ICCV 2023) on the method's candidates."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ssl_app.checks import Finite, check
from ssl_app.losses.base import (
    ContrastiveLoss,
    LossTerms,
    MaskedSimilarities,
    Tau,
    Temperature,
    check_temperature,
    mean_over_anchors,
)
from ssl_app.losses.registry import LOSSES


@LOSSES.register
class Sigmoid(ContrastiveLoss):
    """Pairwise sigmoid loss (SigLIP, Zhai et al., ICCV 2023): each pair a binary task, scale 1/τ and a learnable bias.

    Per anchor i with positives P(i) and negatives N(i), logits ``l_ij = s_ij/τ + b``:

        L_i = −Σ_{p∈P(i)} log σ(l_ip) − Σ_{k∈N(i)} log σ(−l_ik)

    averaged over the anchors with a positive; no softmax, so no anchor's candidates compete for one
    unit of probability. It is open_clip's ``SigLipLoss`` (mlfoundations/open_clip,
    ``src/open_clip/loss.py``: ``−Σ logsigmoid(labels · (t·x·yᵀ + b)) / B``, labels +1 on the pairs
    and −1 elsewhere, summed over every rank's candidates) with t = 1/τ, the anchors as its images and
    the candidates as its texts (tests/ssl_app/losses/test_sigmoid.py). With SimCLR each view is an
    anchor in turn, so both directions enter.

    τ is any policy of ``ssl_app.temperature``; ``Learnable`` is SigLIP's learnable scale
    (``t = exp(t')``, ``t' = log(1/τ)``), and ``Learnable(init=0.1)`` its start, t = 10 (open_clip's
    ``--siglip``: ``init_logit_scale = log 10``). The bias b is a parameter of the loss, trained with
    the encoder's learning rate and, as in open_clip, without weight decay; it starts at ``bias``
    (SigLIP's −10, which keeps the many negatives' loss small at the start).

    The gradient on a negative is ``σ(l_ik)/τ``: a hardness weight that grows with the similarity like
    InfoNCE's, but per pair rather than normalised over the anchor's negatives. No chance value.

    Args:
        temperature: τ > 0 or a policy (default 0.1: SigLIP's initial scale 10, held constant).
        bias: the bias's initial value (default −10, SigLIP's and open_clip's).
    """

    def __init__(self, temperature: Temperature = 0.1, bias: Finite = -10.0) -> None:
        super().__init__()
        self.temperature = check_temperature(temperature, type(self).__name__)
        self.initial_bias = check(Finite, bias, "Sigmoid: bias")
        self.bias = nn.Parameter(torch.tensor(self.initial_bias, dtype=torch.float32))

    def hparams(self) -> dict[str, object]:
        return {"temperature": self.temperature_setting(), "bias": self.initial_bias}

    def undecayed_parameters(self) -> list[nn.Parameter]:
        return [*super().undecayed_parameters(), self.bias]

    def terms(self, handover: MaskedSimilarities, tau: Tau, with_stats: bool) -> LossTerms:
        logits = handover.sim.float() / tau + self.bias.float()
        per_anchor = pairwise_sigmoid(logits, handover.pos_mask, handover.neg_mask)
        has_pos = handover.pos_mask.any(dim=1)
        # A negative's penalty is σ(l): its log, what effective_negatives normalises over the negatives.
        return LossTerms(
            mean_over_anchors(per_anchor.masked_fill(~has_pos, 0.0), has_pos),
            logits=F.logsigmoid(logits.detach()) if with_stats else None,
        )


def pairwise_sigmoid(logits: Tensor, pos_mask: Tensor, neg_mask: Tensor) -> Tensor:
    """Per-anchor ``−Σ_P log σ(l) − Σ_N log σ(−l)`` [N]; entries in neither mask are never read."""
    signed = torch.where(pos_mask, logits, -logits)
    return -torch.where(pos_mask | neg_mask, F.logsigmoid(signed), 0.0).sum(dim=1)
