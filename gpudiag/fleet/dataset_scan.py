"""The report of a fleet dataset in memory bounded whatever the fleet's size
(docs/dataset.md): `gpudiag fleet DATASET` without --parquet, --dataset, --rules or the
screen, which need the whole fleet in memory (dataset_read.read_dataset).

read_dataset holds every run's numbers and kernel results, and the analysis builds the
long table of every number of every node at once (fleet/table.py): at 100,000 generated
8-GPU nodes 133 million rows, 3.5 GB of columns beside 1 GB of numbers. Here each table
is read a file at a time (an append writes whole runs to a file): the latest runs'
numbers go to a spill folder (one NumPy file per readings file and layout, a slot a row),
kernel results are kept as their figures only, and both only where a node has history
(regressions and rising counters compare consecutive runs). Then the analysis takes the
long table a part at a time (analysis.analyse's `chunks`): whole reading templates, about
CHUNK_ROWS rows, the kernel figures in one; a counter's rate is its reading's over the
fleet, and the Bonferroni family of all counters is summed over the parts
(outliers.judge_counters). The statistics are the same NumPy over the same
float64 values, group by group, so the report is the one read_dataset gives, byte for
byte (tests/test_fleet_dataset_scan.py).
"""

from __future__ import annotations

import json
import tempfile
from collections import defaultdict
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from gpudiag.fleet.analysis import FleetReport, analyse
from gpudiag.fleet.dataset import MARKER, _check_marker
from gpudiag.fleet.dataset_read import (
    Kernels,
    _check_strings,
    _readings,
    _row_hashes,
    _RunAcrossFiles,
    _RunsRead,
    assemble,
    kernels_by_run,
    run_starts,
)
from gpudiag.fleet.records import (
    KernelValue,
    LoadedFleet,
    NodeRun,
    ParsedKernel,
    _kernel_key,
    no_gc,
)
from gpudiag.fleet.store import Store
from gpudiag.fleet.table import Columns, Fleet, TableNames, numeric_columns, template
from gpudiag.snapshot import SnapshotError

CHUNK_ROWS = 8_000_000  # rows of the long table a part (28 bytes each, and the statistics')
_NONE = np.empty(0, dtype=np.float64)  # a run's numbers, where they are in the spill


class Spill:
    """The latest runs' numbers on disk: per readings file and layout, one NumPy file of
    a row per slot (a part of the readings is its rows, read through a memory map)."""

    def __init__(self, folder: Path, latest: set[str], kept: set[str]) -> None:
        self.folder = folder
        self.latest = latest  # the run ids whose numbers are spilled
        self.kept = kept  # the run ids whose numbers also stay in memory
        self._batch: dict[int, tuple[list[str], list[np.ndarray]]] = defaultdict(lambda: ([], []))
        self.parts: list[tuple[int, Path, list[str]]] = []  # layout as read, file, run ids
        self.by_id: dict[str, NodeRun] = {}  # each run read, by its id
        self.files: list[tuple[int, Path, np.ndarray]] = []  # fleet layout, file, node rows

    def keep(self, rid: str, layout: int, numbers: np.ndarray) -> np.ndarray:
        """A run's numbers as read: spilled if it is a node's latest; what it keeps."""
        if rid in self.latest:
            rids, rows = self._batch[layout]
            rids.append(rid)
            rows.append(numbers)
        return numbers if rid in self.kept else _NONE

    def flush(self) -> None:
        """The runs of one readings file written out."""
        for layout, (rids, rows) in self._batch.items():
            path = self.folder / f"part{len(self.parts)}.npy"
            np.save(path, np.ascontiguousarray(np.stack(rows).T))
            self.parts.append((layout, path, rids))
        self._batch.clear()

    def place(self, fleet: Fleet) -> None:
        """Each spilled file's layout and rows as the fleet numbers them."""
        index = {id(run): i for i, run in enumerate(fleet.current)}
        for _, path, rids in self.parts:
            runs = [self.by_id[rid] for rid in rids]
            rows = np.asarray([index[id(run)] for run in runs], dtype=np.int64)
            self.files.append((runs[0].layout, path, rows))
        self.parts.clear()

    def numbers(self, layout: int, members: list[int], slots: np.ndarray) -> np.ndarray:
        """The numbers of `members` (rows of fleet.current, all of `layout`) at `slots`."""
        out = np.empty((len(members), len(slots)))
        row_of = np.full(max(members) + 1, -1, dtype=np.int64)
        row_of[np.asarray(members, dtype=np.int64)] = np.arange(len(members))
        filled = 0
        for found, path, rows in self.files:
            if found != layout:
                continue
            block = np.load(path, mmap_mode="r")
            out[row_of[rows]] = np.asarray(block[slots]).T
            filled += len(rows)
            del block  # unmapped: its pages leave the resident set
        if filled != len(members):  # every latest run is spilled once
            raise RuntimeError(f"{filled} of {len(members)} runs' numbers spilled")
        return out


