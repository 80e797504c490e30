"""One line that says what a scalar tag is: the description TensorBoard shows beside its chart.

The ``metrics/<field>`` tags of the metric registry are described by their registered formula
(``ssl_app.metrics.registry``), the report's own columns (kNN, the linear probe) by their column's
meaning (``ssl_app.runs.headline``); every other tag the code logs is described here, in
``DESCRIPTIONS`` (``tests/test_tags.py`` checks that every loggable scalar has one).
``ssl_app.runs.panel`` writes the description into the first event of each tag.
"""

from __future__ import annotations

from ssl_app.metrics.registry import registered_fields
from ssl_app.runs.headline import OWN_COLUMNS, RunOptions
from ssl_app.runs.summary import EXTRA_COLUMNS

#: The study's headline series, repeated under one tag group that Time Series sorts and opens first (``HEADLINE_GROUP``):
#: source tag -> its copy. TensorBoard's Time Series groups cards by the tag's part before the first ``/``, orders the
#: groups by their tags (``compareTagNames``: ``compare`` < ``epoch`` < ``figures`` < ``linear`` < ``loss`` < ``metrics``)
#: and opens only the first two, so without these the page opened on Lightning's ``epoch`` and the spectrum images.
HEADLINE_GROUP = "compare"
HEADLINE_SERIES = {
    "metrics/knn_acc": f"{HEADLINE_GROUP}/knn_acc",
    "linear/top1": f"{HEADLINE_GROUP}/linear_top1",
    "metrics/uniformity": f"{HEADLINE_GROUP}/uniformity",
    "metrics/tolerance": f"{HEADLINE_GROUP}/tolerance",
    "loss/temperature": f"{HEADLINE_GROUP}/temperature",
    "train/loss_epoch": f"{HEADLINE_GROUP}/loss",
}

#: Tags that are neither a registered metric nor a report column, by tag (a trailing ``*``: any tag with that prefix).
DESCRIPTIONS: dict[str, str] = {
    "epoch": "the training epoch of each logged step (Lightning)",
    "lr*": "the learning rate in force (Lightning's LearningRateMonitor: lr, lr-<optimizer>)",
    "train/loss_step": "the loss strategy's value on the training batch",
    "train/loss_epoch": "the mean training loss over the epoch's batches (rank 0)",
    "val/loss": "the loss on the validation batches, mean over the epoch (synced over processes)",
    "test/loss": "the loss on the test batches, mean (synced over processes)",
    "train/key_momentum": "MoCo: the key encoder's EMA momentum (logged when it changes)",
    "health/nonfinite_skips": "training steps skipped so far for a non-finite loss or gradient",
    "val/classifier_top1": "top-1 of the loss's own classifier (PaCo's centres) on the validation anchors",
    "test/classifier_top1": "top-1 of the loss's own classifier (PaCo's centres) on the test anchors",
    "loss/effective_negatives": "exp(entropy of the relative penalties r_i), mean over anchors: → 1 as τ → 0, → #used as τ → ∞",
    "loss/used_negatives": "mean number of negatives per anchor that enter the loss (logged when it changes)",
    "loss/pos_sim": "mean cosine similarity of the positive pairs in the training step",
    "loss/mean_neg_sim": "mean cosine similarity over all the step's negatives",
    "loss/used_neg_sim": "mean cosine similarity of the negatives the loss keeps (hard losses with fewer than all)",
    "loss/chance": "the loss's value if every similarity were equal, log(1 + K) for InfoNCE (logged when it changes)",
    "loss/num_positives": "mean number of positives per anchor",
    "loss/has_positive": "fraction of anchors with at least one positive",
    "loss/centre_prob": "PaCo: mean probability of the anchor's own class centre",
    "loss/temperature": "τ in force at the step (a fixed, scheduled, learnable or adaptive τ; written when it changes)",
    "loss/temperature_epoch": "τ of the epoch's last training step (written when it changes)",
    "metrics/nonfinite": "embeddings with a NaN/inf entry, left out of the other metrics (logged when it changes)",
    "metrics/collapsed": "0/1: the collapse alarm holds (logged when it changes)",
    "lt/top1": "long-tail top-1 over every evaluation sample",
    "lt/many": "mean per-class top-1 of the many-shot classes",
    "lt/medium": "mean per-class top-1 of the medium-shot classes",
    "lt/few": "mean per-class top-1 of the few-shot classes",
    "metrics/knn_many": "mean per-class kNN accuracy (tail_k vote) of the many-shot classes (> many_shot_above training images)",
    "metrics/knn_medium": "mean per-class kNN accuracy (tail_k vote) of the medium-shot classes",
    "metrics/knn_few": "mean per-class kNN accuracy (tail_k vote) of the few-shot classes (< few_shot_below training images)",
    "linear/many": "the linear probe's mean per-class top-1 (test split) of the many-shot classes",
    "linear/medium": "the linear probe's mean per-class top-1 (test split) of the medium-shot classes",
    "linear/few": "the linear probe's mean per-class top-1 (test split) of the few-shot classes",
    "linear/train_loss*": "the linear probe's cross-entropy on the training batches (_step: each logged step, _epoch: its mean)",
    "linear/val_top1": "the linear probe's top-1 on the validation split",
}


def describe(tag: str, options: RunOptions | None = None) -> str | None:
    """The one-line description of the scalar ``tag`` (``None``: not known); ``options`` (the run's
    ``top_k`` and kNN settings, default the callbacks' defaults) fill the tags and texts."""
    options = options or RunOptions()
    source = next((tag_ for tag_, copy in HEADLINE_SERIES.items() if copy == tag), None)
    if source is not None:
        said = describe(source, options)
        return f"{source}, repeated in the group TensorBoard opens first" + (f": {said}" if said else "")
    for metric, field_name in registered_fields():
        if tag == f"metrics/{metric.tag(field_name, options.top_k)}":
            return metric.formula(field_name, options.top_k)
    for column in (*OWN_COLUMNS, *EXTRA_COLUMNS):
        if not column.per_step and tag == options.fill(column.tag):  # a per-step column's meaning is the report's mean
            meaning = options.fill(column.meaning)
            return meaning.removesuffix(", %") + ", as a fraction" if column.scale == 100.0 else meaning
    if tag in DESCRIPTIONS:
        return DESCRIPTIONS[tag]
    return next((text for key, text in DESCRIPTIONS.items() if key.endswith("*") and tag.startswith(key[:-1])), None)
