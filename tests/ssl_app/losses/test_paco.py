"""PaCo against a direct float64 loop of its formula, and its limits: SupCon without centres, balanced
cross-entropy with α = 0; the prior (training only, from counts, in the state dict); unlabelled anchors."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from ssl_app.errors import ConfigError
from ssl_app.losses import MaskedSimilarities, PaCo, SupCon
from ssl_app.losses.base import masked_info_nce
from tests.helpers import HostSyncRecorder, loss_value

N, M, C = 7, 11, 4
COUNTS = [60, 25, 9, 2]
LABELS = torch.tensor([0, 1, 2, 3, -1, 1, 0])  # anchor 4 is unlabelled


def centred(loss_fn: PaCo, classes: int) -> PaCo:
    """``loss_fn`` with identity centres on ``classes``-wide features (``classify(f) == f``), so a
    test hands the centre logits it wants as the anchors' features."""
    loss_fn.classifier = nn.Linear(classes, classes)
    with torch.no_grad():
        loss_fn.classifier.weight.copy_(torch.eye(classes))
        loss_fn.classifier.bias.zero_()
    return loss_fn


def paco(loss_fn: PaCo, sim, pos, neg, centre_logits=None, anchor_labels=None, stats=False):
    """PaCo called the one way, with ``centre_logits`` as the classifier's output (``centred``)."""
    if centre_logits is not None:
        centred(loss_fn, centre_logits.shape[1])
    result = loss_fn(MaskedSimilarities(sim, pos, neg, anchor_features=centre_logits, anchor_labels=anchor_labels), stats)
    return result if stats else result.value


def problem(seed: int = 0):
    """Random similarities, masks with ignored entries (neither positive nor negative), centre logits."""
    g = torch.Generator().manual_seed(seed)
    sim = torch.rand(N, M, generator=g) * 2 - 1
    state = torch.randint(0, 3, (N, M), generator=g)  # 0 positive, 1 negative, 2 ignored
    state[:, 0] = 0  # every anchor has a sample positive (its own key)
    pos, neg = state == 0, state == 1
    centres = torch.randn(N, C, generator=g) * 3
    return sim, pos, neg, centres


def reference(sim, pos, neg, centres, labels, counts, tau, alpha, training, normalise) -> float:
    """The module docstring's formula, one anchor and one candidate at a time, in Python floats."""
    total, anchors = 0.0, 0
    log_prior = [math.log(n / sum(counts)) for n in counts] if counts else None
    for i in range(sim.shape[0]):
        y = int(labels[i]) if labels is not None else -1
        has_centres = centres is not None and y >= 0
        candidates = [float(sim[i, j]) / tau for j in range(sim.shape[1]) if pos[i, j] or neg[i, j]]
        centre_logit = []
        if has_centres:
            centre_logit = [float(centres[i, c]) + (log_prior[c] if training else 0.0) for c in range(centres.shape[1])]
        log_denominator = math.log(sum(math.exp(v) for v in candidates + centre_logit))
        weighted, weight_sum = 0.0, 0.0
        for j in range(sim.shape[1]):
            if pos[i, j] and alpha > 0:
                weighted += alpha * (float(sim[i, j]) / tau - log_denominator)
                weight_sum += alpha
        if has_centres:
            weighted += centre_logit[y] - log_denominator
            weight_sum += 1.0
        if weight_sum == 0:
            continue
        total += -weighted / (weight_sum if normalise else 1.0)
        anchors += 1
    return total / max(anchors, 1)


# --- the formula ---------------------------------------------------------------------------------
@pytest.mark.parametrize("normalise", [True, False], ids=["weighted_mean", "summed"])
@pytest.mark.parametrize("training", [True, False], ids=["train", "eval"])
@pytest.mark.parametrize("seed", [0, 1])
def test_matches_a_float64_loop_of_the_formula(seed, training, normalise):
    """Catches a wrong weight (α on the centre, 1 on samples), a centre logit divided by τ, the prior
    added in eval (or missing in training), ignored entries in the denominator, a wrong normalisation."""
    sim, pos, neg, centres = problem(seed)
    tau, alpha = 0.2, 0.3
    loss_fn = PaCo(tau, alpha=alpha, class_counts=COUNTS, normalise_weights=normalise).train(training)
    value = paco(loss_fn, sim, pos, neg, centre_logits=centres, anchor_labels=LABELS)
    expected = reference(sim, pos, neg, centres, LABELS, COUNTS, tau, alpha, training, normalise)
    assert value.dtype == torch.float32
    assert value.item() == pytest.approx(expected, rel=1e-5, abs=1e-5)


