"""The TUI, driven with Textual's Pilot at 80x24: every screen and key, on the demo
replays, a saved snapshot and this machine; SVG snapshots of every screen."""

from __future__ import annotations

import asyncio
import re
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import ClassVar

import pytest
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.widgets import (
    DataTable,
    Input,
    Label,
    ProgressBar,
    Static,
    TabbedContent,
    Tree,
)

from gpudiag.hostfs import HostFS
from gpudiag.kernels.plans import KERNELS, KernelPlan
from gpudiag.kernels.stats import summarize
from gpudiag.model import KernelResult, ProbeStatus, Reading, Severity, Snapshot
from gpudiag.nvml import Nvml, ReplayBackend, open_nvml
from gpudiag.panes import PANES, KernelsPane, Pane, ProbesPane, SnapshotView
from gpudiag.panes.kernels import NOT_MEASURABLE
from gpudiag.probe import Cost, Probe
from gpudiag.probes import default_probes
from gpudiag.rulefile import load_rules
from gpudiag.session import LiveNode, with_findings
from gpudiag.snapshot import load, save
from gpudiag.tui import TABS, ConfirmKernels, ExportScreen, GpudiagApp, HelpScreen, KernelChoice

from conftest import REPO
from hosttree import build_hgx_tree

FIXTURES = Path(__file__).parent / "fixtures"
ALL_OK = [[p.name, "ok"] for p in default_probes()]
# and the derived result: the tree's bus lists no device, so GPUDirect RDMA is not needed
NO_NVML = [[p.name, "skipped" if p.name == "gpu" else "ok"] for p in default_probes()] + [
    ["derived", "ok"]
]


def _node(
    replay: str | Path = "replay-no-driver.toml", probes=None, root: Path = FIXTURES / "host-basic"
) -> LiveNode:
    """A live node from a host tree and a replay (a name in tests/fixtures, or a path)."""
    return LiveNode(
        host=HostFS(root),
        nvml=Nvml(ReplayBackend.from_file(FIXTURES / replay)),
        probes=default_probes() if probes is None else probes,
        rules=load_rules(),
    )


def _rows(app: GpudiagApp, table_id: str) -> list[list[str]]:
    """The table's cells, or [] while its pane is not built."""
    from textual.css.query import NoMatches

    try:
        return _cells(app, table_id)
    except NoMatches:
        return []


def _cells(app: GpudiagApp, table_id: str) -> list[list[str]]:
    table = app.query_one(table_id, DataTable)
    return [[str(c) for c in table.get_row_at(i)] for i in range(table.row_count)]


def _banner(app: GpudiagApp) -> str:
    return str(app.query_one("#banner", Static).render())


def test_live_node_shows_probes_and_findings() -> None:
    async def scenario() -> None:
        app = GpudiagApp(_node())
        async with app.run_test(size=(80, 24)) as pilot:
            await app.workers.wait_for_complete()
            await pilot.pause()
            assert [row[:2] for row in _cells(app, "#probes")] == NO_NVML
            findings = _cells(app, "#findings")
            assert findings[0][:3] == ["CRITICAL", "NVML001", "node"]
            assert findings[0][3] == "NVML does not answer"  # the rule's title
            assert ["UNKNOWN", "NVML002", "node"] in [row[:3] for row in findings]
            assert "gpunode01  health: CRITICAL" in _banner(app)
            await pilot.press("3")  # no GPU: the screen says why and offers the demo
            note = str(app.query_one("#gpu-note", Static).render())
            assert note.startswith("NVML did not start: nvmlInit: DriverNotLoaded")
            assert "gpudiag demo faulty" in note
            await pilot.press("q")
        assert app.return_code == 0

    asyncio.run(scenario())


def test_refresh_probes_again() -> None:
    calls = []

    def counting(ctx):
        calls.append(1)
        return [Reading("test.calls", len(calls))]

    probe = Probe("count", "Counting", Cost.INSTANT, frozenset(), counting)

    async def scenario() -> None:
        app = GpudiagApp(_node(probes=[probe]))
        async with app.run_test(size=(80, 24)) as pilot:
            await app.workers.wait_for_complete()
            await pilot.press("r")
            await app.workers.wait_for_complete()
            await pilot.pause()
            assert len(calls) == 2
            assert app.snapshot is not None
            assert app.snapshot.reading("test.calls").value == 2
            assert len(_cells(app, "#probes")) == 1

    asyncio.run(scenario())


def test_the_first_screen_comes_before_the_hidden_panes_and_the_probing() -> None:
    """The frame is painted first, then filled: when the app mounts, only the first tab's
    widgets are there (the others' hundreds wait, benchmarks/tui_startup.py), and the
    probes run once the first screen is painted and the probes pane is built; then
    every pane is built, and each key shows its pane, focused."""
    seen: dict[str, object] = {}

    class Watched(GpudiagApp):
        def on_mount(self) -> None:  # Textual runs GpudiagApp's on_mount as well
            seen["built at mount"] = [p.NAME for p in self.panes if p.built]

    def probing(ctx):
        seen["filled when probing"] = app.filled.is_set()
        seen["probes pane built"] = app.query_one(ProbesPane).built
        return [Reading("test.x", 1)]

    app = Watched(_node(probes=[Probe("p", "P", Cost.INSTANT, frozenset(), probing)]))

    async def scenario() -> None:
        async with app.run_test(size=(80, 24)) as pilot:
            await app.workers.wait_for_complete()
            # the hidden panes are built after the first paint
            await _until(pilot, lambda: all(p.built for p in app.panes), "every pane built")
            for tab in TABS:
                await pilot.press(tab.key)
                await pilot.pause()
                pane = app.pane(tab.id)
                assert app.query_one(TabbedContent).active == f"{tab.id}-tab"
                assert app.focused is pane.query_one(pane.FOCUS), tab.id
            assert [row[:2] for row in _cells(app, "#probes")] == [["p", "ok"]]

    asyncio.run(scenario())
    assert seen == {
        "built at mount": ["overview"],
        "filled when probing": True,
        "probes pane built": True,
    }


def test_hanging_probe_does_not_freeze_the_screen(monkeypatch) -> None:
    """The quick probe is shown while the other hangs; then the hang's time runs out
    (its deadline reached by moving the probe runner's clock on once the quick row is
    seen: on a loaded machine the first paint took longer than any fixed limit) and it
    is shown as a timeout, with PROBE001."""
    import gpudiag.probe

    release = threading.Event()
    moved = [0.0]  # seconds the probe runner's clock is moved on
    clock = SimpleNamespace(monotonic=lambda: time.monotonic() + moved[0])
    monkeypatch.setattr(gpudiag.probe, "time", clock)
    hang = Probe(
        "hang",
        "Hangs",
        Cost.INSTANT,
        frozenset(),
        lambda ctx: [release.wait(WAIT_LIMIT_S) and Reading("x", 1)],
        timeout_s=WAIT_LIMIT_S,
    )
    quick = Probe("quick", "Quick", Cost.INSTANT, frozenset(), lambda ctx: [Reading("y", 1)])

    async def scenario() -> None:
        app = GpudiagApp(_node(probes=[hang, quick]))
        async with app.run_test(size=(80, 24)) as pilot:
            await _until(pilot, lambda: _rows(app, "#probes"), "the quick probe's row")
            assert [row[:2] for row in _cells(app, "#probes")] == [["quick", "ok"]]
            moved[0] = 2 * WAIT_LIMIT_S  # past the hang's deadline
            await app.workers.wait_for_complete()
            await pilot.pause()
            assert ["hang", "timeout"] in [row[:2] for row in _cells(app, "#probes")]
            assert ["UNKNOWN", "PROBE001", "probe hang"] in [
                r[:3] for r in _cells(app, "#findings")
            ]
        release.set()

    asyncio.run(scenario())


