"""kvcal/cli/help_panels.py lays out a panel to the bytes rich does, for tables typer builds and for ones it does not.

The helps themselves are compared with typer's renderer in test_help_rendering.py; here synthetic tables reach the
paths kvcal's helps may not: help cells whose items wrap onto several rows, cramped widths, wide characters, and
the tables the fast layout leaves to rich (a styled column, a box, an item that is not a text).
"""

from __future__ import annotations

import io

import pytest
from rich import box
from rich.columns import Columns
from rich.console import Console
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from kvcal.cli import help_panels


def typer_table(**overrides) -> Table:
    """A table as typer.rich_utils._print_options_panel builds one."""
    settings = {
        "highlight": True,
        "show_header": False,
        "expand": True,
        "box": None,
        "show_lines": False,
        "leading": 0,
        "border_style": None,
        "row_styles": None,
        "pad_edge": False,
        "padding": (0, 1),
    }
    return Table(**{**settings, **overrides})


def fill(table: Table) -> Table:
    long_help = "Campaign YAML: the models, transports and prefix lengths to sweep, one run folder per cell " * 2
    table.add_row(
        Text("*", style="red"),
        Text("--campaign", style="bold cyan"),
        Text("-c", style="bold green"),
        "",
        Text("<path>", style="bold yellow"),
        Columns(
            [
                Text(long_help.strip()),
                Text("[default: campaign.yaml]", style="dim"),
                Text("[required]", style="dim red"),
            ]
        ),
    )
    table.add_row(
        "",
        Text("--dry-run"),
        Text(""),
        Text("--no-dry-run", style="bold magenta"),
        Text("<bool>"),
        Columns([Text("Plan only."), Text("[default: no-dry-run]", style="dim")]),
    )
    table.add_row("", Text("--名前"), Text(""), "", Text("<text>\tx"), Columns([Text("幅の広い文字 " * 6)]))
    table.add_row("", Text("--quiet"), Text(""), "", Text(""), Columns([]))
    return table


def rendered(make, table: Table, width: int, colour: bool) -> str:
    out = io.StringIO()
    console = Console(file=out, width=width, force_terminal=colour, color_system="truecolor" if colour else None)
    console.print(make(table, border_style="dim", title="Options", title_align="left"))
    return out.getvalue()


@pytest.mark.parametrize("colour", [False, True], ids=["plain", "colour"])
@pytest.mark.parametrize("variant", ["typer", "styled column", "boxed", "not a text"])
def test_a_panel_is_richs_own_at_every_width(variant, colour):
    table = fill(typer_table(box=box.ROUNDED) if variant == "boxed" else typer_table())
    if variant == "styled column":
        table.columns[1].style = "bold"
    if variant == "not a text":
        table.add_row("", "--plain-str", "", "", "", Columns(["a str item", Text("and a text")]))
    for width in range(1, 121):
        assert rendered(help_panels.panel, table, width, colour) == rendered(Panel, table, width, colour), width


def test_the_layout_is_used_for_typers_tables_only():
    laid_out = help_panels.panel(fill(typer_table()), title="Options")
    assert isinstance(laid_out, help_panels._Panel)
    for other in (fill(typer_table(box=box.ROUNDED)), fill(typer_table(show_lines=True)), Text("an error")):
        assert help_panels.panel(other, title="Error").renderable is other


@pytest.mark.parametrize("colour", [False, True], ids=["plain", "colour"])
def test_a_rich_without_the_private_helpers_gets_richs_own_panel(monkeypatch, colour):
    """The layout reads Table._calculate_column_widths and _get_cells; a rich that renamed them must not break a help."""
    table = fill(typer_table())
    expected = {width: rendered(Panel, table, width, colour) for width in (40, 80, 137)}

    def renamed(*_args):
        raise AttributeError("'Table' object has no attribute '_calculate_column_widths'")

    monkeypatch.setattr(help_panels, "_column_widths", renamed)
    for width, text in expected.items():
        assert rendered(help_panels.panel, table, width, colour) == text, width
