"""Random numbers that are a function of ``(seed, epoch, sample index, view)`` only.

A training view must not depend on which process or DataLoader worker made it, nor on what that
process drew before: then a run resumed mid-epoch, a run with another ``num_workers`` and a run on
another number of DDP processes see the same views as an uninterrupted one, and seed ``k`` gives
the same views to every configuration (a paired comparison of losses). So instead of a stateful
RNG, each number is a counter-based hash of its key: the words of the key are absorbed one by one
into a 32-bit state with MurmurHash3's finaliser ``fmix32`` (a bijection of 32-bit integers with
full avalanche), ``h ← fmix32(h ⊕ fmix32(word + φ))``, φ = 0x9E3779B9.

Every operation keeps its operands below 2⁴⁹ (a 32 × 32-bit product is taken in 16-bit halves),
so the same code runs exactly on Python ints and on int64 tensors of any device, without overflow,
without a Python loop over samples and without a host sync. U(0, 1) floats take the hash's top
24 bits, the resolution of ``torch.rand``'s float32.
"""

from __future__ import annotations

from typing import TypeVar, Union

import torch
from torch import Tensor

Word = TypeVar("Word", int, Tensor)
_MASK = 0xFFFFFFFF
_GOLDEN = 0x9E3779B9
# Domain words: the PIL path's per-sample generator seed and the batched path's numbers never share a key.
_GENERATOR_SEED, _UNIFORM = 1, 2


def _mul32(x: Word, constant: int) -> Word:
    """``x · constant mod 2³²`` for ``0 <= x < 2³²``, through 16-bit halves (no int64 overflow)."""
    high = ((x >> 16) * constant) & 0xFFFF
    return ((high << 16) + (x & 0xFFFF) * constant) & _MASK  # type: ignore[return-value]


def fmix32(h: Word) -> Word:
    """MurmurHash3's 32-bit finaliser."""
    h = h ^ (h >> 16)
    h = _mul32(h, 0x85EBCA6B)
    h = h ^ (h >> 13)
    h = _mul32(h, 0xC2B2AE35)
    return h ^ (h >> 16)


def absorb(h: Word, word: Union[int, Tensor]) -> Word:
    """The state after absorbing ``word`` (an integer, or a tensor of them, below 2³²)."""
    return fmix32(h ^ fmix32((word + _GOLDEN) & _MASK))  # type: ignore[operator]


def _key_state(seed: Word, epoch: Word, index: Word, domain: int) -> Word:
    h = absorb(domain, seed & _MASK)  # type: ignore[arg-type]
    for word in (seed >> 32, epoch, index):
        h = absorb(h, word & _MASK)  # type: ignore[operator]
    return h


def generator_seed(seed: int, epoch: int, index: int) -> int:
    """A 64-bit seed for the generator that draws every view of training sample ``index`` in ``epoch``."""
    h = _key_state(seed, epoch, index, _GENERATOR_SEED)
    return (absorb(h, 0) << 32) | absorb(h, 1)


def keyed_uniforms(seed: Tensor, epoch: Tensor, index: Tensor, num_views: int, columns: int) -> Tensor:
    """U(0, 1) float32 numbers ``[num_views · B, columns]`` for the samples ``(seed, epoch, index)``
    (int64 ``[B]`` each, on one device), view-major: row ``v · B + b`` holds view ``v`` of sample ``b``."""
    h = _key_state(seed, epoch, index, _UNIFORM)  # [B]
    view = torch.arange(num_views, device=index.device, dtype=torch.int64).view(num_views, 1)
    column = torch.arange(columns, device=index.device, dtype=torch.int64).view(1, 1, columns)
    h = absorb(absorb(h.view(1, -1), view).unsqueeze(2), column)  # [V, B, columns]
    return ((h >> 8).to(torch.float32) * 2.0**-24).view(-1, columns)
