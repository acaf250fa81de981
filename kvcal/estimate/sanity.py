"""Sanity checks of a fitted run against its model and hardware profiles.

Stage owned: the "sanity" section of ``kvcal fit`` and ``kvcal compare``. Pure functions:
a :class:`~kvcal.records.fit.FitResult` plus the profiles in, a list of
:class:`SanityFinding` out; nothing is printed. Three checks:

``pull_bandwidth``
    measured GB/s = kv_bytes_per_token / marginal pull cost per token (the slope of the
    pull fit at the middle of the measured range; the fixed floor is not bandwidth),
    expected GB/s = link nominal x link efficiency. Above the nominal rate is impossible
    (the bytes per token are overstated: wrong KV dtype); under a third of the expected
    rate names the likely cause for the link (TCP fallback on RDMA, CPU-tier setup).
``prefill_flops``
    achieved TFLOP/s = F(n_max) / recompute(n_max) at the longest measured prefix,
    against peak x devices x the accelerator's usual MFU. Above peak means the
    recompute leg did not recompute (a cache hit) or the profile is wrong; under a
    quarter of the usual rate points at core binding (CPU) or the device count (GPU).
``kv_bytes``
    the run's own KV bytes per token (``fit.setup.kv_bytes_per_token``) against the
    profile's: a 2x ratio is a KV dtype mismatch.

Which profiles a run resolves to is :mod:`kvcal.estimate.run_profiles`.
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path
from typing import Any, Literal

from kvcal.costs import cost_curve
from kvcal.errors import InputError
from kvcal.estimate.profiles import Accelerator, Link, ModelProfile, kv_layout, normalize_kv_dtype, prefill_flops
from kvcal.estimate.run_profiles import SanityContext, context_from_fit, profiles_or_none
from kvcal.records.fit import FitResult

log = logging.getLogger(__name__)

Severity = Literal["ok", "info", "warning"]

#: A pull below this share of the link's usual rate is reported.
LOW_PULL_RATIO = 1 / 3
#: A prefill below this share of the accelerator's usual MFU is reported.
LOW_PREFILL_RATIO = 0.25
#: Measured above nominal by more than this is impossible (rounding and fit noise aside).
OVER_NOMINAL = 1.05


@dataclass(frozen=True)
class SanityFinding:
    """One check: what was measured, what the profiles lead us to expect, and what to do."""

    check: str
    measured: float | None
    expected: float | None
    ratio: float | None
    unit: str
    severity: Severity
    advice: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# ---------------------------------------------------------------- checks


def sanity_findings(
    fit: FitResult,
    *,
    model: ModelProfile | None,
    hardware: Accelerator | None,
    link: Link | None,
    devices: int = 1,
    kv_dtype: str | None = None,
    run_kv_bytes_per_token: int | None = None,
    root: Path | str | None = None,
) -> list[SanityFinding]:
    """Every check the known facts allow; an empty list when nothing is known."""
    run_kv = run_kv_bytes_per_token or fit.setup.kv_bytes_per_token
    try:
        kv_dtype = normalize_kv_dtype(kv_dtype) if kv_dtype and kv_dtype != "auto" else None
    except InputError:  # an engine dtype name kvcal does not know: use the profile's default
        log.info("unknown KV dtype %r in the run; using the profile's", kv_dtype)
        kv_dtype = None
    profile_kv = kv_layout(model, kv_dtype).bytes_per_token if model is not None else None
    findings: list[SanityFinding] = []
    if model is not None and run_kv is not None and profile_kv is not None:
        findings.append(_kv_bytes_check(model, run_kv, profile_kv, kv_dtype))
    kv_bytes = run_kv or profile_kv
    if kv_bytes is not None or fit.pull_bandwidth_gbps is not None:
        findings.append(_pull_check(fit, kv_bytes, link, root))
    if model is not None and hardware is not None:
        findings.append(_prefill_check(fit, model, hardware, max(1, devices)))
    return findings


def sanity_for_fit(fit: FitResult, root: Path | str | None = None) -> tuple[SanityContext, list[SanityFinding]]:
    """Resolve ``fit.setup`` to profiles and run every check: what ``kvcal fit``/``compare`` print."""
    ctx = context_from_fit(fit, root)
    return ctx, sanity_findings(
        fit,
        model=ctx.model,
        hardware=ctx.hardware,
        link=ctx.link,
        devices=ctx.devices,
        kv_dtype=ctx.kv_dtype,
        run_kv_bytes_per_token=ctx.run_kv_bytes_per_token,
        root=root,
    )


def _kv_bytes_check(model: ModelProfile, run_kv: int, profile_kv: int, kv_dtype: str | None) -> SanityFinding:
    ratio = run_kv / profile_kv
    dtype = kv_layout(model, None).kv_dtype if kv_dtype is None else kv_dtype
    full = kv_layout(model, kv_dtype, sliding_window_full=True).bytes_per_token
    if abs(ratio - 1) <= 0.01:
        sev: Severity = "ok"
        advice = f"the run's KV layout matches {model.name} in {dtype}"
    elif model.attention.sliding_window and abs(run_kv / full - 1) <= 0.01:
        sev, advice = (
            "info",
            (
                "the engine counts sliding-window layers on every token (hybrid KV manager off); "
                "pass --sliding-window-full to kvcal predict to compare like with like"
            ),
        )
    elif abs(ratio - 0.5) <= 0.02 or abs(ratio - 2) <= 0.04:
        other = "an 8-bit" if ratio < 1 else "a 16-bit"
        sev, advice = (
            "warning",
            (
                f"wrong KV dtype? the run stores {run_kv} B/token, {ratio:.2f}x the profile's {dtype} "
                f"figure, as {other} cache would: check --kv-cache-dtype and pass the same --kv-dtype"
            ),
        )
    else:
        sev, advice = (
            "warning",
            (
                f"the run stores {run_kv} B/token but {model.name} in {dtype} needs {profile_kv}: "
                "the model that ran is probably not this profile (check the model name or config)"
            ),
        )
    return SanityFinding("kv_bytes", float(run_kv), float(profile_kv), ratio, "B/token", sev, advice)


def _pull_check(fit: FitResult, kv_bytes: int | None, link: Link | None, root: Path | str | None) -> SanityFinding:
    lo, hi = (fit.measured_range + [0, 0])[:2] if fit.measured_range else (0, 0)
    slope_us = float(cost_curve.slope_us(fit.pull.coefficients, (lo + hi) / 2))
    if kv_bytes is not None and slope_us > 0:
        measured: float | None = kv_bytes / slope_us / 1e3  # B/us -> GB/s
    elif kv_bytes is None:
        measured = fit.pull_bandwidth_gbps  # taken as GB/s (1e9 B/s)
    else:
        return SanityFinding(
            "pull_bandwidth",
            None,
            None,
            None,
            "GB/s",
            "info",
            "the pull cost does not grow with prefix length in the measured range (a floor-dominated "
            "pull): its bandwidth cannot be read; sweep longer prefixes to measure it",
        )
    if link is None or measured is None:
        return SanityFinding(
            "pull_bandwidth",
            measured,
            None,
            None,
            "GB/s",
            "info",
            "no link profile matches the run's transport: pass one to compare against its rate",
        )
    return _rate_pull(measured, link, kv_bytes, root)


def _rate_pull(measured: float, link: Link, kv_bytes: int | None, root: Path | str | None) -> SanityFinding:
    """A measured pull rate against the link's usual one: impossible, slow, fast or usual."""
    nominal = link.nominal_bytes_per_s / 1e9
    expected = nominal * link.efficiency
    ratio = measured / expected
    where = f"{measured:.2f} GB/s against {link.name}'s usual {expected:.2f} GB/s ({nominal:.1f} GB/s nominal)"
    rated = partial(SanityFinding, "pull_bandwidth", measured, expected, ratio, "GB/s")
    if measured > OVER_NOMINAL * nominal:
        return rated(
            "warning",
            f"{where}: faster than the link can carry, so the KV bytes per token ({kv_bytes}) overstate "
            "what moved: wrong KV dtype (an fp8 cache counted as bf16?), sliding-window layers that "
            "moved only their window, or a faster link than the profile (check --link)",
        )
    if ratio < LOW_PULL_RATIO:
        if kv_bytes is None:  # fit.pull_bandwidth_gbps averages over the whole pull, floor included: a lower bound
            return rated(
                "info",
                f"{where}, but this is bytes moved over the whole pull time (floor included), a lower "
                "bound; name the model so kvcal can read the rate from the pull slope",
            )
        return rated(
            "warning",
            f"{where}: {_slow_pull_cause(link, measured, root)}",
        )
    if ratio > 1 / LOW_PULL_RATIO:
        return rated(
            "info",
            f"{where}: faster than pulls usually run on this link; is the transport really {link.name}?",
        )
    return rated("ok", f"{where}: within the usual range")


