"""The repository's promises: every shipped YAML parses, every command has help and docs."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
import typer.main
import yaml

from typer.testing import CliRunner

from kvcal.cli.app import app, reflow_prose

ROOT = Path(__file__).resolve().parents[3]


def _tracked(*patterns: str) -> list[Path]:
    out = subprocess.run(["git", "ls-files", *patterns], cwd=ROOT, capture_output=True, text=True)
    if out.returncode != 0:  # not a git checkout (e.g. an sdist): walk the tree instead
        return [p for pattern in patterns for p in ROOT.rglob(pattern) if ".venv" not in p.parts]
    return [ROOT / line for line in out.stdout.splitlines()]


@pytest.mark.parametrize("path", _tracked("*.yaml", "*.yml"), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_shipped_yaml_file_parses(path):
    documents = list(yaml.safe_load_all(path.read_text()))
    assert documents and all(doc is not None for doc in documents)


def _commands() -> dict[str, object]:
    group = typer.main.get_command(app)
    return dict(group.commands)


def test_every_command_has_help_an_example_and_a_readme_line():
    readme = (ROOT / "README.md").read_text()
    commands = _commands()
    assert {"sweep", "export", "fit", "plot", "emit-config", "compare", "history", "predict", "k8s-job", "profiles"} <= set(commands)
    for name, command in commands.items():
        assert (command.help or "").strip(), f"{name} has no help"
        assert f"kvcal {name}" in readme, f"README does not mention kvcal {name}"
        text = (command.help or "") + (command.epilog or "")
        if hasattr(command, "commands"):  # a group: its subcommands carry the examples
            text += "".join((sub.help or "") + (sub.epilog or "") for sub in command.commands.values())
        assert f"kvcal {name}" in text, f"{name} --help shows no example"


def test_version_and_help_exit_zero(kvcal):
    assert kvcal("--version").code == 0
    result = kvcal("--help")
    assert result.code == 0 and "sweep" in result.out


def _all_commands(group=None, prefix="") -> dict[str, object]:
    group = group or typer.main.get_command(app)
    out = {}
    for name, command in group.commands.items():
        out[prefix + name] = command
        if hasattr(command, "commands"):
            out.update(_all_commands(command, prefix + name + " "))
    return out


RICH_TAG = re.compile(r"(?<!\\)\[[a-z#/@][^\[]*?\]")  # what rich's markup parser takes for a style tag and drops


def test_no_help_text_holds_what_rich_would_read_as_markup():
    for name, command in _all_commands().items():
        texts = [command.help or "", command.epilog or ""] + [getattr(p, "help", None) or "" for p in command.params]
        for text in texts:
            assert not RICH_TAG.search(text), f"kvcal {name}: {RICH_TAG.search(text).group()} would vanish from --help"


def test_epilog_prose_is_one_line_a_paragraph_so_the_terminal_wraps_it():
    assert reflow_prose("Exit 3: the pull\nnever won.\n\n  kvcal fit a \\\n      --json") == \
        "Exit 3: the pull never won.\n\n  kvcal fit a \\\n      --json"
    assert reflow_prose(None) is None
    for name, command in _all_commands().items():
        for paragraph in (command.epilog or "").split("\n\n"):
            lines = paragraph.splitlines()
            assert len(lines) <= 1 or any(line.startswith(" ") for line in lines), (name, paragraph)


def test_help_renders_every_epilog_sentence_at_80_columns():
    runner = CliRunner()
    for name, command in _all_commands().items():
        if hasattr(command, "commands"):
            continue
        result = runner.invoke(app, [*name.split(), "--help"], env={"COLUMNS": "80"}, terminal_width=80)
        assert result.exit_code == 0, name
        shown = " ".join(result.output.split())
        for paragraph in (command.epilog or "").split("\n\n"):
            if not any(line.startswith(" ") for line in paragraph.splitlines()):
                assert " ".join(paragraph.split()) in shown, (name, paragraph)
