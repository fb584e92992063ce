"""The monitor's history: each hour's windows appended to Parquet, one file per hour (or
per part of an hour, when the monitor stops or starts within it), never rewritten,
Hive-partitioned by date: `DIR/date=2026-11-28/HOST-14-00-00.parquet`. One row per GPU
per window: time, node, gpu, the verdict (and its detail), then each metric as a column
(a metric not measured is null, never 0). DuckDB, Polars or Spark read the folder as one
table (`read_parquet('DIR/*/*.parquet', hive_partitioning=true)`).

The monitor keeps the hour in compact arrays (4 bytes a value, float32: an hour of 8 GPUs
at 1 Hz is under 3 MB) and hands it to a short-lived process of its own that writes the Parquet
file (`python -m gpudiag.telemetry.history SPOOL`): Polars costs 45 MB resident when
imported, which the monitor's budget (50 MB) cannot hold.
"""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys
import threading
import time
from array import array
from collections.abc import Sequence
from pathlib import Path

from gpudiag.telemetry.sampler import METRICS, Window
from gpudiag.telemetry.verdicts import Verdict

NUMBERS = (
    *METRICS,
    "sm_clock_mhz",
    "max_sm_clock_mhz",
    "power_w",
    "power_limit_w",
    "temperature_c",
)
SPOOL = ".spool"


class HourBuffer:
    """The windows of the current hour, column by column; `flush` hands them to a writer
    process and starts afresh. A window of another hour flushes first."""

    def __init__(self, folder: Path, host: str, in_process: bool = False) -> None:
        self.folder = folder
        self.host = host
        self.in_process = in_process  # write here, not in a writer process (tests)
        self.started: float | None = None
        self._reset()

    def _reset(self) -> None:
        self.times = array("d")
        self.gpus = array("i")
        self.numbers = {name: array("f") for name in NUMBERS}  # float32: 7 digits
        self.verdicts: list[str] = []  # "kind:detail" per row (a short, repeated string)
        self.started = None

    def __len__(self) -> int:
        return len(self.times)

    def add(self, when: float, windows: Sequence[Window], verdicts: Sequence[Verdict]) -> None:
        """One window of every GPU (the monitor's Latest)."""
        if self.started is not None and int(when // 3600) != int(self.started // 3600):
            self.flush()
        if self.started is None:
            self.started = when
        for window, verdict in zip(windows, verdicts, strict=True):
            self.times.append(when)
            self.gpus.append(window.gpu)
            for name in METRICS:
                value = window.values.get(name)
                self.numbers[name].append(math.nan if value is None else value)
            for name in NUMBERS[len(METRICS) :]:
                value = getattr(window, name)
                self.numbers[name].append(math.nan if value is None else value)
            self.verdicts.append(sys.intern(f"{verdict.kind}:{verdict.detail}"))

    def flush(self, wait: bool = False) -> Path | None:
        """Spool the hour's rows and start the process that writes them; returns the
        spool folder (None when there was nothing)."""
        if not len(self) or self.started is None:
            return None
        stamp = time.strftime("%Y-%m-%dT%H-%M-%S", time.gmtime(self.started))
        spool = self.folder / SPOOL / f"{self.host}-{stamp}"
        spool.mkdir(parents=True, exist_ok=True)
        for name, values in (("time", self.times), ("gpu", self.gpus), *self.numbers.items()):
            (spool / f"{name}.bin").write_bytes(values.tobytes())
        meta = {
            "host": self.host,
            "started": self.started,
            "rows": len(self),
            "numbers": list(NUMBERS),
            "verdicts": self.verdicts,
            "itemsize": {"time": self.times.itemsize, "gpu": self.gpus.itemsize},
        }
        (spool / "meta.json").write_text(json.dumps(meta))
        self._reset()
        if self.in_process:
            write_spool(spool)
            return spool
        command = [sys.executable, "-m", "gpudiag.telemetry.history", str(spool)]
        writer = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
        if wait:
            writer.wait(timeout=300)
        else:  # reaped by a thread: the monitor never waits on it
            threading.Thread(target=writer.wait, daemon=True).start()
        return spool


def write_spool(spool: Path) -> Path:
    """Write one spooled hour as Parquet beside the spool folder (DIR/date=.../); returns
    the file. Runs in the writer process."""
    import numpy as np
    import polars as pl

    from gpudiag.atomic import atomic_target

    meta = json.loads((spool / "meta.json").read_text())
    rows = int(meta["rows"])
    columns: dict[str, object] = {
        "time": np.frombuffer((spool / "time.bin").read_bytes(), dtype=np.float64),
        "node": [meta["host"]] * rows,
        "gpu": np.frombuffer((spool / "gpu.bin").read_bytes(), dtype=np.int32),
        "verdict": [v.partition(":")[0] for v in meta["verdicts"]],
        "verdict_detail": [v.partition(":")[2] for v in meta["verdicts"]],
    }
    for name in meta["numbers"]:
        columns[name] = np.frombuffer((spool / f"{name}.bin").read_bytes(), dtype=np.float32)
    frame = pl.DataFrame(columns).with_columns(
        pl.from_epoch(pl.col("time") * 1_000_000, time_unit="us").alias("time"),
        *(pl.col(name).fill_nan(None) for name in meta["numbers"]),
        pl.col("verdict").cast(pl.Categorical),
    )
    started = float(meta["started"])
    day = time.strftime("%Y-%m-%d", time.gmtime(started))
    target = spool.parent.parent / f"date={day}"
    target.mkdir(parents=True, exist_ok=True)
    path = target / f"{meta['host']}-{time.strftime('%H-%M-%S', time.gmtime(started))}.parquet"
    with atomic_target(path, suffix=".parquet") as temp:
        frame.write_parquet(temp)
    shutil.rmtree(spool)
    return path


def main(argv: list[str]) -> int:
    """`python -m gpudiag.telemetry.history SPOOL`: write one spooled hour."""
    if len(argv) != 1 or not (Path(argv[0]) / "meta.json").is_file():
        print("usage: python -m gpudiag.telemetry.history SPOOL_FOLDER", file=sys.stderr)
        return 3
    try:
        print(write_spool(Path(argv[0])))
    except (OSError, ValueError, KeyError) as exc:
        print(f"gpudiag monitor history: {argv[0]}: {exc}", file=sys.stderr)
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
