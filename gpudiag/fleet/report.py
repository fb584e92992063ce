"""The fleet report rendered: text for a terminal, markdown, and JSON for pipelines
(`gpudiag fleet --format`); the statistics are analysis.py's."""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Any

from gpudiag.fleet.analysis import FleetReport, Outlier, fold
from gpudiag.fleet.changes_text import history_json, history_lines
from gpudiag.fleet.rack import rack_lines, racks_json
from gpudiag.fleet.whyslow import interval_coverage

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
        if len({(o.median, o.mad) for o in odd}) > 1:  # compared per position (NUMA node)
            stats = "compared per position"
        else:
            stats = f"median {_number(first.median)}{unit}, MAD {_number(first.mad)}"
        lines.append(f"{bullet}{reading} ({model}): {stats}; {len(odd)} odd")
        for o in odd[:MAX_LISTED]:
            where = f"{o.node} {o.device}".rstrip()
            z = "MAD 0" if math.isinf(o.z) else f"z {o.z:+.1f}"
            unit = f" {o.unit}" if o.unit else ""
            lines.append(
                f"{'  - ' if markdown else '      '}{where}: {_number(o.value)}{unit} "
                f"({o.off} of {_number(o.median)}, {z})"
            )
        if len(odd) > MAX_LISTED:
            rest = {o.node for o in odd[MAX_LISTED:]}
            lines.append(
                f"{'  - ' if markdown else '      '}and {len(odd) - MAX_LISTED} more on "
                f"{fold(rest)}"
            )
    return lines


def _slow_node_lines(report: FleetReport, markdown: bool) -> list[str]:
    """The slowest nodes, judged as nodes: each node's median of its GPUs against alike
    nodes', slowest first, with its shortfall and the interval from its GPUs."""
    bullet = "- " if markdown else "  "
    few = report.uncompared()
    not_judged = [f"{bullet}not judged: {report.uncompared_text()}"] if few else []
    if not report.slow_nodes and few and len(few) == len(set(report.node_models.values())):
        return [f"{bullet}slowest nodes: none judged: {report.uncompared_text()}"]
    if not report.slow_nodes:  # a node is its GPUs' median: single slow GPUs are below
        return [
            f"{bullet}slowest nodes: no node's median of its GPUs is more than "
            f"{report.slow_pct:g}% below alike nodes'"
            + ("; the devices below are judged one by one" if report.slow else ""),
            *not_judged,
        ]
    lines = [f"{bullet}slowest nodes (median of their GPUs, more than {report.slow_pct:g}% below):"]
    for n in report.slow_nodes[: MAX_LISTED * 2]:
        # the interval is of the node's median, from its GPUs (whyslow.median_interval),
        # not their range: said where printed, with its coverage
        if n.gpus > 1:
            spread = (
                f"median of {n.gpus} GPUs, its {interval_coverage(n.gpus):.0%} interval "
                f"{_number(n.low)}-{_number(n.high)}"
            )
            ends = f"{n.shortfall_low:.1%}-{n.shortfall_high:.1%} over that interval; "
        else:
            spread, ends = "1 GPU", ""
        lines.append(
            f"{'  - ' if markdown else '      '}{n.node} {n.metric}: {_number(n.value)} "
            f"{n.unit} ({spread}), {n.shortfall:.1%} short of {_number(n.reference)} "
            f"({ends}{n.comparable} {n.model} nodes)"
        )
    if len(report.slow_nodes) > MAX_LISTED * 2:
        rest = {n.node for n in report.slow_nodes[MAX_LISTED * 2 :]}
        lines.append(f"{'  - ' if markdown else '      '}and more on {fold(rest)}")
    return lines + not_judged


def _counter_lines(report: FleetReport, markdown: bool) -> list[str]:
    """Counters improbable against the fleet's rate (the ordinary few are not listed)."""
    if not report.counters:
        return []
    bullet = "- " if markdown else "  "
    lines = [f"{bullet}counters beyond the fleet's rate ({len(report.counters)}):"]
    for c in report.counters[: MAX_LISTED * 2]:
        lines.append(
            f"{'  - ' if markdown else '      '}{c.node} {c.device} {c.reading}: "
            f"{c.value:g} (fleet rate {c.rate:.3g} a unit, p {c.p:.2g})"
        )
    if len(report.counters) > MAX_LISTED * 2:
        rest = {c.node for c in report.counters[MAX_LISTED * 2 :]}
        lines.append(f"{'  - ' if markdown else '      '}and more on {fold(rest)}")
    return lines


def report_text(report: FleetReport, markdown: bool = False, width: int | None = None) -> str:
    """The report for a terminal, or as markdown. Text lines wider than `width` wrap
    (termtext.wrap: never a word cut), continued 2 columns in from their own indent;
    None (a pipe without $COLUMNS, the fleet screen) or markdown: lines whole."""
    h = (lambda t: f"\n## {t}\n") if markdown else (lambda t: f"\n{t}")
    bullet = "- " if markdown else "  "
    lines = [
        ("# gpudiag fleet\n\n" if markdown else "")
        + f"{report.nodes} node{'s' if report.nodes != 1 else ''}, {report.snapshots} "
        + f"snapshot{'s' if report.snapshots != 1 else ''}"
        + (f", {len(report.bad)} unreadable files (named on stderr)" if report.bad else "")
        + f"; outliers beyond robust z {report.threshold:g}; nodes slow beyond "
        + f"{report.slow_pct:g}% below alike nodes",
        report.verdict(),
    ]
    lines.append(h("Why slow"))
    few = report.uncompared()
    lines.extend(_slow_node_lines(report, markdown))
    if not report.slow:
        lines.append(
            f"{bullet}no kernel metric has slow outliers"
            + (" among GPUs (too few alike nodes to tell a slow node: above)" if few else "")
        )
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
    lines.extend(_counter_lines(report, markdown))
    lines.append(h("History"))
    changes = history_lines(report.history, bullet)
    if not report.regressions and not report.rising and not changes:
        lines.append(
            f"{bullet}no change between runs of a node"
            if report.snapshots > report.nodes
            else f"{bullet}no node has two runs: no history to compare"
        )
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
    lines.extend(changes)
    lines.extend(rack_lines(report.racks, markdown))  # only where the fleet has NVLink domains
    lines.append(h("Findings"))
    if not report.findings:
        lines.append(f"{bullet}none")
    for f in report.findings:
        count = "all" if len(f.nodes) == report.nodes else f"{len(f.nodes)} of {report.nodes}"
        lines.append(
            f"{bullet}{f.severity.upper()} {f.rule_id}: {count} nodes: {fold(set(f.nodes))}"
        )
    if width is not None and not markdown:
        from gpudiag.termtext import wrap

        lines = [
            part
            for text in "\n".join(lines).split("\n")  # the headings carry a newline
            for part in wrap(text, width, len(text) - len(text.lstrip(" ")) + 2)
        ]
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
        "slow_pct": report.slow_pct,
        "odd": report.odd,
        "exit_code": report.exit_code(),
        "verdict": report.verdict(),
        "odd_nodes": report.odd_nodes(),
        **({"uncompared": few} if (few := report.uncompared()) else {}),
        "slow_nodes": [n.__dict__ for n in report.slow_nodes],
        "counters": [c.__dict__ for c in report.counters],
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
        "history": history_json(report.history),
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
