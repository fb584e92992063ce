"""A terminal for end-to-end runs: tmux sessions of a given size, and their pane as text.
Used by the tmux test and by benchmarks/tui_startup.py."""

from __future__ import annotations

import subprocess
import time


def tmux(*args: str) -> str:
    """Run a tmux command; its standard output (errors are left to the caller's checks)."""
    return subprocess.run(
        ["tmux", *args], capture_output=True, text=True, timeout=10, check=False
    ).stdout


def start_session(session: str, shell_command: str, width: int = 80, height: int = 24) -> None:
    """A fresh detached session of width x height running `shell_command`."""
    tmux("kill-session", "-t", session)
    subprocess.run(
        [
            "tmux",
            "new-session",
            "-d",
            "-s",
            session,
            "-x",
            str(width),
            "-y",
            str(height),
            shell_command,
        ],
        check=True,
        timeout=10,
    )


def capture(session: str) -> str:
    """What the session's pane shows now."""
    return tmux("capture-pane", "-p", "-t", session)


def wait_for(session: str, text: str, timeout: float = 30.0) -> str:
    """The pane once `text` shows in it; AssertionError with the pane after `timeout` s."""
    deadline = time.monotonic() + timeout
    pane = ""
    while time.monotonic() < deadline:
        pane = capture(session)
        if text in pane:
            return pane
        time.sleep(0.1)
    raise AssertionError(f"{text!r} never appeared; the pane showed:\n{pane}")


def wait_gone(session: str, text: str, timeout: float = 10.0) -> str:
    """The pane once `text` no longer shows in it; AssertionError after `timeout` s."""
    deadline = time.monotonic() + timeout
    pane = capture(session)
    while text in pane:
        if time.monotonic() > deadline:
            raise AssertionError(f"{text!r} stayed; the pane showed:\n{pane}")
        time.sleep(0.1)
        pane = capture(session)
    return pane


# Every screen of the main TUI by its key, with text only that screen shows on the faulty
# demo node at 80x24 (the tmux test and the installed wheel's test both walk them).
FAULTY_DEMO_SCREENS = (
    # the findings pane's own header: its rows' "GPU001    GPU 7" reads like the overview's
    # "GPU001   GPU 7" one space off, which let this pass on the overview before the switch
    ("2", "f: all  s: by severity"),
    ("3", "5/5 x8/16"),
    ("4", "NV17!"),
    ("5", "Host and OS"),
    ("6", "No kernels run here"),  # a recording: why no run keys
    ("7", "host.hostname"),
    ("8", "derived"),  # the last result: the derived readings (topology, profile)
    ("?", "gpudiag keys"),
)


def walk_screens(session: str, screens: tuple[tuple[str, str], ...]) -> None:
    """Press each key and wait for its screen's text; then Esc closes the help screen."""
    for key, expected in screens:
        tmux("send-keys", "-t", session, key)
        wait_for(session, expected, timeout=15)
    tmux("send-keys", "-t", session, "Escape")
    wait_gone(session, "gpudiag keys")  # Esc then q at once would read as Alt+q
