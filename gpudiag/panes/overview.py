"""The overview pane (key 1): the node in a few lines and what to fix first."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.widgets import Static

from gpudiag import views
from gpudiag.model import Severity
from gpudiag.panes.base import SEVERITY_STYLE, Pane, SnapshotView


class OverviewPane(Pane):
    """Host, platform, GPUs, driver, CPU; the five worst findings; the keys."""

    KEY, NAME, TITLE, FOCUS = "1", "overview", "Overview", "#overview"
    DEFAULT_CSS = "#overview { padding: 0 1; }"

    def compose(self) -> ComposeResult:
        yield VerticalScroll(Static("", id="overview-text"), id="overview")

    def update_from(self, view: SnapshotView) -> None:
        snapshot = view.snapshot
        text = Text()
        for label, value in views.overview(snapshot, view.rules, view.readings):
            text.append(f"{label:<9}", "bold")
            text.append(f"{value}\n")
        worst = views.filter_findings(snapshot.findings)
        worst = [f for f in worst if f.severity.rank > Severity.INFO.rank][:5]
        text.append(
            "\nFix first\n" if worst else "\nNo critical, warning or unknown findings.\n", "bold"
        )
        for finding in worst:
            text.append(f"{finding.severity.value.upper():<9}", SEVERITY_STYLE[finding.severity])
            text.append(f"{finding.rule_id:<8} {finding.subject}: {finding.title}\n")
        if not views.gpu_table(snapshot).rows:
            text.append("\nNo GPU\n", "bold")
            text.append(views.no_gpu_reason(snapshot) + "\n")
        text.append("\n2 findings  3 GPUs  4 topology  5 host  6 kernels  9 watch  ? keys", "dim")
        self.query_one("#overview-text", Static).update(text)
