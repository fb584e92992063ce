"""The fleet report on a screen: the sections of `gpudiag fleet` (why slow first), one
tab each (keys 1-5, or the arrow keys on the tabs), each metric's history as a chart
(key c), and `gpudiag goodput`'s report on the fleet's own history (key g, computed when
first shown), scrollable with the keyboard; fits 80x24 and works with NO_COLOR. q quits."""

from __future__ import annotations

import contextlib
import os
import threading
from typing import TYPE_CHECKING, ClassVar

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.widgets import Footer, Header, Static, TabbedContent, TabPane

from gpudiag.fleet.analysis import FleetReport
from gpudiag.fleet.changes_text import chart_lines
from gpudiag.fleet.report import report_text
from gpudiag.inputs import one_line, printable
from gpudiag.termtext import wrap
from gpudiag.tui_base import GpudiagAppBase, KeysHelp

if TYPE_CHECKING:
    from gpudiag.fleet.records import LoadedFleet

SECTIONS = ("Why slow", "Configuration groups", "Outliers", "History", "Findings")
RACKS = "Racks"  # a sixth tab where the fleet has NVLink domains (gpudiag/fleet/rack.py)
# the tabs' labels: the sections' titles, short enough that every tab (Racks too) fits
# 80 columns: the report's own title, "Configuration groups", did not ('g Goodput' hidden)
LABELS = {"Configuration groups": "Groups"}
GOODPUT_PENDING = "computed when this tab is first shown"
GOODPUT_COMPUTING = "reading the fleet's history for failures..."


def titles(report: FleetReport) -> tuple[str, ...]:
    """The tabs' titles: the sections, and Racks where the report has racks."""
    return (*SECTIONS, RACKS) if report.racks else SECTIONS


MAX_BAD_SHOWN = 8


def unreadable_lines(report: FleetReport) -> list[str]:
    """The files that could not be read, each with why (at most MAX_BAD_SHOWN)."""
    if not report.bad:
        return []
    lines = [f"{len(report.bad)} unreadable file{'s' if len(report.bad) != 1 else ''}, skipped:"]
    lines += [f"  {problem}" for problem in report.bad[:MAX_BAD_SHOWN]]
    if len(report.bad) > MAX_BAD_SHOWN:
        lines.append(f"  and {len(report.bad) - MAX_BAD_SHOWN} more (named on stderr on exit)")
    return lines


def unreadable_title(report: FleetReport) -> str:
    """The screen's subtitle part for unreadable files: the first one's name."""
    if not report.bad:
        return "0 unreadable"
    first = os.path.basename(report.bad[0].split(": ", 1)[0])
    more = f" and {len(report.bad) - 1} more" if len(report.bad) > 1 else ""
    return printable(f"{len(report.bad)} unreadable: {first}{more}")


def history_chart_text(report: FleetReport) -> str:
    """The Charts tab: each metric's history as a bar a run, '|' where a change starts."""
    lines = chart_lines(report.history)
    if not lines:
        return "no node measured more than once"
    return "each metric's history, a bar a run, | where a change starts:\n" + "\n".join(lines)


def goodput_text(loaded: LoadedFleet | None) -> str:
    """The goodput tab: `gpudiag goodput`'s report at its defaults on the fleet's own
    history (fleet/goodput_report.py), or one line saying why there is none."""
    if loaded is None:
        return "no goodput report: the screen was given no snapshots"
    from gpudiag.fleet.goodput_report import fleet_text  # numpy's simulation: on demand

    return fleet_text(loaded).rstrip("\n")


def sections(report: FleetReport) -> dict[str, str]:
    """The text report cut into its sections, by title; the first starts with the
    verdict and the files that could not be read."""
    text = report_text(report)
    out: dict[str, list[str]] = {SECTIONS[0]: [report.verdict(), *unreadable_lines(report)]}
    current = None
    for line in text.splitlines():
        if line in SECTIONS or line == RACKS:
            current = line
            out.setdefault(current, [])
        elif current is not None and line:
            out[current].append(line.strip() if not line.startswith("      ") else line[4:])
    return {title: "\n".join(lines) for title, lines in out.items()}


HELP = """gpudiag fleet keys (Esc closes)
  1-5  Why slow, Groups (configuration), Outliers,
       History, Findings; 6 Racks where there are
  c    each metric's history as a chart
  g    gpudiag goodput's report on this history
  arrow keys  the tabs; Page Up/Down scroll
  ?    this help
  q    quit (exit 0 nothing odd, 1 something is,
       3 only some input was bad)"""


