"""The readings pane (key 7): every reading of every probe with its source, filtered by
text; the highlighted one in full below."""

from __future__ import annotations

from typing import TYPE_CHECKING

from textual import on
from textual.app import ComposeResult
from textual.widgets import Input, Static

from gpudiag.panes.base import (
    DETAIL_CSS,
    Pane,
    SnapshotView,
    reading_detail,
    reading_row,
    size_reading_columns,
)

if TYPE_CHECKING:
    from textual.widgets import DataTable


class ReadingsPane(Pane):
    """A filter, the readings table and the detail of the highlighted reading."""

    KEY, NAME, TITLE, FOCUS = "7", "readings", "Readings", "#readings"
    LAZY = True
    DEFAULT_CSS = f"""
    #readings {{ height: 1fr; }}
    #reading-detail {{ {DETAIL_CSS} min-height: 3; border-top: solid $accent; }}
    """

    def __init__(self) -> None:
        super().__init__()
        self.view: SnapshotView | None = None

    def compose(self) -> ComposeResult:
        from textual.widgets import DataTable

        yield Input(
            placeholder="/ filter: text in key, value, source",
            id="readings-filter",
            classes="filter",
        )
        yield DataTable(id="readings", cursor_type="row", zebra_stripes=True)
        yield Static("", id="reading-detail")

    def on_built(self) -> None:
        self.query_one("#readings-filter", Input).cursor_blink = False
        self.fit_width(self.app.size.width)

    def fit_width(self, width: int) -> None:
        size_reading_columns(self.table("#readings"), width)

    def update_from(self, view: SnapshotView) -> None:
        self.view = view
        needle = self.query_one("#readings-filter", Input).value.strip().lower()
        table = self.table("#readings")
        table.clear()
        for result in view.snapshot.probes:
            for reading in result.readings:
                line = f"{reading.key} {reading.display()} {reading.source}".lower()
                if needle and needle not in line:
                    continue
                table.add_row(*reading_row(reading))

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        if event.data_table.id != "readings":
            return
        table = self.table("#readings")
        detail = reading_detail(*table.get_row_at(event.cursor_row))
        self.query_one("#reading-detail", Static).update(detail)

    @on(Input.Changed, "#readings-filter")
    def _filter_changed(self) -> None:
        if self.view is not None:
            self.update_from(self.view)

    @on(Input.Submitted, "#readings-filter")
    def _filter_submitted(self) -> None:
        self.query_one("#readings").focus()

    def key_escape(self) -> None:
        """Esc in the filter field goes back to the table."""
        if self.screen.focused is self.query_one("#readings-filter"):
            self.query_one("#readings").focus()
