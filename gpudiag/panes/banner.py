"""The line above the tabs: the host, its health and the count of each severity."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static

from gpudiag.model import Severity
from gpudiag.panes.base import SEVERITY_STYLE, SnapshotView


class Banner(Static):
    """The node's health in one line, or what the app is doing before it has a snapshot."""

    DEFAULT_CSS = "Banner { height: auto; padding: 0 1; }"

    def update_from(self, view: SnapshotView) -> None:
        from gpudiag.session import severity_counts

        snapshot = view.snapshot
        counts = severity_counts(snapshot.findings)
        worst = snapshot.worst_severity()
        health = "OK" if worst in (None, Severity.INFO) else worst.value.upper()
        style = SEVERITY_STYLE.get(worst, "") if worst else ""
        banner = Text(f"{snapshot.host}  health: ")
        banner.append(health, style or "bold green")
        banner.append("   ")
        for severity, count in counts.items():  # not-applicable: the overview's Rules line
            banner.append(f"{severity.value.upper()} {count}  ", SEVERITY_STYLE[severity])
        self.update(banner)

    def probing(self) -> None:
        """Before the first snapshot, and while probing again."""
        self.update("probing the node ...")

    def failed(self, error: BaseException | None) -> None:
        """Probing failed: the snapshot on screen (if any) is not the node's now."""
        self.update(Text(f"UNKNOWN: probing failed: {type(error).__name__}: {error}", "magenta"))
