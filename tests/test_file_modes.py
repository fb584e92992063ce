"""Issue 27, point 5: every writer keeps an existing file's mode and gives a new file
0666 & ~umask (atomic.atomic_target): snapshots and exports, captures, baselines and the
Parquet fleet file (which mkstemp made 0600)."""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from gpudiag import capture
from gpudiag.fleet.analysis import analyse
from gpudiag.fleet.baseline import write_rules
from gpudiag.fleet.load import load_fleet
from gpudiag.fleet.parquet import write_parquet
from gpudiag.output import write_text
from gpudiag.snapshot import load, save

from conftest import FIXTURES, run_cli

SAVED = FIXTURES / "schema-v1" / "demo-faulty-export.toml"


@contextmanager
def umask(mask: int) -> Iterator[None]:
    old = os.umask(mask)
    try:
        yield
    finally:
        os.umask(old)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def _parquet(path: Path) -> None:
    directory = path.parent / "nodes"
    directory.mkdir(exist_ok=True)
    save(load(SAVED), directory / "a.json")
    loaded = load_fleet([directory], workers=1)
    write_parquet(analyse(loaded), str(path), loaded)


WRITERS: dict[str, Callable[[Path], None]] = {
    "snapshot": lambda p: save(load(SAVED), p),
    "export": lambda p: write_text(p, "# x\n"),
    "capture": lambda p: capture.save({"format": capture.FORMAT}, p),
    "baseline": lambda p: write_rules("# rules\n", p),
    "parquet": _parquet,
}


@pytest.mark.parametrize("writer", list(WRITERS))
def test_new_files_get_0666_less_umask(writer: str, tmp_path: Path) -> None:
    for mask, expected in ((0o022, 0o644), (0o027, 0o640), (0o002, 0o664)):
        target = tmp_path / f"out-{mask:o}.{'parquet' if writer == 'parquet' else 'json'}"
        with umask(mask):
            WRITERS[writer](target)
        assert _mode(target) == expected, (writer, oct(_mode(target)))


@pytest.mark.parametrize("writer", list(WRITERS))
def test_an_existing_file_keeps_its_mode(writer: str, tmp_path: Path) -> None:
    target = tmp_path / f"out.{'parquet' if writer == 'parquet' else 'json'}"
    target.write_text("old")
    for mode in (0o600, 0o640, 0o604):
        target.chmod(mode)
        with umask(0o022):
            WRITERS[writer](target)
        assert _mode(target) == mode, (writer, oct(_mode(target)))


def test_export_over_a_private_snapshot_stays_private(tmp_path: Path) -> None:
    target = tmp_path / "node.toml"
    target.write_bytes(SAVED.read_bytes())
    target.chmod(0o600)
    result = run_cli(
        "--root", str(FIXTURES / "host-basic"),
        "--nvml-replay", str(FIXTURES / "replay-2gpu.toml"),
        "--export", str(target),
    )  # fmt: skip
    assert result.returncode in (0, 1, 2), result.stderr
    assert _mode(target) == 0o600
    assert load(target).host  # rewritten, and a snapshot
