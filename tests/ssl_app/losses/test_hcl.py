"""HCL (hard negative sampling) against a transcription of its authors' code, its reduction to the
debiased loss at β = 0, and β's check, through the CLI before training."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from ssl_app.cli import main
from ssl_app.errors import ConfigError
from ssl_app.losses import HCL, Debiased
from tests.ssl_app.losses.in_batch import assert_same_value_and_gradient, embeddings, simclr_handover
from tests.ssl_app.losses.test_debiased import get_negative_mask
from tests.ssl_app.test_bad_input import QUICKSTART, SMALL


def authors_hcl_loss(out_1, out_2, tau_plus, beta, temperature):
    """Transcribed from github.com/joshr17/HCL, ``image/main.py`` (``criterion``, ``estimator='hard'``),
    the authors' code (their ``temperature`` is a global there); only the projection head's
    normalisation (their ``Model.forward``) is added here."""
    out_1, out_2 = F.normalize(out_1, dim=-1), F.normalize(out_2, dim=-1)
    batch_size = out_1.shape[0]
    out = torch.cat([out_1, out_2], dim=0)
    neg = torch.exp(torch.mm(out, out.t().contiguous()) / temperature)
    mask = get_negative_mask(batch_size)
    neg = neg.masked_select(mask).view(2 * batch_size, -1)
    pos = torch.exp(torch.sum(out_1 * out_2, dim=-1) / temperature)
    pos = torch.cat([pos, pos], dim=0)
    N = batch_size * 2 - 2
    imp = (beta * neg.log()).exp()
    reweight_neg = (imp * neg).sum(dim=-1) / imp.mean(dim=-1)
    Ng = (-tau_plus * N * pos + reweight_neg) / (1 - tau_plus)
    Ng = torch.clamp(Ng, min=N * np.e ** (-1 / temperature))
    return (-torch.log(pos / (pos + Ng))).mean()


@pytest.mark.parametrize("beta", [0.5, 1.0])
def test_equals_the_authors_code_in_value_and_gradient(beta):
    """Catches importance weights that are detached, normalised by their sum instead of their mean, or
    raised to e^{β s} instead of e^{β s/τ}, against joshr17/HCL ``image/main.py`` (value and gradient
    w.r.t. the embeddings, 1e-5; the reference in float64)."""
    out0, out1 = embeddings(5, dtype=torch.float64)
    ours = HCL(temperature=0.5, beta=beta, tau_plus=0.1)
    assert_same_value_and_gradient(
        lambda a, b: ours(simclr_handover(a, b)).value,
        lambda a, b: authors_hcl_loss(a, b, tau_plus=0.1, beta=beta, temperature=0.5),
        out0,
        out1,
    )


def test_at_beta_zero_it_is_the_debiased_loss_and_a_larger_beta_weighs_hard_negatives_more():
    """Catches β ignored (HCL = Debiased at every β) or applied with the wrong sign."""
    handover = simclr_handover(*embeddings(6))
    debiased = Debiased(temperature=0.5, tau_plus=0.1)(handover).value
    assert HCL(beta=0.0)(handover).value.item() == pytest.approx(debiased.item(), abs=1e-6)
    assert HCL(beta=1.0)(handover).value > debiased  # R weighted towards the larger e_k exceeds their plain sum


@pytest.mark.parametrize("beta", [-0.5, float("nan")])
def test_a_bad_beta_is_one_error_naming_it(beta):
    with pytest.raises(ConfigError, match=r"^HCL: beta must be >= 0"):
        HCL(beta=beta)
    with pytest.raises(ConfigError, match=r"^HCL: tau_plus \(the class prior\) must be in \[0, 1\)"):
        HCL(tau_plus=1.0)


def test_a_negative_beta_through_the_cli_is_one_error_line_before_training(tmp_path, monkeypatch, capsys):
    """Catches a bad β that reaches training (a traceback, or a run folder left behind) instead of one
    ``error:`` line naming the option, exit status 2."""
    monkeypatch.chdir(tmp_path)
    loss = ["--model.init_args.loss=ssl_app.losses.HCL", "--model.init_args.loss.init_args.beta=-1"]
    with pytest.raises(SystemExit) as exit_info:
        main(["fit", "--config", QUICKSTART, *SMALL, *loss])
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert exit_info.value.code == 2 and len(lines) == 1, err[-3000:]
    # refused while parsing (the range is beta's annotation), naming the option and the range in words
    assert lines[0] == "error: model.init_args.loss.init_args.beta: must be >= 0 and finite, got -1" and "Traceback" not in err
    assert list(tmp_path.iterdir()) == []
