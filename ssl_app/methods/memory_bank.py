"""Memory bank: one slowly updated embedding per training image as the candidates (Wu et al. 2018)."""

from __future__ import annotations

import os
from typing import Any, Optional

import torch
from jsonargparse import lazy_instance
from torch import Tensor

from ssl_app import distributed
from ssl_app.checks import PositiveInt, UnitIntervalOpenAbove, check_momentum, check_optional_int
from ssl_app.errors import ConfigError
from ssl_app.losses import ContrastiveLoss, InfoNCE
from ssl_app.losses.base import MaskedSimilarities
from ssl_app.methods.base import ContrastiveMethod, similarity
from ssl_app.methods.masks import Members, contrast_masks, gathered_views, unmatched, views_of
from ssl_app.methods.registry import METHODS
from ssl_app.methods.stores import LabelledBank, fill_unit_norms

# Seeds of the negatives' generator: seed · stride + step, distinct for any run shorter than 2^32 steps.
_STEP_STRIDE = 2**32


@METHODS.register
class MemoryBank(ContrastiveMethod):
    """Instance discrimination against a memory bank, the setup of Wang & Liu 2021 (docs/science.md, "Their setup").

    The bank (``bank.features`` [num_train, proj_dim], ``bank.labels``) holds one unit vector
    per training image, addressed by the sample index the datamodule yields, initialised
    uniformly at random on the sphere. Each training step:

    - anchors: the embeddings z of the one training view of the local batch (Wu et al.);
    - candidates: every bank entry (the current, not yet updated ones), or, with
      ``num_negatives = K``, the batch's own entries followed by K entries drawn uniformly
      without replacement for the whole batch each step (then an anchor's negatives are
      exactly those K, less its own entry if drawn);
    - positive: the anchor's own entry; negatives: the other candidates. A label-based loss
      (SupCon) also counts as positives the candidates whose stored label equals the anchor's
      (labels < 0, i.e. unlabelled or never seen, never match);
    - after the loss and backward (``on_after_backward``) the entries of the batch are
      updated, ``bank[i] ← normalise(m · bank[i] + (1 − m) · z_i)`` with m = ``bank_momentum``,
      and their labels stored. Under DDP the indices, embeddings and labels of every rank are
      gathered first and every rank applies the same update, so all banks stay identical.

    Entries of images not yet seen keep their random initial vector and serve as negatives,
    as in Wu et al. Validation and test do not touch the bank: their anchors are view 1 of the
    held-out batch, the positive is the same image's view 2 (embedded by the same encoder),
    and the negatives are the other view-2 embeddings of the global batch followed by *every*
    bank entry (also with ``num_negatives``, so the value is deterministic).

    A loss that ``needs_embedding_norms`` gets the projections' norms of the anchors (with gradient)
    and of the candidates: of the view-2 embeddings, and of the bank entries the norm kept with each
    (``LabelledBank.keep_norms``: the norm of the projection written at the entry's last update).

    The bank size comes from ``bank_size`` or, when it is None, from the datamodule's
    ``num_samples("train")`` in ``setup("fit")``; a checkpoint carries its bank, so
    ``validate``/``test`` with ``--ckpt_path`` need neither. The bank is persistent state.

    Args:
        loss: the loss strategy (default: the paper's InfoNCE with τ = 0.07).
        proj_layers: the paper's linear 128-d head by default.
        bank_momentum: m ∈ [0, 1) of the entry update (the paper: 0.5).
        bank_size: number of entries (= training images); None: the train split's size.
        num_negatives: K random bank entries per step as the negatives (None: all entries).
        **kwargs: every other option of ``ContrastiveMethod`` (backbone, head, optim).
    """

    train_views = 1  # one view per image and step (Wu et al.); validation still uses two

    def __init__(
        self,
        loss: ContrastiveLoss = lazy_instance(InfoNCE, temperature=0.07),
        proj_layers: PositiveInt = 1,
        bank_momentum: UnitIntervalOpenAbove = 0.5,
        bank_size: Optional[PositiveInt] = None,
        num_negatives: Optional[PositiveInt] = None,
        **kwargs: Any,
    ) -> None:
        bank_momentum = check_momentum(bank_momentum, "MemoryBank: bank_momentum")
        bank_size = check_optional_int(bank_size, "MemoryBank: bank_size")
        num_negatives = check_optional_int(num_negatives, "MemoryBank: num_negatives")
        super().__init__(loss=loss, proj_layers=proj_layers, **kwargs)
        self.bank_momentum = bank_momentum
        self.bank_size = bank_size
        self.num_negatives = num_negatives
        # The entries' norms are kept only for a loss that reads them: any other loss's checkpoints stay as they were.
        self.bank = LabelledBank(bank_size or 0, self.embedding_dim, keep_norms=self.loss.needs_embedding_norms)
        # Every rank applies the same gathered update, so DDP must not broadcast the bank.
        self._ddp_params_and_buffers_to_ignore = [f"bank.{name}" for name, _ in self.bank.named_buffers()]
        self._pending: Optional[tuple[Tensor, ...]] = None  # (indices, z, labels[, norms]) until the backward is done

    def negatives_per_anchor(self, batch_size: int, world_size: int) -> Optional[int]:
        if self.num_negatives is not None:
            return self.num_negatives
        return self.bank.size - 1 if self.bank.size else None

    # --- the contrast ---------------------------------------------------------------------
    def contrast(self, batch: Any) -> MaskedSimilarities:
        if self.training:
            return self._train_contrast(batch)
        return self._eval_contrast(batch)

    def _train_contrast(self, batch: Any) -> MaskedSimilarities:
        views, labels, indices = batch
        size = self.bank.size
        if size == 0:
            raise ConfigError("MemoryBank: the bank is empty; set model.bank_size or use a datamodule with num_samples('train')")
        if self.num_negatives is not None and self.num_negatives >= size:
            raise ConfigError(f"MemoryBank: num_negatives ({self.num_negatives}) must be smaller than the bank ({size} entries)")
        features, z, norms = self.embed_for_loss(views[0])
        device = z.device
        # Bank entries are keyed by dataset index, so an anchor's own entry shares its instance id.
        anchors = Members(indices, torch.zeros_like(indices), labels)
        if self.num_negatives is None:
            entries = torch.arange(size, device=device)
            usable = None
        else:
            # The batch's own entries, then K entries drawn for the whole batch; an anchor uses
            # its own entry and the drawn ones (its own entry drawn again: neither).
            drawn = torch.randperm(size, generator=self._negatives_generator(device), device=device)[: self.num_negatives]
            entries = torch.cat([indices, drawn])
            local = indices.shape[0]
            usable = torch.cat([torch.eye(local, dtype=torch.bool, device=device), drawn[None, :] != indices[:, None]], dim=1)
        candidates = Members(entries, torch.ones_like(entries), self.bank.labels[entries])
        pos_mask, neg_mask = contrast_masks(anchors, candidates, self.loss.uses_labels, usable)
        sim = similarity(z, self.bank.features[entries])
        self._pending = (indices, z.detach(), labels) + (() if norms is None else (norms.detach(),))
        read_norms = {} if norms is None else {"anchor_norms": norms, "candidate_norms": self.bank.norms[entries]}
        return MaskedSimilarities(sim, pos_mask, neg_mask, anchor_features=features, anchor_labels=labels, **read_norms)

    def _negatives_generator(self, device: torch.device) -> torch.Generator:
        """The RNG of a step's sampled negatives: seeded with the run's seed and the optimiser step,
        not drawn from the global RNG, whose state a checkpoint does not carry, so a resumed run
        samples the negatives the uninterrupted run would have (and every rank the same ones)."""
        step = self._trainer.global_step if self._trainer is not None else 0
        seed = int(os.getenv("PL_GLOBAL_SEED", 0))
        return torch.Generator(device=device).manual_seed(seed * _STEP_STRIDE + step)

    def _eval_contrast(self, batch: Any) -> MaskedSimilarities:
        views, labels, _ = batch
        if len(views) < 2:
            raise ValueError(f"MemoryBank validation needs 2 views per sample, got {len(views)}")
        batch_size, device = views[0].shape[0], views[0].device
        features, anchors, anchor_norms = self.embed_for_loss(views[0])
        seconds, second_norms = (self.embed(views[1]), None) if anchor_norms is None else self.embed_for_loss(views[1])[1:]
        others = distributed.gather(seconds)
        other_labels = distributed.gather(labels)
        # Anchors: view 0 of this rank's samples; candidates: view 1 of the global batch, then the bank.
        candidates = Members.cat(
            gathered_views(batch_size, 1, other_labels, distributed.world_size(), device, first_view=1),
            unmatched(self.bank.size, self.bank.labels, device),
        )
        anchor_members = views_of(distributed.rank() * batch_size, batch_size, 1, labels, device)
        pos_mask, neg_mask = contrast_masks(anchor_members, candidates, self.loss.uses_labels)
        sim = similarity(anchors, torch.cat([others, self.bank.features], dim=0))
        read_norms = {}
        if anchor_norms is not None:
            candidate_norms = torch.cat([distributed.gather(second_norms), self.bank.norms])
            read_norms = {"anchor_norms": anchor_norms, "candidate_norms": candidate_norms}
        return MaskedSimilarities(
            sim,
            pos_mask,
            neg_mask,
            views=(anchors.detach(), seconds.detach()),
            anchor_features=features,
            anchor_labels=labels,
            **read_norms,
        )

    # --- Lightning hooks ------------------------------------------------------------------
    def setup(self, stage: str) -> None:
        super().setup(stage)
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
            raise ConfigError(
                f"MemoryBank: num_negatives ({self.num_negatives}) must be smaller than the bank ({wanted} entries)"
            )

    def on_after_backward(self) -> None:
        # After backward (the loss's graph holds the bank itself, so it is only written now), and
        # before any callback's on_train_batch_end: a checkpoint of this step must hold the update.
        if self._pending is not None:
            pending, self._pending = self._pending, None
            self.update_bank(*pending)  # (indices, z, labels[, norms])

    @torch.no_grad()
    def update_bank(self, indices: Tensor, z: Tensor, labels: Tensor, norms: Optional[Tensor] = None) -> None:
        """Gather every rank's (indices, z, labels, and the projections' norms for a bank that keeps
        them), rank-major, and apply the same update on each rank."""
        gathered_norms = distributed.gather(norms.float()) if norms is not None else None
        self.bank.update(
            distributed.gather(indices),
            distributed.gather(z.float()),
            distributed.gather(labels),
            self.bank_momentum,
            norms=gathered_norms,
        )

    def upgrade_state_dict(self, state_dict: dict[str, Any]) -> dict[str, Any]:
        """The base's, and a bank that keeps norms loading a checkpoint written without them: every norm 1."""
        fill_unit_norms(self.bank, state_dict, "bank.")
        return super().upgrade_state_dict(state_dict)
