"""The kernels pane (key 6): which kernels to run, the run's progress, the results and
their charts. The app runs the kernels (a worker); this pane only shows and chooses."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, ClassVar

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.message import Message
from textual.widgets import Button, Label, OptionList, Static

from gpudiag.kernels.plans import KERNELS
from gpudiag.panes.base import Pane, SnapshotView

if TYPE_CHECKING:
    from textual.widgets import DataTable

    from gpudiag.views import Matrix

# Shown instead of the run keys where kernels cannot run (a saved snapshot, a recording).
NOT_MEASURABLE = (
    "No kernels run here: they measure the machine gpudiag runs on, and this is a"
    " recording (a saved snapshot, demo, --replay, --nvml-replay or --root)."
    " Run gpudiag on the node itself to measure it."
)


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


class KernelsPane(Pane):
    """The kernel choice, run buttons, status and progress; results and charts."""

    results: Matrix  # the table's rows, as shown (from `on_built`)

    KEY, NAME, TITLE, FOCUS = "6", "kernels", "Kernels", "#kernel-choice"
    LAZY = True
    BINDINGS: ClassVar[list[Binding]] = [
        Binding(
            "u", "toggle_until_confident", "Until confident", tooltip="Kernels until confident"
        ),
    ]
    # every kernel in view by name: a row each, as wide as the longest "[ ] allreduce"
    # (borders, padding and a scrollbar's room beside it)
    DEFAULT_CSS = f"""
    #kernel-top {{ height: {len(KERNELS) + 2}; }}
    #kernel-choice {{ width: {max(map(len, KERNELS)) + 10}; height: {len(KERNELS) + 2}; }}
    #kernel-run {{ height: {len(KERNELS) + 2}; }}
    #kernel-controls {{ height: 1; }}
    #kernel-hint {{ padding: 0 1; color: $text-muted; }}
    #kernel-why {{ padding: 0 1; width: 100%; }}
    #kernel-controls Button {{ margin-right: 1; }}
    #kernel-status {{ height: auto; width: 100%; padding: 0 1; }}  /* wraps, never cut */
    #kernel-progress {{ height: 1; padding: 0 1; }}
    #kernel-results {{ height: auto; max-height: 12; }}
    #kernel-detail {{ height: auto; padding: 0 1; }}
    #kernel-charts {{ height: auto; padding: 0 1; }}
    """

    def __init__(self, ticked: Iterable[str], measurable: bool, budget_s: float) -> None:
        """`ticked`: the kernels ticked at first; `measurable`: kernels can run here;
        `budget_s`: how long `u` lets STREAM go on until its intervals are tight."""
        super().__init__()
        self.ticked = tuple(ticked)
        self.measurable = measurable
        self.budget_s = budget_s
        self.until_confident: float | None = None  # the budget, when `u` is on

    def compose(self) -> ComposeResult:
        from textual.widgets import DataTable, ProgressBar

        with VerticalScroll(id="kernels"):
            with Horizontal(id="kernel-top"):
                yield KernelChoice(self.ticked, id="kernel-choice")
                with Vertical(id="kernel-run"):
                    if self.measurable:
                        with Horizontal(id="kernel-controls"):
                            yield Button(Text("Quick [k]"), id="run-quick", compact=True)
                            yield Button(Text("Full [K]"), id="run-full", compact=True)
                            yield Button(
                                Text("Cancel [x]"),
                                id="cancel-kernels",
                                compact=True,
                                disabled=True,
                            )
                    else:  # where the keys would be: why there are none
                        yield Label(Text(NOT_MEASURABLE), id="kernel-why")
                    yield Label("", id="kernel-status")
                    yield ProgressBar(total=1.0, show_eta=False, id="kernel-progress")
                    if self.measurable:
                        yield Label(
                            Text("space ticks a kernel; k runs them at quick sizes, K at full"),
                            id="kernel-hint",
                        )
            yield DataTable(id="kernel-results", cursor_type="row", zebra_stripes=True)
            yield Static("", id="kernel-detail")
            yield Static("", id="kernel-charts")

    def on_built(self) -> None:
        from gpudiag import views

        self.results = views.kernel_table([])  # the table's rows, as shown
        self.table("#kernel-results").add_columns(*self.results.headers)

    def update_from(self, view: SnapshotView) -> None:
        from gpudiag import views

        kernels = view.snapshot.kernels
        table = self.table("#kernel-results")
        table.clear()
        self.results = views.kernel_table(kernels, view.readings)
        for row in self.results.rows:
            table.add_row(*(Text(cell) for cell in row))
        self._show_detail(table.cursor_row)
        width = max(40, self.app.size.width - 4)
        text = Text()
        for title, items, unit in views.kernel_charts(kernels):
            text.append(f"{title}\n", "bold")
            text.append("\n".join(views.bar_chart(items, width, unit)) + "\n")
        for label, samples, unit in views.burn_series(kernels):
            text.append(f"{label} over the burn ({unit})\n", "bold")
            text.append(views.sparkline(samples, width) + "\n")
        if not self.measurable:  # a recording: say what it holds, not what it might
            self.say(
                f"the recording's {len(kernels)} kernel results, below"
                if kernels
                else "the recording holds no kernel results"
            )
        elif not kernels:
            text.append("no kernel results yet")
        self.query_one("#kernel-charts", Static).update(text)

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        if event.data_table.id != "kernel-results":
            return
        self._show_detail(event.cursor_row)

    def _show_detail(self, row: int) -> None:
        """The highlighted result in full, wrapped below the table: what its cells cut at
        80 columns (a reason, the range) is read here, one cursor key away."""
        rows = self.results.rows
        text = Text()
        if 0 <= row < len(rows):
            for header, cell in zip(self.results.headers, rows[row], strict=True):
                if cell:
                    text.append(f"{header}: ", "bold")
                    text.append(f"{cell}  ")
        self.query_one("#kernel-detail", Static).update(text)

    @property
    def chosen(self) -> tuple[str, ...]:
        """The ticked kernels, in the order they run."""
        return tuple(self.query_one("#kernel-choice", KernelChoice).selected)

    def say(self, text: str) -> None:
        """One line of status: ready, running, done, why not."""
        self.query_one("#kernel-status", Label).update(Text(text))

    def progress(self, label: str, fraction: float) -> None:
        """How far the running kernel is."""
        self.say(f"{label}: {fraction:.0%}")
        from textual.widgets import ProgressBar

        self.query_one("#kernel-progress", ProgressBar).update(progress=fraction)

    def running(self, running: bool) -> None:
        """Cancel works only while kernels run."""
        for button in self.query("#cancel-kernels").results(Button):
            button.disabled = not running

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """`u` only where kernels can run (not for a saved snapshot or a replay)."""
        return self.measurable if action == "toggle_until_confident" else True

    def action_toggle_until_confident(self) -> None:
        """STREAM runs its trials, or goes on until its intervals are tight (60 s at most)."""
        self.until_confident = None if self.until_confident else self.budget_s
        self.say(
            f"STREAM goes on until its intervals are within 3% ({self.budget_s:g} s at most)"
            if self.until_confident
            else "STREAM runs its trials only"
        )

    class Requested(Message):
        """A run button was pressed: run a plan (`plan_name`), or cancel (None). The app
        answers as the key would, but also where the key is refused, saying why."""

        def __init__(self, plan_name: str | None) -> None:
            super().__init__()
            self.plan_name = plan_name

    @on(Button.Pressed)
    def _pressed(self, event: Button.Pressed) -> None:
        plans = {"run-quick": "quick", "run-full": "full", "cancel-kernels": None}
        if event.button.id in plans:
            event.stop()
            self.post_message(self.Requested(plans[event.button.id]))


def kernel_question(plan_name: str, chosen: tuple[str, ...], view: SnapshotView | None) -> str:
    """What the confirmation says: what runs, and which GPUs have processes."""
    from gpudiag import views
    from gpudiag.processes import gpu_processes

    lines = [
        f"Run {', '.join(chosen)} at {plan_name} sizes on this machine?",
        "They load every device they run on until done (x cancels).",
        "",
    ]
    gpus = views.gpu_table(view.snapshot).rows if view else ()
    busy = gpu_processes(view.readings if view else {})
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
