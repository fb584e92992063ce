"""The GPUs' performance counters in a snapshot: one window per GPU as readings
(`gpu.N.telemetry.*`, the `telemetry` result), so that a ticket (`gpudiag --export`)
carries them, and the TUI's watch screen of a saved snapshot judges them again with the
same verdict code (`windows_from`; gpudiag/telemetry/explain.py's `recorded`). The
window spans the probing: its first GPM sample is taken before the probes run, its second
after (`ExportWindow`).

A metric the GPU lacks is a failed reading (unsupported, with the reason), never 0; a
window whose counters another profiler held fails with that reason; a GPU lost in the
window has none (as the probes record a lost GPU: its health reading says so).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence

from gpudiag import catalog
from gpudiag.model import ProbeResult, ProbeStatus, Reading, ReadingStatus, Snapshot
from gpudiag.nvml import Nvml, NvmlError
from gpudiag.telemetry.sampler import FRACTIONS, HELD_REASON, METRICS, Sampler, Window

PRODUCER = catalog.COUNTERS
TITLE = "GPU performance counters (one window, over the probing)"
# the window's other readings: (reading name, Window attribute, unit, help)
WINDOW_FIELDS = (
    ("sm_clock", "sm_clock_mhz", "MHz", "the SM clock at the window's end"),
    ("max_sm_clock", "max_sm_clock_mhz", "MHz", "the SM clock's maximum"),
    ("power", "power_w", "W", "power draw at the window's end"),
    ("power_limit", "power_limit_w", "W", "the enforced power limit"),
    ("temperature", "temperature_c", "C", "GPU temperature at the window's end"),
    ("event_reasons", "event_mask", "", "the clock event reasons' bits (nvml.h)"),
)
READINGS = catalog.declare(
    "GPU",
    catalog.volatile("gpu.{gpu}.telemetry.source", "", "gpm, or older (no GPM on this GPU)"),
    *(
        catalog.volatile(
            f"gpu.{{gpu}}.telemetry.{name}",
            "" if name in FRACTIONS else "B/s",
            "a counter's share of the window" if name in FRACTIONS else "bytes/s over the window",
        )
        for name in METRICS
    ),
    *(catalog.volatile(f"gpu.{{gpu}}.telemetry.{n}", u, h) for n, _, u, h in WINDOW_FIELDS),
)
_DECLARED = {d.template.rsplit(".", 1)[1]: d for d in READINGS}


def window_readings(windows: Sequence[Window]) -> list[Reading]:
    """Each window as readings: its counters, their source and the window's clocks (its
    length is the result's duration)."""
    out = []
    for window in windows:
        gpu = window.gpu

        def failed(name: str, reason: str, gpu: int = gpu) -> Reading:
            status = ReadingStatus.UNSUPPORTED
            if not reason.startswith("unsupported"):
                status = ReadingStatus.ERROR
            return _DECLARED[name].failed(status, reason, "nvml", gpu=gpu)

        if window.lost:  # as the probes record a lost GPU: its health reading says so
            continue
        out.append(_DECLARED["source"].reading(window.source, "nvml", gpu=gpu))
        for name in METRICS:
            value = window.value(name)
            if value is None:
                out.append(failed(name, window.why.get(name, "not measured")))
            else:
                out.append(_DECLARED[name].reading(value, "nvml", gpu=gpu))
        for name, attribute, _, _ in WINDOW_FIELDS:
            value = getattr(window, attribute)
            if value is None:
                out.append(failed(name, "not read in this window"))
            else:
                out.append(_DECLARED[name].reading(value, "nvml", gpu=gpu))
    return out


def windows_from(readings: Mapping[str, Reading]) -> list[Window]:
    """The windows a snapshot recorded (`window_readings` read back), by GPU."""
    out: list[Window] = []
    if not any(".telemetry." in key for key in readings):
        return out
    for gpu in catalog.gpu_indices(readings):
        source = readings.get(f"gpu.{gpu}.telemetry.source")
        if source is None:
            if catalog.is_lost(readings, gpu):  # a lost GPU has no window, only its health
                out.append(Window(gpu, 0.0, "none", lost=True))
            continue
        window = Window(gpu, 0.0, str(source.value or "none"))
        for name in METRICS:
            reading = readings.get(f"gpu.{gpu}.telemetry.{name}")
            if reading is not None and reading.ok and isinstance(reading.value, int | float):
                window.values[name] = float(reading.value)
            else:
                window.values[name] = None
                window.why[name] = reading.reason if reading is not None else "not recorded"
        window.held = bool(window.why) and set(window.why.values()) == {HELD_REASON}
        for name, attribute, _, _ in WINDOW_FIELDS:
            reading = readings.get(f"gpu.{gpu}.telemetry.{name}")
            if reading is not None and reading.ok and isinstance(reading.value, int | float):
                value = reading.value
                setattr(window, attribute, int(value) if name == "event_reasons" else value)
        out.append(window)
    return out


class ExportWindow:
    """`gpudiag --export`'s counter window: its first sample before the probes, its
    second after, added to the snapshot as the `telemetry` result (`add_to`)."""

    def __init__(self, nvml: Nvml) -> None:
        self.sampler: Sampler | None = None
        self.started = time.monotonic()
        try:
            gpus = int(nvml.call("nvmlDeviceGetCount"))
        except (NvmlError, TypeError, ValueError):
            return  # no NVML: no window (the GPU probe says why)
        self.sampler = Sampler(nvml, gpus)
        self.sampler.prime()

    def add_to(self, snapshot: Snapshot) -> Snapshot:
        """The snapshot with the window's readings as the `telemetry` result (not judged
        again: no rule reads them)."""
        from dataclasses import replace

        if self.sampler is None or not self.sampler.gpus:
            return snapshot
        seconds = time.monotonic() - self.started
        readings = window_readings(self.sampler.sample())
        result = ProbeResult(
            PRODUCER, ProbeStatus.OK, round(seconds, 3), tuple(readings), title=TITLE
        )
        return replace(snapshot, probes=(*snapshot.probes, result))
