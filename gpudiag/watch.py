"""`gpudiag watch`: every GPU sampled at an interval, one row per GPU per sample, as
`nvidia-smi dmon` prints it; and the history the TUI's watch screen draws sparklines from.

Each sample is a few NVML calls per GPU (power, temperature, SM and memory clocks,
utilisation, memory used, throttle reasons, volatile uncorrected ECC, PCIe replays, the
number of compute processes, and each process described as nvitop shows it: pid, name,
user, CPU use and command line, from psutil; a replay's processes ran on the recorded
machine, so only their pid and memory are shown, never this machine's process of that pid),
through the one NVML interface, so a replay (`--nvml-replay`, the demo) answers it as a
live node does. A call that fails leaves its cell empty ("-") with the reason kept in
`Sample.errors`; a lost GPU says so in every cell, never a zero.

`gpudiag --replay CAPTURE watch` prints the samples a capture recorded
(`gpudiag capture OUT --samples N --interval S`), in order, at their recorded times
(`replay`).

On a live node, device events (a GPU, NIC or NVMe drive removed or added, a driver
unbound; from pyudev) and Xid events (from /dev/kmsg) are printed as they arrive
(gpudiag/device_events.py).
NVLink throughput (`nvl_tx`, `nvl_rx`, GB/s of data over all of a GPU's links) comes from
NVML's cumulative counters (nvmlDeviceGetFieldValues, NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX
and _RX, scope UINT_MAX: every link summed, in KiB): the difference between two samples
over the time between them, so the first sample has none. A replay (the demo) records each
counter once at most, so it has no throughput and says so; a GPU without NVLink gives
NVML's NotSupported. The counters were read through the real pynvml against the C NVML
stand-in, never on a GPU.

History is a ring buffer per GPU and column (`History`, `collections.deque` with a
maximum length), so memory stays bounded however long watch runs
(benchmarks/watch_sampling.py measures both its CPU per sample and its memory).

The live NVML path (PynvmlBackend) was not run on a GPU here: no GPU exists on the
machines this was written on; it was run on the demo replays and the C NVML stand-in.
"""

from __future__ import annotations

import csv
import io
import json
import textwrap
import time
from collections import deque
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from gpudiag.device_events import DeviceEvent
from gpudiag.nvml import FIELD_VALUES, Nvml, NvmlError, ReplayBackend

CLOCK_SM, CLOCK_MEM, TEMPERATURE_GPU = 1, 2, 0
ECC_UNCORRECTED, COUNTER_VOLATILE = 1, 0


def _throttle(mask: Any) -> str:
    from gpudiag.probes.gpu import decode_throttle_reasons

    names = decode_throttle_reasons(int(mask))
    return ",".join(n for n in names if n != "GpuIdle") or ("idle" if names else "none")


@dataclass(frozen=True)
class Column:
    """One sampled quantity: its name, unit, the NVML call and how to read its answer."""

    name: str
    unit: str
    function: str
    args: tuple[int, ...]
    convert: Callable[[Any], float | str]


