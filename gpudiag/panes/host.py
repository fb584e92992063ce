"""The host pane (key 5): the node's readings as a tree of groups; the highlighted
reading in full below (the tree's lines are cut at the screen's edge)."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.widgets import Static, Tree

from gpudiag.model import Reading
from gpudiag.panes.base import DETAIL_CSS, Pane, SnapshotView, reading_detail

HINT = "Enter or Space opens a group; the highlighted reading is shown here in full"


class HostPane(Pane):
    """Every host reading, grouped (CPU, memory, PCIe, ...)."""

    KEY, NAME, TITLE, FOCUS = "5", "host", "Host", "#host"
    LAZY = True
    DEFAULT_CSS = f"""
    #host {{ height: 1fr; }}
    #host-detail {{ {DETAIL_CSS} min-height: 3; border-top: solid $accent; }}
    """

    def compose(self) -> ComposeResult:
        yield Tree(Text("host"), id="host")
        yield Static("", id="host-detail")

    def update_from(self, view: SnapshotView) -> None:
        from gpudiag import views

        tree: Tree[Reading] = self.query_one("#host", Tree)
        tree.clear()
        tree.root.set_label(Text(view.snapshot.host))
        for head, groups in views.host_tree(view.snapshot).items():
            count = sum(len(r) for r in groups.values())
            branch = tree.root.add(Text(f"{head} ({count})"))
            for sub, readings in groups.items():
                parent = branch if not sub else branch.add(Text(sub))
                for reading in readings:
                    label = Text(f"{reading.key} = {reading.display()}")
                    parent.add_leaf(label, data=reading)
        tree.root.expand()
        self.query_one("#host-detail", Static).update(Text(HINT))

    def on_tree_node_highlighted(self, event: Tree.NodeHighlighted[Reading]) -> None:
        """The highlighted reading in full, with its source; a group, its name."""
        reading = event.node.data
        detail = (
            reading_detail(reading.key, reading.display(), reading.source)
            if reading is not None
            else event.node.label
        )
        self.query_one("#host-detail", Static).update(detail)
