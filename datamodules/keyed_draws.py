"""Random numbers that are a function of ``(seed, epoch, sample index, view)`` only.

A training view must not depend on which process or DataLoader worker made it, nor on what that
process drew before: then a run resumed mid-epoch, a run with another ``num_workers`` and a run on
another number of DDP processes see the same views as an uninterrupted one, and seed ``k`` gives
the same views to every configuration (a paired comparison of losses). So instead of a stateful
RNG, each number is a counter-based hash of its key: the words of the key are absorbed one by one
into a 32-bit state with MurmurHash3's finaliser ``fmix32`` (a bijection of 32-bit integers with
full avalanche), ``h ← fmix32(h ⊕ fmix32(word + φ mod 2³²))``, φ = 0x9E3779B9.

Every operation keeps its operands below 2⁴⁹ (a 32 × 32-bit product is taken with the constant's
16-bit halves), so the same code runs exactly on Python ints and on int64 tensors of any device,
without overflow, without a Python loop over samples and without a host sync. U(0, 1) floats take
the hash's top 24 bits, the resolution of ``torch.rand``'s float32.

On a GPU each tensor operation is a kernel launch, so :func:`keyed_uniforms` hashes what it can
once, on the host: the batch's seed and epoch when they are Python ints (one per batch, as the
training sampler gives them) and the view and column numbers (cached per device); only the sample
indices go through the hash rounds on the device, then all views and columns of the batch at once.
:func:`uniforms_after` starts from that state (:func:`batch_state`) given as a number or as a
one-element tensor on the device, which a CUDA graph of the views takes as an input
(``datamodules.view_graphs``). The numbers are the same every way (``tests/datamodules/test_keyed_draws.py``
checks them against the hash on Python ints).
"""

from __future__ import annotations

import functools
from typing import NamedTuple, TypeVar, Union

import torch
from torch import Tensor

Word = TypeVar("Word", int, Tensor)
_MASK = 0xFFFFFFFF
_GOLDEN = 0x9E3779B9
# Domain words: the PIL path's per-sample generator seed and the batched path's numbers never share a key.
_GENERATOR_SEED, _UNIFORM = 1, 2


class ViewKeys(NamedTuple):
    """The keys of a batch's views: the sampler's ``seed`` and ``epoch`` (Python ints, the batch's,
    or int64 ``[B]`` tensors) and each sample's ``index`` (int64 ``[B]``)."""

    seed: Union[int, Tensor]
    epoch: Union[int, Tensor]
    index: Tensor

    def to(self, device: torch.device, non_blocking: bool = False) -> ViewKeys:
        """The same keys with their tensors on ``device`` (ints stay ints)."""
        return ViewKeys(*(k.to(device, non_blocking=non_blocking) if isinstance(k, Tensor) else k for k in self))


class HashedKeys(NamedTuple):
    """A batch's view keys with its seed and epoch already hashed: ``state`` (:func:`batch_state`, a
    Python int or an int64 tensor of one element on the index's device) and each sample's ``index``."""

    state: Union[int, Tensor]
    index: Tensor


def key_columns(keys: Union[ViewKeys, Tensor]) -> ViewKeys:
    """``keys`` as :class:`ViewKeys`: as they are, or the columns of int64 rows ``(seed, epoch, index)`` ``[B, 3]``."""
    return keys if isinstance(keys, ViewKeys) else ViewKeys(*keys.unbind(1))


def _mul32(x: Word, constant: int) -> Word:
    """``x · constant mod 2³²`` for ``0 <= x < 2³²``: ``x · c_lo + 2¹⁶ · (x · c_hi mod 2¹⁶)`` with the
    constant's 16-bit halves ``c_lo``, ``c_hi``, every term below 2⁴⁹ (no int64 overflow)."""
    low, high = constant & 0xFFFF, constant >> 16
    if isinstance(x, Tensor):  # 5 kernels
        return torch.add(x * low, (x * high).bitwise_and_(0xFFFF), alpha=0x10000).bitwise_and_(_MASK)
    return (x * low + ((x * high) & 0xFFFF) * 0x10000) & _MASK


