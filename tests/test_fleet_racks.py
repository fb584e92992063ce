"""The rack view of `gpudiag fleet` (gpudiag/fleet/rack.py): 18 generated GB200 trays of
one NVL72 rack (tests/rackscale_nodes.py), one tray in another clique and one with a GPU
at 16 of its 18 NVLinks; the report names both trays, how each differs, and no other."""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace
from pathlib import Path

import pytest
from textual.widgets import Static, Tab, TabbedContent

from gpudiag.fleet.analysis import analyse
from gpudiag.fleet.load import load_fleet
from gpudiag.fleet.report import report_json, report_text
from gpudiag.fleet.screen import FleetApp
from gpudiag.nvml import Nvml, ReplayBackend
from gpudiag.probes import default_probes
from gpudiag.rulefile import load_rules
from gpudiag.session import LiveNode, with_findings
from gpudiag.snapshot import save

import rackscale_nodes as nodes
from conftest import run_cli
from fleetgen import with_values

TRAYS = [f"gb-r07-t{n:02d}" for n in range(1, 19)]
ODD_CLIQUE, FEW_LINKS = "gb-r07-t05", "gb-r07-t12"


@pytest.fixture(scope="module")
def rack(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """The rack's 18 snapshots: one probed tray, renamed per tray, two of them changed."""
    rules = load_rules()
    host = nodes.hostfs(nodes.gb200_host())
    base = LiveNode(host, Nvml(ReplayBackend(nodes.gb200_replay())), default_probes(), rules)
    snapshot = base.snapshot()
    folder = tmp_path_factory.mktemp("rack")
    paths = []
    for number, tray in enumerate(TRAYS, 1):
        values: dict[str, object] = {"host.hostname": tray}
        for gpu in range(4):
            values[f"gpu.{gpu}.uuid"] = f"GPU-{number:08d}-0000-0000-0000-{gpu:012d}"
            values[f"gpu.{gpu}.serial"] = f"{number:07d}{gpu:03d}"
            if tray == ODD_CLIQUE:
                values[f"gpu.{gpu}.fabric.clique_id"] = 0x7FFE
        if tray == FEW_LINKS:
            values["gpu.2.nvlink.active"] = 16
            values["gpu.2.nvlink.16.state"] = "inactive"
            values["gpu.2.nvlink.17.state"] = "inactive"
        node = with_values(snapshot, values)
        node = with_findings(replace(node, host=tray), rules)
        path = folder / f"{tray}.json"
        save(node, path)
        paths.append(path)
    return paths


def test_the_rack_names_the_two_trays_and_how(rack: list[Path]) -> None:
    report = analyse(load_fleet(rack))
    assert len(report.racks) == 1
    found = report.racks[0]
    assert found.trays == TRAYS and found.clique == 0x7FFD
    assert found.gpus == 72 and found.gpus_in == 72
    assert (found.links_up, found.links) == (72 * 18 - 2, 72 * 18)
    assert found.disagree == {
        ODD_CLIQUE: ["cliqueId 0x7ffe differs from the rack's 0x7ffd"],
        FEW_LINKS: ["GPU 2: 16 of 18 links"],
    }
    text = report_text(report)
    assert f"tray {ODD_CLIQUE}: cliqueId 0x7ffe differs from the rack's 0x7ffd" in text
    assert f"tray {FEW_LINKS}: GPU 2: 16 of 18 links" in text
    assert "18 trays (gb-r07-t[01-18]), clique 0x7ffd, 72 of 72 GPUs in the fabric" in text
    assert report.odd and report_json(report)["racks"][0]["disagree"] == found.disagree
    # nothing else is odd: the other configuration groups and findings are these trays'
    for group in report.groups[1:]:
        assert set(group.nodes) <= {ODD_CLIQUE, FEW_LINKS}, group
    for finding in report.findings:
        if finding.severity in ("critical", "warning"):
            assert set(finding.nodes) <= {ODD_CLIQUE, FEW_LINKS}, finding


def test_a_healthy_rack_agrees(rack: list[Path]) -> None:
    """Without the two changed trays every tray agrees, and the fleet has nothing odd."""
    healthy = [p for p in rack if p.stem not in (ODD_CLIQUE, FEW_LINKS)]
    report = analyse(load_fleet(healthy))
    assert report.racks[0].disagree == {} and not report.odd
    assert "16 trays" in report_text(report) and "every tray agrees" in report_text(report)


def test_two_healthy_racks_are_not_odd(rack: list[Path], tmp_path: Path) -> None:
    """A second rack's trays (another cluster UUID and clique) form a configuration group of
    their own, which is not odd: each rack agrees within itself, and nothing needs a person."""
    from gpudiag.snapshot import load

    healthy = [p for p in rack if p.stem not in (ODD_CLIQUE, FEW_LINKS)]
    second = []
    for path in healthy[:8]:
        node = load(path)
        values: dict[str, object] = {"host.hostname": f"gb-r08-{path.stem[-3:]}"}
        for gpu in range(4):
            values[f"gpu.{gpu}.fabric.cluster_uuid"] = "5b0f6a9e-1111-4c2d-9e1a-000000000008"
            values[f"gpu.{gpu}.fabric.clique_id"] = 0x7FFC
        other = with_values(node, values)
        out = tmp_path / f"gb-r08-{path.stem[-3:]}.json"
        save(replace(other, host=f"gb-r08-{path.stem[-3:]}"), out)
        second.append(out)
    report = analyse(load_fleet([*healthy, *second]))
    assert len(report.racks) == 2 and all(r.disagree == {} for r in report.racks)
    assert len(report.groups) == 2  # a rack each: said, not odd
    assert not report.odd and report.odd_nodes() == [] and report.exit_code() == 0


def test_gpudiag_fleet_prints_the_rack(rack: list[Path]) -> None:
    """What the user sees: `gpudiag fleet DIR --format json` names the two trays, exit 1."""
    result = run_cli("fleet", str(rack[0].parent), "--format", "json", timeout=120)
    assert result.returncode == 1, result.stderr
    racks = json.loads(result.stdout)["racks"]
    assert list(racks[0]["disagree"]) == [ODD_CLIQUE, FEW_LINKS]


def test_the_fleet_screen_has_a_racks_tab(rack: list[Path]) -> None:
    """Key 6 shows the racks where the fleet has them (the other fleets keep 5 tabs)."""
    report = analyse(load_fleet(rack))

    async def scenario() -> None:
        app = FleetApp(report)
        async with app.run_test(size=(80, 24)) as pilot:
            tabs = list(app.query(Tab))
            assert len(tabs) == 8 and all(t.region.right <= 80 for t in tabs)  # all shown
            await pilot.press("6")
            assert app.query_one(TabbedContent).active == "section-6"
            text = str(app.query_one("#text-6", Static).render())
            assert f"tray {FEW_LINKS}: GPU 2: 16 of 18 links" in text
            await pilot.press("q")

    asyncio.run(scenario())
