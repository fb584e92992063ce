"""The fleet report and the baseline on fleets that look real (tests/fleetgen.py's
realistic fleets): figures that spread, outliers near the threshold as well as far,
findings on several nodes, history with reboots, mixed drivers and models, damaged
files. What the report should say is computed here from the generator's specs, by hand
or by a second method (statistics.median, a quantile by hand), never with the code under
test."""

from __future__ import annotations

import math
import statistics
from dataclasses import replace
from pathlib import Path

import pytest

from gpudiag import tomlcompat
from gpudiag.fleet.analysis import FleetReport, analyse
from gpudiag.fleet.baseline import baseline_rules
from gpudiag.fleet.load import load_fleet
from gpudiag.fleet.parquet import write_parquet
from gpudiag.fleet.report import report_json, report_text
from gpudiag.snapshot import save

from conftest import realdata_dir
from fleetgen import (
    DRIVERS,
    GPUS,
    H2D_ROW,
    NodeSpec,
    expected_outliers,
    h2d_cv,
    h2d_row,
    healthy_spec,
    nhc_h2d_floor,
    robust_z,
    snapshot_of,
)

T0, T1, T2 = "2026-11-01T06:00:00Z", "2026-11-08T06:00:00Z", "2026-11-15T06:00:00Z"
TRIAD = "gpu.{gpu}.kernel.stream.triad.fp64"
H2D = "gpu.{gpu}.kernel.copy.h2d.local"
CPU = "numa.{node}.kernel.stream.triad.fp64"
LOST = {"node006": 7, "node017": 2, "node030": 7, "node034": 0}
DAMAGED = {
    "node040.json": "",
    "node042.toml": "schema_version = [\n",
    "node043.json": '{"schema_version": 999}',
}


def _place(specs: list[NodeSpec], reading: str, z: float) -> float:
    """The value at robust z `z` among the healthy H100 GPUs' figures of `reading`."""
    values = [v for s in specs if s.model == "h100" for v in getattr(s, reading).values()]
    median = statistics.median(values)
    mad = statistics.median(abs(v - median) for v in values)
    return round(median + z * 1.4826 * mad, 3)


