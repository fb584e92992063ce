"""The GPUs pane (key 3): one row per GPU, and every reading of the highlighted one
(with its processes, on the live node itself)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.text import Text
from textual.app import ComposeResult
from textual.widgets import Static

from gpudiag.panes.base import (
    DETAIL_CSS,
    HEALTH_STYLE,
    Pane,
    SnapshotView,
    fit_whole_columns,
    reading_detail,
    reading_row,
    size_reading_columns,
)

if TYPE_CHECKING:
    from textual.widgets import DataTable

GPU_ROWS = 8  # the GPU table's rows in sight (with its header and horizontal scrollbar)


class GpusPane(Pane):
    """The GPU table and the readings of the highlighted GPU."""

    KEY, NAME, TITLE, FOCUS = "3", "gpus", "GPUs", "#gpus"
    DEFAULT_CSS = f"""
    #gpus {{ height: auto; max-height: {GPU_ROWS + 2}; }}
    #gpu-note {{ height: auto; padding: 0 1; display: none; }}
    #gpu-readings {{ height: 1fr; border-top: solid $accent; }}
    #gpu-reading-detail {{ {DETAIL_CSS} background: $boost; }}
    """

    def __init__(self) -> None:
        super().__init__()
        self.view: SnapshotView | None = None
        self.widths: list[int] = []  # the GPU table's columns, padding included

    def compose(self) -> ComposeResult:
        from textual.widgets import DataTable

        yield Static("", id="gpu-note")
        yield DataTable(id="gpus", cursor_type="row", zebra_stripes=True, fixed_columns=2)
        yield DataTable(id="gpu-readings", cursor_type="row")
        yield Static("", id="gpu-reading-detail")  # the highlighted reading, in full

    def on_built(self) -> None:
        self.fit_width(self.app.size.width)

    def fit_width(self, width: int) -> None:
        size_reading_columns(self.table("#gpu-readings"), width)
        # whole columns only (the others scroll into view, the id and health stay); room
        # for a vertical scrollbar past the rows its height holds
        scrollbar = 2 if len(self.widths) and self.table("#gpus").row_count > GPU_ROWS else 0
        fit_whole_columns(self.table("#gpus"), self.widths, width - scrollbar)

    def update_from(self, view: SnapshotView) -> None:
        from gpudiag import views

        self.view = view
        matrix = views.gpu_table(view.snapshot)
        table = self.table("#gpus")
        table.clear(columns=True)
        note = self.query_one("#gpu-note", Static)
        note.display = not matrix.rows
        table.display = bool(matrix.rows)
        if not matrix.rows:
            note.update(Text(views.no_gpu_reason(view.snapshot)))
        table.add_columns(*matrix.headers)
        for row in matrix.rows:
            table.add_row(Text(row[0]), Text(row[1], HEALTH_STYLE[row[1]]), *map(Text, row[2:]))
        # each column as wide as its widest cell and a blank each side
        columns = zip(matrix.headers, *matrix.rows, strict=True)
        self.widths = [max(len(cell) for cell in column) + 2 for column in columns]
        self.fit_width(self.app.size.width)
        self.show_readings(0)

    def show_readings(self, row: int) -> None:
        """Every reading of the GPU in a row of the table."""
        from gpudiag import views

        table = self.table("#gpu-readings")
        table.clear()
        gpus = self.table("#gpus")
        if self.view is None or not 0 <= row < gpus.row_count:
            return
        gpu = int(str(gpus.get_row_at(row)[0]).removeprefix("GPU"))
        if self.view.live:
            from gpudiag.processes import gpu_processes

            # who runs there, as nvitop shows it (psutil; only on the live node itself)
            for process in gpu_processes(self.view.readings):
                if process.gpu == gpu:
                    table.add_row(Text("process"), Text(process.text), Text("nvml, psutil"))
        for reading in views.gpu_readings(self.view.readings, gpu):
            table.add_row(*reading_row(reading))
        first = reading_detail(*table.get_row_at(0)) if table.row_count else Text("")
        self.query_one("#gpu-reading-detail", Static).update(first)

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        if event.data_table.id == "gpus":
            self.show_readings(event.cursor_row)
        elif event.data_table.id == "gpu-readings":
            row = event.data_table.get_row_at(event.cursor_row)
            self.query_one("#gpu-reading-detail", Static).update(reading_detail(*row))