def test_the_loop_is_sensitive_to_what_the_tests_rely_on():
    """Control: the reference itself separates the cases the loss test must tell apart."""
    sim, pos, neg, centres = problem(0)
    args = (sim, pos, neg, centres, LABELS, COUNTS, 0.2, 0.3)
    assert reference(*args, training=True, normalise=True) != pytest.approx(reference(*args, training=False, normalise=True))
    assert reference(*args, training=True, normalise=True) != pytest.approx(reference(*args, training=True, normalise=False))


@pytest.mark.parametrize("alpha", [0.05, 1.0])
def test_without_centres_it_is_alpha_times_supcon_summed(alpha):
    """Catches centre-free PaCo that is not SupCon with weight α per positive (issue 13's summed form)."""
    sim, pos, neg, _ = problem(2)
    tau = 0.1
    summed = paco(PaCo(tau, alpha=alpha, normalise_weights=False), sim, pos, neg)
    per_anchor, has_pos = masked_info_nce(sim / tau, pos, neg)  # SupCon's L_out: the mean over P(i)
    supcon_summed = (per_anchor * pos.sum(dim=1)).sum() / has_pos.sum()
    assert summed.item() == pytest.approx(alpha * supcon_summed.item(), rel=1e-6)
    # With the authors' normalisation the weights cancel: SupCon itself.
    mean = paco(PaCo(tau, alpha=alpha, normalise_weights=True), sim, pos, neg)
    assert mean.item() == pytest.approx(loss_value(SupCon(tau), sim, pos, neg).item(), rel=1e-6)


@pytest.mark.parametrize("normalise", [True, False])
def test_alpha_zero_without_sample_candidates_is_balanced_cross_entropy(normalise):
    """Catches a prior with the wrong sign or scale, or one added outside training (balanced softmax, Ren et al. 2020)."""
    _, _, _, centres = problem(3)
    labels = torch.tensor([0, 1, 2, 3, 1, 1, 0])
    none = torch.zeros(N, M, dtype=torch.bool)
    loss_fn = PaCo(0.1, alpha=0.0, class_counts=COUNTS, normalise_weights=normalise)
    prior = torch.log(torch.tensor(COUNTS, dtype=torch.float32) / sum(COUNTS))
    trained = paco(loss_fn, torch.zeros(N, M), none, none, centre_logits=centres, anchor_labels=labels)
    torch.testing.assert_close(trained, F.cross_entropy(centres + prior, labels))
    evaluated = paco(loss_fn.eval(), torch.zeros(N, M), none, none, centre_logits=centres, anchor_labels=labels)
    torch.testing.assert_close(evaluated, F.cross_entropy(centres, labels))


def test_alpha_towards_zero_keeps_the_samples_in_the_denominator():
    """α → 0 removes the sample positives' terms, not the samples from the softmax (the loop's limit)."""
    sim, pos, neg, centres = problem(4)
    labels = torch.tensor([0, 1, 2, 3, 1, 1, 0])
    tiny = paco(PaCo(0.2, alpha=1e-7, class_counts=COUNTS), sim, pos, neg, centre_logits=centres, anchor_labels=labels)
    zero = paco(PaCo(0.2, alpha=0.0, class_counts=COUNTS), sim, pos, neg, centre_logits=centres, anchor_labels=labels)
    assert tiny.item() == pytest.approx(zero.item(), rel=1e-5)
    prior = torch.log(torch.tensor(COUNTS, dtype=torch.float32) / sum(COUNTS))
    assert zero.item() > F.cross_entropy(centres + prior, labels).item() + 0.1


# --- the prior -----------------------------------------------------------------------------------
def test_the_prior_changes_the_training_loss_only():
    """Catches a prior that is ignored, or that leaks into validation/test."""
    sim, pos, neg, centres = problem(5)
    balanced = PaCo(0.2, alpha=0.3, class_counts=[10, 10, 10, 10])
    skewed = PaCo(0.2, alpha=0.3, class_counts=COUNTS)
    args = (sim, pos, neg)
    kwargs = {"centre_logits": centres, "anchor_labels": LABELS}
    assert paco(balanced, *args, **kwargs).item() != pytest.approx(paco(skewed, *args, **kwargs).item(), abs=1e-3)
    assert paco(balanced.eval(), *args, **kwargs).item() == pytest.approx(paco(skewed.eval(), *args, **kwargs).item(), abs=1e-7)


