"""A fleet as a Hive-partitioned Parquet dataset: what `gpudiag fleet ... --dataset DIR`
appends to, and what `gpudiag fleet DIR` reads back (docs/dataset.md is its reference).

    DIR/_gpudiag_dataset                       {"format": ..., "schema_version": 1}
    DIR/<table>/date=YYYY-MM-DD/model=<GPU model>/part-<batch>.parquet

Four long tables, one row per snapshot (runs), per reading (readings), per kernel result
(kernels) and per finding (findings), each with the snapshot's time, run id and node;
`date` (the snapshot's UTC day) and `model` (the fleet's node type: GPU model and count)
are the partitions, in the folder names only. Each append writes new files (one per
table and partition, written to a temporary name and renamed) and never rewrites an
earlier one; a snapshot already in the dataset (its run id) is not appended again.

Reading back (fleet/dataset_read.py) makes the LoadedFleet the snapshots made
(fleet/records.py), so the report is the same; Polars' lazy scan reads only the columns
it needs, and `node_history` only the partitions and rows of one node. The folder may be
a URL (fleet/store.py). An append writes a file per table, partition and 1,000 runs.
"""

from __future__ import annotations

import json
import math
import os
import uuid
from datetime import datetime, timezone
from pathlib import Path
from typing import Any
from urllib.parse import quote

import msgspec
import numpy as np

from gpudiag.fleet.records import (
    LoadedFleet,
    NodeRun,
    ParsedKernel,
    run_id,
)
from gpudiag.fleet.store import Store
from gpudiag.snapshot import SnapshotError

MARKER = "_gpudiag_dataset"
FORMAT = "gpudiag fleet dataset"
SCHEMA_VERSION = 1
TABLES = ("runs", "readings", "kernels", "findings")
BATCH_RUNS = 1000  # runs per file of an append (bounds its memory)
STATS = ("count", "median", "minimum", "maximum", "mean", "cv", "ci95_low", "ci95_high")
_CONTROL = r"[\x00-\x1f\x7f-\x9f]"


def is_dataset(path: str | Path) -> bool:
    """A folder that `--dataset` wrote (its marker file is there), local or a URL."""
    try:
        store = Store(str(path))
        return store.is_file(store.join(MARKER))
    except OSError:
        return False


def _schemas() -> dict[str, dict[str, Any]]:
    import polars as pl

    head = {"time": pl.Datetime("us", "UTC"), "run_id": pl.String, "node": pl.String}
    return {
        "runs": {**head, "created": pl.String, "path": pl.String},
        "readings": {
            **head,
            "position": pl.UInt32,
            "reading": pl.String,
            "template": pl.String,
            "device": pl.String,
            "kind": pl.String,
            "unit": pl.String,
            "status": pl.String,
            "value": pl.Float64,
            "text": pl.String,
            "value_type": pl.String,
            "slot": pl.Int32,
            "configuration": pl.Boolean,
        },
        "kernels": {
            **head,
            "position": pl.UInt32,
            "kernel": pl.String,
            "device": pl.String,
            "metric": pl.String,
            "reading": pl.String,
            "template": pl.String,
            "status": pl.String,
            "unit": pl.String,
            "error": pl.String,
            "samples": pl.List(pl.Float64),
            **{name: pl.Float64 for name in STATS},
            "params": pl.String,
        },
        "findings": {
            **head,
            "position": pl.UInt32,
            "rule": pl.String,
            "severity": pl.String,
            "subject": pl.String,
        },
    }


def _time(created: str) -> datetime:
    return datetime.fromisoformat(created.replace("Z", "+00:00")).astimezone(timezone.utc)


def _typed(value: Any) -> tuple[float | None, str | None, str]:
    """A configuration value as (value, text, value_type)."""
    if value is msgspec.UNSET or value is None:
        return None, None, "none"
    if type(value) is bool:
        return float(value), None, "bool"
    if type(value) is int:
        return float(value), str(value), "int"
    if type(value) is float:
        return value, None, "float"
    if type(value) in (tuple, list):
        return None, json.dumps(list(value)), "list"
    return None, str(value), "str"


def _rows(loaded: LoadedFleet, runs: list[tuple[NodeRun, str, datetime]]) -> dict[str, Any]:
    """The four tables for these runs (run, its id, its time), as Polars frames. Each
    table's time, run id and node are one entry per run, repeated in Polars (gather);
    what alike nodes share (findings, a kernel's key and parameters) is built once."""
    import polars as pl

    schemas = _schemas()
    times = pl.Series("time", [r[2] for r in runs], schemas["runs"]["time"])
    ids = pl.Series("run_id", [r[1] for r in runs], pl.String)
    nodes = pl.Series("node", [r[0].host for r in runs], pl.String)

    def head(counts: list[int]) -> list[Any]:
        each = np.repeat(np.arange(len(runs), dtype=np.uint32), counts)
        return [times.gather(each), ids.gather(each), nodes.gather(each)]

    frames = {
        "runs": pl.DataFrame(
            {
                "time": times,
                "run_id": ids,
                "node": nodes,
                "created": [r[0].created for r in runs],
                "path": [r[0].path for r in runs],
            },
            schema=schemas["runs"],
        ),
        "kernels": _kernels_frame(runs, schemas["kernels"], head),
        "findings": _findings_frame(runs, schemas["findings"], head),
        "readings": _readings_frame(loaded, runs, schemas["readings"]),
    }
    return frames


