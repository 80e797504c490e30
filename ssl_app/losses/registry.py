"""``LOSSES``: the loss strategies that can be chosen (``--model.init_args.loss``), each a ``ContrastiveLoss``.

A loss registers itself with ``@LOSSES.register`` above its class (``ssl_app.registering``); importing this
module imports ``ssl_app.losses`` first, which registers the built-in ones.
"""

from ssl_app.losses.base import ContrastiveLoss
from ssl_app.registering import Registry

LOSSES = Registry(
    "losses",
    "--model.init_args.loss",
    package="ssl_app.losses",
    base=ContrastiveLoss,
    capabilities=("uses_labels", "needs_anchor_features", "needs_embedding_norms", "same_as_with_every_negative"),
)
