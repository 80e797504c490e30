"""Temperature policies: the τ of a loss as a number, a schedule, a learnable parameter or a rule of the batch.

Every loss with a ``temperature`` option takes a number (``temperature: 0.5``, a :class:`Constant`)
or one of these, chosen by class path like everything else::

    temperature:
      class_path: ssl_app.temperature.Cosine
      init_args: {low: 0.1, high: 1.0, period: 200, unit: epoch}

``TEMPERATURES`` lists them (``python -m ssl_app list temperatures``); each registers itself with
``@TEMPERATURES.register`` above its class. docs/science.md, "Temperature policies", has the formulas.
"""

from ssl_app.temperature.base import Progress, TemperaturePolicy

# isort: off
# The order of these imports is the order of registration, i.e. of `python -m ssl_app list temperatures`.
from ssl_app.temperature.schedules import Constant, Cosine, Linear
from ssl_app.temperature.learnable import Learnable
from ssl_app.temperature.adaptive import Adaptive

# isort: on
from ssl_app.temperature.registry import TEMPERATURES

__all__ = ["TEMPERATURES", "Adaptive", "Constant", "Cosine", "Learnable", "Linear", "Progress", "TemperaturePolicy"]
