"""gpudiag fleet --dataset DIR: snapshots appended as rows to a Hive-partitioned Parquet
dataset, never rewriting a file, and read back as the same report (docs/dataset.md)."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest

from gpudiag.commands.fleet import load_paths
from gpudiag.fleet.analysis import FleetReport, analyse
from gpudiag.fleet.dataset import (
    MARKER,
    append_dataset,
    dataset_problem,
    node_history,
    scan,
)
from gpudiag.fleet.load import load_fleet
from gpudiag.fleet.report import report_json, report_text

from conftest import run_cli
from fleetgen import clean_dir, fleet_dir
from fleetgen_dataset import analysed, dataset

__all__ = ["analysed", "clean_dir", "dataset", "fleet_dir"]


def _report(loaded: object) -> tuple[str, dict]:
    report = analyse(loaded)  # type: ignore[arg-type]
    return report_text(report), report_json(report)


def test_the_report_from_the_dataset_is_the_report_from_the_snapshots(
    fleet_dir: Path, analysed: FleetReport
) -> None:
    text, document = _report(load_fleet([fleet_dir], workers=1))
    again_text, again_document = report_text(analysed), report_json(analysed)
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
        (pl.col("node") == "node011")
        & (pl.col("template") == "gpu.{gpu}.temperature.gpu")
        & (pl.col("device") == "GPU 5")
    )
    assert hot["value"].to_list() == [88.0]


def test_a_nodes_history_reads_only_its_rows(dataset: Path) -> None:
    history = node_history(dataset, "node005", "stream", "triad", "gpu1")
    assert history["node"].unique().to_list() == ["node005"]
    first, later = history.sort("time")["median"].to_list()
    assert later == pytest.approx(first * 0.9, rel=0.02)


def test_the_cli_appends_and_reads_a_dataset(
    fleet_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--dataset URL` and `gpudiag fleet URL` through the filesystem layer: a file://
    URL end to end (it made a folder named 'file:' in the working directory)."""
    from gpudiag.cli import main

    target = tmp_path / "ds"
    url = target.as_uri()
    wrote = run_cli("fleet", str(fleet_dir), "--format", "json", "--dataset", url, cwd=tmp_path)
    assert wrote.returncode == 1, wrote.stderr
    assert (target / MARKER).is_file() and not (tmp_path / "file:").exists()
    back = load_paths([str(target)], 1)  # what `gpudiag fleet DIR` reads, in this process
    assert not back.bad
    assert json.dumps(report_json(analyse(back)), indent=1) + "\n" == wrote.stdout
    assert main(["fleet", url, "--format", "json"]) == 1  # the URL read back
    assert capsys.readouterr().out == wrote.stdout
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "x.txt").write_text("x")
    assert "not a gpudiag dataset" in (dataset_problem(str(tmp_path / "other")) or "")
    assert dataset_problem(str(tmp_path / "other" / "x.txt")) == "not a folder"
    assert dataset_problem(str(target)) is None and dataset_problem(str(tmp_path / "new")) is None


