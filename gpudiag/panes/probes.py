"""The probes pane (key 8): each probe's outcome, added as it arrives while probing."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.widgets import DataTable

from gpudiag.model import ProbeResult
from gpudiag.panes.base import Pane, SnapshotView


class ProbesPane(Pane):
    """One row per probe: status, time, readings, error."""

    KEY, NAME, TITLE, FOCUS = "8", "probes", "Probes", "#probes"

    def compose(self) -> ComposeResult:
        yield DataTable(id="probes", cursor_type="row")

    def on_mount(self) -> None:
        self.query_one("#probes", DataTable).add_columns(
            "probe", "status", "time", "readings", "error"
        )

    def clear_results(self) -> None:
        """No probe yet (probing starts again)."""
        self.query_one("#probes", DataTable).clear()

    def add_result(self, result: ProbeResult) -> None:
        """One probe's outcome, as it arrives."""
        self.query_one("#probes", DataTable).add_row(
            Text(result.name),
            Text(result.status.value),
            Text(f"{result.duration_s * 1000:.0f} ms"),
            Text(str(len(result.readings))),
            Text(result.error),
        )

    def update_from(self, view: SnapshotView) -> None:
        self.clear_results()
        for result in view.snapshot.probes:
            self.add_result(result)
