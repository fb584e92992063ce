"""A loaded fleet in a Parquet file: what `gpudiag fleet --parquet FILE` writes, and what
`gpudiag fleet FILE.parquet` reads back.

The file's rows are the fleet's long numeric table of each node's latest snapshot (node,
model, config, reading, device, unit, value), which pandas, DuckDB or a dashboard read
directly, plus `slot`: where a reading's value sits in its node's numbers (null for a
kernel figure, which is derived from the kernel results), `latest` (true) and `run` (the
snapshot's index in the entry). An older snapshot's numbers are rows too (`latest`
false: node, reading, unit, value, slot and run; no model, configuration or device).
What the table cannot hold (the readings' layouts, each configuration's values, every
snapshot's host, time, path, kernel results and findings) is msgspec JSON,
zlib-compressed and base64-encoded, in the file's key-value metadata under
`gpudiag.fleet`. Reading both back gives the LoadedFleet the snapshots gave, so the
report is the same. A file of the first format (FORMAT 1: the older snapshots' numbers
inside the entry, which Arrow's Thrift limit of 100 MB refuses from about 55,000 nodes)
still reads.

Every string of the entry is printable (`inputs.json_may_hold_controls` on the inflated
entry, then `inputs.printable_data` where it may hold a control character or escape).
A Parquet file that Polars cannot read, or one without (or with a damaged) `gpudiag.fleet`
entry, is a bad input like any other: SnapshotError, named and skipped by the caller.
"""

from __future__ import annotations

import base64
import binascii
import math
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Union

import msgspec
import numpy as np

from gpudiag import inputs
from gpudiag.fleet.records import (
    Layout,
    LoadedFleet,
    NodeRun,
    ParsedKernel,
    ParsedStats,
    Scalar,
    kernel_values,
    no_gc,
)
from gpudiag.inputs import json_may_hold_controls, printable_data
from gpudiag.model import KernelResult
from gpudiag.snapshot import SnapshotError

if TYPE_CHECKING:
    from gpudiag.fleet.analysis import FleetReport

METADATA_KEY = "gpudiag.fleet"
FORMAT = 2  # 1: older snapshots' numbers in the entry; 2: as rows of the table
MAX_PARQUET_BYTES = 4 * 2**30
# The fleet entry, inflated, is at most what a real fleet needs: a node's latest snapshot
# takes about 4-6 KB of it (its numbers are in the table), an older snapshot of 8 GPUs
# about 50 KB more (its numbers are not). Alike nodes compress very well (10,000 nodes of
# fleet_scale's fleet: 57 MB from 0.3 MB, 180 times), so its compressed size says nothing:
# the entry may inflate to 1 MiB for each node of the file's table (16 MiB at least), and
# never past the input limit (--max-input, 256 MiB by default), the bound every other
# input of gpudiag has. A zlib bomb of 2 GiB in a 2 MB file of one node is refused after
# 16 MiB, not after many seconds and gigabytes.
METADATA_PER_NODE = 2**20
METADATA_MIN_BYTES = 16 * 2**20

_ConfigValue = Union[Scalar, list[Scalar], None]  # noqa: UP007 - None: not read


class _PqLayout(msgspec.Struct, forbid_unknown_fields=True):
    keys: list[str]
    statuses: list[str]
    units: list[str]
    numeric: list[int]
    config: list[int]


class _PqRun(msgspec.Struct, forbid_unknown_fields=True):
    path: str
    host: str
    created: str
    layout: int
    config: int
    latest: bool
    kernels: list[ParsedKernel]
    findings: list[tuple[str, str, str]]
    numbers: Union[list[Union[float, None]], None] = None  # noqa: UP007 - older runs only


class _PqFleet(msgspec.Struct, forbid_unknown_fields=True):
    format: Literal[1, 2]
    layouts: list[_PqLayout]
    configs: list[list[_ConfigValue]]
    config_layout: list[int]
    runs: list[_PqRun]


