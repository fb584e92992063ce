"""The diff screen: Pilot tests of its keys and SVG snapshots at 80x24 and 120x40."""

from __future__ import annotations

import asyncio
from dataclasses import replace

import pytest
from textual.widgets import DataTable, Static

from gpudiag.diff import diff_snapshots
from gpudiag.model import (
    Finding,
    KernelResult,
    ProbeResult,
    ProbeStatus,
    Reading,
    Severity,
    Snapshot,
)
from gpudiag.tui_base import KeysHelp
from gpudiag.tui_diff import HELP, DiffApp

CREATED = "2026-11-22T06:00:00Z"


def _pair() -> tuple[Snapshot, Snapshot]:
    """Two small fixed snapshots: B's GPU 1 runs at x8 and a lower power limit, and its
    triad bandwidth is 10% lower (fixed samples, so every run renders the same)."""

    def node(width: int, limit: float, triad: float, host: str) -> Snapshot:
        readings = []
        for gpu in range(2):
            readings += [
                Reading(f"gpu.{gpu}.pci.bus_id", f"0000:{0x18 + gpu:02x}:00.0"),
                Reading(f"gpu.{gpu}.pcie.link_width", width if gpu == 1 else 16, "lanes"),
                Reading(f"gpu.{gpu}.power.limit", limit if gpu == 1 else 700.0, "W"),
                Reading(f"gpu.{gpu}.serial", f"165000000000{gpu}"),
                Reading(f"gpu.{gpu}.vbios", "96.00.A5.00.01"),
            ]
        probe = ProbeResult("gpu", ProbeStatus.OK, 0.1, tuple(readings))
        samples = tuple(triad + 0.5 * i for i in range(10))
        kernel = KernelResult("stream", "gpu1", "triad", "GB/s", ProbeStatus.OK, samples)
        return Snapshot(
            host=host, created=CREATED, gpudiag_version="0.1.0", probes=(probe,), kernels=(kernel,)
        )

    return node(16, 700.0, 3000.0, "node-a"), node(8, 500.0, 2700.0, "node-b")


def _app() -> DiffApp:
    a, b = _pair()
    return DiffApp(diff_snapshots(a, b), a, b)


def _rows(app: DiffApp) -> list[list[str]]:
    table = app.query_one("#diff", DataTable)
    return [[str(c) for c in table.get_row_at(i)] for i in range(table.row_count)]


def test_keys_toggle_and_jump() -> None:
    async def scenario() -> None:
        app = _app()
        async with app.run_test(size=(80, 24)) as pilot:
            rows = _rows(app)
            assert rows[0][0] == "stream.triad gpu1" and rows[0][3].startswith("slower 0.900")
            # the power limit can move STREAM; the PCIe width cannot, so it is not offered
            assert ["  because gpu.1.power.limit", "700.0 W", "500.0 W", "explains"] in rows
            assert ["gpu.1.pcie.link_width", "16 lanes", "8 lanes", "-50.0%"] in rows
            assert ["gpu.1.power.limit", "700.0 W", "500.0 W", "-28.6%"] in rows
            assert not [r for r in rows if r[0] == "gpu.0.vbios"]  # equal: hidden
            await pilot.press("c")
            assert ["gpu.0.vbios", "96.00.A5.00.01", "96.00.A5.00.01", "equal"] in _rows(app)
            table = app.query_one("#diff", DataTable)
            table.move_cursor(row=0)
            await pilot.press("n")
            assert app.row_kinds[table.cursor_row] != "equal" and table.cursor_row > 0
            detail = str(app.query_one("#row-detail", Static).render())
            row = app.row_texts[table.cursor_row]
            assert row[0].strip() in detail and f"A: {row[1]}" in detail  # in full
            await pilot.press("q")
        assert app.return_code == 2

    asyncio.run(scenario())


@pytest.mark.parametrize("size", [(80, 24), (120, 40)])
def test_diff_screen_snapshot(snap_compare, monkeypatch, size: tuple[int, int]) -> None:
    # the same rendering whatever the caller's terminal settings (NO_COLOR drops colours)
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.delenv("FORCE_COLOR", raising=False)
    monkeypatch.setenv("TERM", "xterm-256color")
    monkeypatch.setenv("COLORTERM", "truecolor")
    assert snap_compare(_app(), terminal_size=size)


def test_equivalent_snapshots_say_so() -> None:
    a, _ = _pair()
    b = replace(a, host="node-b")

    async def scenario() -> None:
        app = DiffApp(diff_snapshots(a, b), a, b)
        async with app.run_test(size=(80, 24)):
            assert app.row_kinds == ["equal"]  # only the unchanged metric
            assert "equivalent" in str(app.query_one("#summary").render())

    asyncio.run(scenario())


