"""Embedding a whole split outside the Trainer's loops, as the monitor callbacks need it: one pass per
split and evaluation, shared by every callback (kNN bank and queries, the metrics' clean embeddings and
train-split negatives, the projector), from the images the datamodule keeps on the module's device
when it can (``datamodules.eval_images``), never through compiled code."""

from __future__ import annotations

import contextlib
import itertools
import weakref
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Literal, Optional

import lightning as L
import torch
import torch.nn.functional as F
from torch import Tensor

from callbacks.gather import SampleBuffer, Samples
from ssl_app.errors import ConfigError
from ssl_app.methods.base import ContrastiveMethod
from ssl_app.models import eager

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


@contextlib.contextmanager
def evaluation_mode(module: torch.nn.Module) -> Iterator[None]:
    """Eval mode, no_grad and eager code inside; afterwards every submodule gets back its own
    train/eval flag.

    Eager: a backbone compiled for training (``compile: true``) runs uncompiled here
    (``ssl_app.models.eager``), since its graphs were traced in training mode with gradients and
    the training batch's shape: an evaluation would otherwise recompile them for eval mode and for
    each new batch shape (seconds to a minute per evaluation).
    """
    modes = [(m, m.training) for m in module.modules()]
    module.eval()
    try:
        with torch.no_grad(), eager():
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


def inference_batch_size(datamodule: Any, device: torch.device) -> Optional[int]:
    """The datamodule's evaluation batch size on ``device`` (``eval_batch_size``); ``None``: its
    loaders' default (a datamodule without ``inference_batch_size``)."""
    resolve = getattr(datamodule, "inference_batch_size", None)
    return resolve(device) if callable(resolve) else None


