"""What ``python -m ssl_app`` answers before importing Lightning (``ssl_app.cli.entry``, ``ssl_app.cli.early``):
``--help``, ``list``, a missing or misspelled command, a config that is no mapping, a class path that names no
class. Each is checked in a fresh process, where what was imported can be read from ``sys.modules``
(benchmarks/README.md, "Errors and --help before the imports", has the seconds this saves)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ssl_app.cli import main

REPO = Path(__file__).resolve().parents[3]
QUICKSTART = str(REPO / "configs" / "quickstart.yaml")

#: Runs ``main`` on each argument list in one process; prints each exit status and stream, then what was imported.
PROBE = """
import contextlib, io, json, sys
from ssl_app.cli import main
results = []
for args in json.loads(sys.argv[1]):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main(args)
            code = None
        except SystemExit as stop:
            code = stop.code
    results.append([code, out.getvalue(), err.getvalue()])
print(json.dumps({"results": results, "imported": [m for m in ("torch", "lightning") if m in sys.modules]}))
"""


def probe(*cases: list[str]) -> tuple[list[tuple[int, str, str]], list[str]]:
    """``(status, stdout, stderr)`` of ``main(args)`` for each case in one fresh process, and which of torch
    and Lightning it imported."""
    found = subprocess.run(
        [sys.executable, "-c", PROBE, json.dumps(list(cases))], capture_output=True, text=True, cwd=REPO, check=True
    )
    report = json.loads(found.stdout.strip().splitlines()[-1])
    return [tuple(result) for result in report["results"]], report["imported"]


def test_help_list_and_refused_commands_import_neither_torch_nor_lightning(tmp_path):
    """Catches ``--help``, ``list --help``, a misspelled command or a broken config costing the seconds of
    importing torch and Lightning before its line (9–14 s on a loaded 2-core machine: issue 40)."""
    broken = tmp_path / "broken.yaml"
    broken.write_text("model: [unclosed\n")
    results, imported = probe(["--help"], ["list", "--help"], ["list", "bogus"], ["fti"], [], ["fit", "--config", str(broken)])
    assert imported == []
    (help_code, help_out, _), (list_code, list_out, _), (kind_code, _, kind_err) = results[:3]
    assert help_code == 0 and "{fit,validate,test}" in help_out and "embed --ckpt" in help_out
    assert list_code == 0 and "usage: python -m ssl_app list" in list_out
    assert kind_code == 2 and "unknown kind 'bogus'" in kind_err
    command_code, _, command_err = results[3]
    assert command_code == 2 and command_err.startswith("error: invalid choice: 'fti'; did you mean fit?")
    assert results[4][0] == 2 and results[4][2].startswith("error: no command given; choose from fit, validate, test")
    config_code, _, config_err = results[5]
    assert config_code == 2 and config_err.startswith(f"error: --config {broken} is not valid YAML at line 2")


def test_a_misspelled_loss_is_refused_before_lightning_is_imported():
    """Catches a misspelled loss class waiting for Lightning and LightningCLI before its line, and the line
    saying "Expected a path" (as if a file were meant) without the class that was meant."""
    given = "--model.init_args.loss=ssl_app.losses.InfoNCe"
    results, imported = probe(["fit", "--config", QUICKSTART, given], ["list", "losses"])
    assert "lightning" not in imported
    (code, _, err), (list_code, list_out, _) = results
    assert code == 2 and err.splitlines() == [
        "error: model.init_args.loss: ssl_app.losses has no class InfoNCe; did you mean ssl_app.losses.InfoNCE?",
        "(options: python -m ssl_app fit --help)",
    ]
    assert list_code == 0 and "ssl_app.losses.InfoNCE" in list_out


@pytest.mark.parametrize(
    ("given", "problem", "meant"),
    [
        (
            "--model.init_args.loss.class_path=ssl_app.losses.InfoNCe",
            "ssl_app.losses has no class InfoNCe",
            "ssl_app.losses.InfoNCE",
        ),
        ("--model=ssl_app.methods.SimCLr", "ssl_app.methods has no class SimCLr", "ssl_app.methods.SimCLR"),
        (
            "--data=datamodules.SyntheticDatamodule",
            "datamodules has no class SyntheticDatamodule",
            "datamodules.SyntheticDataModule",
        ),
        ("--model.init_args.loss=ssl_app.loses.InfoNCE", "no module named ssl_app.loses", "ssl_app.losses.InfoNCE"),
    ],
)
def test_a_class_path_on_the_command_line_that_names_no_class_says_what_was_meant(given, problem, meant, capsys):
    """Catches each way of naming a class (the option's value, its ``class_path``, a method, a datamodule, a
    misspelled module) falling through to jsonargparse's "Expected a path"."""
    with pytest.raises(SystemExit) as stop:
        main(["fit", "--config", QUICKSTART, given])
    option = given.split("=")[0].lstrip("-").removesuffix(".class_path")  # as the parser names it
    assert stop.value.code == 2
    assert capsys.readouterr().err.splitlines()[0] == f"error: {option}: {problem}; did you mean {meant}?"


