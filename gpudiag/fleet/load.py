"""Loading many snapshots at once, for `gpudiag fleet` and `gpudiag baseline`.

A snapshot is about 2,000 readings; building a Reading object for each, as the loader
does (`snapshot.load`, 8.5 ms per 8-GPU snapshot here), would take 85 s for 10,000 nodes.
So JSON snapshots of the current schema version take a fast path that validates the same
way without building objects:

- msgspec parses the file straight into typed structs that mirror the schema
  (snapshot.py): unknown fields, wrong types, a JSON null, NaN, infinity, nested lists and
  unknown statuses are refused in C while parsing; what types cannot say (the [end]
  counts, a value exactly where the status is ok, finite samples, an ISO time, a key) is
  checked after;
- the first file of each readings shape (keys, statuses, units) also goes through the
  loader itself (`snapshot.snapshot_from_dict`), so the two cannot drift apart unnoticed;
- anything else (TOML, another schema version, whatever the fast checks refuse, and a file
  whose raw bytes may hold a control character or terminal escape) goes through
  `snapshot.load`, which migrates older versions, words the error and makes every string
  printable.

Each node then becomes its readings' shape (interned: a fleet of one SKU has one or a
few), its configuration values (interned too: identical nodes share one tuple), an array
of its numeric values, its findings (interned) and its kernel results (msgpack bytes,
decoded when used). A file's shape is compared with the last one found, in C, before it
is looked up by hash; a file whose values have the types of its shape's first file needs
no per-value check. What is left after msgspec's parse is mostly touching each reading a
few times (its key, status, unit and value): about half the parse's time. Files are read
by worker processes (one per CPU) in chunks, forked where Polars has not been imported yet
(it is only for Parquet, read after the workers), spawned otherwise.
"""

from __future__ import annotations

import math
import os
import re
import sys
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from datetime import datetime
from itertools import chain
from multiprocessing import get_context
from operator import attrgetter, itemgetter
from pathlib import Path
from typing import Any, Literal, Union

import msgspec
import numpy as np
from msgspec import UNSET, UnsetType

from gpudiag.catalog import COUNTERS, DERIVED
from gpudiag.fleet.records import (
    FleetMerger,
    KernelValue,
    Layout,
    LoadedFleet,
    NodeRun,
    ParsedKernel,
    ProbeStatusName,
    Scalar,
    kernel_values,
    no_gc,
)
from gpudiag.inputs import (
    HOST_NAME_MAX,
    MAX_NUMBER,
    json_may_hold_controls,
    not_regular,
    number_too_large,
    printable,
)
from gpudiag.model import (
    SCHEMA_VERSION,
    Action,
    KernelResult,
    ProbeStatus,
    ReadingStatus,
    Severity,
    Snapshot,
    Statistics,
)
from gpudiag.shipped import is_configuration, is_kernel_reading
from gpudiag.snapshot import SnapshotError, load, snapshot_from_dict

MAX_FILE_BYTES = 256 * 2**20
SNAPSHOT_SUFFIXES = (".json", ".toml")
PARQUET_SUFFIX = ".parquet"  # a fleet written by `gpudiag fleet --parquet`; named, not found
PARALLEL_FROM = 64  # files; fewer are read in this process
CHUNK = 64


def snapshot_paths(paths: Iterable[str | Path]) -> tuple[list[Path], list[str]]:
    """The snapshot files named, folders expanded to the *.json and *.toml files below
    them (sorted); and the paths that are neither, or are so named in a folder but no
    regular file (a FIFO, a dangling symbolic link, a link loop), as 'path: reason'.
    A *.parquet file (a fleet written by --parquet) is read where named, never found in
    a folder: one written beside the snapshots it came from would count them twice."""
    found: list[Path] = []
    bad: list[str] = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            named = sorted(p for p in path.rglob("*") if p.suffix.lower() in SNAPSHOT_SUFFIXES)
            for p in named:
                why = not_regular(p)
                if why is None:
                    found.append(p)
                elif not p.is_dir():  # a FIFO, a device, a link to nothing or in a loop
                    bad.append(printable(f"{p}: {why}"))
        elif path.is_file():
            found.append(path)
        elif path.exists():
            bad.append(printable(f"{path}: not a regular file"))
        else:
            bad.append(printable(f"{path}: no such file or directory"))
    return found, bad


