"""The README's "Writing a method" example is real: it trains through the CLI as printed."""

from __future__ import annotations

import math
import re

from ssl_app.cli import main
from tests.ssl_app.cli.test_cli import QUICKSTART, REPO, TINY


def readme_example() -> str:
    readme = (REPO / "README.md").read_text()
    section = readme[readme.index("### Writing a method") :]
    match = re.search(r"```python\n(.*?)```", section, re.S)
    assert match, "README: no python block under 'Writing a method'"
    return match.group(1)


def test_the_readme_method_trains_with_any_loss(tmp_path, monkeypatch):
    (tmp_path / "my_methods.py").write_text(readme_example())
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    cli = main(
        ["fit", "--config", QUICKSTART, *TINY, "--trainer.max_epochs=1", "--model=my_methods.OneWaySimCLR",
         "--model.init_args.loss=ssl_app.losses.SupCon"]
    )  # fmt: skip
    assert type(cli.model).__name__ == "OneWaySimCLR"
    assert cli.model.hparams["backbone"] == "small_cnn"  # the base option reached it through **kwargs
    assert math.isfinite(cli.trainer.callback_metrics["train/loss_epoch"].item())
    assert "metrics/uniformity" in cli.trainer.callback_metrics  # the metric callback read its views
