"""The fleet history's part of the report (changes.py's HistoryReport) as lines of text
or markdown and as JSON: report.py's History section, and the fleet screen's tab."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from gpudiag.fleet.changes import HistoryReport, compared_figure, metric_title
from gpudiag.fleet.table import fold

MAX_LINES = 40  # change points listed before "and N more"


def history_lines(history: HistoryReport | None, bullet: str) -> list[str]:
    """Roll-outs, the latest two runs against the fleet's drift, each node's change
    points, and --compare's verdicts, a line each."""
    if history is None:
        return []
    lines = []
    for r in history.roll_outs:
        lines.append(f"{bullet}roll-out: {r.line().replace(r.metric, metric_title(r.metric), 1)}")
    if history.runs is not None:
        for d in history.runs.drifts:
            lines.append(f"{bullet}drift: {d.line().replace(d.metric, metric_title(d.metric), 1)}")
        shifts = history.runs.shifts
        if shifts:
            lines.append(
                f"{bullet}beyond the drift by {history.runs.slower_pct:g}% or more "
                f"(false discovery rate 5% over {history.runs.tests} tests): "
                f"{fold(sorted({s.node for s in shifts}))}"
            )
        else:
            lines.append(
                f"{bullet}no node beyond the drift by {history.runs.slower_pct:g}% or more "
                f"({history.runs.tests} tests, false discovery rate 5%)"
            )
        for s in shifts[:MAX_LINES]:
            lines.append(f"{bullet}  {s.line().replace(s.metric, metric_title(s.metric), 1)}")
    for c in history.changes[:MAX_LINES]:
        lines.append(
            f"{bullet}change point: {c.line().replace(c.metric, metric_title(c.metric), 1)}"
        )
    if len(history.changes) > MAX_LINES:
        lines.append(f"{bullet}and {len(history.changes) - MAX_LINES} more change points")
    lines += [f"{bullet}factor: {f.line()}" for f in history.factors]
    lines += [f"{bullet}chart: {line}" for line in chart_lines(history)]
    if history.compare_what and not history.compare:  # asked, and nothing to compare
        lines.append(
            f"{bullet}compare {history.compare_what}: no kernel metric measured on these "
            "nodes (run the kernels: --export --kernels quick)"
        )
    for name, n_a, n_b, verdict in history.compare:
        side_b = history.compare_what.split(",")[-1]
        text = verdict.line(side_b, "nodes") if verdict else "fewer than two nodes a side"
        figure = compared_figure(history.compare_what.partition("=")[0], name)
        lines.append(
            f"{bullet}compare {history.compare_what} {metric_title(name)} "
            f"({n_a} vs {n_b} nodes; {figure}): {text}"
        )
    return lines


BARS = "▁▂▃▄▅▆▇█"


def sparkline(values: tuple[float, ...], marks: tuple[int, ...] = ()) -> str:
    """A text chart of a series, one bar a run from its lowest to its highest, with '|'
    before each run where a change starts."""
    low, high = min(values), max(values)
    span = high - low
    out = []
    for i, v in enumerate(values):
        if i in marks:
            out.append("|")
        level = 0 if span == 0 else round((v - low) / span * (len(BARS) - 1))
        out.append(BARS[level])
    return "".join(out)


def chart_lines(history: HistoryReport | None, bullet: str = "") -> list[str]:
    """Each chart as a line: metric, what is drawn, the bars, lowest and highest."""
    if history is None:
        return []
    return [
        f"{bullet}{metric_title(c.metric)} {c.label}: {sparkline(c.values, c.marks)} "
        f"({min(c.values):.4g}-{max(c.values):.4g})"
        for c in history.charts
    ]


def history_json(history: HistoryReport | None) -> dict[str, Any] | None:
    """The same as plain data."""
    if history is None:
        return None
    runs = history.runs
    return {
        "roll_outs": [dict(asdict(r), nodes=fold(list(r.nodes))) for r in history.roll_outs],
        "change_points": [asdict(c) for c in history.changes],
        "drift": [asdict(d) for d in runs.drifts] if runs else [],
        "beyond_drift": [asdict(s) for s in runs.shifts] if runs else [],
        "tests": runs.tests if runs else 0,
        "factors": [asdict(f) for f in history.factors],
        "charts": [
            {
                "metric": c.metric,
                "label": c.label,
                "values": list(c.values),
                "change_runs": [m + 1 for m in c.marks],
            }
            for c in history.charts
        ],
        "compare": [
            {
                "what": history.compare_what,
                "metric": name,
                "figure": compared_figure(history.compare_what.partition("=")[0], name),
                "nodes_a": n_a,
                "nodes_b": n_b,
                "verdict": v.kind if v else None,
                "line": v.line(history.compare_what.split(",")[-1], "nodes") if v else None,
                "pct": v.shift.pct if v else None,
                "low": v.shift.low if v else None,
                "high": v.shift.high if v else None,
            }
            for name, n_a, n_b, v in history.compare
        ],
    }