def test_saved_snapshot_is_shown_read_only(tmp_path: Path) -> None:
    snapshot = _node("replay-2gpu.toml").snapshot()
    save(snapshot, tmp_path / "node.toml")
    loaded = load(tmp_path / "node.toml")

    async def scenario() -> None:
        app = GpudiagApp(loaded)
        async with app.run_test(size=(80, 24)) as pilot:
            await pilot.pause()
            assert "gpunode01  health: CRITICAL" in _banner(app)  # GPU 1 is lost
            # and the derived result (GPUDirect RDMA not needed: the tree's bus is empty)
            assert [row[:2] for row in _cells(app, "#probes")] == [*ALL_OK, ["derived", "ok"]]
            await pilot.press("r")
            await pilot.pause()
            assert app.snapshot is loaded
            assert "read-only" in app.sub_title

    asyncio.run(scenario())


def test_readings_tab_lists_every_reading_with_its_source() -> None:
    async def scenario() -> None:
        app = GpudiagApp(_node("replay-2gpu.toml"))
        async with app.run_test(size=(80, 24)) as pilot:
            await app.workers.wait_for_complete()
            await pilot.press("7")
            await pilot.pause()
            rows = {row[0]: row[1:] for row in _cells(app, "#readings")}
            assert app.snapshot is not None
            assert len(rows) == len(app.snapshot.readings_by_key)
            assert rows["host.hostname"] == ["gpunode01", "procfs:sys/kernel/hostname"]
            assert rows["gpu.1.health"][0].startswith("[error] nvmlDeviceGetName: GpuIsLost")
            assert app.focused is app.query_one("#readings", DataTable)
            # statuses are shown as text on screen, not swallowed as markup
            assert "[missing]" in app.export_screenshot()
            await pilot.press("8")
            assert app.focused is app.query_one("#probes", DataTable)

    asyncio.run(scenario())


def test_readings_of_a_real_captured_tree_are_listed(realdata_trees: dict[str, Path]) -> None:
    node = _node(root=realdata_trees["hwloc__nvidiagpunumanodes"])

    async def scenario() -> None:
        app = GpudiagApp(node)
        async with app.run_test(size=(80, 24)) as pilot:
            await app.workers.wait_for_complete()
            await pilot.press("7")
            await pilot.pause()
            rows = {row[0]: row[1] for row in _cells(app, "#readings")}
            assert rows["numa.memory_only_nodes"] == "250, 251, 252, 253, 254, 255"
            assert rows["cpu.model"] == "POWER9, altivec supported"
            assert rows["pcie.0035:05:00.0.local_cpus"] == "88-103"

    asyncio.run(scenario())


def test_topology_tab_shows_the_8_gpu_matrix(tmp_path: Path) -> None:
    node = _node(REPO / "snapshots" / "demo-hgx-h100-faulty.toml", root=build_hgx_tree(tmp_path))

    async def scenario() -> None:
        app = GpudiagApp(node)
        async with app.run_test(size=(80, 24)) as pilot:
            await app.workers.wait_for_complete()
            await pilot.press("4")
            await pilot.pause()
            rows = _cells(app, "#topology")
            assert len(rows) == 8
            # NUMA and CPU affinity first, where 80 columns show them (they were past the
            # GPU and NIC columns, cut off even at 120)
            assert rows[0] == [
                "GPU0",
                "0",
                "0-55,112-167",
                "X",
                "NV18",
                "NV17!",  # GPU 2 has a link down: fewer than the node's usual NV18
                "NV18",
                "NV18",
                "NV18",
                "NV18",
                "?",
                "PIX",
            ]
            assert rows[7][3:5] == ["?", "?"]  # the lost GPU
            legend = str(app.query_one("#topology-legend", Static).render())
            assert "NIC0: 0000:19:00.0" in legend
            assert "NV#! = fewer NVLinks than the node's usual NV18" in legend
            assert "GPU2: 17 of the model's 18 NVLinks active (GPU#! above)" in legend
            assert rows[2][0] == "GPU2!"
            assert app.focused is app.query_one("#topology", DataTable)

    asyncio.run(scenario())


# ------------------------------------------------------------------ every screen and key


def _demo(tmp_path: Path) -> LiveNode:
    """The faulty demo: an HGX-like host tree and the faulty 8-GPU H100 replay."""
    return _node(REPO / "snapshots" / "demo-hgx-h100-faulty.toml", root=build_hgx_tree(tmp_path))


def _text(app: GpudiagApp, selector: str) -> str:
    return str(app.query_one(selector, Static).render())


# How long a wait on the app (a row, a notice, the palette's list) may go on before it is
# called a failure: half the per-test limit (pyproject's `timeout`), not a guess of how
# long the thing takes, which is whatever the machine's load makes it.
WAIT_LIMIT_S = 60.0


