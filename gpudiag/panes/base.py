"""What every pane shares: the snapshot as the panes read it (judged once, when it
arrives), the pane base class, and the severity styles."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from rich.text import Text
from textual.compose import compose
from textual.widget import Widget
from textual.widgets import TabbedContent, TabPane

from gpudiag.model import Reading, Severity, Snapshot

if TYPE_CHECKING:
    from textual.widgets import DataTable

    from gpudiag.rulefile import Rule

# Severity reads by words and weight first, colour second: CRITICAL is the strongest mark
# on screen (bold, reversed: a block under NO_COLOR too), WARNING bold, INFO dim.
SEVERITY_STYLE = {
    Severity.CRITICAL: "bold reverse red",
    Severity.WARNING: "bold yellow",
    Severity.UNKNOWN: "magenta",
    Severity.INFO: "dim",
    Severity.NOT_APPLICABLE: "dim",
}
HEALTH_STYLE = {
    "CRIT": SEVERITY_STYLE[Severity.CRITICAL],
    "WARN": SEVERITY_STYLE[Severity.WARNING],
    "UNKN": SEVERITY_STYLE[Severity.UNKNOWN],
    "OK": "green",
}


@dataclass(frozen=True)
class SnapshotView:
    """A snapshot and what the panes read beside it, derived once when it arrives:
    panes only read this, none judges again."""

    snapshot: Snapshot
    readings: dict[str, Reading]  # every reading, derived ones included
    profile_values: dict[str, object]  # the matched GPU profile's, or none
    rules: Sequence[Rule] | None  # the rules that judged it, when known
    live: bool  # the snapshot is of this machine, now (its processes can be listed)

    @classmethod
    def read(
        cls,
        snapshot: Snapshot,
        rules: Sequence[Rule] | None = None,
        live: bool = False,
    ) -> SnapshotView:
        """What the panes show of a judged snapshot, read once per snapshot: its readings,
        derived ones included, and its profile's values, as `session.with_findings` stored
        them (nothing is derived or judged here). The first snapshot imports the rules'
        modules, not the first screen."""
        from gpudiag.session import judged_readings

        readings, found, _ = judged_readings(snapshot)
        values = found.values if found is not None else {}
        return cls(snapshot, readings, values, rules, live)


class Pane(TabPane):
    """One screen of the app, in a tab: its key, its bindings, and `update_from`, which
    draws it from a snapshot and nothing else.

    A pane whose app sets `build_later` (gpudiag's app does for every tab but the first)
    composes and mounts its widgets when the app asks (`build`), not with the app: the
    first screen is painted without making the hidden ones' hundreds of widgets or
    applying their styles (benchmarks/tui_startup.py). What a pane does once its widgets
    are there is `on_built`, where a widget would use on_mount."""

    KEY: ClassVar[str]  # the number key that shows it
    NAME: ClassVar[str]  # its id is NAME-tab
    TITLE: ClassVar[str]
    FOCUS: ClassVar[str]  # the widget its key focuses
    LAZY: ClassVar[bool] = False  # drawn when first shown, not when the snapshot arrives

    def __init__(self) -> None:
        super().__init__(self.TITLE, id=f"{self.NAME}-tab")
        self.build_later = False  # compose and mount the widgets on `build`, not with the app
        self._building = False  # `build` has begun
        self._built = asyncio.Event()

    @property
    def built(self) -> bool:
        """Whether this pane's widgets are mounted (it can be drawn and queried)."""
        return self._built.is_set()

    async def _compose(self) -> None:
        """Textual's compose step, as Screen extends it: a pane built later is composed
        by `build` instead."""
        if not self.build_later:
            await super()._compose()

    async def mount_composed_widgets(self, widgets: list[Widget]) -> None:
        """Textual's hook after compose: the widgets are mounted, the pane built."""
        await super().mount_composed_widgets(widgets)
        self._done()

    async def build(self) -> bool:
        """Compose and mount this pane's widgets, once; returns when they are there
        (True), or False when they never will be (the app is leaving)."""
        if self.build_later and not self._building:
            self._building = True
            widgets = list(compose(self))
            await self.mount_all(widgets)
            if not all(w.is_attached for w in widgets):
                return False
            self._done()
        await self._built.wait()
        return True

    def _done(self) -> None:
        self._built.set()
        self.on_built()

    def on_built(self) -> None:
        """Set up the widgets once mounted (columns, widths)."""

    def update_from(self, view: SnapshotView) -> None:
        """Draw this pane from a snapshot."""
        raise NotImplementedError

    def fit_width(self, width: int) -> None:
        """Size what depends on the terminal's width (once built, and on each resize)."""

    def table(self, selector: str) -> DataTable:
        """The table `selector` names in this pane (Textual's DataTable is imported when a
        pane is built, not before the first screen)."""
        from textual.widgets import DataTable

        return self.query_one(selector, DataTable)

    def show(self) -> None:
        """Bring this pane to the front and focus its main widget, as its key does."""
        self.screen.query_one(TabbedContent).active = self.id or ""
        if self.built:
            self.query_one(self.FOCUS).focus()


def size_reading_columns(table: DataTable, width: int) -> None:
    """Reading, value and source share the terminal's width (key 40%, value 35%): long
    ones are cut there, and the highlighted one is shown in full elsewhere."""
    room = max(40, width - 8)  # less padding, scrollbar
    key, value = room * 40 // 100, room * 35 // 100
    rows = [table.get_row_at(i) for i in range(table.row_count)]
    table.clear(columns=True)
    table.add_column("reading", width=key)
    table.add_column("value", width=value)
    table.add_column("source", width=room - key - value)
    for row in rows:
        table.add_row(*row)


def fit_whole_columns(table: DataTable, widths: Sequence[int], room: int) -> None:
    """Make `table` as wide as its whole columns that fit `room` (`widths`: each column's,
    padding included; a last column's right padding may go), so that a column is never
    cut at the edge (the others scroll into view); its own width when all fit."""
    shown = 0
    for width in widths:
        if shown + width - 1 > room:
            break
        shown += width
    table.styles.width = min(shown, room) if shown < sum(widths) else None


def reading_detail(key: object, value: object, source: object) -> Text:
    """A reading in full, as the detail under a table or tree of readings shows it: the
    key and value, then the source (a detail's height follows it: DETAIL_CSS)."""
    return Text(f"{key} = {value}\n{source}")


# A reading's detail: as tall as the reading wrapped (the source went out of sight under a
# value longer than a line), two lines at least, so that moving along short readings
# keeps the layout still; at most half the pane.
DETAIL_CSS = "height: auto; min-height: 2; max-height: 50%; padding: 0 1;"


def reading_row(reading: Reading) -> tuple[Text, Text, Text]:
    """A reading's cells: Text, not str, since a str cell is Rich markup and
    "[missing] ..." would vanish."""
    return Text(reading.key), Text(reading.display()), Text(reading.source)