def device_images(datamodule: Any, split: str, device: torch.device) -> Any:
    """The datamodule's ``EvalImages`` of ``split`` on ``device`` (``eval_on``), or ``None``."""
    kept = getattr(datamodule, "eval_images", None)
    return kept(split, device) if callable(kept) else None


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

    Images: the datamodule's ``eval_images(split, device)`` (clean passes, when it keeps the split
    on the module's device: batches normalised there, no worker and no copy), else its
    ``embedding_dataloader(split, views, augment, rank=, world_size=)``; both shards are in index
    order, so with ``max_samples`` the pass stops at the first batch past it. Batches of
    ``batch_size`` (default: the datamodule's ``inference_batch_size``).

    **One pass per evaluation.** Passes are cached while the model's weights and buffers are
    unchanged (their in-place version counters) and it stays on one device, and a cached pass
    serves every request it holds the answer to: the same split, views and transform; a subset
    (``max_samples``) of a pass that covered it; a request without backbone features from a pass
    with them; and, for one clean view, ``features="backbone"`` (the normalised backbone rows) from
    a pass that kept them. So the kNN bank and queries, ``EmbeddingMetrics``' clean embeddings
    (with their backbone features) and train-split negatives and the projector read one pass per
    split, in any callback order and with any ``batch_size`` (which changes no embedding). Every view
    is a fixed function of the sample index, so a cached pass equals a repeated one.
    """
    keep_backbone = keep_backbone and features == "projection" and _encode_gives_embed(pl_module)
    request = PassRequest(features, keep_backbone, max_samples)
    found = cached_pass(trainer, pl_module, split, views, augment, request)
    if found is not None:
        return found
    run = request
    if features == "backbone" and views == 1 and _encode_gives_embed(pl_module):
        run = PassRequest("projection", True, max_samples)  # one encode: serves projection requests too
    version = _state_version(pl_module)
    buffer = _embed(trainer, pl_module, split, views, augment, run, batch_size, who)
    cache = _PASSES.setdefault(pl_module, {})
    for key in list(cache):  # passes of an earlier state are stale
        cache[key] = [entry for entry in cache[key] if entry.version == version]
        if not cache[key]:
            del cache[key]
    entry = _Pass(version, run, buffer.local())
    cache.setdefault(_base_key(trainer, pl_module, split, views, augment), []).append(entry)
    return buffer if run == request else _serve(entry, request)


def cached_pass(
    trainer: L.Trainer, pl_module: L.LightningModule, split: str, views: int, augment: bool, request: PassRequest
) -> Optional[SampleBuffer]:
    """A cached pass's answer to ``request`` (``None``: no current pass holds it)."""
    entries = _PASSES.get(pl_module, {}).get(_base_key(trainer, pl_module, split, views, augment), [])
    version = _state_version(pl_module) if entries else None
    for entry in entries:
        if entry.version == version and entry.serves(request, views):
            return _serve(entry, request)
    return None


@dataclass(frozen=True)
class PassRequest:
    """What a caller of ``embed_split`` asks of a pass: which features, the backbone rows too, which subset."""

    features: Features
    keep_backbone: bool
    max_samples: Optional[int]


@dataclass
class _Pass:
    """A cached pass: the model's state ``version``, what it ``ran`` and its rows."""

    version: tuple[int, ...]
    ran: PassRequest
    rows: Samples

    def serves(self, request: PassRequest, views: int) -> bool:
        covers = self.ran.max_samples is None or (request.max_samples is not None and request.max_samples <= self.ran.max_samples)
        if not covers:
            return False
        if request.features == self.ran.features:
            return self.ran.keep_backbone or not request.keep_backbone
        # the normalised backbone rows of a projection pass that kept them (one view)
        return request.features == "backbone" and views == 1 and self.ran.keep_backbone


def _serve(entry: _Pass, request: PassRequest) -> SampleBuffer:
    rows = entry.rows
    if request.features != entry.ran.features:  # backbone rows of a projection pass (none: no rows)
        features = rows.features if rows.backbone is None else F.normalize(rows.backbone, dim=1).unsqueeze(1)
        rows = Samples(rows.indices, rows.labels, features)
    elif not request.keep_backbone and rows.backbone is not None:
        rows = Samples(rows.indices, rows.labels, rows.features)
    return SampleBuffer.holding(rows, request.max_samples)


def _base_key(trainer: L.Trainer, pl_module: L.LightningModule, split: str, views: int, augment: bool) -> tuple:
    return (split, views, augment, trainer.global_rank, trainer.world_size, str(pl_module.device))


def _encode_gives_embed(module: torch.nn.Module) -> bool:
    """Whether ``module.encode(x)[1]`` is ``module.embed(x)``: a ``ContrastiveMethod`` that does not
    override ``embed`` (one that does, e.g. to wrap it, keeps its own ``embed`` and no backbone rows)."""
    return isinstance(module, ContrastiveMethod) and type(module).embed is ContrastiveMethod.embed


# Per module: {(split, views, augment, rank, world size, device): [cached passes]}; dropped with the module.
_PASSES: weakref.WeakKeyDictionary[torch.nn.Module, dict] = weakref.WeakKeyDictionary()


def _state_version(module: torch.nn.Module) -> tuple[int, ...]:
    """Changes whenever a parameter or buffer is modified in place (optimiser steps, EMA, BatchNorm
    statistics, loading a state dict)."""
    return tuple(t._version for t in itertools.chain(module.parameters(), module.buffers()))


def split_batches(
    trainer: L.Trainer,
    datamodule: Any,
    split: str,
    views: int,
    augment: bool,
    max_samples: Optional[int],
    batch_size: Optional[int],
    device: torch.device,
) -> Iterable[tuple[list[Tensor], Tensor, Tensor]]:
    """This rank's shard of ``split`` below ``max_samples`` as ``(views, labels, indices)`` batches on
    ``device``: from the datamodule's device images for clean views, else its embedding dataloader."""
    rank, world_size = trainer.global_rank, trainer.world_size
    batch_size = batch_size or inference_batch_size(datamodule, device)
    kept = None if augment else device_images(datamodule, split, device)
    if kept is not None:
        for images, labels, indices in kept.batches(batch_size, rank, world_size, limit=max_samples):
            yield [images] * views, labels, indices
        return
    loader = datamodule.embedding_dataloader(
        split, views=views, augment=augment, batch_size=batch_size, rank=rank, world_size=world_size
    )
    for images, labels, indices in loader:
        if max_samples is not None:  # indices are still on the host: no device sync
            mask = indices < max_samples
            if not mask.any():
                break
            images, labels, indices = [v[mask] for v in images], labels[mask], indices[mask]
        images = [v.to(device, non_blocking=True) for v in images]
        yield images, labels.to(device, non_blocking=True), indices.to(device, non_blocking=True)


def _embed(
    trainer: L.Trainer,
    pl_module: L.LightningModule,
    split: str,
    views: int,
    augment: bool,
    run: PassRequest,
    batch_size: Optional[int],
    who: str,
) -> SampleBuffer:
    datamodule = require_embedding_dataloader(trainer, who)
    buffer = SampleBuffer(run.max_samples)
    encode = encoder(pl_module, run.features)
    batches = split_batches(trainer, datamodule, split, views, augment, run.max_samples, batch_size, pl_module.device)
    with evaluation_mode(pl_module), trainer.precision_plugin.forward_context():
        for images, labels, indices in batches:
            if run.keep_backbone:  # one forward pass gives both; the backbone of the first view only
                backbone, first = pl_module.encode(images[0])
                embedded = [first, *(encode(v) for v in images[1:])]
            else:
                backbone, embedded = None, [encode(v) for v in images]
            buffer.add(indices, labels, embedded, backbone)
    return buffer
