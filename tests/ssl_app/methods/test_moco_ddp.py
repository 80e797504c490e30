"""MoCo's queue and the memory bank under DDP, with real processes (gloo, 2 ranks).

Each rank drives the training step the way Lightning does (``contrast`` → loss → backward →
gradients averaged over ranks as DistributedDataParallel does → optimiser step → key-encoder
EMA → ``on_after_backward``). The encoders are BatchNorm-free, so 2 ranks × B must equal
1 rank × 2B exactly: same keys, same queue, same bank, same loss and gradients. Shuffle-BN is
checked separately with a stand-in key encoder that records which images it saw.
"""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F

from ssl_app.losses import InfoNCE, PaCo, Spectral
from ssl_app.methods import MemoryBank, MoCo
from tests.ranks import gloo_rank

pytestmark = pytest.mark.slow  # real processes (gloo); see docs/testing.md

WORLD = 2
B = 3  # per rank
STEPS = 5
QUEUE = 16  # not a multiple of the 6 (or 12 symmetric) keys per step: the ring wraps
BANK = 20
PROJ = 16
#: PaCo's candidates: the batch's keys and queries besides the queue (the queries with gradient).
PACO_CANDIDATES = {"batch_negatives": True, "query_candidates": True}


def make_moco(symmetric: bool = False, norm: str = "group", paco: bool = False, spectral: bool = False, **options) -> MoCo:
    torch.manual_seed(0)
    loss = PaCo(temperature=0.2, alpha=0.5, class_counts=[5, 3, 2]) if paco else InfoNCE(temperature=0.2)
    model = MoCo(
        loss=Spectral() if spectral else loss,
        backbone="small_cnn",
        backbone_norm=norm,
        proj_layers=2,
        proj_hidden_dim=32,
        proj_dim=PROJ,
        proj_batch_norm=norm == "batch",
        queue_size=QUEUE,
        momentum=0.9,
        symmetric=symmetric,
        **options,
    )
    if paco:  # the centres, as setup would build them (this test drives the steps without a Trainer)
        model.loss.prepare(model.feature_dim, 3, None, fitting=False)
    return model


def make_bank(spectral: bool = False) -> MemoryBank:
    torch.manual_seed(0)
    loss = Spectral() if spectral else InfoNCE(temperature=0.1)
    return MemoryBank(loss=loss, backbone="small_cnn", backbone_norm="group", proj_dim=PROJ, bank_size=BANK)


def global_batch(step: int, size: int = WORLD * B) -> tuple:
    g = torch.Generator().manual_seed(100 + step)
    views = (torch.randn(size, 3, 8, 8, generator=g), torch.randn(size, 3, 8, 8, generator=g))
    labels = torch.randint(0, 3, (size,), generator=g)
    indices = torch.randperm(BANK, generator=g)[:size]
    return views, labels, indices


def rank_slice(batch: tuple, rank: int) -> tuple:
    (view_1, view_2), labels, indices = batch
    part = slice(rank * B, (rank + 1) * B)
    return (view_1[part], view_2[part]), labels[part], indices[part]


def average_gradients(model: torch.nn.Module, world: int) -> None:
    for p in model.parameters():
        if p.grad is not None and world > 1:
            dist.all_reduce(p.grad)
            p.grad /= world


def drive(model, rank: int, world: int, steps: int) -> dict:
    """Train ``steps`` steps as Lightning would; return what each step stored and the final state."""
    optimizer = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.5)
    stored, first = [], {}
    for step in range(steps):
        data = global_batch(step)
        if world > 1:
            data = rank_slice(data, rank)
        optimizer.zero_grad()
        contrast = model.contrast(data)
        loss = model.compute_loss(contrast).value
        loss.backward()
        average_gradients(model, world)
        if step == 0:
            loss = loss.detach().clone()
            if world > 1:
                dist.all_reduce(loss)
                loss /= world
            grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
            first = {"loss": loss, "grads": grads}
        optimizer.step()
        if isinstance(model, MoCo):
            model.update_key_encoder(model.momentum_at(step))
        stored.append(tuple(t.clone() for t in model._pending))
        model.on_after_backward()
    state = {k: v.clone() for k, v in model.state_dict().items() if k.startswith(("queue.", "bank.", "key_"))}
    return {"stored": stored, "state": state, **first}


def shuffle_check(rank: int) -> dict:
    """``global_keys`` with shuffle-BN, on a stand-in key encoder that records its input."""
    model = make_moco()
    model._has_bn = True  # force the shuffle path
    seen = []

    def key_embed(images):
        seen.append(images[:, 0, 0, 0].round().long().clone())
        return F.normalize(images.flatten(1)[:, :PROJ], dim=1)

    model.key_embed = key_embed
    torch.manual_seed(7 + rank)  # different global RNG per rank: the permutation must still agree
    images = torch.randn(WORLD * 4, 3, 8, 8, generator=torch.Generator().manual_seed(3))
    images[:, 0, 0, 0] = torch.arange(WORLD * 4, dtype=torch.float32)
    keys = model.global_keys(images[rank * 4 : (rank + 1) * 4])
    return {"keys": keys, "expected": F.normalize(images.flatten(1)[:, :PROJ], dim=1), "seen": seen[0]}


