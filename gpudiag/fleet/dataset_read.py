"""Reading a fleet dataset back (fleet/dataset.py writes it; docs/dataset.md): the
LoadedFleet its snapshots gave, so that the report is the same.

The runs, kernel results and findings are read whole; the readings a file at a time (an
append writes whole runs to a file, a few thousand at most), each run's layout and
configuration known by hashes summed in Polars and only the first run of each turned into
Python lists: a report over 10,000 generated nodes peaks at 2.4 GiB (it passed 10 GiB when
the whole readings table was read, sorted and listed at once). A dataset whose runs span
files (rewritten by another tool) is read whole. Strings with a control character are
refused, as every other input's are made printable, and so is a value past any reading's.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import numpy as np

from gpudiag import inputs
from gpudiag.fleet.dataset import _CONTROL, MARKER, STATS, _check_marker
from gpudiag.fleet.load import explaining
from gpudiag.fleet.records import (
    FleetMerger,
    KernelValue,
    Layout,
    LoadedFleet,
    NodeRun,
    ParsedKernel,
    ParsedStats,
    kernel_values,
    no_gc,
)
from gpudiag.fleet.store import Store
from gpudiag.shipped import is_configuration
from gpudiag.snapshot import SnapshotError


def _untyped(value: float | None, text: str | None, kind: str) -> Any:
    if kind == "none":
        return msgspec.UNSET
    if kind == "bool":
        return bool(value)
    if kind == "int":
        return int(text) if text is not None else int(value or 0)
    if kind == "float":
        return value
    if kind == "list":
        return tuple(json.loads(text or "[]"))
    return text


def read_store(store: Store) -> LoadedFleet:
    """The fleet the dataset at `store` holds; SnapshotError if it is damaged."""

    name = store.target
    if not store.is_file(store.join(MARKER)):
        raise SnapshotError(name, f"not a gpudiag dataset (no {MARKER})")
    _check_marker(store)
    if not store.files("runs"):
        return LoadedFleet()  # only its marker: read_into says so where nothing was read
    if not store.files("readings"):  # the folder given, not a snapshot the runs name
        raise SnapshotError(name, "a dataset without readings (no files under readings/)")
    table = store.scan
    try:
        runs = table("runs").select("run_id", "node", "created", "path").collect()
        kernels = (
            table("kernels").drop("time", "node", "date", "model", "reading", "template").collect()
        )
        findings = (
            table("findings")
            .select("run_id", "position", "rule", "severity", "subject")
            .sort("run_id", "position")
            .collect()
        )
    except Exception as exc:  # a damaged file may fail anywhere in the reader
        raise SnapshotError(name, f"not a readable dataset: {str(exc).splitlines()[0]}") from None
    for frame in (runs, kernels, findings):
        _check_strings(name, frame)
    kernels_of = {
        rid: (kernel_values(found), tuple(found)) for rid, found in kernels_by_run(kernels).items()
    }
    findings_of = findings_by_run(findings)
    try:  # the readings file by file (an append writes whole runs to a file)
        seen = _RunsRead()
        for readings in _readings(store, True):
            seen.add(readings)
    except _RunAcrossFiles:  # a dataset rewritten by another tool: all its files at once
        seen = _RunsRead()
        for readings in _readings(store, False):
            seen.add(readings)
    return assemble(runs, seen, kernels_of, findings_of, where=name)


READING_COLUMNS = (
    "run_id", "position", "reading", "unit", "status", "value", "text", "value_type", "slot",
    "configuration",
)  # fmt: skip


class _RunAcrossFiles(Exception):
    """A run whose readings are in more than one file."""


def _readings(store: Store, by_file: bool) -> Any:
    """The readings table with each run's rows together in position order, checked: a
    file at a time (a few thousand runs in memory at once), or all of it as one. A file
    as an append writes it is in that order already (checked: a sort of its 2.3 million
    rows a 1,000 nodes was 1.2 s and 0.5 GB); others are sorted by run and position. The
    next file is read in a thread while the caller works on this one (Polars and NumPy
    let go of the GIL: two cores, two files at a time at most)."""
    from concurrent.futures import ThreadPoolExecutor

    sources = [store.scan_file(f) for f in store.files("readings")] if by_file else [None]
    with ThreadPoolExecutor(max_workers=1) as pool:
        pending = pool.submit(_read_readings, store, sources[0]) if sources else None
        for i in range(len(sources)):
            frame = pending.result()  # type: ignore[union-attr]
            if i + 1 < len(sources):
                pending = pool.submit(_read_readings, store, sources[i + 1])
            yield frame
            del frame


def _read_readings(store: Store, source: Any) -> Any:
    """One readings file (or all of them: `source` None) read, in runs, and checked."""
    try:
        frame = source if source is not None else store.scan("readings")
        frame = frame.select(READING_COLUMNS).collect()
        if not _in_runs(frame):
            frame = frame.sort("run_id", "position")
    except Exception as exc:  # a damaged file may fail anywhere in the reader
        first = str(exc).splitlines()[0]
        raise SnapshotError(store.target, f"not a readable dataset: {first}") from None
    _check_strings(store.target, frame)
    values = frame["value"].drop_nulls()
    if len(values) and float(values.abs().max()) > inputs.MAX_NUMBER:  # type: ignore[arg-type]
        raise SnapshotError(
            store.target, f"a value past {inputs.MAX_NUMBER:.2g}, which no reading holds"
        )
    return frame


def _in_runs(frame: Any) -> bool:
    """Whether each run's rows are together, positions 0, 1, 2, ... in order."""
    import polars as pl

    first = pl.col("position") == 0
    follows = (pl.col("position").diff() == 1) & (pl.col("run_id") == pl.col("run_id").shift())
    if not frame.select((first | follows).fill_null(False).all()).item():
        return False
    starts = frame.filter(first)["run_id"].to_list()  # each run starts once
    return len(set(starts)) == len(starts)


