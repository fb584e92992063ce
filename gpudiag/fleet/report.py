"""The fleet report rendered: text for a terminal, markdown, and JSON for pipelines
(`gpudiag fleet --format`); the statistics are analysis.py's."""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Any

from gpudiag.fleet.analysis import FleetReport, Outlier, fold
from gpudiag.fleet.rack import rack_lines, racks_json

MAX_LISTED = 8
MIN_F1 = 0.5  # a cause shown must separate at least this well


def _number(value: float) -> str:
    return f"{value:.4g}"


def _odd_lines(report: FleetReport, markdown: bool) -> list[str]:
    """Outliers grouped by reading: the fleet's median and MAD, then the odd units."""
    lines = []
    by_reading: dict[tuple[str, str], list[Outlier]] = defaultdict(list)
    for o in report.outliers:
        by_reading[(o.model, o.reading)].append(o)
    bullet = "- " if markdown else "  "
    for (model, reading), odd in by_reading.items():
        first = odd[0]
        unit = f" {first.unit}" if first.unit else ""
        lines.append(
            f"{bullet}{reading} ({model}): median {_number(first.median)}{unit}, "
            f"MAD {_number(first.mad)}; {len(odd)} odd"
        )
        for o in odd[:MAX_LISTED]:
            where = f"{o.node} {o.device}".rstrip()
            z = "MAD 0" if math.isinf(o.z) else f"z {o.z:+.1f}"
            unit = f" {o.unit}" if o.unit else ""
            lines.append(
                f"{'  - ' if markdown else '      '}{where}: {_number(o.value)}{unit} "
                f"({o.off}, {z})"
            )
        if len(odd) > MAX_LISTED:
            rest = {o.node for o in odd[MAX_LISTED:]}
            lines.append(
                f"{'  - ' if markdown else '      '}and {len(odd) - MAX_LISTED} more on "
                f"{fold(rest)}"
            )
    return lines


def report_text(report: FleetReport, markdown: bool = False) -> str:
    """The report for a terminal, or as markdown."""
    h = (lambda t: f"\n## {t}\n") if markdown else (lambda t: f"\n{t}")
    bullet = "- " if markdown else "  "
    lines = [
        ("# gpudiag fleet\n\n" if markdown else "")
        + f"{report.nodes} node{'s' if report.nodes != 1 else ''}, {report.snapshots} "
        + f"snapshot{'s' if report.snapshots != 1 else ''}"
        + (f", {len(report.bad)} unreadable files (named on stderr)" if report.bad else "")
        + f"; outliers beyond robust z {report.threshold:g}"
    ]
    lines.append(h("Why slow"))
    if not report.slow:
        lines.append(f"{bullet}no kernel metric has slow outliers")
    for s in report.slow:
        nodes = fold({o.node for o in s.slow})
        lines.append(
            f"{bullet}{s.metric} ({s.model}): {len(s.slow)} of {s.comparable} slow on {nodes}; "
            f"fleet median {_number(s.median)} {s.unit}"
        )
        for o in s.slow[:MAX_LISTED]:
            lines.append(
                f"{'  - ' if markdown else '      '}{o.node} {o.device}: "
                f"{_number(o.value)} {o.unit} ({o.off})".replace(" :", ":")
            )
        causes = [c for c in s.causes if c.f1 >= MIN_F1]
        if not causes:
            lines.append(
                f"{'  - ' if markdown else '      '}no configuration reading known to move it "
                "separates them"
            )
        for c in causes[:3]:
            slow_values = ", ".join(f"{v} x{n}" for v, n in c.slow_values)
            other_values = ", ".join(f"{v} x{n}" for v, n in c.other_values[:3])
            lines.append(
                f"{'  - ' if markdown else '      because '}{c.reading} (F1 {c.f1:.2f}): "
                f"slow {slow_values}; others {other_values}"
            )
    lines.append(h("Configuration groups"))
    for i, g in enumerate(report.groups, 1):
        count = f"{len(g.nodes)} node{'s' if len(g.nodes) != 1 else ''}"
        lines.append(f"{bullet}group {i}: {g.folded} ({count}, {g.model})")
        if i == 1 and len(report.groups) > 1:
            lines.append(f"{'  - ' if markdown else '      '}the reference for the others")
        for key, ref, this in g.differences[:12]:
            lines.append(f"{'  - ' if markdown else '      '}{key}: {ref} -> {this}")
        if len(g.differences) > 12:
            lines.append(
                f"{'  - ' if markdown else '      '}and {len(g.differences) - 12} more differences"
            )
    lines.append(h("Outliers"))
    lines.extend(_odd_lines(report, markdown) or [f"{bullet}none"])
    lines.append(h("History"))
    if not report.regressions:
        lines.append(f"{bullet}no regression between runs of a node")
    for c in report.rising:
        lines.append(
            f"{bullet}{c.node} {c.reading}: rose {c.before:g} -> {c.after:g} "
            f"between {c.previous} and {c.seen}"
        )
    for r in report.regressions:
        lines.append(
            f"{bullet}{r.node} {r.device} {r.metric}: slower since {r.started} "
            f"(x{r.ratio:.3f}, 95% CI {r.ci_low:.3f}-{r.ci_high:.3f}, against {r.previous})"
        )
    lines.extend(rack_lines(report.racks, markdown))  # only where the fleet has NVLink domains
    lines.append(h("Findings"))
    if not report.findings:
        lines.append(f"{bullet}none")
    for f in report.findings:
        count = "all" if len(f.nodes) == report.nodes else f"{len(f.nodes)} of {report.nodes}"
        lines.append(
            f"{bullet}{f.severity.upper()} {f.rule_id}: {count} nodes: {fold(set(f.nodes))}"
        )
    return "\n".join(lines) + "\n"


def report_json(report: FleetReport) -> dict[str, Any]:
    """The report as plain data for pipelines."""

    def outlier(o: Outlier) -> dict[str, Any]:
        return {
            "reading": o.reading,
            "node": o.node,
            "device": o.device,
            "value": o.value,
            "unit": o.unit,
            "median": o.median,
            "mad": o.mad,
            "z": None if math.isinf(o.z) else o.z,
            "model": o.model,
        }

    racks = {"racks": racks_json(report.racks)} if report.racks else {}
    return {
        "nodes": report.nodes,
        "snapshots": report.snapshots,
        "bad_files": report.bad,
        "threshold": report.threshold,
        "odd": report.odd,
        "why_slow": [
            {
                "metric": s.metric,
                "model": s.model,
                "unit": s.unit,
                "median": s.median,
                "comparable": s.comparable,
                "slow": [outlier(o) for o in s.slow],
                "causes": [
                    {
                        "reading": c.reading,
                        "f1": c.f1,
                        "slow_values": dict(c.slow_values),
                        "other_values": dict(c.other_values),
                    }
                    for c in s.causes
                ],
            }
            for s in report.slow
        ],
        "groups": [
            {
                "nodes": g.folded,
                "count": len(g.nodes),
                "model": g.model,
                "differences": [
                    {"reading": k, "reference": a, "value": b} for k, a, b in g.differences
                ],
            }
            for g in report.groups
        ],
        "outliers": [outlier(o) for o in report.outliers],
        "regressions": [r.__dict__ for r in report.regressions],
        "rising_counters": [c.__dict__ for c in report.rising],
        "findings": [
            {
                "rule_id": f.rule_id,
                "severity": f.severity,
                "nodes": fold(set(f.nodes)),
                "count": len(f.nodes),
            }
            for f in report.findings
        ],
        **racks,
    }