MISSPELLED_OPTIONS = [
    ["--trainer.max_epoch=3"],
    ["--seed_everythin=1"],
    ["--model.init_args.los=x"],
    ["--model.los=x"],
    ["--data.init_args.batchsize=3"],
    ["--model.init_args.loss.init_args.temperatur=0.2"],
    ["--checkpoint.every_n_epoch=2"],
]


def test_a_misspelled_option_is_refused_before_lightning_is_imported_with_the_parser_s_words(capsys):
    """Catches an unknown option costing the seconds of importing Lightning before its line (issue 40: 6–7 s on
    this machine), and the early line saying something else than the parser says for it (the parser's words are
    taken from ``ssl_app.cli.app.main``, which builds the real parser)."""
    from ssl_app.cli.app import main as parser_main

    cases = [["fit", "--config", QUICKSTART, *given] for given in MISSPELLED_OPTIONS]
    cases.append(["fit", "--config", str(REPO / "configs" / "linear.yaml"), "--data.init_args.data.init_args.batch_siz=3"])
    results, imported = probe(*cases)
    assert "lightning" not in imported
    for case, (code, _, early) in zip(cases, results):
        with pytest.raises(SystemExit) as stop:
            parser_main(case)
        assert code == stop.value.code == 2
        assert "did you mean" in early
        assert early.splitlines()[0] == capsys.readouterr().err.splitlines()[0], case


def test_every_option_the_configs_set_passes_the_early_check():
    """Catches the early check refusing what the parser takes: every key every shipped config sets (through its
    includes and fragments), given again on the command line, is let through."""
    from ssl_app.cli.early import check_option_names
    from ssl_app.cli.given_config import given_tree

    def leaves(tree, prefix=""):
        for key, value in tree.items():
            if isinstance(value, dict) and value:
                yield from leaves(value, f"{prefix}{key}.")
            else:
                yield f"{prefix}{key}"

    configs = sorted((REPO / "configs").rglob("*.yaml"))
    checked = 0
    for config in configs:
        tree = given_tree(["--config", str(config)])
        if "model" not in tree or "trainer" not in tree:
            continue  # a fragment, not an experiment
        for key in leaves(tree):
            check_option_names("fit", ["--config", str(config), f"--{key}=1"], REPO)
            checked += 1
    assert checked > 500


@pytest.mark.parametrize("command", ["fit", "validate", "test"])
def test_the_top_level_options_are_the_parser_s(command, capsys):
    """Catches ``top_level_options`` missing an option the parser has (it would be refused early) or naming one
    it lacks (its misspelling would get a wrong "did you mean")."""
    import re

    from ssl_app.cli.app import main as parser_main
    from ssl_app.cli.early import top_level_options

    with pytest.raises(SystemExit):
        parser_main([command, "--help"])
    shown = set(re.findall(r"^  (?:-\w \S+, )?--(\w+)\b", capsys.readouterr().out, flags=re.MULTILINE))
    assert set(top_level_options(command)) == shown - {"help"}
