"""`kvcal k8s-job`: render a Kubernetes Job that runs the sweep in-cluster, next to the engines."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from kvcal.cli.help_tables import K8S_JOB_SETTINGS as JOB  # JobSpec's defaults, without ruamel or the sweep's checks
from kvcal.cli.options import int_list
from kvcal.cli.output import info
from kvcal.errors import InputError

EPILOG = """Examples:

  kvcal k8s-job --image ghcr.io/me/kvcal:0.1.0 --model openai/gpt-oss-120b \\
      --producer-url http://10.0.3.17:8200 --consumer-url http://10.0.4.22:8200 | kubectl apply -f -

  kvcal k8s-job --image IMG --model M --producer-url http://P:8200 --consumer-url http://C:8200 \\
      --pvc kvcal-results --prefix-lengths 1024,2048,4096,8192,16384 -o job.yaml -- --max-attempts 5

Arguments after `--` are passed to `kvcal sweep` unchanged."""


def k8s_job(
    image: str = typer.Option(
        ..., "--image", help="Container image with kvcal installed (no GPU or vLLM needed in it)."
    ),
    producer_url: Optional[str] = typer.Option(
        None, "--producer-url", help="Producer engine base URL as seen in-cluster, e.g. http://10.0.3.17:8200."
    ),
    consumer_url: Optional[str] = typer.Option(
        None, "--consumer-url", help="Consumer engine base URL as seen in-cluster."
    ),
    pairs: Optional[Path] = typer.Option(
        None,
        "--pairs",
        help="YAML 'pairs: [{name, class, producer_url, consumer_url, ...}]' (kvcal sweep --pairs' "
        "file): an Indexed Job, one pod a pair, each into its folder of --pvc, then kvcal fit over them all and "
        "emit-config. Not with --producer-url/--consumer-url.",
    ),
    parallelism: int = typer.Option(
        JOB["parallelism"]["default"],
        "--parallelism",
        help="--pairs: pods at once (1: pairs that share an engine would slow each other's probes).",
    ),
    model: str = typer.Option(..., "--model", help="Model name the engines serve."),
    name: str = typer.Option(
        JOB["name"]["default"], "--name", help="Job name (a DNS label); also the run folder name."
    ),
    namespace: str = typer.Option(
        JOB["namespace"]["default"], "--namespace", "-n", help="Namespace of the Job (usually the engines')."
    ),
    transport: str = typer.Option(
        JOB["transport"]["default"], "--transport", help="How the engines move KV: p2p-tier (llm-d P2P) or nixl-pd."
    ),
    prefix_lengths: Optional[str] = typer.Option(
        None, "--prefix-lengths", help="Comma-separated prefix lengths (default: kvcal sweep's)."
    ),
    reps: Optional[int] = typer.Option(None, "--reps", help="Repetitions per length and leg (default: kvcal sweep's)."),
    producer_p2p_host: Optional[str] = typer.Option(
        None, "--producer-p2p-host", help="Producer's P2P side-channel host (p2p-tier)."
    ),
    producer_p2p_port: Optional[int] = typer.Option(
        None, "--producer-p2p-port", help="Producer's P2P side-channel port (p2p-tier)."
    ),
    pvc: Optional[str] = typer.Option(None, "--pvc", help="PersistentVolumeClaim for /results (default: an emptyDir)."),
    run_name: Optional[str] = typer.Option(
        None, "--run-name", help="Run folder name under /results (default: the Job name)."
    ),
    cpu: str = typer.Option(JOB["cpu"]["default"], "--cpu", help="CPU request of the kvcal container."),
    memory: str = typer.Option(
        JOB["memory"]["default"], "--memory", help="Memory request and limit of the kvcal container."
    ),
    ttl: int = typer.Option(
        JOB["ttl_seconds"]["default"],
        "--ttl",
        help="ttlSecondsAfterFinished: seconds before Kubernetes deletes the finished Job.",
    ),
    service_account: Optional[str] = typer.Option(None, "--service-account", help="serviceAccountName for the pod."),
    output: Optional[Path] = typer.Option(None, "--output", "-o", help="Write the manifest to FILE instead of stdout."),
    sweep_args: Optional[list[str]] = typer.Argument(
        None, metavar="[-- SWEEP_ARGS...]", help="Extra `kvcal sweep` arguments."
    ),
) -> None:
    """Render a Kubernetes Job that runs sweep, fit and emit-config in-cluster (pod IPs are unreachable from a laptop)."""  # noqa: E501 - help text, printed by --help as written
    from kvcal.files.writing import check_output, write_file
    from kvcal.k8s.job import JobSpec, render_job

    check_output(output, "--output")
    pair_specs = _pairs(pairs, producer_url, consumer_url)
    if pair_specs:
        from kvcal.k8s.pairs_job import STAND_IN_URLS

        producer_url, consumer_url = STAND_IN_URLS  # each pair's own are checked, and used, pair by pair
    spec = JobSpec(
        image=image,
        producer_url=str(producer_url),
        consumer_url=str(consumer_url),
        model=model,
        name=name,
        namespace=namespace,
        transport=transport,
        run_name=run_name,
        prefix_lengths=tuple(int_list(prefix_lengths, "--prefix-lengths") or ()),
        reps=reps,
        producer_p2p_host=producer_p2p_host,
        producer_p2p_port=producer_p2p_port,
        pvc=pvc,
        cpu=cpu,
        memory=memory,
        ttl_seconds=ttl,
        service_account=service_account,
        extra_args=tuple(sweep_args or ()),
    )
    if pair_specs:
        from kvcal.k8s.pairs_job import PairsJobSpec, render_pairs_job

        text = render_pairs_job(PairsJobSpec(spec, tuple(pair_specs), parallelism, source=f"--pairs {pairs}"))
    else:
        text = render_job(spec)
    if output is None:
        typer.echo(text, nl=False)
        return
    write_file(output, text, f"-o {output}")
    info(f"kvcal: wrote {output}; apply with: kubectl apply -f {output}")


def _pairs(path: Optional[Path], producer_url: Optional[str], consumer_url: Optional[str]) -> list:
    """The pairs of --pairs FILE (checked as kvcal sweep checks them), or [] for the one-pair Job."""
    if path is None:
        if producer_url is None or consumer_url is None:
            raise InputError("give --producer-url and --consumer-url, or --pairs FILE")
        return []
    if producer_url is not None or consumer_url is not None:
        raise InputError("--pairs names each pair's URLs; drop --producer-url/--consumer-url")
    from pydantic import ValidationError

    from kvcal.settings.sweep import PairSpec
    from kvcal.sweep.validate import load_pairs_file

    specs = []
    for entry in load_pairs_file(path):
        try:
            specs.append(PairSpec.model_validate(entry))
        except ValidationError as err:
            first = err.errors()[0]
            where = ".".join(str(p) for p in first.get("loc", ()))
            raise InputError(f"--pairs {path}: pair {entry.get('name', '?')}: {where}: {first.get('msg')}") from None
    return specs  # each pair is checked as the one-pair Job's flags are (kvcal.k8s.pairs_job.PairsJobSpec)


def register(app: typer.Typer) -> None:
    app.command("k8s-job", epilog=EPILOG)(k8s_job)
