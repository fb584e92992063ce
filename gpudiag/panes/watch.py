"""The watch pane (key 9): every GPU sampled each second while it is shown. It draws
live samples (the app's watch worker takes them), not the snapshot: under each GPU what
bounds it, its sentence and each resource's share of its ceiling as a bar (the verdicts
and their lines: gpudiag/telemetry/explain.py), and the GPU that holds the others."""

from __future__ import annotations

import textwrap
from collections.abc import Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.widgets import Label, Static

from gpudiag.panes.base import Pane, SnapshotView

if TYPE_CHECKING:
    from gpudiag.telemetry.explain import Judged
    from gpudiag.watch import History


class WatchPane(Pane):
    """A status line and one block of lines per GPU."""

    KEY, NAME, TITLE, FOCUS = "9", "watch", "Watch", "#watch"
    DEFAULT_CSS = """
    #watch-status { height: auto; width: 100%; padding: 0 1; }  /* a reason wraps, never cut */
    #watch { padding: 0 1; }
    """

    def compose(self) -> ComposeResult:
        yield Label("", id="watch-status")
        yield VerticalScroll(Static("", id="watch-text"), id="watch")

    lost: tuple[int, ...] = ()  # the GPUs the snapshot found lost
    limits: Mapping[int, float] = MappingProxyType({})  # each GPU's power limit, W: the
    # power bars' scale

    recorded: Judged | None = None  # the counter window a saved snapshot holds, judged

    def update_from(self, view: SnapshotView) -> None:
        """Which GPUs the snapshot found lost and their power limits (the watch draws live
        samples only), and the counter window it recorded (`gpudiag --export`), judged
        again against its own ceilings."""
        from gpudiag import catalog
        from gpudiag.telemetry.explain import recorded

        profile = view.readings.get("node.profile")
        name = str(profile.value) if profile is not None and profile.ok else ""
        self.recorded = recorded(view.readings, view.profile_values, name, view.snapshot.kernels)
        self.lost = tuple(catalog.lost_gpus(view.readings))
        limits: dict[int, float] = {}
        for gpu in catalog.gpu_indices(view.readings):
            for key in (f"gpu.{gpu}.power.enforced_limit", f"gpu.{gpu}.power.limit"):
                reading = view.readings.get(key)
                if reading is not None and reading.ok and isinstance(reading.value, (int, float)):
                    limits[gpu] = float(reading.value)
                    break
        self.limits = limits

    def say(self, text: str) -> None:
        """The status line: what is sampled, or why nothing is."""
        self.query_one("#watch-status", Label).update(Text(text))

    def show_samples(
        self,
        history: History,
        gpus: int | None,
        interval_s: float,
        judged: Judged | None = None,
    ) -> None:
        """The samples kept, one block per GPU, as wide as the terminal; under each GPU
        what bounds it in the last window (`judged`), and the stragglers last."""
        from gpudiag.telemetry.explain import verdict_lines
        from gpudiag.watch import screen_lines

        count = len(history.series.get((0, "power"), ()))
        self.say(
            f"{gpus} GPUs, every {interval_s:g} s, {count} samples kept (the last {history.length})"
        )
        width = self.app.size.width - 3
        extra = {}
        for verdict in judged.verdicts if judged is not None else ():
            if verdict.kind != "lost":  # a lost GPU's one line already says LOST
                extra[verdict.gpu] = verdict_lines(verdict, width)
        lines = screen_lines(history, gpus or 0, width, self.lost, self.limits, extra)
        for straggler in judged.stragglers if judged is not None else ():
            lines += textwrap.wrap(f"straggler: {straggler.text}", max(20, width))
        self.query_one("#watch-text", Static).update(Text("\n".join(lines)))

    def show_recorded(self) -> bool:
        """A saved snapshot: what bounded each GPU in the counter window it recorded, or
        False where it recorded none."""
        from gpudiag.telemetry.explain import verdict_lines

        if self.recorded is None:
            return False
        self.say(
            "a saved snapshot: what bounded each GPU in the counter window it recorded "
            "(no live readings)"
        )
        width = self.app.size.width - 3
        lines: list[str] = []
        for verdict in self.recorded.verdicts:
            lines += verdict_lines(verdict, width, indent=0)
        for straggler in self.recorded.stragglers:
            lines += textwrap.wrap(f"straggler: {straggler.text}", max(20, width))
        self.query_one("#watch-text", Static).update(Text("\n".join(lines)))
        return True
