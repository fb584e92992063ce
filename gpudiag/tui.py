"""The terminal UI. Everything on screen is drawn from a snapshot: a live node's (probed
in a worker thread, results streamed in as they arrive) or a saved one.

Screens (tabs, keys 1-9), one pane each in gpudiag/panes/: overview, findings (filter,
sort, detail), GPUs (one row each, all readings of the selected one), topology, host (a
tree of readings), kernels (run with progress and cancel, results and charts), readings,
probes, watch. This module's app only wires them: it composes the panes, runs the
workers (probing, kernels, watch sampling) and hands each new snapshot to the panes,
judged once. Every key (the help screen, ?, lists them) is a binding, and the command
palette (ctrl+p) is built from the same bindings. Severity is always written as text;
colour only repeats it.

The first screen comes first: the app may be given a live node not yet opened (a
`NodeOpener`: its NVML replay read, its probes and rules loaded), which the probing worker
opens after that screen is painted; and what only a snapshot needs (the rule engine, the
views, the watch sampler) is imported when a snapshot arrives, not with this module
(benchmarks/tui_startup.py).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar, Protocol

from textual import events, on, work
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.widgets import Header, Input, TabbedContent
from textual.worker import Worker, WorkerState, get_current_worker

from gpudiag.atomic import default_file_name
from gpudiag.kernels.plans import PLANS, KernelPlan
from gpudiag.model import ProbeResult, Snapshot
from gpudiag.panes import PANES, KernelsPane, Pane, ProbesPane, SnapshotView, WatchPane
from gpudiag.panes.banner import Banner
from gpudiag.panes.dialogs import ConfirmKernels, ExportScreen, HelpScreen
from gpudiag.panes.kernels import KernelChoice, kernel_question
from gpudiag.panes.keys import BindingCommands, help_columns
from gpudiag.tui_base import FitFooter, GpudiagAppBase

if TYPE_CHECKING:
    from gpudiag.rulefile import Rule
    from gpudiag.session import LiveNode
    from gpudiag.telemetry.explain import Explainer
    from gpudiag.watch import History

__all__ = [
    "TABS",
    "ConfirmKernels",
    "ExportScreen",
    "GpudiagApp",
    "HelpScreen",
    "KernelChoice",
    "NodeOpener",
]


@dataclass(frozen=True)
class Tab:
    """One screen of the app: its key, id and title."""

    key: str
    id: str
    title: str


TABS = tuple(Tab(pane.KEY, pane.NAME, pane.TITLE) for pane in PANES)
FIRST = "overview"  # the tab shown first
WATCH_INTERVAL_S = 1.0
UNTIL_CONFIDENT_S = 60.0  # the budget `u` gives STREAM to tighten its intervals
# Actions a saved snapshot or a replay refuses (not shown for them).
LIVE_ACTIONS = ("refresh", "run_kernels", "cancel_kernels")
MEASURING_ACTIONS = ("run_kernels", "cancel_kernels")
WATCH_LENGTH = 300  # samples the watch screen keeps: 5 minutes at 1 s


class NodeOpener(Protocol):
    """A live node not opened yet (gpudiag.commands.common.PendingNode): the app opens it
    in the probing worker, after its first screen is painted. `measurable` says before
    then whether kernels can run (the real host and NVML); `cancel` is the node's."""

    measurable: bool
    cancel: threading.Event

    def open(self) -> LiveNode:
        """The node (opened once; again, the same one)."""
        ...


