"""The overview pane (key 1): the node in a few lines and what to fix first."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.widgets import Static

from gpudiag.model import Severity
from gpudiag.panes.base import SEVERITY_STYLE, Pane, SnapshotView

# The lines around a pane: the header, the banner, the tabs and their underline, the footer.
CHROME = 5


class OverviewPane(Pane):
    """Host, platform, GPUs, driver, CPU; the worst findings, as many as fit; the keys."""

    KEY, NAME, TITLE, FOCUS = "1", "overview", "Overview", "#overview"
    DEFAULT_CSS = "#overview { padding: 0 1; }"
    view: SnapshotView | None = None

    def compose(self) -> ComposeResult:
        yield VerticalScroll(Static("", id="overview-text"), id="overview")

    def update_from(self, view: SnapshotView) -> None:
        from gpudiag import views

        snapshot = view.snapshot
        text = Text()
        for label, value in views.overview(snapshot, view.rules, view.readings):
            text.append(f"{label:<9}", "bold")
            text.append(f"{value}\n")
        worst = views.filter_findings(snapshot.findings)
        worst = [f for f in worst if f.severity.rank > Severity.INFO.rank]
        if not views.gpu_table(snapshot).rows:  # above the findings: in sight at 80x24
            text.append("\nNo GPU: ", "bold")
            text.append(views.no_gpu_reason(snapshot) + "\n")
        # as many as the screen holds below the rest (5 at least; it scrolls)
        width = max(20, self.app.size.width - 2)
        used = sum(-(-max(1, len(line)) // width) for line in text.plain.splitlines()) + 4
        room = max(5, self.app.size.height - CHROME - used)
        shown = worst[:room]
        text.append(
            "\nFix first\n" if worst else "\nNo critical, warning or unknown findings.\n", "bold"
        )
        for finding in shown:
            text.append(f"{finding.severity.value.upper():<9}", SEVERITY_STYLE[finding.severity])
            text.append(f"{finding.rule_id:<8} {finding.subject}: {finding.title}\n")
        more = f" ({len(worst) - len(shown)} more)" if len(shown) < len(worst) else ""
        text.append(
            f"\n2 findings{more}  3 GPUs  4 topology  5 host  6 kernels  9 watch  ? keys", "dim"
        )
        self.query_one("#overview-text", Static).update(text)
        self.view = view

    def fit_width(self, width: int) -> None:
        """Redraw for the terminal's new size: how many findings fit."""
        if self.view is not None:
            self.update_from(self.view)
