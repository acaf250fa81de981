"""Typer's option and argument panels laid out in one pass instead of rich's nested renderables (issue 52).

Typer prints each panel of a help as ``Panel(Table(...))`` whose help cells are ``Columns`` of texts; rich
renders that as Panel -> Padding -> Table -> Padding -> Columns -> Table.grid -> Padding -> Text, each layer
splitting, cropping and padding every line of the layer below. That was most of ``kvcal sweep --help``'s time.
:func:`panel` stands in for ``rich.panel.Panel`` in ``typer.rich_utils`` (kvcal/cli/rich_help.py): for a table
laid out the way typer lays out its panels it returns a :class:`_Panel` that builds the lines itself, with rich
doing every part that decides a byte: the frame (rich's ``Panel`` round an empty body: borders, title), the
column widths (``Table._calculate_column_widths``; the texts measured by their own ``__rich_measure__``), the
cells' padding (``Table._get_cells``), the ``Columns`` column count (its loop, copied) and each text's
wrapping and styles (``Text.wrap``, ``Text.render``, ``Segment.split_and_crop_lines``). Anything else (a
styled column or row, a box, lines between rows, other renderables, other panel settings) is left to rich as
it is, and so is a table whose widths would not fill the panel. tests/unit/cli/test_help_rendering.py checks
every help, at several widths and in colour, byte for byte against typer's own renderer; test_help_panels.py
does the same for synthetic tables at every width from 1 to 120.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Iterator
from typing import Any, cast

from rich._pick import pick_bool
from rich.cells import cell_len
from rich.columns import Columns
from rich.console import Console, ConsoleOptions, RenderResult
from rich.measure import Measurement
from rich.padding import Padding
from rich.panel import Panel
from rich.segment import Segment
from rich.table import Column, Table
from rich.text import DEFAULT_JUSTIFY, DEFAULT_OVERFLOW, Text

Lines = list[list[Segment]]
TYPER_PANEL = {"border_style", "title", "title_align"}  # what typer's panels set; any other setting goes to rich


def panel(renderable: Any, *args: Any, **kwargs: Any) -> Any:
    """``Panel(renderable, ...)``, or for a table typer lays out (:func:`_plain`) a :class:`_Panel`."""
    if not args and set(kwargs) <= TYPER_PANEL and isinstance(renderable, Table) and _plain(renderable, expand=True):
        return _Panel(renderable, kwargs)
    return Panel(renderable, *args, **kwargs)


def _plain(table: Table, *, expand: bool) -> bool:
    """True for a table with no box, header, footer, title, lines or style of its own, its cells padded (0, 1)."""
    return (
        table.box is None
        and table.expand is expand
        and table.width is None
        and not (table.show_header or table.show_footer or table.show_lines or table.leading)
        and table.title is None
        and table.caption is None
        and table.style in (None, "", "none")
        and not table.row_styles
        and tuple(table.padding) == (0, 1, 0, 1)
        and all(row.style is None for row in table.rows)
        and all(not column.style and column.vertical == "top" for column in table.columns)
    )


class _Panel:
    """What ``Panel(table, **settings)`` renders, its frame taken from rich's own panel round an empty body."""

    def __init__(self, table: Table, settings: dict[str, Any]) -> None:
        self.table = table
        self.settings = settings

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        width = options.max_width
        # Panel's body: its width less the border, then Padding (0, 1)'s less its two spaces
        child = options.update(width=width - 2, height=None, highlight=False)
        try:  # rich's private helpers (Table._calculate_column_widths, _get_cells) may change in a later rich
            laid_out = _table_lines(console, self.table, child.update_width(width - 4)) if width > 4 else None
        except (AttributeError, TypeError, ValueError):
            laid_out = None
        if laid_out is None or laid_out[1] != width - 4:
            yield Panel(self.table, **self.settings)  # rich lays it out, as typer would have had it
            return
        frame = console.render_lines(Panel(Text(""), padding=0, **self.settings), options, pad=False)
        if len(frame) != 3:  # not the top, "│ ... │" and bottom of an empty panel
            yield Panel(self.table, **self.settings)
            return
        (top, middle, bottom), edge, new_line = frame, Segment(" "), Segment.line()
        left, right = middle[0], middle[-1]
        yield from top
        yield new_line
        for line in laid_out[0]:
            yield left
            yield edge
            yield from line
            yield edge
            yield right
            yield new_line
        yield from bottom
        yield new_line


