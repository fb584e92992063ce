"""gpudiag fleet: a fleet made from the demo with planted differences (a power cap, another
driver, a hot GPU, a slow CPU STREAM explained by the governor, a slow copy explained by
the PCIe width, a node that got slower between two runs), and bad files."""

from __future__ import annotations

import asyncio
import itertools
import json
import random
from pathlib import Path

import msgspec
import polars as pl
import pytest
from textual.widgets import Static, Tab, TabbedContent

from gpudiag.fleet import load as fleetload
from gpudiag.fleet.analysis import analyse, fold
from gpudiag.fleet.load import load_fleet
from gpudiag.fleet.screen import HELP as FLEET_KEYS
from gpudiag.fleet.screen import FleetApp
from gpudiag.shipped import is_configuration, is_volatile
from gpudiag.snapshot import load, save

from conftest import run_cli
from fleetgen import clean_dir, fleet_dir

__all__ = ["clean_dir", "fleet_dir"]  # the fixtures, shared with test_fleet_baseline.py


@pytest.fixture(scope="module")
def bad_dir(fleet_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Files the loader refuses, each for its own reason."""
    directory = tmp_path_factory.mktemp("bad")
    good = msgspec.json.decode((fleet_dir / "node001.json").read_bytes())
    (directory / "empty.json").write_text("")
    (directory / "truncated.json").write_bytes((fleet_dir / "node001.json").read_bytes()[:5000])
    (directory / "binary.json").write_bytes(b"{\x00\x01")
    (directory / "other.json").write_text('{"hello": "world"}')
    version = {**good, "schema_version": 99}
    (directory / "version.json").write_bytes(msgspec.json.encode(version))
    # a reading with a value although its status says it could not be read
    odd = json.loads(json.dumps(good))
    first_missing = next(r for p in odd["probes"] for r in p["readings"] if r["status"] != "ok")
    first_missing["value"] = 3
    (directory / "value-not-read.json").write_bytes(msgspec.json.encode(odd))
    # an unknown field in one reading
    odd = json.loads(json.dumps(good))
    odd["probes"][0]["readings"][0]["colour"] = "blue"
    (directory / "unknown-field.json").write_bytes(msgspec.json.encode(odd))
    # a list of lists
    odd = json.loads(json.dumps(good))
    lists = next(
        r for p in odd["probes"] for r in p["readings"] if isinstance(r.get("value"), list)
    )
    lists["value"] = [[1]]
    (directory / "nested.json").write_bytes(msgspec.json.encode(odd))
    return directory


def test_the_report_names_the_plants_and_their_causes(fleet_dir: Path) -> None:
    result = run_cli("fleet", str(fleet_dir), "--format", "text")
    assert result.returncode == 1, result.stderr
    out = result.stdout
    assert out.startswith("20 nodes, 21 snapshots")
    why = out.split("Why slow")[1].split("Configuration groups")[0]
    # each slow metric, the slow node and GPU, and the cause that separates them first
    assert "gpu.{gpu}.kernel.copy.h2d.local (h100-sxm5 x8): 1 of 160 slow on node019" in why
    assert "because gpu.{gpu}.pcie.link_width (F1 1.00): slow 8 lanes x1; others 16 lanes x159" in (
        why
    )
    # node005's GPU 1 got slower in its latest run (see History) with no configuration
    # change: the power cap explains node003's GPU 2 only, hence F1 2/3
    assert "gpu.{gpu}.kernel.stream.triad.fp64 (h100-sxm5 x8): 2 of 160 slow on node[003,005]" in (
        why
    )
    assert (
        "because gpu.{gpu}.power.enforced_limit (F1 0.67): slow 500.0 W x1, 700.0 W x1; "
        "others 700.0 W x158"
    ) in why
    assert "numa.{node}.kernel.stream.triad.fp64 (h100-sxm5 x8): 4 of 40 slow on node[014-015]" in (
        why
    )
    assert "because cpu.freq.governor (F1 1.00): slow powersave x4; others performance x36" in why
    groups = out.split("Configuration groups")[1].split("Outliers")[0]
    assert "group 1: node[001-002,004-006,009-013,016-018,020] (14 nodes" in groups
    assert "group 2: node[007-008] (2 nodes, h100-sxm5 x8)\n" in groups
    assert "nvml.driver_version: 590.48.01 -> 570.86.15" in groups
    assert "gpu.2.power.limit: 700.0 W -> 500.0 W" in groups
    outliers = out.split("Outliers")[1].split("History")[0]
    assert "node011 GPU 5: 88 C (+" in outliers  # the hot GPU (temperature is volatile)
    assert "group 5:" in groups and "group 6" not in groups  # the hot GPU is no group of its own
    history = out.split("History")[1].split("Findings")[0]
    assert "node005 gpu1 stream.triad.fp64: slower since 2026-11-20T00:00:00Z" in history
    findings = out.split("\nFindings")[1]
    assert "WARNING PCIE001: 1 of 20 nodes: node019" in findings


def test_json_and_markdown(fleet_dir: Path) -> None:
    result = run_cli("fleet", str(fleet_dir), "--format", "json")
    assert result.returncode == 1
    data = json.loads(result.stdout)
    assert data["odd"] is True and data["nodes"] == 20 and data["snapshots"] == 21
    causes = {s["metric"]: s["causes"][0] for s in data["why_slow"]}
    assert causes["gpu.{gpu}.kernel.copy.h2d.local"]["reading"] == "gpu.{gpu}.pcie.link_width"
    assert causes["numa.{node}.kernel.stream.triad.fp64"]["reading"] == "cpu.freq.governor"
    assert causes["numa.{node}.kernel.stream.triad.fp64"]["f1"] == 1.0
    assert {g["nodes"] for g in data["groups"]} >= {"node[007-008]", "node[014-015]", "node003"}
    hot = [o for o in data["outliers"] if o["reading"] == "gpu.{gpu}.temperature.gpu"]
    assert [(o["node"], o["device"], o["value"]) for o in hot] == [("node011", "GPU 5", 88.0)]
    assert data["regressions"][0]["node"] == "node005"
    markdown = run_cli("fleet", str(fleet_dir), "--format", "markdown").stdout
    assert markdown.startswith("# gpudiag fleet\n") and "\n## Why slow\n" in markdown


def test_a_like_fleet_is_not_odd_and_bad_files_are_named(clean_dir: Path, bad_dir: Path) -> None:
    result = run_cli("fleet", str(clean_dir))
    assert result.returncode == 0, result.stdout
    assert "group 1: node[001-002,004,006,009-010,012-013,016-018,020] (12 nodes" in result.stdout
    assert "no kernel metric has slow outliers" in result.stdout
    mixed = run_cli("fleet", str(clean_dir), str(bad_dir), str(bad_dir / "absent.json"))
    assert mixed.returncode == 3
    assert mixed.stdout.startswith("12 nodes, 12 snapshots, 9 unreadable files")
    errors = mixed.stderr.splitlines()
    assert len(errors) == 9, errors
    for line, reason in [
        ("absent.json", "no such file or directory"),
        ("empty.json", "file is empty"),
        ("truncated.json", "not valid JSON"),
        ("binary.json", "binary data"),
        ("other.json", "not a gpudiag snapshot"),
        ("version.json", "schema version 99"),
        ("value-not-read.json", "carries no value"),
        ("unknown-field.json", "unknown field(s) colour"),
        ("nested.json", "lists of readings hold scalars only"),
    ]:
        assert any(line in e and reason in e for e in errors), (line, errors)
    assert all(e.startswith("gpudiag: skipped ") for e in errors)
    nothing = run_cli("fleet", str(bad_dir))
    assert nothing.returncode == 3 and "no snapshot could be read" in nothing.stderr


def test_fast_path_reads_what_the_loader_reads(fleet_dir: Path, tmp_path: Path) -> None:
    """The same node as JSON (fast path) and TOML (the loader): equal configuration and
    numbers; the layout's first file went through the loader itself."""
    snapshot = load(fleet_dir / "node001.json")
    save(snapshot, tmp_path / "a.json")
    save(snapshot, tmp_path / "b.toml")
    loaded = load_fleet([tmp_path / "a.json", tmp_path / "a.json", tmp_path / "b.toml"], 1)
    assert loaded.bad == []
    a, again, b = loaded.runs
    assert a.config == again.config == b.config and a.layout == b.layout
    assert a.numbers.tolist() == pytest.approx(b.numbers.tolist(), nan_ok=True)
    assert a.kernel_values == b.kernel_values and a.findings == b.findings


def test_workers_read_the_same_as_one_process(
    fleet_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(fleetload, "PARALLEL_FROM", 0)
    monkeypatch.setattr(fleetload, "CHUNK", 4)
    one = load_fleet([fleet_dir], workers=1)
    two = load_fleet([fleet_dir], workers=2)
    assert [r.path for r in one.runs] == [r.path for r in two.runs]
    assert [one.configs[r.config] for r in one.runs] == [two.configs[r.config] for r in two.runs]
    assert len(two.configs) == len(one.configs) == 5  # the five groups


def test_parquet(fleet_dir: Path, tmp_path: Path) -> None:
    target = tmp_path / "fleet.parquet"
    result = run_cli("fleet", str(fleet_dir), "--format", "json", "--parquet", str(target))
    assert result.returncode == 1
    table = pl.read_parquet(target)
    assert set(table.columns) == {
        "node",
        "model",
        "config",
        "reading",
        "device",
        "unit",
        "value",
        "slot",
        "run",
        "latest",  # false: an older snapshot's numbers (docs/fleets.md)
    }
    hot = table.filter(
        (pl.col("node") == "node011")
        & (pl.col("reading") == "gpu.{gpu}.temperature.gpu")
        & (pl.col("device") == "GPU 5")
    )
    assert hot["value"].to_list() == [88.0]
    assert table["node"].n_unique() == 20
    refused = run_cli("fleet", str(fleet_dir), "--parquet", str(tmp_path))
    assert refused.returncode == 3 and "not a regular file" in refused.stderr


def test_reading_kinds() -> None:
    assert is_volatile("gpu.3.temperature.gpu") and is_volatile("gpu.0.serial")
    assert is_volatile("gpu.1.ecc.aggregate.corrected") and is_volatile("host.hostname")
    assert is_configuration("gpu.3.power.limit") and is_configuration("nvml.driver_version")
    assert is_configuration("topo.gpu.0.1") and is_configuration("cpu.freq.governor")


def test_fold_is_clustershell() -> None:
    names = [f"node{i:04d}" for i in [*range(1, 17), *range(18, 42)]]
    assert fold(names) == "node[0001-0016,0018-0041]"
    assert fold(["host-2", "host-1", "host-3"]) == "host-[1-3]"  # redacted placeholders
    assert fold(["x[1]", "a,b", "n@1"]) == "a,b,n@1,x[1]"  # not read as NodeSet syntax


def test_fold_by_product_is_nodesets_fold(monkeypatch: pytest.MonkeyPatch) -> None:
    """Names that are every combination of their numbers fold without NodeSet parsing
    each name (100,000 two-number names: 9.5 s), to NodeSet's string: names of one, two
    and three numbers, padded and not, mixed padding, products and not, several patterns."""
    from ClusterShell.NodeSet import NodeSet

    from gpudiag.fleet import table

    rng = random.Random(43)
    cases = [
        [f"node{i:05d}-c{c:03d}" for i in range(1, 40) for c in range(12)],
        [f"node{i}-c{c}" for i in (1, 2, 3, 7, 8, 10, 11) for c in (0, 1, 5, 9, 10)],
        [f"r{r}-s{s:02d}-g{g}" for r in range(3) for s in (1, 2, 4) for g in range(8)],
        [f"gpu-{i:03d}" for i in rng.sample(range(1, 400), 60)],
        ["n1", "n01", "n001", "n2", "n10"],  # mixed padding: ClusterShell's own fold
        ["a0-1", "a10-1", "a0-2", "a10-2"],
        ["login", "node1-c1", "node1-c2", "node2-c1", "node2-c2", "x9y"],
        [f"node{i}-c{c}" for i in range(1, 30) for c in range(4) if (i, c) != (7, 2)],
    ]
    for _ in range(30):  # random subsets of random shapes
        shape = rng.choice(["n%d", "n%03d-c%d", "r%d-%02d-%d", "a%02db%d"])
        dims = shape.count("%")
        names = {
            shape % tuple(rng.randrange(0, 120) for _ in range(dims))
            for _ in range(rng.randrange(1, 80))
        }
        if rng.random() < 0.5:  # a product of the same axes
            axes = [sorted({rng.randrange(0, 120) for _ in range(5)}) for _ in range(dims)]
            names = {shape % v for v in itertools.product(*axes)}
        cases.append(sorted(names))
    for names in cases:
        assert table._fold(frozenset(names)) == str(NodeSet.fromlist(names)), names
    parsed = 0
    original = NodeSet.fromlist

    def counted(*args: object, **kwargs: object) -> NodeSet:
        nonlocal parsed
        parsed += 1
        return original(*args, **kwargs)

    monkeypatch.setattr(NodeSet, "fromlist", counted)
    assert table._fold(frozenset(cases[0])) == "node[00001-00039]-c[000-011]"
    assert parsed == 0  # no name parsed one by one


def test_screen_shows_the_sections(fleet_dir: Path) -> None:
    report = analyse(load_fleet([fleet_dir], 1))
    assert report.exit_code() == 1

    async def scenario() -> None:
        app = FleetApp(report)
        async with app.run_test(size=(80, 24)) as pilot:
            tabs = app.query_one(TabbedContent)
            assert tabs.active == "section-1"  # why slow, the headline
            # every tab shown at 80 columns ('g Goodput' was past the edge), and the keys
            labels = [(str(t.label), t.region.right) for t in app.query(Tab)]
            assert [label for label, _ in labels][-2:] == ["c Charts", "g Goodput"]
            assert len(labels) == 7 and all(right <= 80 for _, right in labels)
            shown = {key for key, b in app.active_bindings.items() if b.binding.show}
            assert {"q", "c", "g", "question_mark"} <= shown
            await pilot.press("question_mark")
            assert type(app.screen).__name__ == "KeysHelp"
            assert app.screen.text == FLEET_KEYS  # type: ignore[attr-defined]
            await pilot.press("escape")
            text = str(app.query_one("#text-1", Static).render())
            assert "node019 GPU 3" in text and "pcie.link_width (F1 1.00)" in text
            # wrapped at 78 (80 less the scroll bar), continued under its own indent
            assert "slow on node019;\n  fleet median 55 GB/s\n" in text
            assert max(map(len, text.splitlines())) <= 78
            await pilot.press("2")
            assert tabs.active == "section-2"
            assert "node[007-008]" in str(app.query_one("#text-2", Static).render())
            await pilot.press("q")

    asyncio.run(scenario())


def test_a_lost_gpu_is_its_groups_difference(tmp_path: Path) -> None:
    """A node whose GPU is lost (gpu.0.health in error, a reading not of the
    configuration) stands in a group of its own: that reading is the group's difference,
    never an empty list (review #2)."""
    from fleetgen_failures import PlantedFailures, write_failure_history

    events: dict[str, list[str | None]] = {f"fail000{n}": [None] for n in (1, 2, 4)}
    events["fail0003"] = ["gpu_lost"]
    write_failure_history(tmp_path, PlantedFailures(events, "fail0001", {}, 1.0))
    report = analyse(load_fleet([tmp_path], workers=1))
    reference, lost = report.groups
    assert lost.nodes == ["fail0003"] and reference.differences == []
    assert lost.differences[0] == ("gpu.0.health", "ok", "[error]")
    assert "fail0003" in report.odd_nodes()


def test_partial_findings_are_those_on_some_nodes_of_a_type() -> None:
    """A finding on every node, or on every node of its type, is not partial; one on some
    nodes of a type is, with those nodes (a list as long as the fleet that repeats a node
    is not every node)."""
    from gpudiag.fleet.analysis import FleetFinding, FleetReport

    models = {"a1": "A", "a2": "A", "b1": "B", "b2": "B"}
    findings = [
        FleetFinding("everywhere", "warning", ["b2", "a1", "b1", "a2"]),
        FleetFinding("every-a", "critical", ["a1", "a2"]),
        FleetFinding("some-b", "warning", ["b2"]),
        FleetFinding("repeated", "warning", ["a1", "a1", "a2", "b1"]),
        FleetFinding("info", "info", ["a1"]),
    ]
    report = FleetReport(4, 4, [], [], [], [], [], findings, 3.5, node_models=models)
    partial = {f.rule_id: f.nodes for f in report.partial_findings()}
    assert partial == {"some-b": ["b2"], "repeated": ["b1"]}
