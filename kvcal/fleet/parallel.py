"""Where a study's independent runs execute: here, on N worker processes, or as tasks on a Ray cluster.

Every run is a pure function of the shared inputs (workload, fleet size, cost sets) and its own
identity (policy, seed, cost set): it draws its random numbers from streams seeded by that
identity, never from the order it runs in. So the results, returned in the order the tasks were
given, are the same whichever executor ran them and however the runs interleaved; only progress
(``on_done``, called as each run finishes, from any worker) sees the finishing order.

The shared inputs travel once per worker (a process pool's initializer; on Ray one ``ray.put``),
not once per run. Ctrl-C (or any error) stops every worker: the pool is terminated, Ray's pending
tasks are cancelled; pool workers ignore SIGINT themselves (the terminal sends it to the whole
process group; the parent decides) and, on Linux, die with the parent even when it is killed.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import sys
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from kvcal.errors import InputError, KvcalError, one_line
from kvcal.fleet.help_facts import MAX_JOBS, WORKER_MIB
from kvcal.redact import redact_url
from kvcal.urls import check_host

RAY_INSTALL = "pip install 'kvcal[ray]'"

Task = Any
OnDone = Callable[[int, Task], None]  # (runs finished so far, the task that just finished)
RunFn = Callable[[Any, Task], Any]  # fn(shared, task): a module-level function (workers import it by name)


def default_jobs() -> int:
    """The cores this process may use (its CPU affinity, which a container's cpuset or taskset narrows), at most
    :data:`MAX_JOBS`."""
    return min(MAX_JOBS, usable_cores())


def usable_cores() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


@dataclass(frozen=True)
class Executor:
    """``jobs`` worker processes here or, with ``ray_address`` (``auto``, ``local``, a cluster's address), Ray tasks."""

    jobs: int = 1
    ray_address: str | None = None

    def check(self) -> None:
        """Bounds and, for Ray, that it can be imported: before any work."""
        if not 1 <= self.jobs <= MAX_JOBS:
            raise InputError(
                f"--jobs must lie within 1-{MAX_JOBS} (each worker holds about {WORKER_MIB} MiB), got {self.jobs}"
            )
        if self.ray_address is not None:
            check_ray_address(self.ray_address)
            ray_module()

    def workers(self, runs: int) -> int:
        """Worker processes a study of ``runs`` runs starts here: 0 when it runs in this process (or on Ray)."""
        if self.ray_address is not None or self.jobs == 1 or runs <= 1:
            return 0
        return min(self.jobs, runs)

    @property
    def serial(self) -> bool:
        """Runs one after another in this process (where a run may also report its progress inside)."""
        return self.ray_address is None and self.jobs == 1

    def map(self, fn: RunFn, shared: Any, tasks: Sequence[Task], on_done: OnDone) -> list[Any]:
        """``[fn(shared, t) for t in tasks]``, in that order; ``on_done`` after each run finishes."""
        if self.ray_address is not None:
            return _ray_map(self.ray_address, fn, shared, tasks, on_done)
        workers = self.workers(len(tasks))
        if workers == 0:
            return _serial_map(fn, shared, tasks, on_done)
        return _pool_map(workers, fn, shared, tasks, on_done)


SERIAL = Executor()


class RayUnavailable(KvcalError, exit_code=4):
    """The Ray cluster ``--ray`` names could not be joined (not reached, or it refused the client)."""


def check_ray_address(address: str) -> None:
    """``auto``, ``local``, or a cluster's ``ray://HOST[:PORT]`` or ``HOST:PORT``: its host as the resolver takes it,
    its port 1-65535, never credentials (a refusal shows the address redacted)."""
    example = "auto, local, or the cluster's (ray://HOST:10001)"
    text = address.strip()
    if text in ("auto", "local"):
        return
    scheme, _, rest = text.rpartition("://")
    authority = rest.partition("/")[0]
    host, colon, port = authority.rpartition(":") if not authority.endswith("]") else (authority, "", "")
    host, port = (host, port) if colon else (authority, "")
    if not host or scheme not in ("", "ray") or "@" in rest or (port and not port.isdigit()) or not (port or scheme):
        raise InputError(f"--ray {redact_url(address)!r} is not a Ray address: give {example}")
    if port and not 1 <= int(port) <= 65535:
        raise InputError(f"--ray {redact_url(address)!r}: port {port} is not 1-65535")
    check_host(host, "--ray")


def _serial_map(fn: RunFn, shared: Any, tasks: Sequence[Task], on_done: OnDone) -> list[Any]:
    out = []
    for task in tasks:
        out.append(fn(shared, task))
        on_done(len(out), task)
    return out


_WORKER: tuple[RunFn, Any] | None = None  # set once in each pool worker by _install


def _install(fn: RunFn, shared: Any) -> None:
    global _WORKER
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _die_with_parent()
    _WORKER = (fn, shared)


def _die_with_parent() -> None:
    """Linux: the kernel kills this worker when the process that forked it dies, even by SIGKILL."""
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        pr_set_pdeathsig = 1
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL)
    except (OSError, AttributeError):
        pass  # best effort: terminate() below still stops workers on Ctrl-C and errors


def _call(indexed: tuple[int, Task]) -> tuple[int, Any]:
    assert _WORKER is not None
    fn, shared = _WORKER
    return indexed[0], fn(shared, indexed[1])


def _pool_map(jobs: int, fn: RunFn, shared: Any, tasks: Sequence[Task], on_done: OnDone) -> list[Any]:
    # fork: the workers start with the parent's modules and the shared inputs already in memory (no pickling
    # of either); elsewhere the platform's default (spawn) pickles them once per worker.
    methods = multiprocessing.get_all_start_methods()
    context = multiprocessing.get_context("fork" if "fork" in methods else None)
    results: list[Any] = [None] * len(tasks)
    pool = context.Pool(jobs, initializer=_install, initargs=(fn, shared))
    try:
        # chunksize 1: runs differ in length by orders of magnitude (always-pull vs no-p2p), so a worker
        # takes the next run when it is free; a run costs far more than the round trip.
        for done, (index, value) in enumerate(pool.imap_unordered(_call, enumerate(tasks), chunksize=1), 1):
            results[index] = value
            on_done(done, tasks[index])
        pool.close()
    finally:
        pool.terminate()  # Ctrl-C, an error in a run, or done: no worker outlives the study
        pool.join()
    return results


def ray_module():
    """Ray, or the one line that says how to install it (exit 2)."""
    try:
        import ray
    except ImportError:
        raise InputError(f"--ray needs Ray, which is not installed: {RAY_INSTALL}") from None
    return ray


def _ray_call(shared_and_fn: tuple[RunFn, Any], task: Task) -> Any:
    fn, shared = shared_and_fn
    return fn(shared, task)


def _ray_map(address: str, fn: RunFn, shared: Any, tasks: Sequence[Task], on_done: OnDone) -> list[Any]:
    ray = ray_module()
    if not ray.is_initialized():
        # "local" starts a cluster here, "auto" joins the one this machine belongs to (RAY_ADDRESS or the
        # head's address file); anything else is a cluster address, ray://HOST:10001 from outside it.
        try:
            with warnings.catch_warnings():  # Ray's own multi-line advice on a timeout: the error below says it
                warnings.simplefilter("ignore")
                ray.init(address=address, include_dashboard=False, log_to_driver=False, logging_level="ERROR")
        except (ConnectionError, TimeoutError, RuntimeError, ValueError) as err:
            raise RayUnavailable(
                f"--ray {redact_url(address)}: the Ray cluster could not be joined ({one_line(str(err), 200)})"
            ) from None
    shared_ref = ray.put((fn, shared))  # shipped once; every task gets the reference
    remote = ray.remote(num_cpus=1, max_retries=0)(_ray_call)
    refs = [remote.remote(shared_ref, task) for task in tasks]
    index = {ref: i for i, ref in enumerate(refs)}
    pending = list(refs)
    try:
        while pending:
            finished, pending = ray.wait(pending, num_returns=1)
            for ref in finished:
                _ray_get(ray, ref)  # an error in a run surfaces here, as it was raised
                on_done(len(refs) - len(pending), tasks[index[ref]])
        return [_ray_get(ray, ref) for ref in refs]
    finally:
        for ref in pending:
            ray.cancel(ref, force=True)


def _ray_get(ray, ref) -> Any:
    try:
        return ray.get(ref)
    except ray.exceptions.RayTaskError as err:
        cause = getattr(err, "cause", None)
        if isinstance(cause, Exception):  # the run's own error (an InputError keeps its one line and exit code)
            raise cause from None
        raise
