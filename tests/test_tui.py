"""The minimal TUI, driven with Textual's Pilot at 80x24."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

from textual.widgets import DataTable, Static

from gpudiag.hostfs import HostFS
from gpudiag.model import Reading
from gpudiag.nvml import Nvml, ReplayBackend
from gpudiag.probe import Cost, Probe
from gpudiag.probes import default_probes
from gpudiag.ruleengine import load_rules
from gpudiag.session import LiveNode
from gpudiag.snapshot import load, save
from gpudiag.tui import GpudiagApp

from conftest import REPO
from hosttree import build_hgx_tree

FIXTURES = Path(__file__).parent / "fixtures"
ALL_OK = [[p.name, "ok"] for p in default_probes()]
NO_NVML = [[p.name, "skipped" if p.name == "gpu" else "ok"] for p in default_probes()]


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
            assert ["UNKNOWN", "NVML002", "node"] in [row[:3] for row in findings]
            assert "gpunode01  health: CRITICAL" in _banner(app)
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


def test_hanging_probe_does_not_freeze_the_screen() -> None:
    release = threading.Event()
    hang = Probe(
        "hang",
        "Hangs",
        Cost.INSTANT,
        frozenset(),
        lambda ctx: [release.wait(30) and Reading("x", 1)],
        timeout_s=0.5,
    )
    quick = Probe("quick", "Quick", Cost.INSTANT, frozenset(), lambda ctx: [Reading("y", 1)])

    async def scenario() -> None:
        app = GpudiagApp(_node(probes=[hang, quick]))
        async with app.run_test(size=(80, 24)) as pilot:
            # the quick probe is shown while the other still runs (the hang lasts 0.5 s;
            # poll rather than sleep a fixed time, so a loaded machine does not fail this)
            for _ in range(40):
                await pilot.pause(0.01)
                if _cells(app, "#probes"):
                    break
            assert [row[:2] for row in _cells(app, "#probes")] == [["quick", "ok"]]
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
            assert [row[:2] for row in _cells(app, "#probes")] == ALL_OK
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
            await pilot.press("2")
            await pilot.pause()
            rows = {row[0]: row[1:] for row in _cells(app, "#readings")}
            assert app.snapshot is not None
            assert len(rows) == len(app.snapshot.readings_by_key)
            assert rows["host.hostname"] == ["gpunode01", "procfs:sys/kernel/hostname"]
            assert rows["gpu.1.health"][0].startswith("[error] nvmlDeviceGetName: GpuIsLost")
            assert app.focused is app.query_one("#readings", DataTable)
            # statuses are shown as text on screen, not swallowed as markup
            assert "[missing]" in app.export_screenshot()
            await pilot.press("4")
            assert app.focused is app.query_one("#probes", DataTable)

    asyncio.run(scenario())


def test_readings_of_a_real_captured_tree_are_listed(realdata_trees: dict[str, Path]) -> None:
    node = _node(root=realdata_trees["hwloc__nvidiagpunumanodes"])

    async def scenario() -> None:
        app = GpudiagApp(node)
        async with app.run_test(size=(80, 24)) as pilot:
            await app.workers.wait_for_complete()
            await pilot.press("2")
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
            await pilot.press("3")
            await pilot.pause()
            rows = _cells(app, "#topology")
            assert len(rows) == 8
            assert rows[0] == [
                "GPU0",
                "X",
                "NV18",
                "NV17",
                "NV18",
                "NV18",
                "NV18",
                "NV18",
                "?",
                "PIX",
                "0-55,112-167",
                "0",
            ]
            assert rows[7][:3] == ["GPU7", "?", "?"]  # the lost GPU
            legend = str(app.query_one("#topology-legend", Static).render())
            assert "NIC0: 0000:19:00.0" in legend
            assert app.focused is app.query_one("#topology", DataTable)

    asyncio.run(scenario())
