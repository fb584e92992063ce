"""gpudiag fleet FILE.parquet: a fleet written by --parquet reads back as the same report,
alone or beside snapshot files; a damaged or foreign Parquet file is named and skipped."""

from __future__ import annotations

import functools
import json
import shutil
from pathlib import Path

import polars as pl
import pytest

from gpudiag.fleet.analysis import analyse
from gpudiag.fleet.load import load_fleet
from gpudiag.fleet.parquet import METADATA_KEY
from gpudiag.fleet.report import report_json, report_text

from conftest import run_cli
from fleetgen import clean_dir, fleet_dir

__all__ = ["clean_dir", "fleet_dir"]


@pytest.fixture(scope="module")
def written(fleet_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The planted fleet (JSON, TOML, a node with two runs) written by --parquet."""
    target = tmp_path_factory.mktemp("pq") / "fleet.parquet"
    result = run_cli("fleet", str(fleet_dir), "--format", "json", "--parquet", str(target))
    assert result.returncode == 1, result.stderr
    return target


@functools.cache
def _report(*paths: Path) -> tuple[str, dict]:
    """The text and JSON report of these paths (read in this process)."""
    loaded = load_fleet(list(paths), workers=1)
    report = analyse(loaded)
    return report_text(report), report_json(report)


def test_the_report_from_parquet_is_the_report_from_the_snapshots(
    fleet_dir: Path, written: Path
) -> None:
    from_snapshots = run_cli("fleet", str(fleet_dir), "--format", "json")
    from_parquet = run_cli("fleet", str(written), "--format", "json")
    assert from_parquet.returncode == from_snapshots.returncode == 1
    assert from_parquet.stderr == ""
    one, two = json.loads(from_snapshots.stdout), json.loads(from_parquet.stdout)
    assert one == two
    # what the report is made of is really there: the plants and the history
    assert one["regressions"] and one["why_slow"] and one["outliers"] and len(one["groups"]) == 5
    assert one["snapshots"] == 21 and one["nodes"] == 20
    assert _report(written)[0] == _report(fleet_dir)[0]  # the text report too


def test_parquet_mixed_with_snapshots(fleet_dir: Path, tmp_path: Path) -> None:
    """Half the nodes (and the older run of node005) as Parquet, the rest as files."""
    first, rest = tmp_path / "first", tmp_path / "rest"
    first.mkdir(), rest.mkdir()
    for path in sorted(fleet_dir.glob("node*.*")):
        number = int(path.stem[4:7])
        shutil.copy(path, (first if number <= 10 else rest) / path.name)
    shutil.copytree(fleet_dir / "history", rest / "history")
    target = tmp_path / "first.parquet"
    assert run_cli("fleet", str(first), "--format", "json", "--parquet", str(target)).returncode
    assert _report(target, rest) == _report(fleet_dir)
    # a folder holding the Parquet file does not read it again
    shutil.copy(target, rest / "first.parquet")
    assert _report(first, rest) == _report(fleet_dir)


def test_parquet_written_from_parquet_is_the_same_fleet(
    fleet_dir: Path, written: Path, tmp_path: Path
) -> None:
    again = tmp_path / "again.parquet"
    result = run_cli("fleet", str(written), "--format", "json", "--parquet", str(again))
    assert result.returncode == 1
    assert pl.read_parquet(again).equals(pl.read_parquet(written))
    assert _report(again) == _report(fleet_dir)


def test_parquet_table_for_other_tools(written: Path) -> None:
    table = pl.read_parquet(written)
    assert set(table.columns) == {
        "node",
        "model",
        "config",
        "reading",
        "device",
        "unit",
        "value",
        "slot",
    }
    # kernel figures have no slot; readings do
    kernels = table.filter(pl.col("reading").str.contains(r"\.kernel\."))
    assert kernels.height and kernels["slot"].null_count() == kernels.height
    assert table.filter(pl.col("reading") == "gpu.{gpu}.temperature.gpu")["slot"].null_count() == 0


def _damaged(written: Path, directory: Path) -> dict[str, Path]:
    raw = written.read_bytes()
    files = {
        "truncated": raw[: len(raw) // 2],
        "text": b'{"hello": "world"}',
        "empty": b"",
    }
    out = {}
    for name, data in files.items():
        out[name] = directory / f"{name}.parquet"
        out[name].write_bytes(data)
    # a foreign Parquet file: a table of its own, no gpudiag entry
    out["foreign"] = directory / "foreign.parquet"
    pl.DataFrame({"a": [1, 2]}).write_parquet(out["foreign"])
    # gpudiag's table with a damaged entry, and with an entry that does not fit the table
    table = pl.read_parquet(written)
    out["entry"] = directory / "entry.parquet"
    table.write_parquet(out["entry"], metadata={METADATA_KEY: "not base64!"})
    meta = pl.read_parquet_metadata(written)
    out["misfit"] = directory / "misfit.parquet"
    table.with_columns(pl.col("slot") + 10_000).write_parquet(out["misfit"], metadata=meta)
    out["stranger"] = directory / "stranger.parquet"
    table.with_columns(pl.lit("node999").alias("node")).write_parquet(
        out["stranger"], metadata=meta
    )
    return out


def test_damaged_or_foreign_parquet_is_named_and_skipped(
    fleet_dir: Path, written: Path, tmp_path: Path
) -> None:
    bad = _damaged(written, tmp_path)
    reasons = {
        "truncated": "not a readable Parquet file",
        "text": "not a readable Parquet file",
        "empty": "not a readable Parquet file",
        "foreign": "not written by gpudiag fleet --parquet",
        "entry": "damaged gpudiag fleet entry",
        "misfit": "slot out of range",
        "stranger": "does not fit its fleet entry",
    }
    only_bad = run_cli("fleet", *map(str, bad.values()), "--format", "json")
    assert only_bad.returncode == 3 and "Traceback" not in only_bad.stderr
    for name, path in bad.items():
        line = next(x for x in only_bad.stderr.splitlines() if f"skipped {path}: " in x)
        assert reasons[name] in line, (name, line)
    # skipped, never fatal to the rest: the same report as without them, exit 1 (odd)
    mixed = run_cli("fleet", *map(str, bad.values()), str(written), "--format", "json")
    assert mixed.returncode == 1
    assert mixed.stderr.count("gpudiag: skipped") == len(bad)
    clean = json.loads(run_cli("fleet", str(written), "--format", "json").stdout)
    assert {k: v for k, v in json.loads(mixed.stdout).items() if k != "bad_files"} == {
        k: v for k, v in clean.items() if k != "bad_files"
    }


def test_clean_fleet_from_parquet_with_a_bad_file_exits_3(clean_dir: Path, tmp_path: Path) -> None:
    target = tmp_path / "clean.parquet"
    assert (
        run_cli("fleet", str(clean_dir), "--parquet", str(target), "--format", "json").returncode
        == 0
    )
    assert run_cli("fleet", str(target), "--format", "json").returncode == 0
    foreign = tmp_path / "foreign.parquet"
    pl.DataFrame({"a": [1]}).write_parquet(foreign)
    result = run_cli("fleet", str(target), str(foreign), "--format", "json")
    assert result.returncode == 3 and f"skipped {foreign}: " in result.stderr