def test_an_object_store_dataset(
    fleet_dir: Path, analysed: FleetReport, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A dataset on a filesystem that is not a local folder (fsspec's memory://: no
    folders, no rename, objects written whole, as on S3) appends, reads back as the
    snapshots' report, and answers a node's history. Appended in batches of 7 runs (a
    partition of more than BATCH_RUNS runs is several files: an append's memory is
    bounded), read back as one."""
    import uuid

    import fsspec

    from gpudiag.fleet import dataset

    monkeypatch.setattr(dataset, "BATCH_RUNS", 7)
    bucket = f"memory://gpudiag-{uuid.uuid4().hex[:8]}"  # fsspec's memory is per process
    url = f"{bucket}/fleet"
    loaded = load_fleet([fleet_dir], workers=1)
    assert dataset_problem(url) is None
    assert append_dataset(loaded, url) == 21 and append_dataset(loaded, url) == 0
    memory = fsspec.filesystem("memory")
    files = [f for f in memory.find(f"{url}/runs") if f.endswith(".parquet")]
    assert len(files) > 3 and all(pl.read_parquet(memory.cat_file(f)).height <= 7 for f in files)
    back = load_paths([url], 1)
    assert not back.bad and len(back.runs) == 21
    assert _report(back) == (report_text(analysed), report_json(analysed))
    history = node_history(url, "node005", "stream", "triad", "gpu1")
    assert history["node"].to_list() == ["node005"] * 2
    assert "not a gpudiag dataset" in load_paths([bucket], 1).bad[0]
    assert "not a gpudiag dataset" in (dataset_problem(bucket) or "")
    assert dataset_problem("nosuch://b/fleet") == "Protocol not known: nosuch"
    [line] = load_paths(["nosuch://b/fleet"], 1).bad
    assert line == "nosuch://b/fleet: Protocol not known: nosuch"


def _sql(title: str, root: Path) -> str:
    """The query under `### title` in docs/dataset.md, on this dataset."""
    text = (Path(__file__).parent.parent / "docs" / "dataset.md").read_text()
    section = text.split(f"### {title}\n", 1)[1]
    query = section.split("```sql\n", 1)[1].split("```", 1)[0]
    return query.replace("'DIR/", f"'{root}/")


@pytest.fixture(scope="module")
def duck() -> object:
    duckdb = pytest.importorskip("duckdb", reason="duckdb not installed (the test extra has it)")
    return duckdb.connect()


def test_the_outliers_query_finds_what_gpudiag_finds(
    analysed: FleetReport, dataset: Path, duck: object
) -> None:
    report = analysed
    templates = set(scan(dataset, "readings").select("template").unique().collect()["template"])
    ours = {
        (o.model, o.node, o.reading, o.device, o.value)
        for o in report.outliers
        if o.reading in templates  # kernel figures are the next queries' subject
    }
    rows = duck.execute(_sql("Outliers per model", dataset), {"threshold": 5.0}).fetchall()  # type: ignore[attr-defined]
    theirs = {row[:5] for row in rows}
    assert theirs == ours
    assert ("h100-sxm5 x8", "node011", "gpu.{gpu}.temperature.gpu", "GPU 5", 88.0) in theirs


def test_the_history_query_gives_node_history(dataset: Path, duck: object) -> None:
    params = {"node": "node005", "kernel": "stream", "metric": "triad"}
    rows = duck.execute(_sql("A node's history", dataset), params).fetchall()  # type: ignore[attr-defined]
    ours = node_history(dataset, "node005", "stream", "triad")
    assert [(r[1], r[2], r[4]) for r in rows] == list(
        zip(ours["run_id"], ours["device"], ours["median"], strict=True)
    )
    assert len(rows) == 2 * 10  # two runs, 8 GPUs and 2 NUMA nodes each


def test_the_factor_query_gives_the_reports_share(
    analysed: FleetReport, dataset: Path, duck: object
) -> None:
    history = analysed.history
    assert history is not None
    found = [f for f in history.factors if "driver" in f.reading]
    assert found, [f.reading for f in history.factors]
    factor = found[0]
    params = {"metric": factor.metric, "factor": factor.reading}
    rows = duck.execute(_sql("A factor's effect", dataset), params).fetchall()  # type: ignore[attr-defined]
    mine = [r for r in rows if r[0] == factor.model]
    assert mine and mine[0][3] == pytest.approx(factor.share, rel=1e-9, abs=1e-12)
    assert mine[0][4] == factor.reference
    levels = {r[1]: r[2] for r in mine}
    assert {lv.value: lv.nodes for lv in factor.levels}.items() <= levels.items()


def test_a_damaged_dataset_is_named_and_skipped(dataset: Path, tmp_path: Path) -> None:
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(dataset, copy)
    (copy / MARKER).write_text('{"format": "gpudiag fleet dataset", "schema_version": 9}')
    loaded = load_paths([str(copy)], 1)
    assert not loaded.runs and "dataset schema 9" in loaded.bad[0]
    shutil.copy(dataset / MARKER, copy / MARKER)
    victim = next((copy / "readings").rglob("*.parquet"))
    victim.write_bytes(b"PAR1 not really")
    loaded = load_paths([str(copy)], 1)
    assert not loaded.runs and "not a readable dataset" in loaded.bad[0]
    assert "\n" not in loaded.bad[0]


def test_sample_lists_of_every_length_keep_their_order() -> None:
    """The kernels' samples column is made by length in NumPy and put back in order."""
    from gpudiag.fleet.dataset import _sample_lists

    samples = [[1.0, 2.0], [], [3.0], [4.0, 5.0], [6.0, 7.0, 8.0], []]
    assert _sample_lists(samples).to_list() == samples
    assert _sample_lists([]).to_list() == []


def test_a_run_split_across_files_is_read_whole(
    dataset: Path, analysed: FleetReport, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The readings are read a file at a time (an append writes whole runs to a file);
    a dataset rewritten by another tool, a run's rows in two files, is read as one."""
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(dataset, copy)
    victim = max((copy / "readings").rglob("*.parquet"), key=lambda p: p.stat().st_size)
    rows = pl.read_parquet(victim, hive_partitioning=False)
    half = rows.height // 2 + 7  # within a run
    rows[:half].write_parquet(victim)
    rows[half:].write_parquet(victim.with_name("part-second-half.parquet"))
    from gpudiag.fleet import dataset_read as module

    ways = []
    real = module._readings

    def recorded(store: object, by_file: bool) -> object:
        ways.append(by_file)
        return real(store, by_file)  # type: ignore[arg-type]

    monkeypatch.setattr(module, "_readings", recorded)
    assert _report(load_paths([str(copy)], 1)) == (report_text(analysed), report_json(analysed))
    assert ways == [True, False]  # file by file, then (a run across files) all at once


def test_a_snapshot_read_twice_counts_once(
    fleet_dir: Path, dataset: Path, analysed: FleetReport, capsys: pytest.CaptureFixture[str]
) -> None:
    """The same folder twice, or a dataset beside the files it was written from: each
    run once by its run id, and how many were dropped said (review #3)."""
    for paths in ([fleet_dir, fleet_dir], [dataset, fleet_dir]):
        loaded = load_paths([str(p) for p in paths], 1)
        assert len(loaded.runs) == 21
        assert "21 snapshots read twice" in capsys.readouterr().err
    # no drift from a run compared with itself: the report is the dataset's alone
    assert report_json(analyse(loaded)) == report_json(analysed)


def test_the_text_wraps_at_columns(
    fleet_dir: Path,
    analysed: FleetReport,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """At COLUMNS=80 in a pipe every line fits 80 columns (17 did not on this fleet), each
    word kept whole and in order (review #12)."""
    from gpudiag.cli import main

    whole = report_text(analysed)
    assert max(map(len, whole.splitlines())) > 80
    monkeypatch.setenv("COLUMNS", "80")
    main(["fleet", str(fleet_dir), "--format", "text", "--workers", "1"])
    text = capsys.readouterr().out
    assert max(map(len, text.splitlines())) <= 80
    assert text.split() == whole.split()
    assert "\n    fleet median 55 GB/s\n" in text  # continued under its own line
