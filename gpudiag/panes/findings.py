"""The findings pane (key 2): a filter, the findings sorted, the detail of the
highlighted one; its keys sort (s) and filter by severity (f)."""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, VerticalScroll
from textual.widgets import Input, Label, Static

from gpudiag.model import Finding, Severity
from gpudiag.panes.base import SEVERITY_STYLE, Pane, SnapshotView

if TYPE_CHECKING:
    from textual.widgets import DataTable

SUBJECT_WIDTH = 17  # "PCIe 0000:5d:00.0", "GPU 2 NVLink 5"


class FindingsPane(Pane):
    """Every finding of the snapshot, filtered by text and severity, sorted."""

    KEY, NAME, TITLE, FOCUS = "2", "findings", "Findings", "#findings"
    BINDINGS: ClassVar[list[Binding]] = [
        Binding("s", "sort_findings", "Sort", tooltip="Sort findings"),
        Binding("f", "filter_severity", "Severity", tooltip="Filter by severity"),
    ]
    DEFAULT_CSS = """
    #findings-bar { height: 1; }
    #findings-filter { width: 1fr; }
    #findings-state { width: auto; padding: 0 1; color: $text-muted; }
    #findings { height: 1fr; }
    #finding-detail { height: 8; border-top: solid $accent; padding: 0 1; }
    """

    def __init__(self) -> None:
        super().__init__()
        self.view: SnapshotView | None = None
        self.shown: list[Finding] = []
        self.severity_filter: Severity | None = None
        self.sort_key = "severity"
        self.width = 80  # the terminal's, from fit_width

    def compose(self) -> ComposeResult:
        from gpudiag.panes.tables import RowTable

        with Horizontal(id="findings-bar"):
            yield Input(
                placeholder="/ filter: text in id, subject, title",
                id="findings-filter",
                classes="filter",
            )
            # what f and s chose, for as long as it holds (the toast fades)
            yield Label(self._state(), id="findings-state")
        yield RowTable(id="findings", cursor_type="row", zebra_stripes=True, fixed_columns=1)
        yield VerticalScroll(Static("", id="finding-text"), id="finding-detail")

    def on_built(self) -> None:
        self._columns()
        self.query_one("#findings-filter", Input).cursor_blink = False

    def _columns(self) -> None:
        """Severity, id and subject as wide as they need; the title the rest of the width,
        a long one wrapped onto a second line of its row, never cut (at 80 columns
        "Xid events that mean a hardware fault" was "Xid events that mean a hardware f")."""
        table = self.table("#findings")
        table.clear(columns=True)
        table.add_column("severity", width=8)
        table.add_column("id", width=8)
        table.add_column("subject", width=SUBJECT_WIDTH)
        # each column's padding (2), the scrollbar and the pane's border
        table.add_column("title", width=max(20, self.width - 8 - 8 - SUBJECT_WIDTH - 8 - 4))

    def fit_width(self, width: int) -> None:
        if width != self.width:
            self.width = width
            self._columns()
            self._redraw()

    def update_from(self, view: SnapshotView) -> None:
        """The findings table, filtered and sorted, and the detail of the first."""
        from gpudiag import views

        self.view = view
        text = self.query_one("#findings-filter", Input).value
        self.shown = views.filter_findings(
            view.snapshot.findings, self.severity_filter, text, self.sort_key
        )
        table = self.table("#findings")
        table.clear()
        for finding in self.shown:
            table.add_row(
                Text(finding.severity.value.upper(), SEVERITY_STYLE[finding.severity]),
                Text(finding.rule_id),
                Text(finding.subject),
                Text(finding.title),
                height=None,  # as many lines as the title takes at the column's width
            )
        self.show_detail(0)

    def _state(self) -> Text:
        shown = self.severity_filter.value if self.severity_filter else "all"
        return Text(f"f: {shown}  s: by {self.sort_key}")

    def _redraw(self) -> None:
        if self.view is not None:
            self.update_from(self.view)

    def show_detail(self, row: int) -> None:
        """The detail of one finding of the table."""
        from gpudiag import views

        detail = self.query_one("#finding-text", Static)
        if not 0 <= row < len(self.shown):
            detail.update(Text("no finding matches" if self.view else ""))
            return
        text = Text()
        for label, line in views.finding_detail(self.shown[row]):
            if label:
                text.append(f"{label}: ", "bold")
            text.append(f"{line}\n")
        detail.update(text)

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        if event.data_table.id != "findings":
            return
        self.show_detail(event.cursor_row)

    @on(Input.Changed, "#findings-filter")
    def _filter_changed(self) -> None:
        self._redraw()

    @on(Input.Submitted, "#findings-filter")
    def _filter_submitted(self) -> None:
        self.query_one("#findings").focus()

    def key_escape(self) -> None:
        """Esc in the filter field goes back to the table."""
        if self.screen.focused is self.query_one("#findings-filter"):
            self.query_one("#findings").focus()

    def action_sort_findings(self) -> None:
        """Sort the findings by the next key: severity, id, subject."""
        from gpudiag import views

        keys = views.SORT_KEYS
        self.sort_key = keys[(keys.index(self.sort_key) + 1) % len(keys)]
        self.show()
        self._redraw()
        self.query_one("#findings-state", Label).update(self._state())
        self.notify(f"findings sorted by {self.sort_key}")

    def action_filter_severity(self) -> None:
        """Show only one severity, the next each time, then all again."""
        order: list[Severity | None] = [None, *Severity]
        self.severity_filter = order[(order.index(self.severity_filter) + 1) % len(order)]
        self.show()
        self._redraw()
        self.query_one("#findings-state", Label).update(self._state())
        shown = self.severity_filter.value if self.severity_filter else "every severity"
        self.notify(f"findings: {shown}")