COLUMNS = (
    Column("power", "W", "nvmlDeviceGetPowerUsage", (), lambda mw: round(int(mw) / 1000.0, 1)),
    Column("temp", "C", "nvmlDeviceGetTemperature", (TEMPERATURE_GPU,), int),
    Column("sm", "MHz", "nvmlDeviceGetClockInfo", (CLOCK_SM,), int),
    Column("mem", "MHz", "nvmlDeviceGetClockInfo", (CLOCK_MEM,), int),
    Column("util", "%", "nvmlDeviceGetUtilizationRates", (), lambda u: int(u["gpu"])),
    Column("mutil", "%", "nvmlDeviceGetUtilizationRates", (), lambda u: int(u["memory"])),
    Column(
        "fb",
        "MiB",
        "nvmlDeviceGetMemoryInfo",
        (),
        lambda m: int(m["used"]) // 2**20,
    ),
    Column(
        "ecc_unc",
        "",
        "nvmlDeviceGetTotalEccErrors",
        (ECC_UNCORRECTED, COUNTER_VOLATILE),
        int,
    ),
    Column("replay", "", "nvmlDeviceGetPcieReplayCounter", (), int),
    Column("procs", "", "nvmlDeviceGetComputeRunningProcesses", (), len),
    Column("throttle", "", "nvmlDeviceGetCurrentClocksEventReasons", (), _throttle),
)
# nvml.h: NVLink data throughput counters (cumulative KiB); scopeId UINT_MAX sums all links
FIELD_NVLINK_THROUGHPUT_DATA_TX, FIELD_NVLINK_THROUGHPUT_DATA_RX = 138, 139
SCOPE_ALL_LINKS = 0xFFFFFFFF
NVLINK_COUNTERS = (
    ("nvl_tx", FIELD_NVLINK_THROUGHPUT_DATA_TX),
    ("nvl_rx", FIELD_NVLINK_THROUGHPUT_DATA_RX),
)
NVLINK_UNIT = "GB/s"
NO_RATE_IN_REPLAY = "a replay records the NVLink counters once at most: no throughput"
FIRST_SAMPLE = "the first sample: throughput needs two readings of the counter"
NUMERIC = (*(c.name for c in COLUMNS if c.name != "throttle"), *(n for n, _ in NVLINK_COUNTERS))


@dataclass(frozen=True)
class Sample:
    """One GPU at one moment: a value per column (None where the call failed, with the
    reason in `errors`)."""

    time: float
    gpu: int
    values: dict[str, float | str | None]
    errors: dict[str, str] = field(default_factory=dict)
    counters: dict[str, int] = field(default_factory=dict)  # NVLink KiB, cumulative
    processes: tuple[str, ...] = ()  # "1234 python (alice, 35% CPU): python train.py"


def gpu_count(nvml: Nvml) -> int:
    """How many GPUs NVML sees; raises NvmlError when NVML cannot answer."""
    return int(nvml.call("nvmlDeviceGetCount"))


def _nvlink(nvml: Nvml, gpu: int, now: float, previous: Sample | None, sample: Sample) -> None:
    """NVLink throughput into `sample`: each counter read, and its rate since `previous`."""
    if isinstance(nvml.backend, ReplayBackend):
        lost = "GpuIsLost" in sample.errors.values()  # a lost GPU is lost in every cell
        for name, _ in NVLINK_COUNTERS:
            sample.values[name] = None
            sample.errors[name] = "GpuIsLost" if lost else NO_RATE_IN_REPLAY
        return
    for name, field_id in NVLINK_COUNTERS:
        sample.values[name] = None
        try:
            kib = int(nvml.call(FIELD_VALUES, gpu, field_id, SCOPE_ALL_LINKS))
        except NvmlError as exc:
            sample.errors[name] = exc.code
            continue
        except (ValueError, TypeError) as exc:
            sample.errors[name] = f"{FIELD_VALUES} {field_id}: {exc}"
            continue
        sample.counters[name] = kib
        before = previous.counters.get(name) if previous is not None else None
        if before is None or previous is None:
            sample.errors[name] = FIRST_SAMPLE
        elif now <= previous.time:
            sample.errors[name] = "no time passed since the last sample"
        elif kib < before:
            sample.errors[name] = "the counter went back (driver reloaded?)"
        else:
            sample.values[name] = round((kib - before) * 1024 / (now - previous.time) / 1e9, 2)


PROCESSES_CALL = ("nvmlDeviceGetComputeRunningProcesses", ())


def recorded_process(process: Any) -> str:
    """A replay's process: its pid and GPU memory as recorded; psutil on this machine
    knows nothing of the recorded machine's processes."""
    memory = process.get("usedGpuMemory") if isinstance(process, dict) else None
    used = f", {int(memory) // 2**20} MiB" if isinstance(memory, int) else ""
    return f"{int(process['pid'])} (recorded{used}; not a process of this machine)"


