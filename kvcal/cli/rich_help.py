"""Typer's help, rendered without what no help of kvcal uses: rich.markdown, rich.traceback and pydantic.

``typer.rich_utils`` renders every ``--help``; at its top it imports ``rich.markdown``
(markdown-it and pygments behind it) for the ``markdown`` markup mode and
``rich.traceback`` (pygments, rich.pretty, attrs) for pretty exceptions. kvcal uses the
``rich`` markup mode and turns pretty exceptions off, so neither is ever called when a
help is printed, yet the two were about half the time of ``kvcal <command> --help``
(benchmarks/cli_startup.py). :func:`load_help_renderer` imports ``typer.rich_utils``
with a stand-in for those two names; a stand-in imports the real class the first time it
is called or read, so nothing typer does with them changes. The stand-in modules are
removed again at once: a later ``import rich.markdown`` gets the real module. Its options panels are laid
out by kvcal/cli/help_panels.py (the ``Panel`` that ``typer.rich_utils`` calls), to the same bytes.
:class:`HelpFlagGroup` keeps pydantic out of a command's help (see there). :func:`help_path` also pauses the
cyclic garbage collector while a help may be rendered (see there).
tests/unit/cli/test_help_rendering.py checks that every help is byte-identical to typer's own.
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import sys
import types
from collections.abc import Iterator
from typing import Any

from typer.core import TyperGroup

# module -> the names typer.rich_utils imports from it and renders no help with
DEFERRED = {"rich.markdown": ("Markdown",), "rich.traceback": ("Traceback",)}


class _Deferred(type):
    """A class that stands for ``module.name``: calling it or reading from it imports the real one."""

    _module: str
    _name: str

    def real(cls) -> Any:
        return getattr(importlib.import_module(cls._module), cls._name)

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        return cls.real()(*args, **kwargs)

    def __getattr__(cls, attribute: str) -> Any:
        if attribute.startswith("__"):  # the interpreter probing the class itself
            raise AttributeError(attribute)
        return getattr(cls.real(), attribute)


def _stand_in(module: str, names: tuple[str, ...]) -> types.ModuleType:
    placeholder = types.ModuleType(module)
    for name in names:
        setattr(placeholder, name, _Deferred(name, (), {"_module": module, "_name": name}))
    return placeholder


def load_help_renderer() -> None:
    """Import ``typer.rich_utils`` (once), deferring :data:`DEFERRED` until something uses them."""
    if "typer.rich_utils" in sys.modules:
        return
    placed = {module: _stand_in(module, names) for module, names in DEFERRED.items() if module not in sys.modules}
    sys.modules.update(placed)
    try:
        rich_utils = importlib.import_module("typer.rich_utils")
    except ImportError:  # a typer that imports more from them than the names above: import it as it is
        _remove(placed)
        rich_utils = importlib.import_module("typer.rich_utils")
    finally:
        _remove(placed)
    try:  # it reads a few of rich's private names: a rich without them keeps typer's own Panel
        from kvcal.cli.help_panels import panel
    except ImportError:
        return
    setattr(rich_utils, "Panel", panel)  # noqa: B010 - typer's panels laid out in one pass (kvcal/cli/help_panels.py)


_PAUSED: list[bool] = []  # whether help_path paused the collector and nothing has resumed it yet


@contextlib.contextmanager
def help_path(may_print_help: bool) -> Iterator[None]:
    """Where a help may be printed: typer's renderer loaded (:func:`load_help_renderer`) and the collector paused.

    Rich builds tens of thousands of short-lived objects to lay out a help's panels, and the cyclic collector ran
    over them again and again: about a sixth of ``kvcal sweep --help``'s CPU time (issue 52). A help frees nothing
    that needs it, so it is paused here and back on when the invocation ends; a command that runs after all
    (``--help`` taken as a flag's value) resumes it first (:func:`resume_collector`, in the CLI's command wrapper).
    """
    if not may_print_help:
        yield
        return
    load_help_renderer()
    if gc.isenabled():
        gc.disable()
        _PAUSED.append(True)
    try:
        yield
    finally:
        resume_collector()


def resume_collector() -> None:
    """Turn the collector back on if :func:`help_path` paused it (a command that runs does this first)."""
    if _PAUSED:
        _PAUSED.clear()
        gc.enable()


def _remove(placed: dict[str, types.ModuleType]) -> None:
    for module, placeholder in placed.items():
        if sys.modules.get(module) is placeholder:
            del sys.modules[module]


class HelpFlagGroup(TyperGroup):
    """Typer's group whose help flag, when not given, is False rather than None (kvcal and its ``profiles``).

    Typer coerces every parameter's value through a pydantic TypeAdapter unless it is already a bool; a help
    flag that is not given is None, so naming any command (``kvcal fit --help``) imported pydantic and
    built an adapter for the group's own help flag: a third of that help's time. The help text is the same
    (a help flag shows no default) and so is what the flag does (its callback acts on a true value only).
    """

    def get_help_option(self, ctx):
        option = super().get_help_option(ctx)
        if option is not None and option.default is None:
            option.default = False
        return option
