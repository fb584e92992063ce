"""Defects a new user's review found in `gpudiag fleet` (round 8): each test fails on the
code before its fix."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from gpudiag.fleet.analysis import analyse
from gpudiag.fleet.load import load_fleet
from gpudiag.model import Reading, Snapshot
from gpudiag.snapshot import save

from fleetgen import base_snapshot

MADE_UP = "nvml:nvmlDeviceGetTemperature+nvmlDeviceGetMarginTemperature-nvmlDeviceGetFieldValues"


def older(snapshot: Snapshot) -> Snapshot:
    """The snapshot as a gpudiag before the margin to slowdown wrote it (a303fd8): no
    gpu.N.temperature.slowdown_margin, and the absolute thresholds made up from the
    temperature, the T.Limit margin and the threshold's T.Limit value."""
    probes = []
    for probe in snapshot.probes:
        if probe.name != "gpu":
            probes.append(probe)
            continue
        by_key = {r.key: r for r in probe.readings}
        readings = []
        for r in probe.readings:
            if r.key.endswith(".temperature.slowdown_margin"):
                continue
            gpu, name = r.key.split(".")[1], r.key.rsplit(".", 1)[1]
            if ".temperature." in r.key and name in ("slowdown", "shutdown", "gpu_max"):
                parts = (
                    "temperature.gpu",
                    "temperature.tlimit_margin",
                    f"temperature.{name}_tlimit",
                )
                t, margin, tlimit = (by_key[f"gpu.{gpu}.{p}"].value for p in parts)
                r = Reading(r.key, t + margin - tlimit, "C", MADE_UP)
            readings.append(r)
        probes.append(replace(probe, readings=tuple(readings)))
    return replace(snapshot, probes=tuple(probes))


def _write(folder: Path, snapshot: Snapshot, hosts: list[str]) -> None:
    folder.mkdir(exist_ok=True)
    for host in hosts:
        save(replace(snapshot, host=host), folder / f"{host}.json")


def test_fleet_upgrades_an_older_snapshot_as_check_and_diff_do(tmp_path: Path) -> None:
    """Review point 1: two older exports of the same node as three current ones are one
    configuration group, nothing odd: the fleet's loader brings them to what the producers
    now record (gpudiag/upgrade.py), as `check` and `diff` do; and so does --dataset."""
    base = base_snapshot()
    old = older(base)
    assert "gpu.0.temperature.slowdown_margin" not in old.readings_by_key
    _write(tmp_path / "fleet", base, ["n1", "n2", "n3"])
    _write(tmp_path / "fleet", old, ["o1", "o2"])
    loaded = load_fleet([tmp_path / "fleet"], workers=1)
    report = analyse(loaded)
    assert [g.nodes for g in report.groups] == [["n1", "n2", "n3", "o1", "o2"]]
    assert report.exit_code() == 0 and not report.odd_nodes()
    # --dataset appends what the loader read: the rows hold the upgraded readings
    from gpudiag.fleet.dataset import append_dataset
    from gpudiag.fleet.dataset_read import read_into
    from gpudiag.fleet.records import LoadedFleet

    assert append_dataset(loaded, str(tmp_path / "dataset")) == 5
    again = LoadedFleet()
    read_into(again, [str(tmp_path / "dataset")])
    assert [g.nodes for g in analyse(again).groups] == [["n1", "n2", "n3", "o1", "o2"]]


def _with_value(snapshot: Snapshot, key: str, value: object) -> Snapshot:
    probes = tuple(
        replace(
            p, readings=tuple(replace(r, value=value) if r.key == key else r for r in p.readings)
        )
        for p in snapshot.probes
    )
    return replace(snapshot, probes=probes)


def test_a_dataset_takes_reading_kinds_from_the_current_catalog(tmp_path: Path) -> None:
    """Review point 2: a dataset written when the throttle reasons were configuration
    (its rows say configuration = true) groups nodes as its snapshots do now that the
    catalog declares them volatile: one group, not one per throttle reason."""
    import polars as pl

    from gpudiag.fleet.dataset import append_dataset
    from gpudiag.fleet.dataset_read import read_into
    from gpudiag.fleet.records import LoadedFleet
    from gpudiag.shipped import is_configuration

    key = "gpu.0.throttle_reasons"
    assert not is_configuration(key)
    base = base_snapshot()
    _write(tmp_path / "fleet", base, ["n1", "n2"])
    _write(tmp_path / "fleet", _with_value(base, key, ["HwSlowdown"]), ["n3"])
    from_snapshots = analyse(load_fleet([tmp_path / "fleet"], workers=1))
    assert [g.nodes for g in from_snapshots.groups] == [["n1", "n2", "n3"]]
    dataset = tmp_path / "dataset"
    assert append_dataset(load_fleet([tmp_path / "fleet"], workers=1), str(dataset)) == 3
    files = list((dataset / "readings").rglob("*.parquet"))
    throttle = pl.col("reading").str.ends_with(".throttle_reasons")
    slowed = throttle & (pl.col("node") == "n3") & (pl.col("reading") == key)
    for file in files:  # as a gpudiag whose catalog called them configuration wrote them
        frame = pl.read_parquet(file, hive_partitioning=False)
        frame.with_columns(
            configuration=throttle | pl.col("configuration"),
            text=pl.when(slowed)
            .then(pl.lit('["HwSlowdown"]'))
            .when(throttle)
            .then(pl.lit('["GpuIdle"]'))
            .otherwise(pl.col("text")),
            value_type=pl.when(throttle).then(pl.lit("list")).otherwise(pl.col("value_type")),
        ).write_parquet(file)
    again = LoadedFleet()
    read_into(again, [str(dataset)])
    assert not again.bad
    assert [g.nodes for g in analyse(again).groups] == [["n1", "n2", "n3"]]