def _as_parsed_kernel(k: Any) -> ParsedKernel:
    """A kernel result in the fast path's parsed form (what the metadata stores)."""
    if isinstance(k, ParsedKernel):
        return k
    assert isinstance(k, KernelResult)
    stats = msgspec.UNSET
    if k.stats is not None:
        s = k.stats
        stats = ParsedStats(
            s.count, s.median, s.minimum, s.maximum, s.mean, s.cv, s.ci95_low, s.ci95_high
        )
    return ParsedKernel(
        kernel=k.kernel,
        device=k.device,
        metric=k.metric,
        status=k.status.value,
        unit=k.unit,
        error=k.error,
        samples=list(k.samples),
        params=dict(k.params),
        stats=stats,
    )


def _config_value(value: Any) -> Any:
    if value is msgspec.UNSET:
        return None
    return list(value) if type(value) is tuple else value


def _loaded_value(value: Any) -> Any:
    if value is None:
        return msgspec.UNSET
    return tuple(value) if type(value) is list else value


def latest_runs(loaded: LoadedFleet) -> dict[str, NodeRun]:
    """host -> its latest run, chosen as the report chooses it (by time, then path; of
    equals, the last)."""
    latest: dict[str, NodeRun] = {}
    for run in loaded.runs:
        best = latest.get(run.host)
        if best is None or (run.created, run.path) >= (best.created, best.path):
            latest[run.host] = run
    return latest


def encode_fleet(loaded: LoadedFleet) -> str:
    """The metadata entry: everything of `loaded` but the runs' numbers (rows of the
    table) and the files that could not be read."""
    latest = {id(run) for run in latest_runs(loaded).values()}
    document = _PqFleet(
        format=FORMAT,
        layouts=[
            _PqLayout(
                list(la.keys), list(la.statuses), list(la.units), list(la.numeric), list(la.config)
            )
            for la in loaded.layouts
        ],
        configs=[[_config_value(v) for v in config] for config in loaded.configs],
        config_layout=list(loaded.config_layout),
        runs=[
            _PqRun(
                path=run.path,
                host=run.host,
                created=run.created,
                layout=run.layout,
                config=run.config,
                latest=id(run) in latest,
                kernels=[_as_parsed_kernel(k) for k in run.kernels],
                findings=list(run.findings),
                numbers=None,  # FORMAT 2: the table's rows
            )
            for run in loaded.runs
        ],
    )
    return base64.b64encode(zlib.compress(msgspec.json.encode(document), 6)).decode("ascii")


def metadata_cap(nodes: int) -> int:
    """The most the fleet entry of a file whose table holds `nodes` nodes may inflate to."""
    return min(inputs.limit(), max(METADATA_MIN_BYTES, METADATA_PER_NODE * nodes))


def _decode(text: str, count_nodes: Callable[[], int]) -> _PqFleet:
    """The fleet entry; `count_nodes` (the table's nodes, a pass over every row) is asked
    only of an entry that inflates past the least cap."""
    raw = base64.b64decode(text.encode("ascii"), validate=True)
    cap = min(inputs.limit(), METADATA_MIN_BYTES)
    inflater = zlib.decompressobj()
    data = inflater.decompress(raw, cap)
    if inflater.unconsumed_tail:
        nodes = count_nodes()
        cap = metadata_cap(nodes)
        if cap > len(data):  # (a max_length of 0 would be no limit at all)
            data += inflater.decompress(inflater.unconsumed_tail, cap - len(data))
    if inflater.unconsumed_tail:
        if cap == inputs.limit():
            why = "the input limit (--max-input raises it)"
        else:
            why = f"more than a fleet of {nodes} nodes needs (1 MiB a node, 16 MiB at least)"
        raise ValueError(f"its fleet entry inflates past {inputs.size_text(cap)}, {why}")
    if json_may_hold_controls(data):  # the guarded path: every string printable
        return msgspec.convert(printable_data(msgspec.json.decode(data)), _PqFleet)
    return msgspec.json.decode(data, type=_PqFleet)