def _processes(nvml: Nvml, raw: Any, describe: Callable[[int], str] | None) -> tuple[str, ...]:
    """Each process NVML listed, described (psutil on a live node, the record on a replay)."""
    if not isinstance(raw, list):
        return ()
    listed = [p for p in raw if isinstance(p, dict) and isinstance(p.get("pid"), int)]
    if isinstance(nvml.backend, ReplayBackend) and describe is None:
        return tuple(recorded_process(p) for p in listed)
    if describe is None:
        from gpudiag.processes import describe as describe
    return tuple(describe(int(p["pid"])) for p in listed)


def sample_gpu(
    nvml: Nvml,
    gpu: int,
    now: float | None = None,
    previous: Sample | None = None,
    describe: Callable[[int], str] | None = None,
) -> Sample:
    """Every column of one GPU, one NVML call each (a call shared by two columns, as
    utilisation is, is made once); NVLink throughput since `previous` (this GPU's last
    sample); the compute processes, each described by `describe` (a pid's psutil
    description; None: psutil's on a live node, the record on a replay)."""
    values: dict[str, float | str | None] = {}
    errors: dict[str, str] = {}
    answers: dict[tuple[str, tuple[int, ...]], Any] = {}
    for column in COLUMNS:
        key = (column.function, column.args)
        try:
            if key not in answers:
                answers[key] = nvml.call(column.function, gpu, *column.args)
            raw = answers[key]
            if isinstance(raw, NvmlError):
                raise raw
            values[column.name] = column.convert(raw)
        except NvmlError as exc:
            answers[key] = exc
            values[column.name] = None
            errors[column.name] = exc.code
        except (ValueError, TypeError, KeyError, IndexError) as exc:
            values[column.name] = None
            errors[column.name] = f"{column.function} returned {raw!r:.40}: {exc}"
    failures = [a for a in answers.values() if isinstance(a, NvmlError)]
    if any(nvml.confirms_lost(gpu, exc) for exc in failures):  # lost: in every column
        for name in values:
            values[name] = None
            errors[name] = "GpuIsLost"
    now = time.time() if now is None else now
    listed = _processes(nvml, answers.get(PROCESSES_CALL), describe)
    sample = Sample(now, gpu, values, errors, processes=listed)
    _nvlink(nvml, gpu, now, previous, sample)
    return sample


def sample_node(
    nvml: Nvml,
    count: int,
    previous: dict[int, Sample] | None = None,
    now: float | None = None,
    describe: Callable[[int], str] | None = None,
) -> list[Sample]:
    """One sample of every GPU, all stamped with the same time; `previous` holds each GPU's
    last sample (for NVLink throughput); `describe` as for sample_gpu."""
    now = time.time() if now is None else now
    last = previous or {}
    return [sample_gpu(nvml, gpu, now, last.get(gpu), describe) for gpu in range(count)]


class History:
    """The last `length` samples of each GPU's numeric columns: a ring buffer, so memory
    is bounded however long watch runs."""

    def __init__(self, length: int = 300) -> None:
        self.length = length
        self.series: dict[tuple[int, str], deque[float | None]] = {}
        self.latest: dict[int, Sample] = {}

    def add(self, sample: Sample) -> None:
        self.latest[sample.gpu] = sample
        for name in NUMERIC:
            value = sample.values.get(name)
            series = self.series.setdefault((sample.gpu, name), deque(maxlen=self.length))
            series.append(value if isinstance(value, (int, float)) else None)

    def values(self, gpu: int, name: str) -> list[float]:
        """The column's samples that were read (failed ones left out)."""
        return [v for v in self.series.get((gpu, name), ()) if v is not None]


# ------------------------------------------------------------------ output

OUTPUT_COLUMNS = (*NUMERIC, "throttle")
UNITS = {c.name: c.unit for c in COLUMNS} | {n: NVLINK_UNIT for n, _ in NVLINK_COUNTERS}
WIDTHS = {"time": 8, "gpu": 3, "throttle": 0}