def batch_norm_keys(rank: int) -> torch.Tensor:
    """A real BatchNorm key encoder with shuffle-BN: every rank must end up with the same global keys."""
    model = make_moco(norm="batch")
    assert model._has_bn
    data = rank_slice(global_batch(0), rank)
    contrast = model.contrast(data)
    assert torch.isfinite(model.loss(contrast).value)
    return model._pending[0]


def _worker(rank: int, init_file: str, out_dir: str) -> None:
    torch.set_num_threads(1)
    with gloo_rank(rank, WORLD, init_file):
        results = {
            "moco": drive(make_moco(), rank, WORLD, STEPS),
            "moco_symmetric": drive(make_moco(symmetric=True), rank, WORLD, STEPS),
            "moco_paco": drive(make_moco(paco=True), rank, WORLD, STEPS),
            "moco_paco_recipe": drive(make_moco(paco=True, **PACO_CANDIDATES), rank, WORLD, STEPS),
            "bank": drive(make_bank(), rank, WORLD, 2),
            "moco_spectral": drive(make_moco(spectral=True, **PACO_CANDIDATES), rank, WORLD, STEPS),
            "bank_spectral": drive(make_bank(spectral=True), rank, WORLD, 2),
            "shuffle": shuffle_check(rank),
            "bn_keys": batch_norm_keys(rank),
        }
        torch.save(results, f"{out_dir}/rank{rank}.pt")