def _specs(cv_h2d: float) -> tuple[list[NodeSpec], list[NodeSpec]]:
    """(latest runs, older runs) of 39 nodes: 32 H100 (8 on the older driver), 4 H200,
    3 H100 NVL."""
    latest = []
    for n in range(1, 40):
        model = "h100" if n <= 32 else "h200" if n <= 36 else "h100nvl"
        spec = healthy_spec(f"node{n:03d}", n, T2, model, cv_h2d)
        spec.driver = DRIVERS[1] if 25 <= n <= 32 else DRIVERS[0]
        latest.append(spec)
    by = {s.name: s for s in latest}
    # far outliers: a GPU capped at 500 W, one trained at x8
    by["node003"].limit[2], by["node003"].triad[2] = 500.0, by["node003"].triad[2] * 0.85
    by["node019"].link_width[3], by["node019"].h2d[3] = 8, by["node019"].h2d[3] / 2
    by["node024"].link_width[1], by["node024"].h2d[1] = 8, by["node024"].h2d[1] / 2
    # the three H100 NVL nodes' first NUMA node: two alike, one 30% slow (MAD 0)
    by["node037"].cpu[0] = by["node038"].cpu[0] = 120.0
    by["node039"].cpu[0] = 84.0
    by["node020"].temperature[6] = 88
    # near the threshold of 5, both sides of it, placed among the healthy figures
    near = {
        ("node010", "triad", 1): -6.0,
        ("node011", "triad", 4): -4.2,
        ("node012", "triad", 6): 5.8,
        ("node014", "h2d", 0): 4.4,
        ("node015", "h2d", 5): -5.9,
    }
    healthy = [s for s in latest if s.name not in ("node003", "node019", "node024")]
    placed = {key: _place(healthy, key[1], z) for key, z in near.items()}
    for (node, reading, gpu), value in placed.items():
        getattr(by[node], reading)[gpu] = value
    # a clock all GPUs share: off by 4.5% is odd, by 0.25% is not (the 1% rule)
    by["node016"].max_clock[2], by["node017"].max_clock[3] = 1890, 1975
    for node, gpu in LOST.items():
        by[node].lost = {gpu}
    by["node008"].corrected[1] = 4  # a counter off zero in the latest run
    older = []
    # node004: errors rose 2 -> 5 between T0 and T1; rebooted before T2: counter reset
    n4 = by["node004"]
    n4.uptime = 86400.0
    for created, count, uptime in ((T0, 2, 10 * 86400.0), (T1, 5, 17 * 86400.0)):
        old = replace(n4, created=created, corrected={**n4.corrected, 0: count}, uptime=uptime)
        older.append(old)
    # node009: run again with the same figures (new trials): no regression
    older.append(replace(by["node009"], created=T0, uptime=by["node009"].uptime - 14 * 86400))
    # node013: the same at T0 and T1, GPU 1's triad 6% lower at T2
    n13 = by["node013"]
    for created in (T0, T1):
        older.append(replace(n13, created=created, triad=dict(n13.triad), uptime=3600.0))
    n13.triad[1] = round(n13.triad[1] * 0.94, 2)
    # node022: GPU 4's triad fell 6% at T1 and again at T2: one regression, since T1
    n22 = by["node022"]
    for created, factor in ((T0, 0.94 * 0.94), (T1, 0.94)):
        triad = {**n22.triad, 4: round(n22.triad[4] / factor, 2)}
        older.append(replace(n22, created=created, triad=triad))
    # node021: faster now than at T0, GPU 5's counter at 3 both times (not rising)
    n21 = by["node021"]
    n21.corrected[5] = 3
    slower = {g: round(v * 0.95, 2) for g, v in n21.triad.items()}
    older.append(replace(n21, created=T0, triad=slower, corrected=dict(n21.corrected)))
    return latest, older


