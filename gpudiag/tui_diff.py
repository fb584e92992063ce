"""The side-by-side diff screen: two columns (A and B) of every reading that differs,
performance metrics first with the configuration differences that explain them, then
the findings one side has. Keys: c changed only / everything, n next difference, q quit.
The columns share the terminal's width (long values are cut there); the highlighted row
is shown in full below the table, so 80 columns are enough.
"""

from __future__ import annotations

from typing import ClassVar

from rich.text import Text
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.widgets import DataTable, Footer, Header, Static

from gpudiag.diff import Diff, ReadingChange, _value
from gpudiag.model import Snapshot

KIND_STYLE = {
    "changed": "yellow",
    "only_a": "red",
    "only_b": "green",
    "equal": "",
    "inconclusive": "italic",
}


class DiffApp(App[int]):
    """Two snapshots side by side."""

    TITLE = "gpudiag diff"
    CSS = """
    #summary { height: auto; padding: 0 1; }
    #diff { height: 1fr; }
    #row-detail { height: 4; padding: 0 1; border-top: solid $accent; }
    """
    BINDINGS: ClassVar[list[Binding]] = [
        Binding("q", "quit", "Quit"),
        Binding("c", "toggle_changed", "Changed only/all"),
        Binding("n", "next_difference", "Next difference"),
    ]

    def __init__(self, diff: Diff, a: Snapshot, b: Snapshot, include_noisy: bool = False) -> None:
        super().__init__()
        self.diff, self.a, self.b = diff, a, b
        self.include_noisy = include_noisy
        self.changed_only = True
        self.row_kinds: list[str] = []
        self.row_texts: list[tuple[str, str, str, str]] = []

    def compose(self) -> ComposeResult:
        yield Header()
        yield Static("", id="summary")
        yield DataTable(id="diff", cursor_type="row", zebra_stripes=True)
        yield Static("", id="row-detail")
        yield Footer()

    def on_mount(self) -> None:
        self.sub_title = f"A: {self.a.host}  B: {self.b.host}"
        table = self.query_one("#diff", DataTable)
        room = max(60, self.size.width - 10)  # less the cell padding and the scrollbar
        side = max(10, room * 17 // 100)
        what = max(20, room * 40 // 100)
        table.add_column("what", width=what)
        table.add_column("A", width=side)
        table.add_column("B", width=side)
        table.add_column("change", width=room - what - 2 * side)
        self.render_rows()
        self.query_one("#diff", DataTable).focus()

    def _summary(self) -> Text:
        code = self.diff.exit_code()
        verdict = {0: "equivalent", 1: "configuration differs", 2: "performance or health differs"}[
            code
        ]
        return Text(
            f"{verdict}: {len(self.diff.differences(self.include_noisy))} readings differ, "
            f"{len(self.diff.findings_only_a)} findings only in A, "
            f"{len(self.diff.findings_only_b)} only in B, "
            f"{len(self.diff.metrics)} metrics compared "
            f"({'changed only' if self.changed_only else 'all readings'})"
        )

    def render_rows(self) -> None:
        """Fill the table: metrics, findings on one side, then readings."""
        table = self.query_one("#diff", DataTable)
        table.clear()
        self.row_kinds = []
        self.row_texts = []
        self.query_one("#summary", Static).update(self._summary())
        for m in self.diff.metrics:
            kind = {"faster": "changed", "slower": "changed", "inconclusive": "inconclusive"}.get(
                m.verdict, "equal"
            )
            said = f"{m.verdict} ({m.reason})" if m.reason else m.verdict
            self._add(
                table,
                f"{m.kernel}.{m.metric} {m.device}",
                f"{m.median_a:g} {m.unit}",
                f"{m.median_b:g} {m.unit}",
                f"{m.ratio:.3f} [{m.ci_low:.3f}-{m.ci_high:.3f}] {said}",
                kind,
            )
            for change in m.explanations:
                self._add(
                    table,
                    f"  because {change.key}",
                    _value(change.a),
                    _value(change.b),
                    "explains",
                    "changed",
                )
        for finding in self.diff.findings_only_a:
            self._add(
                table,
                f"{finding.rule_id} {finding.subject}",
                finding.severity.value.upper(),
                "-",
                "finding only in A",
                "only_a",
            )
        for finding in self.diff.findings_only_b:
            self._add(
                table,
                f"{finding.rule_id} {finding.subject}",
                "-",
                finding.severity.value.upper(),
                "finding only in B",
                "only_b",
            )
        changes: list[ReadingChange] = [
            c
            for c in self.diff.readings
            if (self.include_noisy or not c.noisy) and (c.kind != "equal" or not self.changed_only)
        ]
        for c in changes:
            rel = c.relative_change
            change = f"{rel:+.1%}" if rel is not None else c.kind.replace("_", " ")
            self._add(table, c.key, _value(c.a), _value(c.b), change, c.kind)

    def _add(self, table: DataTable, what: str, a: str, b: str, change: str, kind: str) -> None:
        style = KIND_STYLE[kind]
        table.add_row(Text(what), Text(a), Text(b), Text(change, style))
        self.row_kinds.append(kind)
        self.row_texts.append((what, a, b, change))

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        """The highlighted row in full, whatever the columns cut."""
        detail = self.query_one("#row-detail", Static)
        if not 0 <= event.cursor_row < len(self.row_texts):
            detail.update("")
            return
        what, a, b, change = self.row_texts[event.cursor_row]
        detail.update(Text(f"{what.strip()}: {change}\nA: {a}\nB: {b}"))

    def action_toggle_changed(self) -> None:
        """Show only differences, or every reading."""
        self.changed_only = not self.changed_only
        self.render_rows()

    def action_next_difference(self) -> None:
        """Move the cursor to the next row that differs."""
        table = self.query_one("#diff", DataTable)
        start = table.cursor_row
        for row in range(start + 1, len(self.row_kinds)):
            if self.row_kinds[row] not in ("equal", "inconclusive"):
                table.move_cursor(row=row)
                return
        self.notify("no further difference")

    async def action_quit(self) -> None:
        code = self.diff.exit_code()
        self.exit(result=code, return_code=code)