class FleetApp(GpudiagAppBase):
    """One fleet report, read-only."""

    TITLE = "gpudiag fleet"
    # with a Racks tab, 8 tabs fit 80 columns only a column apart
    CSS = "TabbedContent.narrow Tab { padding: 0 0 0 1; }"
    # the tabs name 1-6; the footer the rest (at 80 columns it showed only q Quit)
    BINDINGS: ClassVar[list[Binding]] = [
        Binding("q", "quit", "Quit"),
        *(
            Binding(str(i), f"show({i})", title, show=False)
            for i, title in enumerate((*SECTIONS, RACKS), 1)
        ),
        Binding("c", "show_charts", "Charts"),
        Binding("g", "show_goodput", "Goodput"),
        Binding("question_mark", "help", "Help"),
    ]

    def __init__(self, report: FleetReport, loaded: LoadedFleet | None = None) -> None:
        super().__init__()
        self.report = report
        self.loaded = loaded  # the snapshots, for the goodput tab
        self.goodput_started = False
        self.goodput: str | None = None  # its text, once computed
        self.texts = sections(report)  # unwrapped: wrapped at the screen's width (_rewrap)

    def compose(self) -> ComposeResult:
        yield Header()
        texts = self.texts
        with TabbedContent(classes="narrow" if self.report.racks else ""):
            for i, title in enumerate(titles(self.report), 1):
                label = f"{i} {LABELS.get(title, title)}"
                with TabPane(label, id=f"section-{i}"), VerticalScroll():
                    yield Static(texts.get(title, ""), markup=False, id=f"text-{i}")
            with TabPane("c Charts", id="section-charts"), VerticalScroll():
                yield Static(history_chart_text(self.report), markup=False, id="text-charts")
            with TabPane("g Goodput", id="section-goodput"), VerticalScroll():
                yield Static(GOODPUT_PENDING, markup=False, id="text-goodput")
        yield Footer()

    def action_show(self, number: int) -> None:
        """Show section `number` (1-5, 6 the racks where there are)."""
        if number > len(titles(self.report)):
            return
        self.query_one(TabbedContent).active = f"section-{number}"

    def action_help(self) -> None:
        """The keys, in a dialog."""
        self.push_screen(KeysHelp(HELP, 56))

    def action_show_charts(self) -> None:
        """Show the history charts (changes_text.py)."""
        self.query_one(TabbedContent).active = "section-charts"

    def action_show_goodput(self) -> None:
        """Show the goodput report (computed when first shown)."""
        self.query_one(TabbedContent).active = "section-goodput"

    def on_tabbed_content_tab_activated(self, event: TabbedContent.TabActivated) -> None:
        """The goodput tab's report, computed the first time it is shown (not at start:
        the screen opens without reading the fleet's history again)."""
        if event.pane.id != "section-goodput" or self.goodput_started:
            return
        self.goodput_started = True
        self.query_one("#text-goodput", Static).update(GOODPUT_COMPUTING)
        threading.Thread(target=self._compute_goodput, name="gpudiag-goodput", daemon=True).start()

    def _compute_goodput(self) -> None:
        """goodput_text off the UI thread (about 1 ms a snapshot: seconds on a large
        fleet); a daemon, so q leaves at once, the reading unfinished."""
        try:
            text = goodput_text(self.loaded)
        except Exception as exc:  # a bug: said in the tab, the rest of the screen stays
            text = one_line(f"goodput failed: {type(exc).__name__}: {exc}")
        with contextlib.suppress(RuntimeError):  # the app has left meanwhile
            self.call_from_thread(self._show_goodput, text)

    def _show_goodput(self, text: str) -> None:
        self.goodput = text
        self.query_one("#text-goodput", Static).update(text)

    def on_mount(self) -> None:
        r = self.report
        self.sub_title = f"{r.nodes} nodes, {r.snapshots} snapshots, {unreadable_title(r)}"
        self._rewrap()

    def on_resize(self) -> None:
        self._rewrap()

    def _rewrap(self) -> None:
        """Each section's lines wrapped at the screen's width less the scroll bar, each
        continued 2 columns in from its own indent (Textual's own wrap starts them at
        column 0, under the line's indent)."""
        width = max(self.size.width - 2, 1)
        for i, title in enumerate(titles(self.report), 1):
            lines = self.texts.get(title, "").split("\n")
            wrapped = [part for line in lines for part in wrap(line, width, _indent(line) + 2)]
            self.query_one(f"#text-{i}", Static).update("\n".join(wrapped))


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))
