"""``BACKBONES``: the backbone builders ``--model.init_args.backbone`` names (``(norm) -> (module, feature_dim)``).

A builder registers itself with ``@BACKBONES.register(name=...)`` above its function (``ssl_app.registering``).
"""

from ssl_app.registering import Registry

BACKBONES = Registry("backbones", "--model.init_args.backbone", package="ssl_app.models", select_by="name")
