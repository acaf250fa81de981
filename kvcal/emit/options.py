"""``emit-config`` settings and result: one typed object in, one out."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import Field, PrivateAttr, model_validator

from kvcal.emit.limits import P2P_PORT
from kvcal.emit.renderers import check_flags, format_names, scoped_flags
from kvcal.errors import InputError
from kvcal.records.run import MAX_TOKENS, MAX_TTFT_MS
from kvcal.settings.from_flags import FlagModel
from kvcal.threshold.limits import validate_block_size
from kvcal.threshold.rules import DEFAULT_RULE, ResolvedRule
from kvcal.transports import available, transport_names

if TYPE_CHECKING:  # the rule's module builds the typed records; --help must not pay for them
    from kvcal.threshold.choose import Threshold

TRANSPORTS = tuple(sorted(transport_names(), key=lambda name: available()[name].deployment != "p2p"))
DEPLOYMENTS = ("p2p", "pd")
_TRANSPORT_ALIASES = {alias: name for name, cls in available().items() for alias in (name, *cls.aliases)}


def canonical_transport(name: str) -> str:
    """Map a recorded or given transport name to ``p2p-tier`` or ``nixl-pd``; InputError otherwise."""
    key = str(name).strip().lower().replace("_", "-")
    if key not in _TRANSPORT_ALIASES:
        raise InputError(f"unknown transport {name!r}; --format vllm knows {', '.join(TRANSPORTS)} (pass --transport)")
    return _TRANSPORT_ALIASES[key]


def _check_name(flag: str, name: str | None) -> None:
    if name is not None and (not name or name != name.strip() or any(c.isspace() for c in name)):
        raise InputError(f"{flag} must be a non-empty name without spaces (got {name!r})")


class EmitOptions(FlagModel):
    """Resolved ``emit-config`` settings; construction validates them (InputError on bad values).

    Names left ``None`` are resolved per format: from the values file when one is given,
    else from the deployment shape (``deployment``, itself defaulting from the run's
    transport), see :func:`kvcal.emit.router.plugin_names`.
    """

    format: str = format_names()[0]
    rule: str = DEFAULT_RULE
    margin: float | None = None
    deltas: Path | None = None
    block_size: int | None = None
    values: Path | None = None
    in_place: bool = False
    diff: bool = False
    add_plugin: bool = False
    prefix_match_producer: str | None = None
    prefill_profile: str | None = None
    deployment: str | None = None
    transport: str | None = None
    p2p_port: int = Field(P2P_PORT, ge=1, le=65535, strict=True, description="The P2P tier's listener port.")
    cpu_bytes_to_use: int | None = Field(None, ge=1, strict=True, description="CPU tier per engine, bytes.")
    model: str | None = None
    chunk_size: int | None = Field(
        None,
        ge=1,
        strict=True,
        json_schema_extra={"must": "be a positive number of tokens, e.g. 8192"},
        description="Tokens per prefill chunk.",
    )
    with_costmodel: bool = False
    ttft_penalty_ms: float | None = Field(
        None,
        gt=0,
        le=MAX_TTFT_MS,
        json_schema_extra={"must": "be a positive number of milliseconds, e.g. 3500"},
        description="The TTFT a request may lose by migrating to the long class (the filter's maxTTFTPenaltyMs).",
    )
    max_model_len: int | None = Field(
        None,
        ge=1,
        le=MAX_TOKENS,
        strict=True,
        json_schema_extra={"must": "be a positive number of tokens, e.g. 131072"},
        description="The model's longest context: the work-range labels' MAX.",
    )
    allow_extrapolation: bool = False
    allow_disturbed: bool = False
    class_mix: dict[str, float] | None = None  # CLASS -> share (kvcal.threshold.class_mix); None: the campaign's pairs
    _resolved_rule: ResolvedRule = PrivateAttr()

    @property
    def resolved_rule(self) -> ResolvedRule:
        """--rule and --margin as checked when these settings were built (the threshold reads them, unchecked again)."""
        return self._resolved_rule

    @model_validator(mode="after")
    def _consistent(self) -> EmitOptions:
        if self.format not in format_names():
            raise InputError(f"unknown --format {self.format!r}; choose one of {', '.join(format_names())}")
        self._resolved_rule = ResolvedRule.of(self.rule, self.margin)  # the rules' table holds the one check
        if self.block_size is not None:
            validate_block_size(self.block_size)
        field_of = {flag: name for name, flag in self.FLAGS.items()}
        given = {
            flag: getattr(self, field_of.get(flag, flag[2:].replace("-", "_"))) not in (None, False)
            for flag in scoped_flags()
        }
        check_flags(self.format, given)  # the formats' table says which flags each needs and reads
        _check_name("--prefix-match-producer", self.prefix_match_producer)
        _check_name("--prefill-profile", self.prefill_profile)
        _check_name("--model", self.model)
        if self.deployment is not None and self.deployment not in DEPLOYMENTS:
            raise InputError(
                f"--deployment must be p2p (the single-profile P2P guide) or pd (prefill/decode), "
                f"got {self.deployment!r}"
            )
        if self.transport is not None:
            canonical_transport(self.transport)
        return self


@dataclass(frozen=True)
class EmitResult:
    """What ``emit`` produced: stdout text, stderr notes and warnings, files written."""

    stdout: str
    threshold: Threshold | None
    notes: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()
    written: Path | None = None
    backup: Path | None = None
    extra: dict[str, Any] = field(default_factory=dict)
