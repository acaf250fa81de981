"""A sweep's settings as inputs: the campaign file read, the flags merged over it, and the checks pydantic cannot do,
before any folder is made or engine touched (the settings themselves: :mod:`kvcal.settings`).

A campaign file (``--config FILE``, YAML) may set any field, with dashes or underscores;
flags given on the command line override it (:func:`resolve_config`). Pydantic checks
each field alone; these check what a field means for this run and how fields combine:
the run name is one folder inside --output-dir, attach URLs are URLs of two different
engines, a flag of another engine or mode is refused rather than silently ignored, and
``--resume`` refuses flags that differ from the stored run.

Only fields the user set (``model_fields_set``: a flag or the campaign file) are
judged "given"; defaults never conflict.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from kvcal.errors import InputError
from kvcal.settings import GROUPS, PATHS, SweepConfig, flat_field, grouped_from_flat
from kvcal.settings_flags import flag_of, marked
from kvcal.transports import available
from kvcal.urls import check_pair_urls
from kvcal.userfiles import read_text
from kvcal.yaml_guard import BOOL_NUMBER, describe, load_pyyaml

# What --resume may be given beside the stored settings: where the run is, and nothing that changes it.
RESUME_LOCATORS = ("output_dir", "name")


def check_run_name(name: str | None) -> None:
    """A run name is one folder name: no separators, not '.', '..' or blank, no control characters or edge spaces."""
    if name is None:
        return
    if (
        name.strip() in ("", ".", "..")
        or "/" in name
        or "\\" in name
        or any(ord(c) < 32 or ord(c) == 127 for c in name)
    ):
        raise InputError(
            f"--name must be a single folder name inside --output-dir (no '/', not '.' or '..', not blank), "
            f"got {name!r}"
        )
    if name != name.strip():  # a folder 'o/run ' is one nobody finds again by typing its name
        raise InputError(f"--name {name!r} starts or ends with a space; give it without")


def check_settings(config: SweepConfig) -> None:
    """Everything about the settings that pydantic's per-field checks cannot see (marks: :mod:`kvcal.settings`)."""
    given = config.given()
    engine = config.engine

    def stray(mark: str) -> str:
        return ", ".join(strays(given, mark, flag_of))

    check_run_name(config.output.name)
    check_pairs(config)
    where = Path(config.output.output_dir)
    while not where.exists() and where != where.parent:
        where = where.parent
    if where.exists() and not where.is_dir():
        raise InputError(f"--output-dir {config.output.output_dir}: {where} is a file, not a folder")
    if engine.kind == "sim":
        if flags := stray("engine_only"):
            raise InputError(
                f"{flags} do(es) not apply to --engine sim (the simulated "
                "pair starts no engine and attaches to none); drop it or use --engine vllm"
            )
        return
    if "sim" in given:
        raise InputError("the campaign file's sim settings apply to --engine sim only")
    check_pair_urls(engine.producer_url, engine.consumer_url)
    if config.attached and (flags := stray("launch_only")):
        raise InputError(
            f"{flags} configure(s) engines kvcal launches; with --producer-url/--consumer-url the engines already run"
        )
    if flags := stray("producer_side_channel"):
        side_channel_only(engine.transport, flags)


def strays(given: set[str], mark: str, named: Callable[[str], str] = str) -> list[str]:
    """The settings among ``given`` that carry ``mark`` (:mod:`kvcal.settings`), each as ``named`` shows it."""
    return [named(name) for name in marked(mark) if name in given]


def side_channel_only(transport: str, flags: str) -> None:
    """Refuse the producer's side-channel settings (``flags``, as given) for a transport whose pull never names it."""
    transports = available()
    if not transports[transport].pull_names_producer:
        naming = " or ".join(sorted(name for name, t in transports.items() if t.pull_names_producer))
        raise InputError(f"{flags} apply to --transport {naming} only")


def check_pairs(config: SweepConfig) -> None:
    """Each pair of a campaign over pairs, by the same marks as the flags: vLLM pairs attach (both URLs, well formed,
    two engines), simulated pairs name no engine setting (it would be ignored), vLLM pairs no sim curves, and the
    producer's side channel only for a transport whose pull names it."""
    for pair in config.pairs or ():
        urls = (pair.producer_url, pair.consumer_url)
        given = pair.model_fields_set
        if config.engine.kind == "sim":
            if any(urls):
                raise InputError(f"pair {pair.name}: --engine sim attaches to no engine; drop its URLs")
            if keys := strays(given, "engine_only"):
                raise InputError(f"pair {pair.name}: {', '.join(keys)} do(es) not apply to --engine sim")
            continue
        if keys := strays(given, "producer_side_channel"):
            try:
                side_channel_only(config.engine.transport, ", ".join(keys))
            except InputError as err:
                raise InputError(f"pair {pair.name}: {err}") from None
        if None in urls:
            raise InputError(
                f"pair {pair.name}: give both producer_url and consumer_url (a campaign over pairs "
                "attaches to running engines)"
            )
        if pair.sim is not None:
            raise InputError(f"pair {pair.name}: sim curves apply to --engine sim only")
        check_pair_urls(*urls)


