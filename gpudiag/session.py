"""Turning a node (or a saved snapshot) into a snapshot with findings.

The CLI and the TUI both call these; neither talks to probes or rules any other way.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from gpudiag import __version__
from gpudiag.catalog import COUNTERS, kernel_identity
from gpudiag.derive import DERIVED, stored_profile, with_derived
from gpudiag.model import Finding, KernelResult, ProbeResult, Reading, Severity, Snapshot
from gpudiag.record import field, record, replace
from gpudiag.ruleengine import evaluate, rules_with_instances

TYPE_CHECKING = False  # typing's, without importing typing
if TYPE_CHECKING:  # what probing a live node needs is imported where it probes
    import threading
    from typing import Protocol

    from gpudiag.hostfs import HostFS
    from gpudiag.nvml import Nvml
    from gpudiag.probe import Probe, ProbeContext
    from gpudiag.profiles import Profile
    from gpudiag.rulefile import Rule

EXIT_OK, EXIT_WARNING, EXIT_CRITICAL, EXIT_UNKNOWN = 0, 1, 2, 3


def _event() -> threading.Event:
    """A new threading.Event (threading is imported by what probes, not by `check`)."""
    import threading

    return threading.Event()


@record(frozen=False)
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
    cancel: threading.Event = field(default_factory=_event)
    # results from outside the node's files and NVML (the GPUs Slurm configures for it),
    # judged with the probes' readings
    extra: Sequence[ProbeResult] = ()

    def snapshot(self, on_result: Callable[[ProbeResult], None] | None = None) -> Snapshot:
        """Run the probes, evaluate the rules, and return the snapshot."""
        from datetime import datetime, timezone

        from gpudiag.probe import ProbeContext

        self.cancel.clear()
        context = ProbeContext(host=self.host, nvml=self.nvml, cancel=self.cancel)
        results = probe_node(self.probes, context, on_result, self.timeout_scale)
        results = [*results, *self.extra]
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
    """Run the probes (what is derived from their readings is added when the snapshot is
    judged: `with_findings`)."""
    from gpudiag.probe import run_probes

    return run_probes(probes, context, on_result, timeout_scale)


def _hostname(results: Sequence[ProbeResult]) -> str:
    for result in results:
        for reading in result.readings:
            if reading.key == "host.hostname" and reading.ok:
                return str(reading.value)
    return "unknown"


def judged_readings(snapshot: Snapshot) -> tuple[dict[str, Reading], Profile | None, list[str]]:
    """A judged snapshot's readings (its derived ones included, as `with_findings` stored
    them), with the profile they name and the device ids seen: a plain read, nothing
    computed (the stored profile is the one the snapshot was judged with)."""
    readings = snapshot.readings_by_key
    profile, device_ids = stored_profile(readings)
    return readings, profile, device_ids


def with_findings(
    snapshot: Snapshot, rules: Sequence[Rule], profile_name: str | None = None
) -> Snapshot:
    """The snapshot with its derived readings (gpudiag/derive.py) and its findings
    computed again: the derived result replaces any stale one, against the profile named,
    or else the one its GPUs' PCI device id selects; then `rules` judge its readings.
    Raises RuleError for a profile name no profile has."""
    snapshot, derivation = with_derived(snapshot, profile_name)
    findings = evaluate(
        rules, snapshot.readings_by_key, snapshot.probes, derivation.profile, derivation.device_ids
    )
    return snapshot.with_findings(findings)


def with_kernel_results(
    snapshot: Snapshot,
    results: Sequence[KernelResult],
    rules: Sequence[Rule],
    profile_name: str | None = None,
) -> Snapshot:
    """The snapshot with kernel results put in and judged again: a result of the same
    kernel, device, metric and element type replaces the one held, the others are kept;
    derived readings and findings are computed again."""
    fresh = {kernel_identity(r) for r in results}
    kept = tuple(r for r in snapshot.kernels if kernel_identity(r) not in fresh)
    return with_findings(replace(snapshot, kernels=(*kept, *results)), rules, profile_name)


if TYPE_CHECKING:

    class KernelRun(Protocol):
        """A kernel plan ready to run (kernels/runner.PlanRun)."""

        def run(self) -> list[KernelResult]: ...


def run_kernels(
    snapshot: Snapshot, run: KernelRun, rules: Sequence[Rule], profile_name: str | None = None
) -> Snapshot:
    """Run a kernel plan into the snapshot and judge it again (`with_kernel_results`)."""
    return with_kernel_results(snapshot, run.run(), rules, profile_name)


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
    """How many findings of each severity that counts against a node, worst first; the
    not-applicable ones are never counted with them (each view counts them apart)."""
    return {
        s: sum(1 for f in findings if f.severity is s)
        for s in Severity
        if s is not Severity.NOT_APPLICABLE
    }


FINDING_INDENT = 18  # format_finding's severity and rule id columns: a wrapped line's indent


def format_finding(finding: Finding) -> str:
    """One line: severity as text, rule id, subject and message."""
    severity = finding.severity.value.upper()
    return f"{severity:<8} {finding.rule_id:<8} {finding.subject}: {finding.said()}"


@record
class RuleTally:
    """How many rules checked, did not apply, and could not check: the one set of counts
    (and words) that the export, `check`, `health`, `view`, the TUI and the JSON give.
    `unknown` and `info_unchecked` split the rules that could not check into those that
    count against the node (warning and critical rules: their findings are UNKNOWN) and
    the info ones (which stay INFO and never set the exit code)."""

    checked: int
    not_applicable: int
    unknown: int
    info_unchecked: int = 0

    @property
    def could_not_check(self) -> int:
        """The rules that could not check, of every severity."""
        return self.unknown + self.info_unchecked

    def text(self) -> str:
        """'rules: 57 checked, 58 did not apply, 3 could not check' (how many checked
        only where the rules are known)."""
        checked = f"{self.checked} checked, " if self.checked >= 0 else ""
        return (
            f"rules: {checked}{self.not_applicable} did not apply, "
            f"{self.could_not_check} could not check"
        )

    def as_dict(self) -> dict[str, int]:
        """The counts for JSON, under the same words."""
        counts = {"did_not_apply": self.not_applicable, "could_not_check": self.could_not_check}
        return ({"checked": self.checked} if self.checked >= 0 else {}) | counts


def info_unchecked(finding: Finding) -> bool:
    """An info rule's 'cannot check': it stays INFO and never counts against a node."""
    return finding.severity is Severity.INFO and finding.message.startswith("cannot check:")


