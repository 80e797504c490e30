"""The run plan (``ssl_app.cli.plan``) as a plain function of a parsed config: no Trainer, no model, no run."""

from __future__ import annotations

import pytest
from jsonargparse import Namespace

from ssl_app.cli.plan import next_version_name, plan_run
from ssl_app.errors import ConfigError
from ssl_app.runs.layout import EVALUATIONS_DIR
from ssl_app.runs.record import RECORD_FILE


def config(tmp_path, model: str = "ssl_app.methods.SimCLR", ckpt_path=None, **model_args) -> Namespace:
    logger = Namespace(
        class_path="lightning.pytorch.loggers.TensorBoardLogger",
        init_args=Namespace(save_dir=str(tmp_path / "runs"), name="quickstart", version=None),
    )
    return Namespace(
        model=Namespace(class_path=model, init_args=Namespace(**model_args)),
        trainer=Namespace(logger=logger),
        ckpt_path=ckpt_path,
        attach_to_run=True,
    )


def no_current() -> dict:
    raise AssertionError("the resolved config is not needed for this plan")


def test_a_fit_without_a_checkpoint_takes_the_next_free_version(tmp_path):
    given = config(tmp_path)
    plan = plan_run("fit", given, no_current)
    assert (plan.kind, plan.checkpoint, plan.parent, plan.loaded) == ("fit", None, None, None)
    assert plan.next_name is next_version_name and given.trainer.logger.init_args.version is None
    (tmp_path / "runs" / "quickstart" / "version_0").mkdir(parents=True)
    assert plan.next_name(tmp_path / "runs" / "quickstart") == "version_1"


def test_ckpt_path_last_without_a_checkpoint_starts_a_fit_but_not_an_evaluation(tmp_path, capsys):
    given = config(tmp_path, ckpt_path="last")
    plan = plan_run("fit", given, lambda: {"model": {"class_path": "ssl_app.methods.SimCLR"}})
    assert plan.checkpoint is None and given.ckpt_path is None and plan.next_name is next_version_name
    assert "no last.ckpt of this experiment under" in capsys.readouterr().err
    with pytest.raises(ConfigError, match="--ckpt_path last: no last.ckpt under"):
        plan_run("validate", config(tmp_path, ckpt_path="last"), no_current)


def test_a_linear_probe_is_filed_in_the_run_it_evaluates(tmp_path):
    run = tmp_path / "runs" / "quickstart" / "version_3"
    (run / "checkpoints").mkdir(parents=True)
    (run / RECORD_FILE).write_text("{}", encoding="utf-8")  # a run folder: it has a record
    (run / EVALUATIONS_DIR / "linear_0").mkdir(parents=True)
    given = config(tmp_path, "ssl_app.evaluation.LinearProbe", checkpoint=str(run / "checkpoints" / "last.ckpt"))
    plan = plan_run("fit", given, no_current)
    logger = given.trainer.logger.init_args
    assert (plan.kind, plan.parent) == ("linear", run)
    assert (logger.save_dir, logger.name, logger.version) == (str(run), EVALUATIONS_DIR, "linear_1")
    assert plan.next_name(run / EVALUATIONS_DIR) == "linear_1"
    # its curves as CSV in its folder, not a TensorBoard run beside the fit's (issue 40); TensorBoard's options dropped
    assert given.trainer.logger.class_path == "lightning.pytorch.loggers.CSVLogger"


def test_a_probe_of_its_own_keeps_the_configured_logger_and_a_resumed_probe_keeps_its_earlier_curves(tmp_path):
    """Catches ``--attach_to_run=false`` losing its TensorBoard logger, TensorBoard-only options handed to the
    CSVLogger, and a resumed probe's curves deleted by the CSVLogger (it removes the metrics.csv it finds)."""
    from ssl_app.cli.app import keep_earlier_curves
    from ssl_app.cli.plan import curves_as_csv

    alone = config(tmp_path, "ssl_app.evaluation.LinearProbe", checkpoint=str(tmp_path / "elsewhere.ckpt"))
    alone.attach_to_run = False
    plan_run("fit", alone, no_current)
    assert alone.trainer.logger.class_path.endswith("TensorBoardLogger")
    options = Namespace(save_dir="s", name="n", version="v", log_graph=False)
    trainer = Namespace(logger=[Namespace(class_path="lightning.pytorch.loggers.TensorBoardLogger", init_args=options)])
    curves_as_csv(trainer)
    assert trainer.logger[0].class_path.endswith("CSVLogger") and dict(vars(trainer.logger[0].init_args)) == {
        "save_dir": "s", "name": "n", "version": "v"}  # fmt: skip
    (tmp_path / "metrics.csv").write_text("first", encoding="utf-8")
    keep_earlier_curves(tmp_path)
    (tmp_path / "metrics.csv").write_text("second", encoding="utf-8")
    keep_earlier_curves(tmp_path)
    assert [(tmp_path / f"metrics_{n}.csv").read_text() for n in (0, 1)] == ["first", "second"]
    assert not (tmp_path / "metrics.csv").exists()
