"""The sweep's settings as flags: each setting's flag, help and marks, read off its one declaration.

Settings are named here by their flat names (:data:`kvcal.settings.sweep.FLAT_ORDER`), as flags and campaign files
name them; the groups they live in (:class:`kvcal.settings.sweep.SweepConfig`) do not show on the command line.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from kvcal.settings.sweep import FLAT_ORDER, flat_field


def declared(name: str) -> dict[str, Any]:
    """The marks a setting declares in its ``json_schema_extra`` (flag, launch_only, ...)."""
    extra = flat_field(name).json_schema_extra
    return extra if isinstance(extra, dict) else {}


def marked(mark: str) -> tuple[str, ...]:
    """The settings that carry ``mark`` (e.g. ``launch_only``), in flag order."""
    return tuple(name for name in FLAT_ORDER if declared(name).get(mark))


def flag_of(name: str) -> str:
    """The ``kvcal sweep`` flag of a setting: its declared flag, else ``--`` plus the name with dashes
    (a campaign-file-only setting: its key, marked so)."""
    marks = declared(name)
    if marks.get("campaign_file_only"):
        return f"{name} (campaign file)"
    return str(marks.get("flag") or "--" + name.replace("_", "-"))


def flag_fields() -> tuple[str, ...]:
    """The settings that ``kvcal sweep`` takes as flags (every one but the campaign-file-only ones), in order."""
    return tuple(name for name in FLAT_ORDER if name not in marked("campaign_file_only"))


def adaptive_rule_fields() -> tuple[str, ...]:
    """The adaptive stop rules: only an adaptive campaign reads them, and ``--resume`` may change them."""
    return marked("adaptive_rule")


def flag_help(name: str) -> str:
    """A flag's help: the setting's description and, when it has one, its default (never copied by hand)."""
    info = flat_field(name)
    default = info.get_default(call_default_factory=True)
    shown = "" if default is None or default == [] or isinstance(default, BaseModel) else f" (default: {default})"
    return (info.description or "") + shown


def launch_only_flags() -> tuple[str, ...]:
    """Flags of settings that only matter when kvcal launches the engines (an attached sweep ignores them)."""
    return tuple(flag_of(name) for name in marked("launch_only"))


def sweep_argv(values: dict[str, Any]) -> list[str]:
    """``kvcal sweep`` arguments that set these settings (in this order); None is left out, lists are comma-joined
    (a repeatable flag is repeated instead)."""
    argv: list[str] = []
    for name, value in values.items():
        flag = flag_of(name)
        if value is None:
            continue
        if isinstance(value, (list, tuple)):
            if flag == "--engine-arg":
                argv += [f"{flag}={item}" for item in value]
            elif value:
                argv += [flag, ",".join(map(str, value))]
        else:
            argv += [flag, str(value)]
    return argv
