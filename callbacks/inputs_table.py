"""The TensorBoard text ``metrics/inputs``: each tag ``EmbeddingMetrics`` logs, with its formula and inputs.

A study (a sweep's fits) shows each distinct table once, in the run of the first fit that writes it
(:func:`claim_table`), not once per run.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Collection
from pathlib import Path
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


#: The folder (under a study's root) whose files say which run shows each distinct table.
CLAIMS_DIR = ".inputs_tables"


def claim_table(study: Path, run: Path, table: str) -> bool:
    """Whether ``run`` (a fit of the study at ``study``) writes ``table``: the first fit to show this table claims it,
    a file named by the table's hash in ``study/.inputs_tables/``, created exclusively (fits run side by side) and
    holding the run's path; the fit that claimed it writes it again (a retry in the same folder); every other fit
    of the study leaves it out. A claim that cannot be made or read: ``True`` (twice is better than never)."""
    claims = study / CLAIMS_DIR
    path = claims / hashlib.sha256(table.encode("utf-8")).hexdigest()[:16]
    here = str(run.absolute())
    try:
        claims.mkdir(parents=True, exist_ok=True)
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    except FileExistsError:
        try:
            return path.read_text(encoding="utf-8").strip() == here
        except OSError:
            return True
    except OSError:
        return True
    with os.fdopen(descriptor, "w", encoding="utf-8") as file:
        file.write(here + "\n")
    return True
