"""The side-by-side diff screen: two columns (A and B) of every reading that differs,
performance metrics first with the configuration differences that explain them, then
the findings one side has. Keys: c changed only / everything, n next difference,
/ filter, ? help, q quit. The columns share the terminal's width, resized with it (long
values are cut there); the highlighted row is shown in full below the table, so 80
columns are enough. A GPU whose every reading is on one side only (lost, removed) is one
row, not hundreds.
"""

from __future__ import annotations

from typing import ClassVar

from rich.text import Text
from textual import events, on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.widgets import DataTable, Header, Input, Static

from gpudiag import catalog
from gpudiag.diff import Diff, ReadingChange, _value, folded
from gpudiag.model import Snapshot
from gpudiag.tui_base import FitFooter, GpudiagAppBase, KeysHelp

HELP = """gpudiag diff keys (Esc closes)
  c  changed only / every reading
  n  next difference
  /  filter rows by text (Enter or Esc back)
  ?  this help
  q  quit (exit 0 same, 1 configuration, 2 performance)
Performance rows: B/A [95% interval]; inconclusive
says why (too few samples, too noisy)."""


KIND_STYLE = {
    "changed": "yellow",
    "only_a": "red",
    "only_b": "green",
    "equal": "",
    "inconclusive": "italic",
}


HEADER_ICONS = 16  # the columns Textual's header keeps beside its title (icon, clock)


