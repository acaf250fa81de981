"""The command modules, in the order ``kvcal --help`` lists them, and the index that lists them unimported.

``kvcal --help`` (and a bare ``kvcal``) shows only each command's name and first line of
help. Building the whole app for that imports every command module, and sweep's flags
are read off SweepConfig's fields (pydantic), which was most of the startup time. So the
top-level help is rendered from INDEX instead; tests/unit/cli/test_cli_boundary.py renders it
both ways and requires the two identical, so the index cannot drift from the commands.
"""

from __future__ import annotations

import importlib
from types import ModuleType

MODULES = (
    "sweep_cmd",
    "export_cmd",
    "fit_cmd",
    "plot_cmd",
    "emit_cmd",
    "compare_cmd",
    "history_cmd",
    "report_cmd",
    "predict_cmd",
    "plan_cmd",
    "fleet_cmd",
    "observe_cmd",
    "profiles_cmd",
    "k8s_cmd",
)

INDEX = (
    ("sweep", "Time NIXL pull against recompute over a ladder of prefix lengths and record every probe."),
    (
        "export",
        "Write the probe table (prefix_tokens, leg, ttft_ms, rep, bytes_moved, started_at), one row per valid probe.",
    ),
    ("fit", "Fit recompute (affine or quadratic) and pull (affine) costs and report the break-even with its interval."),
    ("plot", "Plot TTFT against prefix length for both legs, with the break-even and the pull's saving in percent."),
    (
        "emit-config",
        "Emit minCachedTokenDelta (where pulling pays on mean costs) and peakPrefillThroughput as router "
        "config, engine settings, and more.",
    ),
    (
        "compare",
        "Compare a new fit with a baseline: break-even, intervals, coefficients, bandwidth, and the deployed "
        "threshold.",
    ),
    ("history", "Show how the break-even (with its interval) and the cost coefficients moved over runs."),
    ("report", "Write one self-contained HTML report of a run, a comparison, a history or a fleet study."),
    (
        "predict",
        "Predict KV bytes per token, prefill FLOPs, the recompute and pull curves, the break-even and the "
        "link's floor.",
    ),
    (
        "plan",
        "Simulate adaptive and uniform-ladder campaigns on prior curves: expected probes, engine time and "
        "interval width.",
    ),
    (
        "fleet",
        "Simulate a fleet under a workload for each P2P threshold: goodput, TTFT, queues, and the threshold to use.",
    ),
    ("observe", "Read a deployed fleet's pulls, bytes, TTFT and queues from Prometheus and check them against kvcal."),
    (
        "k8s-job",
        "Render a Kubernetes Job that runs sweep, fit and emit-config in-cluster (pod IPs are unreachable "
        "from a laptop).",
    ),
    ("profiles", "Model and hardware profiles: KV layout, FLOPs, accelerators and links."),
)


# The module that registers each command: an invocation that names one builds an app of that command alone.
MODULE_OF = {
    "sweep": "sweep_cmd",
    "export": "export_cmd",
    "fit": "fit_cmd",
    "plot": "plot_cmd",
    "emit-config": "emit_cmd",
    "compare": "compare_cmd",
    "history": "history_cmd",
    "predict": "predict_cmd",
    "plan": "plan_cmd",
    "fleet": "fleet_cmd",
    "k8s-job": "k8s_cmd",
    "profiles": "profiles_cmd",
    "report": "report_cmd",
    "observe": "observe_cmd",
}


def load(names: tuple[str, ...] = MODULES) -> list[ModuleType]:
    """The command modules, imported (each has ``register(app)``): all of them unless ``names`` says which."""
    return [importlib.import_module(f"kvcal.cli.{name}") for name in names]


def named_command(args: list[str]) -> str | None:
    """The command an invocation names (its first word that is not a flag), when kvcal has it."""
    first = next((arg for arg in args if not arg.startswith("-")), None)
    return first if first in MODULE_OF else None
