"""Memory bank: one slowly updated embedding per training image as the candidates (Wu et al. 2018)."""

from __future__ import annotations

import numbers
from typing import Any, Optional

import torch
from jsonargparse import lazy_instance
from torch import Tensor

from ssl_app import distributed
from ssl_app.errors import ConfigError
from ssl_app.losses import ContrastiveLoss, InfoNCE
from ssl_app.methods.base import Contrast, ContrastiveMethod, similarity
from ssl_app.methods.moco import check_momentum
from ssl_app.methods.queue import LabelledBank
from ssl_app.models import BackboneName
from ssl_app.models.backbones import NormName
from ssl_app.optim import Optimization


class MemoryBank(ContrastiveMethod):
    """Instance discrimination against a memory bank, the setup of Wang & Liu 2021 (PAPER.md).

    The bank (``bank.features`` [num_train, proj_dim], ``bank.labels``) holds one unit vector
    per training image, addressed by the sample index the datamodule yields, initialised
    uniformly at random on the sphere. Each training step:

    - anchors: the embeddings z of the first view of the local batch (Wu et al. use one view
      per image and step; the second view is only used by validation);
    - candidates: every bank entry (the current, not yet updated ones), or, with
      ``num_negatives = K``, the batch's own entries followed by K entries drawn uniformly
      without replacement for the whole batch each step (then an anchor's negatives are
      exactly those K, less its own entry if drawn);
    - positive: the anchor's own entry; negatives: the other candidates. A label-based loss
      (SupCon) also counts as positives the candidates whose stored label equals the anchor's
      (labels < 0, i.e. unlabelled or never seen, never match);
    - after the loss and backward (``on_train_batch_end``) the entries of the batch are
      updated, ``bank[i] ← normalise(m · bank[i] + (1 − m) · z_i)`` with m = ``bank_momentum``,
      and their labels stored. Under DDP the indices, embeddings and labels of every rank are
      gathered first and every rank applies the same update, so all banks stay identical.

    Entries of images not yet seen keep their random initial vector and serve as negatives,
    as in Wu et al. Validation and test do not touch the bank: their anchors are view 1 of the
    held-out batch, the positive is the same image's view 2 (embedded by the same encoder),
    and the negatives are the other view-2 embeddings of the global batch followed by *every*
    bank entry (also with ``num_negatives``, so the value is deterministic).

    The bank size comes from ``bank_size`` or, when it is None, from the datamodule's
    ``num_samples("train")`` in ``setup("fit")``; a checkpoint carries its bank, so
    ``validate``/``test`` with ``--ckpt_path`` need neither. The bank is persistent state.

    Args:
        loss, backbone, backbone_norm, proj_dim, proj_hidden_dim, proj_layers,
            proj_batch_norm, optim: see ``ContrastiveMethod``. The defaults here are the
            paper's: InfoNCE with τ = 0.07 and a linear 128-d head.
        bank_momentum: m ∈ [0, 1) of the entry update (the paper: 0.5).
        bank_size: number of entries (= training images); None: the train split's size.
        num_negatives: K random bank entries per step as the negatives (None: all entries).
    """

    def __init__(
        self,
        loss: ContrastiveLoss = lazy_instance(InfoNCE, temperature=0.07),
        backbone: BackboneName = "resnet18_cifar",
        backbone_norm: NormName = "batch",
        proj_dim: int = 128,
        proj_hidden_dim: int = 512,
        proj_layers: int = 1,
        proj_batch_norm: bool = True,
        optim: Optimization = Optimization(),
        bank_momentum: float = 0.5,
        bank_size: Optional[int] = None,
        num_negatives: Optional[int] = None,
    ) -> None:
        bank_momentum = check_momentum(bank_momentum, "MemoryBank: bank_momentum")
        for option, value in (("bank_size", bank_size), ("num_negatives", num_negatives)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1):
                raise ConfigError(f"MemoryBank: {option} must be an int >= 1 (or null), got {value!r}")
        super().__init__(loss, backbone, backbone_norm, proj_dim, proj_hidden_dim, proj_layers, proj_batch_norm, optim)
        self.bank_momentum = bank_momentum
        self.bank_size = None if bank_size is None else int(bank_size)
        self.num_negatives = None if num_negatives is None else int(num_negatives)
        self.bank = LabelledBank(self.bank_size or 0, proj_dim)
        # Every rank applies the same gathered update, so DDP must not broadcast the bank.
        self._ddp_params_and_buffers_to_ignore = [f"bank.{name}" for name, _ in self.bank.named_buffers()]
        self._pending: Optional[tuple[Tensor, Tensor, Tensor]] = None

    # --- the contrast ---------------------------------------------------------------------
    def contrast(self, batch: Any) -> Contrast:
        if self.training:
            return self._train_contrast(batch)
        return self._eval_contrast(batch)

    def _train_contrast(self, batch: Any) -> Contrast:
        views, labels, indices = batch
        size = self.bank.size
        if size == 0:
            raise ConfigError(
                "MemoryBank: the bank is empty; set model.bank_size or use a datamodule with num_samples('train')"
            )
        if self.num_negatives is not None and self.num_negatives >= size:
            raise ConfigError(f"MemoryBank: num_negatives ({self.num_negatives}) must be smaller than the bank ({size} entries)")
        z = self.embed(views[0])
        features, bank_labels = self.bank.features, self.bank.labels
        if self.num_negatives is None:
            sim = similarity(z, features)
            own = torch.arange(size, device=z.device)[None, :] == indices[:, None]
            pos_mask = own
            if self.loss.uses_labels:
                pos_mask = own | ((labels[:, None] == bank_labels[None, :]) & (labels[:, None] >= 0))
            neg_mask = ~pos_mask
        else:
            local_size = z.shape[0]
            sample = torch.randperm(size, device=z.device)[: self.num_negatives]
            candidates = torch.cat([indices, sample])
            sim = similarity(z, features.index_select(0, candidates))
            own = torch.zeros(local_size, candidates.shape[0], dtype=torch.bool, device=z.device)
            own[:, :local_size] = torch.eye(local_size, dtype=torch.bool, device=z.device)
            drawn = torch.zeros_like(own)
            drawn[:, local_size:] = True
            drawn &= candidates[None, :] != indices[:, None]  # the own entry drawn again: neither
            pos_mask = own
            if self.loss.uses_labels:
                same = (labels[:, None] == bank_labels[candidates][None, :]) & (labels[:, None] >= 0)
                pos_mask = own | (drawn & same)
            neg_mask = drawn & ~pos_mask
        self._pending = (indices, z.detach(), labels)
        return Contrast(sim, pos_mask, neg_mask)

    def _eval_contrast(self, batch: Any) -> Contrast:
        views, labels, _ = batch
        if len(views) < 2:
            raise ValueError(f"MemoryBank validation needs 2 views per sample, got {len(views)}")
        local_size = views[0].shape[0]
        rank = distributed.rank()
        anchors = self.embed(views[0])
        others = distributed.gather(self.embed(views[1]))
        other_labels = distributed.gather(labels)
        sim = similarity(anchors, torch.cat([others, self.bank.features], dim=0))
        positive = torch.zeros(local_size, others.shape[0], dtype=torch.bool, device=anchors.device)
        positive[:, rank * local_size : (rank + 1) * local_size] = torch.eye(local_size, dtype=torch.bool, device=anchors.device)
        candidate_labels = torch.cat([other_labels, self.bank.labels])
        pos_mask = torch.cat([positive, torch.zeros(local_size, self.bank.size, dtype=torch.bool, device=anchors.device)], dim=1)
        if self.loss.uses_labels:
            pos_mask |= (labels[:, None] == candidate_labels[None, :]) & (labels[:, None] >= 0)
        return Contrast(sim, pos_mask, ~pos_mask)

    # --- Lightning hooks ------------------------------------------------------------------
    def setup(self, stage: str) -> None:
        if stage != "fit" or self._trainer is None:
            return
        datamodule = getattr(self.trainer, "datamodule", None)
        train_size = None
        if datamodule is not None and callable(getattr(datamodule, "num_samples", None)):
            train_size = int(datamodule.num_samples("train"))
        if self.bank_size is not None and train_size is not None and self.bank_size != train_size:
            raise ConfigError(
                f"MemoryBank: bank_size is {self.bank_size} but the train split has {train_size} samples; "
                "leave bank_size unset to take it from the datamodule"
            )
        wanted = self.bank_size or train_size
        if wanted is None:
            raise ConfigError(
                "MemoryBank: bank_size is not set and the datamodule has no num_samples('train'); set model.bank_size"
            )
        if self.bank.size == 0:
            self.bank.resize(wanted)
        elif self.bank.size != wanted:
            raise ConfigError(f"MemoryBank: the bank has {self.bank.size} entries but the train split has {wanted} samples")
        if self.num_negatives is not None and self.num_negatives >= wanted:
            raise ConfigError(f"MemoryBank: num_negatives ({self.num_negatives}) must be smaller than the bank ({wanted} entries)")

    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        # After backward: the loss's graph holds the bank itself, so it is only written now.
        if self._pending is not None:
            indices, z, labels = self._pending
            self._pending = None
            self.update_bank(indices, z, labels)

    @torch.no_grad()
    def update_bank(self, indices: Tensor, z: Tensor, labels: Tensor) -> None:
        """Gather every rank's (indices, z, labels), rank-major, and apply the same update on each rank."""
        self.bank.update(
            distributed.gather(indices), distributed.gather(z.float()), distributed.gather(labels), self.bank_momentum
        )
