"""Docs that cannot rot: every config a doc names exists and parses, every command it shows parses.

Docs read: README.md, the pages of docs/ (where the README's details moved), configs/README.md, the
Dockerfile (its usage comment and its CMD) and the header comments of every shipped config. A
*command* is any ``python -m ssl_app ARGS`` (also after ``.venv/bin/``, ``torchrun … -m ssl_app`` or
``srun … python -m ssl_app``) or ``docker run … ssl_app ARGS`` with at least one argument, in a code
block or an inline code span, backslash continuations joined. Each runs in-process with
``--print_config`` appended (exit 0, nothing trained), except ``list``, which runs as it is (exit 0,
something printed); the bare program name in prose (``python -m ssl_app`` sets …) is not a command.
"""

from __future__ import annotations

import fnmatch
import importlib
import json
import re
import shlex
from pathlib import Path

import pytest
import yaml
from lightning.pytorch.cli import LightningCLI

from ssl_app.cli import main
from tests.ssl_app.methods.test_readme_method import readme_example

REPO = Path(__file__).resolve().parents[1]
CONFIGS = REPO / "configs"
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md")), CONFIGS / "README.md", REPO / "Dockerfile"]
DOCS += sorted(CONFIGS.rglob("*.yaml"))
FRAGMENT_DIRS = ("base", "trainer", "callbacks", "data", "model")

CONFIG_PATH = re.compile(r"configs/[\w./*{},-]*\.yaml")
# "-m ssl_app ARGS" (python, torchrun) or "docker run … ssl_app ARGS" (the image).
SSL_APP_COMMAND = re.compile(r"(?:-m\s+ssl_app|docker\s+run\s.*?\sssl_app)\s+(\S.*)$")


def doc_text(path: Path) -> list[tuple[int, str]]:
    """``(line number, text)`` of the doc's lines, comment markers stripped for Dockerfile/YAML,
    continuation lines (ending in a backslash) joined onto the line that starts them."""
    lines = path.read_text().splitlines()
    if path.suffix == ".yaml":  # only the header: the comment lines before the first key
        end = next((i for i, line in enumerate(lines) if line and not line.startswith("#")), len(lines))
        lines = lines[:end]
    if path.suffix in (".yaml", "") and path.name != "README.md":
        lines = [re.sub(r"^#\s?", "", line) if line.startswith("#") else line for line in lines]
    joined: list[tuple[int, str]] = []
    pending, start = "", 0
    for number, line in enumerate(lines, 1):
        if not pending:
            start = number
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        joined.append((start, pending + line))
        pending = ""
    if pending:
        joined.append((start, pending))
    return joined


def commands(path: Path) -> list[tuple[str, list[str]]]:
    """``(where, argv after ssl_app)`` for every command the doc shows."""
    found = []
    for number, line in doc_text(path):
        # Inline code spans of Markdown prose are commands too; a whole line otherwise.
        spans = re.findall(r"`([^`]+)`", line) if path.suffix == ".md" and "`" in line else [line]
        for span in spans:
            match = SSL_APP_COMMAND.search(span)
            if match:
                found.append((f"{path.relative_to(REPO)}:{number}: {span.strip()}", shlex.split(match.group(1), comments=True)))
    if path.name == "Dockerfile":
        cmd = re.search(r"^CMD\s+(\[.*\])\s*$", path.read_text(), flags=re.MULTILINE)
        assert cmd, "the Dockerfile has no CMD"
        found.append((f"Dockerfile CMD {cmd.group(1)}", json.loads(cmd.group(1))))
    return found


def named_configs(path: Path) -> list[tuple[str, str]]:
    return [(f"{path.relative_to(REPO)}:{number}", name) for number, line in doc_text(path) for name in CONFIG_PATH.findall(line)]


def expand(name: str) -> list[Path]:
    """``configs/a/{x,y}.yaml`` and ``configs/a/*.yaml`` to the files they mean."""
    brace = re.search(r"\{([^}]*)\}", name)
    if brace:
        return [p for part in brace.group(1).split(",") for p in expand(name[: brace.start()] + part + name[brace.end() :])]
    return sorted(REPO.glob(name)) if "*" in name else [REPO / name]


ALL_COMMANDS = [c for doc in DOCS for c in commands(doc)]
ALL_NAMED = [n for doc in DOCS for n in named_configs(doc)]
# Each config once (parsing is what costs), with every place that names it.
NAMED: dict[str, list[str]] = {}
for _where, _name in ALL_NAMED:
    NAMED.setdefault(_name, []).append(_where)