def test_the_report_says_when_too_few_alike_nodes_were_there_to_compare(tmp_path: Path) -> None:
    """Review point 3: two alike nodes are too few to judge a node against alike nodes
    (MIN_COMPARABLE 3): the report says so and names them, instead of 'no node ... below
    alike nodes'' and 'nothing needs a person'; and 'no node has two runs' where none has."""
    from gpudiag.fleet.report import report_json, report_text

    _write(tmp_path / "fleet", base_snapshot(), ["n1", "n2"])
    report = analyse(load_fleet([tmp_path / "fleet"], workers=1))
    text = report_text(report)
    few = "too few alike nodes to compare (fewer than 3 of a type): n[1-2] (h100-sxm5 x8)"
    assert report.verdict().startswith(f"exit 0: no node found to differ, but {few}; ")
    assert f"  slowest nodes: none judged: {few}\n" in text
    assert "more than 7% below alike nodes'" not in text
    assert "  no node has two runs: no history to compare\n" in text
    assert report_json(report)["uncompared"] == {"h100-sxm5 x8": ["n1", "n2"]}
    # a third alike node: compared, and the report as it was
    _write(tmp_path / "fleet", base_snapshot(), ["n3"])
    report = analyse(load_fleet([tmp_path / "fleet"], workers=1))
    assert report.verdict().startswith("exit 0: no node differs from alike nodes; findings")
    assert "too few" not in report_text(report) and "uncompared" not in report_json(report)


def test_the_verdict_names_findings_on_every_node() -> None:
    """Review point 4: a critical finding on every node (the type's way, so no node is
    odd: the exit code stays 0, as tests/test_fleet_realistic.py's MEM005 fleet has it)
    is no 'nothing needs a person': the verdict says no node differs and names it."""
    from gpudiag.fleet.analysis import FleetFinding, FleetReport

    models = {"a1": "A", "a2": "A", "a3": "A"}
    findings = [
        FleetFinding("GPU027", "critical", ["a1", "a2", "a3"]),
        FleetFinding("HOST002", "info", ["a1", "a2", "a3"]),
    ]
    report = FleetReport(3, 3, [], [], [], [], [], findings, 5.0, node_models=models)
    assert report.exit_code() == 0 and not report.odd
    assert report.verdict() == (
        "exit 0: no node differs from alike nodes; findings on every node of a type below: "
        "GPU027 (critical)"
    )
    report.findings.append(FleetFinding("GPU028", "warning", ["a2"]))  # a2 is odd now
    assert report.verdict() == "exit 1: needs a person: 1 node (a2)"  # as it was


def test_a_slow_nodes_interval_says_what_it_is() -> None:
    """Review point 5: '(8 GPUs, 2693-2702)' read as the GPUs' range; it is a 93%
    interval of the node's median (whyslow.median_interval), and the shortfall's
    '(9.9%-10.2%; ...)' is the shortfall over that interval: both say so."""
    import numpy as np

    from gpudiag.fleet.analysis import FleetReport
    from gpudiag.fleet.report import report_text
    from gpudiag.fleet.whyslow import SlowNode, interval_coverage, median_interval

    gpus = np.asarray([2690.0, 2693, 2695, 2699, 2701, 2701, 2702, 2710])
    low, high = median_interval(gpus)
    assert (low, high) == (2693, 2702) and round(interval_coverage(8), 3) == 0.930
    slow = SlowNode(
        "node00005", "stream.triad.fp64", "h100-sxm5 x8", "GB/s", 2700.0, low, high,
        3000.0, 0.1, 0.099, 0.102, 8, 197,
    )  # fmt: skip
    models = {f"n{i}": "h100-sxm5 x8" for i in range(3)}
    report = FleetReport(3, 3, [], [], [], [], [], [], 5.0, slow_nodes=[slow], node_models=models)
    assert (
        "      node00005 stream.triad.fp64: 2700 GB/s (median of 8 GPUs, its 93% interval "
        "2693-2702), 10.0% short of 3000 (9.9%-10.2% over that interval; 197 h100-sxm5 x8 "
        "nodes)\n"
    ) in report_text(report)


