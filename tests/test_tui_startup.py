"""The TUI's first screen comes first (issue 44): the node is opened (its NVML replay read,
its probes and rules loaded) by the probing worker once that screen is painted, and what
only a snapshot needs is imported when one arrives. benchmarks/tui_startup.py times it."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from textual.app import App

from gpudiag import cli
from gpudiag.commands import common, default
from gpudiag.commands.common import PendingNode
from gpudiag.demo import demo_node
from gpudiag.session import LiveNode
from gpudiag.tui import GpudiagApp

from conftest import modules_loaded_by

# What the first screen draws none of: the rule engine and rule files, the probes, NVML,
# the views of a snapshot, the watch sampler, the snapshot files' reader and writer, and
# the hidden panes' Textual widgets (DataTable, ProgressBar).
NOT_BEFORE_THE_FIRST_SCREEN = (
    "textual.widgets._data_table",
    "textual.widgets._progress_bar",
    "gpudiag.session",
    "gpudiag.ruleengine",
    "gpudiag.rulefile",
    "gpudiag.derive",
    "gpudiag.probes",
    "gpudiag.nvml",
    "gpudiag.views",
    "gpudiag.watch",
    "gpudiag.snapshot",
)


def test_the_first_screen_imports_no_rules_probes_or_nvml() -> None:
    """What `gpudiag` loads before the TUI's first frame: none of the modules that only
    an opened node or a snapshot needs (the old TUI imported them all at import)."""
    out = modules_loaded_by("import gpudiag.cli, gpudiag.commands.default, gpudiag.tui")
    assert "gpudiag.tui" in out
    assert [m for m in out if m in NOT_BEFORE_THE_FIRST_SCREEN] == []


def test_the_node_is_opened_after_the_first_screen() -> None:
    """A PendingNode is opened by the probing worker once the first screen is painted and
    the panes the probing reports to are built; then it is probed and judged as before."""
    seen: list[bool] = []

    def make() -> LiveNode:
        seen.append(app.filled.is_set() and app.query_one("#overview-text").is_mounted)
        return demo_node("faulty")

    pending = PendingNode(make, measurable=False)
    app = GpudiagApp(pending)
    assert app.live and app.node is None and not app._measurable()

    async def scenario() -> None:
        async with app.run_test(size=(80, 24)) as pilot:
            await app.workers.wait_for_complete()
            await pilot.pause()
            assert seen == [True]  # opened once, after the first screen
            assert app.node is pending.node and app.rules is pending.node.rules
            assert app.node.cancel is pending.cancel  # q stops what the opener started
            assert "health: CRITICAL" in str(app.query_one("#banner").render())

    try:
        asyncio.run(scenario())
    finally:
        pending.close()


def test_a_bad_replay_still_ends_in_one_line_and_exit_3(
    tmp_path: Path, monkeypatch, capsys
) -> None:
    """`gpudiag --nvml-replay BAD` (the TUI): the replay is read after the first screen
    now, and its error is still one line on stderr and exit code 3, printed once the app
    has left (the terminal restored), as before the TUI started."""
    bad = tmp_path / "bad.toml"
    bad.write_text('format = "something else"\nversion = 1\n')
    for module in (common, default):  # the test has no terminal: the app runs headless
        monkeypatch.setattr(module, "need_terminal", lambda: None)
    monkeypatch.setattr(GpudiagApp, "run", lambda self: App.run(self, headless=True))
    assert cli.main(["--nvml-replay", str(bad)]) == 3
    err = capsys.readouterr().err
    assert err == (
        f"gpudiag: {bad}: not an NVML replay file (format must be 'gpudiag-nvml-replay')\n"
    )


@pytest.mark.parametrize(
    ("argv", "measurable"),
    [
        ([], True),
        (["--nvml-replay", "x.toml"], False),
        (["--replay", "x"], False),
        (["--root", "/tmp"], False),
    ],
)
def test_kernels_are_offered_as_the_opened_node_will_allow(argv, measurable) -> None:
    """Before the node is opened, the footer's kernel keys follow the options: this
    machine with its real NVML only (as `_measurable` judges the opened node)."""
    args = cli.build_parser().parse_args(argv)
    assert common.is_this_machine(args) is measurable


def test_quit_while_the_node_opens_probes_nothing() -> None:
    """q while the worker is still opening the node: the app leaves, and the worker ends
    once the node is open instead of probing it (which would hold the process's exit)."""
    import threading
    from dataclasses import replace

    from gpudiag.probe import Cost, Probe

    started, release, probed = threading.Event(), threading.Event(), []
    probe = Probe("p", "P", Cost.INSTANT, frozenset(), lambda ctx: probed.append(1) or [])

    def make() -> LiveNode:
        started.set()
        release.wait(30)
        return replace(demo_node("healthy"), probes=[probe])

    pending = PendingNode(make, measurable=False)
    app = GpudiagApp(pending)

    async def scenario() -> None:
        async with app.run_test(size=(80, 24)) as pilot:
            assert await asyncio.to_thread(started.wait, 30)
            await pilot.press("q")
            release.set()
        await asyncio.to_thread(lambda: pending.open())  # the worker has opened it

    try:
        asyncio.run(scenario())
        for worker in app.workers:
            assert worker.is_finished or worker.is_cancelled
        assert probed == []  # the node was opened, never probed
    finally:
        release.set()
        pending.close()
