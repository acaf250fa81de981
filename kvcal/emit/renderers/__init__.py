"""emit-config's output formats: the table naming them, one module each beside it.

:data:`FORMATS` names every format with the words ``--help`` shows for it; each module
defines ``FORMAT``, a :class:`kvcal.emit.renderers.base.OutputFormat` (its renderer and
what else differs per format), which ``base.get_format`` loads. This module imports none
of them (nor numpy or pydantic): listing the formats for ``kvcal emit-config --help``
loads no renderer.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class FormatEntry:
    """A format as ``--help`` and the docs list it, without loading its renderer."""

    module: str
    about: str = ""  # the words after its name in the --help list ("" : the name says it)
    caution: str = ""  # a sentence the --format flag's help adds


FORMATS: dict[str, FormatEntry] = {
    "plugin": FormatEntry(f"{__name__}.plugin", "the p2p-source-producer entry"),
    "helm": FormatEntry(f"{__name__}.helm", "patch a values file"),
    "affinity": FormatEntry(f"{__name__}.affinity", "prefix-cache-affinity-filter's peakPrefillThroughput"),
    "costmodel": FormatEntry(
        f"{__name__}.costmodel",
        "ONLY for a router build whose p2p-source-producer accepts costModel: llm-d-router main refuses it",
        "costmodel needs a router build whose p2p-source-producer accepts costModel (llm-d-router main rejects it).",
    ),
    "vllm": FormatEntry(f"{__name__}.vllm", "engine args, env and /dev/shm volume"),
    "env": FormatEntry(f"{__name__}.env"),
    "json": FormatEntry(f"{__name__}.json_doc"),
    "work-range": FormatEntry(
        f"{__name__}.work_range",
        "remaining-work routing: the prefill work-range labels for B = min(threshold, SLO work) and the EPP "
        "entries to merge",
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
