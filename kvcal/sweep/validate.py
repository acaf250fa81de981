"""Checks of a sweep's settings as inputs, before any folder is made or engine touched.

Pydantic checks each field alone; these check what a field means for this run and how
fields combine: the run name is one folder inside --output-dir, attach URLs are URLs of
two different engines, a flag of another engine or mode is refused rather than
silently ignored, and ``--resume`` refuses flags that differ from the stored run.

Only fields the user set (``model_fields_set``: a flag or the campaign file) are
judged "given"; defaults never conflict.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel

from kvcal.engines.transports import available
from kvcal.errors import InputError
from kvcal.urls import check_pair_urls


# What --resume may be given beside the stored settings: where the run is, and nothing that changes it.
RESUME_LOCATORS = ("output_dir", "name")


def declared(model: type[BaseModel], name: str) -> dict[str, Any]:
    """The marks a settings field declares in its ``json_schema_extra`` (flag, launch_only, ...)."""
    extra = model.model_fields[name].json_schema_extra
    return extra if isinstance(extra, dict) else {}


def flag_for(model: type[BaseModel], name: str) -> str:
    """How a setting is given: its declared flag, ``--`` plus the name with dashes, or its campaign-file key."""
    marks = declared(model, name)
    if marks.get("campaign_file_only"):
        return f"{name} (campaign file)"
    return str(marks.get("flag") or "--" + name.replace("_", "-"))


def marked(model: type[BaseModel], mark: str) -> tuple[str, ...]:
    """The fields of ``model`` that carry ``mark`` (e.g. ``launch_only``), in declaration order."""
    return tuple(name for name in model.model_fields if declared(model, name).get(mark))


def check_run_name(name: str | None) -> None:
    """A run name is one folder name: no separators, not '.', '..' or blank, no control characters or edge spaces."""
    if name is None:
        return
    if name.strip() in ("", ".", "..") or "/" in name or "\\" in name or any(ord(c) < 32 or ord(c) == 127 for c in name):
        raise InputError(f"--name must be a single folder name inside --output-dir (no '/', not '.' or '..', not blank), "
                         f"got {name!r}")
    if name != name.strip():  # a folder 'o/run ' is one nobody finds again by typing its name
        raise InputError(f"--name {name!r} starts or ends with a space; give it without")


def check_settings(config: Any) -> None:
    """Everything about the settings that pydantic's per-field checks cannot see (marks: :mod:`kvcal.sweep.config`)."""
    given = config.model_fields_set
    model = type(config)

    def flag(field: str) -> str:
        return flag_for(model, field)

    check_run_name(config.name)
    where = Path(config.output_dir)
    while not where.exists() and where != where.parent:
        where = where.parent
    if where.exists() and not where.is_dir():
        raise InputError(f"--output-dir {config.output_dir}: {where} is a file, not a folder")
    if config.engine == "sim":
        stray = [f for f in marked(model, "engine_only") if f in given]
        if stray:
            raise InputError(f"{', '.join(flag(f) for f in stray)} do(es) not apply to --engine sim (the simulated "
                             "pair starts no engine and attaches to none); drop it or use --engine vllm")
        return
    if "sim" in given:
        raise InputError("the campaign file's sim settings apply to --engine sim only")
    check_pair_urls(config.producer_url, config.consumer_url)
    if config.attach:
        stray = [f for f in marked(model, "launch_only") if f in given]
        if stray:
            raise InputError(f"{', '.join(flag(f) for f in stray)} configure(s) engines kvcal launches; "
                             "with --producer-url/--consumer-url the engines already run")
    transports = available()
    if not transports[config.transport].pull_names_producer:
        stray = [f for f in marked(model, "producer_side_channel") if f in given]
        if stray:
            naming = " or ".join(sorted(name for name, t in transports.items() if t.pull_names_producer))
            raise InputError(f"{', '.join(flag(f) for f in stray)} apply to --transport {naming} only")


def check_resume(stored: Any, requested: Any) -> None:
    """--resume continues the stored run as it was planned: refuse given flags that differ from it."""
    changed = []
    model = type(requested)
    adjustable = set(marked(model, "adaptive_rule"))  # may be given again to run an adaptive campaign further
    for field in sorted(requested.model_fields_set - set(RESUME_LOCATORS) - adjustable):
        mine, theirs = getattr(requested, field), getattr(stored, field)
        if _comparable(mine) != _comparable(theirs):
            changed.append(f"{flag_for(model, field)} {_show(mine)} (the run has {_show(theirs)})")
    if changed:
        raise InputError("--resume continues the run with its stored settings; these differ: " + "; ".join(changed)
                         + ". Drop them, or start a new run with another --name")


def _comparable(value: Any) -> Any:
    return value.model_dump() if hasattr(value, "model_dump") else value


def _show(value: Any) -> str:
    if isinstance(value, list):
        return ",".join(map(str, value)) or "(empty)"
    return str(value)


def repeated_lengths_problem(lengths: list[int]) -> str | None:
    """Why a list that names a length twice is refused, or None: a ladder lists each length once, reps are --reps."""
    repeated = sorted({n for n in lengths if lengths.count(n) > 1})
    if not repeated:
        return None
    return (f"{', '.join(map(str, repeated))} listed more than once; list each length once and "
            "set --reps for more probes a length")
