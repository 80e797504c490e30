"""``TEMPERATURES``: the temperature policies a loss's ``temperature`` takes, each a ``TemperaturePolicy``.

A policy registers itself with ``@TEMPERATURES.register`` above its class (``ssl_app.registering``); importing
this module imports ``ssl_app.temperature`` first, which registers the built-in ones.
"""

from ssl_app.registering import Registry
from ssl_app.temperature.base import TemperaturePolicy

TEMPERATURES = Registry(
    "temperatures", "--model.init_args.loss.init_args.temperature", package="ssl_app.temperature", base=TemperaturePolicy
)
