"""No parser takes an abbreviated option: argparse's prefix matching took ``--trainer.max_epoch=2`` as
``max_epochs`` without a word. Every command line of the application refuses one, naming it.

Each case stops while parsing (nothing is built or trained), so these are fast.
"""

from __future__ import annotations

import io

import pytest

from ssl_app.cli import embed, export, main
from ssl_app.report import cli as report_cli
from ssl_app.sweep.command import parse_args as sweep_args
from tests.ssl_app.cli.test_cli import QUICKSTART


@pytest.mark.parametrize(
    ("subcommand", "option", "named"),
    [
        ("fit", "--trainer.max_epoch=2", "--trainer.max_epoch=2"),  # a Trainer option (the subcommand's parser)
        ("validate", "--trainer.limit_val=2", "--trainer.limit_val=2"),
        ("fit", "--model.init_args.optim.l=0.1", "--optim.l=0.1"),  # inside the model's own class parser
        ("fit", "--print_conf", "--print_conf"),
    ],
)
def test_the_cli_refuses_an_abbreviated_option_in_one_line(subcommand, option, named, capsys):
    with pytest.raises(SystemExit) as stop:
        main([subcommand, "--config", QUICKSTART, option, "--print_config"])
    out, err = capsys.readouterr()
    assert stop.value.code == 2, out[-2000:]
    lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and "unrecognized arguments" in lines[0] and named in lines[0], err
    assert "max_epochs: 2" not in out


def test_the_cli_still_takes_full_option_names(capsys):
    with pytest.raises(SystemExit) as stop:
        main(["fit", "--config", QUICKSTART, "--trainer.max_epochs=2", "--model.init_args.optim.lr=0.2", "--print_config"])
    out = capsys.readouterr().out
    assert stop.value.code in (0, None) and "max_epochs: 2" in out and "lr: 0.2" in out


def test_the_sweep_refuses_an_abbreviated_option(capsys):
    with pytest.raises(SystemExit) as stop:
        sweep_args(["--config", QUICKSTART, "--seed=1"])  # --seeds
    assert stop.value.code == 2 and "unrecognized arguments: --seed=1" in capsys.readouterr().err


def test_the_report_refuses_an_abbreviated_option(tmp_path, capsys):
    with pytest.raises(SystemExit) as stop:
        report_cli.parse_args([str(tmp_path), "--ref", "table1"])  # --reference
    assert stop.value.code == 2 and "unrecognized arguments: --ref" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("module", "option"),
    [(export, "--with"), (export, "--over"), (embed, "--proj"), (embed, "--batch=8")],
)
def test_export_and_embed_refuse_an_abbreviated_option(tmp_path, module, option):
    err = io.StringIO()
    code = module.main(["--ckpt", str(tmp_path / "x.ckpt"), "--out", str(tmp_path / "out"), option], io.StringIO(), err)
    lines = err.getvalue().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error:") and f"unrecognized arguments: {option}" in lines[0]
    assert not (tmp_path / "out").exists()