def test_the_docs_show_what_they_should():
    # The scan itself must not silently find nothing (a changed prompt, a renamed file).
    wheres = " ".join(where for where, _ in ALL_COMMANDS)
    assert "README.md:" in wheres and "configs/README.md:" in wheres and "Dockerfile:" in wheres
    assert any("quickstart.yaml" in where for where, _ in ALL_COMMANDS)
    assert sum(1 for where, _ in ALL_COMMANDS if where.startswith("README.md")) >= 10
    assert any(where.startswith("Dockerfile CMD") for where, _ in ALL_COMMANDS)
    assert {"configs/quickstart.yaml", "configs/cifar10/memory_bank.yaml"} <= {name for _, name in ALL_NAMED}


@pytest.mark.parametrize("name", sorted(NAMED))
def test_named_config_exists_and_parses(name, capsys, monkeypatch):
    where = ", ".join(NAMED[name])
    paths = expand(name)
    assert paths, f"{where}: {name} matches no file"
    for path in paths:
        assert path.is_file(), f"{where}: {name} does not exist"
        content = yaml.safe_load(path.read_text())
        assert content, f"{where}: {name} is empty"
        if path.relative_to(CONFIGS).parts[0] in FRAGMENT_DIRS:
            continue  # a fragment is parsed through the experiments that use it (test_configs)
        # An experiment parses alone, a loss overlay on top of the paper's setup.
        overlay = path.relative_to(CONFIGS).parts[0] == "losses"
        files = [CONFIGS / "cifar10" / "memory_bank.yaml", path] if overlay else [path]
        argv = ["fit", *[arg for f in files for arg in ("--config", str(f))]]
        assert_parses(argv, where, capsys, monkeypatch)


@pytest.mark.parametrize("where,argv", ALL_COMMANDS, ids=[w for w, _ in ALL_COMMANDS])
def test_command_parses(where, argv, capsys, monkeypatch, tmp_path):
    if any("my_methods." in arg for arg in argv):  # the README's own example method, saved as it says
        (tmp_path / "my_methods.py").write_text(readme_example())
        monkeypatch.syspath_prepend(str(tmp_path))
    assert_parses(argv, where, capsys, monkeypatch)


def assert_parses(argv: list[str], where: str, capsys, monkeypatch) -> None:
    monkeypatch.chdir(REPO)  # the docs' paths are relative to the repository (the image's /app)
    if argv[:1] in (["export"], ["embed"]):  # not Trainer subcommands: their own parsers check the options
        parser = importlib.import_module(f"ssl_app.cli.{argv[0]}").parser()
        try:
            parser.parse_args(argv[1:])
        except Exception as error:  # noqa: BLE001 - any refusal is the doc's failure
            pytest.fail(f"{where}\ndoes not parse: {error}")
        return
    if argv[:1] == ["list"]:  # not a Trainer subcommand: it prints the registries and exits (ssl_app.cli.listing)
        with pytest.raises(SystemExit) as exit_info:
            main(argv)
        out, err = capsys.readouterr()
        assert exit_info.value.code == 0 and out.strip(), f"{where}\nfails: {err.strip()[-1500:]}"
        return
    # A parse that fell through must not build models or train (the Trainer's methods must stay
    # untouched: LightningCLI reads the subcommands' options from their signatures).
    monkeypatch.setattr(LightningCLI, "instantiate_classes", lambda *a, **k: pytest.fail(f"{where}: would have run"))
    # A help command (--help, --model.help CLASS) prints and exits by itself; any other gets
    # --print_config, which parses everything, prints the resolved config and exits.
    helps = any(a in ("-h", "--help") or a.split("=")[0].endswith(".help") for a in argv)
    args = argv if helps or "--print_config" in argv else [*argv, "--print_config"]
    with pytest.raises(SystemExit) as exit_info:
        main(args)
    out, err = capsys.readouterr()
    assert exit_info.value.code == 0, f"{where}\ndoes not parse: {err.strip()[-1500:]}"
    if helps:
        assert "usage:" in out, f"{where}: printed no help"
    else:
        assert isinstance(yaml.safe_load(out), dict), f"{where}: --print_config printed no config"


