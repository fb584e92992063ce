"""How fast the TUI comes up, in a real terminal (tmux, 80x24), beside a minimal Textual
app started the same way in the same run.

    python benchmarks/tui_startup.py [--runs 5]

For each run: seconds from launch until the first screen is painted (the header and the
tabs are on the pane), until the faulty demo replay is fully probed (the health banner is
on the pane), and the resident memory (VmRSS) once probed. The runs alternate with the
minimal app's, so that a machine loaded by others weighs on both alike; the ratios are
of each run to the minimal app's run beside it. Targets: first screen within 1.3x the
minimal app's first paint (issue 29), within 1 s, fully probed within 2 s, under 150 MB
(issue 7). The host tree is the HGX-like one the tests build; the replay is
snapshots/demo-hgx-h100-faulty.toml. Both run in a temporary folder: from the checkout,
`python -m gpudiag` would import the checkout's sources instead of the wheel's.
"""

from __future__ import annotations

if __name__ == "__main__":  # gpudiag as users install it (benchmarks/_wheel.py)
    from _wheel import use_the_wheel

    use_the_wheel()

import argparse
import os
import shlex
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

from hosttree import build_hgx_tree
from tmux_pane import capture, start_session, tmux

MINIMAL_APP = """
from textual.app import App
from textual.widgets import Footer, Header, Static
class Minimal(App):
    def compose(self):
        yield Header()
        yield Static("hello from a minimal Textual app")
        yield Footer()
Minimal().run()
"""


def _rss_mb(session: str) -> float:
    """VmRSS of the process running in the session's pane (the shell execs Python)."""
    pid = tmux("display-message", "-p", "-t", session, "#{pane_pid}").strip()
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


def measure(command: list[str], painted: str, done: str, cwd: Path) -> tuple[float, float, float]:
    """(seconds to `painted` on the pane, seconds to `done`, MB resident at `done`), the
    command run in `cwd`: outside the checkout, whose gpudiag/ would otherwise shadow the
    installed one for `python -m gpudiag` (the current directory comes first on its path)."""
    session = "gpudiag-bench"
    started = time.monotonic()
    start_session(session, f"cd {shlex.quote(str(cwd))} && exec " + shlex.join(command))
    first = None
    try:
        while time.monotonic() - started < 30:
            pane = capture(session)
            now = time.monotonic() - started
            if first is None and painted in pane:
                first = now
            if done in pane:
                return first or now, now, _rss_mb(session)
            time.sleep(0.005)
        raise RuntimeError(f"{done!r} never appeared")
    finally:
        tmux("kill-session", "-t", session)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = build_hgx_tree(Path(tmp) / "tree")
        replay = REPO / "snapshots" / "demo-hgx-h100-faulty.toml"
        gpudiag = [
            sys.executable,
            "-m",
            "gpudiag",
            "--root",
            str(root),
            "--nvml-replay",
            str(replay),
        ]
        minimal = [sys.executable, "-c", MINIMAL_APP]
        ours, floor = [], []
        for _ in range(args.runs):  # alternating, so that both see the same load
            floor.append(measure(minimal, "hello from", "hello from", Path(tmp)))
            ours.append(measure(gpudiag, "Overview  Findings", "health:", Path(tmp)))
    med = statistics.median
    painted = [o[0] / f[0] for o, f in zip(ours, floor, strict=True)]
    probed = [o[1] / f[0] for o, f in zip(ours, floor, strict=True)]
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"TUI start-up in tmux at 80x24, median of {args.runs} runs (load average {load}):")
    print(
        f"  minimal Textual app: painted {med(f[0] for f in floor):.2f} s, "
        f"{med(f[2] for f in floor):.0f} MB resident"
    )
    print(
        f"  gpudiag (faulty demo): first screen {med(o[0] for o in ours):.2f} s "
        f"(target 1 s), fully probed {med(o[1] for o in ours):.2f} s (target 2 s), "
        f"{med(o[2] for o in ours):.0f} MB resident (target 150 MB)"
    )
    print(
        f"  ratio to the minimal app's first paint, run beside it: first screen "
        f"{med(painted):.2f}x (best {min(painted):.2f}x; target 1.3x), fully probed "
        f"{med(probed):.2f}x (best {min(probed):.2f}x)"
    )


if __name__ == "__main__":
    main()