async def _until(pilot, condition: Callable[[], object], what: str) -> None:
    """Let the app run until CONDITION() holds (checked every 10 ms of its loop)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + WAIT_LIMIT_S
    while not condition():
        assert loop.time() < deadline, f"{what}: not within {WAIT_LIMIT_S:g} s"
        await pilot.pause(0.01)


def _run(app: GpudiagApp, steps, size=(80, 24)) -> None:
    """Run the app headless, wait for probing, then `await steps(pilot)`."""

    async def scenario() -> None:
        async with app.run_test(size=size) as pilot:
            await app.workers.wait_for_complete()
            await pilot.pause()
            await steps(pilot)

    asyncio.run(scenario())


def test_overview_says_what_to_fix_first(tmp_path: Path) -> None:
    app = GpudiagApp(_demo(tmp_path))

    async def steps(pilot) -> None:
        text = _text(app, "#overview-text")
        assert "GPUs     8 x NVIDIA H100 80GB HBM3 (1 not answering: GPU 7)" in text
        assert "Driver   590.48.01  CUDA 13.1" in text
        assert "Platform Supermicro SYS-821GE-TNHR" in text
        fix_first = text.split("Fix first\n")[1].splitlines()
        assert fix_first[0].startswith("CRITICAL GPU001   GPU 7: GPU lost")
        assert all(line.startswith("CRITICAL") for line in fix_first[:4])
        assert fix_first[4].startswith("WARNING")
        assert "CRITICAL 4  WARNING" in _banner(app)
        assert "Rules    " in text and " did not apply, " in text
        assert app.query_one(TabbedContent).active == "overview-tab"

    _run(app, steps)


def test_findings_filter_sort_and_detail(tmp_path: Path) -> None:
    app = GpudiagApp(_demo(tmp_path))

    async def steps(pilot) -> None:
        await pilot.press("2")
        rows = _cells(app, "#findings")
        assert rows[0] == ["CRITICAL", "GPU001", "GPU 7", "GPU lost"]
        detail = _text(app, "#finding-text")
        # the message quotes the reading: named, not repeated
        assert "evidence: gpu.7.health as above  (nvml:nvmlDeviceGetName)" in detail
        assert "why: A lost GPU" in detail and "fix: Check dmesg" in detail
        await pilot.press("down")
        assert "CRITICAL GPU011" in _text(app, "#finding-text")  # follows the cursor
        await pilot.press("s")  # by id
        ids = [r[1] for r in _cells(app, "#findings")]
        assert ids == sorted(ids)
        await pilot.press("f")  # critical only
        assert {r[0] for r in _cells(app, "#findings")} == {"CRITICAL"}
        # the choice stays on screen beside the filter, not only in a toast that fades
        assert str(app.query_one("#findings-state").render()) == "f: critical  s: by id"
        await pilot.press("f", "f", "f", "f", "f")  # warning, unknown, info, n/a, all
        assert len(_cells(app, "#findings")) == len(rows)
        await pilot.press("slash")
        assert app.focused is app.query_one("#findings-filter", Input)
        await pilot.press("N", "V", "L")
        filtered = _cells(app, "#findings")
        assert filtered and all(r[1].startswith("NVL") for r in filtered)
        assert "GPU 2" in filtered[0][2]
        await pilot.press("escape")
        assert app.focused is app.query_one("#findings", DataTable)
        await pilot.press("slash", "backspace", "backspace", "backspace", "G", "P", "U")
        await pilot.press("enter", "s")  # Enter leaves the field: s sorts, not types
        assert app.query_one("#findings-filter", Input).value == "GPU"
        assert app.focused is app.query_one("#findings", DataTable)
        assert "Sort" in _footer(app)
        app.query_one("#findings-filter", Input).value = "no such thing"
        await pilot.pause()
        assert _cells(app, "#findings") == [] and "no finding matches" in _text(
            app, "#finding-text"
        )
        await pilot.press("1")
        assert app.query_one(TabbedContent).active == "overview-tab"
        assert app.focused is app.query_one("#overview")

    _run(app, steps)


def test_gpus_screen_rows_and_readings_of_the_selected(tmp_path: Path) -> None:
    app = GpudiagApp(_demo(tmp_path))

    async def steps(pilot) -> None:
        await pilot.press("3")
        rows = _cells(app, "#gpus")
        assert len(rows) == 8
        # health first after the id, from each GPU's worst finding (GPU 4: a link at half
        # speed, NVL007)
        assert [row[1] for row in rows] == [
            "OK",
            "CRIT",
            "WARN",
            "WARN",
            "WARN",
            "WARN",
            "WARN",
            "CRIT",
        ]
        assert rows[3][:4] == ["GPU3", "WARN", "5d:00.0", "5/5 x8/16"]  # the narrow link
        assert rows[5][9] == "off"  # persistence off on GPU 5
        assert rows[0][3] == "5 x16"  # at its maximum
        assert rows[6][7] == "HwSlow,HwTherm"  # short names: shown at 80 columns
        assert rows[7][2] == "LOST"
        assert _cells(app, "#gpu-readings")[0][0].startswith("gpu.0.")
        await pilot.press("down", "down", "down")
        readings = {r[0]: r[1] for r in _cells(app, "#gpu-readings")}
        assert readings["gpu.3.pcie.link_width"] == "8 lanes"
        assert all(key.startswith("gpu.3.") for key in readings)

    _run(app, steps)


def test_host_tree_groups_readings(tmp_path: Path) -> None:
    app = GpudiagApp(_demo(tmp_path))

    async def steps(pilot) -> None:
        await pilot.press("5")
        tree = app.query_one("#host", Tree)
        assert app.focused is tree
        groups = [str(child.label) for child in tree.root.children]
        assert groups[0].startswith("Host and OS (") and any(g.startswith("PCIe (") for g in groups)
        assert not any(g.startswith(("gpu", "topo")) for g in groups)
        await pilot.press("down", "down", "enter")  # open CPU
        cpu = tree.root.children[1]
        assert cpu.is_expanded
        leaves = [str(node.label) for node in cpu.children if not node.children]
        assert "cpu.model = Intel(R) Xeon(R) Platinum 8480+" in leaves

    _run(app, steps)


def test_help_screen_lists_every_key_and_closes(tmp_path: Path) -> None:
    app = GpudiagApp(load_or_save_snapshot(tmp_path))

    async def steps(pilot) -> None:
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        text = app.screen.query_one(Static).render()
        for line in ("1  Overview", "e  Export", "q  Quit", "/  Search"):
            assert line in str(text)
        # a saved snapshot is neither probed again nor measured: those keys are not listed
        refused = ("Refresh", "quick sizes", "full sizes", "Cancel kernels", "until confident")
        assert not [word for word in refused if word in str(text)], str(text)
        assert str(text).count("\n") + 1 <= 18  # fits 80x24 (and 60x20) without scrolling
        await pilot.press("escape")
        assert not isinstance(app.screen, HelpScreen)
        await pilot.press("question_mark", "q")  # q quits, as the help lists it
        await pilot.pause()
        assert app.return_code == 0 and not app.is_running

    _run(app, steps)


def load_or_save_snapshot(tmp_path: Path):
    """The faulty demo probed once, saved and loaded again (a saved snapshot)."""
    snapshot = _demo(tmp_path / "tree").snapshot()
    save(snapshot, tmp_path / "demo.toml")
    return load(tmp_path / "demo.toml")


def test_export_asks_for_a_name_and_refuses_to_clobber(tmp_path: Path) -> None:
    target = tmp_path / "out.toml"
    target.write_text("keep me")
    app = GpudiagApp(load_or_save_snapshot(tmp_path))

    async def steps(pilot) -> None:
        await pilot.press("e")
        assert isinstance(app.screen, ExportScreen)
        field = app.screen.query_one(Input)
        assert field.value == "gpudiag-hgx-test-01.toml"
        field.value = str(target)
        await pilot.press("enter")
        assert isinstance(app.screen, ExportScreen)  # not yet: the file exists
        assert "exists: y or Enter overwrites it, n edits the name" in str(
            app.screen.query_one("#export-note", Label).render()
        )
        assert target.read_text() == "keep me"
        await pilot.press("n")  # an answer, not a letter typed into the name
        assert field.value == str(target) and app.screen.focused is field
        await pilot.press("escape")
        assert not isinstance(app.screen, ExportScreen) and target.read_text() == "keep me"
        await pilot.press("e")
        app.screen.query_one(Input).value = str(target)
        await pilot.press("enter", "y")  # confirmed, as the kernels' question is
        await pilot.pause()
        assert not isinstance(app.screen, ExportScreen) and load(target).host == "hgx-test-01"
        await pilot.press("e")
        app.screen.query_one(Input).value = str(target)
        await pilot.press("enter", "enter")  # Enter again confirms too
        await pilot.pause()
        assert not isinstance(app.screen, ExportScreen)
        fresh = tmp_path / "new.json"
        await pilot.press("e")
        app.screen.query_one(Input).value = str(fresh)
        await pilot.press("enter")
        await pilot.pause()
        assert load(fresh).findings == app.snapshot.findings

    _run(app, steps)


def _palette(app: GpudiagApp) -> list[str]:
    """The commands the open command palette lists, first the best match of what is
    typed ([] while no palette is open)."""
    from textual.command import CommandList
    from textual.css.query import NoMatches

    try:
        commands = app.screen.query_one(CommandList)
    except NoMatches:
        return []
    return [commands.get_option_at_index(i).hit.text for i in range(commands.option_count)]


def test_command_palette_is_built_from_the_bindings(tmp_path: Path) -> None:
    app = GpudiagApp(load_or_save_snapshot(tmp_path))

    # every key's name, the panes' too (sort, filter: the findings pane's)
    titles = [tab.title for tab in TABS] + ["Export", "Search", "Help", "Sort findings"]
    titles.append("Filter by severity")

    async def steps(pilot) -> None:
        await pilot.press("ctrl+p")
        await _until(pilot, lambda: set(titles) <= set(_palette(app)), "the palette's list")
        listed = _palette(app)
        assert "Refresh" not in listed and "Kernels, quick sizes" not in listed  # refused
        assert listed.count("Keys") == 1 and listed.count("Quit") == 1  # Textual's, once
        for key in "export":
            await pilot.press(key)
        await _until(pilot, lambda: _palette(app)[:1] == ["Export"], "Export found")
        await pilot.press("enter")
        await _until(pilot, lambda: isinstance(app.screen, ExportScreen), "the export screen")
        await pilot.press("escape")
        # a pane's binding runs on its pane, from any screen
        await pilot.press("ctrl+p", *"sort")
        await _until(pilot, lambda: _palette(app)[:1] == ["Sort findings"], "Sort found")
        await pilot.press("enter")
        await _until(pilot, lambda: _notices(app), "the notice")
        assert app.query_one(TabbedContent).active == "findings-tab"
        assert _notices(app)[-1] == "findings sorted by id"

    _run(app, steps)


def test_a_new_binding_shows_in_the_palette_and_help(tmp_path: Path, monkeypatch) -> None:
    import gpudiag.tui
    from gpudiag.panes import PANES, FindingsPane

    class Findings(FindingsPane):
        BINDINGS: ClassVar[list[Binding]] = [Binding("w", "widest", "Widest first")]

        def action_widest(self) -> None:
            self.notify("widest")

    class App(GpudiagApp):
        BINDINGS: ClassVar[list[Binding]] = [Binding("z", "bell", "Ring the bell")]

    panes = tuple(Findings if pane is FindingsPane else pane for pane in PANES)
    monkeypatch.setattr(gpudiag.tui, "PANES", panes)
    app = App(load_or_save_snapshot(tmp_path))

    async def steps(pilot) -> None:
        await pilot.press("question_mark")
        text = str(app.screen.query_one(Static).render())
        assert "z  Ring the bell" in text and "w  Widest first" in text
        assert "s  Sort findings" in text  # the inherited ones stay
        await pilot.press("escape", "ctrl+p")
        wanted = {"Ring the bell", "Widest first", "Sort findings"}
        await _until(pilot, lambda: wanted <= set(_palette(app)), "the palette's list")
        await pilot.press(*"widest")
        await _until(pilot, lambda: _palette(app)[:1] == ["Widest first"], "Widest found")
        await pilot.press("enter")
        await _until(pilot, lambda: _notices(app), "the notice")
        assert _notices(app) == ["widest"]

    _run(app, steps)


def test_saved_snapshot_cannot_run_kernels(tmp_path: Path) -> None:
    app = GpudiagApp(load_or_save_snapshot(tmp_path))

    async def steps(pilot) -> None:
        assert "Kernels" not in _footer(app) and "Refresh" not in _footer(app)
        await pilot.press("k")  # refused, and not offered in the footer
        await pilot.pause()
        assert not app.kernels_running and _notices(app) == []
        await pilot.press("6")
        await pilot.pause()
        # no run keys that would do nothing: where they would be, why there are none
        assert not app.query("#run-quick") and not app.query("#run-full")
        assert str(app.query_one("#kernel-why", Label).render()) == NOT_MEASURABLE
        status = str(app.query_one("#kernel-status", Label).render())
        assert status == "the recording holds no kernel results"  # what it holds, no more

    _run(app, steps)


def _footer(app: GpudiagApp) -> list[str]:
    """The descriptions of the keys the footer shows now."""
    return [b.description for _, b, enabled, _ in app.screen.active_bindings.values() if b.show]


def _screen_text(app: GpudiagApp) -> str:
    """The screen as the user sees it, as text (Textual's screenshot, its SVG's text)."""
    import html

    svg = app.export_screenshot()
    return html.unescape("".join(re.findall(r"<text[^>]*>(.*?)</text>", svg))).replace("\xa0", " ")


def _notices(app: GpudiagApp) -> list[str]:
    """The notifications the user sees, in order."""
    return [n.message for n in app._notifications]


def test_replayed_node_refuses_kernels(tmp_path: Path) -> None:
    """A replay (--nvml-replay, demo, --replay) is a recording: the kernels screen says
    so where the run keys would be (it said "ready" and offered Quick [k] and Full [K],
    which did nothing)."""
    app = GpudiagApp(_demo(tmp_path))

    async def steps(pilot) -> None:
        await app.workers.wait_for_complete()
        assert "Kernels" not in _footer(app) and "Refresh" in _footer(app)
        await pilot.press("6")
        await pilot.pause()
        assert not app.query("#run-quick") and not app.query("#run-full")
        assert str(app.query_one("#kernel-why", Label).render()) == NOT_MEASURABLE
        status = str(app.query_one("#kernel-status", Label).render())
        assert status == "the recording holds no kernel results"  # not "shown" above none
        assert "no kernel results yet" not in str(app.query_one("#kernel-charts").render())
        # the picker shows every kernel by name, unscrolled (at 16x7 allreduce's name sat
        # on a hidden row and burn was out of view)
        screen = _screen_text(app)
        assert all(f"] {name}" in screen for name in KERNELS), screen
        await pilot.press("k")
        await pilot.pause()
        assert not app.kernels_running and not app.snapshot.kernels

    _run(app, steps)


TINY = {
    "quick": KernelPlan(("stream", "peer"), "cpu", 1 << 16, trials=2),
    "full": KernelPlan(("stream",), "cpu", 1 << 16, trials=2, seconds=60.0),
}


def _this_machine() -> LiveNode:
    quick = Probe("quick", "Quick", Cost.INSTANT, frozenset(), lambda ctx: [Reading("y", 1)])
    return LiveNode(host=HostFS("/"), nvml=open_nvml(None), probes=[quick], rules=load_rules())


def test_kernels_run_on_this_machine_with_progress(tmp_path: Path) -> None:
    app = GpudiagApp(_this_machine(), plans=TINY)

    async def steps(pilot) -> None:
        await app.workers.wait_for_complete()
        await pilot.press("k")  # asks first, saying what is on the GPUs
        assert isinstance(app.screen, ConfirmKernels)
        question = str(app.screen.query_one(Static).render())
        assert question.startswith("Run stream, peer at quick sizes on this machine?")
        assert "No GPU seen: only the CPU kernels will run." in question
        await pilot.press("n")
        assert not app.kernels_running and "not run" in _text(app, "#kernel-status")
        await pilot.press("k", "y")
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert not app.kernels_running
        rows = _cells(app, "#kernel-results")
        triad = [r for r in rows if r[0] == "stream.triad.fp64"]
        assert triad and float(triad[0][2].split()[0]) > 0 and triad[0][2].endswith(" GB/s")
        assert "quick done: " in str(app.query_one("#kernel-status", Label).render())
        assert app.query_one("#kernel-progress", ProgressBar).percentage == 1.0
        assert "STREAM triad (fp64)" in _text(app, "#kernel-charts")
        assert {k.kernel for k in app.snapshot.kernels} == {"stream", "peer"}

    _run(app, steps)


def test_kernels_are_chosen_with_space(tmp_path: Path) -> None:
    app = GpudiagApp(_this_machine(), plans=TINY)

    async def steps(pilot) -> None:
        await pilot.press("6")
        choice = app.query_one("#kernel-choice", KernelChoice)
        assert app.focused is choice and choice.selected == ["stream", "peer"]
        await pilot.press("down", "down", "down", "space")  # untick peer
        assert choice.selected == ["stream"]
        assert str(choice.get_option_at_index(3).prompt) == "[ ] peer"  # readable uncoloured
        assert str(choice.get_option_at_index(0).prompt) == "[x] stream"
        await pilot.press("k", "y")
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert {k.kernel for k in app.snapshot.kernels} == {"stream"}
        await pilot.press("home", "space")  # untick stream: nothing left
        await pilot.press("k")
        await pilot.pause()
        assert not app.kernels_running and {k.kernel for k in app.snapshot.kernels} == {"stream"}

    _run(app, steps)


def test_kernels_cancel_stops_a_long_run(tmp_path: Path, monkeypatch) -> None:
    app = GpudiagApp(_this_machine(), plans=TINY)
    fractions: list[float] = []  # STREAM reports its progress after each round
    shown = KernelsPane.progress
    monkeypatch.setattr(
        KernelsPane, "progress", lambda pane, *a: fractions.append(a[1]) or shown(pane, *a)
    )
    rounds = 2 + TINY["full"].trials  # kernels/stream.py's two warm-up rounds, then trials

    async def steps(pilot) -> None:
        await pilot.press("K", "enter")  # 60 seconds of STREAM
        await _until(pilot, lambda: "Cancel kernels" in _footer(app), "Cancel in the footer")
        # the rounds after the first call (0%, as it starts)
        await _until(pilot, lambda: len(fractions) > rounds, "the trials asked for")
        started = asyncio.get_running_loop().time()
        await pilot.press("x")
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert asyncio.get_running_loop().time() - started < 10
        assert "full cancelled" in str(app.query_one("#kernel-status", Label).render())
        # the trials asked for (2) were done before x: kept; only the rest of the 60 s is cut
        kept = app.snapshot.kernels
        assert kept and all(k.status.value == "ok" and len(k.samples) >= 2 for k in kept)
        assert "Cancel kernels" not in _footer(app)

    _run(app, steps)


def test_quit_while_kernels_run_returns_promptly() -> None:
    app = GpudiagApp(_this_machine(), plans=TINY)

    async def scenario() -> float:
        async with app.run_test(size=(80, 24)) as pilot:
            await app.workers.wait_for_complete()
            await pilot.press("K", "y")  # 60 seconds of STREAM
            await _until(pilot, lambda: app.kernels_running, "the kernels running")
            started = asyncio.get_running_loop().time()
            await pilot.press("q")
        return asyncio.get_running_loop().time() - started

    assert asyncio.run(scenario()) < 10
    assert app.return_code == 0


def _findings_screen_svg(tmp_path: Path) -> str:
    app = GpudiagApp(load_or_save_snapshot(tmp_path))
    shot: list[str] = []

    async def steps(pilot) -> None:
        await pilot.press("2")
        await pilot.pause()
        shot.append(app.export_screenshot())

    _run(app, steps)
    return shot[0]


def _colours(svg: str) -> set[tuple[int, int, int]]:
    return {
        (int(h[0:2], 16), int(h[2:4], 16), int(h[4:6], 16))
        for h in re.findall(r"fill: #([0-9a-f]{6})", svg)
    }


def _critical_style(svg: str) -> str:
    styles = dict(re.findall(r"\.(terminal-[\w-]+) \{ ([^}]*) \}", svg))
    cls = re.search(r'<text class="([^"]+)"[^>]*>CRITICAL', svg)
    assert cls, "no CRITICAL on the findings screen"
    return styles[cls.group(1).split()[0]]


def _style_of(svg: str, word: str) -> str:
    styles = dict(re.findall(r"\.(terminal-[\w-]+) \{ ([^}]*) \}", svg))
    cls = re.search(rf'<text class="([^"]+)"[^>]*>{word}', svg)
    assert cls, f"no {word} on the screen"
    return styles[cls.group(1).split()[0]]


def test_no_color_shows_severity_by_words_and_weight_only(tmp_path: Path, monkeypatch) -> None:
    """Under NO_COLOR every colour is the terminal's default foreground or background (the
    SVG export draws them in Rich's SVG theme), never a fixed grey: CRITICAL
    is bold reverse video of them, WARNING bold. Textual's own NO_COLOR made CRITICAL grey
    237 on 233."""
    from rich.terminal_theme import SVG_EXPORT_THEME as TERMINAL

    monkeypatch.delenv("NO_COLOR", raising=False)
    coloured = _findings_screen_svg(tmp_path / "colour")
    assert any(max(c) - min(c) > 40 for c in _colours(coloured))  # the check can tell colour
    monkeypatch.setenv("NO_COLOR", "1")
    plain = _findings_screen_svg(tmp_path / "plain")
    fg, bg = tuple(TERMINAL.foreground_color), tuple(TERMINAL.background_color)
    dim = {c for c in _colours(plain) if c not in (fg, bg)}  # INFO: the foreground, dimmed
    assert len(dim) <= 1 and all(b < d < f for d, b, f in zip(*dim, bg, fg, strict=False))
    hex_fg, hex_bg = (f"#{''.join(f'{v:02x}' for v in c)}" for c in (fg, bg))
    # reverse video: the text in the background's colour on a block of the foreground's
    assert _critical_style(plain) == f"fill: {hex_bg};font-weight: bold"
    assert _style_of(plain, "WARNING") == f"fill: {hex_fg};font-weight: bold"
    assert "CRITICAL" in plain and "WARNING" in plain


def test_no_color_snapshot(snap_compare, monkeypatch, frozen: Snapshot) -> None:
    """The findings screen under NO_COLOR: the terminal's own colours, CRITICAL reversed,
    WARNING bold, the cursor reversed."""
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.setenv("TERM", "xterm-256color")
    assert snap_compare(GpudiagApp(frozen), press=["2"], terminal_size=(80, 24))


# ------------------------------------------------------------------ SVG snapshots

SCREEN_KEYS = [tab.key for tab in TABS] + ["question_mark", "e"]


def _frozen(tmp_path: Path) -> Snapshot:
    """The faulty demo with everything that varies run to run fixed: time, durations,
    command line; and kernel results for the kernels screen (CPU devices only: no GPU
    figure is claimed that was not measured on one)."""
    snapshot = _demo(tmp_path).snapshot()
    values = {"cpu-numa0": (20.1, 20.5, 19.8), "cpu-numa1": (12.3, 12.0, 12.6)}
    kernels = tuple(
        KernelResult(
            "stream",
            device,
            "triad",
            "GB/s",
            ProbeStatus.OK,
            v,
            summarize(v),
            (("dtype", "fp64"),),
        )
        for device, v in values.items()
    )
    kernels += (
        KernelResult(
            "stream", "gpu", "all", "", ProbeStatus.SKIPPED, error="CuPy is not installed"
        ),
    )
    return with_findings(
        replace(
            snapshot,
            created="2026-01-01T00:00:00Z",
            command_line=("gpudiag",),
            probes=tuple(replace(p, duration_s=0.01) for p in snapshot.probes),
            kernels=kernels,
        ),
        load_rules(),
    )


@pytest.fixture(scope="module")
def frozen(tmp_path_factory: pytest.TempPathFactory) -> Snapshot:
    """One frozen demo snapshot for every SVG (probing it takes a second)."""
    return _frozen(tmp_path_factory.mktemp("frozen"))


@pytest.mark.parametrize("size", [(80, 24), (120, 40)], ids=["80x24", "120x40"])
@pytest.mark.parametrize("key", SCREEN_KEYS)
def test_screen_snapshot(snap_compare, monkeypatch, frozen: Snapshot, key: str, size) -> None:
    # the same rendering whatever the caller's terminal settings (NO_COLOR drops colours)
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.delenv("FORCE_COLOR", raising=False)
    monkeypatch.setenv("TERM", "xterm-256color")
    monkeypatch.setenv("COLORTERM", "truecolor")
    assert snap_compare(GpudiagApp(frozen), press=[key], terminal_size=size)


def test_a_failed_watch_sample_is_said_on_the_watch_screen(tmp_path: Path, monkeypatch) -> None:
    """A sample that fails unexpectedly is said where the samples show, and the node's
    verdict stays; before, the error went to the banner through query_one, which raised
    NoMatches when the sample failed as the app closed (seen under load)."""
    import gpudiag.watch

    def broken(*args, **kwargs):
        raise RuntimeError("the sampler broke")

    monkeypatch.setattr(gpudiag.watch, "sample_node", broken)
    app = GpudiagApp(_demo(tmp_path))

    async def steps(pilot) -> None:
        await pilot.press("9")
        await app.workers.wait_for_complete()
        await pilot.pause()
        status = str(app.query_one("#watch-status", Label).render())
        assert status == "sampling failed: RuntimeError: the sampler broke"
        assert "health: CRITICAL" in _banner(app)

    _run(app, steps)


def test_watch_screen_samples_the_demo_node(tmp_path: Path) -> None:
    app = GpudiagApp(_demo(tmp_path))

    async def steps(pilot) -> None:
        await pilot.press("9")
        await app.workers.wait_for_complete()
        await pilot.pause()
        text = _text(app, "#watch-text")
        lines = text.splitlines()
        # 479 MiB used on an idle H100, as the real capture the demo follows shows
        assert lines[0] == "GPU0     69W   41C  sm  345  mem 2619  util    0%  fb    479M  idle"
        # its power bar against its 700 W limit: an idle 69 W is low, not a full bar
        power, bar = lines[1].split()[:2]
        assert power == "power" and set(bar) == {"▁"}, lines[1]  # one sample, or two
        gpu6 = next(line for line in lines if line.startswith("GPU6"))
        assert gpu6.endswith("HwSlow,HwTherm")  # GPU 6's slowdowns, in full at 80
        # what bounds it, from the older counters the replay holds (no GPM recorded)
        assert lines[2:4] == ["      GPU 0: idle: active 0%", "      DRAM   ········   0%"]
        # a lost GPU: one line saying so, not LOST (or a dash) in every column
        assert lines[-1] == (
            "GPU7   LOST: the GPU does not answer (off the bus or hung); reset or reboot"
        )
        assert str(app.query_one("#watch-status", Label).render()).startswith("8 GPUs, every 1 s")

    _run(app, steps)


def test_watch_screen_of_the_demo_says_the_lost_gpu_is_lost() -> None:
    """`gpudiag demo`: the recording holds only GPU 7's first failed call, so its samples
    answer nothing; the snapshot found it lost, and the watch screen says LOST (it showed
    a dash in every column)."""
    from gpudiag.demo import demo_node

    app = GpudiagApp(demo_node("faulty"))

    async def steps(pilot) -> None:
        await pilot.press("9")
        await app.workers.wait_for_complete()
        await pilot.pause()
        lines = _text(app, "#watch-text").splitlines()
        assert lines[0].startswith("GPU0 ") and "W " in lines[0]
        assert lines[-1].startswith("GPU7   LOST: the GPU does not answer"), lines

    _run(app, steps)


def test_watch_screen_of_a_saved_snapshot_says_why_it_is_empty(tmp_path: Path) -> None:
    app = GpudiagApp(load_or_save_snapshot(tmp_path))

    async def steps(pilot) -> None:
        await pilot.press("9")
        await pilot.pause()
        status = str(app.query_one("#watch-status", Label).render())
        assert status.startswith("a saved snapshot has no live readings")

    _run(app, steps)


@pytest.mark.parametrize("key", ["question_mark", "e"])
def test_dialog_snapshot_at_60x20(snap_compare, monkeypatch, frozen: Snapshot, key: str) -> None:
    # help and export fit a 60x20 terminal whole (no clipping)
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.delenv("FORCE_COLOR", raising=False)
    monkeypatch.setenv("TERM", "xterm-256color")
    monkeypatch.setenv("COLORTERM", "truecolor")
    assert snap_compare(GpudiagApp(frozen), press=[key], terminal_size=(60, 20))


def test_demo_opens_the_recorded_node() -> None:
    from gpudiag.demo import demo_node

    app = GpudiagApp(demo_node("faulty"))

    async def steps(pilot) -> None:
        assert "health: CRITICAL" in _banner(app)
        await pilot.press("3")
        assert [row[0] for row in _cells(app, "#gpus")] == [f"GPU{g}" for g in range(8)]
        assert _cells(app, "#gpus")[7][1:3] == ["CRIT", "LOST"]

    _run(app, steps)


def test_first_columns_stay_when_tables_scroll_sideways(tmp_path: Path) -> None:
    app = GpudiagApp(load_or_save_snapshot(tmp_path))

    async def steps(pilot) -> None:
        await pilot.press("2")
        table = app.query_one("#findings", DataTable)
        table.scroll_to(x=table.max_scroll_x, animate=False)
        await pilot.pause()
        assert table.scroll_x > 0  # it did scroll
        assert table.render_line(1).text.split()[0] == "CRITICAL"  # whole, not "L"
        await pilot.press("3")
        gpus = app.query_one("#gpus", DataTable)
        gpus.scroll_to(x=gpus.max_scroll_x, animate=False)
        await pilot.pause()
        assert gpus.scroll_x > 0
        assert gpus.render_line(8).text.split()[:2] == ["GPU7", "CRIT"]  # id, health stay

    _run(app, steps, size=(60, 20))


def test_watch_screen_without_nvml_says_why() -> None:
    app = GpudiagApp(_node())

    async def steps(pilot) -> None:
        await pilot.press("9")
        await app.workers.wait_for_complete()
        await pilot.pause()
        status = str(app.query_one("#watch-status", Label).render())
        assert status.startswith("no GPU can be sampled: nvmlInit: DriverNotLoaded")
        # the whole reason on screen at 80 columns, wrapped (it was cut at 80 and at 120)
        assert len(status) > 80 and "".join(status.split()) in "".join(_screen_text(app).split())

    _run(app, steps)


def test_kernels_until_confident_from_the_tui(tmp_path: Path, monkeypatch) -> None:
    import gpudiag.tui

    # a 2 s budget instead of 60: the test is that the sequential run happens and says
    # whether it got confident, not how long a noisy shared machine takes to get there
    monkeypatch.setattr(gpudiag.tui, "UNTIL_CONFIDENT_S", 2.0)
    app = GpudiagApp(_this_machine(), plans=TINY)

    async def steps(pilot) -> None:
        await app.workers.wait_for_complete()
        await pilot.press("6")
        assert "Until confident" in _footer(app)
        await pilot.press("u")
        assert "until its intervals are within 3%" in _text(app, "#kernel-status")
        choice = app.query_one("#kernel-choice", KernelChoice)
        await pilot.press("down", "down", "down", "space")  # STREAM only
        assert choice.selected == ["stream"]
        await pilot.press("k", "y")
        await app.workers.wait_for_complete()
        await pilot.pause()
        triad = next(k for k in app.snapshot.kernels if k.metric == "triad")
        assert "confident" in dict(triad.params)  # the sequential test ran
        assert triad.stats is not None and triad.stats.count >= 2

    _run(app, steps)


# ------------------------------------------------------------------ panes, one per file


class _PaneAlone(App[None]):
    """One pane mounted alone, as the app mounts it, with nothing else around."""

    def __init__(self, pane: Pane) -> None:
        super().__init__()
        self.pane = pane

    def compose(self) -> ComposeResult:
        yield self.pane


def _alone(pane_class: type[Pane]) -> Pane:
    if pane_class is KernelsPane:
        return KernelsPane(("stream",), measurable=False, budget_s=60.0)
    return pane_class()


def _drawn(pane: Pane) -> dict[str, object]:
    """What a pane shows: each table's rows (first cells), each Static's text, the tree."""
    shown: dict[str, object] = {}
    for table in pane.query(DataTable):
        shown[table.id] = [str(table.get_row_at(i)[0]) for i in range(table.row_count)]
    for static in pane.query(Static):
        if static.id:
            shown[static.id] = str(static.render())
    for tree in pane.query(Tree):
        shown[tree.id] = [str(tree.root.label)] + [str(n.label) for n in tree.root.children]
    return shown


@pytest.mark.parametrize("pane_class", PANES, ids=[p.NAME for p in PANES])
def test_each_pane_draws_from_a_snapshot_alone(frozen: Snapshot, pane_class) -> None:
    pane = _alone(pane_class)
    view = SnapshotView.read(frozen, rules=load_rules())
    shown: list[tuple[dict, dict]] = []

    async def scenario() -> None:
        async with _PaneAlone(pane).run_test(size=(100, 40)) as pilot:
            before = _drawn(pane)
            pane.update_from(view)
            await pilot.pause()
            shown.append((before, _drawn(pane)))

    asyncio.run(scenario())
    before, after = shown[0]
    probes = [p.name for p in frozen.probes]
    readings = [r.key for p in frozen.probes for r in p.readings]
    expected = {
        "overview": lambda: (
            "hgx-test-01" in after["overview-text"] and "Fix first" in after["overview-text"]
        ),
        "findings": lambda: (
            after["findings"][:1] == ["CRITICAL"]
            and len(after["findings"]) == len(frozen.findings)
            and "GPU 7: GPU lost\ndoes not answer NVML" in after["finding-text"]
        ),
        "gpus": lambda: (
            after["gpus"] == [f"GPU{g}" for g in range(8)] and "gpu.0.name" in after["gpu-readings"]
        ),
        "topology": lambda: (
            after["topology"][:2] == ["GPU0", "GPU1"] and "NV" in after["topology-legend"]
        ),
        "host": lambda: after["host"][0] == "hgx-test-01" and len(after["host"]) > 3,
        "kernels": lambda: len(after["kernel-results"]) == 3 and "triad" in after["kernel-charts"],
        "readings": lambda: after["readings"] == readings,
        "probes": lambda: after["probes"] == probes,
        # the watch draws live samples only: a snapshot changes nothing there
        "watch": lambda: after == before,
    }
    assert expected[pane_class.NAME](), after
    if pane_class.NAME != "watch":
        assert after != before


def test_judgment_is_derived_once_per_snapshot(monkeypatch) -> None:
    """Keys, filters, tabs and resizes redraw panes from the judged snapshot; only a new
    snapshot (r probes again) judges again."""
    import gpudiag.session

    judged: list[Snapshot] = []
    real = gpudiag.session.judged_readings

    def counting(snapshot: Snapshot):
        judged.append(snapshot)
        return real(snapshot)

    # SnapshotView.read imports it when called (the first screen does not load session)
    monkeypatch.setattr(gpudiag.session, "judged_readings", counting)
    app = GpudiagApp(_node())

    async def steps(pilot) -> None:
        assert len(judged) == 1
        for key in "123456789":
            await pilot.press(key)
        await pilot.press("2", "s", "f", "slash", *"gpu", "enter", "7", "slash", *"cpu")
        await pilot.resize_terminal(100, 30)
        await pilot.pause()
        assert len(judged) == 1
        await pilot.press("escape", "r")
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert len(judged) == 2 and judged[1] is app.snapshot

    _run(app, steps)


def test_the_app_draws_nothing_itself() -> None:
    """GpudiagApp wires panes and workers: none of its methods writes to a widget
    (updates, rows, labels, Rich text) or is a show_* drawing method; the panes do."""
    import ast
    import inspect

    import gpudiag.tui

    tree = ast.parse(inspect.getsource(gpudiag.tui))
    app = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "GpudiagApp")
    methods = [n.name for n in app.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]
    assert methods and not [m for m in methods if m.startswith("show_")]
    drawing = {"update", "add_row", "add_rows", "add_column", "add_columns", "add_leaf"}
    drawing |= {"set_label", "append", "add_option", "write"}
    calls = [
        n.func.attr
        for n in ast.walk(app)
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
    ]
    assert not drawing & set(calls), drawing & set(calls)
    assert not [n for n in ast.walk(app) if isinstance(n, ast.Name) and n.id == "Text"]
    assert "rich" not in {
        n.module.split(".")[0] for n in tree.body if isinstance(n, ast.ImportFrom) and n.module
    }


def test_export_name_typed_replaces_the_suggested_one(tmp_path: Path) -> None:
    """The suggested name is selected: typing replaces it (it appended to it, giving
    gpudiag-vm.toml/<path>); a long message wraps at 80 columns instead of being cut."""
    missing = tmp_path / ("deep" * 12) / "out.toml"
    app = GpudiagApp(load_or_save_snapshot(tmp_path))

    async def steps(pilot) -> None:
        await pilot.press("e")
        await pilot.pause()
        await pilot.press(*"x.toml")
        assert app.screen.query_one(Input).value == "x.toml"
        app.screen.query_one(Input).value = str(missing)
        await pilot.press("enter")
        await pilot.pause()
        note = app.screen.query_one("#export-note", Label)
        message = str(note.render())
        assert message == f"{missing}: directory {missing.parent} does not exist"
        assert len(message) > note.size.width and note.size.height * note.size.width >= len(
            message
        )  # wrapped onto more lines, not cut

    _run(app, steps)


def test_export_refuses_dash_and_never_offers_stdout(
    tmp_path: Path, monkeypatch, frozen: Snapshot
) -> None:
    """In the TUI standard output is the screen: '-' is refused with a clear reason (it
    wrote a file named '-'), and refusing a special file does not advise '-'."""
    import os

    monkeypatch.chdir(tmp_path)
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    app = GpudiagApp(frozen)

    async def steps(pilot) -> None:
        await pilot.press("e")
        await pilot.pause()
        note = app.screen.query_one("#export-note", Label)
        for name in ("-", " - "):
            app.screen.query_one(Input).value = name
            await pilot.press("enter")
            await pilot.pause()
            assert isinstance(app.screen, ExportScreen) and not (tmp_path / "-").exists()
            assert str(note.render()) == (
                "'-' is standard output, which is this screen here: give a file name"
            )
        app.screen.query_one(Input).value = str(fifo)
        await pilot.press("enter")
        await pilot.pause()
        message = str(note.render())
        assert isinstance(app.screen, ExportScreen)
        assert message == f"{fifo}: is a FIFO, not a regular file; refusing to replace it"

    _run(app, steps)


def test_overview_fix_first_fills_the_screen_and_end_goes_to_the_last_finding(
    frozen: Snapshot,
) -> None:
    """At 120x40 every critical, warning and unknown finding of the demo is listed (it
    stopped at 5 above 17 empty lines); at 80x24 as many as fit, and how many more. In
    Findings, End goes to the last row (it scrolled sideways), Home back to the first; the
    detail names the evidence the message already quotes instead of repeating it."""
    worst = [f for f in frozen.findings if f.severity.rank > Severity.INFO.rank]
    assert len(worst) > 12

    async def overview(size: tuple[int, int]) -> list[str]:
        app = GpudiagApp(frozen)
        async with app.run_test(size=size) as pilot:
            await pilot.pause()
            return _text(app, "#overview-text").splitlines()

    small = asyncio.run(overview((80, 24)))
    first = small.index("Fix first")
    listed = small[first + 1 : small.index("", first)]
    assert len(listed) >= 5 and len(small) == 24 - 5  # the screen, less header, tabs, footer
    assert small[-1].startswith(f"2 findings ({len(worst) - len(listed)} more)  3 GPUs")
    large = asyncio.run(overview((120, 60)))
    rows = large[large.index("Fix first") + 1 :]
    assert [r.split()[1] for r in rows[: len(worst)]] == [f.rule_id for f in worst]
    assert large[-1].startswith("2 findings  3 GPUs")

    app = GpudiagApp(frozen)

    async def steps(pilot) -> None:
        await pilot.press("2", "end")
        await pilot.pause()
        table = app.query_one("#findings", DataTable)
        assert table.cursor_row == table.row_count - 1 and table.scroll_x == 0
        await pilot.press("home")
        await pilot.pause()
        assert table.cursor_row == 0
        detail = _text(app, "#finding-text")
        assert detail.count("GpuIsLost") == 1, detail  # in the message, not again
        assert detail.startswith("CRITICAL GPU001  GPU 7: GPU lost\n")  # the title in full
        assert "evidence: gpu.7.health as above  (nvml:nvmlDeviceGetName)" in detail
        assert "why: " in detail

    _run(app, steps)


def test_no_gpu_node_at_80x24_says_why_in_sight(tmp_path: Path) -> None:
    """A node without NVIDIA devices or NVML: the explanation is on the first screen at
    80x24, above the findings (only its heading was), and each value not read says why."""
    node = _node(FIXTURES / "replay-no-driver.toml", root=FIXTURES / "host-basic")
    app = GpudiagApp(node)

    async def steps(pilot) -> None:
        await pilot.pause()
        svg = app.export_screenshot()
        seen = re.sub(r"<[^>]+>", "", svg).replace("&#160;", " ")
        lines = _text(app, "#overview-text").splitlines()
        no_gpu = next(i for i, line in enumerate(lines) if line.startswith("No GPU: "))
        assert no_gpu < lines.index("Fix first")
        assert "No GPU: " in seen and "gpudiag demo faulty" in seen  # in sight, whole
        for label in ("Platform", "BIOS", "Governor", "Driver"):
            (line,) = [line for line in lines if line.startswith(label)]
            assert "not read" not in line or "not read (" in line, line  # with a reason
        assert any("not read (missing: " in line for line in lines), lines

    _run(app, steps)


def test_probes_screen_shows_the_highlighted_error_in_full(tmp_path: Path) -> None:
    """The error column is cut at 80 columns; the highlighted probe's error is below, in
    full and wrapped."""
    app = GpudiagApp(_node())  # no driver: the GPU probe says why

    async def steps(pilot) -> None:
        await pilot.press("8")
        await pilot.pause()
        failed = next(i for i, r in enumerate(app.snapshot.probes) if len(r.error) > 40)
        for _ in range(failed):
            await pilot.press("down")
        await pilot.pause()
        result = app.snapshot.probes[failed]
        detail = _text(app, "#probe-detail")
        assert detail == f"{result.name}: {result.status.value}  {result.error}"
        assert app.query_one("#probe-detail", Static).size.height > 1  # wrapped, not cut

    _run(app, steps)


def test_kernels_status_wraps_at_80_columns(tmp_path: Path) -> None:
    """A long status (an error's reason) wraps onto more lines instead of being cut."""
    app = GpudiagApp(load_or_save_snapshot(tmp_path))
    reason = "ERROR: kernels failed: RuntimeError: " + "the device stopped answering " * 4

    async def steps(pilot) -> None:
        await pilot.press("6")
        await pilot.pause()
        app.kernels.say(reason)
        await pilot.pause()
        status = app.query_one("#kernel-status", Label)
        assert str(status.render()) == reason and status.size.width < len(reason)
        assert status.size.height * status.size.width >= len(reason)

    _run(app, steps)


def test_a_kernel_reason_the_table_cuts_is_read_whole_below_it(frozen: Snapshot) -> None:
    """At 80 columns the results table cuts its last cells (the range, a reason); the
    highlighted row is shown whole, wrapped, below the table."""
    reason = (
        "CuPy is not installed: pip install 'gpudiag[cuda12]' or 'gpudiag[cuda13]' to "
        "match the driver, then run the kernels again on this node"
    )
    failed = KernelResult("stream", "gpu", "all", "", ProbeStatus.SKIPPED, error=reason)
    snapshot = replace(frozen, kernels=(*frozen.kernels[:2], failed))
    app = GpudiagApp(snapshot)

    async def steps(pilot) -> None:
        await pilot.press("6")
        table = app.query_one("#kernel-results", DataTable)
        table.focus()
        await pilot.pause()
        assert "triad" in _text(app, "#kernel-detail")  # the first row, highlighted
        await pilot.press("down", "down")
        await pilot.pause()
        shown = " ".join(_text(app, "#kernel-detail").split())
        assert f"min-max: {reason}" in shown, shown

    _run(app, steps)
