"""Loading many snapshots at once, for `gpudiag fleet` and `gpudiag baseline`.

A snapshot is about 2,000 readings; building a Reading object for each, as the loader
does (`snapshot.load`, 8.5 ms per 8-GPU snapshot here), would take 85 s for 10,000 nodes.
So JSON snapshots of the current schema version take a fast path that validates the same
way without building objects:

- the file is parsed with orjson; everything but the readings (top-level fields, probes,
  kernels, findings, the [end] counts) goes through `snapshot.snapshot_from_dict` itself;
- the readings' shape (keys, statuses, units) is checked by the full loader the first
  time it is seen; later files of the same shape only have their values checked (types,
  a value exactly where the status is ok, flat lists of scalars, no unknown fields);
  orjson refuses NaN and infinity as the loader does;
- anything else (TOML, another schema version, whatever the fast checks refuse) goes
  through `snapshot.load`, which migrates older versions and words the error.

Each node then becomes its readings' shape (interned: a fleet of one SKU has one or a
few), its configuration values (interned too: identical nodes share one tuple), an array
of its numeric values and its kernel results. Files are read by worker processes (one
per CPU) in chunks; the workers never import the analysis (Polars), so they start fast.
"""

from __future__ import annotations

import math
import os
import re
import statistics
from collections.abc import Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from multiprocessing import get_context
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from gpudiag.kernels.readings import device_prefix, metric_key
from gpudiag.model import SCHEMA_VERSION, KernelResult, ProbeStatus, Snapshot
from gpudiag.readingkind import is_configuration
from gpudiag.snapshot import SnapshotError, load, snapshot_from_dict

MAX_FILE_BYTES = 256 * 2**20
SNAPSHOT_SUFFIXES = (".json", ".toml")
READING_FIELDS = frozenset(("key", "value", "unit", "source", "status", "reason"))
_SCALARS = (bool, int, float, str)
_VALUE_TYPES = frozenset((type(None), bool, int, float, str, list))
_PEER = re.compile(r"^(to|bidir|latency)\.gpu(\d+)$")
_PEER_KEYS = {"to": "copy_gbs", "bidir": "copy_bidir_gbs", "latency": "copy_latency_us"}
PARALLEL_FROM = 64  # files; fewer are read in this process
CHUNK = 64


@dataclass(frozen=True)
class Layout:
    """The shape of a node's readings: which keys, with which status and unit. Nodes of
    one SKU share one. `numeric` and `config` index into `keys`."""

    keys: tuple[str, ...]
    statuses: tuple[str, ...]
    units: tuple[str, ...]
    numeric: tuple[int, ...]
    config: tuple[int, ...]

    def position(self) -> dict[str, int]:
        """key -> index."""
        return {key: i for i, key in enumerate(self.keys)}


@dataclass(frozen=True)
class KernelValue:
    """One kernel figure of a node as a reading-like key (gpu.3.kernel.stream.triad.fp64,
    topo.gpu.0.1.copy_gbs), with what explains it: the kernel's name and device."""

    key: str
    value: float
    unit: str
    name: str
    device: str


@dataclass
class NodeRun:
    """One snapshot of one node, in compact form."""

    path: str
    host: str
    created: str
    layout: int
    config: int
    numbers: np.ndarray
    kernel_values: tuple[KernelValue, ...]
    kernels: tuple[KernelResult, ...]
    findings: tuple[tuple[str, str, str], ...]  # rule id, severity, subject


@dataclass
class LoadedFleet:
    """Every snapshot read, with the layouts and configuration tuples they refer to,
    and the files that could not be read (path: reason)."""

    layouts: list[Layout] = field(default_factory=list)
    configs: list[tuple[Any, ...]] = field(default_factory=list)
    config_layout: list[int] = field(default_factory=list)
    runs: list[NodeRun] = field(default_factory=list)
    bad: list[str] = field(default_factory=list)


def snapshot_paths(paths: Iterable[str | Path]) -> tuple[list[Path], list[str]]:
    """The snapshot files named, folders expanded to the *.json and *.toml files below
    them (sorted); and the paths that are neither (as 'path: reason')."""
    found: list[Path] = []
    bad: list[str] = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            found.extend(
                sorted(
                    p
                    for p in path.rglob("*")
                    if p.suffix.lower() in SNAPSHOT_SUFFIXES and p.is_file()
                )
            )
        elif path.is_file():
            found.append(path)
        elif path.exists():
            bad.append(f"{path}: not a regular file")
        else:
            bad.append(f"{path}: no such file or directory")
    return found, bad


