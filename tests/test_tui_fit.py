"""`gpudiag demo faulty` at 80x24, screen by screen: text is wrapped or one key away,
never cut, and a lost GPU's row holds no unit fragments of missing readings."""

from __future__ import annotations

import asyncio
import re

import pytest
from textual.widgets import DataTable, Input, Tree

from gpudiag.hostfs import HostFS
from gpudiag.model import Snapshot
from gpudiag.tui import GpudiagApp


@pytest.fixture(scope="module")
def faulty() -> Snapshot:
    """The faulty demo as `gpudiag demo faulty` opens it, probed once for the module."""
    from gpudiag.demo import demo_node

    return demo_node("faulty").snapshot()


def _lines(app: GpudiagApp) -> list[str]:
    """The screen as the user sees it, line by line (what the compositor draws)."""
    return [strip.text for strip in app.screen._compositor.render_strips()]


def _shown(app: GpudiagApp) -> str:
    """The screen's words with wrapping undone: a text wrapped over lines is found whole."""
    return " ".join(" ".join(_lines(app)).split())


def _run(app: GpudiagApp, steps) -> None:
    app.animation_level = "none"  # the tabs' underline slides for 0.2-0.3 s a key otherwise

    async def scenario() -> None:
        async with app.run_test(size=(80, 24)) as pilot:
            await app.workers.wait_for_complete()
            await pilot.pause()
            await steps(pilot)

    asyncio.run(scenario())


FRAGMENTS = re.compile(r"[-/ xCW]*-[-/ xCW]*")  # "-/- x-/-", "-C", "-/-W": no value at all


async def _to_row(pilot, table: DataTable, key: str) -> None:
    """Move the table's cursor down to the row whose first cell is `key`."""
    keys = [str(table.get_row_at(i)[0]) for i in range(table.row_count)]
    table.focus()
    table.move_cursor(row=keys.index(key))
    await pilot.pause()


LONG_VALUE = "Deprecated (this driver no longer offers it)"
LONG_SOURCE = "nvml:nvmlDeviceGetDefaultApplicationsClock"


def test_gpus_screen_lost_row_and_the_highlighted_reading(faulty: Snapshot) -> None:
    """A lost GPU's row said `-/- x-/-`, `-C`, `-/-W` (unit fragments of readings never
    taken): it is blank past LOST. The GPU's readings table cuts long values and sources
    to its columns: the highlighted one is shown whole below it, as on the readings
    screen."""
    app = GpudiagApp(faulty)

    async def steps(pilot) -> None:
        await pilot.press("3")
        await pilot.pause()
        table = app.query_one("#gpus", DataTable)
        rows = [[str(c) for c in table.get_row_at(i)] for i in range(table.row_count)]
        assert rows[7][:3] == ["GPU7", "CRIT", "LOST"]
        assert rows[7][3:] == [""] * (len(rows[7]) - 3)  # nothing measured: blank
        for row in rows:
            assert not [c for c in row if c != "-" and FRAGMENTS.fullmatch(c)], row
        assert "-/-" not in _lines(app)[table.region.y + 8]
        title = _lines(app)[0].split("—")[1].split()  # it was cut: "... read-onl…"
        assert title == ["read-only,", "saved", faulty.created]
        readings = app.query_one("#gpu-readings", DataTable)
        await _to_row(pilot, readings, "gpu.0.clocks.default_app_mem")
        assert LONG_VALUE in _shown(app) and LONG_SOURCE in _shown(app)
        await pilot.resize_terminal(84, 24)  # "pers" would show as "pe" at the edge
        await pilot.pause()
        top = _lines(app)[table.region.y]
        words = {word for column in table.columns.values() for word in column.label.plain.split()}
        assert set(top.split()) <= words, top  # whole headers only

    _run(app, steps)


def test_topology_readings_and_host_show_their_text_whole(faulty: Snapshot) -> None:
    """Topology: at 80 columns the 8-GPU matrix showed GPU7's column as `G`; every GPU's
    column is there whole, and no column is cut at the edge (the NICs scroll into view).
    Readings: the detail had two lines, and a reading longer than one line pushed its
    source out of sight (136 readings of the demo; pcie.devices needs four). Host: the
    tree's lines are cut at the screen's edge; the highlighted one is shown whole below."""
    from gpudiag import views

    app = GpudiagApp(faulty)
    headers = set(views.topology_matrix(faulty).headers)
    devices = next(r for p in faulty.probes for r in p.readings if r.key == "pcie.devices")
    container = "host.virt.container = [missing] container markers are only seen on the live node"

    async def steps(pilot) -> None:
        await pilot.press("4")
        await pilot.pause()
        table = app.query_one("#topology", DataTable)
        top = _lines(app)[table.region.y]  # the table's header line
        assert [f"GPU{g}" for g in range(8)] == [w for w in top.split() if w.startswith("GPU")]
        assert set(top.split()) <= headers, top  # whole headers only
        cells = _lines(app)[table.region.y + 8].split()  # GPU7's row: name, NUMA, CPUs
        assert cells[0] == "GPU7" and cells[3 + 7] == "X", cells  # its own column in sight

        await pilot.press("7")
        await pilot.pause()
        app.query_one("#readings-filter", Input).value = "pcie.devices"
        await pilot.pause()
        await _to_row(pilot, app.query_one("#readings", DataTable), "pcie.devices")
        assert f"pcie.devices = {devices.display()} {devices.source}" in _shown(app)

        await pilot.press("5")
        await pilot.pause()
        tree = app.query_one("#host", Tree)
        tree.root.children[0].expand_all()  # Host and OS
        await pilot.pause()
        labels = [str(tree.get_node_at_line(i).label) for i in range(tree.last_line + 1)]
        tree.move_cursor_to_line(labels.index(container))
        await pilot.pause()
        assert container in _shown(app)

    _run(app, steps)


def test_the_footer_shows_whole_keys_and_help_on_a_live_node() -> None:
    """On this machine (kernels can run) the keys of the findings and kernels screens
    do not fit 80 columns: the footer cut `k Kernels` to `k` under the palette's key and
    hid it past the edge. A key is shown whole or not at all (`?` lists them all)."""
    from textual.widgets._footer import FooterKey

    from gpudiag.nvml import open_nvml
    from gpudiag.probe import Cost, Probe
    from gpudiag.rulefile import load_rules
    from gpudiag.session import LiveNode

    quick = Probe("quick", "Quick", Cost.INSTANT, frozenset(), lambda ctx: [])
    node = LiveNode(host=HostFS("/"), nvml=open_nvml(None), probes=[quick], rules=load_rules())
    app = GpudiagApp(node)

    async def steps(pilot) -> None:
        for key in ("2", "6"):
            await pilot.press(key)
            await pilot.pause()
            keys = [k for k in app.screen.query(FooterKey) if k.display]
            palette = next(k for k in keys if k.has_class("-command-palette"))
            shown = [k for k in keys if k is not palette]
            assert [k for k in shown if k.region.right > palette.region.x] == []
            assert "Help" in [k.description for k in shown]
            assert key == "2" or "Kernels" in [k.description for k in shown]  # its own key

    _run(app, steps)
