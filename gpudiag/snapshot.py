"""Snapshot files: one versioned schema, written as TOML (default) or JSON.

Layout (schema version 2), the same in both formats::

    schema_version, gpudiag_version, host, created, command_line
    [[probes]]    name, title, status, duration_s, error, [[probes.readings]]
    [[kernels]]   kernel, device, metric, unit, status, samples, stats, params, error
    [[findings]]  rule_id, severity, subject, title, message, why, fix, action,
                  [[findings.evidence]]
    [end]         probes, readings, kernels, findings  (counts; written last)

A reading is `key, value, unit, source, status, reason`; `value` is left out when the
reading could not be taken, and empty strings are left out. The `[end]` table comes
last in the file, so a file cut short is caught even where the cut falls between two
tables. The loader refuses anything else with a `SnapshotError` naming the file and
the problem in one line.

Version 2 adds the `not-applicable` finding severity (a rule whose evidence the source
can never hold). Version 1 files keep loading: they are migrated on load (see
`migrate_v1`) and come back as version 2; only version 2 is written.
"""

from __future__ import annotations

import json
import math
import os
import stat
from collections.abc import Callable

from gpudiag.catalog import check_keys
from gpudiag.inputs import (
    MAX_NUMBER,
    InputError,
    number_too_large,
    parse_data,
    printable,
    read_text,
    too_large_text,
)
from gpudiag.model import (
    SCHEMA_VERSION,
    Action,
    Finding,
    KernelResult,
    ProbeResult,
    ProbeStatus,
    Reading,
    ReadingStatus,
    Severity,
    Snapshot,
    Statistics,
    check_value,
)
from gpudiag.record import as_dict, replace
from gpudiag.upgrade import upgraded

TYPE_CHECKING = False  # typing's, without importing typing
if TYPE_CHECKING:  # pathlib too: paths are given, never made here
    from pathlib import Path
    from typing import IO, Any, TypeVar


class SnapshotError(Exception):
    """A snapshot file that cannot be read; str() is the one-line message for the user."""

    def __init__(self, path: str, problem: str) -> None:
        path, problem = printable(path), printable(problem)  # a file name is data too
        super().__init__(f"{path}: {problem}")
        self.path = path
        self.problem = problem


class OtherGpudiagFile(SnapshotError):
    """A file of gpudiag's own that is not a snapshot (a capture, an NVML replay): its
    message names the command that makes a snapshot of it, and nothing else is guessed."""


# the files of gpudiag's that are not snapshots, by their `format`: what they are, and
# the option of the default command that reads one (then --export writes the snapshot)
OTHER_FORMATS = {
    "gpudiag-capture": ("a whole-node capture", "--replay"),
    "gpudiag-nvml-replay": ("an NVML replay", "--nvml-replay"),
}


def _other_format(data: object, name: str) -> OtherGpudiagFile | None:
    """The error for a capture or NVML replay read as a snapshot, or None."""
    if not isinstance(data, dict) or "schema_version" in data:
        return None
    known = OTHER_FORMATS.get(data.get("format"))  # type: ignore[arg-type]
    if known is None:
        return None
    what, option = known
    shown = name if name != "<stdin>" else "FILE"
    return OtherGpudiagFile(
        name,
        f"{what}, not a snapshot: gpudiag {option} {shown} --export node.toml makes a "
        "snapshot of it (what check, diff and view read)",
    )


# ---------------------------------------------------------------------------- writing


def _fields(required: dict[str, Any], **optional: Any) -> dict[str, Any]:
    """Required fields always; optional ones only when not empty."""
    return {**required, **{k: v for k, v in optional.items() if v != "" and v is not None}}


def _reading_to_dict(reading: Reading) -> dict[str, Any]:
    fields = {"key": reading.key}
    if reading.value is not None:
        fields["value"] = reading.value
    return _fields(
        fields,
        unit=reading.unit,
        source=reading.source,
        status=reading.status.value,
        reason=reading.reason,
    )