def _cell(sample: Sample, name: str) -> str:
    value = sample.values.get(name)
    if value is None:
        return "LOST" if sample.errors.get(name) == "GpuIsLost" else "-"
    return f"{value:g}" if isinstance(value, float) else str(value)


# At a terminal's width the table keeps one line per GPU per sample, as nvidia-smi dmon
# and gpustat do: each column as narrow as its values (an H100's 700 W, 81559 MiB), and the
# columns last in KEPT_FIRST dropped first until the row fits, throttle reasons taking
# what is left (at least THROTTLE_MIN). Without a width (a pipe) every column, as before.
KEPT_FIRST = (
    "power", "temp", "sm", "util", "fb", "ecc_unc", "mem", "procs", "replay", "mutil",
    "nvl_tx", "nvl_rx",
)  # fmt: skip
NARROW = {
    "power": 5, "temp": 4, "sm": 4, "mem": 4, "util": 4, "mutil": 5, "fb": 6, "ecc_unc": 7,
    "replay": 6, "procs": 5, "nvl_tx": 6, "nvl_rx": 6,
}  # fmt: skip
THROTTLE_MIN = 14  # two short reasons: HwSlow,HwTherm


def table_columns(width: int | None, taken: int = 0) -> tuple[str, ...]:
    """The table's columns after time and gpu at a terminal `width` (None: all), when
    `taken` characters already go to extra columns (--explain's bound-by word)."""
    if width is None:
        return OUTPUT_COLUMNS
    kept = list(KEPT_FIRST)

    def need(columns: list[str]) -> int:
        fixed = WIDTHS["time"] + 2 + WIDTHS["gpu"] + taken
        return fixed + sum(2 + NARROW[c] for c in columns)

    while kept and need(kept) + 2 + THROTTLE_MIN > width:
        kept.pop()
    return (*(c for c in NUMERIC if c in kept), "throttle")


def format_rows(
    samples: list[Sample],
    fmt: str,
    first: bool,
    extra: dict[str, int] | None = None,
    width: int | None = None,
) -> Iterator[str]:
    """The lines to print for one round of samples: table (a header every 20 rounds
    is the caller's choice via `first`; one line per GPU at a terminal's `width`), csv
    or jsonl (every field, whatever the width); `extra`: more columns (their names and
    table widths), shown after the GPU's number, that the caller put in each sample's
    values (--explain's bound-by word)."""
    extra = extra or {}
    if fmt == "jsonl":
        for s in samples:
            record = {"time": round(s.time, 3), "gpu": s.gpu, **s.values}
            record["processes"] = list(s.processes)
            if s.errors:
                record["errors"] = s.errors
            yield json.dumps(record)
        return
    if fmt == "csv":
        columns = (*extra, *OUTPUT_COLUMNS)  # extra: beside the GPU number
        buffer = io.StringIO()
        writer = csv.writer(buffer, lineterminator="\n")
        if first:
            writer.writerow(("time", "gpu", *columns, "processes"))
        for s in samples:
            stamp = time.strftime("%H:%M:%S", time.localtime(s.time))
            cells = [_cell(s, name) for name in columns]
            writer.writerow([stamp, s.gpu, *cells, "; ".join(s.processes)])
        yield buffer.getvalue().rstrip("\n")
        return
    columns = (*extra, *table_columns(width, sum(w + 2 for w in extra.values())))
    narrow = NARROW if width is not None else {}
    widths = {name: narrow.get(name, max(len(name), 6)) for name in OUTPUT_COLUMNS}
    widths |= WIDTHS | extra
    headers = ("time", "gpu", *columns)

    def line(cells: Sequence[str]) -> str:
        pairs = zip(headers, cells, strict=True)
        text = "  ".join(f"{c:>{widths[h]}}" if widths[h] else c for h, c in pairs).rstrip()
        return text if width is None or len(text) <= width else text[: width - 1] + "…"

    if first:
        yield line(headers)
        yield line(("", "", *(UNITS.get(name, "") for name in columns)))
    used = sum(widths[h] + 2 for h in headers[:-1])  # throttle starts after the others
    room = None if width is None else width - used
    for s in samples:
        stamp = time.strftime("%H:%M:%S", time.localtime(s.time))
        cells = [_cell(s, name) for name in columns]
        if room is not None and len(cells[-1]) > room:  # the GPU screen's short names
            from gpudiag.views import THROTTLE_SHORT

            cells[-1] = ",".join(THROTTLE_SHORT.get(n, n) for n in cells[-1].split(","))
        yield line([stamp, str(s.gpu), *cells])
        for process in s.processes:  # one line per process under its GPU's row
            text = f"{'':>8}  {'':>3}  proc {process}"
            yield text if width is None or len(text) <= width else text[: width - 1] + "…"


