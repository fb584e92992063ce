"""The snapshot in Prometheus' text exposition format, for node_exporter's textfile
collector.

The Prometheus metric names and labels are an interface: the README lists them, the tests
check them, and a change to one is made only with a note in the README.

    gpudiag_info{host,version}                          1
    gpudiag_snapshot_timestamp_seconds                  when the snapshot was taken
    gpudiag_status                                      0 ok, 1 warning, 2 critical, 3 unknown
    gpudiag_recommended_action{action}                  1 for the strongest action, else 0
    gpudiag_findings{rule,subject,severity,action}      1 per applicable finding
    gpudiag_rules_not_applicable                        how many checks did not apply
    gpudiag_findings_by_severity{severity}              how many findings of each severity
    gpudiag_gpu_*{gpu,uuid}                             per-GPU gauges (GPU_GAUGES), and
    gpudiag_gpu_*_total{gpu,uuid}                       counters since boot or lifetime
    gpudiag_kernel_<quantity>{kernel,device,metric}     kernel medians in base units
                                                        (KERNEL_QUANTITIES), _cv_ratio, _ok

A finding for a check that does not apply to this node is not exported (one constant
series per check and node would carry nothing); gpudiag_rules_not_applicable counts them.
A reading the catalog declares a counter (catalog.Kind.COUNTER: ECC errors, PCIe
replays, remapped rows, retired pages) is a Prometheus counter named `..._total`, so that
rate() and increase() apply. A reading that could not be taken is left out, never
written as a zero.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gpudiag.inputs import printable
from gpudiag.model import Action, Finding, ReadingStatus, Snapshot
from gpudiag.output import applicable, is_not_applicable, strongest_action

if TYPE_CHECKING:
    from gpudiag.rulefile import Rule


@dataclass(frozen=True)
class Gauge:
    """One per-GPU gauge: the metric, the reading it comes from, its help, a scale to base
    units, and fixed labels that tell several readings of one metric apart."""

    name: str
    reading: str
    help: str
    scale: float = 1.0
    labels: tuple[tuple[str, str], ...] = ()


MIB = 2**20
GPU_GAUGES: tuple[Gauge, ...] = (
    Gauge("gpudiag_gpu_up", "health", "1 when the GPU answers NVML, 0 when it is lost"),
    Gauge("gpudiag_gpu_temperature_celsius", "temperature.gpu", "GPU temperature"),
    Gauge("gpudiag_gpu_power_draw_watts", "power.draw", "Power draw"),
    Gauge("gpudiag_gpu_power_limit_watts", "power.limit", "Power limit in force"),
    Gauge("gpudiag_gpu_power_default_limit_watts", "power.default_limit", "Default power limit"),
    Gauge("gpudiag_gpu_sm_clock_hertz", "clocks.sm", "Current SM clock", 1e6),
    Gauge("gpudiag_gpu_sm_clock_max_hertz", "clocks.max_sm", "Maximum SM clock", 1e6),
    Gauge("gpudiag_gpu_memory_clock_hertz", "clocks.mem", "Current memory clock", 1e6),
    Gauge("gpudiag_gpu_memory_total_bytes", "memory.total", "GPU memory", MIB),
    Gauge("gpudiag_gpu_memory_used_bytes", "memory.used", "GPU memory in use", MIB),
    Gauge("gpudiag_gpu_utilization_ratio", "utilization.gpu", "GPU utilisation (0-1)", 0.01),
    Gauge("gpudiag_gpu_persistence_mode", "persistence_mode", "1 when persistence mode is on"),
    Gauge("gpudiag_gpu_pcie_link_width", "pcie.link_width", "PCIe link width now (lanes)"),
    Gauge("gpudiag_gpu_pcie_link_width_max", "pcie.max_link_width", "Maximum PCIe link width"),
    Gauge("gpudiag_gpu_pcie_link_generation", "pcie.link_gen", "PCIe generation now"),
    Gauge("gpudiag_gpu_pcie_link_generation_max", "pcie.max_link_gen", "Maximum PCIe generation"),
    Gauge("gpudiag_gpu_pcie_replays", "pcie.replay_counter", "PCIe replay counter"),
    Gauge("gpudiag_gpu_nvlink_active", "nvlink.active", "Active NVLinks"),
    *(
        Gauge(
            "gpudiag_gpu_ecc_errors",
            f"ecc.{period}.{kind}",
            "ECC error counts (period: volatile since the driver loaded, aggregate lifetime)",
            labels=(("period", period), ("type", kind)),
        )
        for period in ("volatile", "aggregate")
        for kind in ("corrected", "uncorrected")
    ),
    *(
        Gauge(
            "gpudiag_gpu_remapped_rows",
            f"remapped_rows.{kind}",
            "Rows remapped for correctable and uncorrectable errors",
            labels=(("type", kind),),
        )
        for kind in ("correctable", "uncorrectable")
    ),
    Gauge("gpudiag_gpu_remapped_rows_pending", "remapped_rows.pending", "1 when a remap waits"),
    Gauge("gpudiag_gpu_remapped_rows_failure", "remapped_rows.failure", "1 when a remap failed"),
    *(
        Gauge(
            "gpudiag_gpu_retired_pages",
            f"retired_pages.{cause}",
            "Pages retired for single- and double-bit errors",
            labels=(("cause", cause),),
        )
        for cause in ("single_bit", "double_bit")
    ),
)


@dataclass(frozen=True)
class KernelQuantity:
    """A kernel result's unit as one metric in base units: its name, help and scale."""

    name: str
    help: str
    scale: float