# ------------------------------------------------------------------ one file


def _hashable(value: Any) -> Any:
    return tuple(value) if type(value) is list else value


class _Reader:
    """Reads files into NodeRuns; remembers the layouts it has validated and interns
    layouts and configuration tuples (per process)."""

    def __init__(self) -> None:
        self.validated: dict[tuple[Any, ...], int] = {}
        self.layouts: list[Layout] = []
        self.none_masks: list[tuple[bool, ...]] = []
        self.configs: dict[tuple[int, tuple[Any, ...]], int] = {}

    def read(self, path: Path) -> NodeRun:
        """One snapshot file, or SnapshotError."""
        name = str(path)
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
        if raw[:1] == b"{" or raw.lstrip()[:1] == b"{":
            try:
                data = orjson.loads(raw)
            except orjson.JSONDecodeError:
                data = None
            if isinstance(data, dict) and data.get("schema_version") == SCHEMA_VERSION:
                run = self._fast(name, data)
                if run is not None:
                    return run
        return self._from_snapshot(name, load(path))

    def _fast(self, name: str, data: dict[str, Any]) -> NodeRun | None:
        """The fast path; None where it cannot vouch for the file (the loader decides)."""
        try:
            probes = data["probes"]
            readings = [r for p in probes for r in p["readings"]]
            keys = tuple([r["key"] for r in readings])
            statuses = tuple([r["status"] for r in readings])
            units = tuple([r.get("unit", "") for r in readings])
            values = [r.get("value") for r in readings]
            end = data["end"]
            rest = {k: v for k, v in data.items() if k != "probes"}
            rest["probes"] = [{k: v for k, v in p.items() if k != "readings"} for p in probes]
            rest["end"] = {**end, "readings": 0}
            declared = end["readings"]
        except (KeyError, TypeError, AttributeError):
            return None
        if type(declared) is not int or declared != len(readings) or len(set(keys)) != len(keys):
            return None  # a key twice: the loader keeps the last, as readings_by_key
        signature = (keys, statuses, units)
        layout_id = self.validated.get(signature)
        if layout_id is None:
            try:
                snapshot_from_dict(data)  # the loader's own checks, once per shape
            except ValueError:
                return None
            layout_id = self._layout(keys, statuses, units, values)
            self.validated[signature] = layout_id
        elif not self._values_ok(readings, values, layout_id):
            return None
        try:
            head = snapshot_from_dict(rest)
        except ValueError:
            return None
        return self._run(name, head, layout_id, values)

    def _values_ok(self, readings: list[dict[str, Any]], values: list[Any], layout: int) -> bool:
        if not set().union(*readings) <= READING_FIELDS:
            return False
        if not {type(v) for v in values} <= _VALUE_TYPES:
            return False
        if tuple([v is None for v in values]) != self.none_masks[layout]:
            return False
        for v in values:
            if type(v) is list and not all(type(x) in _SCALARS for x in v):
                return False
        texts = {type(r.get("source", "")) for r in readings}
        texts |= {type(r.get("reason", "")) for r in readings}
        return texts <= {str}

    def _layout(
        self,
        keys: tuple[str, ...],
        statuses: tuple[str, ...],
        units: tuple[str, ...],
        values: Sequence[Any],
    ) -> int:
        self.layouts.append(
            Layout(
                keys,
                statuses,
                units,
                tuple(i for i, v in enumerate(values) if type(v) in (int, float)),
                tuple(i for i, k in enumerate(keys) if is_configuration(k)),
            )
        )
        self.none_masks.append(tuple(v is None for v in values))
        return len(self.layouts) - 1

    def _from_snapshot(self, name: str, snapshot: Snapshot) -> NodeRun:
        """The slow path: a snapshot the loader built (TOML, older versions, ...)."""
        readings = list(snapshot.readings_by_key.values())
        keys = tuple(r.key for r in readings)
        statuses = tuple(r.status.value for r in readings)
        units = tuple(r.unit for r in readings)
        values = [r.value for r in readings]
        signature = (keys, statuses, units)
        layout_id = self.validated.get(signature)
        if layout_id is None:
            layout_id = self._layout(keys, statuses, units, values)
            self.validated[signature] = layout_id
        return self._run(name, snapshot, layout_id, values)

    def _run(self, name: str, head: Snapshot, layout_id: int, values: list[Any]) -> NodeRun:
        layout = self.layouts[layout_id]
        config = tuple([_hashable(values[i]) for i in layout.config])
        config_id = self.configs.setdefault((layout_id, config), len(self.configs))
        numbers = np.array(
            [values[i] if type(values[i]) in (int, float) else math.nan for i in layout.numeric],
            dtype=np.float64,
        )
        return NodeRun(
            path=name,
            host=head.host,
            created=head.created,
            layout=layout_id,
            config=config_id,
            numbers=numbers,
            kernel_values=kernel_values(head.kernels),
            kernels=head.kernels,
            findings=tuple((f.rule_id, f.severity.value, f.subject) for f in head.findings),
        )


