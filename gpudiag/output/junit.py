"""The snapshot as JUnit XML, for acceptance pipelines: one test case per rule and
subject (gpudiag/output/__init__.py's `render`)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING

from gpudiag.inputs import printable
from gpudiag.model import Finding, Severity, Snapshot
from gpudiag.output import applicable

# XML is imported where the document is written: the command line loads this package
if TYPE_CHECKING:
    import xml.etree.ElementTree as ET

    from gpudiag.rulefile import Rule


def _testcases(
    snapshot: Snapshot, rules: Sequence[Rule], readings: dict
) -> list[tuple[str, str, list[Finding], str]]:
    """(rule id, subject, findings, skip reason) for every check the rules made, then
    for findings no rule instance names (probe failures, no profile)."""
    from gpudiag import catalog
    from gpudiag.ruleengine import instances
    from gpudiag.rulefile import SCOPES

    index = catalog.SubjectIndex.of(readings)
    by_key: dict[tuple[str, str], list[Finding]] = {}
    for finding in snapshot.findings:
        by_key.setdefault((finding.rule_id, finding.subject), []).append(finding)
    cases = []
    seen = set()
    for rule in rules:
        if rule.disabled or rule.status == "deprecated":
            continue
        for placeholders, _ in instances(rule, readings, index):
            values = dict(zip(SCOPES[rule.applies_to], placeholders, strict=True))
            key = (rule.id, catalog.subject_title(rule.applies_to, values))
            if key in seen:
                continue
            seen.add(key)
            skip = ""
            lost = (
                "gpu" in values
                and catalog.is_lost(readings, values["gpu"])
                and not rule.reading.endswith(".health")
            )
            if lost and key not in by_key:
                skip = f"GPU {values['gpu']} is lost (GPU001): it answers nothing"
            # a GPU not reached: nothing of it was read, so its checks are not judged, not passed
            health = catalog.not_reached(readings, values["gpu"]) if "gpu" in values else None
            if health is not None and key not in by_key:
                skip = f"GPU {values['gpu']} was not read (GPU001): {health.reason}"
            cases.append((*key, by_key.get(key, []), skip))
    for key, findings in by_key.items():
        if key not in seen:
            cases.append((*key, findings, ""))
    return cases


# What XML 1.0 cannot hold even as a character reference, once `printable` has removed
# the controls and lone surrogates
_NOT_XML = re.compile("[\ufffe\uffff]")


def _xml_text(text: str) -> str:
    return _NOT_XML.sub("", printable(text))


def _xml_safe(root: ET.Element) -> None:
    """Every text and attribute of the tree made printable and valid in XML 1.0, in one
    place, whatever field a value came from: the document stays well-formed."""
    for element in root.iter():
        if element.text:
            element.text = _xml_text(element.text)
        for name, value in element.attrib.items():
            element.set(name, _xml_text(value))


def junit(snapshot: Snapshot, rules: Sequence[Rule]) -> str:
    """JUnit XML: one testcase per rule and subject; a failure for a warning or critical
    finding, an error for one that could not be checked (unknown), skipped for a check
    that does not apply; info findings pass with their message as output."""
    import xml.etree.ElementTree as ET

    from gpudiag.session import judged_readings

    readings, _, _ = judged_readings(snapshot)
    cases = _testcases(snapshot, rules, readings)
    suite = ET.Element("testsuite", name=f"gpudiag {snapshot.host}", hostname=snapshot.host)
    suite.set("timestamp", snapshot.created.replace("Z", ""))
    counts = {"failures": 0, "errors": 0, "skipped": 0}
    for rule_id, subject, findings, skip in cases:
        case = ET.SubElement(suite, "testcase", classname=f"gpudiag.{rule_id}", name=subject)
        case.set("time", "0")
        counted = applicable(findings)
        worst = max(counted, key=lambda f: f.severity.rank, default=None)
        if skip or (findings and not counted):
            reason = skip or "; ".join(f.message for f in findings) or "not applicable"
            ET.SubElement(case, "skipped", message=reason)
            counts["skipped"] += 1
        elif worst is not None and worst.severity in (Severity.CRITICAL, Severity.WARNING):
            failure = ET.SubElement(
                case, "failure", message=worst.message, type=worst.severity.value
            )
            failure.text = "\n".join(
                [f"{f.severity.value}: {f.message}" for f in counted]
                + [f"action: {worst.action.value}", f"why: {worst.why}", f"fix: {worst.fix}"]
            )
            counts["failures"] += 1
        elif worst is not None and worst.severity is Severity.UNKNOWN:
            ET.SubElement(case, "error", message=worst.message, type="unknown")
            counts["errors"] += 1
        elif worst is not None:
            ET.SubElement(case, "system-out").text = "\n".join(f.message for f in counted)
    suite.set("tests", str(len(cases)))
    for name, count in counts.items():
        suite.set(name, str(count))
    suite.set("time", "0")
    root = ET.Element("testsuites", name="gpudiag")
    root.append(suite)
    _xml_safe(root)
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, "unicode") + "\n"


def render(snapshot: Snapshot, fmt: str, rules: Sequence[Rule] = ()) -> str:
    """The registry's entry (gpudiag/output/__init__.py): `junit`."""
    return junit(snapshot, rules)