def format_event(event: DeviceEvent, fmt: str) -> str:
    """A device event in the output's form (a csv comment line for csv)."""
    stamp = time.strftime("%H:%M:%S", time.localtime(event.time))
    if fmt == "jsonl":
        record = {"time": round(event.time, 3), "event": event.action, "kind": event.kind}
        return json.dumps(record | {"device": event.name, "text": event.text})
    return f"# {stamp} {event.text}" if fmt == "csv" else f"{stamp}  EVENT  {event.text}"


class RoundExplainer(Protocol):
    """What `watch --explain` adds (gpudiag/telemetry/explain.py's Explainer): columns it
    fills in each sample's values (name: table width), and lines under each round."""

    columns: dict[str, int]

    def __call__(self, samples: list[Sample], nvml: Nvml | None = None) -> list[str]: ...


def watch(
    nvml: Nvml,
    interval: float,
    count: int | None,
    fmt: str,
    write: Callable[[str], None],
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
    events: Callable[[], list[DeviceEvent]] | None = None,
    explain: RoundExplainer | None = None,
    width: int | None = None,
) -> int:
    """Sample every GPU `count` times (forever when None), `interval` seconds apart,
    writing each line through `write`, and before each round the device events since
    the last (`events`, a DeviceWatch's poll on a live node); `explain` (--explain's,
    gpudiag/telemetry/explain.py) fills each sample's bound-by column and gives the
    lines to print under the round. Returns the rounds taken."""
    gpus = gpu_count(nvml)
    rounds = 0
    next_at = clock()
    previous: dict[int, Sample] = {}
    while count is None or rounds < count:
        for event in events() if events is not None else ():
            write(format_event(event, fmt))
        samples = sample_node(nvml, gpus, previous)
        previous = {s.gpu: s for s in samples}
        header_due = rounds % 20 == 0 if fmt == "table" else rounds == 0
        notes = explain(samples) if explain is not None else []
        extra = explain.columns if explain is not None else None
        rows = format_rows(samples, fmt, header_due, extra, width=width)
        for line in (*rows, *notes):
            write(line)
        rounds += 1
        if count is not None and rounds >= count:
            break
        next_at = max(next_at + interval, clock())  # behind (suspended): start afresh
        sleep(max(0.0, next_at - clock()))
    return rounds


def replay(
    recorded: Sequence[tuple[float, Nvml]],
    fmt: str,
    write: Callable[[str], None],
    count: int | None = None,
    width: int | None = None,
    explain: RoundExplainer | None = None,
) -> int:
    """Print a capture's recorded samples (`gpudiag capture --samples N`) in order, each
    stamped with the time it was recorded: `recorded` holds (time, NVML of that sample).
    No waiting: the recording is shown as it was taken. A capture does not record the
    NVLink throughput counters, so those columns say so. `explain` (--explain's) judges
    each sample's recorded counter window (a capture records the GPM window since the
    sample before). Returns the rounds printed."""
    if not recorded:
        return 0
    gpus = gpu_count(recorded[0][1])
    shown = list(recorded)[:count] if count is not None else list(recorded)
    previous: dict[int, Sample] = {}
    extra = explain.columns if explain is not None else None
    for rounds, (when, nvml) in enumerate(shown):
        samples = sample_node(nvml, gpus, previous, when)
        previous = {s.gpu: s for s in samples}
        header_due = rounds % 20 == 0 if fmt == "table" else rounds == 0
        notes = explain(samples, nvml) if explain is not None else []
        for line in (*format_rows(samples, fmt, header_due, extra, width=width), *notes):
            write(line)
    return len(shown)


