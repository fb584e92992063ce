"""A terminal for end-to-end runs: tmux sessions of a given size, and their pane as text.
Used by the tmux test and by benchmarks/tui_startup.py."""

from __future__ import annotations

import subprocess


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