def test_header_names_the_files_and_help_and_filter_work() -> None:
    a, b = _pair()
    lost = Finding("GPU001", Severity.CRITICAL, "GPU 7", "GPU lost", "GPU 7 does not answer")
    b = replace(b, findings=(lost,))
    long_b = "/var/tmp/tickets/case-20261122-0042/after-the-firmware-update.toml"

    async def scenario() -> None:
        app = DiffApp(diff_snapshots(a, b), a, b, names=("before.toml", long_b))
        async with app.run_test(size=(80, 24)) as pilot:
            # the header cut it at 80 columns (`B: /var/tmp/ti…`): it leaves the names out
            # where they do not fit whole, and the summary says both in full
            assert app.sub_title == "" and "…" not in str(
                app.screen._compositor.render_strips()[0].text
            )
            summary = str(app.query_one("#summary").render())
            assert "A: before.toml (node-a)" in summary and f"B: {long_b} (node-b)" in summary
            assert summary.startswith("performance or health differs: ")  # the report's
            row = next(i for i, r in enumerate(_rows(app)) if r[0] == "GPU001 GPU 7")
            app.query_one("#diff", DataTable).move_cursor(row=row)
            await pilot.pause()
            detail = str(app.query_one("#row-detail", Static).render())
            assert "GPU lost: GPU 7 does not answer" in detail  # not only "A: - B: CRITICAL"
            await pilot.press("question_mark")
            assert isinstance(app.screen, KeysHelp) and app.screen.text == HELP
            await pilot.press("escape")
            assert not isinstance(app.screen, KeysHelp)
            await pilot.press("slash", "p", "o", "w", "e", "r", "enter")
            rows = _rows(app)
            assert rows and all("power" in " ".join(r) for r in rows)
            assert app.focused is app.query_one("#diff", DataTable)  # Enter left the field
            await pilot.press("c")  # a key again, not typed into the filter
            assert not app.changed_only
            await pilot.resize_terminal(140, 24)  # wide enough: the names in the header too
            await pilot.pause()
            assert app.sub_title == f"A: before.toml (node-a)  B: {long_b} (node-b)"

    asyncio.run(scenario())


def test_a_lost_gpu_is_one_row() -> None:
    a, b = _pair()
    extra = tuple(Reading(f"gpu.2.x{i}", i) for i in range(300))  # GPU 2 only in A
    probe = replace(a.probes[0], readings=a.probes[0].readings + extra)
    a = replace(a, probes=(probe,))

    async def scenario() -> None:
        app = DiffApp(diff_snapshots(a, b), a, b)
        async with app.run_test(size=(80, 24)):
            rows = _rows(app)
            lost = [r for r in rows if r[0].startswith("GPU 2")]
            assert lost == [
                ["GPU 2: every reading", "300 readings", "-", "GPU only in A (lost or removed)"]
            ]
            assert not [r for r in rows if r[0].startswith("gpu.2.")]

    asyncio.run(scenario())


def test_columns_follow_the_terminal_width() -> None:
    async def scenario() -> None:
        app = _app()
        async with app.run_test(size=(80, 24)) as pilot:
            narrow = [c.width for c in app.query_one("#diff", DataTable).columns.values()]
            await pilot.resize_terminal(120, 40)
            await pilot.pause()
            wide = [c.width for c in app.query_one("#diff", DataTable).columns.values()]
            assert sum(narrow) <= 80 - 10 and sum(wide) > sum(narrow) + 30

    asyncio.run(scenario())


def test_help_and_filter_work_over_hundreds_of_rows() -> None:
    a, b = _pair()
    many_a = tuple(Reading(f"node.thing{i}", i) for i in range(400))
    many_b = tuple(Reading(f"node.thing{i}", i + 1) for i in range(400))
    a = replace(a, probes=(replace(a.probes[0], readings=a.probes[0].readings + many_a),))
    b = replace(b, probes=(replace(b.probes[0], readings=b.probes[0].readings + many_b),))

    async def scenario() -> None:
        app = DiffApp(diff_snapshots(a, b), a, b)
        async with app.run_test(size=(80, 24)) as pilot:
            assert len(_rows(app)) > 400
            await pilot.press("end", "question_mark")
            assert isinstance(app.screen, KeysHelp) and app.screen.text == HELP
            await pilot.press("escape", "slash", "t", "h", "i", "n", "g", "3", "9", "9")
            assert [r[0] for r in _rows(app)] == ["node.thing399"]

    asyncio.run(scenario())
