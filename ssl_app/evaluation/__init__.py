"""Evaluation of trained encoders: the linear probe (Table 1's accuracy row)."""

from ssl_app.evaluation.linear import LinearProbe, load_method

__all__ = ["LinearProbe", "load_method"]
