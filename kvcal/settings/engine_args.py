"""What an engine's argument list says: the value a flag was given (``--name value`` or ``--name=value``).

A base module of its own because three readers share it: the sweep's settings
(:meth:`kvcal.settings.sweep.SweepConfig.engine_arg`), the vLLM pair's setup record
(:mod:`kvcal.engines.vllm_setup`) and the upgrade of older run.json files
(:mod:`kvcal.records.old_schemas`), which reads a stored ``engine_args`` list without
building the sweep's settings.
"""

from __future__ import annotations

from collections.abc import Sequence


def arg_value(args: Sequence[str], *names: str) -> str | None:
    """The value of ``--name value`` or ``--name=value`` in an argument list, or None."""
    for i, arg in enumerate(args):
        for name in names:
            if arg == name and i + 1 < len(args):
                return args[i + 1]
            if arg.startswith(name + "="):
                return arg.split("=", 1)[1]
    return None
