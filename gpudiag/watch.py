"""`gpudiag watch`: every GPU sampled at an interval, one row per GPU per sample, as
`nvidia-smi dmon` prints it; and the history the TUI's watch screen draws sparklines from.

Each sample is a few NVML calls per GPU (power, temperature, SM and memory clocks,
utilisation, memory used, throttle reasons, volatile uncorrected ECC, PCIe replays, the
number of compute processes),
through the one NVML interface, so a replay (`--nvml-replay`, the demo) answers it as a
live node does. A call that fails leaves its cell empty ("-") with the reason kept in
`Sample.errors`; a lost GPU says so in every cell, never a zero.

`gpudiag --replay CAPTURE watch` prints the samples a capture recorded
(`gpudiag capture OUT --samples N --interval S`), in order, at their recorded times
(`replay`).

On a live node, device events (a GPU, NIC or NVMe drive removed or added, a driver
unbound; from pyudev) and Xid events (from /dev/kmsg) are printed as they arrive
(gpudiag/device_events.py).
NVLink throughput is not sampled: NVML gives it only through nvmlDeviceGetFieldValues,
which the one-primitive NVML interface (integer arguments) does not carry yet.

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
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpudiag.device_events import DeviceEvent
from gpudiag.nvml import Nvml, NvmlError

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
NUMERIC = tuple(c.name for c in COLUMNS if c.name != "throttle")


@dataclass(frozen=True)
class Sample:
    """One GPU at one moment: a value per column (None where the call failed, with the
    reason in `errors`)."""

    time: float
    gpu: int
    values: dict[str, float | str | None]
    errors: dict[str, str] = field(default_factory=dict)


def gpu_count(nvml: Nvml) -> int:
    """How many GPUs NVML sees; raises NvmlError when NVML cannot answer."""
    return int(nvml.call("nvmlDeviceGetCount"))


def sample_gpu(nvml: Nvml, gpu: int, now: float | None = None) -> Sample:
    """Every column of one GPU, one NVML call each (a call shared by two columns, as
    utilisation is, is made once)."""
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
    return Sample(time.time() if now is None else now, gpu, values, errors)


def sample_node(nvml: Nvml, count: int) -> list[Sample]:
    """One sample of every GPU, all stamped with the same time."""
    now = time.time()
    return [sample_gpu(nvml, gpu, now) for gpu in range(count)]


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

HEADERS = ("time", "gpu", *(c.name for c in COLUMNS))
WIDTHS = {"time": 8, "gpu": 3, "throttle": 0}


def _cell(sample: Sample, name: str) -> str:
    value = sample.values.get(name)
    if value is None:
        return "LOST" if sample.errors.get(name) == "GpuIsLost" else "-"
    return f"{value:g}" if isinstance(value, float) else str(value)


def format_rows(samples: list[Sample], fmt: str, first: bool) -> Iterator[str]:
    """The lines to print for one round of samples: table (a header every 20 rounds
    is the caller's choice via `first`), csv or jsonl."""
    if fmt == "jsonl":
        for s in samples:
            record = {"time": round(s.time, 3), "gpu": s.gpu, **s.values}
            if s.errors:
                record["errors"] = s.errors
            yield json.dumps(record)
        return
    if fmt == "csv":
        buffer = io.StringIO()
        writer = csv.writer(buffer, lineterminator="\n")
        if first:
            writer.writerow(HEADERS)
        for s in samples:
            stamp = time.strftime("%H:%M:%S", time.localtime(s.time))
            writer.writerow([stamp, s.gpu, *(_cell(s, c.name) for c in COLUMNS)])
        yield buffer.getvalue().rstrip("\n")
        return
    widths = {c.name: max(len(c.name), 6) for c in COLUMNS} | WIDTHS

    def line(cells: Sequence[str]) -> str:
        pairs = zip(HEADERS, cells, strict=True)
        return "  ".join(f"{c:>{widths[h]}}" if widths[h] else c for h, c in pairs).rstrip()

    if first:
        yield line(HEADERS)
        yield line(("", "", *(c.unit for c in COLUMNS)))
    for s in samples:
        stamp = time.strftime("%H:%M:%S", time.localtime(s.time))
        yield line([stamp, str(s.gpu), *(_cell(s, c.name) for c in COLUMNS)])


def format_event(event: DeviceEvent, fmt: str) -> str:
    """A device event in the output's form (a csv comment line for csv)."""
    stamp = time.strftime("%H:%M:%S", time.localtime(event.time))
    if fmt == "jsonl":
        record = {"time": round(event.time, 3), "event": event.action, "kind": event.kind}
        return json.dumps(record | {"device": event.name, "text": event.text})
    return f"# {stamp} {event.text}" if fmt == "csv" else f"{stamp}  EVENT  {event.text}"


def watch(
    nvml: Nvml,
    interval: float,
    count: int | None,
    fmt: str,
    write: Callable[[str], None],
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
    events: Callable[[], list[DeviceEvent]] | None = None,
) -> int:
    """Sample every GPU `count` times (forever when None), `interval` seconds apart,
    writing each line through `write`, and before each round the device events since
    the last (`events`, a DeviceWatch's poll on a live node). Returns the rounds taken."""
    gpus = gpu_count(nvml)
    rounds = 0
    next_at = clock()
    while count is None or rounds < count:
        for event in events() if events is not None else ():
            write(format_event(event, fmt))
        samples = sample_node(nvml, gpus)
        header_due = rounds % 20 == 0 if fmt == "table" else rounds == 0
        for line in format_rows(samples, fmt, first=header_due):
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
) -> int:
    """Print a capture's recorded samples (`gpudiag capture --samples N`) in order, each
    stamped with the time it was recorded: `recorded` holds (time, NVML of that sample).
    No waiting: the recording is shown as it was taken. Returns the rounds printed."""
    if not recorded:
        return 0
    gpus = gpu_count(recorded[0][1])
    shown = list(recorded)[:count] if count is not None else list(recorded)
    for rounds, (when, nvml) in enumerate(shown):
        samples = [sample_gpu(nvml, gpu, when) for gpu in range(gpus)]
        header_due = rounds % 20 == 0 if fmt == "table" else rounds == 0
        for line in format_rows(samples, fmt, first=header_due):
            write(line)
    return len(shown)


