"""The terminal UI. Everything on screen is rendered from a snapshot: a live node's
(probed in a worker thread, results streamed in as they arrive) or a saved one.

So far: a health banner and four tabs: the findings (severity written as text), every
reading with its value or status and its source, the GPU topology matrix, and each
probe's status and duration. Keys: 1 findings, 2 readings, 3 topology, 4 probes,
r refresh, q quit.
"""

from __future__ import annotations

from typing import ClassVar

from rich.text import Text
from textual import work
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.widgets import DataTable, Footer, Header, Static, TabbedContent, TabPane
from textual.worker import Worker, WorkerState

from gpudiag.model import ProbeResult, Severity, Snapshot
from gpudiag.session import LiveNode, severity_counts
from gpudiag.views import topology_matrix

SEVERITY_STYLE = {
    Severity.CRITICAL: "bold red",
    Severity.WARNING: "yellow",
    Severity.UNKNOWN: "magenta",
    Severity.INFO: "",
}


class GpudiagApp(App[int]):
    """gpudiag's TUI, built from a live node or a saved snapshot."""

    TITLE = "gpudiag"
    CSS = """
    #banner { height: auto; padding: 0 1; }
    TabbedContent { height: 1fr; }
    """
    BINDINGS: ClassVar[list[Binding]] = [
        Binding("q", "quit", "Quit"),
        Binding("r", "refresh", "Refresh"),
        Binding("1", "show_tab('findings-tab')", "Findings"),
        Binding("2", "show_tab('readings-tab')", "Readings"),
        Binding("3", "show_tab('topology-tab')", "Topology"),
        Binding("4", "show_tab('probes-tab')", "Probes"),
    ]

    def __init__(self, source: LiveNode | Snapshot) -> None:
        super().__init__()
        self.source = source
        self.snapshot: Snapshot | None = source if isinstance(source, Snapshot) else None

    def compose(self) -> ComposeResult:
        yield Header()
        yield Static("", id="banner")
        with TabbedContent(initial="findings-tab"):
            with TabPane("Findings", id="findings-tab"):
                yield DataTable(id="findings", cursor_type="row", zebra_stripes=True)
            with TabPane("Readings", id="readings-tab"):
                yield DataTable(id="readings", cursor_type="row", zebra_stripes=True)
            with TabPane("Topology", id="topology-tab"):
                yield DataTable(id="topology", cursor_type="row")
                yield Static("", id="topology-legend")
            with TabPane("Probes", id="probes-tab"):
                yield DataTable(id="probes", cursor_type="row")
        yield Footer()

    def on_mount(self) -> None:
        findings = self.query_one("#findings", DataTable)
        findings.add_columns("severity", "id", "subject", "message")
        probes = self.query_one("#probes", DataTable)
        probes.add_columns("probe", "status", "time", "readings", "error")
        self.query_one("#readings", DataTable).add_columns("reading", "value", "source")
        if isinstance(self.source, Snapshot):
            self.sub_title = f"{self.source.host} (saved {self.source.created}, read-only)"
            self.show_snapshot(self.source)
        else:
            self.action_refresh()

    def action_refresh(self) -> None:
        """Probe the live node again (a saved snapshot cannot be refreshed)."""
        if not isinstance(self.source, LiveNode):
            self.notify("a saved snapshot is read-only", severity="warning")
            return
        for table in self.query(DataTable):
            table.clear()
        self.query_one("#banner", Static).update("probing the node ...")
        self.probe_node()

    def action_show_tab(self, tab: str) -> None:
        """Switch to a tab and focus its table."""
        self.query_one(TabbedContent).active = tab
        self.query_one(f"#{tab.removesuffix('-tab')}", DataTable).focus()

    async def action_quit(self) -> None:
        """Stop any probing, then leave."""
        if isinstance(self.source, LiveNode):
            self.source.cancel.set()
        self.exit(0)

    @work(thread=True, exclusive=True, group="probe", exit_on_error=False)
    def probe_node(self) -> Snapshot:
        """Run the probes off the UI thread; each result is shown as it arrives."""
        assert isinstance(self.source, LiveNode)
        snapshot = self.source.snapshot(
            on_result=lambda result: self.call_from_thread(self.add_probe_row, result)
        )
        self.call_from_thread(self.show_snapshot, snapshot)
        return snapshot

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        if event.state is WorkerState.ERROR:
            error = event.worker.error
            self.query_one("#banner", Static).update(
                Text(f"UNKNOWN: probing failed: {type(error).__name__}: {error}", "magenta")
            )

    def add_probe_row(self, result: ProbeResult) -> None:
        """One probe's outcome in the probes table."""
        self.query_one("#probes", DataTable).add_row(
            Text(result.name),
            Text(result.status.value),
            Text(f"{result.duration_s * 1000:.0f} ms"),
            Text(str(len(result.readings))),
            Text(result.error),
        )

    def show_topology(self, snapshot: Snapshot) -> None:
        """The GPU-by-GPU matrix with NICs and affinity, and its legend."""
        matrix = topology_matrix(snapshot)
        table = self.query_one("#topology", DataTable)
        table.clear(columns=True)
        legend = self.query_one("#topology-legend", Static)
        if not matrix.rows:
            legend.update(Text("no GPU readings in this snapshot"))
            return
        table.add_columns(*matrix.headers)
        for row in matrix.rows:
            table.add_row(*(Text(cell) for cell in row))
        legend.update(Text("\n".join(matrix.legend)))

    def show_snapshot(self, snapshot: Snapshot) -> None:
        """Render a whole snapshot: banner, findings and probes."""
        self.snapshot = snapshot
        counts = severity_counts(snapshot.findings)
        worst = snapshot.worst_severity()
        health = "OK" if worst in (None, Severity.INFO) else worst.value.upper()
        banner = Text(f"{snapshot.host}  health: {health}   ")
        for severity, count in counts.items():
            banner.append(f"{severity.value.upper()} {count}  ", SEVERITY_STYLE[severity])
        self.query_one("#banner", Static).update(banner)
        findings = self.query_one("#findings", DataTable)
        findings.clear()
        for finding in snapshot.findings:
            findings.add_row(
                Text(finding.severity.value.upper(), SEVERITY_STYLE[finding.severity]),
                Text(finding.rule_id),
                Text(finding.subject),
                Text(finding.message),
            )
        probes = self.query_one("#probes", DataTable)
        probes.clear()
        readings = self.query_one("#readings", DataTable)
        readings.clear()
        self.show_topology(snapshot)
        for result in snapshot.probes:
            self.add_probe_row(result)
            for reading in result.readings:
                # Text, not str: a str cell is Rich markup, and "[missing] ..." would vanish
                readings.add_row(Text(reading.key), Text(reading.display()), Text(reading.source))
