"""The workload a fleet simulation serves: a typed record read from a small YAML file.

Every key is declared once here, with its bounds and a description; ``kvcal fleet
--help`` and docs/fleet.md list them, and an unknown key is an input error (a renamed
key must not silently fall back to a default). Units live in the names.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Literal, get_args, get_origin

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from kvcal.errors import InputError
from kvcal.files.reading import read_text
from kvcal.files.yaml_guard import BOOL_NUMBER, describe, load_pyyaml, refuse_bool_numbers


class Strict(BaseModel):
    # strict: a number written as a string ("3") is refused, as a bool is, rather than read as a number.
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False, strict=True)

    @model_validator(mode="before")
    @classmethod
    def _no_bool_numbers(cls, data: Any) -> Any:
        return refuse_bool_numbers(cls, data)


class Dist(Strict):
    """A distribution of a count or a duration: ``{dist: lognormal, mean: 512, cv: 0.6}`` or a plain number."""

    dist: Literal["constant", "uniform", "exponential", "lognormal"] = Field(description="The family.")
    value: float | None = Field(None, ge=0, le=1e9, description="constant: the value.")
    min: float | None = Field(None, ge=0, le=1e9, description="uniform: the lower end (inclusive).")
    max: float | None = Field(None, ge=0, le=1e9, description="uniform: the upper end (inclusive).")
    mean: float | None = Field(None, ge=0, le=1e9, description="exponential, lognormal: the mean.")
    cv: float | None = Field(None, gt=0, le=10, description="lognormal: standard deviation over mean.")

    @model_validator(mode="before")
    @classmethod
    def _number_is_constant(cls, data):
        if isinstance(data, (int, float)) and not isinstance(data, bool):
            return {"dist": "constant", "value": data}
        return data

    @model_validator(mode="after")
    def _parameters(self) -> Dist:
        needs = {
            "constant": ("value",),
            "uniform": ("min", "max"),
            "exponential": ("mean",),
            "lognormal": ("mean", "cv"),
        }
        given = {k for k in ("value", "min", "max", "mean", "cv") if getattr(self, k) is not None}
        want = set(needs[self.dist])
        if given != want:
            raise ValueError(f"a {self.dist} distribution takes exactly {', '.join(sorted(want))}")
        if self.dist == "uniform" and self.min > self.max:  # type: ignore[operator]
            raise ValueError("uniform: min must not exceed max")
        return self

    def sample(self, rng: Any) -> float:
        """One draw from ``rng`` (a numpy Generator; numpy is not imported here, so --help stays light)."""
        if self.dist == "constant":
            return float(self.value)  # type: ignore[arg-type]
        if self.dist == "uniform":
            return float(rng.uniform(self.min, self.max))
        if self.dist == "exponential":
            return float(rng.exponential(self.mean)) if self.mean else 0.0
        sigma2 = math.log1p((self.cv or 0.0) ** 2)  # a lognormal's cv and mean are required by its validator
        mu = math.log(max(self.mean or 0.0, 1e-9)) - sigma2 / 2
        return float(rng.lognormal(mu, math.sqrt(sigma2)))

    def expected(self) -> float:
        """The distribution's mean (what the study's size is estimated from)."""
        if self.dist == "constant":
            return float(self.value)  # type: ignore[arg-type]
        if self.dist == "uniform":
            return (float(self.min) + float(self.max)) / 2  # type: ignore[arg-type]
        return float(self.mean)  # type: ignore[arg-type]

    def lowest(self) -> float:
        """The least a draw can be (0 where the family reaches down to it)."""
        least = self.value if self.dist == "constant" else self.min if self.dist == "uniform" else 0.0
        return float(least)  # type: ignore[arg-type]

    def tokens(self, rng: Any) -> int:
        return max(1, int(round(self.sample(rng))))


class Arrival(Strict):
    """How sessions start: an open Poisson stream (``rate``) or a closed loop of ``concurrency`` sessions."""

    rate: float | None = Field(
        None, gt=0, le=1e5, description="New sessions per second (Poisson). --rate overrides it."
    )
    concurrency: int | None = Field(
        None, ge=1, le=1_000_000, description="Sessions kept active: a new one starts as one ends."
    )

    @model_validator(mode="after")
    def _one(self) -> Arrival:
        if (self.rate is None) == (self.concurrency is None):
            raise ValueError("give exactly one of rate (sessions per second) or concurrency (active sessions)")
        return self


class Sessions(Strict):
    """Multi-turn sessions: each turn's prompt is the system prompt, the history so far, and the new input."""

    system_prompts: int = Field(
        1, ge=1, le=1_000_000, description="Distinct system prompts; each session draws one uniformly."
    )
    system_prompt_tokens: int = Field(
        ge=0, le=10**7, description="Tokens of each system prompt (shared by its sessions)."
    )
    turns: Dist = Field(description="Turns per session.")
    input_tokens: Dist = Field(description="New user tokens each turn.")
    output_tokens: Dist = Field(description="Generated tokens each turn (they join the history).")
    think_time_s: Dist = Field(
        Dist(dist="constant", value=0.0), description="Pause between a turn's end and the next turn."
    )