@pytest.fixture(scope="module")
def ranks(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("moco_ddp")
    mp.spawn(_worker, args=(str(tmp_path / "init"), str(tmp_path)), nprocs=WORLD, join=True)
    return [torch.load(tmp_path / f"rank{r}.pt", weights_only=False) for r in range(WORLD)]


@pytest.fixture(scope="module")
def single():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return {
            "moco": drive(make_moco(), 0, 1, STEPS),
            "moco_symmetric": drive(make_moco(symmetric=True), 0, 1, STEPS),
            "moco_paco": drive(make_moco(paco=True), 0, 1, STEPS),
            "moco_paco_recipe": drive(make_moco(paco=True, **PACO_CANDIDATES), 0, 1, STEPS),
            "bank": drive(make_bank(), 0, 1, 2),
            "moco_spectral": drive(make_moco(spectral=True, **PACO_CANDIDATES), 0, 1, STEPS),
            "bank_spectral": drive(make_bank(spectral=True), 0, 1, 2),
        }
    finally:
        torch.set_num_threads(threads)


def ring_order(state: dict) -> tuple[torch.Tensor, torch.Tensor]:
    """The queue's contents oldest → newest (it is full in these tests)."""
    order = (state["queue.ptr"] + torch.arange(QUEUE)) % QUEUE
    return state["queue.features"][order], state["queue.labels"][order]


@pytest.mark.parametrize("name", ["moco", "moco_symmetric"])
def test_both_ranks_hold_the_same_queue_of_the_last_global_keys(ranks, name):
    rank0, rank1 = ranks[0][name], ranks[1][name]
    for key, value in rank0["state"].items():
        assert torch.equal(value, rank1["state"][key]), key  # bit-identical, no broadcast needed
    keys_per_step = WORLD * B * (2 if name == "moco_symmetric" else 1)
    state = rank0["state"]
    assert state["queue.ptr"].item() == (STEPS * keys_per_step) % QUEUE
    assert state["queue.filled"].item() == QUEUE
    # the queue is the last QUEUE keys of all steps, in order; each step's keys are rank-major
    all_keys = torch.cat([keys for keys, _ in rank0["stored"]])
    all_labels = torch.cat([labels for _, labels in rank0["stored"]])
    features, labels = ring_order(state)
    assert torch.equal(features, all_keys[-QUEUE:])
    assert torch.equal(labels, all_labels[-QUEUE:])
    step_keys = rank0["stored"][-1][0]
    assert step_keys.shape[0] == keys_per_step
    for step in range(STEPS):
        assert torch.equal(rank0["stored"][step][0], rank1["stored"][step][0])


def test_two_ranks_equal_one_rank_with_the_double_batch(ranks, single):
    distributed, reference = ranks[0]["moco"], single["moco"]
    torch.testing.assert_close(distributed["loss"], reference["loss"], atol=1e-5, rtol=0)
    assert distributed["grads"].keys() == reference["grads"].keys()
    for name, grad in reference["grads"].items():
        torch.testing.assert_close(distributed["grads"][name], grad, atol=1e-5, rtol=1e-4, msg=name)
    for key, value in reference["state"].items():
        torch.testing.assert_close(distributed["state"][key], value, atol=1e-5, rtol=1e-4, msg=key)
    # symmetric: the keys are the same, only laid out rank-major ([r0 v1; r0 v2; r1 v1; r1 v2])
    sym, sym_ref = ranks[0]["moco_symmetric"], single["moco_symmetric"]
    torch.testing.assert_close(sym["loss"], sym_ref["loss"], atol=1e-5, rtol=0)
    keys = sym["stored"][0][0].view(WORLD, 2, B, -1).transpose(0, 1).reshape(2 * WORLD * B, -1)
    torch.testing.assert_close(keys, sym_ref["stored"][0][0], atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("name", ["moco_paco", "moco_paco_recipe"])
def test_paco_two_ranks_equal_one_rank_with_the_double_batch(ranks, single, name):
    """Catches centre logits or label positives that differ under DDP (PaCo: every anchor has its own
    centre, so the mean over ranks of the per-rank means is the global mean), and, with PaCo's
    query candidates, queries not gathered from every rank or their gradient not summed back."""
    distributed, reference = ranks[0][name], single[name]
    torch.testing.assert_close(distributed["loss"], reference["loss"], atol=1e-5, rtol=0)
    assert "loss.classifier.weight" in reference["grads"] and distributed["grads"].keys() == reference["grads"].keys()
    for name, grad in reference["grads"].items():
        torch.testing.assert_close(distributed["grads"][name], grad, atol=1e-5, rtol=1e-4, msg=name)
    for key, value in reference["state"].items():
        torch.testing.assert_close(distributed["state"][key], value, atol=1e-5, rtol=1e-4, msg=key)


@pytest.mark.parametrize("name", ["moco_spectral", "bank_spectral"])
def test_with_a_loss_that_reads_norms_two_ranks_equal_one_rank_with_the_double_batch(ranks, single, name):
    """Catches candidates' norms not gathered as the candidates are (the keys', and the queries' with
    their gradient summed back), and a queue's or bank's norms that differ between ranks or from one
    process (Spectral reads the projections' norms: ``needs_embedding_norms``)."""
    rank0, rank1, reference = ranks[0][name], ranks[1][name], single[name]
    assert any(key.endswith(".norms") for key in reference["state"])
    for key, value in rank0["state"].items():
        assert torch.equal(value, rank1["state"][key]), key
    torch.testing.assert_close(rank0["loss"], reference["loss"], atol=1e-5, rtol=0)
    assert rank0["grads"].keys() == reference["grads"].keys()
    for key, grad in reference["grads"].items():
        torch.testing.assert_close(rank0["grads"][key], grad, atol=1e-5, rtol=1e-4, msg=key)
    for key, value in reference["state"].items():
        torch.testing.assert_close(rank0["state"][key], value, atol=1e-5, rtol=1e-4, msg=key)


def test_bank_updates_reach_every_rank_and_match_one_rank(ranks, single):
    rank0, rank1, reference = ranks[0]["bank"], ranks[1]["bank"], single["bank"]
    for key, value in rank0["state"].items():
        assert torch.equal(value, rank1["state"][key]), key
    torch.testing.assert_close(rank0["loss"], reference["loss"], atol=1e-5, rtol=0)
    for name, grad in reference["grads"].items():
        torch.testing.assert_close(rank0["grads"][name], grad, atol=1e-5, rtol=1e-4, msg=name)
    torch.testing.assert_close(rank0["state"]["bank.features"], reference["state"]["bank.features"], atol=1e-5, rtol=1e-4)
    assert torch.equal(rank0["state"]["bank.labels"], reference["state"]["bank.labels"])
    written = torch.cat([global_batch(step)[2] for step in range(2)]).unique()
    assert torch.equal((rank0["state"]["bank.labels"] >= 0).nonzero().flatten(), written)


def test_shuffle_bn_encodes_a_shared_random_shard_and_restores_the_order(ranks):
    shards = [r["shuffle"]["seen"] for r in ranks]
    everything = torch.cat(shards).sort().values
    assert torch.equal(everything, torch.arange(WORLD * 4))  # one permutation, shared by the ranks
    assert any(set(shard.tolist()) != set(range(r * 4, (r + 1) * 4)) for r, shard in enumerate(shards))
    for r in ranks:
        torch.testing.assert_close(r["shuffle"]["keys"], r["shuffle"]["expected"])  # unshuffled, rank-major
    torch.testing.assert_close(ranks[0]["bn_keys"], ranks[1]["bn_keys"], atol=0, rtol=0)
