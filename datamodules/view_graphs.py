"""The training views of ``augment_on: device`` on CUDA, replayed as a CUDA graph (``cuda_graph_views``).

One call of :class:`~datamodules.device_augment.BatchViewAugmentation` is about 230 small kernels;
for CIFAR-sized images a GPU runs them faster than the host can launch them: 3.82 ms per call eager,
0.86 ms when the same call is captured once as a CUDA graph and replayed (512 images × 2 views of
32 px, an H200; benchmarks/README.md). :class:`ViewGraphs` does that in the training path: the first
training batch of a shape ``(batch size, image size, views, device)`` is made eagerly a few times
(warm-up) and captured; every later batch of that shape is copied into the graph's static inputs,
replayed, and handed out as a copy of the graph's output (the next replay overwrites the graph's own
buffer, and a callback may keep a batch), so a batch costs five launches instead of 230.

The static inputs are the uint8 images, the sample indices and the hash state of the batch's seed and
epoch (``keyed_draws.batch_state``, one int64 on the device, filled per batch): the views keyed by
``(seed, epoch, index)`` then come from one graph in every epoch, where a state baked into the graph
as a number would need a new capture (a warm-up, a capture and a device synchronisation) per epoch.
The replayed kernels are the eager call's on the same inputs, so the views are bit-identical to it
(``tests/benchmarks/test_on_device.py`` checks it on CUDA). Anything else takes the eager call: other
devices, views drawn from a generator, keys given per sample. A capture that fails (a GPU or driver
without graphs) is said once, and that shape stays eager.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Optional

import torch
from lightning.pytorch.utilities import rank_zero_warn
from torch import Tensor

from datamodules.device_augment import BatchViewAugmentation
from datamodules.keyed_draws import HashedKeys, ViewKeys, batch_state

#: ``capture(fn) -> (replay, output)``: run ``fn`` for warm-up, record it, and return what replays
#: the record (each replay writes ``fn``'s result into ``output`` again).
Capture = Callable[[Callable[[], Tensor]], tuple[Callable[[], None], Tensor]]
#: Eager calls before a capture: per-device constants, cuBLAS workspaces and the allocator's pools
#: are made then, not inside the graph (torch.cuda.graphs asks for warm-up on a side stream).
WARM_UP_CALLS = 3
#: Shapes kept at once (a training run has one); a further one clears them.
MAX_GRAPHS = 4


def capture_cuda_graph(fn: Callable[[], Tensor]) -> tuple[Callable[[], None], Tensor]:
    """``fn`` (CUDA work only, no host sync) warmed up on a side stream and captured as a CUDA graph.

    ``thread_local`` capture: only this thread's CUDA calls must be capturable meanwhile, so a
    DataLoader's pin-memory thread may go on pinning host memory."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(WARM_UP_CALLS):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, capture_error_mode="thread_local"):
        output = fn()
    return graph.replay, output


@dataclass
class _Graph:
    images: Tensor
    index: Tensor
    state: Tensor
    replay: Callable[[], None]
    output: Tensor


class ViewGraphs:
    """``views(augmentation, images, num_views, keys)``: the keyed training views of ``augmentation``,
    from a captured graph where one serves (``enabled``, ``keys`` a :class:`~datamodules.keyed_draws.ViewKeys`
    with int seed and epoch, ``images`` on one of ``devices``), else from the eager call.

    Args:
        enabled: capture at all (``cuda_graph_views``).
        capture: how a call is captured (:data:`Capture`); tests stand in for CUDA's.
        devices: the device types whose batches are captured.
    """

    def __init__(self, enabled: bool = True, capture: Capture = capture_cuda_graph, devices: tuple[str, ...] = ("cuda",)) -> None:
        self.enabled = bool(enabled)
        self.capture = capture
        self.devices = devices
        self.augmentation: Optional[BatchViewAugmentation] = None  # the one the graphs were captured with
        self._graphs: dict[tuple, Optional[_Graph]] = {}  # None: the capture failed, eager for this shape

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_graphs": {}, "augmentation": None}  # graphs belong to one process and device

    def __call__(self, augmentation: BatchViewAugmentation, images: Tensor, num_views: int, keys: ViewKeys) -> list[Tensor]:
        if not (self.enabled and self._capturable(images, keys)):
            return augmentation(images, num_views, keys=keys)
        if augmentation is not self.augmentation:  # new settings: new graphs
            self.augmentation, self._graphs = augmentation, {}
        shape = (tuple(images.shape), images.stride(), num_views, images.device)
        if shape not in self._graphs:
            if len(self._graphs) >= MAX_GRAPHS:
                self._graphs.clear()
            self._graphs[shape] = self._capture(images, num_views, keys)
        graph = self._graphs[shape]
        if graph is None:
            return augmentation(images, num_views, keys=keys)
        self._fill(graph, images, keys)
        graph.replay()
        return list(graph.output.clone().unbind(0))

    def _capturable(self, images: Tensor, keys: Any) -> bool:
        return (
            images.device.type in self.devices
            and isinstance(keys, ViewKeys)
            and isinstance(keys.seed, int)
            and isinstance(keys.epoch, int)
            and keys.index.device == images.device
        )

    @staticmethod
    def _fill(graph: _Graph, images: Tensor, keys: ViewKeys) -> None:
        graph.images.copy_(images)
        graph.index.copy_(keys.index)
        graph.state.fill_(batch_state(keys.seed, keys.epoch))  # a kernel argument: no copy from the host

    def _capture(self, images: Tensor, num_views: int, keys: ViewKeys) -> Optional[_Graph]:
        inputs = (
            torch.empty_like(images),
            torch.empty_like(keys.index),
            torch.zeros((), dtype=torch.int64, device=images.device),
        )
        static_images, index, state = inputs
        self._fill(_Graph(static_images, index, state, lambda: None, images), images, keys)  # warm-up on real data
        try:
            augmentation = self.augmentation
            replay, output = self.capture(lambda: augmentation.stacked(static_images, num_views, keys=HashedKeys(state, index)))
        except Exception as error:  # noqa: BLE001 - eager views are always right: say so once, and go on
            rank_zero_warn(
                f"cuda_graph_views: the training views of batches of {tuple(images.shape)} could not be captured as a "
                f"CUDA graph ({type(error).__name__}: {error}); they are made eagerly (data.init_args.cuda_graph_views: false "
                "turns the capture off)"
            )
            return None
        return _Graph(static_images, index, state, replay, output)
