"""The terminal UI. Everything on screen is rendered from a snapshot: a live node's
(probed in a worker thread, results streamed in as they arrive) or a saved one.

Screens (tabs, keys 1-8): overview, findings (filter, sort, detail), GPUs (one row each,
all readings of the selected one), topology, host (a tree of readings), kernels (run
with progress and cancel, results and charts), readings, probes. Every action has a key
(the help screen, ?, lists them) and a command-palette entry (ctrl+p). Severity is
always written as text; colour only repeats it.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import ClassVar

from rich.text import Text
from textual import events, on, work
from textual.app import App, ComposeResult, SystemCommand
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen, Screen
from textual.widgets import (
    Button,
    DataTable,
    Footer,
    Header,
    Input,
    Label,
    OptionList,
    ProgressBar,
    Static,
    TabbedContent,
    TabPane,
    Tree,
)
from textual.worker import Worker, WorkerState

from gpudiag import views
from gpudiag.kernels.plans import KERNELS, PLANS, KernelPlan
from gpudiag.model import Finding, ProbeResult, Reading, Severity, Snapshot
from gpudiag.nvml import ReplayBackend
from gpudiag.session import LiveNode, judged_readings, severity_counts, with_findings
from gpudiag.snapshot import save, target_problem
from gpudiag.watch import History

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
class Tab:
    """One screen of the app: its key, id and title."""

    key: str
    id: str
    title: str


TABS = (
    Tab("1", "overview", "Overview"),
    Tab("2", "findings", "Findings"),
    Tab("3", "gpus", "GPUs"),
    Tab("4", "topology", "Topology"),
    Tab("5", "host", "Host"),
    Tab("6", "kernels", "Kernels"),
    Tab("7", "readings", "Readings"),
    Tab("8", "probes", "Probes"),
    Tab("9", "watch", "Watch"),
)
WATCH_INTERVAL_S = 1.0
# Screens drawn when first shown after a snapshot arrives (tab id: drawing method).
LAZY_SCREENS = {
    "topology-tab": "show_topology",
    "host-tab": "show_host",
    "kernels-tab": "show_kernels",
    "readings-tab": "show_readings",
}
# Every key the app answers to, for the bindings, the help screen and the palette.
ACTIONS = (
    ("q", "quit", "Quit", True),
    ("question_mark", "help", "Help", True),
    ("r", "refresh", "Refresh", True),
    ("e", "export", "Export", True),
    ("slash", "search", "Search", True),
    ("k", "run_kernels('quick')", "Kernels", True),
    ("K", "run_kernels('full')", "Kernels at full sizes (burn if ticked)", False),
    ("x", "cancel_kernels", "Cancel kernels", True),
    ("u", "toggle_until_confident", "Until confident", True),
    ("s", "sort_findings", "Sort", True),
    ("f", "filter_severity", "Severity", True),
)
KEY_NAMES = {"question_mark": "?", "slash": "/"}
HELP_TITLES = {
    "K": "Kernels, full sizes",
    "f": "Filter by severity",
    "s": "Sort findings",
    "u": "Kernels until confident",
}
# Actions that act on one screen only (shown in the footer there) and actions a saved
# snapshot or a replay refuses (not shown for them).
SCREEN_ACTIONS = {
    "sort_findings": "findings-tab",
    "filter_severity": "findings-tab",
    "toggle_until_confident": "kernels-tab",
}
UNTIL_CONFIDENT_S = 60.0  # the budget `u` gives STREAM to tighten its intervals
LIVE_ACTIONS = ("refresh", "run_kernels", "cancel_kernels", "toggle_until_confident")
MEASURING_ACTIONS = ("run_kernels", "cancel_kernels", "toggle_until_confident")


class HelpScreen(ModalScreen[None]):
    """Every key, in one place: two columns (screens, actions), so that it fits 80x24
    without scrolling and 60x20 without clipping."""

    BINDINGS: ClassVar[list[Binding]] = [
        Binding("escape,q,question_mark", "dismiss", "Close"),
    ]
    DEFAULT_CSS = """
    HelpScreen { align: center middle; }
    #help { width: 46; max-width: 100%; height: auto; max-height: 100%;
            border: round $accent; padding: 0 1; background: $panel; }
    """

    def compose(self) -> ComposeResult:
        screens = [f"{tab.key}  {tab.title}" for tab in TABS]
        actions = [
            f"{KEY_NAMES.get(key, key):<2} {HELP_TITLES.get(key, title)}"
            for key, _action, title, _shown in ACTIONS
        ]
        left = max(len(line) for line in screens) + 2
        rows = max(len(screens), len(actions))
        screens += [""] * (rows - len(screens))
        actions += [""] * (rows - len(actions))
        lines = ["gpudiag keys (Esc closes)"]
        lines += [f"{a:<{left}}{b}".rstrip() for a, b in zip(screens, actions, strict=True)]
        lines += ["ctrl+p: the same in the command palette", "Esc leaves a text field"]
        yield VerticalScroll(Static(Text("\n".join(lines))), id="help")


class ConfirmKernels(ModalScreen[bool]):
    """Kernels load every GPU and CPU they run on: ask first, saying which GPUs have
    processes (a node may be running jobs). y or Enter runs, n or Esc does not."""

    BINDINGS: ClassVar[list[Binding]] = [
        Binding("y,enter", "answer(True)", "Run"),
        Binding("n,escape", "answer(False)", "Cancel"),
    ]
    DEFAULT_CSS = """
    ConfirmKernels { align: center middle; }
    #confirm { width: 100%; max-width: 76; height: auto; max-height: 100%;
               border: round $accent; padding: 0 1; background: $panel; }
    """

    def __init__(self, question: str) -> None:
        super().__init__()
        self.question = question

    def compose(self) -> ComposeResult:
        yield VerticalScroll(Static(Text(self.question)), id="confirm")

    def action_answer(self, run: bool) -> None:
        self.dismiss(run)


class ExportScreen(ModalScreen[Path | None]):
    """Asks for a file name; an existing file needs Enter a second time to overwrite."""

    BINDINGS: ClassVar[list[Binding]] = [Binding("escape", "cancel", "Cancel")]
    DEFAULT_CSS = """
    ExportScreen { align: center middle; }
    #export { width: 100%; max-width: 70; height: auto; border: round $accent; padding: 0 1;
              background: $panel; }
    #export Input { border: none; height: 1; }
    """

    def __init__(self, default: str) -> None:
        super().__init__()
        self.default = default
        self.confirming: Path | None = None

    def compose(self) -> ComposeResult:
        with Vertical(id="export"):
            yield Label("Export the snapshot to (TOML; .json for JSON):")
            yield Input(self.default, id="export-path", select_on_focus=False)
            yield Label("Enter writes, Esc cancels", id="export-note")

    def on_mount(self) -> None:
        self.query_one(Input).cursor_blink = False

    @on(Input.Submitted)
    def submitted(self, event: Input.Submitted) -> None:
        path = Path(event.value.strip()).expanduser()
        note = self.query_one("#export-note", Label)
        if not event.value.strip():
            note.update("a file name is needed")
        elif problem := target_problem(path):
            note.update(f"{path}: {problem}")
        elif path.exists() and self.confirming != path:
            self.confirming = path
            note.update(f"{path} exists: Enter again overwrites it, Esc cancels")
        else:
            self.dismiss(path)

    @on(Input.Changed)
    def changed(self) -> None:
        self.confirming = None

    def action_cancel(self) -> None:
        self.dismiss(None)


class KernelChoice(OptionList):
    """The kernels to run, each ticked or not, written "[x]" or "[ ]" so that the state
    reads without colour; space or enter toggles the highlighted one."""

    BINDINGS: ClassVar[list[Binding]] = [Binding("space", "toggle", "Tick", show=False)]

    def __init__(self, ticked: Iterable[str], id: str | None = None) -> None:
        self.ticked = set(ticked)
        super().__init__(*(self._prompt(name) for name in KERNELS), id=id)

    def _prompt(self, name: str) -> Text:
        return Text(f"[{'x' if name in self.ticked else ' '}] {name}")

    @property
    def selected(self) -> list[str]:
        """The ticked kernels, in the order they run."""
        return [name for name in KERNELS if name in self.ticked]

    def action_toggle(self) -> None:
        if self.highlighted is None:
            return
        name = KERNELS[self.highlighted]
        self.ticked ^= {name}
        self.replace_option_prompt_at_index(self.highlighted, self._prompt(name))

    @on(OptionList.OptionSelected)
    def _selected(self, event: OptionList.OptionSelected) -> None:
        event.stop()
        self.action_toggle()


def leave_on_signals(app: App[int], before: Callable[[], None] = lambda: None) -> None:
    """SIGTERM and SIGHUP leave the app as `q` does, so Textual restores the terminal
    (alternate screen, mouse tracking, cursor); the exit code is 128 + the signal's
    number, as a shell reports a process the signal ended. Call from on_mount."""
    loop = asyncio.get_running_loop()

    def leave(signum: int) -> None:
        before()
        app.exit(return_code=128 + signum)

    for signum in (signal.SIGTERM, signal.SIGHUP):
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.add_signal_handler(signum, leave, signum)


class GpudiagApp(App[int]):
    """gpudiag's TUI, built from a live node or a saved snapshot."""

    TITLE = "gpudiag"
    CSS = """
    #banner { height: auto; padding: 0 1; }
    TabbedContent { height: 1fr; }
    TabPane { padding: 0; }
    .filter { height: 1; border: none; padding: 0 1; }
    #findings { height: 1fr; }
    #finding-detail { height: 8; border-top: solid $accent; padding: 0 1; }
    #gpus { height: auto; max-height: 10; }
    #gpu-note { height: auto; padding: 0 1; display: none; }
    #gpu-readings { height: 1fr; border-top: solid $accent; }
    #overview { padding: 0 1; }
    #readings { height: 1fr; }
    #reading-detail { height: 3; padding: 0 1; border-top: solid $accent; }
    #kernel-top { height: 7; }
    #kernel-choice { width: 16; height: 7; }
    #kernel-run { height: 7; }
    #kernel-controls { height: 1; }
    #kernel-hint { padding: 0 1; color: $text-muted; }
    #kernel-controls Button { margin-right: 1; }
    #kernel-status { height: 1; padding: 0 1; }
    #kernel-progress { height: 1; padding: 0 1; }
    #kernel-results { height: auto; max-height: 12; }
    #kernel-charts { height: auto; padding: 0 1; }
    #watch-status { height: 1; padding: 0 1; }
    #watch { padding: 0 1; }
    """
    BINDINGS: ClassVar[list[Binding]] = [
        *(Binding(tab.key, f"show_tab('{tab.id}')", tab.title, show=False) for tab in TABS),
        *(Binding(key, action, title, show=shown) for key, action, title, shown in ACTIONS),
    ]

    def __init__(
        self, source: LiveNode | Snapshot, plans: dict[str, KernelPlan] | None = None
    ) -> None:
        super().__init__()
        self._width = 0  # the terminal's, from the last resize
        self.source = source
        self.snapshot: Snapshot | None = source if isinstance(source, Snapshot) else None
        self.plans = PLANS if plans is None else plans
        self.shown_findings: list[Finding] = []
        self.readings: dict[str, Reading] = {}
        self.profile_values: dict[str, object] = {}
        self.severity_filter: Severity | None = None
        self.sort_key = "severity"
        self.kernel_cancel = threading.Event()
        self.watch_history = History(length=300)  # 5 minutes at 1 s
        self.watch_gpus: int | None = None
        self.stale: set[str] = set()
        self.host_load = None
        self.until_confident: float | None = None
        self.kernels_running = False

    # ------------------------------------------------------------------ layout

    def compose(self) -> ComposeResult:
        yield Header()
        yield Static("", id="banner")
        with TabbedContent(initial="overview-tab"):
            with TabPane("Overview", id="overview-tab"):
                yield VerticalScroll(Static("", id="overview-text"), id="overview")
            with TabPane("Findings", id="findings-tab"):
                yield Input(
                    placeholder="/ filter: text in id, subject, title",
                    id="findings-filter",
                    classes="filter",
                )
                yield DataTable(
                    id="findings", cursor_type="row", zebra_stripes=True, fixed_columns=1
                )
                yield VerticalScroll(Static("", id="finding-text"), id="finding-detail")
            with TabPane("GPUs", id="gpus-tab"):
                yield Static("", id="gpu-note")
                yield DataTable(id="gpus", cursor_type="row", zebra_stripes=True, fixed_columns=2)
                yield DataTable(id="gpu-readings", cursor_type="row")
            with TabPane("Topology", id="topology-tab"):
                yield DataTable(id="topology", cursor_type="row")
                yield Static("", id="topology-legend")
            with TabPane("Host", id="host-tab"):
                yield Tree("host", id="host")
            with TabPane("Kernels", id="kernels-tab"), VerticalScroll(id="kernels"):
                with Horizontal(id="kernel-top"):
                    yield KernelChoice(self.plans["quick"].kernels, id="kernel-choice")
                    with Vertical(id="kernel-run"):
                        with Horizontal(id="kernel-controls"):
                            yield Button(Text("Quick [k]"), id="run-quick", compact=True)
                            yield Button(Text("Full [K]"), id="run-full", compact=True)
                            yield Button(
                                Text("Cancel [x]"),
                                id="cancel-kernels",
                                compact=True,
                                disabled=True,
                            )
                        yield Label("", id="kernel-status")
                        yield ProgressBar(total=1.0, show_eta=False, id="kernel-progress")
                        yield Label(
                            Text("space ticks a kernel; k runs them at quick sizes, K at full"),
                            id="kernel-hint",
                        )
                yield DataTable(id="kernel-results", cursor_type="row", zebra_stripes=True)
                yield Static("", id="kernel-charts")
            with TabPane("Readings", id="readings-tab"):
                yield Input(
                    placeholder="/ filter: text in key, value, source",
                    id="readings-filter",
                    classes="filter",
                )
                yield DataTable(id="readings", cursor_type="row", zebra_stripes=True)
                yield Static("", id="reading-detail")
            with TabPane("Probes", id="probes-tab"):
                yield DataTable(id="probes", cursor_type="row")
            with TabPane("Watch", id="watch-tab"):
                yield Label("", id="watch-status")
                yield VerticalScroll(Static("", id="watch-text"), id="watch")
        yield Footer()

    def on_mount(self) -> None:
        leave_on_signals(self, self._stop_work)
        self.query_one("#findings", DataTable).add_columns("severity", "id", "subject", "title")
        self.query_one("#probes", DataTable).add_columns(
            "probe", "status", "time", "readings", "error"
        )
        self._size_reading_columns()
        self.query_one("#kernel-results", DataTable).add_columns(*views.kernel_table([]).headers)
        for field in self.query(Input):
            field.cursor_blink = False
        if isinstance(self.source, Snapshot):
            self.sub_title = f"{self.source.host} (saved {self.source.created}, read-only)"
            self.show_snapshot(self.source)
            self._kernel_status("a saved snapshot: its kernel results are shown, none run")
        else:
            self._kernel_status("ready")
            self.action_refresh()
        self.query_one("#overview", VerticalScroll).focus()
        self.set_interval(WATCH_INTERVAL_S, self._watch_tick)

    # ------------------------------------------------------------------ actions

    def _draw_if_stale(self, tab_id: str) -> None:
        """Draw a screen whose snapshot changed while it was hidden."""
        if tab_id in self.stale and self.snapshot is not None:
            self.stale.discard(tab_id)
            getattr(self, LAZY_SCREENS[tab_id])()

    def action_show_tab(self, tab: str) -> None:
        """Switch to a tab and focus its main widget."""
        self.query_one(TabbedContent).active = f"{tab}-tab"
        self._draw_if_stale(f"{tab}-tab")
        target = {"overview": "#overview", "kernels": "#kernel-choice"}.get(tab, f"#{tab}")
        self.query_one(target).focus()

    def action_refresh(self) -> None:
        """Probe the live node again (a saved snapshot cannot be refreshed)."""
        if not isinstance(self.source, LiveNode):
            self.notify("a saved snapshot is read-only", severity="warning")
            return
        self.query_one("#probes", DataTable).clear()
        self.query_one("#banner", Static).update("probing the node ...")
        self.probe_node()

    def action_help(self) -> None:
        """Show every key."""
        self.push_screen(HelpScreen())

    def action_search(self) -> None:
        """Focus the filter of the findings (or, on the readings screen, of the readings)."""
        tabs = self.query_one(TabbedContent)
        if tabs.active != "readings-tab":
            tabs.active = "findings-tab"
        target = "#readings-filter" if tabs.active == "readings-tab" else "#findings-filter"
        self.query_one(target, Input).focus()

    def action_sort_findings(self) -> None:
        """Sort the findings by the next key: severity, id, subject."""
        keys = views.SORT_KEYS
        self.sort_key = keys[(keys.index(self.sort_key) + 1) % len(keys)]
        self.action_show_tab("findings")
        self.show_findings()
        self.notify(f"findings sorted by {self.sort_key}")

    def action_filter_severity(self) -> None:
        """Show only one severity, the next each time, then all again."""
        order: list[Severity | None] = [None, *Severity]
        self.severity_filter = order[(order.index(self.severity_filter) + 1) % len(order)]
        self.action_show_tab("findings")
        self.show_findings()
        shown = self.severity_filter.value if self.severity_filter else "every severity"
        self.notify(f"findings: {shown}")

    def action_export(self) -> None:
        """Ask for a file name and write the snapshot there (atomically)."""
        if self.snapshot is None:
            self.notify("nothing to export yet: the node is still being probed", severity="warning")
            return
        default = f"gpudiag-{self.snapshot.host}.toml"
        self.push_screen(ExportScreen(default), self._export_to)

    def _export_to(self, path: Path | None) -> None:
        if path is None or self.snapshot is None:
            return
        try:
            save(self.snapshot, path)
        except OSError as exc:
            self.notify(f"cannot write {path}: {exc.strerror or exc}", severity="error")
            return
        self.notify(f"wrote {path}")

    def action_run_kernels(self, plan_name: str) -> None:
        """Run a kernel plan on this machine in a worker, with progress."""
        self.action_show_tab("kernels")
        if not isinstance(self.source, LiveNode) or self.snapshot is None:
            why = "a saved snapshot is read-only" if self.snapshot is not None else "probing"
            self.notify(f"kernels cannot run: {why}", severity="warning")
            return
        if not self.source.host.is_live or isinstance(self.source.nvml.backend, ReplayBackend):
            self.notify(
                "kernels measure this machine: not with --root or --nvml-replay",
                severity="warning",
            )
            return
        if self.kernels_running:
            self.notify("kernels are running: x cancels them", severity="warning")
            return
        chosen = tuple(self.query_one("#kernel-choice", KernelChoice).selected)
        if not chosen:
            self.notify("no kernel is ticked (space ticks one)", severity="warning")
            return
        question = self._kernel_question(plan_name, chosen)

        def answered(run: bool | None) -> None:
            if run and not self.kernels_running:
                self._start_kernels(plan_name, chosen)
            elif not run:
                self._kernel_status("not run (k asks again)")

        self.push_screen(ConfirmKernels(question), answered)

    def _kernel_question(self, plan_name: str, chosen: tuple[str, ...]) -> str:
        """What the confirmation says: what runs, and which GPUs have processes."""
        from gpudiag.processes import gpu_processes

        lines = [
            f"Run {', '.join(chosen)} at {plan_name} sizes on this machine?",
            "They load every device they run on until done (x cancels).",
            "",
        ]
        gpus = views.gpu_table(self.snapshot).rows if self.snapshot else ()
        busy = gpu_processes(self.readings)
        if not gpus:
            lines.append("No GPU seen: only the CPU kernels will run.")
        elif busy:
            lines.append("GPUs with processes (their jobs will slow, and the figures too):")
            lines += [f"  GPU {p.gpu}: {p.text}" for p in busy[:8]]
            if len(busy) > 8:
                lines.append(f"  ... and {len(busy) - 8} more")
        else:
            lines.append(f"NVML lists no process on any of the {len(gpus)} GPUs.")
        lines += ["", "y or Enter runs them, n or Esc does not"]
        return "\n".join(lines)

    def _start_kernels(self, plan_name: str, chosen: tuple[str, ...]) -> None:
        from gpudiag.run_report import HostLoad

        self.host_load = HostLoad()  # a busy host makes the figures untrustworthy: said
        self.kernels_running = True
        self.kernel_cancel.clear()
        self.query_one("#cancel-kernels", Button).disabled = False
        self._kernel_status(f"running {', '.join(chosen)} ({plan_name} sizes) ...")
        self.refresh_bindings()
        self.run_kernel_plan(plan_name, chosen)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """Hide (and refuse) what this source or screen cannot do, so that the footer
        shows only the keys that work here."""
        if action in LIVE_ACTIONS and not isinstance(self.source, LiveNode):
            return False
        if action in MEASURING_ACTIONS and not self._measurable():
            return False
        if action == "cancel_kernels" and not self.kernels_running:
            return False
        if action in SCREEN_ACTIONS and self.is_mounted:
            tabs = self.query(TabbedContent)
            return bool(tabs) and tabs.first().active == SCREEN_ACTIONS[action]
        return True

    def _measurable(self) -> bool:
        return (
            isinstance(self.source, LiveNode)
            and self.source.host.is_live
            and not isinstance(self.source.nvml.backend, ReplayBackend)
        )

    @on(TabbedContent.TabActivated)
    def _tab_changed(self) -> None:
        self.refresh_bindings()
        self._draw_if_stale(self.query_one(TabbedContent).active)
        if self.query_one(TabbedContent).active == "watch-tab":
            self._watch_tick()

    # ------------------------------------------------------------------ watch

    def _watch_tick(self) -> None:
        """Sample every GPU once, off the UI thread, while the watch screen is shown."""
        if self.query_one(TabbedContent).active != "watch-tab":
            return
        if not isinstance(self.source, LiveNode):
            self._watch_status("a saved snapshot has no live readings (gpudiag watch; demo)")
            return
        self.sample_gpus()

    @work(thread=True, exclusive=True, group="watch", exit_on_error=False)
    def sample_gpus(self) -> None:
        from gpudiag.nvml import NvmlError
        from gpudiag.watch import gpu_count, sample_node

        assert isinstance(self.source, LiveNode)
        try:
            if self.watch_gpus is None:
                self.watch_gpus = gpu_count(self.source.nvml)
            last = dict(self.watch_history.latest)  # for NVLink throughput since then
            samples = sample_node(self.source.nvml, self.watch_gpus, last)
        except NvmlError as exc:
            self.call_from_thread(self._watch_status, f"no GPU can be sampled: {exc.reason}")
            return
        self.call_from_thread(self._watch_show, samples)

    def _watch_status(self, text: str) -> None:
        self.query_one("#watch-status", Label).update(Text(text))

    def _watch_show(self, samples: list) -> None:
        from gpudiag.watch import screen_lines

        for sample in samples:
            self.watch_history.add(sample)
        count = len(self.watch_history.series.get((0, "power"), ()))
        self._watch_status(
            f"{self.watch_gpus} GPUs, every {WATCH_INTERVAL_S:g} s, {count} samples kept "
            f"(the last {self.watch_history.length})"
        )
        lines = screen_lines(self.watch_history, self.watch_gpus or 0, self.size.width - 3)
        self.query_one("#watch-text", Static).update(Text("\n".join(lines)))

    def action_toggle_until_confident(self) -> None:
        """STREAM runs its trials, or goes on until its intervals are tight (60 s at most)."""
        self.until_confident = None if self.until_confident else UNTIL_CONFIDENT_S
        self._kernel_status(
            f"STREAM goes on until its intervals are within 3% ({UNTIL_CONFIDENT_S:g} s at most)"
            if self.until_confident
            else "STREAM runs its trials only"
        )

    def action_cancel_kernels(self) -> None:
        """Stop the kernels at the next chunk."""
        if self.kernels_running:
            self.kernel_cancel.set()
            self._kernel_status("cancelling ...")

    async def action_quit(self) -> None:
        """Stop any probing and kernels, then leave."""
        self._stop_work()
        self.exit(0)

    def _stop_work(self) -> None:
        self.kernel_cancel.set()
        if isinstance(self.source, LiveNode):
            self.source.cancel.set()

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        """The command palette: Textual's own commands and every key's action."""
        yield from super().get_system_commands(screen)
        for tab in TABS:
            yield SystemCommand(
                f"Show {tab.title}", f"key {tab.key}", lambda t=tab.id: self.action_show_tab(t)
            )
        yield SystemCommand("Refresh", "probe the node again (r)", self.action_refresh)
        yield SystemCommand("Export snapshot", "write it to a file (e)", self.action_export)
        yield SystemCommand(
            "Run quick kernels",
            "STREAM, GEMM, copies (k)",
            lambda: self.action_run_kernels("quick"),
        )
        yield SystemCommand(
            "Run full kernels",
            "larger, with a burn (K)",
            lambda: self.action_run_kernels("full"),
        )
        yield SystemCommand("Cancel kernels", "x", self.action_cancel_kernels)
        yield SystemCommand("Search findings", "/", self.action_search)
        yield SystemCommand("Sort findings", "s", self.action_sort_findings)
        yield SystemCommand("Filter findings by severity", "f", self.action_filter_severity)
        yield SystemCommand("Help: every key", "?", self.action_help)

    # ------------------------------------------------------------------ workers

    @work(thread=True, exclusive=True, group="probe", exit_on_error=False)
    def probe_node(self) -> Snapshot:
        """Run the probes off the UI thread; each result is shown as it arrives."""
        assert isinstance(self.source, LiveNode)
        snapshot = self.source.snapshot(
            on_result=lambda result: self.call_from_thread(self.add_probe_row, result)
        )
        if self.snapshot is not None and self.snapshot.kernels:  # keep measured results
            snapshot = with_findings(
                replace(snapshot, kernels=self.snapshot.kernels),
                self.source.rules,
                self.source.profile_name,
            )
        self.call_from_thread(self.show_snapshot, snapshot)
        return snapshot

    @work(thread=True, exclusive=True, group="kernels", exit_on_error=False)
    def run_kernel_plan(self, plan_name: str, kernels: tuple[str, ...]) -> None:
        """Run the chosen kernels with a plan's sizes off the UI thread, reporting progress;
        results go into the snapshot."""
        from gpudiag.kernels.runner import PlanRun

        assert isinstance(self.source, LiveNode)
        run = PlanRun(
            replace(self.plans[plan_name], kernels=kernels, until_confident=self.until_confident),
            self.source.host,
            progress=lambda label, f: self.call_from_thread(self._kernel_progress, label, f),
            cancel=self.kernel_cancel,
            nvml=self.source.nvml,
        )
        try:
            results = run.run()
        finally:
            self.call_from_thread(self._kernels_finished)
        cancelled = self.kernel_cancel.is_set()
        self.call_from_thread(self._kernels_done, plan_name, tuple(results), cancelled)

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        if event.state is not WorkerState.ERROR:
            return
        error = event.worker.error
        if event.worker.group == "kernels":
            self._kernel_status(f"ERROR: kernels failed: {type(error).__name__}: {error}")
            return
        self.query_one("#banner", Static).update(
            Text(f"UNKNOWN: probing failed: {type(error).__name__}: {error}", "magenta")
        )

    def _kernel_status(self, text: str) -> None:
        self.query_one("#kernel-status", Label).update(Text(text))

    def _kernel_progress(self, label: str, fraction: float) -> None:
        self._kernel_status(f"{label}: {fraction:.0%}")
        self.query_one("#kernel-progress", ProgressBar).update(progress=fraction)

    def _kernels_finished(self) -> None:
        self.kernels_running = False
        self.refresh_bindings()
        self.query_one("#cancel-kernels", Button).disabled = True

    def _kernels_done(self, plan_name: str, results: tuple, cancelled: bool) -> None:
        assert isinstance(self.source, LiveNode) and self.snapshot is not None
        snapshot = replace(self.snapshot, kernels=results)
        self.show_snapshot(with_findings(snapshot, self.source.rules, self.source.profile_name))
        counts = {s: sum(1 for r in results if r.status.value == s) for s in ("ok", "skipped")}
        failed = len(results) - counts["ok"] - counts["skipped"]
        state = "cancelled" if cancelled else "done"
        from gpudiag.run_report import busy_note

        busy = busy_note(self.host_load.others()) if self.host_load is not None else ""
        self._kernel_status(
            f"{plan_name} {state}: {counts['ok']} ok, {counts['skipped']} skipped, "
            f"{failed} failed or cancelled" + (f"; {busy}" if busy else "")
        )

    @on(Button.Pressed, "#run-quick")
    def _quick_pressed(self) -> None:
        self.action_run_kernels("quick")

    @on(Button.Pressed, "#run-full")
    def _full_pressed(self) -> None:
        self.action_run_kernels("full")

    @on(Button.Pressed, "#cancel-kernels")
    def _cancel_pressed(self) -> None:
        self.action_cancel_kernels()

    # ------------------------------------------------------------------ rendering

    def add_probe_row(self, result: ProbeResult) -> None:
        """One probe's outcome in the probes table."""
        self.query_one("#probes", DataTable).add_row(
            Text(result.name),
            Text(result.status.value),
            Text(f"{result.duration_s * 1000:.0f} ms"),
            Text(str(len(result.readings))),
            Text(result.error),
        )

    def show_snapshot(self, snapshot: Snapshot) -> None:
        """Render a whole snapshot on every screen."""
        self.snapshot = snapshot
        profile = self.source.profile_name if isinstance(self.source, LiveNode) else None
        self.readings, found, _ = judged_readings(snapshot, profile)
        self.profile_values = found.values if found is not None else {}
        self.query_one("#banner", Static).update(self._banner(snapshot))
        self.show_overview()
        self.show_findings()
        self.show_gpus()
        # the heavier screens (1,800 readings, the host tree) are drawn when first shown:
        # the first screen paints sooner (benchmarks/tui_startup.py)
        self.stale = set(LAZY_SCREENS)
        self._draw_if_stale(self.query_one(TabbedContent).active)
        probes = self.query_one("#probes", DataTable)
        probes.clear()
        for result in snapshot.probes:
            self.add_probe_row(result)

    def _banner(self, snapshot: Snapshot) -> Text:
        counts = severity_counts(snapshot.findings)
        worst = snapshot.worst_severity()
        health = "OK" if worst in (None, Severity.INFO) else worst.value.upper()
        style = SEVERITY_STYLE.get(worst, "") if worst else ""
        banner = Text(f"{snapshot.host}  health: ")
        banner.append(health, style or "bold green")
        banner.append("   ")
        for severity, count in counts.items():  # not-applicable: the overview's Rules line
            banner.append(f"{severity.value.upper()} {count}  ", SEVERITY_STYLE[severity])
        return banner

    def show_overview(self) -> None:
        assert self.snapshot is not None
        text = Text()
        rules = self.source.rules if isinstance(self.source, LiveNode) else None
        for label, value in views.overview(self.snapshot, rules, self.readings):
            text.append(f"{label:<9}", "bold")
            text.append(f"{value}\n")
        worst = views.filter_findings(self.snapshot.findings)
        worst = [f for f in worst if f.severity.rank > Severity.INFO.rank][:5]
        text.append(
            "\nFix first\n" if worst else "\nNo critical, warning or unknown findings.\n", "bold"
        )
        for finding in worst:
            text.append(f"{finding.severity.value.upper():<9}", SEVERITY_STYLE[finding.severity])
            text.append(f"{finding.rule_id:<8} {finding.subject}: {finding.title}\n")
        if not views.gpu_table(self.snapshot).rows:
            text.append("\nNo GPU\n", "bold")
            text.append(views.no_gpu_reason(self.snapshot) + "\n")
        text.append("\n2 findings  3 GPUs  4 topology  5 host  6 kernels  9 watch  ? keys", "dim")
        self.query_one("#overview-text", Static).update(text)

    def show_findings(self) -> None:
        """The findings table, filtered and sorted, and the detail of the first."""
        if self.snapshot is None:
            return
        text = self.query_one("#findings-filter", Input).value
        self.shown_findings = views.filter_findings(
            self.snapshot.findings, self.severity_filter, text, self.sort_key
        )
        table = self.query_one("#findings", DataTable)
        table.clear()
        for finding in self.shown_findings:
            table.add_row(
                Text(finding.severity.value.upper(), SEVERITY_STYLE[finding.severity]),
                Text(finding.rule_id),
                Text(finding.subject),
                Text(finding.title),
            )
        self.show_finding_detail(0)

    def show_finding_detail(self, row: int) -> None:
        detail = self.query_one("#finding-text", Static)
        if not 0 <= row < len(self.shown_findings):
            detail.update(Text("no finding matches" if self.snapshot else ""))
            return
        text = Text()
        for label, line in views.finding_detail(self.shown_findings[row]):
            if label:
                text.append(f"{label}: ", "bold")
            text.append(f"{line}\n")
        detail.update(text)

    @on(DataTable.RowHighlighted, "#findings")
    def _finding_highlighted(self, event: DataTable.RowHighlighted) -> None:
        self.show_finding_detail(event.cursor_row)

    @on(Input.Changed, "#findings-filter")
    def _findings_filter_changed(self) -> None:
        self.show_findings()

    @on(Input.Changed, "#readings-filter")
    def _readings_filter_changed(self) -> None:
        self.show_readings()

    @on(Input.Submitted)
    def _filter_submitted(self, event: Input.Submitted) -> None:
        target = {"findings-filter": "#findings", "readings-filter": "#readings"}
        if event.input.id in target:
            self.query_one(target[event.input.id]).focus()

    def key_escape(self) -> None:
        """Esc in a filter field goes back to its table."""
        focused = self.focused
        if isinstance(focused, Input) and focused.id in ("findings-filter", "readings-filter"):
            self.query_one(f"#{focused.id.removesuffix('-filter')}").focus()

    def show_gpus(self) -> None:
        assert self.snapshot is not None
        matrix = views.gpu_table(self.snapshot)
        table = self.query_one("#gpus", DataTable)
        table.clear(columns=True)
        note = self.query_one("#gpu-note", Static)
        note.display = not matrix.rows
        table.display = bool(matrix.rows)
        if not matrix.rows:
            note.update(Text(views.no_gpu_reason(self.snapshot)))
        table.add_columns(*matrix.headers)
        for row in matrix.rows:
            table.add_row(
                Text(row[0]), Text(row[1], HEALTH_STYLE[row[1]]), *(Text(cell) for cell in row[2:])
            )
        self.show_gpu_readings(0)

    def show_gpu_readings(self, row: int) -> None:
        assert self.snapshot is not None
        table = self.query_one("#gpu-readings", DataTable)
        table.clear()
        gpus = self.query_one("#gpus", DataTable)
        if not 0 <= row < gpus.row_count:
            return
        gpu = int(str(gpus.get_row_at(row)[0]).removeprefix("GPU"))
        if isinstance(self.source, LiveNode) and self.source.host.is_live:
            from gpudiag.processes import gpu_processes

            # who runs there, as nvitop shows it (psutil; only on the live node itself)
            for process in gpu_processes(self.readings):
                if process.gpu == gpu:
                    table.add_row(Text("process"), Text(process.text), Text("nvml, psutil"))
        for reading in views.gpu_readings(self.readings, gpu):
            table.add_row(Text(reading.key), Text(reading.display()), Text(reading.source))

    @on(DataTable.RowHighlighted, "#gpus")
    def _gpu_highlighted(self, event: DataTable.RowHighlighted) -> None:
        self.show_gpu_readings(event.cursor_row)

    def show_topology(self) -> None:
        """The GPU-by-GPU matrix with NICs and affinity, and its legend."""
        assert self.snapshot is not None
        matrix = views.topology_matrix(self.snapshot, self.profile_values)
        table = self.query_one("#topology", DataTable)
        table.clear(columns=True)
        legend = self.query_one("#topology-legend", Static)
        if not matrix.rows:
            legend.update(Text(f"No GPU readings.\n{views.no_gpu_reason(self.snapshot)}"))
            return
        table.add_columns(*matrix.headers)
        for row in matrix.rows:
            table.add_row(*(Text(cell) for cell in row))
        legend.update(Text("\n".join(matrix.legend)))

    def show_host(self) -> None:
        assert self.snapshot is not None
        tree = self.query_one("#host", Tree)
        tree.clear()
        tree.root.set_label(f"{self.snapshot.host}")
        for head, groups in views.host_tree(self.snapshot).items():
            count = sum(len(r) for r in groups.values())
            branch = tree.root.add(f"{head} ({count})")
            for sub, readings in groups.items():
                parent = branch if not sub else branch.add(sub)
                for reading in readings:
                    parent.add_leaf(Text(f"{reading.key} = {reading.display()}"))
        tree.root.expand()

    def show_kernels(self) -> None:
        assert self.snapshot is not None
        kernels = self.snapshot.kernels
        table = self.query_one("#kernel-results", DataTable)
        table.clear()
        for row in views.kernel_table(kernels, self.readings).rows:
            table.add_row(*(Text(cell) for cell in row))
        width = max(40, self.size.width - 4)
        text = Text()
        for title, items, unit in views.kernel_charts(kernels):
            text.append(f"{title}\n", "bold")
            text.append("\n".join(views.bar_chart(items, width, unit)) + "\n")
        for label, samples, unit in views.burn_series(kernels):
            text.append(f"{label} over the burn ({unit})\n", "bold")
            text.append(views.sparkline(samples, width) + "\n")
        if not kernels:
            text.append("no kernel results yet")
        self.query_one("#kernel-charts", Static).update(text)

    def _size_reading_columns(self) -> None:
        """Reading, value and source share the terminal's width (key 40%, value 35%):
        long ones are cut there, and the highlighted one is shown in full below."""
        room = max(40, (self._width or self.size.width) - 8)  # less padding, scrollbar
        key, value = room * 40 // 100, room * 35 // 100
        for table_id in ("#readings", "#gpu-readings"):
            table = self.query_one(table_id, DataTable)
            rows = [table.get_row_at(i) for i in range(table.row_count)]
            table.clear(columns=True)
            table.add_column("reading", width=key)
            table.add_column("value", width=value)
            table.add_column("source", width=room - key - value)
            for row in rows:
                table.add_row(*row)

    def on_resize(self, event: events.Resize) -> None:
        self._width = event.size.width
        if self.is_mounted and self.query("#readings"):
            self._size_reading_columns()

    @on(DataTable.RowHighlighted, "#readings")
    def _reading_highlighted(self, event: DataTable.RowHighlighted) -> None:
        table = self.query_one("#readings", DataTable)
        key, value, source = (str(c) for c in table.get_row_at(event.cursor_row))
        self.query_one("#reading-detail", Static).update(Text(f"{key} = {value}\n{source}"))

    def show_readings(self) -> None:
        if self.snapshot is None:
            return
        needle = self.query_one("#readings-filter", Input).value.strip().lower()
        table = self.query_one("#readings", DataTable)
        table.clear()
        for result in self.snapshot.probes:
            for reading in result.readings:
                line = f"{reading.key} {reading.display()} {reading.source}".lower()
                if needle and needle not in line:
                    continue
                # Text, not str: a str cell is Rich markup, and "[missing] ..." would vanish
                table.add_row(Text(reading.key), Text(reading.display()), Text(reading.source))