_BANDWIDTH = "gpudiag_kernel_bandwidth_bytes_per_second"
_FLOPS = "gpudiag_kernel_flops"
_LATENCY = "gpudiag_kernel_latency_seconds"
_BANDWIDTH_HELP = "Median of the kernel's trials: bandwidth in bytes per second."
_FLOPS_HELP = "Median of the kernel's trials: floating-point operations per second."
_LATENCY_HELP = "Median of the kernel's trials: latency in seconds."
KERNEL_QUANTITIES: dict[str, KernelQuantity] = {
    "GB/s": KernelQuantity(_BANDWIDTH, _BANDWIDTH_HELP, 1e9),
    "TFLOP/s": KernelQuantity(_FLOPS, _FLOPS_HELP, 1e12),
    "GFLOP/s": KernelQuantity(_FLOPS, _FLOPS_HELP, 1e9),
    "s": KernelQuantity(_LATENCY, _LATENCY_HELP, 1.0),
    "ms": KernelQuantity(_LATENCY, _LATENCY_HELP, 1e-3),
    "us": KernelQuantity(_LATENCY, _LATENCY_HELP, 1e-6),
    "count": KernelQuantity(
        "gpudiag_kernel_events",
        "Median of the kernel's trials: events counted (mismatches, NaNs).",
        1.0,
    ),
}
"""The units kernels report (kernels/*.py) and the metric each is exported as; a result
in another unit keeps only its _ok and _cv_ratio series."""


def _label_value(value: str) -> str:
    """A label value in the exposition format: printable (no control character or
    terminal escape reaches a scrape or a terminal), backslash, quote and newline escaped."""
    value = printable(value)
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _labels(pairs: Iterable[tuple[str, str]]) -> str:
    text = ",".join(f'{k}="{_label_value(v)}"' for k, v in pairs)
    return "{" + text + "}" if text else ""


def _number(value: float) -> str:
    return repr(float(value)) if isinstance(value, float) else str(value)


class _Metrics:
    """Samples grouped by metric, each metric with one HELP and TYPE line."""

    def __init__(self) -> None:
        self.help: dict[str, str] = {}
        self.types: dict[str, str] = {}
        self.samples: dict[str, list[str]] = {}

    def add(
        self,
        name: str,
        help_text: str,
        value: float,
        labels: Iterable = (),
        kind: str = "gauge",
    ) -> None:
        self.help.setdefault(name, help_text)
        self.types.setdefault(name, kind)
        self.samples.setdefault(name, []).append(f"{name}{_labels(labels)} {_number(value)}")

    def text(self) -> str:
        lines = []
        for name, samples in self.samples.items():
            lines.append(f"# HELP {name} {self.help[name]}")
            lines.append(f"# TYPE {name} {self.types[name]}")
            lines.extend(samples)
        return "\n".join(lines) + "\n"


def _status_code(findings: Sequence[Finding]) -> int:
    from gpudiag.session import exit_code

    return exit_code(applicable(findings))


