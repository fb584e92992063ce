"""Turning a node (or a saved snapshot) into a snapshot with findings.

The CLI and the TUI both call these; neither talks to probes or rules any other way.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone

from gpudiag import __version__
from gpudiag.hostfs import HostFS
from gpudiag.kernels.readings import kernel_readings
from gpudiag.model import Finding, ProbeResult, Reading, Severity, Snapshot
from gpudiag.nvml import Nvml
from gpudiag.probe import Probe, ProbeContext, run_probes
from gpudiag.probes import topology
from gpudiag.ruleengine import (
    Profile,
    Rule,
    RuleError,
    detect_profile,
    evaluate,
    load_profiles,
)

EXIT_OK, EXIT_WARNING, EXIT_CRITICAL, EXIT_UNKNOWN = 0, 1, 2, 3


@dataclass
class LiveNode:
    """Everything needed to probe a node: where its files are, its NVML, which probes
    and rules to use, and the command line to record."""

    host: HostFS
    nvml: Nvml
    probes: Sequence[Probe]
    rules: Sequence[Rule]
    command_line: Sequence[str] = ()
    timeout_scale: float = 1.0
    profile_name: str | None = None
    cancel: threading.Event = field(default_factory=threading.Event)

    def snapshot(self, on_result: Callable[[ProbeResult], None] | None = None) -> Snapshot:
        """Run the probes, evaluate the rules, and return the snapshot."""
        self.cancel.clear()
        context = ProbeContext(host=self.host, nvml=self.nvml, cancel=self.cancel)
        results = probe_node(self.probes, context, on_result, self.timeout_scale)
        snapshot = Snapshot(
            host=_hostname(results),
            created=datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            gpudiag_version=__version__,
            command_line=tuple(self.command_line),
            probes=tuple(results),
        )
        return with_findings(snapshot, self.rules, self.profile_name)


def probe_node(
    probes: Sequence[Probe],
    context: ProbeContext,
    on_result: Callable[[ProbeResult], None] | None = None,
    timeout_scale: float = 1.0,
) -> list[ProbeResult]:
    """Run the probes, then derive what needs several probes' readings (the GPU-NIC
    topology), as one more result."""
    results = run_probes(probes, context, on_result, timeout_scale)
    by_key = {r.key: r for result in results for r in result.readings}
    derived = topology.derive(by_key)
    if derived.readings:
        results.append(derived)
        if on_result is not None:
            on_result(derived)
    return results


def _hostname(results: Sequence[ProbeResult]) -> str:
    for result in results:
        for reading in result.readings:
            if reading.key == "host.hostname" and reading.ok:
                return str(reading.value)
    return "unknown"


def judged_readings(
    snapshot: Snapshot, profile_name: str | None = None
) -> tuple[dict[str, Reading], Profile | None, list[str]]:
    """The readings the rules judge: the snapshot's, plus those derived from its kernel
    results; with the profile named (or the one its GPUs' device id selects) and the
    device ids seen."""
    readings: dict[str, Reading] = dict(snapshot.readings_by_key)
    profiles = load_profiles()
    profile, device_ids = detect_profile(readings, profiles)
    if profile_name is not None:
        if profile_name not in profiles:
            raise RuleError(
                f"--profile {profile_name}: no such profile (known: {', '.join(profiles)})"
            )
        profile = profiles[profile_name]
    peaks = profile.values if profile is not None else None
    readings.update((r.key, r) for r in kernel_readings(snapshot.kernels, readings, peaks))
    return readings, profile, device_ids


def with_findings(
    snapshot: Snapshot, rules: Sequence[Rule], profile_name: str | None = None
) -> Snapshot:
    """The snapshot with its findings (re)computed from its readings by `rules`, against
    the profile named, or else the one its GPUs' PCI device id selects."""
    readings, profile, device_ids = judged_readings(snapshot, profile_name)
    findings = evaluate(rules, readings, snapshot.probes, profile, device_ids)
    return replace(snapshot, findings=tuple(findings))


def exit_code(findings: Sequence[Finding]) -> int:
    """Monitoring convention: 2 critical, 1 warning, 3 unknown, 0 otherwise."""
    severities = {f.severity for f in findings}
    if Severity.CRITICAL in severities:
        return EXIT_CRITICAL
    if Severity.WARNING in severities:
        return EXIT_WARNING
    if Severity.UNKNOWN in severities:
        return EXIT_UNKNOWN
    return EXIT_OK


def severity_counts(findings: Sequence[Finding]) -> dict[Severity, int]:
    """How many findings of each severity, worst first."""
    return {s: sum(1 for f in findings if f.severity is s) for s in Severity}


def format_finding(finding: Finding) -> str:
    """One line: severity as text, rule id, subject and message."""
    severity = finding.severity.value.upper()
    return f"{severity:<8} {finding.rule_id:<8} {finding.subject}: {finding.message}"


def format_summary(snapshot: Snapshot) -> str:
    """A short report: host, probe outcomes, finding counts and the findings."""
    probes_ok = sum(1 for p in snapshot.probes if p.status.value == "ok")
    readings = len(snapshot.readings_by_key)
    counts = severity_counts(snapshot.findings)
    count_text = ", ".join(f"{n} {s.value}" for s, n in counts.items())
    kernels = f", {len(snapshot.kernels)} kernel results" if snapshot.kernels else ""
    lines = [
        f"{snapshot.host}: {len(snapshot.probes)} probes ({probes_ok} ok), "
        f"{readings} readings{kernels}; findings: {count_text}",
    ]
    for probe in snapshot.probes:
        if probe.status.value != "ok":
            lines.append(f"probe {probe.name}: {probe.status.value}: {probe.error}")
    lines.extend(format_finding(f) for f in snapshot.findings)
    return "\n".join(lines)
