"""Figures drawn from plain data (numbers and NumPy arrays, no tensors): what a figure shows, drawn with
matplotlib's Agg canvas into PNG bytes, in this process or in a process of its own (``worker``).

Importing this package loads NumPy and matplotlib only (no torch, no Lightning), so the drawing process
starts in about half a second.
"""
