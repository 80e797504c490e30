"""The training views replayed from a captured graph (``datamodules.view_graphs``), on the CPU with the
CUDA capture stood in for by a recording that replays the captured call eagerly into the same output
buffer, as a graph does. tests/benchmarks/test_on_device.py checks the real capture on CUDA."""

from __future__ import annotations

import torch

from datamodules.augment import ViewAugmentation
from datamodules.device_augment import BatchViewAugmentation
from datamodules.keyed_draws import ViewKeys
from datamodules.view_graphs import ViewGraphs
from tests.helpers import tiny_data, tiny_trainer


class StandIn:
    """A capture that runs ``fn`` once and replays it into that first output, counting captures."""

    def __init__(self) -> None:
        self.captures = 0

    def __call__(self, fn):
        self.captures += 1
        output = fn()
        return (lambda: output.copy_(fn())), output


def batch(seed: int, size: int = 6, side: int = 12) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    images = torch.randint(0, 256, (size, 3, side, side), dtype=torch.uint8, generator=generator)
    return images, torch.randint(0, 10**6, (size,), generator=generator)


def augmentation() -> BatchViewAugmentation:
    return BatchViewAugmentation(ViewAugmentation(crop_size=8, hue=0.2, blur_prob=0.3, mean=(0.5,) * 3, std=(0.25,) * 3))


def test_replayed_views_equal_the_eager_call_batch_after_batch_and_epoch_after_epoch():
    """Catches inputs not copied into the graph's buffers (every batch would get the first one's
    views), the seed or epoch baked into the capture (every epoch would get the first one's views),
    and a graph captured again for every batch."""
    eager, capture = augmentation(), StandIn()
    graphs = ViewGraphs(capture=capture, devices=("cpu",))
    for epoch in (0, 1, 7):
        for number in range(3):
            images, index = batch(number)
            keys = ViewKeys(11, epoch, index)
            got = graphs(eager, images, 2, keys)
            expected = eager(images, 2, keys=keys)
            assert len(got) == 2 and all(torch.equal(a, b) for a, b in zip(got, expected))
    assert capture.captures == 1


def test_views_handed_out_are_not_overwritten_by_the_next_replay():
    """Catches the graph's own output buffer handed to the step: the next batch's replay would change
    the views a step (or a callback keeping the batch) still reads."""
    eager, graphs = augmentation(), ViewGraphs(capture=StandIn(), devices=("cpu",))
    first = graphs(eager, batch(0)[0], 2, ViewKeys(0, 0, batch(0)[1]))
    kept = [view.clone() for view in first]
    graphs(eager, batch(1)[0], 2, ViewKeys(0, 0, batch(1)[1]))
    assert all(torch.equal(a, b) for a, b in zip(first, kept))


def test_other_shapes_devices_and_keys_take_the_eager_call():
    """A smaller batch is captured as its own shape; views drawn per sample key tensors, or on a device
    type that is not captured, are made eagerly, and all equal the eager call."""
    eager, capture = augmentation(), StandIn()
    graphs = ViewGraphs(capture=capture, devices=("cpu",))
    images, index = batch(0)
    graphs(eager, images, 2, ViewKeys(0, 0, index))
    small, small_index = batch(1, size=4)
    assert all(
        torch.equal(a, b)
        for a, b in zip(graphs(eager, small, 2, ViewKeys(0, 0, small_index)), eager(small, 2, keys=ViewKeys(0, 0, small_index)))
    )
    assert capture.captures == 2
    per_sample = ViewKeys(torch.zeros_like(index), torch.ones_like(index), index)
    assert all(torch.equal(a, b) for a, b in zip(graphs(eager, images, 2, per_sample), eager(images, 2, keys=per_sample)))
    ViewGraphs(capture=capture, devices=("cuda",))(eager, images, 2, ViewKeys(0, 0, index))
    ViewGraphs(enabled=False, capture=capture, devices=("cpu",))(eager, images, 2, ViewKeys(0, 0, index))
    assert capture.captures == 2
    other = augmentation()  # new settings: captured anew
    graphs(other, images, 2, ViewKeys(0, 0, index))
    assert capture.captures == 3


def test_a_capture_that_fails_is_said_once_and_the_shape_stays_eager(recwarn):
    eager = augmentation()

    def failing(fn):
        raise RuntimeError("operation not permitted when stream is capturing")

    graphs = ViewGraphs(capture=failing, devices=("cpu",))
    images, index = batch(0)
    for _ in range(3):
        got = graphs(eager, images, 2, ViewKeys(0, 0, index))
    assert all(torch.equal(a, b) for a, b in zip(got, eager(images, 2, keys=ViewKeys(0, 0, index))))
    messages = [str(w.message) for w in recwarn if "cuda_graph_views" in str(w.message)]
    assert len(messages) == 1 and "could not be captured" in messages[0]


def test_the_datamodule_makes_training_views_through_the_graphs_unless_turned_off(tmp_path, monkeypatch):
    """The training path (``on_after_batch_transfer``) goes through ``ViewGraphs`` (eager off CUDA, so
    CPU runs are unchanged), enabled as ``cuda_graph_views`` says."""
    calls = []
    original = ViewGraphs.__call__

    def recorded(self, augmentation, images, num_views, keys):
        calls.append((images.shape[0], self.enabled))
        return original(self, augmentation, images, num_views, keys)

    monkeypatch.setattr(ViewGraphs, "__call__", recorded)
    for enabled in (True, False):
        calls.clear()
        data = tiny_data(augment_on="device", cuda_graph_views=enabled)
        from ssl_app.methods import SimCLR

        model = SimCLR(backbone="small_cnn", proj_hidden_dim=16, proj_dim=8)
        tiny_trainer(tmp_path, max_steps=2).fit(model, datamodule=data)
        assert calls == [(8, enabled)] * 2
