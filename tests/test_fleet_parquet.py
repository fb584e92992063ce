"""gpudiag fleet FILE.parquet: a fleet written by --parquet reads back as the same report,
alone or beside snapshot files; a damaged or foreign Parquet file is named and skipped."""

from __future__ import annotations

import base64
import functools
import json
import shutil
import zlib
from pathlib import Path

import msgspec
import numpy as np
import polars as pl
import pytest

from gpudiag.fleet import parquet
from gpudiag.fleet.analysis import analyse
from gpudiag.fleet.load import load_fleet
from gpudiag.fleet.parquet import METADATA_KEY, read_parquet_fleet
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
        "run",
        "latest",
    }
    table = table.filter(pl.col("latest"))  # the rows of each node's latest snapshot
    # kernel figures have no slot; readings do
    kernels = table.filter(pl.col("reading").str.contains(r"\.kernel\."))
    assert kernels.height and kernels["slot"].null_count() == kernels.height
    assert table.filter(pl.col("reading") == "gpu.{gpu}.temperature.gpu")["slot"].null_count() == 0


def test_history_is_rows_not_in_the_footer(written: Path) -> None:
    """An older snapshot's numbers are rows of the table (latest false, its run's index in
    the entry), not part of the footer's entry, which Arrow's Thrift limit (100 MB)
    refuses from about 55,000 nodes."""
    table = pl.read_parquet(written)
    older = table.filter(~pl.col("latest"))
    assert older["node"].unique().to_list() == ["node005"] and older["run"].n_unique() == 1
    assert older.filter(pl.col("reading") == "gpu.1.temperature.gpu").height == 1
    entry = pl.read_parquet_metadata(written)[METADATA_KEY]
    document = json.loads(zlib.decompress(base64.b64decode(entry)))
    assert document["format"] == 2 and all(r["numbers"] is None for r in document["runs"])


