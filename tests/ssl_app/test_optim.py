import math

import pytest
import torch

from ssl_app.errors import ConfigError
from ssl_app.optim import Optimization


def test_cosine_with_warmup():
    optim = Optimization(schedule="cosine", warmup_epochs=1)
    factors = [optim.lr_factor(step, steps_per_epoch=10, total_steps=110) for step in range(110)]
    assert factors[0] == pytest.approx(0.1) and factors[9] == pytest.approx(1.0)
    assert factors[10] == pytest.approx(1.0)
    assert factors[60] == pytest.approx(0.5 * (1 + math.cos(math.pi * 0.5)))
    assert all(a >= b for a, b in zip(factors[10:], factors[11:]))


def test_multistep_counts_epochs():
    optim = Optimization(schedule="multistep", milestones=[2, 4], gamma=0.1)
    assert optim.lr_factor(19, 10, 100) == 1.0
    assert optim.lr_factor(20, 10, 100) == pytest.approx(0.1)
    assert optim.lr_factor(45, 10, 100) == pytest.approx(0.01)


@pytest.mark.parametrize("rule,expected", [("none", 0.1), ("linear", 0.2), ("sqrt", 0.1 * math.sqrt(2))])
def test_lr_scaling_by_global_batch(rule, expected):
    optim = Optimization(lr=0.1, scale_lr=rule, reference_batch_size=256)
    config = optim.build([torch.nn.Parameter(torch.zeros(1))], global_batch_size=512, steps_per_epoch=10, total_steps=100)
    assert config["optimizer"].param_groups[0]["lr"] == pytest.approx(expected * optim.lr_factor(0, 10, 100))


@pytest.mark.parametrize("optimizer", ["sgd", "adamw", "lars"])
def test_each_optimizer_steps(optimizer):
    param = torch.nn.Parameter(torch.ones(3))
    config = Optimization(optimizer=optimizer, lr=0.1).build([param], 256, 10, 100)
    param.sum().backward()
    config["optimizer"].step()
    assert (param < 1).all()


@pytest.mark.parametrize(
    "field,value", [("lr", 0.0), ("momentum", -1.0), ("gamma", 2.0), ("warmup_epochs", -1.0), ("reference_batch_size", 0)]
)
def test_bad_values_name_the_option(field, value):
    with pytest.raises(ConfigError, match=f"optim.{field}"):
        Optimization(**{field: value})


# --- the step each optimiser takes, derived by hand ------------------------------------------
def _two_steps(optimizer: str, **options):
    """Two optimiser steps on f(p) = ½‖p − target‖² (gradient p − target) with the schedule stepped
    between them, as Lightning does with ``interval: step``. Returns (p0, p1, p2, lrs, grads)."""
    p0 = torch.tensor([1.0, -2.0, 0.5], dtype=torch.float64)
    target = torch.tensor([0.25, 0.5, -1.0], dtype=torch.float64)
    param = torch.nn.Parameter(p0.clone())
    config = Optimization(optimizer=optimizer, **options).build([param], 256, steps_per_epoch=2, total_steps=6)
    opt, scheduler = config["optimizer"], config["lr_scheduler"]["scheduler"]
    snapshots, lrs, grads = [p0.clone()], [], []
    for _ in range(2):
        opt.zero_grad()
        (0.5 * (param - target).pow(2).sum()).backward()
        grads.append(param.grad.detach().clone())
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        scheduler.step()
        snapshots.append(param.detach().clone())
    return snapshots, lrs, grads


def test_sgd_step_is_momentum_plus_weight_decay_at_the_scheduled_lr():
    """Catches a wrong SGD update: weight decay or momentum dropped, or the lr schedule not applied per step."""
    lr, mom, wd = 0.1, 0.9, 0.01
    (p0, p1, p2), lrs, (g0, g1) = _two_steps("sgd", lr=lr, momentum=mom, weight_decay=wd, schedule="cosine", warmup_epochs=1.0)
    # warm-up over 2 steps: factors 1/2 then 2/2
    assert lrs == pytest.approx([lr * 0.5, lr * 1.0], abs=0, rel=1e-15)
    buf = g0 + wd * p0
    expected_1 = p0 - lrs[0] * buf
    torch.testing.assert_close(p1, expected_1, rtol=0, atol=1e-15)
    buf = mom * buf + (g1 + wd * p1)
    torch.testing.assert_close(p2, expected_1 - lrs[1] * buf, rtol=0, atol=1e-15)


