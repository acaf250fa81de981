"""`kvcal plan`: before booking engines, what an adaptive campaign and a uniform ladder would cost on prior curves."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from kvcal.cli.help_tables import JSON_SCHEMAS  # what --json prints, declared by its record
from kvcal.cli.help_tables import PLAN_FALLBACKS as FALLBACK  # what plan uses when neither flag nor prior says
from kvcal.cli.help_tables import PLAN_SETTINGS as PLAN  # PlanConfig's defaults and bounds, without pydantic
from kvcal.cli.output import warn_each
from kvcal.cli.predict_cmd import say

EPILOG = """The prior is either an earlier run or fit (--from) or a `kvcal predict` profile
pair (--model, --hardware); campaigns are simulated on those curves with --noise-cv
noise, each one as `kvcal sweep --adaptive` or the default ladder would run it.
Engine time is the summed TTFT of the probes (what a GPU hour is spent on, besides
start-up and kvcal's own overhead). An estimate: a real pair differs as much as the prior.

Examples:

  kvcal plan --model glm-4.5 --hardware h200 --target-width 0.05

  kvcal plan --model glm-4.5 --hardware h200 --target-regret 0.001   # adaptive stops on the threshold's regret

  kvcal plan --from results/my-run --target-width 0.10 --campaigns 20

  kvcal plan --from results/my-run/fit.json --noise-cv 0.08 --json

  kvcal plan --model llama-3.1-8b --hardware h100 --link tcp-100g --max-model-len 32768"""


def plan(
    source: Optional[Path] = typer.Option(
        None, "--from", help="An earlier run folder or fit.json: its fitted curves (and noise) are the prior."
    ),
    model: Optional[str] = typer.Option(
        None, "--model", "-m", help="Model profile (as in kvcal predict), with --hardware."
    ),
    hardware: Optional[str] = typer.Option(
        None, "--hardware", help="Accelerator profile (h100, h200, b200, cpu-amx...)."
    ),
    link: Optional[str] = typer.Option(None, "--link", "-l", help="Link profile; default: the accelerator's."),
    noise_cv: Optional[float] = typer.Option(
        None,
        "--noise-cv",
        help=f"Probe noise as a fraction of TTFT; default: the fit's, or {FALLBACK['noise_cv']:g}.",
    ),
    target_width: float = typer.Option(
        PLAN["target_width"]["default"], "--target-width", help="Relative width (upper - lower) / break-even to reach."
    ),
    target_regret: Optional[float] = typer.Option(
        None,
        "--target-regret",
        help="Adaptive campaigns stop instead once the expected regret of emit-config's "
        "threshold is at most this fraction of TTFT "
        f"({PLAN['target_regret']['gt']} < R < {PLAN['target_regret']['lt']}), as kvcal sweep --adaptive "
        "--target-regret.",
    ),
    campaigns: int = typer.Option(
        PLAN["campaigns"]["default"],
        "--campaigns",
        min=PLAN["campaigns"]["ge"],
        max=PLAN["campaigns"]["le"],
        help="Simulated campaigns per design.",
    ),
    seed: int = typer.Option(
        PLAN["seed"]["default"], "--seed", min=PLAN["seed"]["ge"], help="Seed of the first simulated campaign."
    ),
    block_size: Optional[int] = typer.Option(
        None, "--block-size", help=f"KV block size in tokens; default: the fit's, or {FALLBACK['block_size']}."
    ),
    max_model_len: Optional[int] = typer.Option(
        None,
        "--max-model-len",
        max=PLAN["max_model_len"]["le"],
        help=f"Longest prompt allowed; default: the model's ({FALLBACK['max_model_len'] // 1024}K at most) or the "
        "fit's longest length.",
    ),
    as_json: bool = typer.Option(False, "--json", help=f"Print the plan as JSON (schema {JSON_SCHEMAS['plan']})."),
) -> None:
    """Simulate adaptive and uniform-ladder campaigns on prior curves: expected probes, engine time and interval width."""  # noqa: E501 - help text, printed by --help as written
    from kvcal.plan.run import plan_from_config
    from kvcal.plan.settings import PlanConfig

    config = PlanConfig(
        source=source,
        model=model,
        hardware=hardware,
        link=link,
        target_regret=target_regret,
        noise_cv=noise_cv,
        block_size=block_size,
        max_model_len=max_model_len,
        target_width=target_width,
        campaigns=campaigns,
        seed=seed,
    )  # before the prior is built
    from kvcal.sweep.judge import emit_judge

    result = plan_from_config(config, judge=emit_judge)
    if as_json:
        typer.echo(result.model_dump_json(indent=2))
        warn_each(result.notes)
        return
    _print(result)


def _print(r) -> None:  # r: kvcal.plan.simulate_designs.CampaignPlan
    c = r.curves
    truth = f"{r.true_break_even_tokens:,.0f} tokens" if r.true_break_even_tokens is not None else "none in range"
    say(f"prior: {r.prior}")
    say(
        f"  recompute {c['recompute_intercept_ms']:.4g} ms + {c['recompute_per_token_us']:.4g} us/token + "
        f"{c['recompute_per_token2_ns']:.4g} ns/token^2; pull {c['pull_intercept_ms']:.4g} ms + "
        f"{c['pull_per_token_us']:.4g} us/token; noise {c['noise_cv']:.1%}; break-even {truth}"
    )
    say(
        f"  lengths {r.allowed_range[0]}-{r.allowed_range[1]} tokens; target: {r.confidence:.0%} interval within "
        f"{r.target_width:.0%} of the break-even"
        + ("" if r.target_regret is None else f"; adaptive: expected regret <= {r.target_regret:.3%} of TTFT")
    )
    rows = [["design", "probes", "engine time", "width", "regret", "reached", "coverage", "stopped on"]]
    low, high = r.allowed_range
    # A width relative to a break-even outside the range (near 0 when the pull always wins) reads as nonsense.
    inside = r.true_break_even_tokens is not None and low < r.true_break_even_tokens < high
    for d in r.designs:
        probes = f"{d.probes_median:.0f}" + (
            f" ({d.probes_p10_p90[0]:.0f}-{d.probes_p10_p90[1]:.0f})" if d.campaigns > 1 else ""
        )
        engine = _seconds(d.engine_s_median) + (
            f" ({_seconds(d.engine_s_p10_p90[0])}-{_seconds(d.engine_s_p10_p90[1])})" if d.campaigns > 1 else ""
        )
        width = "-" if d.width_median is None or not inside else f"{d.width_median:.1%}"
        coverage = "-" if d.coverage is None else f"{d.coverage:.0%}"
        stops = ", ".join(f"{k} {v:.0%}" for k, v in d.stop_reasons.items() if k != "None") or "-"
        regret = "-" if d.regret_median is None else f"{d.regret_median:.3%}"
        rows.append([d.design, probes, engine, width, regret, f"{d.reached_target_share:.0%}", coverage, stops])
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        say("  " + "  ".join(cell.ljust(w) for cell, w in zip(row, widths)))
    say(
        "  adaptive: kvcal sweep --adaptive; ladder: the default ladder, passes added until the target; "
        "ladder-3: the default 3 reps; oracle: every probe at the true break-even (the floor)"
    )
    adaptive = next(d for d in r.designs if d.design == "adaptive")
    if adaptive.engine_s_median > 0:
        say(
            f"one hour of engine time buys about {3600 / adaptive.engine_s_median:,.0f} adaptive campaigns "
            "(probe time only: add engine start-up and kvcal's overhead)"
        )
    for note in r.notes:
        say(f"note: {note}")


def _seconds(value: float) -> str:
    return f"{value:.2f} s" if value < 120 else f"{value / 60:.1f} min"


def register(app: typer.Typer) -> None:
    app.command("plan", epilog=EPILOG)(plan)
