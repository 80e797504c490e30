"""``METHODS``: the contrastive methods that can be chosen (``--model``), each a ``ContrastiveMethod``.

A method registers itself with ``@METHODS.register`` above its class (``ssl_app.registering``); importing this
module imports ``ssl_app.methods`` first, which registers the built-in ones.
"""

from ssl_app.methods.base import ContrastiveMethod
from ssl_app.registering import Registry

METHODS = Registry("methods", "--model", package="ssl_app.methods", base=ContrastiveMethod, capabilities=("train_views",))
