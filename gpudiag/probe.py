"""Probes and the runner that runs them concurrently, each with a timeout.

A probe is a `Probe`: a name, a title, a cost, what it needs, a function from a
`ProbeContext` to readings, and the readings it declares (gpudiag/catalog.py). The registry of
shipped probes is `gpudiag.probes.REGISTRY`.

The runner starts each probe on its own daemon thread (threads cannot be killed, so a
probe that hangs is abandoned, reported as timed out, and cannot keep the process
alive). A probe that raises becomes an `error` result; the others finish regardless.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from enum import Enum

from gpudiag.catalog import Declared
from gpudiag.hostfs import HostFS
from gpudiag.model import ProbeResult, ProbeStatus, Reading
from gpudiag.nvml import Nvml, NvmlError


class Cost(str, Enum):
    """How much a probe disturbs the node."""

    INSTANT = "instant"
    LOADS_GPU = "loads-gpu"


class Need(str, Enum):
    """What a probe needs to be useful."""

    ROOT = "root"
    NVML = "nvml"


@dataclass
class ProbeContext:
    """What a probe may use: the host files, NVML, and a cancel flag to honour."""

    host: HostFS
    nvml: Nvml
    cancel: threading.Event = field(default_factory=threading.Event)


@dataclass(frozen=True)
class Probe:
    """A registered probe."""

    name: str
    title: str
    cost: Cost
    needs: frozenset[Need]
    collect: Callable[[ProbeContext], Iterable[Reading]]
    timeout_s: float = 10.0
    readings: tuple[Declared, ...] = ()  # what it makes, declared (gpudiag/catalog.py)


def _run_one(probe: Probe, context: ProbeContext) -> ProbeResult:
    started = time.monotonic()
    unmet = unmet_need(probe, context)  # on the probe's thread: nvmlInit may hang too
    if unmet:
        return _ended(probe, ProbeStatus.SKIPPED, unmet, time.monotonic() - started)
    try:
        readings = tuple(probe.collect(context))
        status, error = ProbeStatus.OK, ""
    except Exception as exc:  # a probe's failure is a result, never a crash
        readings = ()
        status, error = ProbeStatus.ERROR, f"{type(exc).__name__}: {exc}"
    return ProbeResult(
        name=probe.name,
        title=probe.title,
        status=status,
        duration_s=round(time.monotonic() - started, 6),
        readings=readings,
        error=error,
    )


def run_probes(
    probes: Sequence[Probe],
    context: ProbeContext,
    on_result: Callable[[ProbeResult], None] | None = None,
    timeout_scale: float = 1.0,
) -> list[ProbeResult]:
    """Run `probes` concurrently and return their results in the order given.

    Each probe gets `probe.timeout_s * timeout_scale` seconds. `on_result` is called
    (from this thread) as each result arrives. Setting `context.cancel` ends the wait:
    probes still running are reported as cancelled.
    """
    results: dict[str, ProbeResult] = {}
    done: queue.Queue[ProbeResult] = queue.Queue()
    deadlines: dict[str, float] = {}

    def record(result: ProbeResult) -> None:
        results[result.name] = result
        if on_result is not None:
            on_result(result)

    started: dict[str, float] = {}
    for probe in probes:
        if context.cancel.is_set():
            break
        started[probe.name] = time.monotonic()
        deadlines[probe.name] = started[probe.name] + probe.timeout_s * timeout_scale
        thread = threading.Thread(
            target=lambda p=probe: done.put(_run_one(p, context)),
            name=f"probe-{probe.name}",
            daemon=True,
        )
        thread.start()

    by_name = {p.name: p for p in probes}
    while any(name not in results for name in deadlines):
        pending = [name for name in deadlines if name not in results]
        now = time.monotonic()
        if context.cancel.is_set():
            for name in pending:
                record(
                    _ended(by_name[name], ProbeStatus.CANCELLED, "cancelled", now - started[name])
                )
            break
        for name in pending:
            if now >= deadlines[name]:
                limit = by_name[name].timeout_s * timeout_scale
                record(
                    _ended(
                        by_name[name],
                        ProbeStatus.TIMEOUT,
                        f"no answer within {limit:g} s",
                        now - started[name],
                    )
                )
        wait = min((deadlines[n] for n in pending if n not in results), default=now) - now
        try:
            result = done.get(timeout=min(max(wait, 0.0), 0.1))
        except queue.Empty:
            continue
        if result.name not in results:  # a late answer after a timeout is dropped
            record(result)

    for probe in probes:
        if probe.name not in results:
            record(_ended(probe, ProbeStatus.CANCELLED, "cancelled before it started", 0.0))
    return [results[p.name] for p in probes]


def unmet_need(probe: Probe, context: ProbeContext) -> str:
    """Why `probe` cannot run here, or '' when its needs are met."""
    if Need.ROOT in probe.needs and not context.host.is_root_user:
        return "needs root"
    if Need.NVML in probe.needs:
        try:
            context.nvml.ensure_init()
        except NvmlError as exc:
            return f"needs NVML: {exc.reason}"
    return ""


def _ended(probe: Probe, status: ProbeStatus, error: str, duration_s: float) -> ProbeResult:
    """The result of a probe that gave no answer."""
    return ProbeResult(
        name=probe.name,
        title=probe.title,
        status=status,
        duration_s=round(duration_s, 6),
        error=error,
    )
