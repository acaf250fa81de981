"""Every command against the generated corpus of bad inputs, in-process (fast; the installed
console script runs the same corpus in tests/cli/test_installed_cli.py)."""

from __future__ import annotations

import os
import shutil

import pytest

from cli_corpus import NEEDS_DROPPED_DAC, base_for, build_workspace, commands, generated_cases, problems, render, snapshot
from kvcal.cli.app import app, main

CASES = generated_cases(app)


@pytest.fixture(scope="module")
def master(tmp_path_factory):
    root = tmp_path_factory.mktemp("corpus") / "ws"
    return build_workspace(root, lambda args: main(args))


def test_the_corpus_covers_every_command_and_its_path_parameters():
    covered = {case.command.name for case in CASES}
    assert covered == {c.name for c in commands(app)}
    for command in commands(app):
        for param in command.params:
            if param.kind == "path":
                assert any(param.name in case.id for case in CASES if case.command.name == command.name), param


@pytest.mark.timeout(120)
@pytest.mark.parametrize("command", commands(app), ids=lambda c: c.name)
def test_every_base_is_a_valid_invocation(command, master, tmp_path, capsys):
    """A case is its base with one ingredient made bad: a base that fails would let every case pass unearned."""
    ws = tmp_path / "ws"
    shutil.copytree(master, ws, symlinks=True)
    args = render(command, base_for(command), ws)
    code = main(args)
    out, err = capsys.readouterr()
    assert code == 0, f"kvcal {' '.join(args)} -> exit {code}\n{(out + err)[-2000:]}"


@pytest.mark.timeout(120)
@pytest.mark.parametrize("case", [c for c in CASES if not (c.needs_dropped_dac and os.geteuid() == 0)], ids=lambda c: c.id)
def test_bad_input_is_refused_cleanly(case, master, tmp_path, capsys):
    ws = tmp_path / "ws"
    shutil.copytree(master, ws, symlinks=True)
    args = case.prepare(ws)
    before = snapshot(ws)
    code = main(args)
    out, err = capsys.readouterr()
    found = problems(code, out, err, before, snapshot(ws))
    assert not found, f"kvcal {' '.join(args)} -> exit {code}: {found}\n{(out + err)[-2000:]}"
