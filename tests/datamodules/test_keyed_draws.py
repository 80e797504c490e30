"""The keyed random numbers of the training views (``datamodules.keyed_draws``): uniform, a function
of each sample's key alone, and the same on Python ints as on tensors."""

from __future__ import annotations

import torch

from datamodules.keyed_draws import absorb, batch_state, fmix32, generator_seed, keyed_uniforms, uniforms_after


def uniforms(seed: int, epoch: int, indices: list[int], views: int = 2, columns: int = 35) -> torch.Tensor:
    index = torch.tensor(indices, dtype=torch.int64)
    return keyed_uniforms(torch.full_like(index, seed), torch.full_like(index, epoch), index, views, columns)


def test_a_samples_numbers_depend_on_its_key_only():
    """Catches numbers that depend on the batch a sample lands in or its place there (what would
    make DDP ranks, or another batch size, draw other views)."""
    together = uniforms(0, 3, [5, 9, 2]).view(2, 3, 35)
    for position, index in enumerate([5, 9, 2]):
        alone = uniforms(0, 3, [index]).view(2, 1, 35)
        assert torch.equal(together[:, position], alone[:, 0])
    # Another seed, epoch, sample or view: other numbers.
    base = uniforms(0, 3, [5])
    for other in (uniforms(1, 3, [5]), uniforms(0, 4, [5]), uniforms(0, 3, [6])):
        assert not torch.isclose(base, other).any()
    assert not torch.isclose(base[0], base[1]).any()


def test_the_numbers_are_uniform_and_uncorrelated():
    """Catches a biased or correlated hash: the views' distributions (tests/datamodules/test_device_augment.py)
    rest on U(0, 1) numbers. 64 000 samples × 2 views × 35 columns; 6-sigma bounds."""
    u = uniforms(7, 0, list(range(64_000)))
    n = u.numel()
    assert u.dtype == torch.float32 and 0 <= u.min() and u.max() < 1
    assert abs(u.mean().item() - 0.5) < 6 * (1 / 12 / n) ** 0.5
    assert abs(u.var().item() - 1 / 12) < 6 * (1 / 180 / n) ** 0.5  # Var of (u - 1/2)² is 1/180
    counts = torch.histc(u, bins=16, min=0, max=1)
    expected = n / 16
    assert ((counts - expected).abs() < 6 * expected**0.5).all()
    for a, b in ((u[:, :-1], u[:, 1:]), (u[:-1], u[1:])):  # neighbouring columns, neighbouring samples/views
        correlation = torch.corrcoef(torch.stack((a.flatten(), b.flatten())))[0, 1]
        assert abs(correlation.item()) < 6 / a.numel() ** 0.5


def test_python_ints_and_tensors_hash_alike():
    """The PIL path hashes Python ints, the batched paths int64 tensors: the same function (no
    overflow on either, values below 2³²)."""
    words = torch.tensor([0, 1, 2**31, 2**32 - 1, 123_456_789], dtype=torch.int64)
    hashed = fmix32(words)
    assert hashed.tolist() == [fmix32(int(word)) for word in words]
    assert 0 <= hashed.min() and hashed.max() < 2**32
    assert len({generator_seed(0, epoch, index) for epoch in range(3) for index in range(1000)}) == 3000


def python_uniform(seed: int, epoch: int, index: int, view: int, column: int) -> float:
    """One keyed number through the hash on Python ints, word by word (the definition)."""
    h = 2  # the batched paths' domain word
    for word in (seed, seed >> 32, epoch, index, view, column):
        h = absorb(h, word)
    return (h >> 8) * 2.0**-24


def test_the_numbers_are_the_hash_of_each_key_word_by_word():
    """Catches a batched hash that drifts from its definition (a wrong word order, a word masked
    differently, an overflow on the device): every number equals the word-by-word hash on Python
    ints, with seed and epoch given as ints (one per batch, as the device path hashes them on the
    host) or as tensors, for seeds and indices past 2³²."""
    for seed, epoch in ((0, 0), (11, 4), (2**40 + 5, 12), (2**63 - 1, 2**31)):
        index = torch.tensor([0, 7, 2**32 - 1, 2**32 + 3, 123_456_789_012])
        from_ints = keyed_uniforms(seed, epoch, index, 2, 3)
        from_tensors = keyed_uniforms(torch.full_like(index, seed), torch.full_like(index, epoch), index, 2, 3)
        assert torch.equal(from_ints, from_tensors)
        expected = [[python_uniform(seed, epoch, int(i), v, c) for c in range(3)] for v in range(2) for i in index]
        assert from_ints.tolist() == expected


def test_the_numbers_are_those_of_earlier_versions():
    """The keyed numbers are part of what a checkpoint resumes (the views after the resume must be
    those the interrupted run would have seen): pinned values, as every version since the keyed
    views draws them."""
    index = torch.tensor([0, 7, 2**32 + 3])
    got = (keyed_uniforms(11, 4, index, 2, 3) * 2**24).long().tolist()
    assert got == [
        [9427182, 6953356, 14860455],
        [3494252, 10915442, 16207252],
        [16407093, 6399638, 455969],
        [15496645, 6185972, 9330935],
        [11425123, 8403413, 15429816],
        [10167138, 6702982, 5598328],
    ]
    assert generator_seed(11, 4, 7) == 8617823400830019214


def test_a_batch_state_on_the_device_gives_the_same_numbers():
    """What a CUDA graph of the views takes as its input (``datamodules.view_graphs``): the batch's seed
    and epoch hashed on the host into one word, held in a one-element int64 tensor. Catches a state
    absorbed otherwise than the word-by-word hash (other views in a graph than eagerly)."""
    index = torch.tensor([0, 7, 2**32 + 3, 123_456_789_012])
    for seed, epoch in ((0, 0), (11, 4), (2**40 + 5, 2**31)):
        state = batch_state(seed, epoch)
        assert 0 <= state < 2**32
        expected = keyed_uniforms(seed, epoch, index, 2, 35)
        assert torch.equal(uniforms_after(state, index, 2, 35), expected)
        assert torch.equal(uniforms_after(torch.tensor(state), index, 2, 35), expected)
