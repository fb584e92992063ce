"""The topology pane (key 4): the GPU-by-GPU matrix with NICs and affinity."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.widgets import Static

from gpudiag.panes.base import Pane, SnapshotView


class TopologyPane(Pane):
    """The `nvidia-smi topo -m` view of the snapshot, and its legend."""

    KEY, NAME, TITLE, FOCUS = "4", "topology", "Topology", "#topology"
    LAZY = True

    def compose(self) -> ComposeResult:
        from textual.widgets import DataTable

        yield DataTable(id="topology", cursor_type="row")
        yield Static("", id="topology-legend")

    def update_from(self, view: SnapshotView) -> None:
        from gpudiag import views

        matrix = views.topology_matrix(view.snapshot, view.profile_values)
        table = self.table("#topology")
        table.clear(columns=True)
        legend = self.query_one("#topology-legend", Static)
        if not matrix.rows:
            legend.update(Text(f"No GPU readings.\n{views.no_gpu_reason(view.snapshot)}"))
            return
        table.add_columns(*matrix.headers)
        for row in matrix.rows:
            table.add_row(*(Text(cell) for cell in row))
        legend.update(Text("\n".join(matrix.legend)))