def severity_words(findings: Sequence[Finding]) -> str:
    """'0 critical, 1 warning, 0 unknown, 4 info': the findings by severity (the rules
    that could not check are counted once, in `RuleTally`)."""
    return ", ".join(f"{n} {s.value}" for s, n in severity_counts(findings).items())


def rule_tally(
    findings: Sequence[Finding],
    rules: Sequence[Rule] | None = None,
    readings: dict[str, Reading] | None = None,
) -> RuleTally:
    """A rule could not be checked when any of its findings is unknown (counted as
    unknown) or, for an info rule, says 'cannot check' (counted apart); it did not apply
    when all of its findings are not-applicable, or
    when the `readings` hold nothing for it to check (no NVLink on a PCIe card); it
    checked otherwise (whether or not it fired). Without `rules` and `readings` the
    number that checked is not known (-1)."""
    by_rule: dict[str, list[Finding]] = {}
    for finding in findings:
        by_rule.setdefault(finding.rule_id, []).append(finding)
    unknown = {r for r, fs in by_rule.items() if any(f.severity is Severity.UNKNOWN for f in fs)}
    info = {r for r, fs in by_rule.items() if any(map(info_unchecked, fs))} - unknown
    unchecked = unknown | info
    not_applicable = {
        r
        for r, fs in by_rule.items()
        if r not in unchecked and all(f.severity is Severity.NOT_APPLICABLE for f in fs)
    }
    if rules is None or readings is None:
        return RuleTally(-1, len(not_applicable), len(unknown), len(info))
    active = {r.id for r in rules if r.status != "deprecated" and not r.disabled}
    not_applicable |= active - rules_with_instances(rules, readings) - unchecked
    ran = len(active - unchecked - not_applicable)
    return RuleTally(ran, len(not_applicable & active), len(unknown & active), len(info & active))


def format_summary(snapshot: Snapshot, rules: Sequence[Rule] | None = None) -> str:
    """A short report: host, probe outcomes, finding counts, how many rules checked, did
    not apply and could not check, the findings, and the rules that did not apply
    (apart, by id)."""
    return "\n".join(line for line, _ in summary_lines(snapshot, rules))


def summary_lines(snapshot: Snapshot, rules: Sequence[Rule] | None = None) -> list[tuple[str, int]]:
    """`format_summary`'s lines, each with the indent its continuation takes where a
    terminal's width wraps it (a finding's under its subject, FINDING_INDENT)."""
    probes = [p for p in snapshot.probes if p.name not in (DERIVED, COUNTERS)]  # not probes
    probes_ok = sum(1 for p in probes if p.status.value == "ok")
    readings = len(snapshot.readings_by_key)
    count_text = severity_words(snapshot.findings)
    kernels = f", {len(snapshot.kernels)} kernel results" if snapshot.kernels else ""
    tally = rule_tally(snapshot.findings, rules, snapshot.readings_by_key if rules else None)
    first = (
        f"{snapshot.host}: {len(probes)} probes ({probes_ok} ok), "
        f"{readings} readings{kernels}; findings: {count_text}; {tally.text()}"
    )
    lines = [(first, 2)]
    for probe in snapshot.probes:
        if probe.status.value != "ok":
            lines.append((f"probe {probe.name}: {probe.status.value}: {probe.error}", 2))
    applicable = [f for f in snapshot.findings if f.severity is not Severity.NOT_APPLICABLE]
    lines.extend((format_finding(f), FINDING_INDENT) for f in applicable)
    lines.extend((line, 2) for line in format_not_applicable(snapshot.findings))
    return lines


def format_not_applicable(findings: Sequence[Finding]) -> list[str]:
    """The rules that did not apply, apart from the findings, by why: a line of the ids
    whose readings the source does not hold, and one of those whose readings it says are
    unsupported or did not give (a -q file prints a slowdown threshold only relative to
    T.Limit); none where every rule applied."""
    absent: set[str] = set()
    other: set[str] = set()
    for f in findings:
        if f.severity is Severity.NOT_APPLICABLE:
            not_held = all(r.status.value == "missing" for r in f.evidence)  # or none
            (absent if not_held else other).add(f.rule_id)
    other -= absent  # a rule that found no evidence on one subject is said once
    lines = []
    if absent:
        lines.append(
            f"did not apply here (no such evidence in the source): {' '.join(sorted(absent))}"
        )
    if other:
        lines.append(
            "did not apply here (the source gives what they judge as unsupported or not"
            f" read; --format json says why): {' '.join(sorted(other))}"
        )
    return lines
