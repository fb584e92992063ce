"""The monitor's Prometheus metrics: conventional names and units (`_ratio` for fractions,
`_bytes_total` for counters, `_celsius`, `_watts`, `_hertz`), one label per dimension
(gpu, pipe, direction, reason, verdict, resource), no per-process label. A metric a GPU
did not measure in the last window is left out for that GPU, never written as 0."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from gpudiag.telemetry.verdicts import LIMITING_REASONS, VERDICTS

PIPE_METRICS = ("tensor", "tensor_hmma", "tensor_imma", "tensor_dmma", "fp64", "fp32", "fp16")
FRACTION_GAUGES = (
    ("gr_active", "gpudiag_gpu_graphics_active_ratio", "Share of the window any kernel ran"),
    ("sm_active", "gpudiag_gpu_sm_active_ratio", "Share of SMs busy over the window (GPM)"),
    ("sm_occupancy", "gpudiag_gpu_sm_occupancy_ratio", "Warps resident over the maximum (GPM)"),
    ("dram", "gpudiag_gpu_dram_bandwidth_ratio", "DRAM bandwidth over its theoretical peak"),
    ("mem_busy", "gpudiag_gpu_memory_busy_ratio", "Share of time DRAM was read or written"),
)


class MonitorCollector(Collector):
    """Yields the monitor's latest window as Prometheus metric families on each scrape."""

    def __init__(self, monitor: Any) -> None:
        self.monitor = monitor  # a gpudiag.telemetry.monitor.Monitor (which imports this)

    def collect(self) -> Iterator[Any]:
        latest = self.monitor.latest
        windows, verdicts = latest.windows, latest.verdicts
        gauges = {
            name: GaugeMetricFamily(metric, text, labels=["gpu"])
            for name, metric, text in FRACTION_GAUGES
        }
        pipes = GaugeMetricFamily(
            "gpudiag_gpu_pipe_active_ratio",
            "Share of the window a pipe was active",
            labels=["gpu", "pipe"],
        )
        clock = GaugeMetricFamily("gpudiag_gpu_sm_clock_hertz", "SM clock", labels=["gpu"])
        clock_max = GaugeMetricFamily(
            "gpudiag_gpu_sm_clock_max_hertz", "SM clock maximum", labels=["gpu"]
        )
        power = GaugeMetricFamily("gpudiag_gpu_power_watts", "Power draw", labels=["gpu"])
        limit = GaugeMetricFamily(
            "gpudiag_gpu_power_limit_watts", "Enforced power limit", labels=["gpu"]
        )
        temp = GaugeMetricFamily(
            "gpudiag_gpu_temperature_celsius", "GPU temperature", labels=["gpu"]
        )
        events = GaugeMetricFamily(
            "gpudiag_gpu_clock_event_active",
            "1 while a clock event reason holds the clocks down",
            labels=["gpu", "reason"],
        )
        lost = GaugeMetricFamily(
            "gpudiag_gpu_lost", "1 when the GPU did not answer this window", labels=["gpu"]
        )
        bound = GaugeMetricFamily(
            "gpudiag_gpu_bound_by",
            "1 for what bounds the GPU this window (one verdict per GPU)",
            labels=["gpu", "verdict", "detail"],
        )
        shares = GaugeMetricFamily(
            "gpudiag_gpu_bound_share_ratio",
            "A resource's measured share of the node's own ceiling",
            labels=["gpu", "resource"],
        )
        straggler = GaugeMetricFamily(
            "gpudiag_gpu_straggler", "1 when the GPU holds the others this window", labels=["gpu"]
        )
        held = {s.gpu for s in latest.stragglers}
        for window in windows:
            gpu = str(window.gpu)
            for name, _, _ in FRACTION_GAUGES:
                value = window.value(name)
                if value is not None:
                    gauges[name].add_metric([gpu], value)
            for pipe in PIPE_METRICS:
                value = window.value(pipe)
                if value is not None:
                    pipes.add_metric([gpu, pipe], value)
            for family, value, scale in (
                (clock, window.sm_clock_mhz, 1e6),
                (clock_max, window.max_sm_clock_mhz, 1e6),
                (power, window.power_w, 1.0),
                (limit, window.power_limit_w, 1.0),
                (temp, window.temperature_c, 1.0),
            ):
                if value is not None:
                    family.add_metric([gpu], value * scale)
            if window.event_mask is not None:
                for bit, reason in LIMITING_REASONS.items():
                    events.add_metric([gpu, reason], 1.0 if window.event_mask & bit else 0.0)
            lost.add_metric([gpu], 1.0 if window.lost else 0.0)
            straggler.add_metric([gpu], 1.0 if window.gpu in held else 0.0)
        for verdict in verdicts:
            gpu = str(verdict.gpu)
            for kind in VERDICTS:
                detail = (
                    verdict.detail
                    if kind == verdict.kind and kind in ("compute", "throttled")
                    else ""
                )
                bound.add_metric([gpu, kind, detail], 1.0 if kind == verdict.kind else 0.0)
            for resource, share in sorted(verdict.shares.items()):
                shares.add_metric([gpu, resource], share)
        totals = CounterMetricFamily(
            "gpudiag_gpu_interconnect_bytes",
            "Bytes moved over PCIe or NVLink since the monitor started (rate x window)",
            labels=["gpu", "link", "direction"],
        )
        for (gpu_index, link, direction), total in sorted(self.monitor.byte_totals.items()):
            totals.add_metric([str(gpu_index), link, direction], total)
        windows_total = CounterMetricFamily(
            "gpudiag_monitor_windows", "Sampling windows the monitor has taken"
        )
        windows_total.add_metric([], float(self.monitor.windows_taken))
        cpu = GaugeMetricFamily(
            "gpudiag_monitor_sample_cpu_seconds", "CPU time the last window's sampling took"
        )
        cpu.add_metric([], self.monitor.last_cpu_s)
        yield from gauges.values()
        yield from (pipes, clock, clock_max, power, limit, temp, events, lost, bound, shares)
        yield from (straggler, totals, windows_total, cpu)