def snapshotless(paths: Iterable[str | Path]) -> list[str]:
    """The folders among `paths` that hold no snapshot file, as 'folder: what it holds':
    where nothing could be read, the one line says why (an empty folder, a folder of
    Parquet files); beside folders that were read, such a folder is no bad input."""
    out = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir() and not any(
            p.suffix.lower() in SNAPSHOT_SUFFIXES for p in path.rglob("*")
        ):
            out.append(printable(f"{path}: {_holds(path)}"))
    return out


def _holds(folder: Path) -> str:
    """Why a folder gave no snapshot file: what it holds instead."""
    counts: dict[str, int] = {}
    for p in folder.rglob("*"):
        if not p.is_dir():
            suffix = p.suffix.lower() or "unsuffixed"
            counts[suffix] = counts.get(suffix, 0) + 1
    if not counts:
        return "an empty folder, no snapshot (*.json, *.toml) in it"
    ranked = sorted(counts.items(), key=lambda c: (-c[1], c[0]))
    held = ", ".join(f"{n} {suffix}" for suffix, n in ranked[:3])
    held += f" and {len(ranked) - 3} other kinds" if len(ranked) > 3 else ""
    hint = (
        " (a .parquet file is read where it is named, never found in a folder)"
        if PARQUET_SUFFIX in counts
        else ""
    )
    total = sum(counts.values())
    return (
        f"no snapshot (*.json, *.toml) in this folder; it holds {total} "
        f"file{'s' if total != 1 else ''}: {held}{hint}"
    )


# ------------------------------------------------------------------ one file

_ReadingStatus = Literal[tuple(s.value for s in ReadingStatus)]  # type: ignore[valid-type]
_Severity = Literal[tuple(s.value for s in Severity)]  # type: ignore[valid-type]
_Action = Literal[tuple(a.value for a in Action)]  # type: ignore[valid-type]


class _Reading(msgspec.Struct, forbid_unknown_fields=True, gc=False, kw_only=True):
    """A reading as the schema has it (snapshot.py); lists read as tuples, and a value
    left out is UNSET (a JSON null is refused, as the loader refuses it). Fields in the
    order an export writes them (msgspec looks for the next field where the last one
    was found first)."""

    key: str
    value: Union[Scalar, tuple[Scalar, ...], UnsetType] = UNSET  # noqa: UP007
    unit: str = ""
    source: str = ""
    status: _ReadingStatus
    reason: str = ""


