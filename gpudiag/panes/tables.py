"""The panes' tables: imported when a pane that has one is built, not before the first
screen (Textual's DataTable takes a few milliseconds to import)."""

from __future__ import annotations

from typing import ClassVar

from textual.binding import Binding
from textual.widgets import DataTable


class RowTable(DataTable):
    """A table of rows (cursor_type "row"): Home and End go to the first and last row, as
    in a list, not sideways to the first and last column as DataTable's do."""

    BINDINGS: ClassVar[list[Binding]] = [
        Binding("home", "scroll_top", "First row", show=False),
        Binding("end", "scroll_bottom", "Last row", show=False),
    ]
