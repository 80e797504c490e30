"""The learnable τ: its gradient, its bounds, and a real fit that trains, checkpoints and resumes it."""

from __future__ import annotations

import math

import torch
from lightning.pytorch.callbacks import ModelCheckpoint

from ssl_app.losses import InfoNCE, MaskedSimilarities
from ssl_app.methods import SimCLR
from ssl_app.optim import Optimization
from ssl_app.temperature import Learnable, Progress
from tests.generic import TINY_MODEL
from tests.helpers import tiny_trainer
from tests.ssl_app.methods.test_resume import FixedData


def test_the_gradient_equals_autograd_of_the_closed_form_in_float64():
    """Catches a τ detached from its parameter, the wrong parametrisation (t = log τ flips the sign of
    the gradient) and a clamp that blocks the gradient inside the bounds: InfoNCE's dL/dt against
    autograd of L(t) = mean_i [−s_ii e^t + log Σ_j exp(s_ij e^t)] in float64."""
    generator = torch.Generator().manual_seed(0)
    sim = torch.rand(5, 7, generator=generator) * 2 - 1
    pos = torch.zeros(5, 7, dtype=torch.bool)
    pos[torch.arange(5), torch.arange(5)] = True
    neg = ~pos
    neg[0, 6] = False  # an entry in neither mask is left out of the sum
    policy = Learnable(init=0.3)
    loss, grads = InfoNCE(policy), []
    for memo in (None, {}):  # masks with a memo: InfoNCE's precomputed MaskPlan, at a tensor τ
        policy.log_scale.grad = None
        loss(MaskedSimilarities(sim, pos, neg, mask_memo=memo)).value.backward()
        grads.append(policy.log_scale.grad.item())

    t = torch.tensor(math.log(1 / 0.3), dtype=torch.float64, requires_grad=True)
    logits = sim.double() * torch.exp(t)  # s/τ with τ = exp(−t)
    per_anchor = -logits[pos] + torch.logsumexp(logits.masked_fill(~(pos | neg), -math.inf), dim=1)
    per_anchor.mean().backward()
    for grad in grads:
        assert math.isclose(grad, t.grad.item(), rel_tol=1e-5), (grads, t.grad)


def test_at_a_bound_only_a_gradient_that_points_back_inside_passes():
    """Catches a plain clamp (a τ pushed past a bound would stay there for good) and a clamp that lets
    the optimiser push it further out."""
    policy = Learnable(init=0.5, min=0.1, max=1.0)
    with torch.no_grad():
        policy.log_scale.fill_(math.log(1 / 0.05))  # τ = 0.05, below min
    tau = policy.value(Progress())
    assert math.isclose(tau.item(), 0.1, rel_tol=1e-6)
    tau.backward()  # a loss that wants τ smaller: descent would raise t further out
    assert policy.log_scale.grad.item() == 0.0
    policy.log_scale.grad = None
    (-policy.value(Progress())).backward()  # a loss that wants τ larger: descent lowers t, back inside
    assert policy.log_scale.grad.item() > 0


def fit(root, ckpt_path=None) -> tuple[SimCLR, object]:
    torch.manual_seed(0)
    optim = Optimization(lr=0.5, weight_decay=0.1, schedule="constant")
    model = SimCLR(loss=InfoNCE(temperature=Learnable(init=0.5)), optim=optim, **TINY_MODEL)
    checkpoints = ModelCheckpoint(dirpath=root / "ckpt", every_n_epochs=1, save_top_k=-1, filename="{epoch}")
    trainer = tiny_trainer(root, max_epochs=2, enable_checkpointing=True, callbacks=[checkpoints])
    trainer.fit(model, FixedData(), ckpt_path=ckpt_path, weights_only=False)
    return model, trainer


def test_a_short_fit_trains_it_without_weight_decay_and_a_resume_goes_on_from_it(tmp_path):
    """Catches a τ that the optimiser never sees (its value would stay at init), one decayed towards
    τ = 1, one missing from the checkpoint or restored without its optimiser state (the resumed run's
    τ would differ from the uninterrupted run's)."""
    straight, trainer = fit(tmp_path / "straight")
    value = straight.loss.temperature.log_scale.detach()
    assert value.item() != math.log(1 / 0.5)
    groups = trainer.optimizers[0].param_groups
    assert [group["weight_decay"] for group in groups] == [0.1, 0.0]
    assert groups[1]["params"] == [straight.loss.temperature.log_scale]
    halfway = tmp_path / "straight" / "ckpt" / "epoch=0.ckpt"
    saved = torch.load(halfway, weights_only=False)
    assert saved["state_dict"]["loss.temperature.log_scale"].item() not in (value.item(), math.log(1 / 0.5))

    resumed, _ = fit(tmp_path / "resumed", ckpt_path=halfway)
    assert torch.equal(resumed.loss.temperature.log_scale.detach(), value)