def _check(document: _PqFleet) -> None:
    """What the types cannot say: indices in range, lengths that agree."""
    layouts = document.layouts
    for la in layouts:
        width = len(la.keys)
        if not len(la.statuses) == len(la.units) == width:
            raise ValueError("a layout's keys, statuses and units differ in length")
        if any(not 0 <= p < width for p in (*la.numeric, *la.config)):
            raise ValueError("a layout position out of range")
    if len(document.config_layout) != len(document.configs):
        raise ValueError("configurations and their layouts differ in number")
    inputs.check_numbers(document.configs, "configs")  # the bound of every loader
    for run in document.runs:
        inputs.check_numbers(run.numbers or [], "an older snapshot's numbers")
        for kernel in run.kernels:
            inputs.check_numbers(kernel.samples, "a kernel result's samples")
    for config, layout in zip(document.configs, document.config_layout, strict=True):
        if not 0 <= layout < len(layouts) or len(config) != len(layouts[layout].config):
            raise ValueError("a configuration does not fit its layout")
    hosts: set[str] = set()
    for run in document.runs:
        if inputs.host_name(run.host) != run.host:  # as every loader keeps a host name
            raise ValueError(f"a host name longer than {inputs.HOST_NAME_MAX} characters")
        if not 0 <= run.config < len(document.configs):
            raise ValueError("a snapshot's configuration out of range")
        if document.config_layout[run.config] != run.layout:
            raise ValueError("a snapshot's layout is not its configuration's")
        if run.latest:
            if run.host in hosts or run.numbers is not None:
                raise ValueError("a node's latest snapshot twice, or with its numbers")
            hosts.add(run.host)
        elif document.format == 1 and (
            run.numbers is None or len(run.numbers) != len(layouts[run.layout].numeric)
        ):
            raise ValueError("an older snapshot without its numbers")
        elif document.format > 1 and run.numbers is not None:
            raise ValueError("an older snapshot's numbers in the entry, not the table")


def _reason(exc: BaseException) -> str:
    """An exception's message, on one line and bounded."""
    lines = str(exc).strip().splitlines()
    return lines[0][:200] if lines else type(exc).__name__


def read_parquet_fleet(path: Path) -> LoadedFleet:
    """The fleet a `gpudiag fleet --parquet` file holds, or SnapshotError."""
    with no_gc():  # the entry's objects make no cycles (records.no_gc)
        return _read_parquet_fleet(path)


def _read_parquet_fleet(path: Path) -> LoadedFleet:
    import polars as pl

    name = str(path)
    try:
        size = path.stat().st_size
    except OSError as exc:
        raise SnapshotError(name, f"cannot read: {exc.strerror}") from None
    if size > MAX_PARQUET_BYTES:
        raise SnapshotError(name, f"{size} bytes: larger than a fleet file can be")
    try:
        metadata = pl.read_parquet_metadata(path)
        entry = metadata.get(METADATA_KEY)
        if entry is None:
            raise SnapshotError(name, "a Parquet file not written by gpudiag fleet --parquet")
        # the rows of the latest runs' numbers only (a kernel figure's slot is null): the
        # others are never read into memory
        scan = pl.scan_parquet(path)
        history = "latest" in scan.collect_schema().names()  # FORMAT 2
        rows = scan.filter(pl.col("slot").is_not_null())
        if history:
            older = rows.filter(~pl.col("latest")).select("run", "slot", "value").collect()
            rows = rows.filter(pl.col("latest"))
        rows = rows.select("node", "slot", "value").collect()
    except SnapshotError:
        raise
    except Exception as exc:  # a damaged file may fail anywhere in the reader
        raise SnapshotError(name, f"not a readable Parquet file: {_reason(exc)}") from None
    try:
        document = _decode(entry, rows["node"].n_unique)
        _check(document)
    except (ValueError, RecursionError, binascii.Error, zlib.error, msgspec.DecodeError) as exc:
        raise SnapshotError(name, f"damaged gpudiag fleet entry: {exc}") from None
    if (document.format > 1) != history:
        raise SnapshotError(name, "its table does not fit its fleet entry: not its format")
    older_numbers = _older_numbers(name, document, older) if history else {}
    layouts = [
        Layout(
            tuple(la.keys), tuple(la.statuses), tuple(la.units), tuple(la.numeric), tuple(la.config)
        )
        for la in document.layouts
    ]
    # the latest runs' numbers, from the table: each row's slot in its node's numbers
    latest = [i for i, run in enumerate(document.runs) if run.latest]
    hosts = [document.runs[i].host for i in latest]
    widths = np.asarray(
        [len(layouts[document.runs[i].layout].numeric) for i in latest], dtype=np.int64
    )
    offsets = np.concatenate(([0], np.cumsum(widths)))
    flat = np.full(int(offsets[-1]), math.nan)
    try:
        # a node's number in `latest`: its name as an Enum of the hosts (a node the entry
        # does not hold fails the cast), half the time of a dictionary's replace_strict
        node = rows["node"].cast(pl.Enum(hosts)).to_physical().to_numpy().astype(np.int64)
        slot = rows["slot"].cast(pl.Int64).to_numpy()
        value = rows["value"].cast(pl.Float64).to_numpy()
        del rows
    except (pl.exceptions.PolarsError, ValueError) as exc:
        raise SnapshotError(
            name, f"its table does not fit its fleet entry: {_reason(exc)}"
        ) from None
    if len(node) and (slot.min() < 0 or np.any(slot >= widths[node])):
        raise SnapshotError(name, "its table does not fit its fleet entry: a slot out of range")
    if np.fmax.reduce(value, initial=0.0) > inputs.MAX_NUMBER or (
        np.fmin.reduce(value, initial=0.0) < -inputs.MAX_NUMBER
    ):
        raise SnapshotError(name, f"a value past {inputs.MAX_NUMBER:.2g}, which no reading holds")
    flat[offsets[node] + slot] = value
    del node, slot, value  # (the rows' arrays: a fleet of 10,000 nodes holds 13 million)
    runs = []
    interned: dict[tuple[Any, ...], tuple[Any, ...]] = {}
    k = 0
    for run in document.runs:
        if run.latest:
            numbers = flat[offsets[k] : offsets[k + 1]]  # a view: the numbers are only read
            k += 1
        elif document.format > 1:
            numbers = older_numbers[len(runs)]
        else:
            numbers = np.asarray(
                [math.nan if v is None else v for v in run.numbers or ()], dtype=np.float64
            )
        kernels = tuple(run.kernels)
        findings = tuple(run.findings)  # tuples already; alike nodes share theirs
        runs.append(
            NodeRun(
                path=run.path,
                host=run.host,
                created=run.created,
                layout=run.layout,
                config=run.config,
                numbers=numbers,
                kernel_values=kernel_values(kernels),
                kernels=kernels,
                findings=interned.setdefault(findings, findings),
            )
        )
    return LoadedFleet(
        layouts=layouts,
        configs=[tuple(_loaded_value(v) for v in c) for c in document.configs],
        config_layout=list(document.config_layout),
        runs=runs,
    )