def test_a_class_without_training_samples_is_never_a_centre_in_training():
    """Catches log 0 = -inf turning into NaN (0 · -inf) in the value or the gradient."""
    sim, pos, neg, centres = problem(6)
    labels = torch.tensor([0, 1, 2, 0, -1, 1, 2])  # class 3 has no samples and is no anchor's label
    centres.requires_grad_(True)
    loss_fn = PaCo(0.2, alpha=0.3, class_counts=[5, 3, 2, 0])
    value = paco(loss_fn, sim, pos, neg, centre_logits=centres, anchor_labels=labels)
    value.backward()
    assert torch.isfinite(value) and torch.isfinite(centres.grad).all()
    assert (centres.grad[:, 3] == 0).all()  # its centre gets exp(-inf) = 0 probability
    assert loss_fn.log_prior[3].item() == -math.inf


def test_the_prior_is_a_buffer_that_a_state_dict_restores():
    """Catches a prior that a checkpoint does not carry (validate/test/resume would lose it)."""
    trained = PaCo(0.05, alpha=0.02, class_counts=COUNTS)
    assert "log_prior" in trained.state_dict()
    fresh = PaCo(0.05, alpha=0.02)
    assert fresh.num_classes is None
    fresh.load_state_dict(trained.state_dict())
    torch.testing.assert_close(fresh.log_prior, torch.log(torch.tensor(COUNTS, dtype=torch.float32) / sum(COUNTS)))
    assert fresh.num_classes == C


# --- unlabelled anchors -------------------------------------------------------------------------
def test_an_unlabelled_anchor_has_no_centre_term():
    """An anchor with label -1 gets the sample term alone (InfoNCE over its key): no own centre, and
    no centre in its denominator, so its centre logits get no gradient. Catches label -1 indexing
    the last centre (one_hot of -1) or a crash."""
    sim, pos, neg, centres = problem(7)
    centres.requires_grad_(True)
    unlabelled = torch.full((N,), -1)
    loss_fn = PaCo(0.2, alpha=0.3, class_counts=COUNTS)
    value = paco(loss_fn, sim, pos, neg, centre_logits=centres, anchor_labels=unlabelled)
    value.backward()
    torch.testing.assert_close(value, loss_value(SupCon(0.2), sim, pos, neg))
    assert (centres.grad == 0).all()
    # Mixed: only the unlabelled row's centre logits are untouched.
    centres.grad = None
    paco(loss_fn, sim, pos, neg, centre_logits=centres, anchor_labels=LABELS).backward()
    assert (centres.grad[4] == 0).all() and (centres.grad[LABELS >= 0] != 0).any(dim=1).all()


def test_an_unlabelled_anchor_without_sample_positive_is_skipped():
    """Catches a 0/0 (NaN) for an anchor with nothing to pull towards."""
    sim, pos, neg, centres = problem(8)
    pos[4] = False
    value = paco(PaCo(0.2, alpha=0.3, class_counts=COUNTS), sim, pos, neg, centre_logits=centres, anchor_labels=LABELS)
    expected = reference(sim, pos, neg, centres, LABELS, COUNTS, 0.2, 0.3, True, True)
    assert value.item() == pytest.approx(expected, rel=1e-5)


