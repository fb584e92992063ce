"""`gpudiag monitor`: the always-on sampler. Every interval (1 s by default) it takes one
window of every GPU (gpudiag/telemetry/sampler.py), judges what bounds each and which GPU
holds the others (verdicts.py), keeps the windows in a bounded ring, serves them to
Prometheus (exposition.py) and writes them atomically as a node_exporter textfile, and
prints an event line when a GPU's verdict changes, a clock event begins or ends, a GPU is
lost or returns, or a straggler appears.

It never stops on one GPU's error (the sampler catches each GPU's), survives a GPU lost
and returning (LOST in the windows it does not answer), and ends cleanly on SIGTERM or
SIGINT: the current window finishes, the HTTP server stops, NVML is shut down.
With a history folder, each hour's windows are appended to Parquet (history.py).

Never run on a GPU in this project: tested through the C NVML stand-in only.
"""

from __future__ import annotations

import json
import signal
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpudiag.nvml import Nvml
from gpudiag.telemetry.history import HourBuffer
from gpudiag.telemetry.sampler import Sampler, Window
from gpudiag.telemetry.verdicts import (
    Ceilings,
    Straggler,
    Verdict,
    classify,
    limiting_reasons,
    shipped_thresholds,
    stragglers,
)


@dataclass
class Latest:
    """The last window of every GPU, judged."""

    time: float = 0.0
    windows: list[Window] = field(default_factory=list)
    verdicts: list[Verdict] = field(default_factory=list)
    stragglers: list[Straggler] = field(default_factory=list)


class Monitor:
    """Samples, judges, keeps a ring, counts bytes and says what changed."""

    def __init__(
        self,
        nvml: Nvml,
        gpus: int,
        ceilings: Sequence[Ceilings],
        write: Callable[[str], None],
        ring: int = 3600,
        limits: Mapping[str, float] | None = None,
        mig_instances: dict[int, int] | None = None,
        fmt: str = "text",
        history: HourBuffer | None = None,
    ) -> None:
        self.sampler = Sampler(nvml, gpus, mig_instances)
        self.ceilings = list(ceilings)
        self.write = write
        self.fmt = fmt
        self.limits = dict(limits or shipped_thresholds())
        # the last `ring` windows: (time, each GPU's verdict word), bounded
        self.ring: deque[tuple[float, tuple[str, ...]]] = deque(maxlen=ring)
        self.latest = Latest()
        self.byte_totals: dict[tuple[int, str, str], float] = {}
        self.windows_taken = 0
        self._answered_at: dict[int, float] = {}  # each GPU's last window that answered
        self.history = history  # each hour's windows to Parquet (history.py)
        self.last_cpu_s = 0.0
        self._lock = threading.Lock()

    def step(self, now: float | None = None) -> Latest:
        """One window of every GPU: judged, kept, counted, and its changes said."""
        started = time.process_time()
        now = time.time() if now is None else now
        windows = self.sampler.sample(now)
        verdicts = [classify(w, self.ceilings[w.gpu], self.limits) for w in windows]
        late = stragglers(windows, verdicts, self.limits)
        previous = self.latest
        self._count_bytes(windows)
        latest = Latest(now, windows, verdicts, late)
        with self._lock:  # a scrape reads `latest` from the HTTP thread
            self.latest = latest
        self.ring.append((now, tuple(v.word for v in verdicts)))
        if self.history is not None:
            self.history.add(now, windows, verdicts)
        self.windows_taken += 1
        for line in self._changes(previous, latest):
            self.write(line)
        self.last_cpu_s = time.process_time() - started
        return latest

    def close(self) -> None:
        """Write the hour so far to the history (waiting for its writer)."""
        if self.history is not None:
            self.history.flush(wait=True)

    def _count_bytes(self, windows: list[Window]) -> None:
        """PCIe and NVLink bytes: each window's rate times its length (since the GPU's
        last window that answered: GPM's window after a lost sample spans both)."""
        for window in windows:
            if window.lost:
                continue
            start = self._answered_at.get(window.gpu)
            self._answered_at[window.gpu] = window.time
            if start is None or window.time <= start:
                continue
            for link in ("pcie", "nvlink"):
                for direction in ("tx", "rx"):
                    rate = window.value(f"{link}_{direction}")
                    if rate is not None:
                        key = (window.gpu, link, direction)
                        moved = rate * (window.time - start)
                        self.byte_totals[key] = self.byte_totals.get(key, 0.0) + moved

    def _event(self, when: float, gpu: int | None, kind: str, text: str) -> str:
        if self.fmt == "jsonl":
            record = {"time": round(when, 3), "gpu": gpu, "event": kind, "text": text}
            return json.dumps(record)
        stamp = time.strftime("%H:%M:%S", time.localtime(when))
        return f"{stamp}  {kind:<9} {text}"

    def _changes(self, old: Latest, new: Latest) -> list[str]:
        """The event lines between two windows."""
        lines = []
        verdicts = {v.gpu: v for v in old.verdicts}
        masks = {w.gpu: w.event_mask for w in old.windows}
        for window, verdict in zip(new.windows, new.verdicts, strict=True):
            was = verdicts.get(window.gpu)
            if was is None or (was.kind, was.detail) != (verdict.kind, verdict.detail):
                lines.append(self._event(new.time, window.gpu, "verdict", verdict.text))
            before = set(limiting_reasons(masks.get(window.gpu)))
            now = set(limiting_reasons(window.event_mask))
            for reason in sorted(now - before):
                lines.append(
                    self._event(new.time, window.gpu, "clock", f"GPU {window.gpu}: {reason} began")
                )
            if window.event_mask is not None:
                for reason in sorted(before - now):
                    text = f"GPU {window.gpu}: {reason} ended"
                    lines.append(self._event(new.time, window.gpu, "clock", text))
        late_before = {s.gpu for s in old.stragglers}
        for late in new.stragglers:
            if late.gpu not in late_before:
                lines.append(self._event(new.time, late.gpu, "straggler", late.text))
        return lines