def test_compare_says_what_it_compares_and_takes_the_factors_gpu() -> None:
    """Review point 6: `--compare gpu.0.power.limit=500.0,700.0` compared node medians
    (a node's median of its GPUs), unsaid, so GPU 0 15% slower on the capped nodes was
    'same'; a factor of one GPU now compares that GPU, and the line says what it takes."""
    from gpudiag.fleet.changes import History, HistoryReport, RunPoint, compare_groups
    from gpudiag.fleet.changes_text import history_lines

    triad = "gpu.{gpu}.kernel.stream.triad.fp64"
    history = History()
    for n in range(8):
        capped = n < 3
        config = {"gpu.0.power.limit": "500.0 W" if capped else "700.0 W"}
        values = {
            triad.replace("{gpu}", str(g)): (2550.0 if capped and g == 0 else 3000.0) + n + g
            for g in range(8)
        }
        history.nodes[f"n{n}"] = [RunPoint("2026-11-28T00:00:00Z", config, values)]
    history.units = {triad.replace("{gpu}", str(g)): "GB/s" for g in range(8)}
    [(name, n_a, n_b, verdict)] = compare_groups(history, "gpu.0.power.limit", "500.0", "700.0")
    assert (name, n_a, n_b) == (triad, 3, 5) and verdict is not None
    assert verdict.kind == "different" and verdict.shift.pct > 14  # B (700 W) over A
    report = HistoryReport(
        [], [], None, [(name, n_a, n_b, verdict)], "gpu.0.power.limit=500.0,700.0"
    )
    [line] = history_lines(report, "  ")
    assert line.startswith(
        "  compare gpu.0.power.limit=500.0,700.0 stream.triad.fp64 (3 vs 5 nodes; each node's "
        "GPU 0, the GPU gpu.0.power.limit is of): "
    )


def test_thin_datasets_say_why_nothing_was_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review point 8: a dataset folder with only its marker said 'no snapshot could be
    read' with no reason; one without readings/ named a snapshot the runs came from, not
    the folder given; `fleet --help`'s PATH did not mention datasets."""
    import shutil

    from gpudiag.cli import main
    from gpudiag.commands.fleet import load_paths, none_read
    from gpudiag.fleet.dataset import MARKER, append_dataset

    _write(tmp_path / "fleet", base_snapshot(), ["n1"])
    dataset = tmp_path / "dataset"
    assert append_dataset(load_fleet([tmp_path / "fleet"], workers=1), str(dataset)) == 1
    marker_only = tmp_path / "marker-only"
    marker_only.mkdir()
    shutil.copy(dataset / MARKER, marker_only / MARKER)
    loaded = load_paths([str(marker_only)], 1)
    assert none_read(loaded.bad) == (
        f"no snapshot could be read: {marker_only}: a dataset with no runs (nothing appended yet)"
    )
    shutil.rmtree(dataset / "readings")
    loaded = load_paths([str(dataset)], 1)
    assert none_read(loaded.bad) == (
        f"no snapshot could be read: {dataset}: a dataset without readings (no files under "
        "readings/)"
    )
    with pytest.raises(SystemExit):
        main(["fleet", "--help"])
    assert "a dataset --dataset wrote" in " ".join(capsys.readouterr().out.split())


def test_throttle_reasons_explain_slow_gpus_but_group_no_nodes(tmp_path: Path) -> None:
    """Review point 7: since the throttle reasons became volatile (they move with load)
    they left the configuration, and with it the slow group's explanation ('no
    configuration reading known to move it separates them'). As `gpudiag diff` takes
    rules/explanations.toml's readings whatever their kind, the fleet's slow GPUs are
    explained by them again; they still group no nodes."""
    import random

    from gpudiag.fleet.report import report_text

    from fleetgen import kernels

    base = base_snapshot()
    for n in range(8):
        slow = n in (2, 5)
        snapshot = replace(
            base, kernels=kernels(random.Random(n), {0: 2400.0} if slow else {}, {}, 120.0)
        )
        if slow:
            snapshot = _with_value(snapshot, "gpu.0.throttle_reasons", ["HwSlowdown"])
        _write(tmp_path / "fleet", snapshot, [f"n{n}"])
    report = analyse(load_fleet([tmp_path / "fleet"], workers=1))
    assert [g.nodes for g in report.groups] == [[f"n{n}" for n in range(8)]]
    [triad] = [s for s in report.slow if "stream.triad" in s.metric]
    assert {(o.node, o.device) for o in triad.slow} == {("n2", "GPU 0"), ("n5", "GPU 0")}
    cause = triad.causes[0]
    assert (cause.reading, cause.f1) == ("gpu.{gpu}.throttle_reasons", 1.0)
    assert cause.slow_values == [("HwSlowdown", 2)] and cause.other_values == [("GpuIdle", 62)]
    assert (
        "because gpu.{gpu}.throttle_reasons (F1 1.00): slow HwSlowdown x2; others GpuIdle x62"
        in report_text(report)
    )
    # a dataset keeps those values (its rows' text, as a configuration's): the same report
    from gpudiag.fleet.dataset import append_dataset
    from gpudiag.fleet.dataset_read import read_into
    from gpudiag.fleet.records import LoadedFleet

    assert append_dataset(load_fleet([tmp_path / "fleet"], workers=1), str(tmp_path / "ds")) == 8
    again = LoadedFleet()
    read_into(again, [str(tmp_path / "ds")])
    assert report_text(analyse(again)) == report_text(report)