def _findings_frame(runs: list[tuple[NodeRun, str, datetime]], schema: Any, head: Any) -> Any:
    """The findings table: alike nodes share one tuple of findings (the loaders intern
    them), whose rows are made once and gathered for each run that has it."""
    import polars as pl

    first_row: dict[int, int] = {}  # id of a findings tuple -> its first row in `catalogue`
    catalogue: list[tuple[str, str, str]] = []
    starts, counts = [], []
    for run, _, _ in runs:
        found = run.findings
        at = first_row.get(id(found))
        if at is None:
            at = first_row[id(found)] = len(catalogue)
            catalogue.extend(found)
        starts.append(at)
        counts.append(len(found))
    total = sum(counts)
    # row j of run i is catalogue[starts[i] + j]: each run's start repeated, plus j
    offsets = np.repeat(np.cumsum([0, *counts[:-1]], dtype=np.int64), counts)
    rows = np.repeat(np.asarray(starts, dtype=np.int64), counts)
    within = np.arange(total, dtype=np.int64) - offsets
    columns = list(zip(*catalogue, strict=True)) if catalogue else [(), (), ()]
    table = pl.DataFrame(
        {"rule": columns[0], "severity": columns[1], "subject": columns[2]},
        schema={c: pl.String for c in ("rule", "severity", "subject")},
    )
    return pl.DataFrame(
        [
            *head(counts),
            pl.Series("position", within, pl.UInt32),
            *(table[rows + within] if total else table).get_columns(),
        ]
    ).select(list(schema))


def _kernels_frame(runs: list[tuple[NodeRun, str, datetime]], schema: Any, head: Any) -> Any:
    """The kernels table: one row per kernel result, its samples one list."""
    import polars as pl

    from gpudiag.fleet.records import _kernel_key
    from gpudiag.fleet.table import template

    names = ("kernel", "device", "metric", "status", "unit", "error")
    columns: dict[str, list[Any]] = {n: [] for n in (*names, "reading", "template", "params")}
    stats_rows: list[Any] = []
    samples: list[list[float]] = []
    positions: list[int] = []
    counts = []
    templates: dict[str | None, str | None] = {None: None}
    params_text: dict[Any, str] = {}
    for run, _, _ in runs:
        counts.append(len(run.kernels))
        for position, result in enumerate(run.kernels):
            parsed = _parsed(result)
            positions.append(position)
            for name in names:
                columns[name].append(getattr(parsed, name))
            key = _kernel_key(parsed)[0]
            columns["reading"].append(key)
            if key not in templates:
                templates[key] = template(key)[0]  # type: ignore[arg-type]
            columns["template"].append(templates[key])
            samples.append(parsed.samples)
            stats_rows.append(parsed.stats)
            params = parsed.params
            try:
                memo: Any = tuple(sorted(params.items()))
                text = params_text.get(memo)
            except TypeError:  # a list among the values: not hashable, not remembered
                memo, text = None, None
            if text is None:
                text = json.dumps(params, sort_keys=True)
                if memo is not None and len(params_text) < 65536:
                    params_text[memo] = text
            columns["params"].append(text)
    stats = np.full((len(stats_rows), len(STATS)), np.nan)
    for i, value in enumerate(stats_rows):
        if value is not msgspec.UNSET:
            stats[i] = [getattr(value, n) for n in STATS]
    frame = pl.DataFrame(
        [
            *head(counts),
            pl.Series("position", positions, pl.UInt32),
            *(pl.Series(n, columns[n], pl.String) for n in columns),
            _sample_lists(samples),
            *(
                pl.Series(n, stats[:, i]).fill_nan(None).cast(schema[n])
                for i, n in enumerate(STATS)
            ),
        ]
    )
    return frame.select(list(schema))