def snapshot_to_dict(snapshot: Snapshot) -> dict[str, Any]:
    """The plain-data form of a snapshot, as written to TOML or JSON."""
    probes = [
        {
            **_fields(
                {"name": p.name, "status": p.status.value, "duration_s": p.duration_s},
                title=p.title,
                error=p.error,
            ),
            "readings": [_reading_to_dict(r) for r in p.readings],
        }
        for p in snapshot.probes
    ]
    kernels = []
    for k in snapshot.kernels:
        entry = _fields(
            {"kernel": k.kernel, "device": k.device, "metric": k.metric, "status": k.status.value},
            unit=k.unit,
            error=k.error,
        )
        entry["samples"] = list(k.samples)
        entry["params"] = dict(k.params)
        if k.stats is not None:
            entry["stats"] = as_dict(k.stats)
        kernels.append(entry)
    findings = [
        {
            **_fields(
                {"rule_id": f.rule_id, "severity": f.severity.value, "subject": f.subject},
                title=f.title,
                message=f.message,
                why=f.why,
                fix=f.fix,
            ),
            "action": f.action.value,
            "evidence": [_reading_to_dict(r) for r in f.evidence],
        }
        for f in snapshot.findings
    ]
    return {
        "schema_version": snapshot.schema_version,
        "gpudiag_version": snapshot.gpudiag_version,
        "host": snapshot.host,
        "created": snapshot.created,
        "command_line": list(snapshot.command_line),
        "probes": probes,
        "kernels": kernels,
        "findings": findings,
        "end": _counts(snapshot),
    }


def _counts(snapshot: Snapshot) -> dict[str, int]:
    return {
        "probes": len(snapshot.probes),
        "readings": sum(len(p.readings) for p in snapshot.probes),
        "kernels": len(snapshot.kernels),
        "findings": len(snapshot.findings),
    }


def is_json_path(path: str | Path) -> bool:
    """JSON when the file name ends in .json, TOML otherwise."""
    return str(path).lower().endswith(".json")


def dumps(snapshot: Snapshot, as_json: bool = False) -> str:
    """The snapshot as TOML text, or as JSON text when `as_json`."""
    data = snapshot_to_dict(snapshot)
    if as_json:
        return json.dumps(data, indent=1, ensure_ascii=False, allow_nan=False) + "\n"
    import tomli_w  # what writing needs is loaded where it writes (check only reads)

    return tomli_w.dumps(data)


STDOUT_ADVICE = " ('-' writes to stdout)"  # on the command line; not in the TUI
EMPTY_TARGET = "the path is empty: name a file" + STDOUT_ADVICE


def target_problem(path: Path | str, stdout: bool = True) -> str | None:
    """Why a snapshot cannot be written to `path`, or None. The target must be absent or
    a regular file: a directory, a symlink, a device (/dev/null, /dev/full), a FIFO or a
    socket is refused, never replaced ('-' is how to write to standard output). An empty
    path (`-o ''`, which Path reads as '.') is said to be one: given as the string typed.
    The command line and the TUI's export both ask this first; `stdout`: whether '-' is
    standard output where the path was given (the command line's; in the TUI it is the
    screen, and the advice is left out)."""
    if isinstance(path, str) and not path:
        return EMPTY_TARGET if stdout else EMPTY_TARGET.removesuffix(STDOUT_ADVICE)
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        mode = None
    except OSError as exc:
        return f"cannot check the target: {exc.strerror or exc}"
    if mode is not None and not stat.S_ISREG(mode):
        if stat.S_ISDIR(mode):
            return "is a directory"
        if stat.S_ISLNK(mode):
            return "is a symbolic link; name the file it points to"
        if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
            kind = "is a device"
        elif stat.S_ISFIFO(mode):
            kind = "is a FIFO"
        else:
            kind = "is a socket or another special file"
        advice = STDOUT_ADVICE if stdout else ""
        return f"{kind}, not a regular file; refusing to replace it{advice}"
    parent = os.path.dirname(os.fspath(path)) or "."
    if not os.path.isdir(parent):
        return f"directory {parent} does not exist"
    return None


def save(snapshot: Snapshot, path: Path) -> None:
    """Write atomically: TOML, or JSON when the name ends in .json."""
    from gpudiag.atomic import write_atomic

    text = dumps(snapshot, as_json=is_json_path(path))

    def write(stream: IO[str]) -> None:
        stream.write(text)

    write_atomic(path, write)


# ---------------------------------------------------------------------------- reading

if TYPE_CHECKING:
    T = TypeVar("T")
_REQUIRED = object()


