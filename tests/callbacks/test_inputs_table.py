"""The TensorBoard text ``metrics/inputs`` (``callbacks/inputs_table.py``), through TensorBoard's Markdown."""

from __future__ import annotations

import re
from html import unescape

from tensorboard.plugin_util import markdown_to_safe_html

from callbacks.inputs_table import inputs_table
from ssl_app.metrics import registered_fields


def test_the_inputs_table_renders_every_formula_whole_in_tensorboard():
    """The table through TensorBoard's own Markdown path (``markdown_to_safe_html``, what the Text tab
    runs). Catches an unescaped ``|`` (‖z_a − z_b‖² split the cells: alignment read "mean_i"), ``_``
    or ``*`` read as emphasis, ``<`` taken for HTML, and a row for a tag the run does not log."""
    logged = {f"metrics/{metric.tag(name, 10)}": metric.formula(name, 10) for metric, name in registered_fields()}
    logged.pop("metrics/top10_train_neg_sim")
    html = markdown_to_safe_html(inputs_table(10, "clean", {*logged, "metrics/nonfinite"}))
    rows = [re.findall(r"<td>(.*?)</td>", row, re.S) for row in re.findall(r"<tr>(.*?)</tr>", html, re.S)][1:]
    cells = {tag: rest for tag, *rest in rows}
    assert set(cells) == {*logged, "metrics/nonfinite"}
    for tag, formula in logged.items():
        assert [unescape(cell) for cell in cells[tag][:1]] == [formula] and len(cells[tag]) == 2, (tag, cells[tag])


def test_a_study_claims_each_distinct_table_once(tmp_path):
    """Catches every fit of a sweep writing the same table (issue 40: identical for all 10 runs), a second table (another
    top-k) lost because one was written, and a retry of the fit that claimed it (its folder cleared) left without it."""
    from callbacks.inputs_table import claim_table

    study, first, second = tmp_path / "tau", tmp_path / "tau" / "a" / "seed0", tmp_path / "tau" / "b" / "seed0"
    table, other = inputs_table(10, "clean"), inputs_table(5, "clean")
    assert claim_table(study, first, table)
    assert not claim_table(study, second, table)
    assert claim_table(study, second, other)
    assert claim_table(study, first, table)  # the same fit again, in its own folder
