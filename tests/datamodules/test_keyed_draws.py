"""The keyed random numbers of the training views (``datamodules.keyed_draws``): uniform, a function
of each sample's key alone, and the same on Python ints as on tensors."""

from __future__ import annotations

import torch

from datamodules.keyed_draws import fmix32, generator_seed, keyed_uniforms


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
