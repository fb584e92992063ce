"""gpudiag fleet --dataset DIR: snapshots appended as rows to a Hive-partitioned Parquet
dataset, never rewriting a file, and read back as the same report (docs/dataset.md)."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from gpudiag.fleet.analysis import analyse
from gpudiag.fleet.dataset import (
    MARKER,
    append_dataset,
    node_history,
    read_dataset,
    scan,
)
from gpudiag.fleet.load import load_fleet
from gpudiag.fleet.report import report_json, report_text

from conftest import run_cli
from fleetgen import clean_dir, fleet_dir

__all__ = ["clean_dir", "fleet_dir"]


@pytest.fixture(scope="module")
def dataset(fleet_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The planted fleet appended in two batches: the node005's later run (history/)
    first, then everything (whose later run is already there)."""
    root = tmp_path_factory.mktemp("ds") / "fleet"
    assert append_dataset(load_fleet([fleet_dir / "history"], workers=1), str(root)) == 1
    assert append_dataset(load_fleet([fleet_dir], workers=1), str(root)) == 20
    return root


def _report(loaded: object) -> tuple[str, dict]:
    report = analyse(loaded)  # type: ignore[arg-type]
    return report_text(report), report_json(report)


def test_the_report_from_the_dataset_is_the_report_from_the_snapshots(
    fleet_dir: Path, dataset: Path
) -> None:
    text, document = _report(load_fleet([fleet_dir], workers=1))
    again_text, again_document = _report(read_dataset(dataset))
    assert again_text == text  # byte for byte
    assert again_document == document
    assert document["snapshots"] == 21 and document["regressions"] and document["outliers"]


def test_appends_add_files_and_rewrite_none(fleet_dir: Path, dataset: Path) -> None:
    files = {p: p.stat().st_mtime_ns for p in dataset.rglob("*.parquet")}
    assert append_dataset(load_fleet([fleet_dir], workers=1), str(dataset)) == 0  # all known
    assert {p: p.stat().st_mtime_ns for p in dataset.rglob("*.parquet")} == files
    tables = {p.relative_to(dataset).parts[0] for p in files}
    assert tables == {"runs", "readings", "kernels", "findings"}
    days = {p.relative_to(dataset).parts[1] for p in files}
    assert days == {"date=2026-11-20"} | (days - {"date=2026-11-20"}) and len(days) >= 2
    assert all(p.relative_to(dataset).parts[2].startswith("model=") for p in files)
    runs = scan(dataset, "runs").collect()
    assert runs.height == 21 and runs["run_id"].n_unique() == 21
    assert set(runs.columns) >= {"time", "run_id", "node", "date", "model"}
    readings = scan(dataset, "readings").collect()
    assert {"reading", "unit", "value", "text", "status", "device"} <= set(readings.columns)
    hot = readings.filter(
        (pl.col("node") == "node011") & (pl.col("reading") == "gpu.5.temperature.gpu")
    )
    assert hot["value"].to_list() == [88.0]


def test_a_nodes_history_reads_only_its_rows(dataset: Path) -> None:
    history = node_history(dataset, "node005", "stream", "triad", "gpu1")
    assert history["node"].unique().to_list() == ["node005"]
    first, later = history.sort("time")["median"].to_list()
    assert later == pytest.approx(first * 0.9, rel=0.02)


def test_the_cli_appends_and_reads_a_dataset(fleet_dir: Path, tmp_path: Path) -> None:
    target = tmp_path / "ds"
    wrote = run_cli("fleet", str(fleet_dir), "--format", "json", "--dataset", str(target))
    assert wrote.returncode == 1, wrote.stderr
    assert (target / MARKER).is_file()
    back = run_cli("fleet", str(target), "--format", "json")
    assert back.returncode == 1 and back.stderr == ""
    assert back.stdout == wrote.stdout
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "x.txt").write_text("x")
    refused = run_cli("fleet", str(fleet_dir), "--dataset", str(tmp_path / "other"))
    assert refused.returncode == 3 and "not a gpudiag dataset" in refused.stderr
