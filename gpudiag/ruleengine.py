"""The rules engine: TOML rule files in, findings out.

Rules are data. Each `[[rule]]` table names one reading (a key, with `{gpu}` standing
for each GPU index when `applies_to = "gpu"`) and one expectation from a closed set of
operators; nothing in a rule file is ever evaluated as code.

    [[rule]]
    id = "NVML002"                # stable, never reused
    severity = "critical"         # critical | warning | info
    status = "stable"             # stable | preview | deprecated
    title = "NVML reports no GPUs"
    applies_to = "node"           # node | gpu
    reading = "nvml.gpu_count"
    expect = { min = 1 }          # present | equal | not_equal | in | not_in | min | max
    message = "NVML reports {value} GPUs"
    why = "..."
    fix = "..."
    references = ["https://..."]

A rule fires when the reading does not meet the expectation. A reading that is absent
or could not be taken gives an `unknown` finding that says which and why (an info rule's
stays info: it cannot hide a problem). The `present` operator fires with the rule's own
severity when the reading was attempted and failed; when no probe produced it at all
(an import of a partial file, say), that is unknown like any missing evidence. Messages may use
`{value}`, `{unit}`, `{reason}`, `{key}` and `{gpu}`, substituted as plain text.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from gpudiag import tomlcompat
from gpudiag.model import Finding, ProbeResult, ProbeStatus, Reading, ReadingStatus, Severity

OPERATORS = ("present", "equal", "not_equal", "in", "not_in", "min", "max")
RULE_KEYS = {
    "id",
    "severity",
    "status",
    "title",
    "applies_to",
    "reading",
    "expect",
    "message",
    "why",
    "fix",
    "references",
}
REQUIRED_KEYS = ("id", "severity", "title", "applies_to", "reading", "expect", "why", "fix")
_ID_PATTERN = re.compile(r"^[A-Z]{2,8}[0-9]{3}$")
_PLACEHOLDER = re.compile(r"\{(value|unit|reason|key|gpu)\}")
_GPU_KEY = re.compile(r"^gpu\.(\d+)\.")


class RuleError(Exception):
    """A rule file that cannot be used; str() is 'FILE:LINE: problem'."""


@dataclass(frozen=True)
class Rule:
    """One loaded rule."""

    id: str
    severity: Severity
    title: str
    applies_to: str
    reading: str
    operator: str
    operand: Any
    why: str
    fix: str
    message: str = ""
    status: str = "stable"
    references: tuple[str, ...] = ()
    origin: str = ""


def _rule_lines(text: str) -> list[int]:
    """1-based line numbers of each `[[rule]]` header, in order."""
    return [i + 1 for i, line in enumerate(text.splitlines()) if line.strip() == "[[rule]]"]


def _check_operand(operator: str, operand: Any, where: str) -> None:
    scalar = (bool, int, float, str)
    if operator == "present" and operand is not True:
        raise RuleError(f"{where}: 'present' takes true")
    if operator in ("equal", "not_equal") and not isinstance(operand, scalar):
        raise RuleError(f"{where}: '{operator}' takes a string, number or boolean")
    if operator in ("in", "not_in") and not (
        isinstance(operand, list) and operand and all(isinstance(v, scalar) for v in operand)
    ):
        raise RuleError(f"{where}: '{operator}' takes a non-empty list of values")
    if operator in ("min", "max") and (
        isinstance(operand, bool) or not isinstance(operand, (int, float))
    ):
        raise RuleError(f"{where}: '{operator}' takes a number")


def parse_rules(text: str, origin: str) -> list[Rule]:
    """Parse one rule file's text; raises RuleError naming the file and line."""
    try:
        data = tomlcompat.loads(text)
    except tomlcompat.TOMLDecodeError as exc:
        raise RuleError(f"{origin}: not valid TOML: {exc}") from None
    extra = set(data) - {"rule"}
    if extra:
        raise RuleError(f"{origin}: unknown top-level key(s) {', '.join(sorted(extra))}")
    tables = data.get("rule", [])
    if not isinstance(tables, list):
        raise RuleError(f"{origin}: 'rule' must be an array of tables ([[rule]])")
    lines = _rule_lines(text)
    rules = []
    for index, table in enumerate(tables):
        line = lines[index] if index < len(lines) else 0
        where = f"{origin}:{line}" if line else origin
        if not isinstance(table, dict):
            raise RuleError(f"{where}: a rule must be a table")
        if "id" in table:
            where += f": rule {table['id']}"
        unknown = set(table) - RULE_KEYS
        if unknown:
            raise RuleError(f"{where}: unknown key(s) {', '.join(sorted(unknown))}")
        for key in REQUIRED_KEYS:
            if key not in table:
                raise RuleError(f"{where}: missing key '{key}'")
        for key in (
            "id",
            "severity",
            "title",
            "applies_to",
            "reading",
            "why",
            "fix",
            "message",
            "status",
        ):
            if key in table and not isinstance(table[key], str):
                raise RuleError(f"{where}: '{key}' must be a string")
        if not _ID_PATTERN.match(table["id"]):
            raise RuleError(f"{where}: id must look like PCIE001 (letters, then 3 digits)")
        if table["severity"] not in ("critical", "warning", "info"):
            raise RuleError(f"{where}: severity must be critical, warning or info")
        if table.get("status", "stable") not in ("stable", "preview", "deprecated"):
            raise RuleError(f"{where}: status must be stable, preview or deprecated")
        if table["applies_to"] not in ("node", "gpu"):
            raise RuleError(f"{where}: applies_to must be node or gpu")
        if table["applies_to"] == "gpu" and not table["reading"].startswith("gpu.{gpu}."):
            raise RuleError(f"{where}: a gpu rule's reading starts with 'gpu.{{gpu}}.'")
        if table["applies_to"] == "node" and "{" in table["reading"]:
            raise RuleError(f"{where}: a node rule's reading has no placeholder")
        expect = table["expect"]
        if not isinstance(expect, dict) or len(expect) != 1:
            raise RuleError(f"{where}: expect must be a table with exactly one operator")
        ((operator, operand),) = expect.items()
        if operator not in OPERATORS:
            raise RuleError(
                f"{where}: unknown operator '{operator}' (known: {', '.join(OPERATORS)})"
            )
        _check_operand(operator, operand, where)
        references = table.get("references", [])
        if not isinstance(references, list) or not all(isinstance(r, str) for r in references):
            raise RuleError(f"{where}: references must be a list of strings")
        rules.append(
            Rule(
                id=table["id"],
                severity=Severity(table["severity"]),
                title=table["title"],
                applies_to=table["applies_to"],
                reading=table["reading"],
                operator=operator,
                operand=operand,
                why=table["why"],
                fix=table["fix"],
                message=table.get("message", ""),
                status=table.get("status", "stable"),
                references=tuple(references),
                origin=where,
            )
        )
    return rules