def run_starts(frame: Any) -> np.ndarray:
    """The rows at which a run begins in a frame whose runs' rows are together (where
    its run_id differs from the row's above): int64 indices, for np.add.reduceat."""
    import polars as pl

    changes = (pl.col("run_id") != pl.col("run_id").shift()).fill_null(True)
    return frame.select(changes).to_series().arg_true().to_numpy().astype(np.int64)


def _check_strings(name: str, frame: Any) -> None:
    """SnapshotError if a string column holds a control character (each distinct value
    looked at once: the readings' columns repeat a few thousand values)."""
    import polars as pl

    for column, kind in frame.schema.items():
        if kind == pl.String and frame.get_column(column).unique().str.contains(_CONTROL).any():
            raise SnapshotError(name, "a string with a control character")


def _number(x: float) -> float | None:
    return None if math.isnan(x) else float(x)


def kernels_by_run(kernels: Any) -> dict[str, list[ParsedKernel]]:
    """Each run's kernel results (a frame of the kernels table), in their order."""
    kernels_of: dict[str, list[ParsedKernel]] = {}
    for row in kernels.sort("run_id", "position").iter_rows(named=True):
        stats: Any = msgspec.UNSET
        if row["median"] is not None:
            stats = ParsedStats(*(int(row[n]) if n == "count" else row[n] for n in STATS))
        kernels_of.setdefault(row["run_id"], []).append(
            ParsedKernel(
                kernel=row["kernel"],
                device=row["device"],
                metric=row["metric"],
                status=row["status"],
                unit=row["unit"],
                error=row["error"],
                samples=list(row["samples"] or ()),
                params=json.loads(row["params"]),
                stats=stats,
            )
        )
    return kernels_of


def findings_by_run(findings: Any) -> dict[str, list[tuple[str, str, str]]]:
    """Each run's findings (a frame of the findings table sorted by run and position)."""
    findings_of: dict[str, list[tuple[str, str, str]]] = {}
    for rid, rule, severity, subject in findings.select(
        "run_id", "rule", "severity", "subject"
    ).iter_rows():
        findings_of.setdefault(rid, []).append((rule, severity, subject))
    return findings_of


Kernels = tuple[tuple[KernelValue, ...], tuple[Any, ...]]  # a run's figures and results


