"""emit-config's output formats: the table naming them, one module each beside it.

:data:`FORMATS` names every format with the words ``--help`` shows for it; each module
defines ``FORMAT``, a :class:`kvcal.emit.renderers.base.OutputFormat` (its renderer and
what else differs per format), which ``base.get_format`` loads. This module imports none
of them (nor numpy or pydantic): listing the formats for ``kvcal emit-config --help``
loads no renderer.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from kvcal.errors import InputError

REMAINING_WORK = {"--ttft-penalty-ms": "", "--max-model-len": ""}  # the work-range boundary's flags (emit/work_range)


@dataclass(frozen=True)
class FormatEntry:
    """A format as ``--help`` and the docs list it, without loading its renderer, and the flags it alone reads."""

    module: str
    about: str = ""  # the words after its name in the --help list ("" : the name says it)
    caution: str = ""  # a sentence the --format flag's help adds
    reads: Mapping[str, str] = field(default_factory=dict)  # flags only some formats read -> what this one does
    needs: Mapping[str, str] = field(default_factory=dict)  # flags it cannot do without -> what to pass


FORMATS: dict[str, FormatEntry] = {
    "plugin": FormatEntry(f"{__name__}.plugin", "the p2p-source-producer entry", reads={"--values": "read its names"}),
    "helm": FormatEntry(
        f"{__name__}.helm",
        "patch a values file",
        reads={
            "--values": "patch it",
            **dict.fromkeys(("--in-place", "--diff", "--add-plugin", "--with-costmodel"), ""),
            **REMAINING_WORK,
        },
        needs={"--values": "FILE (the Helm values file to patch)"},
    ),
    "affinity": FormatEntry(f"{__name__}.affinity", "prefix-cache-affinity-filter's peakPrefillThroughput"),
    "costmodel": FormatEntry(
        f"{__name__}.costmodel",
        "ONLY for a router build whose p2p-source-producer accepts costModel: llm-d-router main refuses it",
        "costmodel needs a router build whose p2p-source-producer accepts costModel (llm-d-router main rejects it).",
    ),
    "vllm": FormatEntry(f"{__name__}.vllm", "engine args, env and /dev/shm volume"),
    "env": FormatEntry(f"{__name__}.env"),
    "json": FormatEntry(f"{__name__}.json_doc", reads=REMAINING_WORK),
    "work-range": FormatEntry(
        f"{__name__}.work_range",
        "remaining-work routing: the prefill work-range labels for B = min(threshold, SLO work) and the EPP "
        "entries to merge",
        reads=REMAINING_WORK,
        needs={
            "--ttft-penalty-ms": "MS, the TTFT a request may lose by migrating (the guide's maxTTFTPenaltyMs, an "
            "operator's choice), e.g. --ttft-penalty-ms 3500"
        },
    ),
}
"""Every --format, in the order --help lists them; the first is the default."""


def format_names() -> tuple[str, ...]:
    """Every format's name, in the --help order."""
    return tuple(FORMATS)


def option_help() -> str:
    """The --format flag's help: the choices, then each format's caution."""
    return " ".join([f"Output: {', '.join(FORMATS)}.", *(e.caution for e in FORMATS.values() if e.caution)])


def help_list() -> str:
    """The epilog's paragraph naming every format and what it is."""
    return "Formats: " + ", ".join(f"{n} ({e.about})" if e.about else n for n, e in FORMATS.items()) + "."


def docs_list() -> str:
    """docs/emit.md's list of formats (a test keeps the page equal to it)."""
    return "\n".join(f"* `{n}`" + (f": {e.about}." if e.about else ".") for n, e in FORMATS.items())


def scoped_flags() -> tuple[str, ...]:
    """The flags only some formats read, in the order the table first names them (the order they are checked in)."""
    return tuple(dict.fromkeys(flag for entry in FORMATS.values() for flag in entry.reads))


def check_flags(name: str, given: Mapping[str, bool]) -> None:
    """InputError when format ``name`` was given a flag only other formats read (listed by name), or lacks one it
    needs.

    ``given``: each of :func:`scoped_flags` -> whether the command line set it."""
    entry = FORMATS[name]
    for flag in scoped_flags():
        if given[flag] and flag not in entry.reads:
            readers = sorted((n, e.reads[flag]) for n, e in FORMATS.items() if flag in e.reads)
            listed = [f"{n} ({what})" if what else n for n, what in readers]
            joined = listed[0] if len(listed) == 1 else f"{', '.join(listed[:-1])} and {listed[-1]}"
            raise InputError(f"{flag} applies only to --format {joined}")
    for flag, what in entry.needs.items():
        if not given[flag]:
            raise InputError(f"--format {name} needs {flag} {what}")