class GpudiagApp(GpudiagAppBase):
    """gpudiag's TUI, built from a live node or a saved snapshot. It draws nothing itself:
    the panes do, each from the snapshot this app hands them."""

    TITLE = "gpudiag"
    CSS = """
    TabbedContent { height: 1fr; }
    TabPane { padding: 0; }
    .filter { height: 1; border: none; padding: 0 1; }
    """
    COMMANDS = App.COMMANDS | {BindingCommands}
    BINDINGS: ClassVar[list[Binding]] = [
        *(Binding(tab.key, f"show_tab('{tab.id}')", tab.title, show=False) for tab in TABS),
        # in the footer's order: what does not fit 80 columns is left out from the end
        # (FitFooter), so the kernels' keys come before refresh, export and search
        Binding("q", "quit", "Quit"),
        Binding("question_mark", "help", "Help"),
        Binding("k", "run_kernels('quick')", "Kernels", tooltip="Kernels, quick sizes"),
        Binding("K", "run_kernels('full')", "Kernels, full sizes", show=False),
        Binding("x", "cancel_kernels", "Cancel kernels"),
        Binding("r", "refresh", "Refresh"),
        Binding("e", "export", "Export"),
        Binding("slash", "search", "Search"),
    ]

    def __init__(
        self,
        source: LiveNode | NodeOpener | Snapshot,
        plans: dict[str, KernelPlan] | None = None,
        rules: Sequence[Rule] | None = None,
    ) -> None:
        super().__init__()
        self.source = source
        # a live node (opened, or opened by the probing worker), or a saved snapshot
        self.live = not isinstance(source, Snapshot)
        pending = self.live and hasattr(source, "open")
        # the node to open (`None` once opened), and the node once open
        self.opener: NodeOpener | None = source if pending else None  # type: ignore[assignment]
        self.node: LiveNode | None = source if self.live and not pending else None  # type: ignore[assignment]
        self.rules = self.node.rules if self.node is not None else rules
        self.open_error: Exception | None = None  # opening the node failed: tui() raises it
        self.snapshot: Snapshot | None = source if isinstance(source, Snapshot) else None
        self.view: SnapshotView | None = None  # the snapshot judged, for the panes
        self.plans = PLANS if plans is None else plans
        self.kernel_cancel = threading.Event()
        self._watch_history: History | None = None  # made when the watch screen first samples
        self.watch_gpus: int | None = None
        self.watch_explainer: Explainer | None = None  # the watch screen's verdicts
        self.stale: set[str] = set()  # lazy panes not drawn since the snapshot changed
        self.host_load = None
        self.kernels_running = False
        # set once the first screen is painted and the panes probing reports to built:
        # the probing waits for it, so that it does not delay that screen
        self.filled = threading.Event()

    # ------------------------------------------------------------------ layout

    def compose(self) -> ComposeResult:
        yield Header()
        yield Banner("", id="banner")
        with TabbedContent(initial=f"{FIRST}-tab"):
            for kind in PANES:
                if kind is KernelsPane:
                    pane: Pane = KernelsPane(
                        self.plans["quick"].kernels, self._measurable(), UNTIL_CONFIDENT_S
                    )
                else:
                    pane = kind()
                pane.build_later = pane.NAME != FIRST  # after the first paint (`_fill`)
                yield pane
        yield FitFooter()

    @property
    def watch_history(self) -> History:
        """The watch screen's samples (the module imported when first sampled)."""
        if self._watch_history is None:
            from gpudiag.watch import History

            self._watch_history = History(length=WATCH_LENGTH)
        return self._watch_history

    @property
    def panes(self) -> list[Pane]:
        """The panes, in tab order."""
        return list(self.query_one(TabbedContent).query(Pane))

    def pane(self, name: str) -> Pane:
        """The pane of one tab, by name ("findings")."""
        return self.query_one(f"#{name}-tab", Pane)

    @property
    def kernels(self) -> KernelsPane:
        """The kernels pane: the choice, status and progress of a run."""
        return self.query_one(KernelsPane)

    def on_mount(self) -> None:
        """Paint the frame, then fill it (`_fill`): the hidden panes are built, and the
        snapshot drawn (a saved one) or the probes run (a live node: the worker starts
        now, and waits for `filled`), once the first screen is painted, so that none of
        it delays that screen (the probing thread holds the GIL much of the time:
        benchmarks/tui_startup.py)."""
        if isinstance(self.source, Snapshot):
            # the host is on the banner line: with it here, 80 columns cut "read-only";
            # the mode first, so that a narrower screen cuts the time, not the mode
            self.sub_title = f"read-only, saved {self.source.created}"
        else:
            self.action_refresh()
        self.action_show_tab(FIRST)
        self.call_after_refresh(self._fill)
        self.set_interval(WATCH_INTERVAL_S, self._watch_tick)

    async def _fill(self) -> None:
        """After the first paint: the panes the probing reports to, then the snapshot or
        the probing, then every other pane (each drawn as it comes, if shown or cheap)."""
        if not await self.query_one(ProbesPane).build() or not await self.kernels.build():
            return  # the app is leaving
        if isinstance(self.source, Snapshot):
            self.kernels.say("a saved snapshot: none run")
            self.set_snapshot(self.source)
        else:
            self.kernels.say("ready" if self._measurable() else "a recording: none run")
        self.filled.set()
        for pane in self.panes:
            if not pane.built:
                if not await pane.build():
                    return
                pane.fit_width(self.size.width)
                if not pane.LAZY or pane.id == self.query_one(TabbedContent).active:
                    self._draw_if_stale(pane.id or "")

    def on_resize(self, event: events.Resize) -> None:
        if self.is_mounted and self.query(Pane):
            for pane in self.panes:
                if pane.built:
                    pane.fit_width(event.size.width)

    # ------------------------------------------------------------------ snapshots

    def set_snapshot(self, snapshot: Snapshot) -> None:
        """Judge a new snapshot once and hand it to every pane: drawn now if shown or
        cheap, when next shown if lazy (the first screen paints sooner:
        benchmarks/tui_startup.py)."""
        self.snapshot = snapshot
        if self.watch_explainer is not None:  # its ceilings: the node's own kernel results
            self.watch_explainer.set_kernels(snapshot.kernels)
        node = self.node
        self.view = SnapshotView.read(
            snapshot,
            self.rules,
            node is not None and node.host.is_live,
        )
        self.query_one(Banner).update_from(self.view)
        active = self.query_one(TabbedContent).active
        self.stale = {p.id or "" for p in self.panes if not p.built or (p.LAZY and p.id != active)}
        for pane in self.panes:
            if pane.id not in self.stale:
                pane.update_from(self.view)

    def _draw_if_stale(self, tab_id: str) -> None:
        """Draw a pane whose snapshot changed while it was hidden (or not yet built)."""
        pane = self.query_one(f"#{tab_id}", Pane)
        if tab_id in self.stale and self.view is not None and pane.built:
            self.stale.discard(tab_id)
            pane.update_from(self.view)

    @on(TabbedContent.TabActivated)
    async def _tab_changed(self) -> None:
        self.refresh_bindings()
        active = self.query_one(TabbedContent).active
        if not await self.query_one(f"#{active}", Pane).build():  # shown before `_fill` built it
            return
        self._draw_if_stale(active)
        if active == "watch-tab":
            self._watch_tick()

    # ------------------------------------------------------------------ actions

    def action_show_tab(self, tab: str) -> None:
        """Switch to a tab and focus its main widget (once built, if it is not yet)."""
        pane = self.pane(tab)
        self.query_one(TabbedContent).active = f"{tab}-tab"
        if pane.built:
            self._draw_if_stale(f"{tab}-tab")
            pane.query_one(pane.FOCUS).focus()
        else:
            self.call_later(self._show_when_built, pane)

    async def _show_when_built(self, pane: Pane) -> None:
        if not await pane.build():
            return
        pane.fit_width(self.size.width)
        if self.query_one(TabbedContent).active == pane.id:
            self._draw_if_stale(pane.id or "")
            pane.query_one(pane.FOCUS).focus()

    def action_refresh(self) -> None:
        """Probe the live node again (a saved snapshot cannot be refreshed)."""
        if not self.live:
            self.notify("a saved snapshot is read-only", severity="warning")
            return
        if self.query_one(ProbesPane).built:
            self.query_one(ProbesPane).clear_results()
        self.query_one(Banner).probing()
        self.probe_node()

    def action_help(self) -> None:
        """Show every key."""
        self.push_screen(HelpScreen(*help_columns(self.screen)))

    def action_search(self) -> None:
        """Focus the filter of the findings (or, on the readings screen, of the readings)."""
        tabs = self.query_one(TabbedContent)
        if tabs.active != "readings-tab":
            tabs.active = "findings-tab"
        target = "#readings-filter" if tabs.active == "readings-tab" else "#findings-filter"
        self.query_one(target, Input).focus()

    def action_export(self) -> None:
        """Ask for a file name and write the snapshot there (atomically)."""
        if self.snapshot is None:
            self.notify("nothing to export yet: the node is still being probed", severity="warning")
            return
        default = default_file_name("gpudiag-", self.snapshot.host, ".toml")
        self.push_screen(ExportScreen(default), self._export_to)

    def _export_to(self, path: Path | None) -> None:
        if path is None or self.snapshot is None:
            return
        from gpudiag.snapshot import save

        try:
            save(self.snapshot, path)
        except OSError as exc:
            self.notify(f"cannot write {path}: {exc.strerror or exc}", severity="error")
            return
        self.notify(f"wrote {path}")

    def action_run_kernels(self, plan_name: str) -> None:
        """Run a kernel plan on this machine in a worker, with progress."""
        self.action_show_tab("kernels")
        if self.node is None or self.snapshot is None:
            why = "a saved snapshot is read-only" if self.snapshot is not None else "probing"
            self.notify(f"kernels cannot run: {why}", severity="warning")
            return
        if not self._measurable():
            self.notify(
                "kernels measure this machine: not with --root or --nvml-replay",
                severity="warning",
            )
            return
        if self.kernels_running:
            self.notify("kernels are running: x cancels them", severity="warning")
            return
        chosen = self.kernels.chosen
        if not chosen:
            self.notify("no kernel is ticked (space ticks one)", severity="warning")
            return

        def answered(run: bool | None) -> None:
            if run and not self.kernels_running:
                self._start_kernels(plan_name, chosen)
            elif not run:
                self.kernels.say("not run (k asks again)")

        self.push_screen(ConfirmKernels(kernel_question(plan_name, chosen, self.view)), answered)

    @on(KernelsPane.Requested)
    def _kernels_requested(self, event: KernelsPane.Requested) -> None:
        """A button of the kernels pane: as its key, but saying why where refused."""
        if event.plan_name is None:
            self.action_cancel_kernels()
        else:
            self.action_run_kernels(event.plan_name)

    def _start_kernels(self, plan_name: str, chosen: tuple[str, ...]) -> None:
        from gpudiag.run_report import HostLoad

        self.host_load = HostLoad()  # a busy host makes the figures untrustworthy: said
        self.kernels_running = True
        self.kernel_cancel.clear()
        self.kernels.running(True)
        self.kernels.say(f"running {', '.join(chosen)} ({plan_name} sizes) ...")
        self.refresh_bindings()
        self.run_kernel_plan(plan_name, chosen)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """Hide (and refuse) what this source cannot do, so that the footer shows only the
        keys that work here."""
        if action in LIVE_ACTIONS and not self.live:
            return False
        if action in MEASURING_ACTIONS and not self._measurable():
            return False
        return action != "cancel_kernels" or self.kernels_running

    def offers(self, action: str, parameters: tuple[object, ...]) -> bool:
        """What the help lists: what this source can do at all (cancel too, where
        kernels can run, though only while they do)."""
        if action in LIVE_ACTIONS and not self.live:
            return False
        return action not in MEASURING_ACTIONS or self._measurable()

    def _measurable(self) -> bool:
        """Kernels can run: the node is this machine, with its real NVML (as its opener
        says, until it is opened)."""
        if self.node is None:
            return self.opener is not None and self.opener.measurable
        from gpudiag.nvml import ReplayBackend

        return self.node.host.is_live and not isinstance(self.node.nvml.backend, ReplayBackend)

    def action_cancel_kernels(self) -> None:
        """Stop the kernels at the next chunk."""
        if self.kernels_running:
            self.kernel_cancel.set()
            self.kernels.say("cancelling ...")

    async def action_quit(self) -> None:
        """Stop any probing and kernels, then leave."""
        self._stop_work()
        self.exit(0)

    def before_signal_exit(self) -> None:
        """SIGTERM or SIGHUP: stop probing and kernels, as q does."""
        self._stop_work()

    def _stop_work(self) -> None:
        self.kernel_cancel.set()
        if self.live:  # a node and its opener share the event
            self.source.cancel.set()  # type: ignore[union-attr]

    # ------------------------------------------------------------------ workers

    def _add_probe_result(self, result: ProbeResult) -> None:
        self.query_one(ProbesPane).add_result(result)

    @work(thread=True, exclusive=True, group="probe", exit_on_error=False)
    def probe_node(self) -> Snapshot | None:
        """Open the node if it is not yet, then run the probes off the UI thread, once the
        first screen is painted (`filled`); each result is shown as it arrives."""
        assert self.live
        cancel: threading.Event = self.source.cancel  # type: ignore[union-attr]
        worker = get_current_worker()
        while not self.filled.wait(0.05):
            if worker.is_cancelled or cancel.is_set():
                return None
        node = self.node
        if node is None:
            assert self.opener is not None
            try:
                node = self.opener.open()
            except Exception as exc:  # bad input (a replay, a rule file): as before the TUI
                self.call_from_thread(self._open_failed, exc)
                return None
            if worker.is_cancelled or cancel.is_set():  # q (or r) while it opened
                return None
            self.call_from_thread(self._opened, node)
        from gpudiag.session import with_kernel_results

        snapshot = node.snapshot(
            on_result=lambda result: self.call_from_thread(self._add_probe_result, result)
        )
        if self.snapshot is not None and self.snapshot.kernels:  # keep measured results
            snapshot = with_kernel_results(
                snapshot, self.snapshot.kernels, node.rules, node.profile_name
            )
        self.call_from_thread(self.set_snapshot, snapshot)
        return snapshot

    def _opened(self, node: LiveNode) -> None:
        """The node is open: its rules judge what it probes; kernels and watch use it."""
        self.node, self.opener, self.rules = node, None, node.rules

    def _open_failed(self, error: Exception) -> None:
        """The node cannot be opened (its replay file, its rules): leave, and `tui()`
        reports the error as the command would have before the TUI (one line, exit 3)."""
        self.open_error = error
        self.exit(3)

    @work(thread=True, exclusive=True, group="kernels", exit_on_error=False)
    def run_kernel_plan(self, plan_name: str, kernels: tuple[str, ...]) -> None:
        """Run the chosen kernels with a plan's sizes off the UI thread, reporting progress;
        results go into the snapshot."""
        from gpudiag.kernels.runner import PlanRun

        assert self.node is not None
        run = PlanRun(
            replace(
                self.plans[plan_name], kernels=kernels, until_confident=self.kernels.until_confident
            ),
            self.node.host,
            progress=lambda label, f: self.call_from_thread(self.kernels.progress, label, f),
            cancel=self.kernel_cancel,
            nvml=self.node.nvml,
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
            self.kernels.say(f"ERROR: kernels failed: {type(error).__name__}: {error}")
            return
        # a worker can fail as the app closes (its call back refused): the panes may be gone
        if event.worker.group == "watch":
            for watch in self.query(WatchPane):
                watch.say(f"sampling failed: {type(error).__name__}: {error}")
            return
        for banner in self.query(Banner):
            banner.failed(error)

    def _kernels_finished(self) -> None:
        self.kernels_running = False
        self.refresh_bindings()
        self.kernels.running(False)

    def _kernels_done(self, plan_name: str, results: tuple, cancelled: bool) -> None:
        from gpudiag.session import with_kernel_results

        assert self.node is not None and self.snapshot is not None
        self.set_snapshot(
            with_kernel_results(self.snapshot, results, self.node.rules, self.node.profile_name)
        )
        counts = {s: sum(1 for r in results if r.status.value == s) for s in ("ok", "skipped")}
        failed = len(results) - counts["ok"] - counts["skipped"]
        state = "cancelled" if cancelled else "done"
        from gpudiag.run_report import busy_note

        busy = busy_note(self.host_load.others()) if self.host_load is not None else ""
        self.kernels.say(
            f"{plan_name} {state}: {counts['ok']} ok, {counts['skipped']} skipped, "
            f"{failed} failed or cancelled" + (f"; {busy}" if busy else "")
        )

    def _watch_tick(self) -> None:
        """Sample every GPU once, off the UI thread, while the watch screen is shown."""
        tabs, watch = self.query(TabbedContent), self.query(WatchPane)
        if not tabs or tabs.first().active != "watch-tab" or not watch or not watch.first().built:
            return  # not shown, not built yet, or the app is leaving (its widgets going)
        if not self.live:
            if not watch.first().show_recorded():  # the counters it recorded, if any
                watch.first().say("a saved snapshot has no live readings (gpudiag watch; demo)")
            return
        if self.node is not None:  # not before the probing worker has opened it
            self.sample_gpus()

    @work(thread=True, exclusive=True, group="watch", exit_on_error=False)
    def sample_gpus(self) -> None:
        from gpudiag.nvml import NvmlError
        from gpudiag.watch import gpu_count, sample_node

        node = self.node
        assert node is not None
        watch = self.query_one(WatchPane)
        try:
            if self.watch_gpus is None:
                self.watch_gpus = gpu_count(node.nvml)
            last = dict(self.watch_history.latest)  # for NVLink throughput since then
            samples = sample_node(node.nvml, self.watch_gpus, last)
            judged = None
            if samples:  # what bounds each GPU: its own GPM window, taken beside them
                if self.watch_explainer is None:
                    from gpudiag.telemetry.explain import Explainer

                    kernels = self.snapshot.kernels if self.snapshot is not None else ()
                    self.watch_explainer = Explainer(node.nvml, kernels=kernels)
                judged = self.watch_explainer.judge(self.watch_gpus, samples[0].time)
        except NvmlError as exc:
            self.call_from_thread(watch.say, f"no GPU can be sampled: {exc.reason}")
            return
        self.call_from_thread(self._watch_show, samples, judged)

    def _watch_show(self, samples: list, judged: object = None) -> None:
        for sample in samples:
            self.watch_history.add(sample)
        self.query_one(WatchPane).show_samples(
            self.watch_history,
            self.watch_gpus,
            WATCH_INTERVAL_S,
            judged,  # type: ignore[arg-type]
        )
