"""`kvcal predict`: estimate the pull and recompute curves and the break-even from profiles alone."""

from __future__ import annotations

import json
from typing import Optional

import typer

from kvcal.cli.help_tables import JSON_SCHEMAS  # what --json prints, declared by its record
from kvcal.cli.help_tables import PREDICT_SETTINGS as PREDICT  # PredictSettings' defaults and bounds, without numpy
from kvcal.cli.options import int_list
from kvcal.cli.output import stdout
from kvcal.settings.bounds import bounds_in_words

EPILOG = """An estimate from the model's KV layout and FLOPs and the hardware's nominal
rates (docs/predict.md lists every assumption): use it to plan a sweep and to judge
whether a measurement is sane, never instead of one.

Examples:

  kvcal predict --model gpt-oss-120b --hardware h200

  kvcal predict --model llama-3.1-8b --hardware h100 --link tcp-100g --json

  kvcal predict --model deepseek-v3 --hardware h200 --devices 8 --mfu 0.1 --kv-dtype fp8

  kvcal predict --model ~/models/Qwen3-32B/config.json --hardware b200 --lengths 4096,16384,65536

  kvcal predict --model tiny-llama --hardware cpu-amx"""


def predict(
    model: str = typer.Option(
        ..., "--model", "-m", help="Model profile name or alias, or a HF config.json / model folder."
    ),
    hardware: str = typer.Option(..., "--hardware", help="Accelerator profile (h100, h200, b200, cpu-amx...)."),
    link: Optional[str] = typer.Option(
        None, "--link", "-l", help="Link profile (rdma-400, tcp-100g...); default: the accelerator's."
    ),
    kv_dtype: Optional[str] = typer.Option(
        None, "--kv-dtype", help="KV cache dtype: bf16, fp16, fp8, fp32 or auto (the model's)."
    ),
    mfu: Optional[float] = typer.Option(
        None,
        "--mfu",
        help=f"Share of peak the prefill reaches (must {bounds_in_words(PREDICT['mfu'])}); default: the accelerator's "
        "calibrated value.",
    ),
    devices: int = typer.Option(
        PREDICT["devices"]["default"],
        "--devices",
        help="Devices serving one engine instance (TP x PP); multiplies the peak.",
    ),
    overhead_ms: Optional[float] = typer.Option(
        None, "--overhead-ms", help="Fixed TTFT part in ms; default: the accelerator's."
    ),
    pull_floor_ms: Optional[float] = typer.Option(
        None, "--pull-floor-ms", help="Whole fixed cost of a pull in ms; default: overhead + link setup."
    ),
    link_efficiency: Optional[float] = typer.Option(
        None,
        "--link-efficiency",
        help=f"Share of the link's nominal rate a pull reaches (must {bounds_in_words(PREDICT['link_efficiency'])}).",
    ),
    sliding_window_full: bool = typer.Option(
        False, "--sliding-window-full", help="Count sliding-window layers on every token (engine keeps all)."
    ),
    lengths: Optional[str] = typer.Option(
        None, "--lengths", help="Comma-separated prefix lengths to tabulate (default: powers of two to the context)."
    ),
    as_json: bool = typer.Option(
        False, "--json", help=f"Print the prediction as JSON (schema {JSON_SCHEMAS['predict']})."
    ),
) -> None:
    """Predict KV bytes per token, prefill FLOPs, the recompute and pull curves, the break-even and the link's floor."""
    from kvcal.estimate.hfconfig import load_model
    from kvcal.estimate.predict import PredictSettings
    from kvcal.estimate.predict import predict as run_predict
    from kvcal.estimate.profiles import load_profiles

    settings = PredictSettings(
        kv_dtype=kv_dtype,
        mfu=mfu,
        devices=devices,
        overhead_ms=overhead_ms,
        pull_floor_ms=pull_floor_ms,
        link_efficiency=link_efficiency,
        sliding_window_full=sliding_window_full,
        lengths=tuple(int_list(lengths, "--lengths") or ()) or None,
    )
    profiles = load_profiles()
    accelerator = profiles.accelerator(hardware)
    result = run_predict(load_model(model), accelerator, profiles.link(link or accelerator.default_link), settings)
    if as_json:
        typer.echo(json.dumps(result.to_dict(), indent=2))
        return
    _print_text(result)


def say(text: str) -> None:
    stdout.print(text, markup=False, highlight=False)


def _print_text(r) -> None:  # r: kvcal.estimate.predict.Prediction
    a = r.assumptions
    say(f"{r.model} on {r.devices} x {r.hardware}, pulling over {r.link} (an estimate: see docs/predict.md)")
    parts = ", ".join(f"{k} {v:,}" for k, v in r.kv_bytes_breakdown.items())
    say(f"  KV bytes per token: {r.kv_bytes_per_token:,} ({r.kv_dtype}; {parts})")
    if r.window_tokens:
        say(f"  plus {r.kv_bytes_window:,} B of sliding-window state once the prefix reaches {r.window_tokens} tokens")
    say(
        f"  prefill: {r.dense_flops_per_token / 1e9:.4g} GFLOP/token dense plus the attention term; "
        f"{a['peak_tflops_per_device']:g} TFLOP/s {r.compute_dtype} peak x {r.devices} x MFU {a['mfu']:.3g}, "
        f"+{a['overhead_ms']:g} ms"
    )
    say(
        f"  pull: {a['pull_floor_ms']:g} ms floor + {r.pull_us_per_token:.4g} us/token "
        f"({a['link_nominal_gbit_s']:g} Gb/s x efficiency {a['link_efficiency']:.3g}); "
        f"the wire alone needs {r.min_transfer_us_per_token:.4g} us/token"
    )
    rows = [["tokens", "recompute ms", "pull ms", "wire-only ms", "GFLOP/token", "cheaper"]]
    for n in r.lengths:
        key = str(n)
        cheaper = "pull" if r.pull_ms_at[key] < r.recompute_ms_at[key] else "recompute"
        rows.append(
            [
                key,
                f"{r.recompute_ms_at[key]:.4g}",
                f"{r.pull_ms_at[key]:.4g}",
                f"{r.min_transfer_ms_at[key]:.3g}",
                f"{r.prefill_flops_per_token_at[key] / 1e9:.4g}",
                cheaper,
            ]
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        say("  " + "  ".join(cell.rjust(w) for cell, w in zip(row, widths)))
    if r.status == "crossover":
        say(f"predicted break-even: {r.break_even_tokens:,.0f} tokens (pull is cheaper above it)")
    elif r.status == "pull-always-wins":
        say("predicted: the pull is cheaper at every length (no break-even)")
    else:
        say(f"predicted: recompute is cheaper up to the context limit ({a['search_upper_tokens']:,} tokens)")


def register(app: typer.Typer) -> None:
    app.command("predict", epilog=EPILOG)(predict)