def load_rules(directories: Sequence[Path] = ()) -> list[Rule]:
    """The shipped rules, then every `*.toml` in `directories`, by file name.

    Rule ids must be unique across all files.
    """
    sources: list[tuple[str, str]] = []
    shipped = resources.files("gpudiag.rules")
    for entry in sorted(shipped.iterdir(), key=lambda e: e.name):
        if entry.name.endswith(".toml"):
            sources.append((f"rules/{entry.name}", entry.read_text(encoding="utf-8")))
    for directory in directories:
        if not directory.is_dir():
            raise RuleError(f"{directory}: not a directory of rule files")
        for path in sorted(directory.glob("*.toml")):
            try:
                sources.append((str(path), path.read_text(encoding="utf-8")))
            except (OSError, UnicodeDecodeError) as exc:
                raise RuleError(f"{path}: cannot read: {exc}") from None
    rules: list[Rule] = []
    seen: dict[str, str] = {}
    for origin, text in sources:
        for rule in parse_rules(text, origin):
            if rule.id in seen:
                raise RuleError(f"{rule.origin}: duplicate id, first defined at {seen[rule.id]}")
            seen[rule.id] = rule.origin
            rules.append(rule)
    return rules


def meets(reading: Reading, operator: str, operand: Any) -> bool:
    """Whether an ok reading meets an expectation."""
    value = reading.value
    if operator == "present":
        return True
    if operator == "equal":
        return value == operand
    if operator == "not_equal":
        return value != operand
    if operator == "in":
        return value in operand
    if operator == "not_in":
        return value not in operand
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{reading.key} is {value!r}, not a number")
    return value >= operand if operator == "min" else value <= operand


