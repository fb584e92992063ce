"""`gpudiag fleet DATASET` in bounded memory (fleet/dataset_scan.py): the readings a file
at a time, the latest numbers spilled, the long table analysed a part at a time, and the
report byte for byte the snapshots'."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gpudiag.fleet import analysis, dataset_scan
from gpudiag.fleet.analysis import analyse
from gpudiag.fleet.load import load_fleet
from gpudiag.fleet.report import report_json, report_text
from gpudiag.fleet.table import Fleet, TableNames, numeric_columns

from fleetgen import clean_dir, fleet_dir
from fleetgen_dataset import dataset

__all__ = ["clean_dir", "dataset", "fleet_dir"]


def test_the_bounded_report_is_the_snapshots_report(
    fleet_dir: Path, dataset: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A part of at most 500 rows (many parts, one template each at most), byte for byte;
    with --compare and other thresholds too (each option reaches the parts)."""
    snapshots = load_fleet([fleet_dir], workers=1)
    monkeypatch.setattr(dataset_scan, "CHUNK_ROWS", 500)
    for options in ({}, {"threshold": 3.0, "slow_pct": 2.0, "compare": ("driver", "a", "b")}):
        expected = analyse(snapshots, **options)  # type: ignore[arg-type]
        report = dataset_scan.dataset_report(str(dataset), **options)
        assert report is not None and report.columns is None
        assert report_text(report) == report_text(expected)
        assert report_json(report) == report_json(expected)
    assert expected.outliers and expected.slow and expected.regressions


def test_the_cli_analyses_a_dataset_a_part_at_a_time(
    fleet_dir: Path,
    dataset: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`gpudiag fleet DATASET` never holds the long table whole: the statistics see at
    most CHUNK_ROWS rows (plus one template) at once, every row once; and no run without
    history keeps its numbers in memory. The old code analysed every row at once."""
    from gpudiag.cli import main

    whole = numeric_columns(Fleet(load_fleet([fleet_dir], workers=1)), TableNames())
    seen: list[int] = []
    runs: list[Any] = []
    group_stats, fleet_class = analysis.group_stats, analysis.Fleet

    def counted(columns: Any) -> Any:
        seen.append(len(columns.value))
        return group_stats(columns)

    def kept(loaded: Any) -> Any:
        runs.extend(loaded.runs)
        return fleet_class(loaded)

    assert main(["fleet", str(fleet_dir), "--format", "json"]) == 1
    expected = capsys.readouterr().out  # the snapshots' report, read whole
    monkeypatch.setattr(analysis, "group_stats", counted)
    monkeypatch.setattr(analysis, "Fleet", kept)
    monkeypatch.setattr(dataset_scan, "CHUNK_ROWS", 2000)
    assert main(["fleet", str(dataset), "--format", "json"]) == 1
    assert capsys.readouterr().out == expected
    assert sum(seen) == len(whole.value) and len(seen) > 3
    assert max(seen) <= 2000 + 20 * 8  # a part, and one template of 20 8-GPU nodes more
    holding = {run.host for run in runs if len(run.numbers)}
    assert holding == {"node005"}  # the one node with history (rising counters need it)


def test_counters_in_different_parts_are_judged_as_in_one_table(tmp_path: Path) -> None:
    """Two counters beyond the fleet's rate, of two readings in two parts: the same p
    (the Bonferroni family summed over the parts) and the whole table's row order."""
    from gpudiag.fleet.dataset import append_dataset

    from fleetgen import GPUS, operator_fleet, write_specs

    specs, _ = operator_fleet(12, faults=False)
    specs[3].extra["ecc.volatile.uncorrected"] = {g: 40 if g == 2 else 0 for g in range(GPUS)}
    specs[9].extra["ecc.aggregate.uncorrected"] = {g: 10**5 if g == 5 else 0 for g in range(GPUS)}
    write_specs(tmp_path, specs)
    loaded = load_fleet([tmp_path], workers=1)
    append_dataset(loaded, str(tmp_path / "ds"))
    expected = analyse(loaded)
    assert [(c.node, c.reading) for c in expected.counters] == [
        ("node0004", "gpu.{gpu}.ecc.volatile.uncorrected"),
        ("node0010", "gpu.{gpu}.ecc.aggregate.uncorrected"),
    ]
    parts = dataset_scan.plan(Fleet(loaded), 200)
    readings = [c.reading for c in expected.counters]
    assert [i for i, (only, _) in enumerate(parts) if readings[0] in only] != [
        i for i, (only, _) in enumerate(parts) if readings[1] in only
    ]
    report = dataset_scan.dataset_report(str(tmp_path / "ds"), chunk_rows=200)
    assert report is not None
    assert report_json(report) == report_json(expected)
    assert report_text(report) == report_text(expected)


def test_runs_alike_only_where_every_row_is() -> None:
    """A run's layout and configuration are known by sums of row hashes (dataset_read.
    _row_hashes): runs that differ in one row's reading, status, unit, order, or one
    configuration value (text, kind, number, null against '') are told apart; runs that
    differ only in a measured number share both."""
    import polars as pl

    from gpudiag.fleet.dataset_read import READING_COLUMNS, _RunsRead

    base = [  # reading, unit, status, value, text, value_type, slot, configuration
        ("gpu.0.power.limit", "W", "ok", 700.0, None, "float", 0, True),
        ("gpu.0.name", "", "ok", None, "H100", "str", None, True),
        ("gpu.0.temperature.gpu", "C", "ok", 41.0, None, "float", 1, False),
    ]
    variants = {
        "same": base,
        "measured": [base[0], base[1], (*base[2][:3], 77.0, *base[2][4:])],
        "reading": [base[0], base[1], ("gpu.0.temperature.mem", *base[2][1:])],
        "status": [base[0], base[1], (*base[2][:2], "error", *base[2][3:])],
        "unit": [base[0], base[1], (base[2][0], "K", *base[2][2:])],
        "order": [base[1], base[0], base[2]],
        "number": [(*base[0][:3], 600.0, *base[0][4:]), base[1], base[2]],
        "text": [base[0], (*base[1][:4], "H200", *base[1][5:]), base[2]],
        "empty": [base[0], (*base[1][:4], "", *base[1][5:]), base[2]],
        "kind": [base[0], (*base[1][:5], "none", *base[1][6:]), base[2]],
    }
    rows = [
        (rid, p, *row)
        for rid, runs in [("a", base), *variants.items()]
        for p, row in enumerate(runs)
    ]
    frame = pl.DataFrame(
        rows,
        schema=dict.fromkeys(READING_COLUMNS, pl.String)
        | {"position": pl.UInt32, "value": pl.Float64, "slot": pl.Int32}
        | {"configuration": pl.Boolean},
        orient="row",
    ).select(READING_COLUMNS)
    seen = _RunsRead()
    seen.add(frame)
    layout = {rid: found[0] for rid, found in seen.runs.items()}
    config = {rid: found[:2] for rid, found in seen.runs.items()}
    assert layout["same"] == layout["measured"] == layout["a"] and len(seen.layouts) == 5
    assert config["same"] == config["measured"] == config["a"]
    assert len(set(config.values())) == len(config) - 2  # each other run its own
