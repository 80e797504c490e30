"""What every registered embedding metric must do, run for each one (``metric_case``, tests/generic.py).

No test here names a metric: a family registered with ``@register`` (docs/extending.md, "A metric")
is put through each of them, and ``pytest -k <name>`` selects its cases. What each metric computes is
its own file's test (tests/ssl_app/metrics/test_registry.py, test_embedding.py).
"""

from __future__ import annotations

import math

import torch

from callbacks.inputs_table import inputs_table, markdown_text
from ssl_app.metrics import EmbeddingInputs, EmbeddingMetric, evaluate_metrics
from ssl_app.report.summary import table_columns

TOP_K = 3


def full_inputs(seed: int = 0, **overrides) -> EmbeddingInputs:
    """Enough of every input for every metric: 12 clean rows in 3 labelled classes with backbone
    features, 12 pairs of views, 10 train rows and 12 samples of 3 views each."""
    g = torch.Generator().manual_seed(seed)
    clean = torch.randn(12, 4, generator=g)
    values = dict(
        clean=clean,
        labels=torch.arange(12) % 3,
        view_a=clean + 0.3 * torch.randn(12, 4, generator=g),
        view_b=clean + 0.3 * torch.randn(12, 4, generator=g),
        top_k=TOP_K,
        backbone=torch.randn(12, 6, generator=g),
        train=torch.randn(10, 4, generator=g),
        multiview=clean.unsqueeze(1) + 0.3 * torch.randn(12, 3, 4, generator=g),
    )
    return EmbeddingInputs(**{**values, **overrides})


def fields(metric: EmbeddingMetric, inputs: EmbeddingInputs) -> dict[str, torch.Tensor]:
    return evaluate_metrics(inputs, names=(metric.name,)).fields


def test_every_field_is_finite_and_logged_under_its_tag_with_k_filled_in(metric_case):
    """Catches a metric returning a non-finite value on ordinary inputs, a field that never reaches
    the scalars, and a tag or formula whose ``{k}`` is left unfilled."""
    report = evaluate_metrics(full_inputs(), names=(metric_case.name,))
    assert set(report.fields) == set(metric_case.tags)
    for name, value in report.fields.items():
        assert value.numel() and bool(torch.isfinite(value).all()), (name, value)
    tags = {metric_case.tag(name, TOP_K) for name in metric_case.tags}
    assert set(report.scalars()) == tags and not any("{" in tag for tag in tags)
    for name in metric_case.tags:
        assert metric_case.formula(name, TOP_K).strip() and "{k}" not in metric_case.formula(name, TOP_K)


def test_too_few_rows_of_any_input_it_reads_leave_every_field_nan(metric_case):
    """Catches a metric that fails, or logs a meaningless number, when an input it declares is
    missing or too small (a one-sample evaluation split, unlabelled data, no backbone pass, no
    train pass): every field is then present and NaN, and no scalar is logged."""
    x = full_inputs()
    too_few = {
        "clean": dict(clean=x.clean[:1], labels=x.labels[:1], backbone=x.backbone[:1]),
        "views": dict(view_a=x.view_a[:1], view_b=x.view_b[:1]),
        "labels": dict(labels=torch.full_like(x.labels, -1)),
        "backbone": dict(backbone=None),
        "train": dict(train=None),
        "multiview": dict(multiview=x.multiview[:1]),
    }
    for read in metric_case.reads:
        report = evaluate_metrics(full_inputs(**too_few[read]), names=(metric_case.name,))
        assert set(report.fields) == set(metric_case.tags), read
        assert all(math.isnan(report.value(name)) for name in metric_case.tags), read
        assert report.scalars() == {}, read


def test_it_reads_only_the_inputs_it_declares(metric_case):
    """Catches a metric reading an input it does not declare: the registry would run it where that
    input is absent or too small (no NaN), and ``metrics/inputs`` would name the wrong inputs.
    Every undeclared input is replaced by other numbers and no field may change."""
    other = full_inputs(seed=1)
    replaced = {
        "clean": dict(clean=other.clean),
        "views": dict(view_a=other.view_a, view_b=other.view_b),
        "labels": dict(labels=(torch.arange(12) + 1) % 2),
        "backbone": dict(backbone=other.backbone),
        "train": dict(train=other.train),
        "multiview": dict(multiview=other.multiview),
    }
    changed = {}
    for name, overrides in replaced.items():
        if name not in metric_case.reads:
            changed.update(overrides)
    expected = fields(metric_case, full_inputs())
    found = fields(metric_case, full_inputs(**changed))
    for name in metric_case.tags:
        torch.testing.assert_close(
            found[name], expected[name], equal_nan=True, msg=f"{metric_case.name}.{name} read {sorted(changed)}"
        )


def test_every_field_is_a_report_column_and_a_row_of_the_inputs_table(metric_case):
    """Catches a registered metric that the report's table (its columns and their meanings) or the
    callback's ``metrics/inputs`` text leaves out, so it would be logged but never explained."""
    columns = {column.key: column for column in table_columns()}
    table = inputs_table(TOP_K, "clean")
    for name, tag in metric_case.tags.items():
        assert columns[tag].meaning == metric_case.formula(name) and columns[tag].tag == f"metrics/{tag}"
        row = (
            f"| {markdown_text(f'metrics/{metric_case.tag(name, TOP_K)}')} | {markdown_text(metric_case.formula(name, TOP_K))} |"
        )
        assert row in table
