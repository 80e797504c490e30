"""BatchNorm over sub-batches: several "devices" of BatchNorm statistics inside one process.

MoCo on one device leaks through BatchNorm: a query and its positive key are normalised with
statistics of the same images, so the network can match them through those statistics instead
of their content. Splitting the batch into S groups that each use their own statistics — and
shuffling the key batch before the key encoder — gives a key different group-mates than its
query, as Shuffling BN across S GPUs would (He et al. 2020; the remedy of MoCo's CIFAR demo).
"""

from __future__ import annotations

from typing import Optional

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ssl_app.errors import ConfigError


class SplitBatchNorm(nn.modules.batchnorm._BatchNorm):
    """BatchNorm whose training statistics come from ``num_splits`` contiguous sub-batches.

    In training, a batch of N = S·G samples is cut into S groups of G consecutive samples;
    group g is normalised with its own mean and variance (samples ``g·G .. g·G + G − 1``) and
    the running statistics move towards the mean over groups of their statistics. In eval
    mode it is ordinary BatchNorm over the running statistics. Parameters and buffers have
    BatchNorm's names and shapes, so state dicts load both ways.

    Works for [N, C] and [N, C, ...] inputs (the 1-d and 2-d BatchNorms it replaces).

    Two ways to compute the same thing: one ``batch_norm`` over the batch regrouped as [G, S·C, ...]
    (channel block s holds group s; two copies, one call) or one call per sub-batch (no copy, S
    calls, and S more in the backward). Vectors are always regrouped. Images are regrouped on an
    accelerator, where a small model's step waits on the host's kernel launches (MoCo's ResNet-18
    step: ~1,350 fewer tensor ops with S = 8, benchmarks/overhead.py), and split on the CPU, whose
    step is bound by the arithmetic and where the copies cost more (benchmarks/kernels.py);
    :attr:`regroup` overrides the choice.
    """

    #: ``True``: images regrouped for one call; ``False``: one call per sub-batch; ``None``: regrouped off the CPU.
    regroup: Optional[bool] = None

    def __init__(self, num_features: int, num_splits: int, **kwargs) -> None:
        super().__init__(num_features, **kwargs)
        self.num_splits = num_splits

    def _check_input_dim(self, input: Tensor) -> None:
        if input.dim() < 2:
            raise ValueError(f"SplitBatchNorm expects [N, C, ...] input, got shape {tuple(input.shape)}")

    def forward(self, input: Tensor) -> Tensor:
        if not self.training:
            return super().forward(input)
        self._check_input_dim(input)
        n, c, s = input.shape[0], input.shape[1], self.num_splits
        if n % s != 0 or n // s < 2:
            raise ConfigError(
                f"key_bn='split': a training batch of {n} cannot be split into {s} BatchNorm groups of "
                f"at least 2 samples; make the per-process batch size a multiple of model.split_bn_groups "
                f"(now {s}) or lower split_bn_groups"
            )
        factor = self._average_factor()
        tracking = self.track_running_stats and self.running_mean is not None
        # Every group starts from the running statistics and moves its own copy; their mean
        # over groups is the new running statistic.
        mean = self.running_mean.repeat(s).view(s, c) if tracking else None
        var = self.running_var.repeat(s).view(s, c) if tracking else None
        regroup = self.regroup if self.regroup is not None else input.device.type != "cpu"
        if input.dim() == 2 or regroup:
            out = self._grouped_as_channels(input, mean, var, factor)
        else:
            # Images on the CPU: one batch_norm per sub-batch. A sub-batch is a contiguous slice in
            # both memory formats, so nothing is copied and channels_last stays channels_last.
            stats = zip(mean, var) if tracking else [(None, None)] * s  # rows: views, updated in place
            out = torch.cat([
                F.batch_norm(group, group_mean, group_var, self.weight, self.bias, True, factor, self.eps)
                for group, (group_mean, group_var) in zip(input.chunk(s), stats)
            ])  # fmt: skip
        if tracking:
            with torch.no_grad():
                self.running_mean.copy_(mean.mean(dim=0))
                self.running_var.copy_(var.mean(dim=0))
        return out

    def _grouped_as_channels(self, input: Tensor, mean: Optional[Tensor], var: Optional[Tensor], factor: float) -> Tensor:
        """[N, C, ...] → [G, S·C, ...]: channel block g holds group g, so one batch_norm call computes the
        S groups' statistics; ``mean``/``var`` [S, C] move in place. Images in channels_last stay so:
        their [S, G, H, W, C] memory is regrouped as [G, H, W, S, C], one copy each way."""
        n, c, s = input.shape[0], input.shape[1], self.num_splits
        g, rest = n // s, input.shape[2:]
        nhwc = input.dim() == 4 and input.is_contiguous(memory_format=torch.channels_last)
        if nhwc:
            h, w = rest
            grouped = input.permute(0, 2, 3, 1).reshape(s, g, h, w, c).permute(1, 2, 3, 0, 4).reshape(g, h, w, s * c)
            grouped = grouped.permute(0, 3, 1, 2)  # [G, S·C, H, W] in channels_last
        else:
            grouped = input.reshape(s, g, c, *rest).transpose(0, 1).reshape(g, s * c, *rest)
        weight = None if self.weight is None else self.weight.repeat(s)
        bias = None if self.bias is None else self.bias.repeat(s)
        flat_mean = None if mean is None else mean.view(-1)
        flat_var = None if var is None else var.view(-1)
        out = F.batch_norm(grouped, flat_mean, flat_var, weight, bias, True, factor, self.eps)
        if nhwc:
            h, w = rest
            out = out.permute(0, 2, 3, 1).reshape(g, h, w, s, c).permute(3, 0, 1, 2, 4).reshape(n, h, w, c)
            return out.permute(0, 3, 1, 2)
        return out.reshape(g, s, c, *rest).transpose(0, 1).reshape(n, c, *rest)

    def _average_factor(self) -> float:
        """The running-statistics momentum of this step, as ``nn.BatchNorm`` computes it."""
        if not self.track_running_stats or self.num_batches_tracked is None:
            return 0.0 if self.momentum is None else self.momentum
        self.num_batches_tracked.add_(1)
        if self.momentum is None:  # cumulative moving average
            return 1.0 / float(self.num_batches_tracked)
        return self.momentum

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, num_splits={self.num_splits}"


