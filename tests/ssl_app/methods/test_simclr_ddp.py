"""DDP equivalence with real processes: 2 ranks × B equals 1 rank × 2B (loss and gradients, and
the measured hardness profile summed over ranks).

The encoder is BatchNorm-free (``small_cnn`` with GroupNorm, no BN in the head): per-rank
BatchNorm statistics differ from whole-batch ones by design, which is what SyncBN is for.
Gradients are averaged across ranks exactly as DistributedDataParallel does.
"""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from ssl_app.losses import InfoNCE
from ssl_app.losses.hardness import HardnessProfile
from ssl_app.methods import SimCLR
from ssl_app.temperature import Adaptive, Learnable
from tests.generic import loss_cases
from tests.ranks import gloo_rank

BATCH_PER_RANK = 6
pytestmark = pytest.mark.slow  # real processes (gloo); see docs/testing.md

WORLD = 2


#: Temperature policies whose τ depends on the batch (MACL's rule) or that train (CLIP's), under 2 ranks.
POLICIES = {"Adaptive": lambda: Adaptive(base=0.2, alpha=0.5, a0=0.1), "Learnable": lambda: Learnable(init=0.2)}


def make_model() -> SimCLR:
    torch.manual_seed(0)
    return SimCLR(
        loss=InfoNCE(temperature=0.2),
        backbone="small_cnn",
        backbone_norm="group",
        proj_layers=2,
        proj_hidden_dim=32,
        proj_dim=16,
        proj_batch_norm=False,
    )


def make_batch(size: int) -> tuple:
    generator = torch.Generator().manual_seed(1)
    view_1 = torch.randn(size, 3, 16, 16, generator=generator)
    view_2 = torch.randn(size, 3, 16, 16, generator=generator)
    labels = torch.randint(0, 3, (size,), generator=generator)
    return (view_1, view_2), labels, torch.arange(size)


def loss_and_grads(model: SimCLR, batch: tuple, tau: list | None = None) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The loss of ``batch`` and the gradients of ``model``'s parameters (the call's τ appended to ``tau``)."""
    contrast = model.contrast(batch)
    result = model.loss(contrast)
    result.value.backward()
    if tau is not None:
        tau.append(result.tau)
    return result.value.detach(), {name: p.grad.detach().clone() for name, p in model.named_parameters()}


def hardness(model: SimCLR, batch: tuple) -> tuple[torch.Tensor, torch.Tensor]:
    """The loss's hardness profile of ``batch``, summed over the processes there are (a collective)."""
    metric = HardnessProfile()
    metric.update(model.loss(model.contrast(batch), with_stats=True).hardness)
    return metric.compute()


def rank_slice(batch: tuple, rank: int) -> tuple:
    (view_1, view_2), labels, index = batch
    part = slice(rank * BATCH_PER_RANK, (rank + 1) * BATCH_PER_RANK)
    return (view_1[part], view_2[part]), labels[part], index[part]


def make_loss(loss_case, model: SimCLR):
    """The case's loss, ``prepare``d for the model's features, its own parameters drawn the same way
    in every process."""
    torch.manual_seed(0)
    return loss_case.ready(model.feature_dim)


def _worker(rank: int, init_file: str, out_file: str) -> None:
    with gloo_rank(rank, WORLD, init_file):
        results = {}
        for case in loss_cases():  # every registered loss in each of its examples (tests/generic.py)
            model = make_model()
            model.loss = make_loss(case, model)
            batch = rank_slice(make_batch(WORLD * BATCH_PER_RANK), rank)
            loss, grads = loss_and_grads(model, batch)
            dist.all_reduce(loss)
            loss /= WORLD
            for grad in grads.values():  # what DDP does: average the gradients over ranks
                dist.all_reduce(grad)
                grad /= WORLD
            results[case.id] = {"loss": loss, "grads": grads, "hardness": hardness(model, batch)}
        for name, policy in POLICIES.items():  # the τ policies that read the batch or have a gradient
            model = make_model()
            model.loss = InfoNCE(temperature=policy())
            batch = rank_slice(make_batch(WORLD * BATCH_PER_RANK), rank)
            tau: list = []
            loss, grads = loss_and_grads(model, batch, tau)
            for grad in grads.values():
                dist.all_reduce(grad)
                grad /= WORLD
            results[name] = {"tau": tau[0], "grads": grads}
        if rank == 0:
            torch.save(results, out_file)


@pytest.fixture(scope="module")
def two_rank_results(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("ddp")
    out_file = str(tmp_path / "rank0.pt")
    mp.spawn(_worker, args=(str(tmp_path / "init"), out_file), nprocs=WORLD, join=True)
    return torch.load(out_file)


def test_two_ranks_equal_one_rank_with_double_batch(two_rank_results, loss_case):
    """Catches a loss whose value or gradient depends on how the batch is split over processes
    (every registered loss in each of its examples)."""
    model = make_model()
    model.loss = make_loss(loss_case, model)
    single_loss, single_grads = loss_and_grads(model, make_batch(WORLD * BATCH_PER_RANK))
    distributed = two_rank_results[loss_case.id]

    torch.testing.assert_close(distributed["loss"], single_loss, atol=1e-5, rtol=0)
    assert single_grads.keys() == distributed["grads"].keys()
    for name, grad in single_grads.items():
        assert grad.abs().sum() > 0, f"{name} received no gradient"
        torch.testing.assert_close(distributed["grads"][name], grad, atol=1e-5, rtol=1e-4, msg=name)


def test_two_ranks_sum_to_the_single_process_hardness_profile(two_rank_results, loss_case):
    """Catches a hardness profile not summed over ranks (each rank's own half), averaged over them
    (the counts would halve), or shares normalised over one rank's candidates only."""
    model = make_model()
    model.loss = make_loss(loss_case, model)
    mean_share, negatives = hardness(model, make_batch(WORLD * BATCH_PER_RANK))
    distributed_share, distributed_negatives = two_rank_results[loss_case.id]["hardness"]
    assert negatives.sum() > 0
    torch.testing.assert_close(distributed_negatives, negatives, atol=0, rtol=0)
    torch.testing.assert_close(distributed_share, mean_share, atol=1e-5, rtol=1e-4)


def test_two_ranks_give_the_single_process_adaptive_and_learnable_tau(two_rank_results):
    """Catches an adaptive τ from each rank's own positives (the ranks would train at different τ) and
    a learnable τ whose gradient is not that of the whole batch."""
    for name, policy in POLICIES.items():
        model = make_model()
        model.loss = InfoNCE(temperature=policy())
        tau: list = []
        _, single_grads = loss_and_grads(model, make_batch(WORLD * BATCH_PER_RANK), tau)
        distributed = two_rank_results[name]
        torch.testing.assert_close(distributed["tau"], tau[0], atol=1e-6, rtol=0, msg=name)
        for key, grad in single_grads.items():
            torch.testing.assert_close(distributed["grads"][key], grad, atol=1e-5, rtol=1e-4, msg=f"{name}: {key}")
    assert two_rank_results["Learnable"]["grads"]["loss.temperature.log_scale"] != 0