class Engine(Strict):
    """What each engine can hold and how it batches (per pod; the calibration supplies the costs)."""

    max_num_batched_tokens: int = Field(
        8192, ge=1, le=10**7, description="Prefill token budget per step (vLLM's flag of that name)."
    )
    max_num_seqs: int = Field(256, ge=1, le=100_000, description="Requests running at once (prefill and decode).")
    kv_capacity_tokens: int = Field(
        500_000,
        ge=1,
        le=10**10,
        description=(
            "KV tokens the accelerator holds: running requests reserve theirs (a "
            "request waits until it fits), the rest is prefix cache with LRU eviction."
        ),
    )
    cpu_tier_tokens: int = Field(
        0, ge=0, le=10**11, description="KV tokens of the CPU tier (evicted blocks land there); 0: none."
    )
    cpu_tier_load_us_per_token: float | None = Field(
        None, ge=0, le=1e6, description="Loading a CPU-tier hit; default: the pull's per-token cost."
    )
    decode_step_ms: float | None = Field(
        None, ge=0, le=1e6, description="A step with no prefill; default: the recompute curve's intercept."
    )
    pull_computes_on_source: bool = Field(
        False,
        description=(
            "nixl-pd's P/D handoff: the source prefills the uncached rest and the "
            "computing pod pulls the whole prompt; false: the P2P tier (pull the "
            "cached blocks, prefill the rest)."
        ),
    )
    shared_host_slowdown: float = Field(
        1.0,
        ge=1,
        le=100,
        description=(
            "How many times longer a step takes while every other engine is in a "
            "step too, for engines that share one host's cores and memory (a CPU "
            "pair: benchmarks/fleet_cpu_pair.py --probe measures it); in between "
            "it scales with the share of engines busy. 1: each engine has its own accelerator."
        ),
    )


class Router(Strict):
    """The router's pod choice: the highest weighted score of cached prefix share, queue and KV use.

    The weights default to llm-d's precise-prefix guide's: 3, 2, 2.
    """

    pick: Literal["score", "rotate"] = Field(
        "score",
        description=(
            "score: the weighted scorers; rotate: turn k of every session on pod "
            "(k-1) mod pods, a balancer blind to the cache (the CPU pair's harness: "
            "nixl-pd moves KV one way)."
        ),
    )
    prefix_weight: float = Field(
        3.0, ge=0, le=1e6, description="Weight of the pod's cached share of the prompt (prefix-cache-scorer)."
    )
    queue_weight: float = Field(
        2.0, ge=0, le=1e6, description="Weight of the pod's waiting queue, min-max scaled (queue-scorer)."
    )
    kv_weight: float = Field(
        2.0,
        ge=0,
        le=1e6,
        description=(
            "Weight of the pod's free KV share, prompts in flight over kv_capacity_tokens "
            "(kv-cache-utilization-scorer)."
        ),
    )


class Slo(Strict):
    ttft_ms: float | None = Field(
        None,
        gt=0,
        le=1e9,
        description="A request meets the SLO when its TTFT is at most this; none: every completed one counts.",
    )


MAX_TRACE_BYTES = 2**30
"""A trace is read as text (streamed record by record, so memory is about the file's size plus a tuple a request)."""


class Trace(Strict):
    """Replay inference-perf's per-request records instead of generating sessions (a file of at most 1 GiB)."""

    per_request: str = Field(
        description=(
            "inference-perf per_request_lifecycle_metrics.json (start_time, info.input_tokens, "
            "output_token_times); a relative path is read from the workload file's folder."
        )
    )
    shared_prefix_tokens: int = Field(
        0, ge=0, le=10**7, description="Tokens at the start of every prompt that all requests share."
    )