@pytest.fixture(scope="module")
def real_fleet(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[Path, list[NodeSpec], list[NodeSpec]]:
    """The fleet written once: latest runs at the top (every 7th node as TOML), older runs
    in runs/ (whose paths sort after the latest ones'), three damaged files and a
    truncated one."""
    latest, older = _specs(h2d_cv())
    directory = tmp_path_factory.mktemp("real-fleet")
    (directory / "runs").mkdir()
    for spec in latest:
        number = int(spec.name.removeprefix("node"))
        save(snapshot_of(spec), directory / f"{spec.name}.{'toml' if number % 7 == 0 else 'json'}")
    for i, spec in enumerate(older):
        save(snapshot_of(spec), directory / "runs" / f"{spec.name}-{i}.json")
    for name, text in DAMAGED.items():
        (directory / name).write_text(text)
    whole = (directory / "node001.json").read_text()
    (directory / "node041.json").write_text(whole[: len(whole) // 2])
    return directory, latest, older


@pytest.fixture(scope="module")
def report(real_fleet) -> FleetReport:
    directory, _, _ = real_fleet
    return analyse(load_fleet([directory], workers=1))


VARIED = {
    TRIAD, H2D, CPU, "gpu.{gpu}.temperature.gpu", "gpu.{gpu}.clocks.sm",
    "gpu.{gpu}.clocks.max_sm", "gpu.{gpu}.power.draw", "gpu.{gpu}.power.limit",
    "gpu.{gpu}.pcie.link_width", "gpu.{gpu}.ecc.volatile.corrected", "host.uptime",
}  # fmt: skip


def test_the_spread_is_real_and_the_far_outliers_are_past_the_vendor_floor(real_fleet) -> None:
    _, latest, _ = real_fleet
    floor = nhc_h2d_floor(realdata_dir())
    assert floor == 48.0
    assert h2d_row(realdata_dir()) == H2D_ROW
    cv = h2d_cv()
    assert 0.001 < cv < 0.01  # nvbandwidth's 8 GPUs: 25.94-26.19 GB/s
    h2d = {(s.name, g): v for s in latest for g, v in s.h2d.items() if g not in s.lost}
    x8 = [h2d.pop(("node019", 3)), h2d.pop(("node024", 1))]
    assert max(x8) < floor < min(h2d.values())
    triads = [v for s in latest if s.model == "h100" for v in s.triad.values()]
    assert statistics.stdev(triads) / statistics.fmean(triads) > 0.015  # they spread


def test_outliers_match_a_second_computation(report: FleetReport, real_fleet) -> None:
    _, latest, _ = real_fleet
    expected = expected_outliers(latest)
    # the plants did what they were meant to: far and near ones odd, the others not
    for unit in [
        (TRIAD, "node003", "GPU 2"), (H2D, "node019", "GPU 3"), (TRIAD, "node010", "GPU 1"),
        (H2D, "node024", "GPU 1"), (CPU, "node039", "NUMA node 0"),
        (TRIAD, "node012", "GPU 6"), (H2D, "node015", "GPU 5"),
        ("gpu.{gpu}.clocks.max_sm", "node016", "GPU 2"),
        ("gpu.{gpu}.power.limit", "node003", "GPU 2"),
        ("gpu.{gpu}.temperature.gpu", "node020", "GPU 6"),
    ]:  # fmt: skip
        assert unit in expected, unit
    for unit in [
        (TRIAD, "node011", "GPU 4"), (H2D, "node014", "GPU 0"),
        ("gpu.{gpu}.clocks.max_sm", "node017", "GPU 3"), (TRIAD, "node013", "GPU 1"),
    ]:  # fmt: skip
        assert unit not in expected, unit
    found = {(o.reading, o.node, o.device) for o in report.outliers if o.reading in VARIED}
    assert found == expected
    # counters are judged by rate, not as outliers: three GPUs of some 300 with 3-5
    # corrected errors each (node004, node008, node021) are the ordinary few
    assert {(o.node, o.device) for o in report.outliers if ".ecc." in o.reading} == set()
    assert report.counters == []
    # the median and MAD the report states, against statistics.median of the specs
    triads = [v for s in latest if s.model == "h100" for g, v in s.triad.items() if g not in s.lost]
    median = statistics.median(triads)
    mad = statistics.median(abs(v - median) for v in triads)
    (near,) = [o for o in report.outliers if (o.reading, o.node) == (TRIAD, "node010")]
    assert near.median == pytest.approx(median) and near.mad == pytest.approx(mad)
    assert near.z == pytest.approx(robust_z(triads, near.value)) and -6.5 < near.z < -5.5
    assert near.model == "h100-sxm5 x8"
    # the readings nobody varied are alike on every node: nothing else is odd but what
    # the plants carry with them (a capped GPU's enforced limit)
    others = {(o.reading, o.node, o.device) for o in report.outliers if o.reading not in VARIED}
    assert others == {("gpu.{gpu}.power.enforced_limit", "node003", "GPU 2")}


def test_findings_name_every_node_they_are_on(report: FleetReport) -> None:
    (lost,) = [f for f in report.findings if f.rule_id == "GPU001"]
    assert lost.severity == "critical" and lost.nodes == sorted(LOST)
    text = report_text(report)
    assert "CRITICAL GPU001: 4 of 39 nodes: node[006,017,030,034]" in text
    everywhere = [f for f in report.findings if f.rule_id == "MEM005"]
    assert len(everywhere[0].nodes) == 39 and "CRITICAL MEM005: all nodes" in text
    data = report_json(report)
    assert {"rule_id": "GPU001", "severity": "critical", "nodes": "node[006,017,030,034]",
            "count": 4} in data["findings"]  # fmt: skip


def test_history_reports_rising_counters_and_regressions_only(report: FleetReport) -> None:
    assert [(c.node, c.reading, c.before, c.after, c.previous, c.seen) for c in report.rising] == [
        ("node004", "gpu.0.ecc.volatile.corrected", 2.0, 5.0, T0, T1)
    ]  # node004's reboot reset it (5 -> 0): no rise; node021's 3 -> 3: none
    assert [(r.node, r.metric, r.device, r.started, r.previous) for r in report.regressions] == [
        ("node013", "stream.triad.fp64", "gpu1", T2, T1),
        ("node022", "stream.triad.fp64", "gpu4", T1, T0),  # slower twice: since the first
    ]  # node009's re-run and node021's faster run are not regressions
    for r in report.regressions:
        assert r.ci_high < 1.0 and r.ratio == pytest.approx(0.94, abs=0.002)
    assert report.snapshots == 39 + 8 and report.nodes == 39


def test_the_latest_run_is_the_newest_whatever_the_file_names(
    report: FleetReport, real_fleet
) -> None:
    _, latest, _ = real_fleet
    node = report.node_names.index("node013")
    assert report.table is not None and report.names is not None
    triad = report.names.readings.ids[TRIAD]
    gpu1 = report.names.devices.ids["GPU 1"]
    rows = report.table.filter(
        (report.table["node_id"] == node)
        & (report.table["reading_id"] == triad)
        & (report.table["device_id"] == gpu1)
    )
    (spec,) = [s for s in latest if s.name == "node013"]
    assert rows["value"].to_list() == [spec.triad[1]]
    uptime = report.table.filter(
        (report.table["node_id"] == report.node_names.index("node004"))
        & (report.table["reading_id"] == report.names.readings.ids["host.uptime"])
    )
    assert uptime["value"].to_list() == [86400.0]  # after its reboot


def test_groups_bad_files_and_exit_code(report: FleetReport) -> None:
    assert sorted(Path(b.split(":")[0]).name for b in report.bad) == sorted(
        [*DAMAGED, "node041.json"]
    )
    # by hand: configuration differs by model, by driver (nodes 25-32), by a lost GPU
    # (its configuration readings cannot be read: 006, 017, 030, 034), by node003's power
    # limit, node016's and node017's clocks and node019's and node024's link width: 18 H100
    # nodes of the first driver alike, 7 of the second, the H200s but node034, the 3 NVLs, 8
    # nodes each on its own
    sizes = [len(g.nodes) for g in report.groups]
    assert sizes == [18, 7, 3, 3] + [1] * 8
    assert [g.folded for g in report.groups[:4]] == [
        "node[001-002,004-005,007-015,018,020-023]",
        "node[025-029,031-032]",
        "node[033,035-036]",
        "node[037-039]",
    ]
    assert [g.folded for g in report.groups[4:]] == [
        f"node{n:03d}" for n in (3, 6, 16, 17, 19, 24, 30, 34)
    ]
    assert report.groups[1].differences == [("nvml.driver_version", DRIVERS[0], DRIVERS[1])]
    assert [g.model for g in report.groups[:4]] == [
        "h100-sxm5 x8", "h100-sxm5 x8", "h200-sxm x8", "h100-nvl x8",
    ]  # fmt: skip
    assert report.groups[4].differences == [
        ("gpu.2.power.enforced_limit", "700.0 W", "500.0 W"),
        ("gpu.2.power.limit", "700.0 W", "500.0 W"),
    ]
    assert report.exit_code() == 1 and report.odd


def test_why_slow_names_the_reading_and_its_f1_by_hand(report: FleetReport) -> None:
    """H2D's slow GPUs: node015 GPU 5 (16 lanes, just past the threshold), node019 GPU 3
    and node024 GPU 1 (8 lanes). With 16 lanes the usual value (250 others have it):
    tp 2 (slow, 8 lanes), fp 0, fn 1 (slow, 16 lanes): F1 = 2*2 / (2*2 + 0 + 1) = 0.8.
    The triad's: node003 GPU 2 (capped at 500 W) and node010 GPU 1: F1 = 2 / 3."""
    by = {(s.metric, s.model): s for s in report.slow}
    h2d = by[(H2D, "h100-sxm5 x8")]
    assert [(o.node, o.device) for o in h2d.slow] == [
        ("node015", "GPU 5"), ("node019", "GPU 3"), ("node024", "GPU 1"),
    ]  # fmt: skip
    assert h2d.comparable == 32 * GPUS - 3  # three H100s have a lost GPU
    cause = h2d.causes[0]
    assert cause.reading == "gpu.{gpu}.pcie.link_width" and cause.f1 == pytest.approx(0.8)
    assert cause.slow_values == [("8 lanes", 2), ("16 lanes", 1)]
    assert cause.other_values == [("16 lanes", 250)]
    triad = by[(TRIAD, "h100-sxm5 x8")]
    assert {c.reading: c.f1 for c in triad.causes} == pytest.approx(
        {"gpu.{gpu}.power.enforced_limit": 2 / 3, "gpu.{gpu}.power.limit": 2 / 3}
    )
    assert "because gpu.{gpu}.pcie.link_width (F1 0.80): slow 8 lanes x2, 16 lanes x1" in (
        report_text(report)
    )
    # a tie for the usual value (125 other GPUs on each NUMA node) goes to the value with
    # fewer slow units, whatever order the table's groups come in: tp 2, fp 125, fn 1
    numa = {c.reading: c for c in h2d.causes}["gpu.{gpu}.numa_node"]
    assert numa.f1 == pytest.approx(4 / 130)


def test_a_fleet_alike_but_for_findings_on_every_node_is_not_odd(real_fleet) -> None:
    """Three H200 nodes without plants: MEM005 (critical) on all three is the fleet's
    way, not an odd node; their figures have no outlier (a second computation says)."""
    directory, latest, _ = real_fleet
    names = ("node033", "node035", "node036")
    assert expected_outliers([s for s in latest if s.name in names]) == set()
    paths = [p for n in names for p in directory.glob(f"{n}.*")]
    assert len(paths) == 3
    report = analyse(load_fleet(paths, workers=1))
    assert report.outliers == [] and len(report.groups) == 1
    assert any(f.severity == "critical" and len(f.nodes) == 3 for f in report.findings)
    assert not report.odd and report.exit_code() == 0


def test_parquet_gives_the_same_report(report: FleetReport, real_fleet, tmp_path: Path) -> None:
    directory, _, _ = real_fleet
    target = tmp_path / "fleet.parquet"
    write_parquet(report, str(target), load_fleet([directory], workers=1))
    again = analyse(load_fleet([target], workers=1))
    first, second = report_json(report), report_json(again)
    for data in (first, second):  # the verdict counts the files that could not be read
        data.pop("bad_files"), data.pop("verdict")
    assert second == first
    assert [(c.node, c.before, c.after) for c in again.rising] == [("node004", 2.0, 5.0)]


# ------------------------------------------------------------------ the baseline


def _quantile(values: list[float], q: float) -> float:
    """The q quantile by hand: linear between the two order statistics around (n-1)q."""
    ordered = sorted(values)
    h = (len(ordered) - 1) * q
    low = math.floor(h)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (h - low) * (ordered[high] - ordered[low])


@pytest.fixture(scope="module")
def baseline(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, list[NodeSpec]]:
    """A baseline from 60 healthy H100 nodes (three lack the tuned profile reading)."""
    cv = h2d_cv()
    directory = tmp_path_factory.mktemp("baseline-fleet")
    specs = [healthy_spec(f"good{n:03d}", 500 + n, T2, cv_h2d=cv) for n in range(1, 61)]
    for spec in specs[10:13]:
        spec.without = ("power.tuned_profile",)
    for spec in specs[20:22]:
        spec.unread = ("host.kernel.release",)  # taken, and failed
    specs[30].device_ids = {0: "0x2331"}  # GPU 0 replaced by another model: still H100 SXM
    for spec in specs:  # a figure better lower: no lower bound for it
        spec.latency = {1: round(2.5 + 0.01 * (spec.seed % 7), 3)}
    for spec in specs:
        save(snapshot_of(spec), directory / f"{spec.name}.json")
    loaded = load_fleet([directory], workers=1)
    assert "topo.gpu.0.1.copy_latency_us" in {kv.key for kv in loaded.runs[0].kernel_values}
    text, count = baseline_rules(loaded)
    rules = {r["reading"]: r for r in tomlcompat.loads(text)["rule"]}
    assert count == len(tomlcompat.loads(text)["rule"])
    return rules, specs


def test_baseline_bounds_are_the_1_percent_quantile_less_the_margin(baseline) -> None:
    rules, specs = baseline
    for reading, attribute in ((TRIAD, "triad"), (H2D, "h2d"), (CPU, "cpu")):
        values = [v for s in specs for v in getattr(s, attribute).values()]
        at = _quantile(values, 0.01)
        assert rules[reading]["expect"] == {"min": float(f"{at * 0.95:.4g}")}, reading
        assert f"The 0.01 quantile of {len(values)} figures from 60 nodes" in rules[reading]["why"]


def test_baseline_has_no_rule_for_a_reading_some_nodes_lack(baseline) -> None:
    rules, _ = baseline
    assert "power.tuned_profile" not in rules  # 3 of 60 nodes lack it
    assert "host.kernel.release" not in rules  # 2 of 60 could not read it
    assert rules["host.os.id"]["expect"] == {"equal": "ubuntu"}
    assert "gpu.{gpu}.pci.device_id" not in rules  # one GPU of another model
    assert not [r for r in rules if "copy_latency" in r]  # better lower: no minimum
    assert {tuple(r["gpu_models"]) for r in rules.values()} == {("0x2330",)}
    assert rules["power.platform_profile"]["expect"]["equal"]  # on all 60: a rule
    assert rules["nvml.driver_version"]["expect"] == {"equal": DRIVERS[0]}
    assert "gpu.{gpu}.temperature.gpu" not in rules and "host.uptime" not in rules


def test_baseline_flags_few_held_out_healthy_nodes_and_every_planted_one(baseline) -> None:
    rules, _ = baseline
    cv = h2d_cv()
    bounds = {
        a: rules[r]["expect"]["min"] for r, a in ((TRIAD, "triad"), (H2D, "h2d"), (CPU, "cpu"))
    }

    def flagged(spec: NodeSpec) -> bool:
        return any(v < bounds[a] for a in bounds for v in getattr(spec, a).values())

    held_out = [healthy_spec(f"new{n:03d}", 5000 + n, T2, cv_h2d=cv) for n in range(200)]
    assert sum(map(flagged, held_out)) <= 2
    planted = []
    for i, (attribute, factor) in enumerate(
        [("triad", 0.85), ("h2d", 0.5), ("cpu", 0.7), ("triad", 0.98), ("h2d", 0.99)]
    ):
        spec = healthy_spec(f"bad{i}", 9000 + i, T2, cv_h2d=cv)
        figures = getattr(spec, attribute)
        unit = min(figures)
        # the first three far below the fleet, the last two just below the bound
        base = figures[unit] if factor < 0.9 else bounds[attribute]
        figures[unit] = base * factor
        planted.append(spec)
    assert all(map(flagged, planted))
    just_above = healthy_spec("fine", 9100, T2, cv_h2d=cv)
    just_above.triad[0] = bounds["triad"] * 1.01
    assert not flagged(just_above) or min(just_above.h2d.values()) < bounds["h2d"]
    assert GPUS == 8
