"""SplitBatchNorm: per-group statistics in training, plain BatchNorm everywhere else."""

import itertools

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

from ssl_app.errors import ConfigError
from ssl_app.models.split_batchnorm import SplitBatchNorm, convert_to_split_batchnorm, has_batch_norm


class OpNames(TorchDispatchMode):
    """The names of the tensor ops dispatched inside it, views apart (on a GPU: one launch each)."""

    def __init__(self) -> None:
        super().__init__()
        self.names: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if not func.is_view:
            self.names.append(str(func.overloadpacket))
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("regroup", [False, True], ids=["per_sub_batch", "regrouped"])
@pytest.mark.parametrize("shape", [(12, 5), (12, 5, 3, 3)], ids=["1d", "2d"])
def test_each_group_is_normalised_with_its_own_statistics(shape, regroup):
    torch.manual_seed(0)
    bn = SplitBatchNorm(5, num_splits=3)
    bn.regroup = regroup
    nn.init.normal_(bn.weight)
    nn.init.normal_(bn.bias)
    x = torch.randn(shape) * 3 + 1
    out = bn(x)
    for group in range(3):
        part = x[4 * group : 4 * (group + 1)]
        expected = F.batch_norm(part, None, None, bn.weight, bn.bias, training=True, eps=bn.eps)
        torch.testing.assert_close(out[4 * group : 4 * (group + 1)], expected)


@pytest.mark.parametrize("memory_format", [torch.contiguous_format, torch.channels_last], ids=["nchw", "nhwc"])
@pytest.mark.parametrize("regroup", [False, True], ids=["per_sub_batch", "regrouped"])
@pytest.mark.parametrize("shape", [(6, 4), (6, 4, 2, 3)], ids=["1d", "2d"])
def test_running_statistics_move_towards_the_mean_of_the_groups(shape, regroup, memory_format):
    """Every code path (vectors regrouped as channels; images one call per group, or regrouped in
    either layout)."""
    torch.manual_seed(0)
    bn = SplitBatchNorm(4, num_splits=2, momentum=0.5)
    bn.regroup = regroup
    x = torch.randn(shape) * 2 + 3
    bn(x.contiguous(memory_format=memory_format) if x.dim() == 4 else x)
    groups = x.view(2, 3, 4, -1).transpose(2, 3).reshape(2, -1, 4)  # [S, samples·pixels, C]
    mean = groups.mean(dim=1).mean(dim=0)
    var = groups.var(dim=1, unbiased=True).mean(dim=0)
    torch.testing.assert_close(bn.running_mean, 0.5 * torch.zeros(4) + 0.5 * mean)
    torch.testing.assert_close(bn.running_var, 0.5 * torch.ones(4) + 0.5 * var)
    assert bn.num_batches_tracked.item() == 1


def test_channels_last_input_gives_the_same_values_and_gradients_and_stays_channels_last():
    """Catches a regrouping that silently converts NHWC activations to NCHW (every following
    convolution would pay a conversion) or mixes up pixels of the two layouts or of the two ways of
    computing (one call per sub-batch, one call on the regrouped batch)."""
    torch.manual_seed(0)
    x = torch.randn(8, 3, 4, 5) * 2 + 1
    results = []
    for memory_format, regroup in itertools.product((torch.contiguous_format, torch.channels_last), (False, True)):
        bn = SplitBatchNorm(3, num_splits=4)
        bn.regroup = regroup
        nn.init.normal_(bn.weight, generator=torch.Generator().manual_seed(1))
        leaf = x.clone(memory_format=memory_format).requires_grad_(True)
        out = bn(leaf)
        (out * torch.arange(out.numel()).view(out.shape).sin()).sum().backward()
        results.append((out, leaf.grad, bn.weight.grad, bn.running_var))
    assert results[2][0].is_contiguous(memory_format=torch.channels_last)
    assert results[3][0].is_contiguous(memory_format=torch.channels_last)
    for way in results[1:]:
        for expected, got in zip(results[0], way):
            torch.testing.assert_close(got, expected)


@pytest.mark.parametrize("memory_format", [torch.contiguous_format, torch.channels_last], ids=["nchw", "nhwc"])
def test_off_the_cpu_one_batch_norm_call_serves_every_group(memory_format):
    """Issue 38 item 4: on a GPU a small model's step waits on the host's kernel launches, and MoCo's
    split BatchNorm made S = 8 calls (and 8 in the backward) per layer. Catches images split per
    sub-batch off the CPU: there the batch is regrouped for one call forward and one backward (on the
    ``meta`` device, which stands for an accelerator here), and still split on the CPU."""
    counts = {}
    for device in ("meta", "cpu"):
        bn = SplitBatchNorm(4, num_splits=8).to(device)
        x = torch.randn(16, 4, 3, 3, device=device).contiguous(memory_format=memory_format).requires_grad_(True)
        with OpNames() as ops:
            bn(x).sum().backward()
        counts[device] = sum("batch_norm" in name for name in ops.names), len(ops.names)
    assert counts["meta"][0] == 2 and counts["cpu"][0] == 16
    assert counts["meta"][1] <= 25 < counts["cpu"][1]  # every tensor op, forward and backward


@pytest.mark.parametrize("shape", [(8, 3), (8, 3, 2, 2)], ids=["1d", "2d"])
def test_without_affine_parameters_or_running_statistics(shape):
    torch.manual_seed(0)
    bn = SplitBatchNorm(3, num_splits=2, affine=False, track_running_stats=False)
    x = torch.randn(shape)
    out = bn(x)
    for group in range(2):
        part = x[4 * group : 4 * (group + 1)]
        torch.testing.assert_close(out[4 * group : 4 * (group + 1)], F.batch_norm(part, None, None, training=True))


def test_eval_mode_and_state_dict_are_plain_batchnorm():
    """A checkpoint written with ordinary BatchNorm loads, and eval outputs are unchanged."""
    torch.manual_seed(0)
    plain = nn.BatchNorm2d(4)
    plain(torch.randn(8, 4, 2, 2) * 2 + 1)  # some running statistics
    split = SplitBatchNorm(4, num_splits=4)
    split.load_state_dict(plain.state_dict())
    assert {k: v.shape for k, v in split.state_dict().items()} == {k: v.shape for k, v in plain.state_dict().items()}
    x = torch.randn(3, 4, 2, 2)  # any batch size in eval mode
    torch.testing.assert_close(split.eval()(x), plain.eval()(x))


def test_a_batch_that_cannot_be_split_is_a_config_error():
    bn = SplitBatchNorm(3, num_splits=4)
    with pytest.raises(ConfigError, match="split_bn_groups"):
        bn(torch.randn(6, 3))  # not a multiple of 4
    with pytest.raises(ConfigError, match="split_bn_groups"):
        bn(torch.randn(4, 3))  # groups of 1 would have no variance


def test_conversion_keeps_the_parameter_objects_and_finds_nested_layers():
    net = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.Sequential(nn.Conv2d(1, 2, 1), nn.BatchNorm2d(2)))
    weight = net[1].weight
    optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
    convert_to_split_batchnorm(net, 2)
    assert isinstance(net[1], SplitBatchNorm) and isinstance(net[2][1], SplitBatchNorm)
    assert net[1].weight is weight  # the optimiser built before still updates it
    assert any(p is weight for group in optimizer.param_groups for p in group["params"])
    assert has_batch_norm(net) and not has_batch_norm(nn.Linear(2, 2))