class _Fields:
    """Takes typed fields out of one table and complains, with its location, about
    missing, wrong-typed and unknown ones."""

    def __init__(self, data: object, where: str) -> None:
        if not isinstance(data, dict):
            raise ValueError(f"{where}: expected a table, got {_type_name(data)}")
        self.data = dict(data)
        self.where = where

    def take(self, name: str, kind: type | tuple[type, ...], default: object = _REQUIRED) -> Any:
        if name not in self.data:
            if default is _REQUIRED:
                raise ValueError(f"{self.where}: missing field '{name}'")
            return default
        value = self.data.pop(name)
        kinds = kind if isinstance(kind, tuple) else (kind,)
        if isinstance(value, bool) and bool not in kinds:
            ok = False
        elif kinds == (float,) and isinstance(value, int) and not isinstance(value, bool):
            if number_too_large(value):
                raise ValueError(f"{self.where}.{name}: {too_large_text(value)}")
            return float(value)  # a float field written as 3 by hand
        else:
            ok = isinstance(value, kinds)
        if not ok:
            expected = " or ".join(k.__name__ for k in kinds)
            raise ValueError(f"{self.where}.{name}: expected {expected}, got {_type_name(value)}")
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueError(f"{self.where}.{name}: non-finite number {value!r} is not allowed")
        if number_too_large(value):
            raise ValueError(f"{self.where}.{name}: {too_large_text(value)}")
        return value

    def enum(self, name: str, enum_type: Callable[[str], T]) -> T:
        raw = self.take(name, str)
        try:
            return enum_type(raw)
        except ValueError:
            raise ValueError(f"{self.where}.{name}: unknown value '{raw}'") from None

    def table_list(self, name: str) -> list[Any]:
        items = self.take(name, list, [])
        return [(item, f"{self.where}.{name}[{i}]") for i, item in enumerate(items)]

    def done(self) -> None:
        if self.data:
            unknown = ", ".join(sorted(self.data))
            raise ValueError(f"{self.where}: unknown field(s) {unknown}")


def _type_name(value: object) -> str:
    return {
        bool: "a boolean",
        int: "an integer",
        float: "a number",
        str: "a string",
        list: "a list",
        dict: "a table",
    }.get(type(value), type(value).__name__)


def _reading_from(data: object, where: str) -> Reading:
    f = _Fields(data, where)
    key = f.take("key", str)
    try:
        value = f.take("value", (bool, int, float, str, list), None)
    except ValueError as exc:
        raise ValueError(f"{exc} (reading {key[:80]})") from None
    unit = f.take("unit", str, "")
    source = f.take("source", str, "")
    status = f.enum("status", ReadingStatus)
    reason = f.take("reason", str, "")
    f.done()
    try:
        if value is not None:
            check_value(value)
        return Reading(key=key, value=value, unit=unit, source=source, status=status, reason=reason)
    except ValueError as exc:
        raise ValueError(f"{where} (reading {key[:80]}): {exc}") from None


_READING_STATUS = {status.value: status for status in ReadingStatus}


def _readings_from(items: object, where: str) -> tuple[Reading, ...]:
    """The readings of a table list (`where` names it: probes[0].readings): each one
    that is well-formed made at once (`_plain_reading`), any other by `_reading_from`,
    which says what is wrong with it and where."""
    if not isinstance(items, list):
        raise ValueError(f"{where}: expected a list, got {_type_name(items)}")
    readings = []
    for i, data in enumerate(items):
        reading = _plain_reading(data)
        readings.append(reading if reading is not None else _reading_from(data, f"{where}[{i}]"))
    return tuple(readings)


# a reading's table with each field at its default (a missing key or status: None), in
# the order of Reading's fields: a table merged over it is the reading's __dict__
_READING_TEMPLATE = {"key": None, "value": None, "unit": "", "source": "", "status": None,
                     "reason": ""}  # fmt: skip
_new, _set = object.__new__, object.__setattr__


def _plain_reading(data: object) -> Reading | None:
    """A reading from a table that holds nothing wrong (the fields of `_reading_from`, of
    their exact types, a known status, a non-empty key, a value exactly when the status
    is ok, a storable value: Reading's own checks), else None: `_reading_from` then finds
    what is wrong. The one pass a snapshot's readings take when loaded: the table merged
    over `_READING_TEMPLATE` (one dict display, in C) is the reading's __dict__, as
    Reading.checked would make it; its six fields taken in one unpacking. About 1 us a
    reading against 1.3 before, a quarter of the readings' time at 64 GPUs (issue 44)."""
    if type(data) is not dict:
        return None
    table = {**_READING_TEMPLATE, **data}
    if len(table) != 6:  # a field a reading does not have
        return None
    key, value, unit, source, status, reason = table.values()
    if not (
        type(key) is str
        and key
        and type(status) is str
        and type(unit) is str
        and type(source) is str
        and type(reason) is str
        and status in _READING_STATUS
    ):
        return None
    if value is None:
        if status == "ok" or "value" in data:  # none where ok, or a value written as null
            return None
    elif status != "ok":
        return None
    else:
        kind = type(value)
        if kind is int or kind is float:
            if not -MAX_NUMBER <= value <= MAX_NUMBER:  # NaN and infinity fail it too
                return None
        elif kind is list:
            if not _plain_list(value):
                return None
        elif kind is not str and kind is not bool:
            return None
    table["status"] = _READING_STATUS[status]
    reading = _new(Reading)
    _set(reading, "__dict__", table)
    return reading


