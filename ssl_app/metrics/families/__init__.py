"""The built-in embedding metrics, one family per module, each registered with ``@register``.

A new family is one module here plus one import line below (docs/extending.md, "A metric"):
importing ``ssl_app.metrics`` imports this package, so every command and callback sees it.
"""

# isort: off
# The order of these imports is the order of registration: the order the metrics run, are listed
# by `python -m ssl_app list metrics` and become the report's columns after Table 1's.
from ssl_app.metrics.families import alignment
from ssl_app.metrics.families import uniformity
from ssl_app.metrics.families import tolerance
from ssl_app.metrics.families import hard_negatives
from ssl_app.metrics.families import effective_rank
from ssl_app.metrics.families import spectrum
from ssl_app.metrics.families import geometry
from ssl_app.metrics.families import train_negatives

# isort: on

__all__ = ["alignment", "effective_rank", "geometry", "hard_negatives", "spectrum", "tolerance", "train_negatives", "uniformity"]