def _sample_lists(samples: list[list[float]]) -> Any:
    """The samples column (List(Float64)): the lists of each length made in one NumPy
    matrix (a list of lists costs Polars a Python call per list), put back in order."""
    import polars as pl

    by_length: dict[int, list[int]] = {}
    for i, values in enumerate(samples):
        by_length.setdefault(len(values), []).append(i)
    parts, order = [], []
    for length, rows in by_length.items():
        if length:
            matrix = np.asarray([samples[i] for i in rows], dtype=np.float64)
            part = pl.Series("samples", matrix).cast(pl.List(pl.Float64))
        else:
            part = pl.Series("samples", [[]] * len(rows), pl.List(pl.Float64))
        parts.append(part)
        order.extend(rows)
    if not parts:
        return pl.Series("samples", [], pl.List(pl.Float64))
    inverse = np.empty(len(order), dtype=np.int64)
    inverse[np.asarray(order, dtype=np.int64)] = np.arange(len(order))
    return pl.concat(parts).gather(inverse)


def _readings_frame(
    loaded: LoadedFleet, runs: list[tuple[NodeRun, str, datetime]], schema: dict[str, Any]
) -> Any:
    """The readings table: per layout, its columns that do not change from node to node
    made once and repeated, the values of all its runs one matrix."""
    import polars as pl

    from gpudiag import shipped
    from gpudiag.fleet.table import template

    by_layout: dict[int, list[tuple[NodeRun, str, datetime]]] = {}
    for item in runs:
        by_layout.setdefault(item[0].layout, []).append(item)
    parts = []
    for layout_id, members in by_layout.items():
        layout = loaded.layouts[layout_id]
        n = len(layout.keys)
        slots = {p: i for i, p in enumerate(layout.numeric)}
        config_at = {p: i for i, p in enumerate(layout.config)}
        about = [(*template(key), shipped.kind_of(key).value) for key in layout.keys]
        static = pl.DataFrame(
            {
                "position": range(n),
                "reading": layout.keys,
                "template": [a[0] for a in about],
                "device": [a[1] for a in about],
                "kind": [a[2] for a in about],
                "unit": layout.units,
                "status": layout.statuses,
                "slot": [slots.get(p) for p in range(n)],
                "configuration": [p in config_at for p in range(n)],
            },
            schema={c: schema[c] for c in ("position", "reading", "template", "device", "kind")}
            | {c: schema[c] for c in ("unit", "status", "slot", "configuration")},
        )
        only_numeric = [p for p in layout.numeric if p not in config_at]
        positions = np.asarray(only_numeric, dtype=np.int64)
        from_slots = np.asarray([slots[p] for p in only_numeric], dtype=np.int64)
        # a configuration's row (its values, texts and kinds) made once; each run's texts
        # and kinds are its configuration's row, repeated as Polars chunks (no copy), and
        # its numbers its own; a measured reading's kind is float, or none where not read
        measured = np.zeros(n, dtype=bool)
        measured[positions] = True
        base_values: list[np.ndarray] = []
        base_rows: list[Any] = []
        values = np.empty((len(members), n))
        chosen = []
        bases: dict[tuple[int, Any], int] = {}
        for i, (run, _, _) in enumerate(members):
            # the volatile values that may explain a slow node (Layout.explain, the
            # throttle reasons) are written as a configuration's are, where the run has them
            kept = run.explain if len(run.explain) == len(layout.explain) else None
            at = bases.get((run.config, kept))
            if at is None:
                row_value = np.full(n, math.nan)
                row_text: list[str | None] = [None] * n
                row_kind = ["none"] * n
                config = loaded.configs[run.config]
                typed = [(p, _typed(config[c])) for p, c in config_at.items()]
                typed += zip(layout.explain, map(_typed, kept or ()), strict=False)
                for p, (value, text, kind) in typed:
                    row_value[p] = math.nan if value is None else value
                    row_text[p], row_kind[p] = text, kind
                at = bases[(run.config, kept)] = len(base_values)
                base_values.append(row_value)
                base_rows.append(
                    pl.DataFrame(
                        {"text": row_text, "_kind": row_kind, "_measured": measured},
                        schema={"text": pl.String, "_kind": pl.String, "_measured": pl.Boolean},
                    )
                )
            values[i] = base_values[at]
            values[i, positions] = run.numbers[from_slots]
            chosen.append(base_rows[at])
        k = len(members)
        each = np.repeat(np.arange(k, dtype=np.uint32), n)  # each run's row, n times
        part = pl.concat(
            [pl.concat([static] * k), pl.concat(chosen)], how="horizontal"
        ).with_columns(
            pl.Series("time", [m[2] for m in members], schema["time"]).gather(each),
            pl.Series("run_id", [m[1] for m in members], pl.String).gather(each),
            pl.Series("node", [m[0].host for m in members], pl.String).gather(each),
            pl.Series("value", values.ravel()).fill_nan(None),
        )
        part = part.with_columns(
            pl.when(~pl.col("_measured"))
            .then(pl.col("_kind"))
            .when(pl.col("value").is_null())
            .then(pl.lit("none"))
            .otherwise(pl.lit("float"))
            .alias("value_type")
        )
        parts.append(part.select(list(schema)))
    if not parts:
        return pl.DataFrame(schema=schema)
    return pl.concat(parts)


