"""The repository's promises: every shipped YAML parses, every command has help and docs."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import typer.main
import yaml

from kvcal.cli.app import app

ROOT = Path(__file__).resolve().parents[2]


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
