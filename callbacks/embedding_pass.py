"""Embedding a whole split outside the Trainer's loops, as the monitor callbacks need it."""

from __future__ import annotations

import itertools
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Literal, Optional

import lightning as L
import torch
import torch.nn.functional as F
from torch import Tensor

from callbacks.gather import SampleBuffer
from ssl_app.errors import ConfigError
from ssl_app.methods.base import ContrastiveMethod

Features = Literal["projection", "backbone"]


def require_embedding_dataloader(trainer: L.Trainer, who: str) -> Any:
    """The trainer's datamodule if it offers ``embedding_dataloader``; a ConfigError otherwise."""
    datamodule = getattr(trainer, "datamodule", None)
    if datamodule is not None and callable(getattr(datamodule, "embedding_dataloader", None)):
        return datamodule
    found = "no datamodule (dataloaders passed directly)" if datamodule is None else type(datamodule).__name__
    raise ConfigError(
        f"{who} needs a datamodule with embedding_dataloader(split, views, augment, rank=, world_size=) "
        f"(any datamodules.ContrastiveDataModule); got {found}"
    )


@contextmanager
def evaluation_mode(module: torch.nn.Module) -> Iterator[None]:
    """Eval mode and no_grad inside; afterwards every submodule gets back its own train/eval flag."""
    modes = [(m, m.training) for m in module.modules()]
    module.eval()
    try:
        with torch.no_grad():
            yield
    finally:
        for m, training in modes:
            m.training = training


def encoder(pl_module: L.LightningModule, features: Features) -> Callable[[Tensor], Tensor]:
    """``projection``: ``pl_module.embed`` (z); ``backbone``: the L2-normalised ``pl_module(images)``."""
    if features == "projection":
        return pl_module.embed
    if features == "backbone":
        return lambda images: F.normalize(pl_module(images), dim=1)
    raise ConfigError(f"features must be 'projection' or 'backbone', got {features!r}")


def embed_split(
    trainer: L.Trainer,
    pl_module: L.LightningModule,
    split: str,
    *,
    views: int,
    augment: bool,
    features: Features = "projection",
    max_samples: Optional[int] = None,
    batch_size: Optional[int] = None,
    who: str = "callback",
    keep_backbone: bool = False,
) -> SampleBuffer:
    """This rank's disjoint shard of ``split``, embedded in eval mode (a ``SampleBuffer``).

    ``keep_backbone`` (with ``features="projection"``): also keep each sample's backbone features,
    unnormalised, from the same forward pass (``pl_module.encode``; ``Samples.backbone``), for a
    ``ContrastiveMethod`` whose ``embed`` is ``encode``'s projection (not overridden).

    Uses ``datamodule.embedding_dataloader(split, views, augment, rank=, world_size=)``, whose
    shards are in index order, so with ``max_samples`` the pass stops at the first batch past it.

    Passes are cached while the model's weights and buffers are unchanged (their in-place
    version counters), so callbacks that need the same embeddings at the same point (the clean
    validation embeddings of ``EmbeddingMetrics`` and ``KNNMonitor``) share one pass (a pass that
    kept the backbone features also serves a request without them). Every view is a fixed
    function of the sample index, so a cached pass equals a repeated one.
    """
    keep_backbone = keep_backbone and features == "projection" and _encode_gives_embed(pl_module)
    key = (split, views, augment, features, max_samples, batch_size, trainer.global_rank, trainer.world_size)
    version = _state_version(pl_module)
    cache = _PASSES.setdefault(pl_module, {})
    for kept in (True,) if keep_backbone else (False, True):
        if cache.get((*key, kept), (None,))[0] == version:
            return cache[(*key, kept)][1]
    key = (*key, keep_backbone)
    buffer = _embed(trainer, pl_module, split, views, augment, features, max_samples, batch_size, who, keep_backbone)
    stale = [k for k, (v, _) in cache.items() if v != version]
    for k in stale:
        del cache[k]
    cache[key] = (version, buffer)
    return buffer


def _encode_gives_embed(module: torch.nn.Module) -> bool:
    """Whether ``module.encode(x)[1]`` is ``module.embed(x)``: a ``ContrastiveMethod`` that does not
    override ``embed`` (one that does, e.g. to wrap it, keeps its own ``embed`` and no backbone rows)."""
    return isinstance(module, ContrastiveMethod) and type(module).embed is ContrastiveMethod.embed


# Per module: {pass key: (state version, buffer)}; dropped with the module.
_PASSES: weakref.WeakKeyDictionary[torch.nn.Module, dict] = weakref.WeakKeyDictionary()


def _state_version(module: torch.nn.Module) -> tuple[int, ...]:
    """Changes whenever a parameter or buffer is modified in place (optimiser steps, EMA, BatchNorm
    statistics, loading a state dict)."""
    return tuple(t._version for t in itertools.chain(module.parameters(), module.buffers()))


def _embed(
    trainer: L.Trainer,
    pl_module: L.LightningModule,
    split: str,
    views: int,
    augment: bool,
    features: Features,
    max_samples: Optional[int],
    batch_size: Optional[int],
    who: str,
    keep_backbone: bool = False,
) -> SampleBuffer:
    datamodule = require_embedding_dataloader(trainer, who)
    loader = datamodule.embedding_dataloader(
        split, views=views, augment=augment, batch_size=batch_size, rank=trainer.global_rank, world_size=trainer.world_size
    )
    buffer = SampleBuffer(max_samples)
    encode = encoder(pl_module, features)
    device = pl_module.device
    with evaluation_mode(pl_module), trainer.precision_plugin.forward_context():
        for images, labels, indices in loader:
            mask = buffer.keep_mask(indices)  # indices are still on the host: no device sync
            if mask is not None:
                if not mask.any():
                    break
                images, labels, indices = [v[mask] for v in images], labels[mask], indices[mask]
            images = [v.to(device, non_blocking=True) for v in images]
            if keep_backbone:  # one forward pass gives both; the backbone of the first view only
                backbone, first = pl_module.encode(images[0])
                embedded = [first, *(encode(v) for v in images[1:])]
            else:
                backbone, embedded = None, [encode(v) for v in images]
            buffer.add(indices.to(device), labels.to(device), embedded, backbone)
    return buffer
