"""The fleet report is the same whichever way the snapshots were read: the fast JSON path
(msgspec structs, layouts compared with the last one, kernel results kept packed), the
loader itself (every file refused by the fast path), and reading workers; on a fleet with
outliers, slow nodes explained, odd configurations, a node with history and a hot GPU
(fleetgen's fleet_dir)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from gpudiag.fleet import load as fleetload
from gpudiag.fleet.analysis import analyse
from gpudiag.fleet.load import load_fleet
from gpudiag.fleet.report import report_json, report_text
from gpudiag.snapshot import load, save

from fleetgen import fleet_dir

__all__ = ["fleet_dir"]


def _as_json(source: Path, target: Path) -> Path:
    """Every snapshot of `source` as JSON, in the same folders (TOML ones saved again)."""
    for path in source.rglob("*"):
        if path.suffix in (".json", ".toml"):
            out = target / path.relative_to(source).with_suffix(".json")
            out.parent.mkdir(parents=True, exist_ok=True)
            if path.suffix == ".json":
                shutil.copy(path, out)
            else:
                save(load(path), out)
    return target


def test_the_fast_path_and_the_loader_give_one_report(
    fleet_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    as_json = _as_json(fleet_dir, tmp_path / "json")
    slow_reads: list[str] = []
    from_snapshot = fleetload._Reader._from_snapshot

    def counted(self: fleetload._Reader, name: str, snapshot: object) -> object:
        slow_reads.append(name)
        return from_snapshot(self, name, snapshot)  # type: ignore[arg-type]

    monkeypatch.setattr(fleetload._Reader, "_from_snapshot", counted)
    fast = analyse(load_fleet([as_json], workers=1))
    assert slow_reads == [], "every JSON file of the current schema takes the fast path"
    with monkeypatch.context() as patch:  # the fast path refuses every file: the loader reads
        patch.setattr(fleetload._Reader, "_fast", lambda self, name, raw: None)
        slow = analyse(load_fleet([as_json], workers=1))
    assert len(slow_reads) == 21  # 20 nodes and node005's later run
    monkeypatch.setattr(fleetload, "PARALLEL_FROM", 0)
    monkeypatch.setattr(fleetload, "CHUNK", 3)
    workers = analyse(load_fleet([as_json], workers=2))
    # the fleet has what the comparison is about: outliers, slow nodes, groups, history
    assert fast.outliers and fast.slow and len(fast.groups) > 1 and fast.regressions
    for report in (slow, workers):
        assert report_json(report) == report_json(fast)
        assert report_text(report) == report_text(fast)
        assert report_text(report, markdown=True) == report_text(fast, markdown=True)
    assert fast.table is not None and fast.table.equals(slow.table)


@pytest.mark.parametrize("command", ["fleet", "goodput", "baseline"])
def test_nothing_read_is_one_line_and_3(
    command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A bad path alone was two lines (skipped, then none read): now one line naming it,
    exit 3; several bad paths, one line naming each (the first ten)."""
    from gpudiag.cli import main

    extra = ["-o", str(tmp_path / "rules.toml")] if command == "baseline" else []
    absent = tmp_path / "absent.json"
    assert main([command, str(absent), *extra]) == 3
    [line] = capsys.readouterr().err.splitlines()
    assert "no snapshot could be read: " in line and f"{absent}: no such file" in line
    empty = tmp_path / "empty.json"
    empty.write_text("")
    assert main([command, str(absent), str(empty), *extra]) == 3
    [line] = capsys.readouterr().err.splitlines()
    assert f"{absent}: no such file" in line and f"{empty}: file is empty" in line


@pytest.mark.parametrize("command", ["fleet", "goodput", "baseline"])
def test_a_folder_with_no_snapshot_is_named_with_what_it_holds(
    command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """'no snapshot could be read' named nothing for a folder of Parquet files or an
    empty folder: now each folder, and what it held (review #18)."""
    from gpudiag.cli import main

    extra = ["-o", str(tmp_path / "rules.toml")] if command == "baseline" else []
    parquet, empty = tmp_path / "e2", tmp_path / "emptydir"
    parquet.mkdir()
    empty.mkdir()
    for name in ("x.parquet", "y.parquet"):
        (parquet / name).write_bytes(b"PAR1")
    assert main([command, str(parquet), str(empty), *extra]) == 3
    [line] = capsys.readouterr().err.splitlines()
    assert "no snapshot could be read: " in line
    assert f"{parquet}: no snapshot (*.json, *.toml) in this folder; it holds 2 files: " in line
    assert "2 .parquet (a .parquet file is read where it is named" in line
    assert f"{empty}: an empty folder" in line


def test_numpy_loads_with_one_blas_thread_unless_the_user_says() -> None:
    """fleet, goodput and baseline do no linear algebra: OpenBLAS starts one thread, not
    one per CPU, as NumPy loads after commands/fleet.py; a user's setting is kept."""
    import os
    import subprocess
    import sys

    code = (
        "import os, gpudiag.commands.fleet, numpy; "
        "print(os.environ['OPENBLAS_NUM_THREADS'], len(os.listdir('/proc/self/task')))"
    )
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    for given, expected in ((None, "1 1"), ("3", "3")):
        run_env = env if given is None else {**env, "OPENBLAS_NUM_THREADS": given}
        out = subprocess.run(
            [sys.executable, "-c", code], env=run_env, capture_output=True, text=True, check=True
        ).stdout.split()
        assert " ".join(out if given is None else out[:1]) == expected


@pytest.mark.parametrize(("command", "option"), [("fleet", "--parquet"), ("baseline", "-o")])
def test_an_empty_file_target_gives_no_stdout_advice(
    command: str, option: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--parquet ''` and `baseline -o ''` write a file, never standard output: the
    empty path is refused in one line without "('-' writes to stdout)" (fleet.py
    repeated snapshot.target_problem's empty case with the command line's advice, and
    `--parquet ''` was not checked at all: the report ran and wrote nothing)."""
    from gpudiag.cli import main

    assert main([command, str(tmp_path), option, ""]) == 3
    line = capsys.readouterr().err.strip()
    assert line == f"gpudiag: {option} : the path is empty: name a file"