def test_lars_step_scales_by_the_trust_ratio():
    """Catches a LARS that ignores its layer-wise trust ratio η‖p‖ / (‖g‖ + wd‖p‖) (You et al. 2017)."""
    lr, wd, eta = 0.5, 0.01, 0.001  # η: lightly's default trust coefficient
    (p0, p1, _), lrs, (g0, _) = _two_steps("lars", lr=lr, momentum=0.9, weight_decay=wd, schedule="constant")
    trust = eta * p0.norm() / (g0.norm() + wd * p0.norm())
    torch.testing.assert_close(p1, p0 - lrs[0] * trust * (g0 + wd * p0), rtol=1e-7, atol=1e-12)
    assert lrs[0] == lr


def test_adamw_first_step_is_decoupled_decay_plus_sign_sized_step():
    """Catches AdamW replaced by Adam (L2 in the gradient) or a wrong lr: step 1 moves each weight by lr·sign(g)."""
    lr, wd = 0.01, 0.1
    (p0, p1, _), _, (g0, _) = _two_steps("adamw", lr=lr, weight_decay=wd, schedule="constant")
    # Adam's first bias-corrected step is g/(|g| + eps') = sign(g) (up to eps = 1e-8).
    expected = p0 * (1 - lr * wd) - lr * g0 / (g0.abs() + 1e-8)
    torch.testing.assert_close(p1, expected, rtol=0, atol=1e-12)


def test_multistep_lr_drops_at_the_milestone_step_through_the_scheduler():
    """Catches milestones counted in steps instead of epochs, or a scheduler that is not stepped per step."""
    param = torch.nn.Parameter(torch.zeros(1))
    config = Optimization(lr=1.0, schedule="multistep", milestones=[2], gamma=0.5).build([param], 256, 3, 12)
    opt, scheduler = config["optimizer"], config["lr_scheduler"]["scheduler"]
    seen = []
    for _ in range(8):
        seen.append(opt.param_groups[0]["lr"])
        opt.step()
        scheduler.step()
    assert seen == [1.0] * 6 + [0.5] * 2  # 3 steps per epoch: epoch 2 starts at step 6
    assert config["lr_scheduler"]["interval"] == "step"


def test_sgd_and_adamw_are_fused_when_every_parameter_is_on_cuda_only():
    """Catches the fused kernels (one launch per update; the flag NumericalHealth skips a bad step with
    on the device) chosen on the CPU, where the default's numbers are every earlier version's, or not
    chosen on CUDA; LARS (lightly's) has no fused form."""
    from types import SimpleNamespace

    from ssl_app.optim import fused_pays

    on_cuda = SimpleNamespace(device=torch.device("cuda"))
    on_cpu = torch.nn.Parameter(torch.zeros(2))
    assert fused_pays([on_cuda, on_cuda]) and fused_pays([{"params": [on_cuda]}, {"params": [on_cuda]}])
    assert not fused_pays([on_cuda, on_cpu]) and not fused_pays([{"params": [on_cpu]}]) and not fused_pays([])
    for name in ("sgd", "adamw", "lars"):
        built = Optimization(optimizer=name).build([on_cpu], 256, 10, 100)["optimizer"]
        assert not built.defaults.get("fused")


def test_ranges_parsed_as_types_are_kept_as_plain_numbers():
    """Catches jsonargparse's range types (what the parser gives ``optim.lr: PositiveFinite``) reaching the model's
    hyper-parameters and so a checkpoint, which ``weights_only=True`` could then not load."""
    from ssl_app.checks import NonNegativeFinite, PositiveFinite, PositiveInt
    from ssl_app.optim import Optimization

    optim = Optimization(lr=PositiveFinite(0.1), weight_decay=NonNegativeFinite(0.0), reference_batch_size=PositiveInt(64))
    assert (type(optim.lr), type(optim.weight_decay), type(optim.reference_batch_size)) == (float, float, int)