def convert_to_split_batchnorm(module: nn.Module, num_splits: int) -> nn.Module:
    """Replace every ``BatchNorm1d/2d/3d`` in ``module`` by a :class:`SplitBatchNorm` in place.

    The new layers take over the old ones' parameter and buffer *objects*, so an optimiser
    built before the conversion still updates them. Returns ``module`` (or the replacement
    when ``module`` itself is a BatchNorm).
    """
    if isinstance(module, (nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d)):
        split = SplitBatchNorm(
            module.num_features, num_splits, eps=module.eps, momentum=module.momentum,
            affine=module.affine, track_running_stats=module.track_running_stats,
        )  # fmt: skip
        split = split.to(next(iter(module.buffers()), torch.empty(0)).device)
        if module.affine:
            split.weight, split.bias = module.weight, module.bias
        if module.track_running_stats:
            split.running_mean, split.running_var = module.running_mean, module.running_var
            split.num_batches_tracked = module.num_batches_tracked
        split.train(module.training)
        return split
    for name, child in module.named_children():
        replacement = convert_to_split_batchnorm(child, num_splits)
        if replacement is not child:
            setattr(module, name, replacement)
    return module


def has_batch_norm(*modules: nn.Module) -> bool:
    """True if any of ``modules`` contains a BatchNorm layer (of any kind)."""
    return any(isinstance(m, nn.modules.batchnorm._BatchNorm) for module in modules for m in module.modules())