def _expectation_text(rule: Rule) -> str:
    return {
        "present": "a reading",
        "equal": f"{rule.operand!r}",
        "not_equal": f"anything but {rule.operand!r}",
        "in": f"one of {rule.operand!r}",
        "not_in": f"none of {rule.operand!r}",
        "min": f"at least {rule.operand}",
        "max": f"at most {rule.operand}",
    }[rule.operator]


def _render(template: str, fields: dict[str, str]) -> str:
    return _PLACEHOLDER.sub(lambda m: fields.get(m.group(1), m.group(0)), template)


def gpu_indices(readings: dict[str, Reading]) -> list[int]:
    """Every GPU index that some reading (`gpu.N. ...`) mentions, in order."""
    found = {int(m.group(1)) for key in readings if (m := _GPU_KEY.match(key))}
    return sorted(found)


def _evaluate_one(
    rule: Rule, key: str, subject: str, gpu: str, readings: dict[str, Reading]
) -> Finding | None:
    reading = readings.get(key) or Reading.failed(
        key, ReadingStatus.MISSING, "no probe produced it"
    )
    fields = {
        "key": key,
        "gpu": gpu,
        "unit": reading.unit,
        "reason": reading.reason,
        "value": reading.display() if reading.ok else reading.status.value,
    }
    if not reading.ok:
        if rule.operator == "present" and key in readings:  # read, and the read failed
            severity = rule.severity
            message = _render(rule.message, fields) if rule.message else reading.reason
        else:
            # an info rule cannot hide a problem, so its missing evidence stays info
            severity = Severity.INFO if rule.severity is Severity.INFO else Severity.UNKNOWN
            message = f"cannot check: {key} is {reading.status.value} ({reading.reason})"
    else:
        try:
            if meets(reading, rule.operator, rule.operand):
                return None
        except TypeError as exc:
            return Finding(
                rule.id,
                Severity.UNKNOWN,
                subject,
                rule.title,
                f"cannot check: {exc}",
                (reading,),
                rule.why,
                rule.fix,
            )
        severity = rule.severity
        message = (
            _render(rule.message, fields)
            if rule.message
            else f"{key} is {reading.display()}, expected {_expectation_text(rule)}"
        )
    return Finding(rule.id, severity, subject, rule.title, message, (reading,), rule.why, rule.fix)


def probe_findings(probes: Iterable[ProbeResult]) -> list[Finding]:
    """PROBE001: a probe that failed or timed out leaves its readings unknown."""
    findings = []
    for probe in probes:
        if probe.status in (ProbeStatus.ERROR, ProbeStatus.TIMEOUT):
            findings.append(
                Finding(
                    rule_id="PROBE001",
                    severity=Severity.UNKNOWN,
                    subject=f"probe {probe.name}",
                    title="A probe did not finish",
                    message=f"probe {probe.name} {probe.status.value}: {probe.error}",
                    why="Its readings are missing, so the rules that need them cannot decide.",
                    fix="Run `gpudiag --export -` again; if it persists, report the error.",
                )
            )
    return findings


def evaluate(
    rules: Sequence[Rule], readings: dict[str, Reading], probes: Sequence[ProbeResult] = ()
) -> list[Finding]:
    """All findings, worst first (then by rule id and subject)."""
    findings = probe_findings(probes)
    gpus = gpu_indices(readings)
    for rule in rules:
        if rule.status == "deprecated":
            continue
        if rule.applies_to == "node":
            targets = [(rule.reading, "node", "")]
        else:
            targets = [(rule.reading.replace("{gpu}", str(i)), f"GPU {i}", str(i)) for i in gpus]
        for key, subject, gpu in targets:
            finding = _evaluate_one(rule, key, subject, gpu, readings)
            if finding is not None:
                findings.append(finding)
    findings.sort(key=lambda f: (-f.severity.rank, f.rule_id, f.subject))
    return findings
