"""What every gpudiag App is by construction (the node TUI, the diff TUI, the fleet TUI):

- SIGTERM and SIGHUP leave the app as `q` does, so Textual restores the terminal
  (alternate screen, mouse tracking, cursor); the exit code is 128 + the signal's number,
  as a shell reports a process the signal ended (`signalled` says which signal).
- A toast (`notify`, the app's or any widget's) is plain text, never Textual markup: a
  message naming a file, a host or anything else from data shows literally and runs no
  action.

Every string from a node, a file or a user reaches a widget as rich `Text` (the panes
build `Text`; `plain` is the helper for a label that is a str).
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from typing import Any

from rich.text import Text
from textual.app import App
from textual.notifications import SeverityLevel

SIGNALS = (signal.SIGTERM, signal.SIGHUP)


def plain(text: object) -> Text:
    """`text` as rich Text: shown literally, never read as markup."""
    return text if isinstance(text, Text) else Text(str(text))


class GpudiagAppBase(App[int]):
    """The base of every gpudiag App: leaves on SIGTERM/SIGHUP, toasts without markup."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.signalled: int | None = None

    def before_signal_exit(self) -> None:
        """Stop any work before leaving on a signal (workers, kernels); none here."""

    def _leave_on_signal(self, signum: int) -> None:
        self.signalled = signum
        self.before_signal_exit()
        self.exit(return_code=128 + signum)

    def on_mount(self) -> None:
        """Textual calls every class's on_mount in the MRO: this one installs the signal
        handlers whatever the subclass's own on_mount does."""
        loop = asyncio.get_running_loop()
        for signum in SIGNALS:
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                loop.add_signal_handler(signum, self._leave_on_signal, signum)

    def on_unmount(self) -> None:
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