def _older_numbers(name: str, document: _PqFleet, older: Any) -> dict[int, np.ndarray]:
    """FORMAT 2: each older run's numbers from its rows (run, slot, value); a run or slot
    out of range, or a run without all its numbers, is a table that does not fit."""
    widths = {
        i: len(document.layouts[run.layout].numeric)
        for i, run in enumerate(document.runs)
        if not run.latest
    }
    import polars as pl

    out = {i: np.full(width, math.nan) for i, width in widths.items()}
    seen = {i: 0 for i in widths}
    try:
        runs = older["run"].cast(pl.Int64).to_numpy()
        slots = older["slot"].cast(pl.Int64).to_numpy()
        values = older["value"].cast(pl.Float64).fill_null(math.nan).to_numpy()
    except Exception as exc:  # a column of another type
        why = f"its table does not fit its fleet entry: {_reason(exc)}"
        raise SnapshotError(name, why) from None
    if len(values) and np.nanmax(np.abs(values), initial=0.0) > inputs.MAX_NUMBER:
        raise SnapshotError(name, f"a value past {inputs.MAX_NUMBER:.2g}, which no reading holds")
    order = np.argsort(runs, kind="stable")
    runs, slots, values = runs[order], slots[order], values[order]
    bounds = np.flatnonzero(np.diff(runs)) + 1
    for chunk in np.split(np.arange(len(runs)), bounds):
        if not len(chunk):
            continue
        run = int(runs[chunk[0]])
        target = out.get(run)
        if target is None:
            why = "its table does not fit its fleet entry: an older snapshot out of range"
            raise SnapshotError(name, why)
        if slots[chunk].min() < 0 or slots[chunk].max() >= len(target):
            why = "its table does not fit its fleet entry: a slot out of range"
            raise SnapshotError(name, why)
        target[slots[chunk]] = values[chunk]
        seen[run] += len(chunk)
    if any(seen[i] != widths[i] for i in widths):
        raise SnapshotError(
            name, "its table does not fit its fleet entry: an older snapshot without its numbers"
        )
    return out


