"""``DATAMODULES``: the data sources ``--data`` can name, each a ``ContrastiveDataModule``.

A datamodule registers itself with ``@DATAMODULES.register`` above its class (``ssl_app.registering``);
importing this module imports ``datamodules`` first, which registers the built-in ones.
"""

from datamodules.base import ContrastiveDataModule
from ssl_app.registering import Registry

DATAMODULES = Registry(
    "datamodules", "--data", package="datamodules", base=ContrastiveDataModule, capabilities={"num_classes": "NUM_CLASSES"}
)