def test_a_broken_command_fails_with_its_line(capsys, monkeypatch):
    # The check itself: a wrong key or a missing config is a failure naming the doc line.
    with pytest.raises(AssertionError, match="README.md:1: bad"):
        assert_parses(
            ["fit", "--config", "configs/quickstart.yaml", "--trainer.no_such_option=3"], "README.md:1: bad", capsys, monkeypatch
        )
    with pytest.raises(AssertionError, match="README.md:2: gone"):
        assert_parses(["fit", "--config", "configs/cifar10/infonce.yaml"], "README.md:2: gone", capsys, monkeypatch)


def yaml_blocks(path: Path) -> list[tuple[str, str]]:
    text = path.read_text()
    return [
        (f"{path.relative_to(REPO)}:{text[: m.start()].count(chr(10)) + 2}", m.group(1))
        for m in re.finditer(r"^```yaml\n(.*?)^```", text, flags=re.MULTILINE | re.DOTALL)
    ]


README_YAML = yaml_blocks(REPO / "README.md")


@pytest.mark.parametrize("where,block", README_YAML, ids=[w for w, _ in README_YAML])
def test_readme_yaml_example_parses_and_is_not_infonce_in_disguise(where, block, tmp_path, capsys, monkeypatch):
    config = tmp_path / "example.yaml"
    config.write_text(block)
    assert_parses(["fit", "--config", str(config)], where, capsys, monkeypatch)
    example = yaml.safe_load(block)
    model = example["model"]
    loss = model["init_args"].get("loss", {})
    k = loss.get("init_args", {}).get("num_negatives")
    if model["class_path"].endswith("SimCLR") and k is not None:
        # SimCLR's negatives per anchor on one process: both views of the batch but its own two.
        negatives = 2 * example["data"]["init_args"]["batch_size"] - 2
        assert k < negatives, f"{where}: K = {k} >= {negatives} negatives per anchor: that is InfoNCE exactly"


def test_the_readme_has_a_yaml_example():
    assert README_YAML


def test_configs_readme_example_is_the_quickstart_file():
    blocks = [block for _, block in yaml_blocks(CONFIGS / "README.md")]
    assert blocks and yaml.safe_load(blocks[0]) == yaml.safe_load((CONFIGS / "quickstart.yaml").read_text())


TEST_REFERENCE = re.compile(r"(?<![\w*/])([\w/*]+\.py)(?:::(\w+))?")


def test_docs_testing_names_only_test_files_and_functions_that_exist():
    """Catches docs/testing.md describing a test file or a test function that was renamed, moved or
    removed (a page about the suite that no longer matches it)."""
    roots = [REPO / part for part in ("tests", "ssl_app", "callbacks", "datamodules", "benchmarks", ".ci", "docs")]
    files = [path for root in roots for path in root.rglob("*.py")]
    stale = []
    references = TEST_REFERENCE.findall((REPO / "docs" / "testing.md").read_text(encoding="utf-8"))
    assert len(references) > 20  # the page names the suite's files; a broken pattern would find none
    for name, function in references:
        found = [path for path in files if fnmatch.fnmatch(path.as_posix(), "*/" + name.lstrip("/"))]
        if not found:
            stale.append(name)
        elif function and not any(re.search(rf"def {function}\b", path.read_text(encoding="utf-8")) for path in found):
            stale.append(f"{name}::{function}")
    assert not stale, f"docs/testing.md names what does not exist: {stale}"


PACO_ROW = re.compile(r"^\| PaCo, overall top-1 \|(.+)\|\s*$", re.MULTILINE)


def test_paco_target_numbers_are_the_same_wherever_they_are_stated():
    """Catches the recipe's target drifting between the page that says where it comes from
    (docs/science.md) and the places a user reads it (README, docs/choosing.md, the recipe's header),
    e.g. one of them left at an approximate or recalled value."""
    science = (REPO / "docs" / "science.md").read_text(encoding="utf-8")
    [row] = PACO_ROW.findall(science)
    targets = [cell.strip() for cell in row.split("|")]
    assert targets == ["52.0", "56.0", "64.2"]  # IF 100, 50, 10, the table's order
    for path in (REPO / "README.md", REPO / "docs" / "choosing.md", CONFIGS / "cifar100_lt" / "paco.yaml"):
        text = path.read_text(encoding="utf-8")
        paragraph = text[text.index("52.0") - 400 : text.index("52.0") + 400] if "52.0" in text else ""
        missing = [value for value in targets if value not in paragraph]
        assert not missing, f"{path.relative_to(REPO)} does not state PaCo's targets {missing} beside 52.0"
