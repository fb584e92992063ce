"""End to end in a real terminal: gpudiag in tmux at 80x24, with NO_COLOR set and no TERM,
moved through every screen with keys, its pane read back as text, then quit."""

from __future__ import annotations

import os
import shlex
import shutil
import sys
from pathlib import Path

import pytest

from conftest import REPO
from hosttree import build_hgx_tree
from tmux_pane import FAULTY_DEMO_SCREENS, start_session, tmux, wait_for, walk_screens

pytestmark = pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")


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
        # the banner and the overview are filled from one judgment but painted apart (a
        # loaded machine can show one before the other): wait for both
        wait_for(session, "Fix first")
        pane = wait_for(session, "health: CRITICAL")
        assert "GPUs     8 x NVIDIA H100 80GB HBM3" in pane and "Fix first" in pane
        assert all(len(line) <= 80 for line in pane.splitlines())
        walk_screens(session, FAULTY_DEMO_SCREENS)
        tmux("send-keys", "-t", session, "q")
        assert "EXIT=0" in wait_for(session, "EXIT=", timeout=10)
    finally:
        tmux("kill-session", "-t", session)