def prometheus(snapshot: Snapshot) -> str:
    """The snapshot in Prometheus' text exposition format (node_exporter textfile)."""
    from datetime import datetime

    from gpudiag import catalog, shipped
    from gpudiag.session import severity_counts

    m = _Metrics()
    m.add(
        "gpudiag_info",
        "The node and the gpudiag version that took the snapshot (always 1).",
        1,
        [("host", snapshot.host), ("version", snapshot.gpudiag_version)],
    )
    created = datetime.fromisoformat(snapshot.created.replace("Z", "+00:00"))
    m.add(
        "gpudiag_snapshot_timestamp_seconds",
        "When the snapshot was taken, in seconds since the Unix epoch.",
        created.timestamp(),
    )
    m.add(
        "gpudiag_status",
        "The node's verdict as a monitoring plugin's exit code: 0 OK, 1 WARNING, "
        "2 CRITICAL, 3 UNKNOWN.",
        _status_code(snapshot.findings),
    )
    strongest = strongest_action(snapshot.findings)
    for action in Action:
        m.add(
            "gpudiag_recommended_action",
            "1 for the strongest action the findings recommend, 0 for the others.",
            int(action is strongest),
            [("action", action.value)],
        )
    for severity, count in severity_counts(snapshot.findings).items():
        m.add(
            "gpudiag_findings_by_severity",
            "How many applicable findings of each severity.",
            count,
            [("severity", severity.value)],
        )
    not_applicable = 0
    for finding in snapshot.findings:
        if is_not_applicable(finding):
            not_applicable += 1
            continue
        m.add(
            "gpudiag_findings",
            "One sample (1) per applicable finding, by rule, subject, severity and action.",
            1,
            [
                ("rule", finding.rule_id),
                ("subject", finding.subject),
                ("severity", str(getattr(finding.severity, "value", finding.severity))),
                ("action", finding.action.value),
            ],
        )
    m.add(
        "gpudiag_rules_not_applicable",
        "How many checks did not apply to this node (not exported one by one).",
        not_applicable,
    )
    readings = snapshot.readings_by_key
    gpus = catalog.SubjectIndex.of(readings).by_scope["gpu"]
    for gauge in GPU_GAUGES:
        name, kind = gauge.name, "gauge"
        if shipped.is_counter(f"gpu.0.{gauge.reading}"):  # the catalog's declared kind
            name, kind = f"{gauge.name}_total", "counter"
        for (gpu,) in gpus:
            reading = readings.get(f"gpu.{gpu}.{gauge.reading}")
            uuid = readings.get(f"gpu.{gpu}.uuid")
            labels = [("gpu", gpu), ("uuid", str(uuid.value) if uuid and uuid.ok else "")]
            if gauge.reading == "health" and reading is not None:
                if reading.status is not ReadingStatus.NOT_REACHED:  # not known: left out
                    m.add(name, gauge.help, int(reading.ok), labels)
                continue
            if reading is None or not reading.ok or isinstance(reading.value, (list, str)):
                continue  # not read: left out, never a zero
            value = reading.value * gauge.scale if gauge.scale != 1.0 else reading.value
            m.add(
                name,
                gauge.help,
                int(value) if isinstance(value, bool) else value,
                [*labels, *gauge.labels],
                kind,
            )
    for k in snapshot.kernels:
        labels = [("kernel", k.kernel), ("device", k.device), ("metric", k.metric)]
        m.add(
            "gpudiag_kernel_ok",
            "1 when the kernel ran and verified its result, 0 when it failed or was skipped.",
            int(k.status.value == "ok"),
            labels,
        )
        if k.stats is not None and math.isfinite(k.stats.median):
            quantity = KERNEL_QUANTITIES.get(k.unit)
            if quantity is not None:
                m.add(quantity.name, quantity.help, k.stats.median * quantity.scale, labels)
            m.add(
                "gpudiag_kernel_cv_ratio",
                "Coefficient of variation of the kernel's trials.",
                k.stats.cv,
                labels,
            )
    return m.text()


def render(snapshot: Snapshot, fmt: str, rules: Sequence[Rule] = ()) -> str:
    """The registry's entry (gpudiag/output/__init__.py): `prometheus`."""
    return prometheus(snapshot)
