"""End to end in a real terminal: gpudiag in tmux at 80x24, with NO_COLOR set and no TERM,
moved through every screen with keys, its pane read back as text, then quit."""

from __future__ import annotations

import os
import shlex
import shutil
import sys
import time
from pathlib import Path

import pytest

from conftest import REPO
from hosttree import build_hgx_tree
from tmux_pane import capture, start_session, tmux

pytestmark = pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")


def _wait_for(session: str, text: str, timeout: float = 30.0) -> str:
    deadline = time.monotonic() + timeout
    pane = ""
    while time.monotonic() < deadline:
        pane = capture(session)
        if text in pane:
            return pane
        time.sleep(0.1)
    raise AssertionError(f"{text!r} never appeared; the pane showed:\n{pane}")


def test_gpudiag_in_tmux_at_80x24(tmp_path: Path) -> None:
    root = build_hgx_tree(tmp_path / "tree")
    replay = REPO / "snapshots" / "demo-hgx-h100-faulty.toml"
    session = f"gpudiag-e2e-{os.getpid()}"
    command = shlex.join(
        [
            "env",
            "-u",
            "TERM",
            "NO_COLOR=1",
            sys.executable,
            "-m",
            "gpudiag",
            "--root",
            str(root),
            "--nvml-replay",
            str(replay),
        ]
    )
    start_session(session, f"cd {shlex.quote(str(tmp_path))} && {command}; echo EXIT=$?; sleep 30")
    try:
        # the banner is updated a frame before the overview: wait for the overview's end
        pane = _wait_for(session, "Fix first")
        assert "health: CRITICAL" in pane
        assert "GPUs     8 x NVIDIA H100 80GB HBM3" in pane and "Fix first" in pane
        assert all(len(line) <= 80 for line in pane.splitlines())
        screens = [
            ("2", "GPU001   GPU 7"),
            ("3", "5/5 x8/16"),
            ("4", "NV17!"),
            ("5", "Host and OS"),
            ("6", "Quick [k]"),
            ("7", "host.hostname"),
            ("8", "derived"),  # the last result: the derived readings (topology, profile)
            ("?", "gpudiag keys"),
        ]
        for key, expected in screens:
            tmux("send-keys", "-t", session, key)
            _wait_for(session, expected, timeout=10)
        tmux("send-keys", "-t", session, "Escape")
        deadline = time.monotonic() + 10  # Esc then q at once would read as Alt+q
        while "gpudiag keys" in capture(session):
            assert time.monotonic() < deadline, "Esc did not close the help screen"
            time.sleep(0.1)
        tmux("send-keys", "-t", session, "q")
        assert "EXIT=0" in _wait_for(session, "EXIT=", timeout=10)
    finally:
        tmux("kill-session", "-t", session)