def read_bounded(store: Store, folder: Path) -> tuple[LoadedFleet, Spill]:
    """The fleet a dataset holds with the latest runs' numbers in a Spill under
    `folder`; SnapshotError if it is damaged, _RunAcrossFiles if a run's readings span
    files (read_dataset reads those)."""
    name = store.target
    if not store.is_file(store.join(MARKER)):
        raise SnapshotError(name, f"not a gpudiag dataset (no {MARKER})")
    _check_marker(store)
    if not store.files("runs"):
        return LoadedFleet(), Spill(folder, set(), set())
    try:
        runs = store.scan("runs").select("run_id", "node", "created", "path").collect()
    except Exception as exc:  # a damaged file may fail anywhere in the reader
        raise SnapshotError(name, f"not a readable dataset: {str(exc).splitlines()[0]}") from None
    _check_strings(name, runs)
    if runs["run_id"].n_unique() != runs.height:
        raise _RunAcrossFiles("a run id twice")  # read_dataset (and drop_repeats) then
    history: set[str] = set()
    newest: dict[str, tuple[str, str, str]] = {}
    for rid, node, created, path in runs.iter_rows():
        before = newest.get(node)
        if before is not None:
            history.add(node)
        if before is None or (created, path) > before[:2]:
            newest[node] = (created, path, rid)
    latest = {found[2] for found in newest.values()}
    kept = {rid for rid, node in runs.select("run_id", "node").iter_rows() if node in history}
    spill = Spill(folder, latest, kept)
    seen = _RunsRead(spill.keep)
    with ThreadPoolExecutor(max_workers=1) as pool:  # mostly Python beside mostly NumPy
        others = pool.submit(lambda: (_kernels(store, kept), _findings(store)))
        for readings in _readings(store, True):
            seen.add(readings)
            spill.flush()
        kernels_of, findings_of = others.result()
    return assemble(runs, seen, kernels_of, findings_of, spill.by_id), spill


def _frames(
    store: Store, table: str, columns: tuple[str, ...] | None, drop: tuple[str, ...]
) -> Iterator[Any]:
    """A table's files one at a time, read and checked."""
    for path in store.files(table):
        try:
            frame = store.scan_file(path)
            frame = frame.select(columns) if columns else frame.drop(drop, strict=False)
            frame = frame.collect()
        except Exception as exc:  # a damaged file may fail anywhere in the reader
            first = str(exc).splitlines()[0]
            raise SnapshotError(store.target, f"not a readable dataset: {first}") from None
        _check_strings(store.target, frame)
        yield frame


def _kernels(store: Store, kept: set[str]) -> dict[str, Kernels]:
    """Each run's kernel figures, a file at a time; its results only where its node has
    history. The figures' strings are held once each (10,000s of nodes share them)."""
    import polars as pl

    strings: dict[str, str] = {}
    out: dict[str, Kernels] = {}
    skipped = ("time", "node", "date", "model", "reading", "template")
    for frame in _frames(store, "kernels", None, skipped):
        frame = frame.sort("run_id", "position")
        for rid in frame["run_id"].unique(maintain_order=True).to_list():
            if rid in out:
                raise _RunAcrossFiles(rid)
            out[rid] = ((), ())
        for rid, values in figures(frame, strings).items():
            out[rid] = (tuple(values), ())
        history = frame.filter(pl.col("run_id").is_in(list(kept)))
        for rid, found in kernels_by_run(history).items():
            out[rid] = (out[rid][0], tuple(found))
    return out


def figures(frame: Any, strings: dict[str, str]) -> dict[str, list[KernelValue]]:
    """records.kernel_values of each run of a kernels frame sorted by run and position,
    without a ParsedKernel a row: the keys once per kernel, device, metric and parameters,
    the medians of the trials without statistics in NumPy (the same sums, to the bit).
    Their strings are held once in `strings` (10,000s of nodes share them)."""
    import polars as pl

    rows = frame.filter((pl.col("status") == "ok") & (pl.col("samples").list.len() > 0))
    keys: dict[tuple[str, str, str, str], tuple[str | None, str]] = {}
    for kernel, device, metric, params in (
        rows.select("kernel", "device", "metric", "params").unique().iter_rows()
    ):
        probe = ParsedKernel(kernel, device, metric, "ok", params=json.loads(params))
        keys[(kernel, device, metric, params)] = _kernel_key(probe)
    median = rows["median"].fill_null(np.nan).to_numpy().copy()
    need = rows["median"].is_null().to_numpy()
    if need.any():
        median[need] = _medians(rows.filter(pl.col("median").is_null())["samples"])
    out: dict[str, list[KernelValue]] = {}
    columns = ("run_id", "kernel", "device", "metric", "params", "unit")
    for (rid, kernel, device, metric, params, unit), value in zip(
        rows.select(columns).iter_rows(), median.tolist(), strict=True
    ):
        key, name = keys[(kernel, device, metric, params)]
        if key is not None:
            found = KernelValue(
                strings.setdefault(key, key),
                value,
                strings.setdefault(unit, unit),
                strings.setdefault(name, name),
                strings.setdefault(device, device),
            )
            out.setdefault(rid, []).append(found)
    return out