class DiffApp(GpudiagAppBase):
    """Two snapshots side by side."""

    TITLE = "gpudiag diff"
    CSS = """
    #summary { height: auto; padding: 0 1; }
    #diff-filter { height: 1; border: none; padding: 0 1; display: none; }
    #diff { height: 1fr; }
    #row-detail { height: auto; max-height: 7; padding: 0 1; border-top: solid $accent; }
    """
    BINDINGS: ClassVar[list[Binding]] = [
        Binding("q", "quit", "Quit"),
        Binding("c", "toggle_changed", "Changed only/all"),
        Binding("n", "next_difference", "Next difference"),
        Binding("slash", "filter", "Filter"),
        Binding("question_mark", "help", "Help"),
    ]

    def __init__(
        self,
        diff: Diff,
        a: Snapshot,
        b: Snapshot,
        include_noisy: bool = False,
        names: tuple[str, str] | None = None,
    ) -> None:
        super().__init__()
        self._width = 0  # the terminal's, from the last resize
        self.diff, self.a, self.b = diff, a, b
        self.names = names or (a.host, b.host)
        self.include_noisy = include_noisy
        self.changed_only = True
        self.row_kinds: list[str] = []
        self.row_texts: list[tuple[str, str, str, str]] = []
        self.row_details: list[str] = []  # what the detail says of a row, beyond its cells

    def compose(self) -> ComposeResult:
        yield Header()
        yield Static("", id="summary")
        yield Input(placeholder="/ filter: text in any column", id="diff-filter")
        yield DataTable(id="diff", cursor_type="row", zebra_stripes=True, fixed_columns=1)
        yield Static("", id="row-detail")
        yield FitFooter()

    def on_mount(self) -> None:
        self._fit_title(self.size.width)
        self.query_one("#diff-filter", Input).cursor_blink = False
        self._size_columns()
        self.query_one("#diff", DataTable).focus()

    def _fit_title(self, width: int) -> None:
        """Both files and hosts in the header where they fit whole (120 columns, short
        names); otherwise none there (it cut them at 80: `B: demo-…`): the summary below
        says them again, wrapped."""
        (name_a, name_b), hosts = self.names, (self.a.host, self.b.host)
        names = f"A: {name_a} ({hosts[0]})  B: {name_b} ({hosts[1]})"
        fits = len(f"{self.title} — {names}") <= width - HEADER_ICONS
        self.sub_title = names if fits else ""

    def _size_columns(self) -> None:
        """what 40%, A and B 17% each, change the rest, of the terminal's width now."""
        table = self.query_one("#diff", DataTable)
        room = max(50, (self._width or self.size.width) - 10)  # less padding, scrollbar
        side = max(8, room * 17 // 100)
        what = max(16, room * 40 // 100)
        cursor = table.cursor_row
        table.clear(columns=True)
        table.add_column("what", width=what)
        table.add_column("A", width=side)
        table.add_column("B", width=side)
        table.add_column("change", width=room - what - 2 * side)
        self.render_rows()
        if 0 <= cursor < table.row_count:
            table.move_cursor(row=cursor)

    def on_resize(self, event: events.Resize) -> None:
        self._width = event.size.width
        self._fit_title(event.size.width)
        if self.is_mounted and self.query("#diff"):
            self._size_columns()

    def _summary(self) -> Text:
        """The verdict line (the text report's first), and which file is A and which B."""
        (name_a, name_b), hosts = self.names, (self.a.host, self.b.host)
        shown = "changed only" if self.changed_only else "all readings"
        return Text(
            f"{self.diff.verdict_line(self.include_noisy)} ({shown})\n"
            f"A: {name_a} ({hosts[0]})\nB: {name_b} ({hosts[1]})"
        )

    def render_rows(self) -> None:
        """Fill the table: metrics, findings on one side, then readings."""
        table = self.query_one("#diff", DataTable)
        table.clear()
        self.row_kinds = []
        self.row_texts = []
        self.row_details = []
        self.query_one("#summary", Static).update(self._summary())
        for m in self.diff.metrics:
            kind = {"faster": "changed", "slower": "changed", "inconclusive": "inconclusive"}.get(
                m.verdict, "equal"
            )
            said = f"{m.verdict} ({m.reason})" if m.reason else m.verdict
            self._add(
                table,
                f"{m.kernel}.{m.metric} {m.device}",
                f"{m.median_a:.4g} {m.unit}",
                f"{m.median_b:.4g} {m.unit}",
                f"{said} {m.ratio:.3f} [{m.ci_low:.3f}-{m.ci_high:.3f}]",  # the verdict first
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
                f"{finding.title}: {finding.message}",
            )
        for finding in self.diff.findings_only_b:
            self._add(
                table,
                f"{finding.rule_id} {finding.subject}",
                "-",
                finding.severity.value.upper(),
                "finding only in B",
                "only_b",
                f"{finding.title}: {finding.message}",
            )
        changes: list[ReadingChange] = [
            c
            for c in self.diff.readings
            if (self.include_noisy or not c.noisy) and (c.kind != "equal" or not self.changed_only)
        ]
        whole = self.diff.one_sided_gpus()
        told: set[str] = set()
        for c in changes:
            index = catalog.gpu_of(c.key)
            gpu = None if index is None else str(index)
            if folded(c, whole):
                if gpu is not None and gpu not in told:
                    told.add(gpu)
                    kind, count = whole[gpu]
                    side = "A" if kind == "only_a" else "B"
                    self._add(
                        table,
                        f"GPU {gpu}: every reading",
                        f"{count} readings" if side == "A" else "-",
                        f"{count} readings" if side == "B" else "-",
                        f"GPU only in {side} (lost or removed)",
                        kind,
                    )
                continue
            rel = c.relative_change
            change = f"{rel:+.1%}" if rel is not None else c.kind.replace("_", " ")
            self._add(table, c.key, _value(c.a), _value(c.b), change, c.kind)

    def _add(
        self,
        table: DataTable,
        what: str,
        a: str,
        b: str,
        change: str,
        kind: str,
        detail: str = "",
    ) -> None:
        needle = self.query_one("#diff-filter", Input).value.strip().lower()
        if needle and needle not in f"{what} {a} {b} {change}".lower():
            return
        style = KIND_STYLE[kind]
        table.add_row(Text(what), Text(a), Text(b), Text(change, style))
        self.row_kinds.append(kind)
        self.row_texts.append((what, a, b, change))
        self.row_details.append(detail)

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        """The highlighted row in full, whatever the columns cut."""
        detail = self.query_one("#row-detail", Static)
        if not 0 <= event.cursor_row < len(self.row_texts):
            detail.update("")
            return
        what, a, b, change = self.row_texts[event.cursor_row]
        said = self.row_details[event.cursor_row]  # a finding's title and message
        detail.update(
            Text(f"{what.strip()}: {change}\n{said + chr(10) if said else ''}A: {a}\nB: {b}")
        )

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

    def action_help(self) -> None:
        """The keys, in a dialog."""
        self.push_screen(KeysHelp(HELP, 60))  # the quit line whole

    def action_filter(self) -> None:
        """Show the filter field and put the cursor there."""
        field = self.query_one("#diff-filter", Input)
        field.display = True
        field.focus()

    @on(Input.Changed, "#diff-filter")
    def _filter_changed(self) -> None:
        self.render_rows()

    @on(Input.Submitted, "#diff-filter")
    def _filter_submitted(self) -> None:
        self.query_one("#diff", DataTable).focus()

    def key_escape(self) -> None:
        """Esc in the filter goes back to the table (the filter stays applied)."""
        if isinstance(self.focused, Input):
            self.query_one("#diff", DataTable).focus()

    async def action_quit(self) -> None:
        code = self.diff.exit_code()
        self.exit(result=code, return_code=code)