# ------------------------------------------------------------------ the TUI's watch screen

_BLOCKS = "▁▂▃▄▅▆▇█"


def spark(values: list[float], width: int) -> str:
    """The last `width` values as block characters, scaled from 0 to their maximum (a
    flat line at the bottom when all are equal to 0)."""
    shown = values[-width:] if width > 0 else []
    top = max(shown, default=0.0) or 1.0
    return "".join(_BLOCKS[min(7, max(0, int(v / top * 7.999)))] for v in shown)


def screen_lines(history: History, gpus: int, width: int) -> list[str]:
    """The watch screen: per GPU, a line of the latest values and a line of sparklines of
    power and utilisation over the history, sized to `width` columns."""
    from gpudiag.views import THROTTLE_SHORT

    lines = []
    spark_width = max(8, (width - 24) // 2)
    for gpu in range(gpus):
        sample = history.latest.get(gpu)
        if sample is None:
            lines.append(f"GPU{gpu:<2} not sampled yet")
            continue
        cell = {c.name: _cell(sample, c.name) for c in COLUMNS}
        throttle = ",".join(THROTTLE_SHORT.get(n, n) for n in cell["throttle"].split(","))
        lines.append(
            f"GPU{gpu:<2} {cell['power']:>5}W {cell['temp']:>4}C  sm {cell['sm']:>4}  "
            f"mem {cell['mem']:>4}  util {cell['util']:>4}%  fb {cell['fb']:>6}M  "
            f"{throttle}"[: max(20, width)]
        )
        power = spark(history.values(gpu, "power"), spark_width)
        util = spark(history.values(gpu, "util"), spark_width)
        lines.append(f"      power {power:<{spark_width}}  util {util}")
    return lines