def _table_lines(console: Console, table: Table, options: ConsoleOptions) -> tuple[Lines, int] | None:
    """The lines ``table`` renders to at ``options`` (``Table.__rich_console__`` and ``_render`` without a box) and
    their width: each cell's lines are exactly its column's width (:func:`_padded_lines`), so every line is the sum."""
    columns = table.columns
    if not columns or not table.rows:
        return None
    widths = _column_widths(console, table, options.update_width(options.max_width - table._extra_width))
    render_options = options.update(width=sum(widths), highlight=table.highlight, height=None)
    cells = [list(table._get_cells(console, index, column)) for index, column in enumerate(columns)]
    lines: Lines = []
    for row in zip(*cells, strict=True):
        rendered = []
        for width, cell, column in zip(widths, row, columns, strict=True):
            cell_options = render_options.update(
                width=width,
                justify=column.justify,
                no_wrap=column.no_wrap,
                overflow=column.overflow,
                height=None,
                highlight=column.highlight,
            )
            cell_lines = _padded_lines(console, cell.renderable, cell_options) if not cell.style else None
            if cell_lines is None:
                return None
            rendered.append(cell_lines)
        lines.extend(_row_lines(rendered, widths))
    return lines, sum(widths)


def _column_widths(console: Console, table: Table, options: ConsoleOptions) -> list[int]:
    """``Table._calculate_column_widths``, each cell measured by :func:`_measure_cell` (rich's ``_measure_column``)."""

    def measure_column(console: Console, options: ConsoleOptions, column: Column) -> Measurement:
        max_width = options.max_width
        if max_width < 1 or column.width is not None:
            return Table._measure_column(table, console, options, column)
        padding_width = table._get_padding_width(column._index)
        measured = [
            _measure_cell(console, options, cell.renderable)
            for cell in table._get_cells(console, column._index, column)
        ]
        measurement = Measurement(
            max((low for low, _ in measured), default=1), max((high for _, high in measured), default=max_width)
        ).with_maximum(max_width)
        return measurement.clamp(
            None if column.min_width is None else column.min_width + padding_width,
            None if column.max_width is None else column.max_width + padding_width,
        )

    table._measure_column = measure_column  # type: ignore[method-assign]  # this table only, for this call
    try:
        return table._calculate_column_widths(console, options)
    finally:
        del table._measure_column


def _measure_cell(console: Console, options: ConsoleOptions, cell: Any) -> Measurement:
    """``Measurement.get`` of a table cell: a padded text measured without the generic dispatch, anything else by it."""
    max_width = options.max_width
    if max_width < 1 or not isinstance(cell, Padding) or not isinstance(cell.renderable, Text):
        return Measurement.get(console, options, cell)
    extra_width = cell.left + cell.right
    if max_width - extra_width < 1:  # Padding.__rich_measure__
        return _bounded(Measurement(max_width, max_width), max_width)
    low, high = _bounded(cell.renderable.__rich_measure__(console, options), max_width)
    return _bounded(Measurement(low + extra_width, high + extra_width).with_maximum(max_width), max_width)


def _bounded(measurement: Measurement, max_width: int) -> Measurement:
    """What ``Measurement.get`` makes of a renderable's own measurement."""
    measurement = measurement.normalize().with_maximum(max_width)
    return Measurement(0, 0) if measurement.maximum < 1 else measurement.normalize()