def _medians(samples: Any) -> np.ndarray:
    """Each list's median as records.kernel_values takes it: the middle value of the
    sorted list, or the mean of the two middle ones, (lower + upper) / 2."""
    lengths = samples.list.len().to_numpy().astype(np.int64)
    flat = samples.explode().to_numpy().astype(np.float64)
    if np.isnan(flat).any():  # a NaN's place in Python's sort is not NumPy's
        return np.asarray([_median_of(list(s)) for s in samples.to_list()], dtype=np.float64)
    owner = np.repeat(np.arange(len(lengths)), lengths)
    flat = flat[np.lexsort((flat, owner))]
    starts = np.concatenate(([0], np.cumsum(lengths)[:-1]))
    half = lengths // 2
    upper = flat[starts + half]
    lower = flat[starts + np.maximum(half - 1, 0)]
    return np.where(lengths % 2 == 1, upper, (lower + upper) / 2)


def _median_of(samples: list[float]) -> float:
    ordered = sorted(samples)
    half = len(ordered) // 2
    return ordered[half] if len(ordered) % 2 else (ordered[half - 1] + ordered[half]) / 2


def _findings(store: Store) -> dict[str, tuple[tuple[str, str, str], ...]]:
    """Each run's findings, a file at a time, identical tuples held once and made once:
    a run's rows are known by two sums of their hashes (most nodes have the same)."""
    interned: dict[Any, Any] = {}
    by_hash: dict[tuple[int, int, int], tuple[tuple[str, str, str], ...]] = {}
    out: dict[str, tuple[tuple[str, str, str], ...]] = {}
    columns = ("run_id", "position", "rule", "severity", "subject")
    for frame in _frames(store, "findings", columns, ()):
        frame = frame.sort("run_id", "position")
        starts = run_starts(frame)
        if not len(starts):
            continue
        bounds = [*starts.tolist(), frame.height]
        sums = [
            np.add.reduceat(h, starts).tolist()
            for h in _row_hashes(frame, ("rule", "severity", "subject"))
        ]
        rids = frame["run_id"].gather(starts).to_list()
        for i, rid in enumerate(rids):
            if rid in out:
                raise _RunAcrossFiles(rid)
            a, b = bounds[i], bounds[i + 1]
            key = (b - a, sums[0][i], sums[1][i])
            found = by_hash.get(key)
            if found is None:
                rows = frame.slice(a, b - a).select("rule", "severity", "subject").rows()
                made = tuple(interned.setdefault(row, row) for row in rows)
                found = by_hash[key] = interned.setdefault(made, made)
            out[rid] = found
    return out


def chunks(spill: Spill, rows: int | None = None) -> Any:
    """analysis.analyse's `chunks`: the long table a part at a time from `spill`."""

    def parts(fleet: Fleet, names: TableNames) -> Iterator[Columns]:
        spill.place(fleet)
        for only, kernels in plan(fleet, rows or CHUNK_ROWS):
            yield numeric_columns(fleet, names, only, spill.numbers, kernels)

    return parts


def plan(fleet: Fleet, rows: int) -> list[tuple[set[str], bool]]:
    """The parts of the long table: reading templates, about `rows` rows each (the kernel
    figures' in one), and whether the part has kernel figures."""
    size: dict[str, int] = defaultdict(int)  # template -> rows, in the table's order
    members: dict[int, int] = defaultdict(int)
    for run in fleet.current:
        members[run.layout] += 1
    for layout_id, count in members.items():
        layout = fleet.loaded.layouts[layout_id]
        for p in layout.numeric:
            size[template(layout.keys[p])[0]] += count
    figures: set[str] = set()
    for run in fleet.current:
        for kv in run.kernel_values:
            figures.add(template(kv.key)[0])
    parts: list[tuple[set[str], bool]] = [(figures, True)]
    current: set[str] = set()
    total = 0
    for name, count in size.items():
        if name in figures:
            continue
        if current and total + count > rows:
            parts.append((current, False))
            current, total = set(), 0
        current.add(name)
        total += count
    parts.append((current, False))
    return [part for part in parts if part[0]]


def dataset_report(root: str, chunk_rows: int | None = None, **options: Any) -> FleetReport | None:
    """The report of the dataset at `root` in bounded memory (analysis.analyse's
    `options`; parts of about `chunk_rows` rows, CHUNK_ROWS where None); None where it
    must be read whole (read_dataset: a damaged dataset, whose error it gives, or runs
    across files)."""
    with no_gc(), tempfile.TemporaryDirectory(prefix="gpudiag-spill-") as tmp:
        try:
            store = Store(root)
            loaded, spill = read_bounded(store, Path(tmp))
        except (OSError, SnapshotError, _RunAcrossFiles):
            return None
        if not loaded.runs:
            return None
        return analyse(loaded, chunks=chunks(spill, chunk_rows), **options)