def kernel_values(kernels: Iterable[KernelResult]) -> tuple[KernelValue, ...]:
    """Each measured kernel result's median under the key its derived reading has
    (kernels/readings.py): gpu.N.kernel.stream.triad.fp64, topo.gpu.I.J.copy_gbs, ..."""
    out = []
    for result in kernels:
        prefix = device_prefix(result.device)
        if prefix is None or result.status is not ProbeStatus.OK or not result.samples:
            continue
        peer = _PEER.match(result.metric) if result.kernel == "peer" else None
        if peer and prefix.startswith("gpu."):
            key = f"topo.{prefix}{peer.group(2)}.{_PEER_KEYS[peer.group(1)]}"
        else:
            key = f"{prefix}kernel.{metric_key(result)}"
        median = result.stats.median if result.stats else statistics.median(result.samples)
        name = f"{result.kernel}.{result.metric}"
        out.append(KernelValue(key, float(median), result.unit, name, result.device))
    return tuple(out)


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
    seen_layouts, seen_configs = len(reader.layouts), len(reader.configs)
    runs, bad = [], []
    for path in paths:
        try:
            runs.append(reader.read(path))
        except SnapshotError as exc:
            bad.append(str(exc))
        except (OSError, ValueError, RecursionError, MemoryError) as exc:
            bad.append(f"{path}: {type(exc).__name__}: {exc}")
    configs = sorted(reader.configs.items(), key=lambda item: item[1])
    return _Chunk(
        reader.layouts[seen_layouts:],
        [c for c, _ in configs[seen_configs:]],
        runs,
        bad,
    )


def load_fleet(paths: Iterable[str | Path], workers: int | None = None) -> LoadedFleet:
    """Read every snapshot below `paths`; unreadable ones are listed in `bad`, never fatal.
    `workers`: processes to read with (default: one per CPU; 1 reads in this process)."""
    files, bad = snapshot_paths(paths)
    fleet = LoadedFleet(bad=bad)
    if workers is None:
        workers = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 1
    layout_ids: dict[tuple[Any, ...], int] = {}
    config_ids: dict[tuple[int, tuple[Any, ...]], int] = {}

    def merge(chunk: _Chunk, layout_map: list[int], config_map: list[int]) -> None:
        for layout in chunk.layouts:
            signature = (layout.keys, layout.statuses, layout.units)
            if signature not in layout_ids:
                layout_ids[signature] = len(fleet.layouts)
                fleet.layouts.append(layout)
            layout_map.append(layout_ids[signature])
        for local_layout, config in chunk.configs:
            key = (layout_map[local_layout], config)
            if key not in config_ids:
                config_ids[key] = len(fleet.configs)
                fleet.configs.append(config)
                fleet.config_layout.append(key[0])
            config_map.append(config_ids[key])
        for run in chunk.runs:
            run.layout = layout_map[run.layout]
            run.config = config_map[run.config]
            fleet.runs.append(run)
        fleet.bad.extend(chunk.bad)

    chunks = [files[i : i + CHUNK] for i in range(0, len(files), CHUNK)]
    if workers <= 1 or len(files) < PARALLEL_FROM:
        global _WORKER_READER
        _WORKER_READER = None
        layout_map: list[int] = []
        config_map: list[int] = []
        for chunk_paths in chunks:
            merge(_read_chunk(chunk_paths), layout_map, config_map)
        _WORKER_READER = None
        return fleet
    # Each worker numbers layouts and configurations in its own reader, so results are
    # merged per worker: a chunk is tagged with the worker's pid.
    maps: dict[int, tuple[list[int], list[int]]] = {}
    context = get_context("spawn")  # never fork a process that may hold Polars' threads
    with ProcessPoolExecutor(workers, mp_context=context) as pool:
        for pid, chunk in pool.map(_read_chunk_tagged, chunks):
            layout_map, config_map = maps.setdefault(pid, ([], []))
            merge(chunk, layout_map, config_map)
    return fleet


def _read_chunk_tagged(paths: list[Path]) -> tuple[int, _Chunk]:
    return os.getpid(), _read_chunk(paths)
