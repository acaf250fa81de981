"""Every help kvcal prints is typer's own, byte for byte, with what kvcal/cli/rich_help.py defers and the panels
kvcal/cli/help_panels.py lays out.

Renders each help twice in fresh processes: once as kvcal does, once with typer's renderer imported whole (rich's
own ``Panel``) and the group's help flag left as typer makes it; at several terminal widths, and also on a colour
terminal (FORCE_COLOR), where rich writes styles.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
SUBCOMMANDS = [["profiles", "list"], ["profiles", "show"], ["profiles", "from-config"]]
# Invocations that print a help or a usage error without --help (others would run: a bare `kvcal sweep` sweeps):
# nothing, a group, a command without its argument, an unknown word.
BARE = [[], ["profiles"], ["fit"], ["emit-config"], ["nosuch"]]
WIDTHS = [20, 40, 60, 73, 80, 100, 137, 200]  # COLUMNS: cramped, usual and wide terminals

RENDER = """
    import contextlib, io, json, os, sys
    if {as_typer}:
        import typer.rich_utils  # the whole renderer, rich.markdown and rich.traceback included
        from typer.core import TyperGroup
        from kvcal.cli.rich_help import HelpFlagGroup
        HelpFlagGroup.get_help_option = TyperGroup.get_help_option  # the help flag's default as typer leaves it
    from kvcal.cli.app import main
    from kvcal.cli.commands import INDEX
    shown = {{}}
    helps = [[name, "--help"] for name, _ in INDEX] + [[*path, "--help"] for path in {subcommands!r}]
    for width in {widths!r}:
        os.environ["COLUMNS"] = str(width)  # read by each help's console
        for args in [["--help"], *helps, *{bare!r}]:
            out, err = io.StringIO(), io.StringIO()
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                code = main(args)
            shown[f"{{width}}: " + " ".join(args)] = [code, out.getvalue(), err.getvalue()]
    import rich.panel, typer.rich_utils
    print(json.dumps({{"shown": shown, "deferred": [m for m in ("rich.markdown", "rich.traceback", "pydantic")
                                                  if m not in sys.modules],
                      "rich_panel": typer.rich_utils.Panel is rich.panel.Panel}}))
"""


def render(*, as_typer: bool, **env: str) -> dict:
    code = textwrap.dedent(RENDER.format(as_typer=as_typer, subcommands=SUBCOMMANDS, bare=BARE, widths=WIDTHS))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "100", **env})
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.mark.parametrize("env", [{}, {"FORCE_COLOR": "1"}], ids=["plain", "colour"])
def test_every_help_and_usage_error_is_typers_own(env):
    mine, typers = render(as_typer=False, **env), render(as_typer=True, **env)
    assert mine["shown"].keys() == typers["shown"].keys() and len(mine["shown"]) == 23 * len(WIDTHS)
    for args, shown in mine["shown"].items():
        assert shown == typers["shown"][args], args
    for width in WIDTHS:
        sweep_help = mine["shown"][f"{width}: sweep --help"][1]
        assert "Usage:" in sweep_help and "╭─" in sweep_help
        assert ("\x1b[" in sweep_help) == bool(env)  # styled only on a terminal
        assert max(len(line) for line in sweep_help.splitlines()) == width or env  # laid out to the width asked
    assert "rich.markdown" in mine["deferred"] and "rich.traceback" in mine["deferred"]  # what kvcal saved
    assert typers["deferred"] == []  # the reference did import them: the comparison is not of one thing with itself
    assert not mine["rich_panel"] and typers["rich_panel"]  # kvcal laid its panels out itself, the reference did not


def test_the_stand_ins_give_the_real_classes_when_used():
    done = subprocess.run([sys.executable, "-c", textwrap.dedent("""
        import sys
        from kvcal.cli.rich_help import load_help_renderer
        load_help_renderer()
        import typer.rich_utils as rich_utils
        assert "rich.markdown" not in sys.modules and "rich.traceback" not in sys.modules
        text = rich_utils._make_rich_text(text="**bold**", markup_mode="markdown")  # typer's markdown mode
        import rich.markdown, rich.traceback
        assert type(text) is rich.markdown.Markdown, type(text)
        assert rich_utils.Traceback.from_exception is not None and rich.traceback.Traceback.__module__ == "rich.traceback"
        assert rich_utils.Markdown.real() is rich.markdown.Markdown
    """)], capture_output=True, text=True, timeout=120, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr


# What no command's help imports: the settings models (pydantic; their help is read off kvcal/cli/help_tables.py),
# the campaign-file reader (yaml) and the network client (httpx), whatever the command runs with.
HEAVY_FOR_HELP = ("pydantic", "yaml", "httpx", "kvcal.settings.sweep", "rich.markdown")


def test_no_commands_help_imports_pydantic_or_the_settings_models():
    from kvcal.cli.commands import INDEX

    loaded = {}
    for name in [name for name, _ in INDEX]:
        done = subprocess.run([sys.executable, "-c", textwrap.dedent(f"""
            import contextlib, io, sys
            from kvcal.cli.app import main
            with contextlib.redirect_stdout(io.StringIO()):
                assert main([{name!r}, "--help"]) == 0
            print(",".join(m for m in {HEAVY_FOR_HELP!r} if m in sys.modules))
        """)], capture_output=True, text=True, timeout=120, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
        assert done.returncode == 0, done.stderr
        loaded[name] = done.stdout.strip()
    assert {name: modules for name, modules in loaded.items() if modules} == {}


@pytest.mark.parametrize("args, may", [([], True), (["-h"], True), (["fit", "--help"], True), (["profiles"], True),
                                       (["fit"], True), (["--version"], False), (["fit", "run"], False)])
def test_the_renderer_is_prepared_only_where_a_help_may_be_printed(args, may):
    from kvcal.cli.app import may_print_help

    assert may_print_help(args) is may


def test_a_help_pauses_the_collector_and_leaves_it_on():
    import gc

    from kvcal.cli.rich_help import help_path

    assert gc.isenabled()
    with help_path(True):
        assert not gc.isenabled()
    assert gc.isenabled()
    with help_path(False):
        assert gc.isenabled()


def test_a_command_that_runs_after_all_runs_with_the_collector_on():
    """``--help`` taken as a flag's value runs the command: it must not run (for hours, a sweep) without the collector."""
    import gc

    import typer

    from kvcal.cli.app import _apply_shared_checks
    from kvcal.cli.rich_help import help_path

    seen = []
    built = typer.Typer()

    @built.command()
    def name(value: str = typer.Option(..., "--name")) -> None:
        seen.append((value, gc.isenabled()))

    _apply_shared_checks(built)
    with help_path(True):
        built(args=["--name", "--help"], standalone_mode=False)
    assert seen == [("--help", True)]
    assert gc.isenabled()
