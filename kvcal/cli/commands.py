"""The command modules, in the order ``kvcal --help`` lists them, and the index that lists them unimported.

``kvcal --help`` (and a bare ``kvcal``) shows only each command's name and first line of
help. Building the whole app for that imports every command module, and sweep's flags
are read off SweepConfig's fields (pydantic), which was most of the startup time. So the
top-level help is rendered from INDEX instead, which scripts/gen_help_tables.py generates from the whole app
(kvcal/cli/help_tables.py's COMMANDS); tests/unit/cli/test_help_tables.py fails when it drifts, and
tests/unit/cli/test_cli_boundary.py renders the top-level help both ways and requires the two identical.
MODULES is the one list a new command's module is added to (then the script is rerun).
"""

from __future__ import annotations

import importlib
from types import ModuleType

from kvcal.cli.help_tables import COMMANDS

MODULES = (
    "sweep_cmd",
    "export_cmd",
    "fit_cmd",
    "plot_cmd",
    "emit_cmd",
    "compare_cmd",
    "history_cmd",
    "report_cmd",
    "predict_cmd",
    "plan_cmd",
    "fleet_cmd",
    "observe_cmd",
    "profiles_cmd",
    "k8s_cmd",
)

# Each command's name, its module and its summary, in the order ``kvcal --help`` lists them: generated from the
# whole app (the modules above) by scripts/gen_help_tables.py, so that no summary is copied by hand.
INDEX = tuple((name, summary) for name, _, summary in COMMANDS)
# The module that registers each command: an invocation that names one builds an app of that command alone.
MODULE_OF = {name: module for name, module, _ in COMMANDS}


def load(names: tuple[str, ...] = MODULES) -> list[ModuleType]:
    """The command modules, imported (each has ``register(app)``): all of them unless ``names`` says which."""
    return [importlib.import_module(f"kvcal.cli.{name}") for name in names]


def named_command(args: list[str]) -> str | None:
    """The command an invocation names (its first word that is not a flag), when kvcal has it."""
    first = next((arg for arg in args if not arg.startswith("-")), None)
    return first if first in MODULE_OF else None