class _Probe(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    name: str
    status: ProbeStatusName
    duration_s: float
    title: str = ""
    error: str = ""
    readings: list[_Reading] = msgspec.field(default_factory=list)


class _Finding(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    rule_id: str
    severity: _Severity
    subject: str
    title: str = ""
    message: str = ""
    why: str = ""
    fix: str = ""
    action: _Action = "none"  # schema 2 writes it on every finding
    evidence: list[_Reading] = msgspec.field(default_factory=list)


class _End(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    probes: int
    readings: int
    kernels: int
    findings: int


class _Snapshot(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    schema_version: int
    gpudiag_version: str
    host: str
    created: str
    end: _End
    command_line: list[str] = msgspec.field(default_factory=list)
    probes: list[_Probe] = msgspec.field(default_factory=list)
    kernels: list[ParsedKernel] = msgspec.field(default_factory=list)
    findings: list[_Finding] = msgspec.field(default_factory=list)


_DECODER = msgspec.json.Decoder(_Snapshot)
_PROBE_STATUSES = {s.value: s for s in ProbeStatus}
_KEY, _STATUS, _UNIT, _VALUE = (attrgetter(name) for name in ("key", "status", "unit", "value"))
_READINGS, _EVIDENCE = attrgetter("readings"), attrgetter("evidence")
_FINDING = attrgetter("rule_id", "severity", "subject")
_NUMBER_TYPES = frozenset((int, float))
_KERNELS_ENCODER = msgspec.msgpack.Encoder()
_KERNELS_DECODER = msgspec.msgpack.Decoder(tuple[ParsedKernel, ...])


def _past_bound(array: np.ndarray) -> bool:
    """Whether an array of a node's numbers (NaN where a value is no number) holds one
    past the bound of every loader (inputs.MAX_NUMBER), infinity included: two reductions
    that skip NaN, in C (4 us for 1,500 numbers)."""
    return bool(
        np.fmax.reduce(array, initial=0.0) > MAX_NUMBER
        or np.fmin.reduce(array, initial=0.0) < -MAX_NUMBER
    )


def _in_range(x: float) -> bool:
    return -MAX_NUMBER <= x <= MAX_NUMBER  # NaN and infinity fail it too


def _kernel_in_range(k: ParsedKernel) -> bool:
    """A kernel result's numbers within the bound of every loader (inputs.MAX_NUMBER)."""
    if not all(map(_in_range, k.samples)) or any(map(number_too_large, k.params.values())):
        return False
    s = k.stats
    return s is UNSET or all(
        map(_in_range, (s.median, s.minimum, s.maximum, s.mean, s.cv, s.ci95_low, s.ci95_high))
    )


def _readings_ok(readings: Iterable[_Reading]) -> bool:
    """What the schema's types cannot say: a key, and a value exactly when read."""
    return all(r.key and ((r.status == "ok") != (r.value is UNSET)) for r in readings)


class PackedKernels(Sequence[Any]):
    """A node's kernel results as the fast path parsed them (`ParsedKernel`), held as msgpack
    bytes and decoded when first used: most nodes' results are never looked at again
    (the fleet takes their figures, `kernel_values`, while reading), and bytes cross from
    a reading worker to the parent and sit in memory at a fraction of the objects' cost."""

    __slots__ = ("_items", "raw")

    def __init__(self, raw: bytes) -> None:
        self.raw = raw
        self._items: tuple[ParsedKernel, ...] | None = None

    def _all(self) -> tuple[ParsedKernel, ...]:
        if self._items is None:
            self._items = _KERNELS_DECODER.decode(self.raw)
        return self._items

    def __getitem__(self, index: Any) -> Any:
        return self._all()[index]

    def __len__(self) -> int:
        return len(self._all())

    def __iter__(self) -> Iterator[ParsedKernel]:
        return iter(self._all())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, PackedKernels):
            return self.raw == other.raw
        return isinstance(other, Sequence) and tuple(self) == tuple(other)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"PackedKernels({self._all()!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        return PackedKernels, (self.raw,)  # the bytes only, never the decoded results


def as_kernel_result(k: ParsedKernel | KernelResult) -> KernelResult:
    """A kernel result as the model has it (the fast path keeps what it parsed: the
    history needs only the fields both share)."""
    if isinstance(k, KernelResult):
        return k
    stats = None
    if k.stats is not UNSET:
        s = k.stats
        stats = Statistics(
            s.count, s.median, s.minimum, s.maximum, s.mean, s.cv, s.ci95_low, s.ci95_high
        )
    return KernelResult(
        kernel=k.kernel,
        device=k.device,
        metric=k.metric,
        unit=k.unit,
        status=_PROBE_STATUSES[k.status],
        samples=tuple(k.samples),
        stats=stats,
        params=tuple(k.params.items()),
        error=k.error,
    )


def _value(value: Any) -> Any:
    """A loaded reading value as the fast path holds it: lists as tuples, None as UNSET."""
    if value is None:
        return UNSET
    return tuple(value) if type(value) is list else value


@dataclass
class _Shape:
    """What a reader keeps of a validated layout to check and pick a later file's values
    in C: which values were not read (UNSET), each value's type in the file that made it
    (a later file whose values have the same types needs no check of them), and getters
    of the numeric and configuration values."""

    none_mask: tuple[bool, ...]
    types: tuple[type, ...]
    numeric_of: Any
    config_of: Any
    explain_of: Any
    last_config: tuple[tuple[Any, ...], int] | None = None


class _Reader:
    """Reads files into NodeRuns; remembers the layouts it has validated and interns
    layouts, configuration tuples and findings (per process).

    A file's layout is compared with the last one found first (tuple equality of its keys,
    statuses and units: a memcmp a string, cheaper than hashing the three tuples, which
    a fleet of one SKU would otherwise do for every file); only a file of another layout
    than the last looks the layouts up by hash."""

    def __init__(self) -> None:
        self.validated: dict[tuple[Any, ...], int] = {}
        self.layouts: list[Layout] = []
        self.shapes: list[_Shape] = []
        self.configs: dict[tuple[int, tuple[Any, ...]], int] = {}
        self.findings: dict[tuple[tuple[str, str, str], ...], tuple[tuple[str, str, str], ...]]
        self.findings = {}
        self.last: int | None = None
        self.older: set[tuple[Any, ...]] = set()  # shapes the loader upgrades (upgrade.py)
        self.sent = (0, 0)  # layouts and configurations already in a chunk (_read_chunk)

    def read(self, path: Path) -> NodeRun:
        """One snapshot file, or SnapshotError. Every file's strings are guarded: a file
        whose raw JSON may hold a control character or terminal escape (one C-speed pass,
        `inputs.json_may_hold_controls`) goes through the loader, which removes them; the
        layout cache holds keys, statuses and units, never a file's check."""
        name = printable(str(path))
        try:
            size = path.stat().st_size
        except OSError as exc:
            raise SnapshotError(name, f"cannot read: {exc.strerror}") from None
        if size > MAX_FILE_BYTES:
            raise SnapshotError(name, f"{size} bytes: larger than a snapshot can be")
        try:
            raw = path.read_bytes()
        except OSError as exc:
            raise SnapshotError(name, f"cannot read: {exc.strerror}") from None
        if raw[:4096].lstrip()[:1] == b"{" and not json_may_hold_controls(raw):
            try:
                run = self._fast(name, raw)
            except OverflowError:  # a number no reading holds: the loader names it
                run = None
            if run is not None:
                return run
        return self._from_snapshot(name, load(path))

    def _fast(self, name: str, raw: bytes) -> NodeRun | None:
        """The fast path; None where it cannot vouch for the file (the loader decides)."""
        try:
            data = _DECODER.decode(raw)
        except (msgspec.ValidationError, msgspec.DecodeError):
            return None
        if data.schema_version != SCHEMA_VERSION or len(data.host) > HOST_NAME_MAX:
            return None  # another version (the loader migrates it or says why not), or a
            # host name the loader cuts to HOST_NAME_MAX
        probes, kernels, findings, end = data.probes, data.kernels, data.findings, data.end
        readings = list(chain.from_iterable(map(_READINGS, probes)))
        counts = (len(probes), len(readings), len(kernels), len(findings))
        if (end.probes, end.readings, end.kernels, end.findings) != counts:
            return None
        if any(p.name in (DERIVED, COUNTERS) for p in probes):
            readings = _fleet_readings(probes)
        if not _readings_ok(chain.from_iterable(map(_EVIDENCE, findings))) or not all(
            map(_kernel_in_range, kernels)
        ):
            return None
        try:
            datetime.fromisoformat(data.created.replace("Z", "+00:00"))
        except ValueError:
            return None
        keys = tuple(map(_KEY, readings))
        statuses = tuple(map(_STATUS, readings))
        units = tuple(map(_UNIT, readings))
        values = list(map(_VALUE, readings))
        types = tuple(map(type, values))
        layout_id = self._known(keys, statuses, units)
        if layout_id is None:
            if len(set(keys)) != len(keys) or not _readings_ok(readings):
                return None  # a key twice: the loader keeps the last, as readings_by_key
            if (keys, statuses, units) in self.older:
                return None  # the loader brings it to what its producers now record
            try:
                loaded = snapshot_from_dict(msgspec.json.decode(raw))  # once per shape
            except (ValueError, msgspec.DecodeError):
                return None
            if _upgraded(loaded, probes):
                # saved before its producers recorded what they now do (gpudiag/upgrade.py):
                # this shape's files go through the loader, as `check` and `diff` load them
                self.older.add((keys, statuses, units))
                return self._from_snapshot(name, loaded)
            layout_id = self._layout(keys, statuses, units, values)
        elif types != self.shapes[layout_id].types and (
            tuple([v is UNSET for v in values]) != self.shapes[layout_id].none_mask
        ):
            return None  # the statuses are the layout's, so a value where none was read
        try:
            packed = PackedKernels(_KERNELS_ENCODER.encode(kernels)) if kernels else ()
        except OverflowError:
            return None  # an integer msgpack cannot hold (a parameter of 2**70): the loader's
        return self._run(
            name,
            data.host,
            data.created,
            layout_id,
            values,
            packed,
            tuple(map(_FINDING, findings)),
            types,
            kernel_values(kernels),  # from the parsed results, before they are packed
        )

    def _known(
        self, keys: tuple[str, ...], statuses: tuple[str, ...], units: tuple[str, ...]
    ) -> int | None:
        """The layout these keys, statuses and units make, if this reader has one."""
        last = self.last
        if last is not None:
            layout = self.layouts[last]
            if keys == layout.keys and statuses == layout.statuses and units == layout.units:
                return last
        found = self.validated.get((keys, statuses, units))
        if found is not None:
            self.last = found
        return found

    def _layout(
        self,
        keys: tuple[str, ...],
        statuses: tuple[str, ...],
        units: tuple[str, ...],
        values: Sequence[Any],
    ) -> int:
        numeric = tuple(i for i, v in enumerate(values) if type(v) in (int, float))
        config = tuple(i for i, k in enumerate(keys) if is_configuration(k))
        explain = explaining(keys, values, set(numeric) | set(config))
        self.layouts.append(Layout(keys, statuses, units, numeric, config, explain))
        self.shapes.append(
            _Shape(
                tuple(v is UNSET for v in values),
                tuple(map(type, values)),
                _getter(numeric),
                _getter(config),
                _getter(explain),
            )
        )
        layout_id = self.last = len(self.layouts) - 1
        self.validated[(keys, statuses, units)] = layout_id
        return layout_id

    def _from_snapshot(self, name: str, snapshot: Snapshot) -> NodeRun:
        """The slow path: a snapshot the loader built (TOML, older versions, ...)."""
        figures = {r.key for r in _fleet_readings(snapshot.probes, kernel=True)}
        figures.update(r.key for p in snapshot.probes if p.name == COUNTERS for r in p.readings)
        readings = [r for r in snapshot.readings_by_key.values() if r.key not in figures]
        keys = tuple(r.key for r in readings)
        statuses = tuple(r.status.value for r in readings)
        units = tuple(r.unit for r in readings)
        values = [_value(r.value) for r in readings]
        layout_id = self._known(keys, statuses, units)
        if layout_id is None:
            layout_id = self._layout(keys, statuses, units, values)
        findings = tuple((f.rule_id, f.severity.value, f.subject) for f in snapshot.findings)
        return self._run(
            name, snapshot.host, snapshot.created, layout_id, values, snapshot.kernels, findings
        )

    def _run(
        self,
        name: str,
        host: str,
        created: str,
        layout_id: int,
        values: list[Any],
        kernels: Sequence[Any],
        findings: tuple[tuple[str, str, str], ...],
        types: tuple[type, ...] | None = None,
        figures: tuple[KernelValue, ...] | None = None,
    ) -> NodeRun:
        shape = self.shapes[layout_id]
        config = shape.config_of(values)
        last = shape.last_config
        if last is not None and last[0] == config:
            config_id = last[1]
        else:
            if any(map(number_too_large, config)):  # a new configuration: its numbers
                raise OverflowError("a configuration value no reading can hold")
            config_id = self.configs.setdefault((layout_id, config), len(self.configs))
            shape.last_config = (config, config_id)
        numbers = shape.numeric_of(values)
        if types == shape.types or set(map(type, numbers)) <= _NUMBER_TYPES:
            # OverflowError for an integer past a float64
            array = np.array(numbers, dtype=np.float64)
        else:
            array = np.array(
                [v if type(v) in (int, float) else math.nan for v in numbers], dtype=np.float64
            )
        if _past_bound(array):  # read() hands the file to the loader, which names it
            raise OverflowError("a number no reading holds")
        return NodeRun(
            path=name,
            host=host,
            created=created,
            layout=layout_id,
            config=config_id,
            numbers=array,
            kernel_values=kernel_values(kernels) if figures is None else figures,
            kernels=kernels,
            findings=self.findings.setdefault(findings, findings),
            explain=shape.explain_of(values),
        )


_EXPLAINED: list[Any] = []  # rules/explanations.toml's reading patterns, read once


def explaining(keys: Sequence[str], values: Sequence[Any], taken: set[int]) -> tuple[int, ...]:
    """The positions of readings that are neither numbers nor configuration (`taken`)
    whose keys rules/explanations.toml names: volatile readings that may explain a slow
    node (the throttle reasons), as `gpudiag diff` takes them."""
    if not _EXPLAINED:
        from gpudiag.diff import load_explanations

        _EXPLAINED.append(
            re.compile(
                "|".join(f"(?:{p.pattern})" for e in load_explanations() for p in e.readings)
            )
        )
    pattern = _EXPLAINED[0]
    return tuple(
        i
        for i, key in enumerate(keys)
        if i not in taken and type(values[i]) not in (int, float) and pattern.search(key)
    )


def _upgraded(loaded: Snapshot, probes: Sequence[_Probe]) -> bool:
    """Whether the loader changed the file's readings (upgrade.py: a reading added, or
    one whose status it changed; every upgrade does one or the other)."""
    return [(p.name, [(r.key, r.status.value) for r in p.readings]) for p in loaded.probes] != [
        (p.name, [(r.key, r.status) for r in p.readings]) for p in probes
    ]


def _fleet_readings(probes: Iterable[Any], kernel: bool = False) -> list[Any]:
    """The readings the fleet compares: every result's but the kernel figures among the
    derived ones, which it takes from the kernel results (`kernel_values`), once; so a
    node keeps its layout whether it ran kernels or not. With `kernel`: those figures.
    Never the performance counters' window (the `telemetry` result of an --export): what
    the GPUs were doing while the node was probed, not how the node is (a busy node is
    not odd), and a node keeps its layout whether it recorded one or not."""
    out = []
    for p in probes:
        if p.name == COUNTERS:
            continue
        if p.name != DERIVED:
            if not kernel:
                out.extend(p.readings)
            continue
        out.extend(r for r in p.readings if _is_kernel_reading(r.key) is kernel)
    return out


_KERNEL_READINGS: dict[str, bool] = {}


def _is_kernel_reading(key: str) -> bool:
    """shipped.is_kernel_reading, remembered (a fleet asks of the same keys in every file;
    bounded: a file of made-up keys cannot grow it without end)."""
    found = _KERNEL_READINGS.get(key)
    if found is None:
        found = is_kernel_reading(key)
        if len(_KERNEL_READINGS) < 65536:
            _KERNEL_READINGS[key] = found
    return found


def _getter(positions: tuple[int, ...]) -> Any:
    """A function that picks these positions out of a list, as a tuple (in C)."""
    if not positions:
        return lambda values: ()
    if len(positions) == 1:
        position = positions[0]
        return lambda values: (values[position],)
    return itemgetter(*positions)


# ------------------------------------------------------------------ many files


@dataclass
class _Chunk:
    layouts: list[Layout]
    configs: list[tuple[int, tuple[Any, ...]]]
    runs: list[NodeRun]
    bad: list[str]


_WORKER_READER: _Reader | None = None


def _read_chunk(paths: list[Path]) -> _Chunk:
    """Read some files (in a worker process, or here); layouts and configurations are
    numbered within the chunk's reader."""
    global _WORKER_READER
    if _WORKER_READER is None:
        _WORKER_READER = _Reader()
    reader = _WORKER_READER
    seen_layouts, seen_configs = reader.sent
    runs, bad = [], []
    with no_gc():
        for path in paths:
            try:
                runs.append(reader.read(path))
            except SnapshotError as exc:
                bad.append(str(exc))
            except (OSError, ValueError, ArithmeticError, RecursionError, MemoryError) as exc:
                # whatever one file does, the others are read and reported
                bad.append(printable(f"{path}: {type(exc).__name__}: {exc}"))
    configs = sorted(reader.configs.items(), key=lambda item: item[1])
    reader.sent = (len(reader.layouts), len(reader.configs))
    return _Chunk(
        reader.layouts[seen_layouts:],
        [c for c, _ in configs[seen_configs:]],
        runs,
        bad,
    )


def load_fleet(paths: Iterable[str | Path], workers: int | None = None) -> LoadedFleet:
    """Read every snapshot below `paths`; unreadable ones are listed in `bad`, never fatal.
    `workers`: processes to read with (default: one per CPU; 1 reads in this process)."""
    paths_given = list(paths)
    files, bad = snapshot_paths(paths_given)
    fleet = LoadedFleet(bad=bad)
    if workers is None:
        workers = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 1
    merger = FleetMerger(fleet)

    def merge(chunk: _Chunk, layout_map: list[int], config_map: list[int]) -> None:
        merger.add(chunk.layouts, chunk.configs, chunk.runs, chunk.bad, layout_map, config_map)

    parquet = [f for f in files if f.suffix.lower() == PARQUET_SUFFIX]
    files = [f for f in files if f.suffix.lower() != PARQUET_SUFFIX]
    chunks = [files[i : i + CHUNK] for i in range(0, len(files), CHUNK)]
    global _WORKER_READER
    if workers <= 1 or len(files) < PARALLEL_FROM:
        _WORKER_READER = None
        layout_map: list[int] = []
        config_map: list[int] = []
        for chunk_paths in chunks:
            merge(_read_chunk(chunk_paths), layout_map, config_map)
        _WORKER_READER = None
        _merge_parquet(parquet, merge)
        return fleet
    # Each worker numbers layouts and configurations in its own reader, so results are
    # merged per worker: a chunk is tagged with the worker's pid. The first file is read
    # here: the catalog is built and the first shape vouched for (the loader reads it)
    # once, and forked workers inherit both instead of each doing it again; each sends
    # the inherited layouts with its first chunk, in its own numbering.
    _WORKER_READER = None
    maps: dict[int, tuple[list[int], list[int]]] = {os.getpid(): ([], [])}
    merge(_read_chunk(files[:1]), *maps[os.getpid()])
    assert _WORKER_READER is not None
    _WORKER_READER.sent = (0, 0)
    rest = files[1:]
    chunks = [rest[i : i + CHUNK] for i in range(0, len(rest), CHUNK)]
    # fork is cheapest (the workers need not import anything again), but a process that
    # holds Polars' thread pool must not fork (its locks may be held): spawn there
    context = get_context("spawn" if "polars" in sys.modules else "fork")
    try:
        with worker_pool(workers, context) as pool:
            for pid, chunk in pool.map(_read_chunk_tagged, chunks):
                layout_map, config_map = maps.setdefault(pid, ([], []))
                merge(chunk, layout_map, config_map)
    except (BrokenProcessPool, OSError):
        # no worker processes here (a sandbox, a __main__ that cannot be re-imported):
        # read everything in this process instead
        return load_fleet(paths_given, workers=1)
    finally:
        _WORKER_READER = None
    _merge_parquet(parquet, merge)  # after the workers: Polars is imported only now
    return fleet


def worker_pool(workers: int, context: Any) -> ProcessPoolExecutor:
    """The fleet's process pool, whose workers end with the process that started them,
    however it ends: SIGTERM (cron, `timeout`, Slurm), SIGHUP (a closed ssh session) or
    SIGKILL kill it at once, before the pool's own shutdown can run, and its workers would
    stay orphaned (35 MB each, still reading). The one place the fleet makes workers."""
    return ProcessPoolExecutor(
        workers, mp_context=context, initializer=_end_with_parent, initargs=(os.getpid(),)
    )


PR_SET_PDEATHSIG = 1  # linux/prctl.h


def _end_with_parent(parent: int) -> None:
    """A worker's first step: ask Linux to send it SIGKILL when its parent ends
    (prctl(PR_SET_PDEATHSIG)); and end now if the parent has already gone. Where prctl
    is not there (another system) the pool's own shutdown is all there is."""
    import ctypes
    import signal

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:  # the parent ended before prctl: nothing will signal us
        os._exit(1)


def _merge_parquet(paths: list[Path], merge: Any) -> None:
    """Read fleets written by `gpudiag fleet --parquet` (parquet.py) into the fleet
    being loaded; a file that is not one is a bad input like any other."""
    if not paths:
        return
    from gpudiag.fleet.parquet import read_parquet_fleet

    for path in paths:
        try:
            part = read_parquet_fleet(path)
        except SnapshotError as exc:
            merge(_Chunk([], [], [], [str(exc)]), [], [])
            continue
        configs = list(zip(part.config_layout, part.configs, strict=True))
        merge(_Chunk(part.layouts, configs, part.runs, []), [], [])


def _read_chunk_tagged(paths: list[Path]) -> tuple[int, _Chunk]:
    return os.getpid(), _read_chunk(paths)
