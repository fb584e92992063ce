"""The host pane (key 5): the node's readings as a tree of groups."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.widgets import Tree

from gpudiag.panes.base import Pane, SnapshotView


class HostPane(Pane):
    """Every host reading, grouped (CPU, memory, PCIe, ...)."""

    KEY, NAME, TITLE, FOCUS = "5", "host", "Host", "#host"
    LAZY = True

    def compose(self) -> ComposeResult:
        yield Tree(Text("host"), id="host")

    def update_from(self, view: SnapshotView) -> None:
        from gpudiag import views

        tree: Tree[None] = self.query_one("#host", Tree)
        tree.clear()
        tree.root.set_label(Text(view.snapshot.host))
        for head, groups in views.host_tree(view.snapshot).items():
            count = sum(len(r) for r in groups.values())
            branch = tree.root.add(Text(f"{head} ({count})"))
            for sub, readings in groups.items():
                parent = branch if not sub else branch.add(Text(sub))
                for reading in readings:
                    parent.add_leaf(Text(f"{reading.key} = {reading.display()}"))
        tree.root.expand()