def fmix32(h: Word) -> Word:
    """MurmurHash3's 32-bit finaliser."""
    h = h ^ (h >> 16)  # a new tensor: the in-place steps below leave the caller's alone
    h = _mul32(h, 0x85EBCA6B)
    h ^= h >> 13
    h = _mul32(h, 0xC2B2AE35)
    h ^= h >> 16
    return h


def _word(word: Word) -> Word:
    """``fmix32(word + φ mod 2³²)``, what :func:`absorb` mixes into the state (any integer word:
    only its value mod 2³² counts)."""
    return fmix32((word + _GOLDEN) & _MASK)  # type: ignore[operator]


def absorb(h: Word, word: Union[int, Tensor]) -> Word:
    """The state after absorbing ``word`` (an integer, or a tensor of them; taken mod 2³²)."""
    return fmix32(h ^ _word(word))  # type: ignore[operator]


def _batch_state(seed: Word, epoch: Word, domain: int) -> Word:
    h = absorb(domain, seed)  # the low 32 bits of the seed, then the high ones
    for word in (seed >> 32, epoch):
        h = absorb(h, word)
    return h


def _key_state(seed: Word, epoch: Word, index: Word, domain: int) -> Word:
    return absorb(_batch_state(seed, epoch, domain), index)


def batch_state(seed: int, epoch: int) -> int:
    """The state of the view numbers' hash after a batch's ``seed`` and ``epoch`` (below 2³²): where
    :func:`uniforms_after` starts each sample's key."""
    return _batch_state(seed, epoch, _UNIFORM)


@functools.cache
def _counter_words(count: int, device: torch.device) -> Tensor:
    """``_word(k)`` for ``k = 0 … count − 1``, int64 on ``device``: hashed once on the host (one copy
    to the device per process), not in every call. Never evicted: a captured CUDA graph reads it by
    its address (``datamodules.view_graphs``)."""
    return torch.tensor([_word(k) for k in range(count)], dtype=torch.int64, device=device)


def generator_seed(seed: int, epoch: int, index: int) -> int:
    """A 64-bit seed for the generator that draws every view of training sample ``index`` in ``epoch``."""
    h = _key_state(seed, epoch, index, _GENERATOR_SEED)
    return (absorb(h, 0) << 32) | absorb(h, 1)


def keyed_uniforms(seed: Union[int, Tensor], epoch: Union[int, Tensor], index: Tensor, num_views: int, columns: int) -> Tensor:
    """U(0, 1) float32 numbers ``[num_views · B, columns]`` for the samples ``(seed, epoch, index)``
    (``index`` int64 ``[B]``; ``seed`` and ``epoch`` ints, or int64 ``[B]`` on the same device),
    view-major: row ``v · B + b`` holds view ``v`` of sample ``b``; column ``c`` of it is the state of
    the key absorbed with ``v`` and then ``c``."""
    return uniforms_after(_batch_state(seed, epoch, _UNIFORM), index, num_views, columns)  # int seed, epoch: hashed here


def uniforms_after(state: Union[int, Tensor], index: Tensor, num_views: int, columns: int) -> Tensor:
    """:func:`keyed_uniforms` of the samples ``index`` of a batch whose seed and epoch gave ``state``
    (:func:`batch_state`): a Python int, or an int64 tensor of one element (or ``[B]``) on the
    index's device."""
    h = absorb(state, index)  # [B]
    h = fmix32(h.view(1, -1) ^ _counter_words(num_views, index.device).view(-1, 1))  # [V, B]
    h = fmix32(h.unsqueeze(2) ^ _counter_words(columns, index.device).view(1, 1, -1))  # [V, B, columns]
    return (h >> 8).to(torch.float32).mul_(2.0**-24).view(-1, columns)