# ------------------------------------------------------------------ the TUI's watch screen

_BLOCKS = "▁▂▃▄▅▆▇█"
NVLINK_WIDTH = 100  # the watch screen shows NVLink throughput from this width on


def spark(values: list[float], width: int, scale: float | None = None) -> str:
    """The last `width` values as block characters, scaled from 0 to `scale` (a power
    limit, 100%) or to their maximum where that is higher or there is none (a flat line
    at the bottom when all are equal to 0)."""
    shown = values[-width:] if width > 0 else []
    top = max(max(shown, default=0.0), scale or 0.0) or 1.0
    return "".join(_BLOCKS[min(7, max(0, int(v / top * 7.999)))] for v in shown)


def screen_lines(
    history: History,
    gpus: int,
    width: int,
    lost: Collection[int] = (),
    limits: Mapping[int, float] | None = None,
    extra: Mapping[int, Sequence[str]] | None = None,
) -> list[str]:
    """The watch screen: per GPU, a line of the latest values (NVLink throughput, TX/RX
    in GB/s, where `width` leaves room: 100 columns) and a line of sparklines of power and
    utilisation over the history, sized to `width` columns. A GPU that answers nothing
    gets one line saying why instead of a dash in every column: LOST where NVML says it
    is lost or where the snapshot found it lost (`lost`: a recording of a lost GPU holds
    only the call that failed), else the reasons. Power bars are scaled to each GPU's
    power limit (`limits`, W), utilisation to 100%: an idle 69 W of 700 is a low bar.
    `extra`: more lines under a GPU's (what bounds it: gpudiag/telemetry/explain.py)."""
    from gpudiag.views import THROTTLE_SHORT

    lines = []
    spark_width = max(8, (width - 24) // 2)
    for gpu in range(gpus):
        sample = history.latest.get(gpu)
        if sample is None:
            lines.append(f"GPU{gpu:<2} not sampled yet")
            continue
        if all(sample.values.get(name) is None for name in OUTPUT_COLUMNS):
            reasons = set(sample.errors.values())
            if "GpuIsLost" in reasons or gpu in lost:
                why = "LOST: the GPU does not answer (off the bus or hung); reset or reboot"
            else:
                why = f"no reading: {', '.join(sorted(reasons)) or 'nothing answered'}"
            lines += textwrap.wrap(f"GPU{gpu:<2}  {why}", max(20, width), subsequent_indent=" " * 6)
            continue
        cell = {name: _cell(sample, name) for name in OUTPUT_COLUMNS}
        throttle = ",".join(THROTTLE_SHORT.get(n, n) for n in cell["throttle"].split(","))
        nvlink = f"nvl {cell['nvl_tx']:>5}/{cell['nvl_rx']:<5}G  " if width >= NVLINK_WIDTH else ""
        line = (
            f"GPU{gpu:<2} {cell['power']:>5}W {cell['temp']:>4}C  sm {cell['sm']:>4}  "
            f"mem {cell['mem']:>4}  util {cell['util']:>4}%  fb {cell['fb']:>6}M  "
            f"{nvlink}{throttle}"
        )
        # wrapped, not cut: the throttle reasons at the end are the reason a GPU is slow
        lines += textwrap.wrap(line, max(20, width), subsequent_indent=" " * 6) or [line]
        power = spark(history.values(gpu, "power"), spark_width, (limits or {}).get(gpu))
        util = spark(history.values(gpu, "util"), spark_width, 100.0)
        lines.append(f"      power {power:<{spark_width}}  util {util}")
        lines += (extra or {}).get(gpu, ())
    return lines
