"""Issue 27, point 1: every string from a node, a file or a user reaches Textual as rich
Text, never markup. Every pane of the node TUI, the diff TUI and the fleet TUI is driven
with Pilot over a snapshot whose host, readings, findings and probe errors are hostile
values: no crash, the literal text shown, no action run (a click on a `[@click=...]`
label writes no file)."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from pathlib import Path

from rich.text import Text
from textual.widget import Widget
from textual.widgets import DataTable, Static, Tree

from gpudiag.model import Finding, ProbeResult, Reading, Severity, Snapshot
from gpudiag.panes import PANES
from gpudiag.snapshot import load
from gpudiag.tui import GpudiagApp

from conftest import REPO

DEMO = REPO / "tests" / "fixtures" / "schema-v1" / "demo-faulty-export.toml"


def hostile_values(victim_dir: Path) -> list[str]:
    """The same hostile values for every pane: an action link, a bare closing tag, a
    style tag and markup escapes."""
    return [
        f"[@click=app.screenshot('victim.txt','{victim_dir}')]gpunode01[/]",
        "[/]",
        "[bold]node[/bold] [/]",
        "back\\[slash] \\\\[x]",
    ]


def hostile_snapshot(host: str, value: str) -> Snapshot:
    """The demo snapshot with `host` as the host and `value` as every string reading's
    value, the first findings' subject and title and a probe's error."""
    snap = load(DEMO)
    probes = []
    for i, probe in enumerate(snap.probes):
        readings = tuple(
            replace(r, value=f"{value}") if isinstance(r.value, str) else r
            for r in probe.readings
        )
        probes.append(replace(probe, readings=readings, error=value if i == 0 else probe.error))
    findings = tuple(
        replace(f, subject=value, title=value, message=value) if i < 3 else f
        for i, f in enumerate(snap.findings)
    )
    extra = Finding("HOST001", Severity.WARNING, value, value, value)
    probes.append(
        ProbeResult("hostile", probes[0].status, 0.0, (Reading("host.hostile", value),), value)
    )
    return replace(snap, host=host, probes=tuple(probes), findings=(*findings, extra))


def _texts(widget: Widget) -> list[str]:
    """The plain text a widget shows: Static content, table cells, tree labels."""
    out: list[str] = []
    for w in [widget, *widget.query("*")]:
        if isinstance(w, DataTable):
            for i in range(w.row_count):
                out.extend(str(c) for c in w.get_row_at(i))
        elif isinstance(w, Tree):
            stack = [w.root]
            while stack:
                node = stack.pop()
                out.append(node.label.plain)
                stack.extend(node.children)
        elif isinstance(w, Static):
            out.append(str(w.render()))
    return out


def test_every_pane_shows_hostile_text_literally(tmp_path: Path) -> None:
    """All nine panes visited in one app with every hostile value at once (about 10 s on
    the 2-core VM: one app, not one per value or pane)."""
    values = hostile_values(tmp_path)
    host, value = values[0], " | ".join(values)
    app = GpudiagApp(hostile_snapshot(host, value))
    seen: dict[str, str] = {}

    async def scenario() -> None:
        async with app.run_test(size=(120, 40)) as pilot:
            await pilot.pause()
            for pane in PANES:
                await pilot.press(pane.KEY)
                await pilot.pause()
                seen[pane.NAME] = "\n".join(_texts(app.query_one(f"#{pane.NAME}-tab")))
            await pilot.press("5")
            await pilot.pause()
            tree = app.query_one("#host", Tree)
            assert tree.root.label.plain == host  # the literal text, markup and all
            for row in range(3):  # a click on the host's label (and the next rows)
                await pilot.click("#host", offset=(4, row))
                await pilot.pause()
            app.notify(value)  # a toast with data in it, the app's and a pane's
            app.query_one("#host-tab").notify(value)
            await pilot.pause()
            assert str(app.query_one("#banner", Static).render()).startswith(host)

    asyncio.run(scenario())
    assert list(tmp_path.iterdir()) == []  # no screenshot written
    for name in ("overview", "findings", "host", "readings", "probes"):
        assert value in seen[name], name


def test_the_diff_app_shows_hostile_values_literally(tmp_path: Path) -> None:
    from gpudiag.diff import diff_snapshots
    from gpudiag.tui_diff import DiffApp

    values = hostile_values(tmp_path)
    host, value = values[0], " | ".join(values)
    a, b = load(DEMO), hostile_snapshot(host, value)
    app = DiffApp(diff_snapshots(a, b), a, b, True, (value, "b.toml"))

    async def scenario() -> None:
        async with app.run_test(size=(120, 40)) as pilot:
            await pilot.pause()
            assert value in "\n".join(_texts(app.screen))
            for row in range(4):
                await pilot.click("#diff", offset=(4, row))
            app.notify(value)
            await pilot.pause()

    asyncio.run(scenario())
    assert list(tmp_path.iterdir()) == []


def test_plain_keeps_text_as_text() -> None:
    from gpudiag.tui_base import plain

    assert plain("[/]").plain == "[/]"
    styled = Text("x", "bold")
    assert plain(styled) is styled


def test_the_fleet_app_shows_hostile_hosts_literally(tmp_path: Path) -> None:
    from gpudiag.fleet.analysis import analyse
    from gpudiag.fleet.load import load_fleet
    from gpudiag.fleet.screen import FleetApp
    from gpudiag.snapshot import save

    victims = tmp_path / "victims"
    victims.mkdir()
    host = hostile_values(victims)[0]
    nodes = tmp_path / "nodes"
    nodes.mkdir()
    demo = load(DEMO)
    for number in (1, 2):
        save(replace(demo, host=host if number == 2 else "node001"), nodes / f"n{number}.json")
    app = FleetApp(analyse(load_fleet([nodes], workers=1)))

    async def scenario() -> None:
        async with app.run_test(size=(120, 40)) as pilot:
            await pilot.pause()
            for key in "12345":
                await pilot.press(key)
                await pilot.pause()
                for row in range(3):
                    await pilot.click(f"#text-{key}", offset=(4, row))
            shown = "\n".join(_texts(app.screen))
            assert host in shown  # the literal markup, in the findings section
            app.notify(host)
            await pilot.pause()

    asyncio.run(scenario())
    assert list(victims.iterdir()) == []