def _slow_pull_cause(link: Link, measured_gb_s: float, root: Path | str | None) -> str:
    if link.transport == "rdma":
        profiles = profiles_or_none(root)
        links = profiles.links.values() if profiles else []
        tcp = [lk for lk in links if lk.transport == "tcp" and not lk.name.startswith("cpu-")]
        tcp_rate = max((lk.nominal_bytes_per_s * lk.efficiency / 1e9 for lk in tcp), default=0.0)
        if tcp_rate and measured_gb_s <= 1.5 * tcp_rate:
            return (
                "as slow as TCP: the transport likely fell back to TCP; check UCX_TLS includes rc/dc/ib, that the RDMA "
                "devices are visible in the pod (ibv_devinfo), and NIXL's backend choice in the engine log; if RDMA "
                "was in use, check NIC/GPU NUMA affinity and GPUDirect RDMA"
            )
        return (
            "well below RDMA's usual rate: check NIC/GPU NUMA affinity, GPUDirect RDMA, and whether the CPU tier "
            "stages every block (cpu_bytes_to_use too small?)"
        )
    if link.transport == "shm":
        return (
            "the CPU pull path is slower than usual: check UCX_TLS allows cma/shm, that each engine is bound to its "
            "own core (VLLM_CPU_OMP_THREADS_BIND), and that nothing else is using the cores"
        )
    if link.transport == "tcp":
        return "slower than TCP usually runs: check MTU, NIC offloads and whether the producer engine is busy"
    return "slower than this PCIe link usually runs: check pinned host memory and the slot's PCIe generation and width"


