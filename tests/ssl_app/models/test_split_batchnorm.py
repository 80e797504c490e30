"""SplitBatchNorm: per-group statistics in training, plain BatchNorm everywhere else."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from ssl_app.errors import ConfigError
from ssl_app.models.split_batchnorm import SplitBatchNorm, convert_to_split_batchnorm, has_batch_norm


@pytest.mark.parametrize("shape", [(12, 5), (12, 5, 3, 3)], ids=["1d", "2d"])
def test_each_group_is_normalised_with_its_own_statistics(shape):
    torch.manual_seed(0)
    bn = SplitBatchNorm(5, num_splits=3)
    nn.init.normal_(bn.weight)
    nn.init.normal_(bn.bias)
    x = torch.randn(shape) * 3 + 1
    out = bn(x)
    for group in range(3):
        part = x[4 * group : 4 * (group + 1)]
        expected = F.batch_norm(part, None, None, bn.weight, bn.bias, training=True, eps=bn.eps)
        torch.testing.assert_close(out[4 * group : 4 * (group + 1)], expected)


@pytest.mark.parametrize("shape", [(6, 4), (6, 4, 2, 3)], ids=["1d", "2d"])
def test_running_statistics_move_towards_the_mean_of_the_groups(shape):
    """Both code paths (vectors regrouped as channels; images one call per group)."""
    torch.manual_seed(0)
    bn = SplitBatchNorm(4, num_splits=2, momentum=0.5)
    x = torch.randn(shape) * 2 + 3
    bn(x)
    groups = x.view(2, 3, 4, -1).transpose(2, 3).reshape(2, -1, 4)  # [S, samples·pixels, C]
    mean = groups.mean(dim=1).mean(dim=0)
    var = groups.var(dim=1, unbiased=True).mean(dim=0)
    torch.testing.assert_close(bn.running_mean, 0.5 * torch.zeros(4) + 0.5 * mean)
    torch.testing.assert_close(bn.running_var, 0.5 * torch.ones(4) + 0.5 * var)
    assert bn.num_batches_tracked.item() == 1


def test_channels_last_input_gives_the_same_values_and_gradients_and_stays_channels_last():
    """Catches a regrouping that silently converts NHWC activations to NCHW (every following
    convolution would pay a conversion) or mixes up pixels of the two layouts."""
    torch.manual_seed(0)
    x = torch.randn(8, 3, 4, 5) * 2 + 1
    results = []
    for memory_format in (torch.contiguous_format, torch.channels_last):
        bn = SplitBatchNorm(3, num_splits=4)
        nn.init.normal_(bn.weight, generator=torch.Generator().manual_seed(1))
        leaf = x.clone(memory_format=memory_format).requires_grad_(True)
        out = bn(leaf)
        (out * torch.arange(out.numel()).view(out.shape).sin()).sum().backward()
        results.append((out, leaf.grad, bn.weight.grad, bn.running_var))
    assert results[1][0].is_contiguous(memory_format=torch.channels_last)
    for nchw, nhwc in zip(*results):
        torch.testing.assert_close(nhwc, nchw)


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