def _parsed(result: Any) -> ParsedKernel:
    from gpudiag.fleet.parquet import _as_parsed_kernel

    return _as_parsed_kernel(result)


def _existing_ids(store: Store) -> set[str]:
    if not store.files("runs"):
        return set()
    return set(store.scan("runs").select("run_id").collect()["run_id"].to_list())


def append_dataset(loaded: LoadedFleet, target: str) -> int:
    """Append every run of `loaded` not already in the dataset at `target` (a folder or
    a URL, fleet/store.py; made if missing); how many were appended. OSError when it
    cannot be written."""
    from gpudiag.fleet.table import Fleet

    store = Store(target)
    marker = store.join(MARKER)
    if problem := _target_problem(store):
        raise OSError(f"{target}: {problem}")
    store.makedirs(store.root)
    if not store.is_file(marker):
        text = json.dumps({"format": FORMAT, "schema_version": SCHEMA_VERSION}) + "\n"
        store.write(marker, text=text)
    else:
        _check_marker(store)
    known = _existing_ids(store)
    fleet = Fleet(loaded)
    parts: dict[tuple[str, str], list[tuple[NodeRun, str, datetime]]] = {}
    for run in loaded.runs:
        rid = run_id(run)
        if rid in known:
            continue
        known.add(rid)
        when = _time(run.created)
        key = (when.date().isoformat(), fleet.model(run.config))
        parts.setdefault(key, []).append((run, rid, when))
    batch = f"{datetime.now(timezone.utc):%Y%m%dT%H%M%S}-{uuid.uuid4().hex[:8]}"
    appended = 0
    for (day, model), runs in sorted(parts.items()):
        folders = {
            table: store.join(table, f"date={day}", f"model={quote(model, safe='')}")
            for table in TABLES
        }
        for folder in folders.values():
            store.makedirs(folder)
        # a file per table and BATCH_RUNS runs: the rows of a few thousand runs in memory
        # at once, whatever the fleet's size (10,000 nodes' readings are 23 million rows)
        for first in range(0, len(runs), BATCH_RUNS):
            frames = _rows(loaded, runs[first : first + BATCH_RUNS])
            name = (
                f"part-{batch}.parquet"
                if len(runs) <= BATCH_RUNS
                else (f"part-{batch}-{first // BATCH_RUNS:05d}.parquet")
            )
            for table in TABLES:
                store.write(f"{folders[table]}/{name}", frames[table])
        appended += len(runs)
    return appended


def _check_marker(store: Store) -> None:
    try:
        marker = json.loads(store.read_text(store.join(MARKER)))
        version = marker["schema_version"]
    except (OSError, ValueError, KeyError, TypeError):
        raise SnapshotError(store.target, f"a damaged dataset marker ({MARKER})") from None
    if marker.get("format") != FORMAT or version != SCHEMA_VERSION:
        raise SnapshotError(store.target, f"dataset schema {version!r}: this gpudiag reads 1")


def scan(root: str | Path, table: str) -> Any:
    """The Polars lazy frame of one table (date and model from the folder names), at a
    local folder or a URL (fleet/store.py)."""
    return Store(str(root)).scan(table)


def _target_problem(store: Store) -> str | None:
    root = store.root
    if store.exists(root) and not store.is_dir(root):
        return "not a folder"
    if store.is_dir(root) and store.has_entries(root) and not store.is_file(store.join(MARKER)):
        return f"a folder with files that is not a gpudiag dataset (no {MARKER})"
    return None


def dataset_problem(target: str) -> str | None:
    """Why `target` (a folder or a URL) cannot take an append, or None. Whether object
    storage can be written is known only by writing."""
    try:
        store = Store(target)
        if problem := _target_problem(store):
            return problem
    except OSError as exc:
        return str(exc).removeprefix(f"{target}: ")
    if store.local:
        path = Path(store.root)
        if not os.access(path if path.exists() else path.parent, os.W_OK):
            return "not writable"
    return None


def node_history(
    root: str | Path, node: str, kernel: str, metric: str, device: str | None = None
) -> Any:
    """One node's kernel metric over its runs (time, run_id, node, device, unit, median):
    a lazy scan whose filters Polars pushes into the Parquet reader, which skips the row
    groups whose statistics rule the node out and reads six columns of the rest."""
    import polars as pl

    wanted = (pl.col("node") == node) & (pl.col("kernel") == kernel) & (pl.col("metric") == metric)
    if device is not None:
        wanted &= pl.col("device") == device
    return (
        scan(root, "kernels")
        .filter(wanted & (pl.col("status") == "ok"))
        .select(
            "time",
            "run_id",
            "node",
            "device",
            "unit",
            pl.coalesce("median", pl.col("samples").list.median()).alias("median"),
        )
        .sort("time", "device")
        .collect()
    )