def _plain_list(value: list[Any]) -> bool:
    """check_value's rule for a list, inline: flat, of scalars, numbers bounded."""
    for item in value:
        kind = type(item)
        if kind is float or kind is int:
            if not -MAX_NUMBER <= item <= MAX_NUMBER:
                return False
        elif kind is not str and kind is not bool:
            return False
    return True


def _probe_from(data: object, where: str) -> ProbeResult:
    f = _Fields(data, where)
    result = ProbeResult(
        name=f.take("name", str),
        title=f.take("title", str, ""),
        status=f.enum("status", ProbeStatus),
        duration_s=f.take("duration_s", float),
        error=f.take("error", str, ""),
        readings=_readings_from(f.take("readings", list, []), f"{where}.readings"),
    )
    f.done()
    return result


def _kernel_from(data: object, where: str) -> KernelResult:
    f = _Fields(data, where)
    kernel = f.take("kernel", str)
    device = f.take("device", str)
    metric = f.take("metric", str)
    unit = f.take("unit", str, "")
    status = f.enum("status", ProbeStatus)
    error = f.take("error", str, "")
    samples = f.take("samples", list, [])
    for i, sample in enumerate(samples):
        if isinstance(sample, bool) or not isinstance(sample, (int, float)):
            raise ValueError(f"{where}.samples[{i}]: expected a number, got {_type_name(sample)}")
        try:
            check_value(sample)
        except ValueError as exc:
            raise ValueError(f"{where}.samples[{i}]: {exc}") from None
    params = _Fields(f.take("params", dict, {}), f"{where}.params")
    param_items = []
    for name in list(params.data):
        value = params.take(name, (bool, int, float, str))
        param_items.append((name, value))
    stats = None
    if "stats" in f.data:
        s = _Fields(f.take("stats", dict), f"{where}.stats")
        stats = Statistics(
            count=s.take("count", int),
            **{
                name: s.take(name, float)
                for name in ("median", "minimum", "maximum", "mean", "cv", "ci95_low", "ci95_high")
            },
        )
        s.done()
    f.done()
    return KernelResult(
        kernel=kernel,
        device=device,
        metric=metric,
        unit=unit,
        status=status,
        samples=tuple(float(s) for s in samples),
        stats=stats,
        params=tuple(param_items),
        error=error,
    )


def _finding_from(data: object, where: str) -> Finding:
    f = _Fields(data, where)
    finding = Finding(
        rule_id=f.take("rule_id", str),
        severity=f.enum("severity", Severity),
        subject=f.take("subject", str),
        title=f.take("title", str, ""),
        message=f.take("message", str, ""),
        why=f.take("why", str, ""),
        fix=f.take("fix", str, ""),
        action=f.enum("action", Action) if "action" in f.data else Action.NONE,
        evidence=_readings_from(f.take("evidence", list, []), f"{where}.evidence"),
    )
    f.done()
    return finding


def _check_created(value: str) -> str:
    if _utc_second(value):  # what gpudiag writes: no datetime to import (issue 44)
        return value
    from datetime import datetime

    try:
        datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"created: '{value}' is not an ISO 8601 time") from None
    return value


_DAYS = (31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)


def _utc_second(value: str) -> bool:
    """Whether `value` is a valid time in the form gpudiag writes, YYYY-MM-DDTHH:MM:SSZ
    (ASCII digits, a real day, hours below 24, minutes and seconds below 60): each such
    text datetime.fromisoformat reads (with the Z as +00:00); any other is asked of it."""
    if len(value) != 20 or not value.isascii() or value[4::3] != "--T::Z":
        return False
    parts = value[0:4], value[5:7], value[8:10], value[11:13], value[14:16], value[17:19]
    if not all(part.isdigit() for part in parts):
        return False
    year, month, day, hour, minute, second = map(int, parts)
    if not (year >= 1 and 1 <= month <= 12 and hour < 24 and minute < 60 and second < 60):
        return False
    leap = month == 2 and year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)
    return 1 <= day <= _DAYS[month - 1] + leap


