"""`gpudiag goodput`'s report (goodput_report.build's dictionary) as text or markdown: the
tables, an ASCII chart (drawn here: no plotting library), and prose wrapped at a width
(the terminal's for the command, COLUMNS honoured; none for the fleet screen, which wraps
at its own). A table wider than the width wraps its first column."""

from __future__ import annotations

import math
import textwrap
from typing import Any

from gpudiag.termtext import wrap


def _f(value: Any, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _range(interval: list[Any] | None, digits: int = 3) -> str | None:
    """An interval as 'low-high'; None where there is none or it is a point (a given rate's:
    no '(1.803-1.803)')."""
    if interval is None or interval[0] == interval[1]:
        return None
    return f"{_f(interval[0], digits)}-{_f(interval[1], digits)}"


def chart(curve: list[dict[str, Any]], width: int = 52, height: int = 10) -> list[str]:
    """ETTR against the checkpoint interval (log scale), in characters."""
    points = [(p["interval_hours"], p["ettr"]) for p in curve if p["ettr"] is not None]
    if len(points) < 2:
        return []
    xs = [math.log(x) for x, _ in points]
    ys = [y for _, y in points]
    low, high = min(ys), max(ys)
    if high - low < 1e-9:
        high = low + 1e-3
    grid = [[" "] * width for _ in range(height)]
    for x, y in zip(xs, ys, strict=True):
        col = round((x - xs[0]) / (xs[-1] - xs[0]) * (width - 1))
        row = round((high - y) / (high - low) * (height - 1))
        grid[row][col] = "*"
    lines = []
    for i, cells in enumerate(grid):
        label = high - (high - low) * i / (height - 1)
        lines.append(f"{label:6.3f} |{''.join(cells)}".rstrip())
    lines.append(" " * 7 + "+" + "-" * width)
    left, right = f"{points[0][0] * 60:.1f} min", f"{points[-1][0] * 60:.1f} min"
    lines.append(" " * 8 + left + " " * max(1, width - len(left) - len(right)) + right)
    lines.append(" " * 8 + "checkpoint interval (log scale); ETTR, closed form")
    return lines


def render(report: dict[str, Any], markdown: bool = False, width: int | None = None) -> str:
    """The report as text, or markdown; prose and tables wrapped at `width` (None: not
    wrapped)."""
    head = "## " if markdown else ""
    lines: list[str] = []

    def say(text: str) -> None:
        lines.extend(wrap(text, width))

    def table(header: list[str], rows: list[list[str]]) -> None:
        lines.extend(_table(header, rows, markdown, width))

    fleet = report["fleet"]
    lines.append(f"{head}Failure rates")
    if fleet is not None:
        total = fleet["total"]
        say(
            f"{fleet['nodes']} nodes, {fleet['snapshots']} snapshots from {fleet['first']} to "
            f"{fleet['last']}: {total['count']} incidents in {total['node_days']:.1f} node-days "
            f"observed (gaps over {fleet['max_gap_days']:g} days left out: "
            f"{fleet['gaps_left_out']})"
        )
        lines.append("")
        joint = report["causes_intervals"]
        table(
            ["cause", "incidents", "per 1000 node-days", "joint 95% interval", "share"],
            [
                [c["cause"], str(c["count"]), f"{c['per_1000_node_days']:.2f}",
                 f"{c['interval'][0]:.2f}-{c['interval'][1]:.2f}", f"{c['share']:.0%}"]
                for c in report["causes"]
            ]
            + [["total", str(total["count"]), f"{total['per_1000_node_days']:.2f}",
                f"{total['interval'][0]:.2f}-{total['interval'][1]:.2f}", ""]],
        )  # fmt: skip
        lines.append("")
        say(
            f"the causes' intervals are simultaneous: all {len(report['causes'])} hold together "
            f"at {joint['joint_confidence']:.0%} ({joint['method']}, each at "
            f"{joint['each_confidence']:.0%}); the total's alone at {total['confidence']:.0%}"
        )
        lines.append("")
        if report["lemon_nodes"]:
            for lemon in report["lemon_nodes"]:
                say(
                    f"lemon node {lemon['node']}: {lemon['count']} incidents where the rest of the "
                    f"fleet's rate expects {lemon['expected']:.2f} (p = {lemon['p_adjusted']:.2g}, "
                    "corrected for the number of nodes)"
                )
        else:
            say("no lemon node (none improbable at p < 0.01 after correction)")
    else:
        say(f"given: {report['rate_per_1000_node_days']:g} failures per 1000 node-days")
    lines.append("")
    lines.append(f"{head}The job")
    _job(report, say)
    lines.append("")
    lines.append(f"{head}What if")
    simulated = report["simulated"] is not None
    # the 95% interval where a rate was measured; a given rate (--rate) has none
    ranged = any(_range(r["ettr_interval"]) is not None for r in report["what_if"])
    header = ["what", "per 1000\nnode-days", "MTTF h", "ETTR"]
    header += ["95%\ninterval"] * ranged + ["ETTR at\noptimum"]
    rows = [
        [r["what"], f"{r['rate_per_1000_node_days']:.2f}", _f(r["mttf_hours"], 2), _f(r["ettr"])]
        + [_range(r["ettr_interval"]) or "-"] * ranged
        + [_f(r["ettr_at_optimal"])] + ([_f(r["simulated"])] if simulated else [])
        for r in report["what_if"]
    ]  # fmt: skip
    table(header + (["simulated"] if simulated else []), rows)
    lines.append("")
    lines.append(f"{head}ETTR against the checkpoint interval")
    table(
        ["interval min", "ETTR (closed form)", "without first-order cut"],
        [
            [f"{p['interval_hours'] * 60:.1f}", _f(p["ettr"]), _f(p["renewal"])]
            for p in report["curve"]
        ],
    )
    drawn = chart(report["curve"])
    if drawn:
        lines.append("")
        lines += ["```", *drawn, "```"] if markdown else drawn
    if report["by_job_size"]:
        lines.append("")
        lines.append(f"{head}The model against jobs observed")
        table(
            ["GPUs", "observed MTTF h", "model MTTF h", "model interval", "model / observed"],
            [
                [str(r["gpus"]), f"{r['observed_mttf_hours']:g}", _f(r["model_mttf_hours"], 2),
                 _range(r["model_interval"], 2) or "-",
                 _f(r["model_over_observed"], 2)]
                for r in report["by_job_size"]
            ],
        )  # fmt: skip
    if report["notes"]:
        lines.append("")
        for note in report["notes"]:
            say(f"- {note}" if markdown else f"note: {note}")
    return "\n".join(lines) + "\n"


def _job(report: dict[str, Any], say: Any) -> None:
    """The job's part: MTTF, E[ETTR] and what it models, the intervals, the simulation."""
    nodes, per_node = report["nodes"], report["gpus_per_node"]
    size = f"{nodes} node{'s' if nodes != 1 else ''}"
    if report["gpus"] != nodes * per_node:  # a job takes whole nodes
        size += f" of {per_node} GPUs: a job takes whole nodes"
    mttf_range = _range(report["mttf_interval"])
    say(
        f"{report['gpus']} GPUs ({size}) at "
        f"{report['rate_per_1000_node_days']:.2f} per 1000 node-days: MTTF "
        f"{_f(report['mttf_hours'])} h" + (f" ({mttf_range})" if mttf_range else "")
    )
    chosen = report["checkpoint_interval_hours"]
    bound = report["ettr_spares_upper_bound"]
    ettr_range = _range(report["ettr_interval"])
    say(
        ("checkpoint continuously" if chosen == 0 else f"checkpoint every {chosen * 60:.1f} min")
        + f" (write {report['checkpoint_write_s']:g} s, restart "
        f"{report['restart_s'] / 60:g} min, detection {report['detect_s']:g} s): E[ETTR] "
        f"{_f(report['ettr'])}"
        + (f" ({ettr_range})" if ettr_range else "")
        + ", "
        + ("closed form, no spares" if bound is not None else "closed form")
    )
    if bound is not None:
        spares = report["what_if"][-1]["what"].split()[0]
        say(
            f"with {spares} hot spares that never run out (no restart): at most {_f(bound)}, "
            "closed form; "
            + (
                f"only the simulation models the {spares} spares and their repair (below)"
                if report["simulated"] is not None
                else f"only the simulation models the {spares} spares: --simulate RUNS"
            )
        )
    iv = report["intervals_hours"]
    say(
        "intervals: "
        + ", ".join(
            f"{name} {_f(None if iv[name] is None else iv[name] * 60, 1)} min" for name in iv
        )
        + f"; E[ETTR] at the optimum {_f(report['ettr_at_optimal'])}"
    )
    say(
        f"without the first-order cut (same assumptions): {_f(report['ettr_renewal'])}; "
        f"the closed form is off by {report['first_order_off_by']:+.3f}"
    )
    sim = report["simulated"]
    if sim is None:
        return
    lemons = sim["lemons"]
    clustered = (
        ""
        if lemons is None
        else f", lemon nodes {lemons['share']:.1%} of the fleet at {lemons['factor']:.1f}x "
        "the rest's rate, replaced when they fail"
    )
    spared = (
        f", {sim['spares']} hot spares back {sim['repair_hours']:g} h after a failure"
        if sim["spares"]
        else ""
    )
    say(
        f"simulated ({sim['runs']} runs of {sim['work_hours'] / 24:g} days' work, seed "
        f"{sim['seed']}{clustered}{spared}): {sim['mean_ettr']:.3f} "
        f"({sim['interval'][0]:.3f}-{sim['interval'][1]:.3f}); "
        + (
            f"the closed form is off by {sim['closed_form_off_by']:+.3f}"
            if sim["closed_form_off_by"] is not None
            else "the closed form has no spares to compare (its spares row never runs "
            "out of them: an upper bound)"
        )
    )


def _table(
    header: list[str], rows: list[list[str]], markdown: bool, width: int | None = None
) -> list[str]:
    """Columns two spaces apart; a header cell's lines (split at newlines) stack. Wider
    than `width`, the first column wraps (at least 8 characters). Markdown as it is."""
    if markdown:
        out = ["| " + " | ".join(h.replace("\n", " ") for h in header) + " |"]
        out.append("|" + "---|" * len(header))
        return out + ["| " + " | ".join(row) + " |" for row in rows]
    heads = [h.split("\n") for h in header]
    cells = [[[str(c)] for c in row] for row in rows]
    widths = [
        max(len(line) for cell in [heads[i], *(r[i] for r in cells)] for line in cell)
        for i in range(len(header))
    ]
    total = sum(widths) + 2 * (len(widths) - 1)
    if width is not None and total > width:
        widths[0] = max(8, widths[0] - (total - width))
        for row in cells:
            row[0] = textwrap.wrap(row[0][0], widths[0], break_on_hyphens=False) or [""]
    depth = max(len(h) for h in heads)
    stacked = [[""] * (depth - len(h)) + h for h in heads]  # header lines bottom-aligned
    out = []
    for row in [stacked, *cells]:
        for k in range(max(len(cell) for cell in row)):
            out.append(
                "  ".join(
                    (cell[k] if k < len(cell) else "").ljust(w)
                    for cell, w in zip(row, widths, strict=True)
                ).rstrip()
            )
    return out
