"""ssl_app.drawing: a torch-free package (the drawing process starts in half a second), the same floor
as the metrics' spectrum."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from ssl_app.drawing import figures
from ssl_app.metrics import rank

REPO = Path(__file__).resolve().parents[3]


def test_the_drawing_process_imports_neither_torch_nor_the_application():
    """Catches an import that makes every drawing process load torch and Lightning (seconds of CPU per
    fit, beside the training it should not slow down)."""
    code = (
        "import sys, ssl_app.drawing.worker, ssl_app.drawing.figures; "
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'torch', 'lightning', 'callbacks', 'datamodules'}))"
    )
    found = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    assert found.stdout.strip() == "[]"


def test_the_spectrum_floor_is_the_metrics_floor():
    assert figures.SPECTRUM_FLOOR == rank.SPECTRUM_FLOOR