def _prefill_check(fit: FitResult, model: ModelProfile, hardware: Accelerator, devices: int) -> SanityFinding:
    n = float(max(fit.measured_range)) if fit.measured_range else 0.0
    t_ms = float(cost_curve.cost_ms(fit.recompute.coefficients, n)) if n > 0 else 0.0
    if t_ms <= 0:
        return SanityFinding(
            "prefill_flops",
            None,
            None,
            None,
            "TFLOP/s",
            "info",
            "the recompute fit gives no positive time at the longest prefix: cannot rate the prefill",
        )
    peak = hardware.peak_tflops(model.compute_dtype) * devices
    measured = prefill_flops(model, n) / (t_ms / 1e3) / 1e12
    expected = peak * hardware.default_mfu
    ratio, mfu = measured / expected, measured / peak
    rated = partial(SanityFinding, "prefill_flops", measured, expected, ratio, "TFLOP/s")
    where = (
        f"{measured:.3g} TFLOP/s at {int(n)} tokens, {mfu:.1%} of the {peak:.4g} TFLOP/s peak of "
        f"{devices} x {hardware.name} (usual {hardware.default_mfu:.0%})"
    )
    if mfu > 1:
        return rated(
            "warning",
            f"{where}: faster than the hardware can compute, so the recompute leg did not recompute "
            "the whole prefix (a prefix-cache hit? the control gate should catch it), the profile is "
            "larger than the model that ran, or more devices ran than assumed (--devices)",
        )
    if ratio < LOW_PREFILL_RATIO:
        sev: Severity = "info" if devices > 1 else "warning"
        note = "; multi-device prefill of one request often runs far below the one-device rate" if devices > 1 else ""
        return rated(
            sev,
            f"{where}: far below usual: {_slow_prefill_cause(hardware)}{note}",
        )
    if ratio > 1 / LOW_PREFILL_RATIO:
        return rated(
            "info",
            f"{where}: faster than usual; check --devices and whether the GEMMs ran in FP8",
        )
    return SanityFinding(
        "prefill_flops", measured, expected, ratio, "TFLOP/s", "ok", f"{where}: within the usual range"
    )


def _slow_prefill_cause(hardware: Accelerator) -> str:
    if hardware.device == "cpu":
        return (
            "check core binding: each engine on its own core (VLLM_CPU_OMP_THREADS_BIND=0 and =1); with a KV "
            "connector on 2 unbound cores vLLM takes an 8x slower path"
        )
    return (
        "check the device count (--devices), eager mode or missing CUDA graphs, power capping or a busy GPU, "
        "and for an FP8 model whether it ran in BF16"
    )