def write_parquet(report: FleetReport, path: str, loaded: LoadedFleet) -> None:
    """The numeric table (node, model, config group, reading, device, unit, value, slot)
    as Parquet, with the rest of the loaded fleet in its metadata so that `gpudiag fleet
    FILE` reads it back (read_parquet_fleet); written to a temporary file and renamed
    (`atomic.atomic_target`: an existing file keeps its mode, a new one 0666 & ~umask).
    Each name column is its names gathered by the report's id column: the same file as
    joining the names on (before: 2.1 GB peak and 4.6 s at 10,000 8-GPU nodes; now 1.9 GB
    and 3.4 s), without the joins' copies of the whole table."""
    import os

    import polars as pl

    from gpudiag.atomic import atomic_target
    from gpudiag.fleet.analysis import NO_SLOT

    columns = report.columns
    names = report.names
    assert columns is not None and names is not None
    with atomic_target(os.path.abspath(path), suffix=".parquet.tmp") as temporary:
        index = {id(run): i for i, run in enumerate(loaded.runs)}
        latest = {host: index[id(run)] for host, run in latest_runs(loaded).items()}
        node = columns.node_id

        def named(items: list[Any], ids: np.ndarray, dtype: Any = pl.String) -> pl.Series:
            return pl.Series(items, dtype=dtype).gather(ids)

        units = [names.units.get(i) for i in range(len(names.readings.items))]
        table = pl.DataFrame(
            {
                "node": named(report.node_names, node),
                "model": named(names.models.items, columns.model_of[node]),
                "config": columns.config_of[node],
                "reading": named(names.readings.items, columns.reading_id),
                "device": named(names.devices.items, columns.device_id),
                "unit": named(units, columns.reading_id),
                "value": columns.value,
                "slot": columns.slot,
                "run": named([latest[h] for h in report.node_names], node, pl.UInt32),
            },
        ).with_columns(
            pl.when(pl.col("slot") != NO_SLOT).then(pl.col("slot")).alias("slot"),
            pl.lit(True).alias("latest"),
        )
        older = _older_rows(loaded, index, set(latest.values()), table.schema)
        try:
            pl.concat([table, older]).write_parquet(
                temporary, metadata={METADATA_KEY: encode_fleet(loaded)}
            )
        except pl.exceptions.PolarsError as exc:
            raise _as_os_error(exc, path) from None


def _older_rows(loaded: LoadedFleet, index: dict[int, int], latest: set[int], schema: Any) -> Any:
    """The rows of the runs older than their node's latest: each number with its node,
    reading, unit, slot and run (no model, configuration or device: the report does not
    group them), `latest` false."""
    import polars as pl

    parts = []
    for run in loaded.runs:
        at = index[id(run)]
        if at in latest:
            continue
        layout = loaded.layouts[run.layout]
        width = len(layout.numeric)
        parts.append(
            pl.DataFrame(
                {
                    "node": [run.host] * width,
                    "reading": [layout.keys[p] for p in layout.numeric],
                    "unit": [layout.units[p] for p in layout.numeric],
                    "value": pl.Series(run.numbers, dtype=pl.Float64).fill_nan(None),
                    "slot": range(width),
                    "run": [at] * width,
                },
                schema_overrides={"slot": schema["slot"], "run": pl.UInt32},
            )
        )
    if not parts:
        return pl.DataFrame(schema=schema)
    return (
        pl.concat(parts)
        .with_columns(
            *(pl.lit(None, schema[c]).alias(c) for c in ("model", "config", "device")),
            pl.lit(False).alias("latest"),
        )
        .select([pl.col(c).cast(t) for c, t in schema.items()])
    )


def _as_os_error(exc: Exception, path: str) -> OSError:
    """A Polars write error as the OSError it reports ('... underlying IO error: No space
    left on device (os error 28)'), which the caller words as any failed write; one line
    of Polars' own text where it names no system error."""
    import os
    import re

    found = re.search(r"\(os error (\d{1,4})\)", str(exc))
    if found:
        code = int(found.group(1))
        return OSError(code, os.strerror(code), path)
    return OSError(_reason(exc))