def snapshot_from_dict(data: dict[str, Any]) -> Snapshot:
    """Build a snapshot from its plain-data form; raises ValueError on any problem."""
    if "schema_version" not in data:
        raise ValueError("not a gpudiag snapshot (no schema_version)")
    version = data["schema_version"]
    if isinstance(version, bool) or not isinstance(version, int):
        raise ValueError(f"schema_version: expected an integer, got {_type_name(version)}")
    if version not in READABLE_VERSIONS:
        readable = " and ".join(map(str, READABLE_VERSIONS))
        raise ValueError(
            f"schema version {version} is not supported (this gpudiag reads {readable})"
        )
    if "end" not in data:
        raise ValueError("truncated: the closing [end] table is missing")
    f = _Fields(data, "snapshot")
    f.take("schema_version", int)
    gpudiag_version = f.take("gpudiag_version", str)
    host = f.take("host", str)
    created = _check_created(f.take("created", str))
    command_line = f.take("command_line", list, [])
    for i, arg in enumerate(command_line):
        if not isinstance(arg, str):
            raise ValueError(f"command_line[{i}]: expected a string, got {_type_name(arg)}")
    probes = tuple(_probe_from(d, w) for d, w in f.table_list("probes"))
    kernels = tuple(_kernel_from(d, w) for d, w in f.table_list("kernels"))
    findings = tuple(_finding_from(d, w) for d, w in f.table_list("findings"))
    check_keys(  # instance indices bounded where the keys are read, once per snapshot
        [r.key for p in probes for r in p.readings] + [r.key for x in findings for r in x.evidence]
    )
    end = _Fields(f.take("end", dict), "end")
    declared = {name: end.take(name, int) for name in ("probes", "readings", "kernels", "findings")}
    end.done()
    f.done()
    snapshot = Snapshot(
        schema_version=SCHEMA_VERSION,
        gpudiag_version=gpudiag_version,
        host=host,
        created=created,
        command_line=tuple(command_line),
        probes=probes,
        kernels=kernels,
        findings=findings,
    )
    actual = _counts(snapshot)
    for name, count in declared.items():
        if actual[name] != count:
            raise ValueError(
                f"truncated or edited: [end] declares {count} {name}, the file holds {actual[name]}"
            )
    if version == 1:
        for finding in snapshot.findings:
            if finding.severity is Severity.NOT_APPLICABLE:
                raise ValueError(f"schema version 1 has no '{finding.severity.value}' findings")
        snapshot = migrate_v1(snapshot)
    # what its producers now record, derived from what it holds (gpudiag/upgrade.py)
    probes = upgraded(snapshot.probes)
    return snapshot if probes is snapshot.probes else replace(snapshot, probes=probes)


READABLE_VERSIONS = (1, SCHEMA_VERSION)


def migrate_v1(snapshot: Snapshot) -> Snapshot:
    """A version 1 snapshot as version 2: the same probes, kernels and findings, plus the
    readings version 1 imports lacked and the rules read (the uncorrectable ECC totals,
    summed from the per-location counts the importer wrote). Findings stay as recorded;
    `gpudiag check` judges them again."""
    from gpudiag.importing.gpus import with_ecc_totals  # the importer's own derivation

    probes = tuple(
        replace(p, readings=with_ecc_totals(p.readings)) if p.name.startswith("import-") else p
        for p in snapshot.probes
    )
    return replace(snapshot, probes=probes)


def loads(text: str, name: str = "<snapshot>") -> Snapshot:
    """Parse snapshot text, TOML or JSON (told apart by a leading '{'). Control
    characters in its strings are removed (they would reach a terminal)."""
    try:
        if text.lstrip().startswith("{"):
            data = parse_data(text, name, as_json=True)
            if not isinstance(data, dict):
                raise ValueError("not a gpudiag snapshot (JSON top level is not an object)")
        else:
            data = parse_data(text, name, as_json=False)
        if (other := _other_format(data, name)) is not None:
            raise other
        return snapshot_from_dict(data)  # parse_data made every string printable
    except InputError as exc:
        raise SnapshotError(name, exc.problem) from None
    except ValueError as exc:
        raise SnapshotError(name, str(exc)) from None
    except RecursionError:
        raise SnapshotError(name, "nested too deeply to be a snapshot") from None


def load(path: str | Path) -> Snapshot:
    """Read a snapshot file ('-': standard input), bounded (gpudiag.inputs), or raise
    SnapshotError with a one-line reason."""
    name = "<stdin>" if str(path) == "-" else str(path)
    try:
        text = read_text(path, "a snapshot", stdin_ok=True)
    except InputError as exc:
        raise SnapshotError(name, exc.problem) from None
    return loads(text, name)
