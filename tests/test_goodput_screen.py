"""The fleet screen's goodput tab (issue 42): `gpudiag goodput`'s report on the fleet's
own history, computed when the tab is first shown, whole at 80 columns."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from textual.geometry import Region
from textual.widgets import Static, TabbedContent

from gpudiag.cli import main
from gpudiag.fleet import screen
from gpudiag.fleet.analysis import FleetReport
from gpudiag.fleet.load import load_fleet
from gpudiag.fleet.records import LoadedFleet
from gpudiag.fleet.screen import GOODPUT_PENDING, FleetApp

from fleetgen_failures import planted_failures, write_failure_history

# a node-day, the lemon's 100 times that: over 10 days seed 2 plants 4 incidents, all on
# the lemon, a fleet rate of 50 per 1000 node-days (MTTF 0.23 h at the command's 16,384
# GPUs); 4 of 4 on one node of 8 is a lemon (binomial, p 0.002 after Bonferroni), where 2 of
# 2 would not be (p 0.125)
RATES = {"gpu_lost": 0.002, "xid_hardware": 0.002}


def _shown_whole(static: Static) -> list[str]:
    """The widget's lines as drawn at its width; each within it, and together every
    character of its text in order (wrapped, never cut)."""
    width, height = static.size.width, static.size.height
    drawn = [strip.text for strip in static.render_lines(Region(0, 0, width, height))]
    assert all(len(line) <= width for line in drawn)
    text = str(static.render())
    assert "".join("".join(drawn).split()) == "".join(text.split())
    return drawn


def test_goodput_tab(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    planted = planted_failures(2, nodes=8, days=10, rates=RATES, factor=100)
    write_failure_history(tmp_path, planted)
    loaded = load_fleet([tmp_path], workers=1)
    report = FleetReport(8, len(loaded.runs), [], [], [], [], [], [], 0.0)  # tab 1-5: not read
    computed: list[LoadedFleet | None] = []
    real = screen.goodput_text

    def counted(given: LoadedFleet | None) -> str:
        computed.append(given)
        return real(given)

    monkeypatch.setattr(screen, "goodput_text", counted)
    shown: list[str] = []

    async def scenario() -> None:
        app = FleetApp(report, loaded)
        app.animation_level = "none"  # the tabs' underline: 0.2 s a key otherwise
        async with app.run_test(size=(80, 24)) as pilot:
            tabs = app.query_one(TabbedContent)
            text = app.query_one("#text-goodput", Static)
            assert computed == [] and str(text.render()) == GOODPUT_PENDING  # lazy
            await pilot.press("g")
            assert tabs.active == "section-goodput"
            for _ in range(500):  # computed off the UI thread
                if app.goodput is not None:
                    break
                await pilot.pause(0.01)
            await pilot.pause()  # laid out
            assert computed == [loaded]
            shown.append(str(text.render()))
            drawn = _shown_whole(text)
            assert text.size.width <= 80 and len(drawn) > len(shown[0].splitlines()) - 1
            await pilot.press("1", "g")
            assert tabs.active == "section-goodput" and len(computed) == 1  # once
            await pilot.press("q")

    asyncio.run(scenario())
    monkeypatch.setenv("COLUMNS", "1000")  # the screen wraps at its own width
    assert main(["goodput", str(tmp_path), "--workers", "1"]) == 0
    assert shown[0] == capsys.readouterr().out.rstrip("\n")  # the command's own text
    for line in ("gpu_lost", "xid_hardware", "95% interval", f"lemon node {planted.lemon}"):
        assert line in shown[0]
    assert "16384 GPUs" in shown[0] and "checkpoint interval (log scale)" in shown[0]


def test_goodput_tab_says_why_not(tmp_path: Path) -> None:
    """One snapshot a node: no time span, one line."""
    write_failure_history(tmp_path, planted_failures(5, nodes=2, days=0))
    loaded = load_fleet([tmp_path], workers=1)
    shown = screen.goodput_text(loaded)
    assert shown.startswith("no goodput report: ") and "no time span" in shown
    assert "\n" not in shown
    assert screen.goodput_text(None).count("\n") == 0