class Stop:
    """Set by SIGTERM or SIGINT; the loop ends after the window in hand."""

    def __init__(self) -> None:
        self.event = threading.Event()

    def install(self) -> None:
        """Handle SIGTERM and SIGINT (the main thread only)."""
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: self.event.set())


def render_textfile(monitor: Monitor) -> str:
    """The node_exporter textfile: the same exposition as the endpoint."""
    from prometheus_client import CollectorRegistry, generate_latest

    from gpudiag.telemetry.exposition import MonitorCollector

    registry = CollectorRegistry(auto_describe=False)
    registry.register(MonitorCollector(monitor))
    return generate_latest(registry).decode("utf-8")


def serve(monitor: Monitor, host: str, port: int) -> Any:
    """Start the Prometheus endpoint in a thread; returns the server (shutdown() stops)."""
    from prometheus_client import CollectorRegistry, start_http_server

    from gpudiag.telemetry.exposition import MonitorCollector

    registry = CollectorRegistry(auto_describe=False)
    registry.register(MonitorCollector(monitor))
    server, _thread = start_http_server(port, addr=host, registry=registry)
    return server


def run(
    monitor: Monitor,
    interval: float,
    count: int | None,
    stop: Stop,
    textfile: Path | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> int:
    """Take windows every `interval` seconds until `count` or a stop; write the textfile
    after each. Returns the windows taken."""
    from gpudiag.atomic import write_atomic

    taken = 0
    next_at = clock()
    while not stop.event.is_set() and (count is None or taken < count):
        try:
            monitor.step()
        except Exception as exc:  # an always-on service says so and takes the next window
            monitor.write(f"gpudiag monitor: window failed: {type(exc).__name__}: {exc}")
        taken += 1
        if textfile is not None:
            text = render_textfile(monitor)
            try:
                write_atomic(textfile, lambda stream, text=text: stream.write(text))
            except OSError as exc:
                monitor.write(f"gpudiag monitor: cannot write {textfile}: {exc.strerror or exc}")
        if count is not None and taken >= count:
            break
        next_at = max(next_at + interval, clock())
        stop.event.wait(max(0.0, next_at - clock()))
    monitor.close()
    return taken
