"""emit-config's table of formats: the modules agree with it, --help and docs read it, a new format is one module."""

from __future__ import annotations

import importlib

import pytest
import typer
from typer.testing import CliRunner

import kvcal.cli.emit_cmd
from kvcal.emit import renderers
from kvcal.emit.formats import emit
from kvcal.emit.options import EmitOptions
from kvcal.emit.renderers.base import OutputFormat, Render, get_format
from kvcal.emit.router import ALPHA_NOTE
from kvcal.errors import InputError
from tests.docs_lists import docs_block, loaded_after_import
from tests.factories import make_fit

RENDERER_MODULES = [entry.module for entry in renderers.FORMATS.values()]


def test_each_module_is_the_format_its_table_entry_names():
    formats = {name: get_format(name) for name in renderers.format_names()}
    assert {name: fmt.name for name, fmt in formats.items()} == {name: name for name in formats}
    assert [name for name, fmt in formats.items() if not fmt.needs_threshold] == ["affinity"]
    assert [name for name, fmt in formats.items() if not fmt.router_side] == ["vllm"]
    with pytest.raises(InputError, match="unknown --format 'yaml'; choose one of plugin, helm, affinity"):
        get_format("yaml")


def test_listing_the_formats_loads_no_renderer():
    heavy = ["numpy", "pandas", "scipy", "pydantic", "kvcal.emit.formats", "kvcal.emit.renderers.base"]
    assert loaded_after_import("kvcal.emit.renderers", heavy + RENDERER_MODULES) == []
    assert loaded_after_import("kvcal.cli.emit_cmd", ["kvcal.emit.formats", *RENDERER_MODULES]) == []


def test_the_docs_list_is_the_table():
    assert docs_block("emit.md", "formats") == renderers.docs_list(), "run scripts/docs_lists.py"


def test_only_the_formats_the_router_reads_say_it_needs_the_alpha_flag():
    assert ALPHA_NOTE in emit(make_fit(), EmitOptions(format="env")).notes
    assert ALPHA_NOTE not in emit(make_fit(), EmitOptions(format="vllm", transport="p2p-tier")).notes


def _render(r: Render):
    return r.result(f"dummy {r.threshold.min_cached_token_delta}\n")


FORMAT = OutputFormat("dummy", _render, router_side=False)


@pytest.fixture
def dummy_format(monkeypatch):
    monkeypatch.setitem(renderers.FORMATS, "dummy", renderers.FormatEntry(__name__, "a test's format"))
    importlib.reload(kvcal.cli.emit_cmd)  # its flags' help is built when it is imported
    yield
    monkeypatch.undo()
    importlib.reload(kvcal.cli.emit_cmd)


def _help() -> str:
    app = typer.Typer()
    kvcal.cli.emit_cmd.register(app)
    app.command("other")(lambda: None)  # two commands: emit-config stays a subcommand
    out = CliRunner().invoke(app, ["emit-config", "--help"], terminal_width=100).output
    return " ".join(out.replace("│", " ").split())


def test_a_new_format_is_one_module(dummy_format):
    assert "Output: plugin, helm, affinity, costmodel, vllm, env, json, work-range, dummy." in _help()
    assert "work-range (remaining-work routing:" in _help() and "dummy (a test's format)." in _help()
    assert "* `dummy`: a test's format." in renderers.docs_list().splitlines()
    result = emit(make_fit(), EmitOptions(format="dummy"))
    assert result.stdout == f"dummy {result.threshold.min_cached_token_delta}\n"
    assert ALPHA_NOTE not in result.notes  # router_side=False, as vllm: no other edit decides it


def test_a_new_formats_flags_are_checked_from_its_entry(monkeypatch):
    """Which format needs or reads a flag is its entry's word: a new one joins the checks with no edit elsewhere."""
    entry = renderers.FormatEntry(__name__, reads={"--values": "list it"}, needs={"--values": "FILE (a test's)"})
    monkeypatch.setitem(renderers.FORMATS, "dummy", entry)
    with pytest.raises(InputError, match=r"^--format dummy needs --values FILE \(a test's\)$"):
        EmitOptions(format="dummy")
    with pytest.raises(InputError, match=r"^--in-place applies only to --format helm$"):
        EmitOptions(format="dummy", values="v.yaml", in_place=True)
    expected = "--values applies only to --format dummy (list it), helm (patch it) and plugin (read its names)"
    with pytest.raises(InputError) as err:
        EmitOptions(format="env", values="v.yaml")
    assert str(err.value) == expected


def test_a_format_needs_only_flags_it_reads():
    for name, entry in renderers.FORMATS.items():
        assert set(entry.needs) <= set(entry.reads), name
