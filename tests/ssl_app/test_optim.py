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