def assemble(
    runs: Any,
    seen: _RunsRead,
    kernels_of: dict[str, Kernels],
    findings_of: dict[str, Any],
    by_id: dict[str, NodeRun] | None = None,
    where: str | None = None,
) -> LoadedFleet:
    """The LoadedFleet of a dataset's tables: its runs, what their readings said (`seen`),
    their kernel figures and results, and their findings; each run by its id in `by_id`
    where given. Layouts and configurations are numbered in the order the runs (by path,
    then time) first use them, as the snapshots' loader does. `where`: the dataset, which
    an error names (with the run's snapshot)."""
    fleet = LoadedFleet()
    layout_ids: dict[int, int] = {}
    config_ids: dict[int, int] = {}
    interned: dict[tuple[Any, ...], tuple[Any, ...]] = {}
    for rid, node, created, path in runs.sort("path", "created").iter_rows():
        found_run = seen.runs.get(rid)
        if found_run is None:
            if where is None:
                raise SnapshotError(path, "a run without readings in the dataset")
            raise SnapshotError(where, f"a run without readings in the dataset (of {path})")
        layout_at, config_at, numbers = found_run
        layout_id = layout_ids.get(layout_at)
        if layout_id is None:
            layout_id = layout_ids[layout_at] = len(fleet.layouts)
            fleet.layouts.append(seen.layouts[layout_at])
        config_id = config_ids.get(config_at)
        if config_id is None:
            config_id = config_ids[config_at] = len(fleet.configs)
            fleet.configs.append(seen.configs[config_at][1])
            fleet.config_layout.append(layout_id)
        values, run_kernels = kernels_of.get(rid, ((), ()))
        found = tuple(findings_of.get(rid, ()))
        fleet.runs.append(
            NodeRun(
                path=path,
                host=node,
                created=created,
                layout=layout_id,
                config=config_id,
                numbers=numbers,
                kernel_values=values,
                kernels=run_kernels,
                findings=interned.setdefault(found, found),
                explain=seen.explain.get(rid, ()),
            )
        )
        if by_id is not None:
            by_id[rid] = fleet.runs[-1]
    return fleet


def _row_hashes(frame: Any, columns: tuple[str, ...]) -> list[np.ndarray]:
    """Per row, two 64-bit hashes of its position and `columns`: the first Polars' hash of
    the row (hash_rows: one pass, in parallel; each column hashed and mixed in NumPy took
    twice the CPU, 15.6 s of a 100,000-node report), the second a nonlinear bijection of
    the first, so that two runs' sums of both agree by chance about never."""
    mixed = frame.select("position", *columns).hash_rows(11).to_numpy(writable=True)
    second = mixed ^ (mixed >> np.uint64(29))
    second *= np.uint64(0x94D049BB133111EB)
    second ^= second >> np.uint64(32)
    return [mixed, second]


# what a run keeps of its numbers: (run id, layout as read, numbers) -> numbers kept
Keep = Callable[[str, int, np.ndarray], np.ndarray]