def _padded_lines(console: Console, cell: Any, options: ConsoleOptions) -> Lines | None:
    """A table cell (``Padding(renderable, ...)`` from ``Table._get_cells``) as lines exactly ``options`` wide."""
    width = options.max_width
    if not isinstance(cell, Padding) or cell.top or cell.bottom or cell.style != "none" or not cell.expand:
        return None
    if width < cell.left + cell.right:
        return None
    content = _content_lines(console, cell.renderable, options.update_width(width - cell.left - cell.right))
    if content is None:
        return None
    left = [Segment(" " * cell.left)] if cell.left else []
    right = [Segment(" " * cell.right)] if cell.right else []
    return [[*left, *line, *right] for line in content]


def _content_lines(console: Console, renderable: Any, options: ConsoleOptions) -> Lines | None:
    """What ``console.render_lines(renderable, options, pad=True)`` gives, texts and typer's ``Columns`` directly."""
    if options.max_width < 1:  # rich renders nothing there: leave that to it
        return console.render_lines(renderable, options, pad=True)
    if isinstance(renderable, Text):
        return _text_lines(console, renderable, options)
    if isinstance(renderable, Columns):
        return _columns_lines(console, renderable, options)
    return console.render_lines(renderable, options, pad=True)


def _text_lines(console: Console, text: Text, options: ConsoleOptions) -> Lines:
    """``Text.__rich_console__`` split into lines as ``render_lines`` splits them, without the generic layers."""
    tab_size = console.tab_size if text.tab_size is None else text.tab_size
    justify = text.justify or options.justify or DEFAULT_JUSTIFY
    overflow = text.overflow or options.overflow or DEFAULT_OVERFLOW
    width = options.max_width
    lines: Iterable[Text] | None = _one_line(text, width, justify, overflow)
    if lines is None:
        no_wrap = pick_bool(text.no_wrap, options.no_wrap, False)
        lines = text.wrap(console, width, justify=justify, overflow=overflow, tab_size=tab_size or 8, no_wrap=no_wrap)
    segments = Text("\n").join(lines).render(console, end=text.end)
    return list(Segment.split_and_crop_lines(segments, width, pad=True, include_new_lines=False))


def _one_line(text: Text, width: int, justify: str, overflow: str) -> list[Text] | None:
    """What ``Text.wrap`` gives for one line, without tabs, that fits ``width``: the text, padded when left-justified.

    Wrapping such a line divides nothing, strips nothing and truncates nothing; None for any other text.
    """
    plain = text.plain
    if "\n" in plain or "\t" in plain or overflow == "ignore" or justify not in ("default", "left"):
        return None
    if len(plain) > width or cell_len(plain) > width:
        return None
    line = text.copy()
    if justify == "left":
        line.truncate(width, overflow=cast(Any, overflow), pad=True)
    return [line]


def _columns_lines(console: Console, columns: Columns, options: ConsoleOptions) -> Lines | None:
    """The lines of typer's help ``Columns`` (texts in rows), the grid ``Columns`` would yield laid out directly."""
    renderables = columns.renderables
    if not _texts_in_rows(columns) or Padding.unpack(columns.padding) != (0, 1, 0, 1):
        return console.render_lines(columns, options, pad=True)
    max_width = options.max_width
    measured = [Measurement.get(console, options, renderable).maximum for renderable in renderables]
    count = _column_count(measured, 1, max_width)
    cells: list[Any] = [*renderables, *[None] * (-len(renderables) % count)]
    rows = [cells[start : start + count] for start in range(0, len(cells), count)]
    # Table.grid(padding=(0, 1), collapse_padding=True, pad_edge=False): one space right of all but the last column
    gaps = [1] * (count - 1) + [0]
    widths = []
    for index, gap in enumerate(gaps):
        column = [measured[i] for i in range(index, len(renderables), count)]
        widths.append(min(max(min(width, max_width - gap) for width in column) + gap, max_width) or 1)
    if sum(widths) > max_width or max_width - 1 < 1 or None in cells:  # rich would shrink or pad: let it
        return _grid_lines(console, columns, options)
    grid_options = options.update(width=sum(widths), highlight=False, height=None)
    lines: Lines = []
    for row in rows:
        rendered = []
        for text, width, gap in zip(row, widths, gaps, strict=True):
            cell_options = grid_options.update(
                width=width,
                justify=_GRID.justify,
                no_wrap=_GRID.no_wrap,
                overflow=_GRID.overflow,
                height=None,
                highlight=False,
            ).update_width(width - gap)
            tail = [Segment(" " * gap)] if gap else []
            rendered.append([[*line, *tail] for line in _text_lines(console, cast(Text, text), cell_options)])
        lines.extend(_row_lines(rendered, widths))
    return [_pad(line, max_width - sum(widths)) for line in lines]