def load_pairs_file(path: Path) -> list[dict[str, Any]]:
    """``kvcal sweep --pairs FILE``: YAML ``pairs: [{name, class, producer_url, consumer_url, ...}]`` (dashes or
    underscores in keys); each entry is checked as a :class:`kvcal.settings.PairSpec` with the other settings."""
    if not path.exists() and not path.is_symlink():
        raise InputError(f"--pairs {path} does not exist")
    try:
        data = load_pyyaml(read_text(path, f"--pairs {path}"), f"--pairs {path}")
    except yaml.YAMLError as err:
        raise InputError(f"--pairs {path} is not valid YAML: {describe(err)}") from None
    pairs = data.get("pairs") if isinstance(data, dict) else None
    if not isinstance(pairs, list) or not pairs or not all(isinstance(p, dict) for p in pairs):
        raise InputError(
            f"--pairs {path} must hold 'pairs:', a list of mappings with name, class, producer_url and consumer_url"
        )
    if set(data) != {"pairs"}:
        unknown = ", ".join(sorted(map(str, set(data) - {"pairs"})))
        raise InputError(f"--pairs {path}: unknown top-level key(s) {unknown}")
    return [_underscored(p, f"--pairs {path}: pair {p.get('name', i + 1)}", PAIR_ALIASES) for i, p in enumerate(pairs)]


def check_resume(stored: SweepConfig, requested: SweepConfig) -> None:
    """--resume continues the stored run as it was planned: refuse given flags that differ from it."""
    changed = []
    adjustable = set(marked("adaptive_rule"))  # may be given again to run an adaptive campaign further
    for name in sorted(requested.given() - set(RESUME_LOCATORS) - adjustable):
        mine, theirs = requested.value(name), stored.value(name)
        if _comparable(mine) != _comparable(theirs):
            changed.append(f"{flag_of(name)} {_show(mine)} (the run has {_show(theirs)})")
    if changed:
        raise InputError(
            "--resume continues the run with its stored settings; these differ: "
            + "; ".join(changed)
            + ". Drop them, or start a new run with another --name"
        )


def _comparable(value: Any) -> Any:
    return value.model_dump() if hasattr(value, "model_dump") else value


def _show(value: Any) -> str:
    if isinstance(value, list):
        return ",".join(map(str, value)) or "(empty)"
    return str(value)


def load_campaign_file(path: Path) -> dict[str, Any]:
    """Read a campaign YAML into a dict of settings (keys may use dashes or underscores)."""
    if not path.exists() and not path.is_symlink():
        raise InputError(f"campaign file {path} does not exist")
    text = read_text(path, f"campaign file {path}")
    try:
        data = load_pyyaml(text, f"campaign file {path}")
    except yaml.YAMLError as err:
        raise InputError(f"campaign file {path} is not valid YAML: {describe(err)}") from None
    if data is None:
        raise InputError(f"campaign file {path} holds no settings (it is empty)")
    if not isinstance(data, dict):
        raise InputError(f"campaign file {path} must be a mapping of settings, got {type(data).__name__}")
    settings = _underscored(data, f"campaign file {path}")
    for name, value in settings.items():  # a nested block (sim:) takes dashes too, as the top level does
        annotation = flat_field(name).annotation if name in PATHS else None
        if isinstance(value, dict) and isinstance(annotation, type) and issubclass(annotation, BaseModel):
            settings[name] = _underscored(value, f"campaign file {path}: {name}")
    return settings


PAIR_ALIASES = {"link_class": "class"}  # a pair's class may be spelled as its field's name too (PairSpec)


def _underscored(data: dict[Any, Any], where: str, aliases: dict[str, str] | None = None) -> dict[str, Any]:
    """``data`` with dashes in keys read as underscores (and ``aliases`` as the name the record reads); two spellings
    of one key (``producer-url`` and ``producer_url``) are refused, not one kept silently."""
    out: dict[str, Any] = {}
    spelled: dict[str, str] = {}
    for key, value in data.items():
        name = str(key).replace("-", "_")
        name = (aliases or {}).get(name, name)
        if name in spelled:
            raise InputError(f"{where}: '{spelled[name]}' and '{key}' are one setting; give it once")
        spelled[name], out[name] = str(key), value
    return out


def resolve_config(file_settings: dict[str, Any], flag_settings: dict[str, Any]) -> SweepConfig:
    """Flags given on the command line (not None) override the campaign file."""
    merged = dict(file_settings)
    merged.update({key: value for key, value in flag_settings.items() if value is not None})
    unknown = [key for key in merged if key not in PATHS]  # a group's name too: files and flags name settings flat
    if unknown:
        raise InputError(f"setting '{unknown[0]}': Extra inputs are not permitted (unknown setting)")
    try:
        config = SweepConfig.model_validate(grouped_from_flat(merged, flat_only=True))
    except ValidationError as err:
        first = err.errors()[0]
        loc = list(first.get("loc", ())) + ([first["ctx"]["field"]] if first.get("type") == BOOL_NUMBER else [])
        where = ".".join(str(p) for p in _flat_loc(loc))
        hint = " (unknown setting)" if first.get("type") == "extra_forbidden" else ""
        message = str(first.get("msg", "")).removeprefix(
            "Value error, "
        )  # pydantic's prefix for a validator's own words
        raise InputError(f"setting '{where}': {message}{hint}" if where else f"{message}{hint}") from None
    check_settings(config)
    return config


def _flat_loc(loc: list[Any]) -> list[Any]:
    """Where a validation error is, as the flags and the campaign file name it: ``probe.reps`` is ``reps``."""
    if len(loc) >= 2 and loc[0] in GROUPS:
        names = {path: name for name, path in PATHS.items()}
        return [names.get((loc[0], loc[1]), loc[1]), *loc[2:]]
    return loc
