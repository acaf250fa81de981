"""`kvcal profiles`: list and show model/hardware profiles, or build one from a HF config.json."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional

import typer

from kvcal.cli.output import stdout, warn_each

EPILOG = """Examples:

  kvcal profiles list

  kvcal profiles show deepseek-v3 --kv-dtype fp8

  kvcal profiles show h200 --json

  kvcal profiles from-config ~/models/Llama-3.1-8B/config.json --json

Profiles live in kvcal/estimate/profile_data/models and kvcal/estimate/profile_data/hardware (override the folder with
KVCAL_PROFILES_DIR). See docs/profiles.md."""

KV_DTYPE_HELP = "KV cache dtype: bf16, fp16, fp8 (e4m3), fp8_e5m2, fp32, or auto (the model's)."

profiles_app = typer.Typer(
    name="profiles",
    help="Model and hardware profiles: KV layout, FLOPs, accelerators and links.",
    no_args_is_help=True,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _print_json(data: Any) -> None:
    typer.echo(json.dumps(data, indent=2, default=str))


def _lines(rows: list[list[str]]) -> None:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for row in rows:
        stdout.print("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip(), markup=False, highlight=False)


@profiles_app.command("list", epilog=EPILOG)
def list_profiles(
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of tables."),
) -> None:
    """List every model, accelerator and link profile with its key figures."""
    from kvcal.estimate.profiles import load_profiles, model_summary

    profiles = load_profiles()
    models = [model_summary(m) for m in profiles.models.values()]
    if as_json:
        _print_json(
            {
                "root": str(profiles.root),
                "models": models,
                "accelerators": [a.model_dump(by_alias=True) for a in profiles.accelerators.values()],
                "links": [lk.model_dump(by_alias=True) for lk in profiles.links.values()],
            }
        )
        return
    stdout.print(f"profiles in {profiles.root}", markup=False)
    stdout.print("\nmodels", markup=False)
    _lines(
        [["name", "attention", "layers", "KV B/token", "KV dtype", "dense GFLOP/token"]]
        + [
            [
                s["name"],
                s["attention_kind"],
                str(s["layers"]),
                f"{s['kv_bytes_per_token']:,}",
                s["kv_dtype"],
                f"{s['dense_flops_per_token'] / 1e9:.3g}",
            ]
            for s in models
        ]
    )
    stdout.print("\naccelerators", markup=False)
    _lines(
        [["name", "device", "bf16 TFLOP/s", "fp8 TFLOP/s", "mem GB/s", "default link"]]
        + [
            [
                a.name,
                a.device,
                f"{a.bf16_dense_tflops:g}",
                f"{a.fp8_dense_tflops:g}" if a.fp8_dense_tflops else "-",
                f"{a.memory_bandwidth_gb_s:g}" if a.memory_bandwidth_gb_s else "-",
                a.default_link,
            ]
            for a in profiles.accelerators.values()
        ]
    )
    stdout.print("\nlinks", markup=False)
    _lines(
        [["name", "transport", "nominal Gb/s", "efficiency", "setup ms"]]
        + [
            [lk.name, lk.transport, f"{lk.nominal_gbit_s:g}", f"{lk.efficiency:g}", f"{lk.setup_ms:g}"]
            for lk in profiles.links.values()
        ]
    )


@profiles_app.command("show", epilog=EPILOG)
def show_profile(
    name: str = typer.Argument(..., help="A model, accelerator or link profile name (or alias)."),
    kv_dtype: Optional[str] = typer.Option(None, "--kv-dtype", help=KV_DTYPE_HELP),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Show one profile: its fields, the file it came from and (for a model) the derived KV and FLOP figures."""
    from kvcal.errors import InputError
    from kvcal.estimate.profiles import load_profiles, match_profile, model_summary

    profiles = load_profiles()
    tables = (("model", profiles.models), ("accelerator", profiles.accelerators), ("link", profiles.links))
    for kind, table in tables:  # noqa: B007 - kind is read after the loop: the table that matched
        found = match_profile(table, name)
        if found is not None:
            break
    else:
        known = sorted([*profiles.models, *profiles.accelerators, *profiles.links])
        raise InputError(f"no profile named {name!r}; known: {', '.join(known)}")
    out: dict[str, Any] = {"kind": kind, "file": str(profiles.files[found.name])}
    if kind == "model":
        out["derived"] = model_summary(found, kv_dtype)
    out["profile"] = found.model_dump(by_alias=True, mode="json")
    if as_json:
        _print_json(out)
        return
    _show_text(out)


def _show_text(out: dict[str, Any]) -> None:
    stdout.print(f"{out['kind']} profile {out['profile']['name']} ({out['file']})", markup=False)
    derived = out.get("derived")
    if derived:
        stdout.print(
            f"  KV bytes per token: {derived['kv_bytes_per_token']:,} ({derived['kv_dtype']}; "
            + ", ".join(f"{k} {v:,}" for k, v in derived["kv_bytes_breakdown"].items())
            + ")",
            markup=False,
        )
        if derived["window_tokens"]:
            stdout.print(
                f"  sliding-window state: {derived['kv_bytes_window']:,} B once the prefix reaches "
                f"{derived['window_tokens']} tokens ({derived['kv_bytes_per_token_all_layers']:,} B/token "
                "if every layer keeps every token)",
                markup=False,
            )
        if derived["dense_flops_per_token"] is None:
            stdout.print(
                f"  dense prefill FLOPs per token: unknown (compute estimate {derived['compute_estimate']})",
                markup=False,
            )
        else:
            stdout.print(
                f"  dense prefill FLOPs per token: {derived['dense_flops_per_token'] / 1e9:.4g} GFLOP "
                f"({derived['matmul_params_per_token'] / 1e9:.4g} B matmul params; plus the attention term)",
                markup=False,
            )
    for key, value in out["profile"].items():
        if isinstance(value, dict):
            stdout.print(f"  {key}:", markup=False)
            for sub, inner in value.items():
                stdout.print(f"    {sub}: {inner}", markup=False, highlight=False)
        else:
            stdout.print(f"  {key}: {value}", markup=False, highlight=False)


@profiles_app.command("from-config", epilog=EPILOG)
def from_config(
    file: Path = typer.Argument(..., help="A Hugging Face config.json, or a model folder holding one."),
    kv_dtype: Optional[str] = typer.Option(None, "--kv-dtype", help=KV_DTYPE_HELP + " Default: the config's dtype."),
    name: Optional[str] = typer.Option(None, "--name", help="Profile name (default: the model folder's name)."),
    as_json: bool = typer.Option(
        False, "--json", help='Print JSON: {"kv_bytes_per_token": int, ..., "profile": {...}}.'
    ),
) -> None:
    """Read a config.json and print its KV bytes per token, FLOPs and the profile it implies (save it as YAML to keep it)."""  # noqa: E501 - help text, printed by --help as written
    from kvcal.estimate.hfconfig import model_profile_from_config
    from kvcal.estimate.profiles import model_summary

    path = file / "config.json" if file.is_dir() else file
    model = model_profile_from_config(path, name=name)
    out = model_summary(model, kv_dtype)
    out["profile"] = model.model_dump(by_alias=True, mode="json", exclude_none=True)
    if as_json:
        _print_json(out)
        if model.mlp is None:
            warn_each(
                [
                    f"{path} gives no MLP sizes: the KV layout is complete, the compute estimate is not "
                    "(kvcal predict needs them)"
                ]
            )
        return
    _show_text({"kind": "model", "file": str(path), "derived": out, "profile": out["profile"]})


def register(app: typer.Typer) -> None:
    app.add_typer(profiles_app, name="profiles")