def test_a_parquet_file_of_the_first_format_still_reads() -> None:
    """tests/fixtures/fleet-parquet-v1: written by round 4's gpudiag (format 1: an older
    snapshot's numbers in the footer), three nodes and node002 twice; its report is the
    one saved beside it."""
    folder = Path(__file__).parent / "fixtures" / "fleet-parquet-v1"
    entry = pl.read_parquet_metadata(folder / "fleet.parquet")[METADATA_KEY]
    assert json.loads(zlib.decompress(base64.b64decode(entry)))["format"] == 1
    report = analyse(read_parquet_fleet(folder / "fleet.parquet"))
    document = json.loads(json.dumps(report_json(report)))  # tuples as JSON's lists
    assert document == json.loads((folder / "report.json").read_text())
    assert report.snapshots == 4


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
    [line] = only_bad.stderr.splitlines()  # nothing read: one line naming each problem
    assert line.startswith("gpudiag: no snapshot could be read: ")
    for name, path in bad.items():
        said = next(x for x in line.split("; ") if f"{path}: " in x)
        assert reasons[name] in said, (name, said)
    # skipped, never fatal to the rest: the same report as without them, exit 1 (odd)
    mixed = run_cli("fleet", *map(str, bad.values()), str(written), "--format", "json")
    assert mixed.returncode == 1
    assert mixed.stderr.count("gpudiag: skipped") == len(bad)
    clean = json.loads(run_cli("fleet", str(written), "--format", "json").stdout)
    skip = ("bad_files", "verdict")  # the verdict counts the files not read
    assert {k: v for k, v in json.loads(mixed.stdout).items() if k not in skip} == {
        k: v for k, v in clean.items() if k not in skip
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


def _alike_fleet(written: Path, target: Path, copies: int) -> tuple[int, int]:
    """`written`'s latest nodes copied `copies` times under other names (node001-7 ...),
    as --parquet writes them; returns the entry's compressed and inflated sizes."""
    document = parquet._decode(pl.read_parquet_metadata(written)[METADATA_KEY], lambda: 20)
    latest = [run for run in document.runs if run.latest]
    document.runs = [
        msgspec.structs.replace(run, host=f"{run.host}-{i}", path=f"copy{i}/{run.path}")
        for run in latest  # each node's copies side by side: alike, as zlib sees them
        for i in range(copies)
    ]
    inflated = msgspec.json.encode(document)
    packed = zlib.compress(inflated, 6)
    table = pl.read_parquet(written).filter(pl.col("latest"))  # (the older run: not copied)
    pl.concat([table.with_columns(pl.col("node") + f"-{i}") for i in range(copies)]).write_parquet(
        target, metadata={METADATA_KEY: base64.b64encode(packed).decode()}
    )
    return len(packed), len(inflated)


def test_a_fleet_of_many_alike_nodes_reads_back(written: Path, tmp_path: Path) -> None:
    """3,000 alike nodes: an entry that inflates past 16 MiB and more than 64 times its
    compressed size, as 10,000 nodes of fleet_scale's fleet do. It is no bomb: it reads
    back whole, each copy the node it was copied from."""
    target = tmp_path / "alike.parquet"
    compressed, inflated = _alike_fleet(written, target, copies=150)
    assert inflated > 16 * 2**20 and inflated > 64 * compressed  # past the old bound
    original = parquet.latest_runs(read_parquet_fleet(written))
    loaded = read_parquet_fleet(target)
    assert len(loaded.runs) == 150 * 20 and len({run.host for run in loaded.runs}) == 3000
    for run in loaded.runs:
        host, _, copy = run.host.rpartition("-")
        source = original[host]
        assert run.path == f"copy{copy}/{source.path}"
        assert np.array_equal(run.numbers, source.numbers, equal_nan=True)
        assert (run.layout, run.config, run.created) == (
            source.layout,
            source.config,
            source.created,
        )
        assert run.kernels == source.kernels and run.findings == source.findings
    assert np.isfinite(loaded.runs[-1].numbers).sum() > 1000  # the numbers are there


def _bomb(size: int) -> bytes:
    """A zlib stream of `size` zero bytes (a multiple of 1 MiB) in about size / 1000
    bytes: after a full flush, each MiB of zeros compresses to the same bytes."""
    chunk = bytes(2**20)
    packer = zlib.compressobj(9)
    head = packer.compress(chunk) + packer.flush(zlib.Z_FULL_FLUSH)
    body = packer.compress(chunk) + packer.flush(zlib.Z_FULL_FLUSH)
    end = packer.flush()[:-4]  # the Adler-32 of all those zeros: a = 1, b = size
    return head + body * (size // 2**20 - 1) + end + ((size % 65521) << 16 | 1).to_bytes(4, "big")


def test_the_bomb_stream_is_what_it_claims() -> None:
    assert zlib.decompress(_bomb(8 * 2**20)) == bytes(8 * 2**20)


@pytest.mark.parametrize(
    ("nodes", "options", "cap"), [(1, (), "16 MiB"), (300, ("--max-input", "64M"), "64 MiB")]
)
def test_a_small_entry_that_inflates_to_gigabytes_is_refused(
    tmp_path: Path, nodes: int, options: tuple[str, ...], cap: str
) -> None:
    """3 MB of Parquet whose entry inflates to 2 GiB: one line, exit 3. A file of one node
    is refused at 16 MiB; one whose table claims many nodes, at --max-input."""
    packed = _bomb(2 * 2**30)
    assert len(packed) < 3 * 2**20
    target = tmp_path / "bomb.parquet"
    pl.DataFrame(
        {"node": [f"n{i}" for i in range(nodes)], "slot": [0] * nodes, "value": [1.0] * nodes}
    ).write_parquet(target, metadata={METADATA_KEY: base64.b64encode(packed).decode()})
    result = run_cli(*options, "fleet", str(target), "--format", "json")
    assert result.returncode == 3 and "Traceback" not in result.stderr
    [line] = [x for x in result.stderr.splitlines() if f"{target}: " in x]
    assert f"damaged gpudiag fleet entry: its fleet entry inflates past {cap}" in line, line
