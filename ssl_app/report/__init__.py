"""The study report: Table 1 (Markdown and CSV) and figures from run folders.

``python -m ssl_app.report RUNS_DIR [--out DIR] [--title TEXT] [--reference table1] [--baseline LABEL]`` reads every run under
RUNS_DIR (TensorBoard event files, ``config.yaml``, the sweep's ``sweep.json``, a ``linear/``
evaluation), groups seeds into configurations, prints the table and compares the configurations by
paired differences over shared seeds; see ``docs/report.md``.
It needs neither the trainer nor the sweep tool: runs made by hand read the same.
"""

from ssl_app.report.cli import main, make_report

__all__ = ["main", "make_report"]