# --- contracts -----------------------------------------------------------------------------------
def test_stats_report_positives_and_the_own_centre_probability():
    sim, pos, neg, centres = problem(9)
    loss_fn = PaCo(0.2, alpha=0.3, class_counts=COUNTS).eval()
    stats = paco(loss_fn, sim, pos, neg, centre_logits=centres, anchor_labels=LABELS, stats=True).stats
    assert stats["num_positives"].item() == pytest.approx(pos.sum(dim=1).float().mean().item())
    with torch.no_grad():
        logits = torch.cat([(sim / 0.2).masked_fill(~(pos | neg), -math.inf), centres], dim=1)
        probs = torch.softmax(logits, dim=1)[:, M:]
    labelled = LABELS >= 0
    expected = probs[labelled, LABELS[labelled]].mean()
    assert stats["centre_prob"].item() == pytest.approx(expected.item(), rel=1e-5)
    assert {"effective_negatives", "pos_sim", "mean_neg_sim"} <= set(stats)


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"alpha": -0.1}, "alpha"),
        ({"alpha": math.nan}, "alpha"),
        ({"temperature": 0.0}, "temperature"),
        ({"class_counts": [3, -1]}, "class_counts"),
        ({"class_counts": []}, "class_counts"),
        ({"class_counts": [0, 0]}, "class_counts"),
        ({"class_counts": [2.5, 1]}, "class_counts"),
    ],
)
def test_bad_options_are_config_errors_naming_them(kwargs, match):
    with pytest.raises(ConfigError, match=match):
        PaCo(**kwargs)


def test_training_without_a_prior_says_where_it_comes_from():
    sim, pos, neg, centres = problem(0)
    with pytest.raises(ConfigError, match="train_class_counts"):
        paco(PaCo(0.2), sim, pos, neg, centre_logits=centres, anchor_labels=LABELS)
    # Outside training the prior is not needed.
    assert torch.isfinite(paco(PaCo(0.2).eval(), sim, pos, neg, centre_logits=centres, anchor_labels=LABELS))


@pytest.mark.parametrize(
    "centres,labels,match",
    [
        (torch.zeros(N - 1, C), LABELS, r"anchor_features must have one row per anchor \(7\), got 6"),
        (torch.zeros(N, C), None, r"anchor_labels must be given with anchor_features"),
        (torch.zeros(N, C), LABELS[:3], r"anchor_labels must be \[7\]"),
        (torch.zeros(N, C + 1), LABELS, "5 centre logits per anchor but the prior has 4 classes"),
    ],
)
def test_bad_centre_inputs_name_the_argument(centres, labels, match):
    sim, pos, neg, _ = problem(0)
    with pytest.raises(ValueError, match=match):
        paco(PaCo(0.2, class_counts=COUNTS), sim, pos, neg, centre_logits=centres, anchor_labels=labels)


def test_hparams_and_repr():
    loss_fn = PaCo(0.05, alpha=0.02)
    assert loss_fn.hparams() == {"temperature": 0.05, "alpha": 0.02, "normalise_weights": True}
    assert "PaCo(temperature=0.05, alpha=0.02, normalise_weights=True)" in repr(loss_fn)
    assert loss_fn.uses_labels and loss_fn.needs_anchor_features


def test_bf16_inputs_are_computed_in_float32():
    """Catches centre logits (or s/τ) used in bf16: at τ = 0.05 that costs ~0.1 in the loss."""
    sim, pos, neg, centres = problem(10)
    loss_fn = PaCo(0.05, alpha=0.3, class_counts=COUNTS)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        amp = paco(loss_fn, sim.bfloat16(), pos, neg, centre_logits=centres.bfloat16(), anchor_labels=LABELS)
    exact = paco(loss_fn, sim.bfloat16().float(), pos, neg, centre_logits=centres.bfloat16().float(), anchor_labels=LABELS)
    assert amp.dtype == torch.float32
    assert amp.item() == pytest.approx(exact.item(), abs=1e-5)


def test_forward_and_backward_with_centres_have_no_host_sync():
    sim, pos, neg, centres = problem(11)
    sim.requires_grad_(True)
    centres.requires_grad_(True)
    loss_fn = PaCo(0.1, alpha=0.3, class_counts=COUNTS)
    with HostSyncRecorder() as recorder:
        paco(loss_fn, sim, pos, neg, centre_logits=centres, anchor_labels=LABELS).backward()
    assert recorder.syncs == []


def test_paco_declares_no_chance_value():
    """Catches a chance value declared for PaCo: its centre logits are a classifier's outputs with
    the class prior added, not similarities, so "every similarity equal" does not fix the loss."""
    sim, pos, neg, centres = problem(12)
    loss_fn = PaCo(0.2, alpha=0.5, class_counts=COUNTS)
    stats = paco(loss_fn, torch.full_like(sim, 0.5), pos, neg, centre_logits=centres, anchor_labels=LABELS, stats=True).stats
    assert loss_fn.chance_value(pos, neg) is None and "chance" not in stats
