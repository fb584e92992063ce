"""The app's dialogs: the keys, the kernels' confirmation, the export's file name."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Input, Label, Static


class HelpScreen(ModalScreen[None]):
    """Every key, in one place: two columns (screens, actions), so that it fits 80x24
    without scrolling and 60x20 without clipping."""

    BINDINGS: ClassVar[list[Binding]] = [
        Binding("escape,question_mark", "dismiss", "Close"),
        Binding("q", "app.quit", "Quit"),  # as it lists: q quits, Esc closes
    ]
    DEFAULT_CSS = """
    HelpScreen { align: center middle; }
    #help { width: 46; max-width: 100%; height: auto; max-height: 100%;
            border: round $accent; padding: 0 1; background: $panel; }
    """

    def __init__(self, screens: list[tuple[str, str]], actions: list[tuple[str, str]]) -> None:
        """`screens` and `actions`: (key, title) pairs, from the bindings (panes.keys)."""
        super().__init__()
        self.screens = screens
        self.actions = actions

    def compose(self) -> ComposeResult:
        screens = [f"{key}  {title}" for key, title in self.screens]
        actions = [f"{key:<2} {title}" for key, title in self.actions]
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


DASH_REFUSED = "'-' is standard output, which is this screen here: give a file name"


class ExportScreen(ModalScreen[Path | None]):
    """Asks for a file name (the suggested one selected, so that typing replaces it); an
    existing file needs Enter a second time to overwrite. '-' is refused: standard output
    is the screen here. Its messages wrap, never cut."""

    BINDINGS: ClassVar[list[Binding]] = [
        Binding("escape", "cancel", "Cancel"),
        # while asking whether to overwrite (the field left, so that `y` is no letter of
        # the name), as the kernels' question takes them
        Binding("y,enter", "overwrite", "Overwrite", show=False),
        Binding("n", "back_to_name", "Another name", show=False),
    ]
    DEFAULT_CSS = """
    ExportScreen { align: center middle; }
    #export { width: 100%; max-width: 70; height: auto; border: round $accent; padding: 0 1;
              background: $panel; }
    #export Input { border: none; height: 1; }
    #export-note { width: 100%; }
    """

    def __init__(self, default: str) -> None:
        super().__init__()
        self.default = default
        self.confirming: Path | None = None

    def compose(self) -> ComposeResult:
        with Vertical(id="export"):
            yield Label("Export the snapshot to (TOML; .json for JSON):")
            # selected: typing replaces the suggested name (it appended to it)
            yield Input(self.default, id="export-path")
            yield Label("Enter writes, Esc cancels", id="export-note")

    def on_mount(self) -> None:
        self.query_one(Input).cursor_blink = False

    @on(Input.Submitted)
    def submitted(self, event: Input.Submitted) -> None:
        from gpudiag.snapshot import target_problem

        path = Path(event.value.strip()).expanduser()
        note = self.query_one("#export-note", Label)
        if not event.value.strip():
            note.update(Text("a file name is needed"))
        elif event.value.strip() == "-":  # `--export -` is stdout; here that is the screen
            note.update(Text(DASH_REFUSED))
        elif problem := target_problem(path, stdout=False):  # '-' is not stdout in here
            note.update(Text(f"{path}: {problem}"))
        elif path.exists() and self.confirming != path:
            self.confirming = path
            note.update(
                Text(f"{path} exists: y or Enter overwrites it, n edits the name, Esc cancels")
            )
            self.set_focus(None)  # the answer's keys go to the dialog, not into the name
        else:
            self.dismiss(path)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action in ("overwrite", "back_to_name"):
            return self.confirming is not None and self.focused is None
        return True

    def action_overwrite(self) -> None:
        """y or Enter to the question: overwrite the existing file."""
        if self.confirming is not None:
            self.dismiss(self.confirming)

    def action_back_to_name(self) -> None:
        """n to the question: back to the name, to change it."""
        self.confirming = None
        self.query_one("#export-note", Label).update(Text("Enter writes, Esc cancels"))
        self.query_one(Input).focus()

    @on(Input.Changed)
    def changed(self) -> None:
        self.confirming = None

    def action_cancel(self) -> None:
        self.dismiss(None)