class Workload(Strict):
    """``kvcal fleet --workload``: the traffic, the engines and the router of the simulated fleet."""

    duration_s: float = Field(600.0, gt=0, le=86_400, description="Simulated seconds; --duration overrides it.")
    warmup_s: float = Field(
        60.0, ge=0, le=86_400, description="Seconds at the start left out of every figure (caches fill)."
    )
    arrival: Arrival | None = Field(None, description="How sessions start (needed unless trace is given).")
    sessions: Sessions | None = Field(None, description="The sessions (needed unless trace is given).")
    trace: Trace | None = Field(None, description="Replay these recorded requests instead.")
    engine: Engine = Field(Engine(), description="Each engine's batching and caches.")
    router: Router = Field(Router(), description="The router's scorer weights.")
    link_classes: dict[str, float] | None = Field(
        None,
        description="A fit with link classes: each class's share of the ordered pod pairs (summing to 1); "
        "default: its share of the campaign's pairs (kvcal.fleet.links).",
    )
    slo: Slo = Field(Slo(), description="The TTFT objective that goodput counts.")

    @model_validator(mode="after")
    def _source(self) -> Workload:
        if self.trace is None and (self.arrival is None or self.sessions is None):
            raise ValueError("give arrival and sessions, or a trace to replay")
        if self.trace is not None and (self.arrival is not None or self.sessions is not None):
            raise ValueError(
                "a trace is replayed at its recorded times: give either a trace, or arrival and sessions, not both"
            )
        if self.warmup_s >= self.duration_s:
            raise ValueError(f"warmup_s ({self.warmup_s:g}) must be shorter than duration_s ({self.duration_s:g})")
        shares = self.link_classes
        if shares is not None and (
            not shares or any(not 0 <= v <= 1 for v in shares.values()) or abs(sum(shares.values()) - 1) > 1e-6
        ):
            raise ValueError("link_classes: each class's share of the pod pairs lies in 0-1 and they sum to 1")
        return self

    def with_overrides(self, *, rate: float | None = None, duration_s: float | None = None) -> Workload:
        """``--rate`` replaces the arrival (a closed loop becomes an open stream); ``--duration`` the length."""
        update: dict = {}
        if rate is not None:
            if self.trace is not None:
                raise InputError("--rate does not apply to a replayed trace (its requests keep their recorded times)")
            update["arrival"] = Arrival(rate=rate)
        if duration_s is not None:
            if self.warmup_s >= duration_s:
                raise InputError(
                    f"--duration {duration_s:g} must be longer than the workload's warmup_s ({self.warmup_s:g})"
                )
            update["duration_s"] = duration_s
        return self.model_copy(update=update)


def load_workload(path: Path) -> Workload:
    """Read and check a workload file; every problem is one InputError naming the file and the key."""
    text = read_text(path, f"workload file {path}")
    try:
        data = load_pyyaml(text, f"workload file {path}")
    except yaml.YAMLError as err:
        raise InputError(f"workload file {path} is not valid YAML: {describe(err)}") from None
    if not isinstance(data, dict):
        raise InputError(f"workload file {path} must be a mapping of settings (see kvcal fleet --help)")
    try:
        workload = Workload.model_validate(data)
    except ValidationError as err:
        first = err.errors()[0]
        loc = list(first.get("loc", ())) + ([first["ctx"]["field"]] if first.get("type") == BOOL_NUMBER else [])
        where = ".".join(str(p) for p in loc) or "(top level)"
        hint = " (unknown key: see kvcal fleet --help)" if first.get("type") == "extra_forbidden" else ""
        if first.get("type") in ("float_type", "int_type") and isinstance(first.get("input"), str):
            # YAML reads a quoted number, and also 1e3 (no decimal point), as text: say how to write a number.
            hint = (
                f" (got the text {first['input'][:40]!r}: write a number without quotes, and an exponent with a "
                "decimal point, 1.0e3)"
            )
        raise InputError(f"workload file {path}: {where}: {first['msg']}{hint}") from None
    trace = workload.trace
    if trace is not None and not Path(trace.per_request).is_absolute():
        # Beside the workload file, as a file that names another file means, wherever kvcal is run from.
        trace = trace.model_copy(update={"per_request": str(path.parent / trace.per_request)})
        workload = workload.model_copy(update={"trace": trace})
    return workload


def _model_of(annotation: Any) -> type[Strict] | None:
    """The record a field holds (``Engine``, or ``Arrival`` behind ``Arrival | None``), else None."""
    for candidate in (annotation, *get_args(annotation)):
        if isinstance(candidate, type) and issubclass(candidate, Strict):
            return candidate
    return None


def _described(field: Any) -> str:
    choices = next(
        (get_args(a) for a in (field.annotation, *get_args(field.annotation)) if get_origin(a) is Literal), ()
    )
    text = field.description or ""
    return text + (f" One of: {'|'.join(choices)}." if choices and "|".join(choices) not in text else "")


def workload_keys(model: type[Strict] | None = None, prefix: str = "") -> list[tuple[str, str, bool]]:
    """Every key of the workload file, depth first: (dotted key, its description, whether it takes a distribution)."""
    out: list[tuple[str, str, bool]] = []
    for name, field in (model or Workload).model_fields.items():
        key, sub = f"{prefix}{name}", _model_of(field.annotation)
        out.append((key, _described(field), sub is Dist))
        if sub is not None and sub is not Dist:
            out.extend(workload_keys(sub, f"{key}."))
    return out


def keys_help() -> str:
    """``kvcal fleet --help``'s list of the workload file's keys, made from the records above (none can go unlisted)."""
    lines = [f"  {key}: {text}" for key, text, _ in workload_keys()]
    dists = ", ".join(key.rsplit(".", 1)[-1] for key, _, is_dist in workload_keys() if is_dist)
    parts = "; ".join(f"{name}: {_described(field).rstrip('.')}" for name, field in Dist.model_fields.items())
    return (
        "Workload file keys (YAML; an unknown key is refused; docs/examples/fleet-workload.yaml is a complete "
        "example):\n\n" + "\n".join(lines) + f"\n  a distribution ({dists}): a number, or a mapping of {parts}."
    )


KEYS_HELP = keys_help()
