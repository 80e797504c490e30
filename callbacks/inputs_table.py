"""The TensorBoard text ``metrics/inputs``: each tag ``EmbeddingMetrics`` logs, with its formula and inputs."""

from __future__ import annotations

import re
from collections.abc import Collection
from typing import Literal

from ssl_app.metrics import registered_fields

#: What uniformity, tolerance and the effective rank read (``EmbeddingMetrics.uniformity_inputs``).
UniformityInputs = Literal["clean", "augmented"]


def inputs_table(top_k: int, uniformity_inputs: UniformityInputs, logged: Collection[str] | None = None) -> str:
    """A Markdown table: each logged tag (``logged``: only those of these tags; ``None``: every
    registered one), its formula and the inputs it was computed on, escaped for Markdown."""
    clean = "clean (eval-transform) embeddings" if uniformity_inputs == "clean" else "first augmented view"
    words = {
        "clean": clean,
        "views": "two augmented views",
        "labels": "labels",
        "backbone": "backbone features of the clean (eval-transform) images, unnormalised",
        "train": "clean embeddings of the train split",
        "multiview": "lidar_views augmented views of each sample",
    }
    rows = [(f"metrics/{metric.tag(name, top_k)}", metric.formula(name, top_k), " + ".join(words[r] for r in metric.reads))
            for metric, name in registered_fields()]  # fmt: skip
    rows.append(("metrics/nonfinite", "embeddings with a NaN/inf entry (left out of the rest)", "all"))
    lines = ["| tag | formula | inputs |", "|---|---|---|"]
    lines += ["| " + " | ".join(map(markdown_text, row)) + " |" for row in rows if logged is None or row[0] in logged]
    return "\n".join(lines)


def markdown_text(text: str) -> str:
    """``text`` as literal Markdown: ``&``, ``<``, ``>`` as HTML entities, and every other character
    Markdown would read (``|`` splits a table cell, ``_`` and ``*`` emphasise) escaped with a backslash."""
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return re.sub(r"([\\`*_{}\[\]()#+!|~-])", r"\\\1", text)
