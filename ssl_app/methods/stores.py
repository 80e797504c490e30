"""Stored candidates with labels: MoCo's ring-buffer queue and the memory bank of every image.

Both are ``nn.Module`` s whose state is persistent buffers, so they are saved in checkpoints,
restored on resume and moved to the device with the model. Neither talks to other processes:
the methods gather what every rank produced first and hand the *same* global tensors to
every rank's store, so all ranks hold bit-identical copies without broadcasting them (which
is why the methods list them in ``_ddp_params_and_buffers_to_ignore``). Updates are
device-side tensor operations only (no host synchronisation).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ssl_app.errors import ConfigError

# Initial contents are drawn from a fixed generator so that every process (and every run)
# starts from the same store, whatever the global random state.
_INIT_SEED = 0


def random_unit_vectors(n: int, dim: int, seed: int = _INIT_SEED) -> Tensor:
    """``n`` points drawn uniformly on the unit sphere S^{dim-1}, deterministically from ``seed``."""
    generator = torch.Generator().manual_seed(seed)
    return F.normalize(torch.randn(n, dim, generator=generator), dim=1)


class LabelledQueue(nn.Module):
    """A FIFO ring buffer of ``size`` unit vectors and their labels (MoCo's queue).

    Buffers (all persistent): ``features`` [size, dim] float32, ``labels`` [size] int64
    (-1 where nothing was written yet), ``ptr`` (the slot the next vector goes to) and
    ``filled`` (how many slots hold an enqueued vector, at most ``size``).

    The slots are filled in order from 0, so the valid slots are exactly ``0 .. filled - 1``;
    before that they hold random unit vectors that :meth:`valid` marks unusable. Enqueueing
    ``E`` vectors writes them at ``ptr, ptr + 1, ...`` modulo ``size`` (so ``size`` need not
    be a multiple of ``E``); if ``E > size`` only the last ``size`` are kept. Either way the
    queue holds exactly the ``min(size, total)`` most recently enqueued vectors, and
    ``ptr == total % size``.

    ``keep_norms`` (for a loss that ``needs_embedding_norms``): one more persistent buffer, ``norms``
    [size] float32, each slot's norm of the projection before normalisation, written with it (1 in
    the slots never written). Without it the state dict is the one of a queue without norms; a
    checkpoint without ``norms`` loads into a queue that keeps them with every norm 1 (the unit
    vectors a loss that reads no norm saw).
    """

    def __init__(self, size: int, dim: int, keep_norms: bool = False) -> None:
        super().__init__()
        self.size = size
        self.keep_norms = keep_norms
        self.register_buffer("features", random_unit_vectors(size, dim))
        self.register_buffer("labels", torch.full((size,), -1, dtype=torch.long))
        if keep_norms:
            self.register_buffer("norms", torch.ones(size))
        self.register_buffer("ptr", torch.zeros((), dtype=torch.long))
        self.register_buffer("filled", torch.zeros((), dtype=torch.long))
        # ``filled`` as a Python int, so that asking whether the queue is full costs no host-device
        # sync; ``None`` after a state_dict load, until the first ``is_full`` reads it once.
        self._host_filled: int | None = 0

    def valid(self) -> Tensor:
        """Bool [size]: True on the slots that hold an enqueued vector."""
        return torch.arange(self.size, device=self.features.device) < self.filled

    def is_full(self) -> bool:
        """Whether every slot holds an enqueued vector (a host sync only on the first call after a load)."""
        if self._host_filled is None:
            self._host_filled = int(self.filled)
        return self._host_filled >= self.size

    def _load_from_state_dict(self, state_dict: dict[str, Any], prefix: str, *rest: Any) -> None:
        fill_unit_norms(self, state_dict, prefix)
        super()._load_from_state_dict(state_dict, prefix, *rest)
        self._host_filled = None

    @torch.no_grad()
    def enqueue(self, features: Tensor, labels: Tensor, norms: Tensor | None = None) -> None:
        """Append ``features`` [E, dim] and ``labels`` [E] in order, overwriting the oldest (and, in a
        queue that ``keep_norms``, their projections' norms ``norms`` [E], required there).

        A row with a NaN or infinite entry (or norm) is not stored: its slot keeps what it held, so one
        diverged step (e.g. one that ``NumericalHealth`` skips) cannot poison every later loss.
        """
        if self.keep_norms and norms is None:
            raise ValueError("this queue keeps the norms of its entries: enqueue needs norms")
        total = features.shape[0]
        keep = min(total, self.size)
        features, labels = features[total - keep :], labels[total - keep :]
        start = self.ptr + (total - keep)
        slots = (start + torch.arange(keep, device=self.features.device)) % self.size
        features = features.detach().to(self.features.dtype)
        finite = torch.isfinite(features).all(dim=1)
        if self.keep_norms:
            norms = norms[total - keep :].detach().to(self.norms.dtype)
            finite &= torch.isfinite(norms)
            self.norms.index_copy_(0, slots, torch.where(finite, norms, self.norms.index_select(0, slots)))
        features = torch.where(finite[:, None], features, self.features.index_select(0, slots))
        labels = torch.where(finite, labels.to(self.labels.dtype), self.labels.index_select(0, slots))
        self.features.index_copy_(0, slots, features)
        self.labels.index_copy_(0, slots, labels)
        self.ptr.copy_((self.ptr + total) % self.size)
        self.filled.copy_((self.filled + total).clamp(max=self.size))
        if self._host_filled is not None:
            self._host_filled = min(self._host_filled + total, self.size)

    def extra_repr(self) -> str:
        return f"size={self.size}, dim={self.features.shape[1]}" + (", keep_norms=True" if self.keep_norms else "")


class LabelledBank(nn.Module):
    """One unit vector per training sample, addressed by the sample's dataset index (Wu et al. 2018).

    Buffers (persistent): ``features`` [size, dim] float32, initialised uniformly on the sphere,
    and ``labels`` [size] int64 (-1 until the sample was first seen). The size may be 0 at
    construction and set later with :meth:`resize` (e.g. from the datamodule in ``setup``);
    loading a state dict into an empty bank takes the size from the state dict, so a
    checkpoint can be loaded without knowing the data.

    ``keep_norms`` (for a loss that ``needs_embedding_norms``): one more persistent buffer, ``norms``
    [size] float32. An entry's norm is the norm of the projection (before normalisation) written at
    its last update, the mean over the occurrences of its index in that update (1 until the sample
    was first seen); the entry itself stays a unit vector, so the loss reads it as that projection's
    direction, smoothed by the momentum, at that projection's length. Without it the state dict is
    unchanged; a checkpoint without ``norms`` loads with every norm 1.
    """

    def __init__(self, size: int, dim: int, keep_norms: bool = False) -> None:
        super().__init__()
        self.dim = dim
        self.keep_norms = keep_norms
        self.register_buffer("features", random_unit_vectors(size, dim))
        self.register_buffer("labels", torch.full((size,), -1, dtype=torch.long))
        if keep_norms:
            self.register_buffer("norms", torch.ones(size))

    @property
    def size(self) -> int:
        return self.features.shape[0]

    def resize(self, size: int) -> None:
        """Re-create the bank with ``size`` fresh random entries (on the bank's device)."""
        device = self.features.device
        self.features = random_unit_vectors(size, self.dim).to(device)
        self.labels = torch.full((size,), -1, dtype=torch.long, device=device)
        if self.keep_norms:
            self.norms = torch.ones(size, device=device)

    @torch.no_grad()
    def update(self, indices: Tensor, features: Tensor, labels: Tensor, momentum: float, norms: Tensor | None = None) -> None:
        """``bank[i] ← normalise(m · bank[i] + (1 − m) · z_i)`` and ``labels[i] ← y_i`` (and, in a bank
        that ``keep_norms``, ``norms[i] ← ‖h_i‖``, the norms [G] of the projections, required there).

        ``indices`` [G], ``features`` [G, dim] (unit vectors), ``labels`` [G]. If an index
        occurs several times (a DistributedSampler pads the last shards with repeats), its
        ``z`` is the mean of its occurrences, so the result does not depend on write order.
        Without repeats that mean is ``z`` itself, exactly. An entry with a NaN or infinite ``z``
        (in any occurrence) keeps its old vector and label, so one diverged step cannot poison
        the bank; the finite entries of the same batch are updated as usual.
        """
        if self.keep_norms and norms is None:
            raise ValueError("this bank keeps the norms of its entries: update needs norms")
        features = features.detach().to(self.features.dtype)
        finite = torch.isfinite(features).all(dim=1)
        if self.keep_norms:
            norms = norms.detach().to(self.norms.dtype)
            finite &= torch.isfinite(norms)
            norms = torch.where(finite, norms, 0.0)
        features = torch.where(finite[:, None], features, torch.zeros((), dtype=features.dtype, device=features.device))
        same = (indices[:, None] == indices[None, :]).to(features.dtype)
        z = (same @ features) / same.sum(dim=1, keepdim=True)
        old = self.features.index_select(0, indices)
        clean = (same @ (~finite).to(features.dtype)) == 0  # no occurrence of the index was non-finite
        new = torch.where(clean[:, None], F.normalize(momentum * old + (1.0 - momentum) * z, dim=1), old)
        labels = torch.where(clean, labels.to(self.labels.dtype), self.labels.index_select(0, indices))
        self.features.index_copy_(0, indices, new)
        self.labels.index_copy_(0, indices, labels)
        if self.keep_norms:
            mean_norms = (same @ norms) / same.sum(dim=1)
            self.norms.index_copy_(0, indices, torch.where(clean, mean_norms, self.norms.index_select(0, indices)))

    def _load_from_state_dict(self, state_dict: dict[str, Any], prefix: str, *rest: Any) -> None:
        # rest: torch's local_metadata, strict, missing_keys, unexpected_keys, error_msgs, passed on as they are
        saved = state_dict.get(prefix + "features")
        if saved is not None and tuple(saved.shape) != tuple(self.features.shape):
            if saved.dim() != 2 or saved.shape[1] != self.dim:
                raise ConfigError(
                    f"the checkpoint's memory bank has shape {tuple(saved.shape)}, but this model's "
                    f"entries have {self.dim} dimensions (model.proj_dim)"
                )
            if self.size != 0:
                raise ConfigError(
                    f"the checkpoint's memory bank has {saved.shape[0]} entries but this run's has "
                    f"{self.size} (model.bank_size, or the size of the datamodule's train split)"
                )
            self.resize(saved.shape[0])
        fill_unit_norms(self, state_dict, prefix)
        super()._load_from_state_dict(state_dict, prefix, *rest)

    def extra_repr(self) -> str:
        return f"size={self.size}, dim={self.dim}" + (", keep_norms=True" if self.keep_norms else "")


def fill_unit_norms(store: nn.Module, state_dict: dict[str, Any], prefix: str) -> None:
    """A store that keeps norms, loading a state dict written without them (a checkpoint of a run whose
    loss read no norm, or from before norms were kept): every norm 1, what that run's loss read."""
    if getattr(store, "keep_norms", False) and prefix + "features" in state_dict and prefix + "norms" not in state_dict:
        saved = state_dict[prefix + "features"]
        state_dict[prefix + "norms"] = torch.ones(saved.shape[0], dtype=torch.float32, device=saved.device)
