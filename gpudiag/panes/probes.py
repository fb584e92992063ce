"""The probes pane (key 8): each probe's outcome, added as it arrives while probing."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.text import Text
from textual.app import ComposeResult
from textual.widgets import Static

from gpudiag.model import ProbeResult
from gpudiag.panes.base import Pane, SnapshotView

if TYPE_CHECKING:
    from textual.widgets import DataTable


class ProbesPane(Pane):
    """One row per probe: status, time, readings, error; below, the highlighted probe's
    error in full (the column cuts it at 80 columns)."""

    KEY, NAME, TITLE, FOCUS = "8", "probes", "Probes", "#probes"
    DEFAULT_CSS = """
    #probes { height: 1fr; }
    #probe-detail { height: auto; max-height: 6; border-top: solid $accent; padding: 0 1; }
    """

    def compose(self) -> ComposeResult:
        from gpudiag.panes.tables import RowTable

        yield RowTable(id="probes", cursor_type="row")
        yield Static("", id="probe-detail")

    def on_built(self) -> None:
        self.table("#probes").add_columns("probe", "status", "time", "readings", "error")

    def __init__(self) -> None:
        super().__init__()
        self.results: list[ProbeResult] = []

    def clear_results(self) -> None:
        """No probe yet (probing starts again)."""
        self.results = []
        self.table("#probes").clear()
        self.query_one("#probe-detail", Static).update("")

    def add_result(self, result: ProbeResult) -> None:
        """One probe's outcome, as it arrives."""
        self.results.append(result)
        self.table("#probes").add_row(
            Text(result.name),
            Text(result.status.value),
            Text(f"{result.duration_s * 1000:.0f} ms"),
            Text(str(len(result.readings))),
            Text(result.error),
        )

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        if event.data_table.id != "probes":
            return
        row = event.cursor_row
        result = self.results[row] if 0 <= row < len(self.results) else None
        text = Text()
        if result is not None:
            text.append(f"{result.name}: {result.status.value}", "bold")
            text.append(f"  {result.error}" if result.error else "  (no error)")
        self.query_one("#probe-detail", Static).update(text)

    def update_from(self, view: SnapshotView) -> None:
        self.clear_results()
        for result in view.snapshot.probes:
            self.add_result(result)