class _RunsRead:
    """What the readings say of each run: its layout, its configuration (each numbered
    in the order first read) and its numbers."""

    def __init__(self, keep: Keep | None = None) -> None:
        self.keep = keep
        self.layouts: list[Layout] = []
        self.configs: list[tuple[int, tuple[Any, ...]]] = []  # (layout, values)
        self.runs: dict[str, tuple[int, int, np.ndarray]] = {}
        self._layout_of: dict[tuple[Any, ...], int] = {}
        self._config_of: dict[tuple[int, tuple[Any, ...]], int] = {}
        self._by_hash: dict[Any, int] = {}
        self._config_by_hash: dict[Any, tuple[int, tuple[Any, ...]]] = {}
        self._numeric: dict[int, np.ndarray] = {}
        self._configuration: dict[int, np.ndarray] = {}  # a layout's configuration rows
        self.explain: dict[str, tuple[Any, ...]] = {}  # a run's NodeRun.explain, where kept

    def add(self, readings: Any) -> None:
        """One chunk of readings, each run's rows together in position order, holding
        whole runs. A run's layout (keys, statuses, units by position) and configuration
        are known by two 64-bit hashes each, a sum over its rows of the rows' hashes
        (_row_hashes): only the first run of each is turned into Python
        lists (whole columns as lists were most of a read's memory)."""
        starts = run_starts(readings)
        bounds = [*starts.tolist(), readings.height]
        lengths = np.diff(bounds).tolist()
        layout_sums = [
            np.add.reduceat(h, starts).tolist() if len(starts) else []
            for h in _row_hashes(readings, ("reading", "status", "unit"))
        ]
        run_ids = readings["run_id"].gather(starts).to_list()
        layout_ats = []
        for i, layout_hash in enumerate(zip(lengths, *layout_sums, strict=True)):
            layout_at = self._by_hash.get(layout_hash)
            if layout_at is None:
                a, b = bounds[i], bounds[i + 1]
                layout_at = self._by_hash[layout_hash] = self._layout(readings.slice(a, b - a))
            layout_ats.append(layout_at)
        # which rows are configuration: the current catalog's word for each run's layout
        # (_layout), not the rows' `configuration` column, the catalog's when written (a
        # reading since declared volatile, the throttle reasons, no longer groups nodes)
        configuration = (
            np.concatenate([self._configuration[at] for at in layout_ats])
            if layout_ats
            else np.zeros(0, dtype=bool)
        )
        config_sums = []
        for config in _row_hashes(readings, ("text", "value_type", "value")):
            config[~configuration] = 0
            config_sums.append(np.add.reduceat(config, starts).tolist() if len(starts) else [])
        col_value = readings["value"].fill_null(math.nan).to_numpy()
        hashes = zip(run_ids, layout_ats, zip(*config_sums, strict=True), strict=True)
        for i, (rid, layout_at, config_hash) in enumerate(hashes):
            if rid in self.runs:
                raise _RunAcrossFiles(rid)
            a, b = bounds[i], bounds[i + 1]
            layout = self.layouts[layout_at]
            value = col_value[a:b]
            found = self._config_by_hash.get((layout_at, config_hash))
            if found is None:  # alike nodes share their configuration: decoded once
                rows = readings.slice(a, b - a)
                texts, kinds = rows["text"].to_list(), rows["value_type"].to_list()
                config = tuple(
                    _untyped(_number(value[p]), texts[p], kinds[p]) for p in layout.config
                )
                config_at = self._config_of.get((layout_at, config))
                if config_at is None:
                    config_at = self._config_of[(layout_at, config)] = len(self.configs)
                    self.configs.append((layout_at, config))
                explain = tuple(
                    _untyped(_number(value[p]), texts[p], kinds[p]) for p in layout.explain
                )
                if any(
                    v is msgspec.UNSET and layout.statuses[p] == "ok"
                    for p, v in zip(layout.explain, explain, strict=True)
                ):
                    explain = ()  # written without them (a run read from Parquet)
                found = self._config_by_hash[(layout_at, config_hash)] = (config_at, explain)
            config_at, explain = found
            if explain:
                self.explain[rid] = explain
            numbers = value[self._numeric[layout_at]]
            if self.keep is not None:  # a report bounded in memory (fleet/dataset_scan.py)
                numbers = self.keep(rid, layout_at, numbers)
            self.runs[rid] = (layout_at, config_at, numbers)

    def _layout(self, rows: Any) -> int:
        keys = tuple(rows["reading"].to_list())
        statuses = tuple(rows["status"].to_list())
        units = tuple(rows["unit"].to_list())
        signature = (keys, statuses, units)
        found = self._layout_of.get(signature)
        if found is not None:
            return found
        slot = rows["slot"].to_list()
        numeric = tuple(p for _, p in sorted((s, p) for p, s in enumerate(slot) if s is not None))
        flags = [is_configuration(key) for key in keys]  # the catalog's now (add)
        config = tuple(p for p, c in enumerate(flags) if c)
        # the volatile readings that may explain a slow node, as the loader finds them
        # (no number, no configuration); their values are hashed with the configuration's
        explain = explaining(keys, [None] * len(keys), set(numeric) | set(config))
        for p in explain:
            flags[p] = True
        found = self._layout_of[signature] = len(self.layouts)
        self.layouts.append(Layout(keys, statuses, units, numeric, config, explain))
        self._numeric[found] = np.asarray(numeric, dtype=np.int64)
        self._configuration[found] = np.asarray(flags, dtype=bool)
        return found


def read_dataset(root: str | Path) -> LoadedFleet:
    """The fleet a dataset holds, as the snapshots gave it; SnapshotError if damaged."""
    with no_gc():
        try:
            store = Store(str(root))
        except OSError as exc:  # a URL this install cannot open (fleet/store.py)
            raise SnapshotError(str(root), str(exc).removeprefix(f"{root}: ")) from None
        return read_store(store)


def merge_into(fleet: LoadedFleet, part: LoadedFleet) -> None:
    """Add `part`'s runs to `fleet`, its layouts and configurations renumbered (as
    load.load_fleet merges what its workers read)."""
    configs = zip(part.config_layout, part.configs, strict=True)
    FleetMerger(fleet).add(part.layouts, configs, part.runs, part.bad)


def read_into(fleet: LoadedFleet, roots: list[str]) -> list[str]:
    """Each dataset's runs added to `fleet`; a damaged one is named in `fleet.bad`. The
    datasets that hold no run (only their marker) as 'root: why': where nothing at all
    was read, the one line says so (beside runs read, an empty dataset is no bad input)."""
    empty = []
    for root in roots:
        try:
            part = read_dataset(root)
        except SnapshotError as exc:
            fleet.bad.append(inputs.printable(str(exc)))
            continue
        if not part.runs:
            empty.append(inputs.printable(f"{root}: a dataset with no runs (nothing appended yet)"))
        merge_into(fleet, part)
    return empty
