"""The topology pane (key 4): the GPU-by-GPU matrix with NICs and affinity."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.widgets import Static

from gpudiag.panes.base import Pane, SnapshotView, fit_whole_columns

GAP = 1  # blank columns after each cell: "NV17!" and "GPU7" in 6 each, not 7
SCROLLBAR = 2  # kept free for a vertical scrollbar (16 GPUs at 24 lines)


class TopologyPane(Pane):
    """The `nvidia-smi topo -m` view of the snapshot, and its legend. Columns are as wide
    as their widest cell and one blank, so that 8 GPUs fit 80 columns with their NUMA and
    CPU affinity; the table is as wide as the whole columns that fit, never a column cut
    at the edge (the rest, the NICs, scroll into view; the GPU names stay)."""

    KEY, NAME, TITLE, FOCUS = "4", "topology", "Topology", "#topology"
    LAZY = True

    def __init__(self) -> None:
        super().__init__()
        self.widths: list[int] = []  # the columns' widths, gap included

    def compose(self) -> ComposeResult:
        from textual.widgets import DataTable

        yield DataTable(id="topology", cursor_type="row", cell_padding=0, fixed_columns=1)
        yield Static("", id="topology-legend")

    def fit_width(self, width: int) -> None:
        """Show the whole columns that fit `width` (the table scrolls for the others)."""
        fit_whole_columns(self.table("#topology"), self.widths, width - SCROLLBAR)

    def update_from(self, view: SnapshotView) -> None:
        from gpudiag import views

        matrix = views.topology_matrix(view.snapshot, view.profile_values)
        table = self.table("#topology")
        table.clear(columns=True)
        legend = self.query_one("#topology-legend", Static)
        self.widths = []
        if not matrix.rows:
            legend.update(Text(f"No GPU readings.\n{views.no_gpu_reason(view.snapshot)}"))
            return
        for i, header in enumerate(matrix.headers):
            width = max(len(header), *(len(row[i]) for row in matrix.rows)) + GAP
            self.widths.append(width)
            table.add_column(header, width=width)
        for row in matrix.rows:
            table.add_row(*(Text(cell) for cell in row))
        legend.update(Text("\n".join(matrix.legend)))
        self.fit_width(self.app.size.width)
