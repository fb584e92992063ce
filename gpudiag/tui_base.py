"""What every gpudiag App is by construction (the node TUI, the diff TUI, the fleet TUI):

- SIGTERM and SIGHUP leave the app as `q` does, so Textual restores the terminal
  (alternate screen, mouse tracking, cursor); the exit code is 128 + the signal's number,
  as a shell reports a process the signal ended (`signalled` says which signal).
- A terminal that hangs up with no SIGHUP sent (an ssh connection that drops under a shell
  that passes none on: the kernel signals the session's leader only) leaves the app as
  SIGHUP does; and once the app leaves on a hang-up or a signal, the process ends within
  SHUTDOWN_GRACE_S even if Textual's shutdown blocks writing to a terminal that is gone.
- Under NO_COLOR it draws with the terminal's default colours (NO_COLOR_THEME).
- Its footer (`FitFooter`) shows a key whole or not at all: the keys past the width are
  left out, not cut at the edge or under the command palette's key (`?` lists them all).
- A toast (`notify`, the app's or any widget's) is plain text, never Textual markup: a
  message naming a file, a host or anything else from data shows literally and runs no
  action.

Every string from a node, a file or a user reaches a widget as rich `Text` (the panes
build `Text`; `plain` is the helper for a label that is a str).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import threading
from collections.abc import Callable
from dataclasses import replace
from typing import Any, ClassVar

from rich.text import Text
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.notifications import SeverityLevel
from textual.screen import ModalScreen
from textual.theme import BUILTIN_THEMES
from textual.widgets import Footer, Static
from textual.widgets._footer import FooterKey

SIGNALS = (signal.SIGTERM, signal.SIGHUP)
TERMINAL_POLL_S = 0.5  # how often the app looks whether its terminal is still there
SHUTDOWN_GRACE_S = 10.0  # leaving on a signal or a hang-up: the most the shutdown may take

# Under NO_COLOR, Textual turns every colour into a fixed grey of the same luminance: red
# reversed on the dark background became grey 237 on 233 (1.6:1), the most severe word the
# least readable. Instead gpudiag draws with the terminal's own default foreground and
# background (Textual's ANSI mode, whose NO_COLOR filter sets every colour to "default"):
# CRITICAL is bold reverse video of them, WARNING bold; and cursors, which a colour no
# longer marks, are reverse video.
NO_COLOR_THEME = replace(
    BUILTIN_THEMES["ansi-dark"],
    name="gpudiag-no-color",
    primary="ansi_default",
    variables={
        **BUILTIN_THEMES["ansi-dark"].variables,
        "block-cursor-text-style": "bold reverse",
        "block-cursor-blurred-text-style": "reverse",
        "input-cursor-text-style": "reverse",
    },
)


def no_color() -> bool:
    """NO_COLOR is set (to anything, as Textual reads it)."""
    return os.environ.get("NO_COLOR") is not None


def plain(text: object) -> Text:
    """`text` as rich Text: shown literally, never read as markup."""
    return text if isinstance(text, Text) else Text(str(text))


def watch_terminal(
    terminal_alive: Callable[[], bool],
    hang_up: Callable[[], None],
    stopped: threading.Event,
    poll_s: float = TERMINAL_POLL_S,
) -> None:
    """Poll until the app has stopped (`stopped` set) or its terminal is gone; then call
    `hang_up` (which leaves the app as SIGHUP does). Runs in a daemon thread."""
    while not stopped.wait(poll_s):
        if not terminal_alive():
            hang_up()
            return


def end_after(grace_s: float, code: int, hard_exit: Callable[[int], object] = os._exit) -> None:
    """End the process with `code` if it is still running `grace_s` seconds from now: a
    daemon thread, so a process that ends by itself first ends it too."""

    def wait_then_end() -> None:
        threading.Event().wait(grace_s)
        hard_exit(code)

    threading.Thread(target=wait_then_end, name="gpudiag-end-after", daemon=True).start()


def _terminal_fd() -> int | None:
    """The descriptor the app reads its keys from, when it is a terminal."""
    stream = sys.__stdin__
    with contextlib.suppress(AttributeError, OSError, ValueError):
        if stream is not None and os.isatty(stream.fileno()):
            return stream.fileno()
    return None


class GpudiagAppBase(App[int]):
    """The base of every gpudiag App: leaves on SIGTERM/SIGHUP, the terminal's colours
    under NO_COLOR, toasts without markup."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        if no_color():  # Textual's ANSI mode: its NO_COLOR filter leaves the default colours
            kwargs.setdefault("ansi_color", True)
        super().__init__(*args, **kwargs)
        self.signalled: int | None = None
        self._stopped = threading.Event()  # set when the app unmounts: the watch ends
        self._on_terminal = False  # running on a real terminal (not headless, not a test)

    def before_signal_exit(self) -> None:
        """Stop any work before leaving on a signal (workers, kernels); none here."""

    def _leave_on_signal(self, signum: int) -> None:
        if self.signalled is not None:
            return
        self.signalled = signum
        if self._on_terminal:  # the terminal may be gone: the shutdown must not hang
            end_after(SHUTDOWN_GRACE_S, 128 + signum)
        self.before_signal_exit()
        self.exit(return_code=128 + signum)

    def on_mount(self) -> None:
        """Textual calls every class's on_mount in the MRO: this one installs the signal
        handlers (and the NO_COLOR theme) whatever the subclass's own on_mount does."""
        if no_color():
            self.register_theme(NO_COLOR_THEME)
            self.theme = NO_COLOR_THEME.name
        loop = asyncio.get_running_loop()
        for signum in SIGNALS:
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                loop.add_signal_handler(signum, self._leave_on_signal, signum)
        fd = None if self.is_headless else _terminal_fd()
        if fd is not None:
            self._on_terminal = True
            threading.Thread(
                target=watch_terminal,
                args=(
                    lambda: os.isatty(fd),  # a hung-up terminal answers EIO: not a tty
                    lambda: loop.call_soon_threadsafe(self._leave_on_signal, signal.SIGHUP),
                    self._stopped,
                ),
                name="gpudiag-terminal-watch",
                daemon=True,
            ).start()

    def on_unmount(self) -> None:
        self._stopped.set()
        with contextlib.suppress(RuntimeError):
            loop = asyncio.get_running_loop()
            for signum in SIGNALS:
                with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                    loop.remove_signal_handler(signum)

    def notify(
        self,
        message: str,
        *,
        title: str = "",
        severity: SeverityLevel = "information",
        timeout: float | None = None,
        markup: bool = False,
    ) -> None:
        """A toast, always as plain text: `markup` is ignored, since a widget's notify
        passes markup=True for every message, data in it or not."""
        super().notify(message, title=title, severity=severity, timeout=timeout, markup=False)