_GRID = Column()  # the columns Table.grid adds for Columns: rich's defaults


def _row_lines(rendered: list[Lines], widths: list[int]) -> Lines:
    """One table row's cells side by side, a short cell filled with blank lines (``Segment.align_top``)."""
    height = max(1, *map(len, rendered))
    lines: Lines = []
    for line_no in range(height):
        line: list[Segment] = []
        for width, cell_lines in zip(widths, rendered, strict=True):
            line.extend(cell_lines[line_no] if line_no < len(cell_lines) else [Segment(" " * width)])
        lines.append(line)
    return lines


def _grid_lines(console: Console, columns: Columns, options: ConsoleOptions) -> Lines | None:
    """The lines of ``Columns`` through the grid it yields, laid out by :func:`_table_lines`."""
    grid = _columns_grid(console, columns, options)
    if grid is None:
        return console.render_lines(columns, options, pad=True)
    laid_out = _table_lines(console, grid, options)
    if laid_out is None or laid_out[1] > options.max_width:
        return None
    return [_pad(line, options.max_width - laid_out[1]) for line in laid_out[0]]


def _pad(line: list[Segment], short: int) -> list[Segment]:
    """A line ``short`` cells short of the width, padded to it as ``Segment.adjust_line_length`` pads."""
    return [*line, Segment(" " * short)] if short > 0 else line


def _columns_grid(console: Console, columns: Columns, options: ConsoleOptions) -> Table | None:
    """The ``Table.grid`` that ``Columns.__rich_console__`` yields, for texts in rows (typer's help), else None."""
    renderables = columns.renderables
    if not _texts_in_rows(columns):
        return None
    _top, right, _bottom, left = Padding.unpack(columns.padding)
    widths = [Measurement.get(console, options, renderable).maximum for renderable in renderables]
    column_count = _column_count(widths, max(left, right), options.max_width)
    grid = Table.grid(padding=columns.padding, collapse_padding=True, pad_edge=False)
    cells: list[Any] = [*renderables, *[None] * (-len(renderables) % column_count)]
    for start in range(0, len(cells), column_count):
        grid.add_row(*cells[start : start + column_count])
    return grid if _plain_grid(grid) else None


def _plain_grid(grid: Table) -> bool:
    return not grid.expand and grid.title is None and all(not column.style for column in grid.columns)


def _column_count(widths: list[int], width_padding: int, max_width: int) -> int:
    """How many columns ``Columns`` puts the items of these widths in (its loop, row by row)."""
    column_count = len(widths)
    while column_count > 1:
        taken: dict[int, int] = defaultdict(int)
        column_no = 0
        for item_width in _with_blanks(widths, column_count):
            taken[column_no] = max(taken[column_no], item_width)
            if sum(taken.values()) + width_padding * (len(taken) - 1) > max_width:
                column_count = len(taken) - 1
                break
            column_no = (column_no + 1) % column_count
        else:
            break
    return column_count


def _with_blanks(widths: list[int], column_count: int) -> Iterator[int]:
    yield from widths
    yield from [0] * (-len(widths) % column_count)


def _texts_in_rows(columns: Columns) -> bool:
    """True for a ``Columns`` as typer's help builds one: texts only, laid out in rows with rich's defaults."""
    return (
        bool(columns.renderables)
        and all(isinstance(renderable, Text) for renderable in columns.renderables)
        and not any((columns.width, columns.equal, columns.expand, columns.title, columns.align))
        and not columns.column_first
        and not columns.right_to_left
    )