def _key_width(key: FooterKey) -> int:
    """The columns a footer key takes, as Textual's footer draws it (not compact): the key
    with a blank each side, the description and a blank."""
    return len(key.key_display) + len(key.description) + 3


class FitFooter(Footer):
    """Textual's footer, showing each key whole or not at all: the keys past the width
    (less the command palette's key, docked at the right) are left out, where Textual's
    cut the last one under that key or hid it past the edge. The screens' own keys come
    first, then the app's (quit and help among the first); `?` lists every key."""

    def compose(self) -> ComposeResult:
        room = self.size.width or self.app.size.width
        palette = self.screen.active_bindings.get(self.app.COMMAND_PALETTE_BINDING)
        if self.show_command_palette and self.app.ENABLE_COMMAND_PALETTE and palette:
            binding = palette[1]  # as wide as another key (its border takes a blank's place)
            room -= len(self.app.get_key_display(binding)) + len(binding.description) + 3
        for item in super().compose():
            if isinstance(item, FooterKey) and not item.has_class("-command-palette"):
                if _key_width(item) > room:
                    continue  # left out whole; a shorter key after it may still fit
                room -= _key_width(item)
            yield item

    def on_resize(self) -> None:
        """Fit the keys to the new width."""
        self.call_after_refresh(self.recompose)


class KeysHelp(ModalScreen[None]):
    """A screen's keys as plain text in a box `width` columns wide (the diff and fleet
    screens' `?`); Esc, q or ? closes it."""

    BINDINGS: ClassVar[list[Binding]] = [Binding("escape,q,question_mark", "dismiss", "Close")]
    DEFAULT_CSS = """
    KeysHelp { align: center middle; }
    KeysHelp > VerticalScroll { max-width: 100%; height: auto; max-height: 100%;
                                border: round $accent; padding: 0 1; background: $panel; }
    """

    def __init__(self, text: str, width: int) -> None:
        super().__init__()
        self.text, self.width = text, width

    def compose(self) -> ComposeResult:
        box = VerticalScroll(Static(Text(self.text)))
        box.styles.width = self.width
        yield box
