"""gpudiag watch: samples of every GPU on the demo replays (values the replay records),
failed calls as gaps with their reason, the ring buffer's bound, the command end to end."""

from __future__ import annotations

import csv
import json
import os
import re
import shlex
import shutil
import sys
from pathlib import Path

import psutil
import pytest

from gpudiag.demo import demo_file
from gpudiag.nvml import Nvml, ReplayBackend
from gpudiag.processes import describe
from gpudiag.watch import (
    FIELD_NVLINK_THROUGHPUT_DATA_RX,
    FIELD_NVLINK_THROUGHPUT_DATA_TX,
    FIRST_SAMPLE,
    NO_RATE_IN_REPLAY,
    SCOPE_ALL_LINKS,
    History,
    Sample,
    format_rows,
    sample_gpu,
    sample_node,
    watch,
)

from conftest import run_cli


def _demo(name: str = "faulty") -> Nvml:
    return Nvml(ReplayBackend.from_file(demo_file(name)))


def test_a_sample_reads_what_the_replay_records() -> None:
    samples = sample_node(_demo(), 8)
    assert [s.gpu for s in samples] == list(range(8))
    first = samples[0]
    assert first.values["power"] == 69.0  # 69000 mW in the replay
    assert first.values["temp"] == 41 and first.values["sm"] == 345
    assert first.values["mem"] == 2619 and first.values["throttle"] == "idle"
    assert first.values["procs"] == 0
    # the replay's NVLink counters cannot give a rate: said, never a zero
    assert first.values["nvl_tx"] is None and first.values["nvl_rx"] is None
    assert first.errors == {"nvl_tx": NO_RATE_IN_REPLAY, "nvl_rx": NO_RATE_IN_REPLAY}
    assert samples[6].values["throttle"] == "HwSlowdown,HwThermalSlowdown"


def test_a_lost_gpu_is_lost_in_every_cell_never_zero() -> None:
    lost = sample_gpu(_demo(), 7)
    assert set(lost.values.values()) == {None}
    assert set(lost.errors.values()) == {"GpuIsLost"}
    (row,) = format_rows([lost], "table", first=False)
    assert row.split()[2:] == ["LOST"] * 13  # the NVLink cells too


def test_one_failing_call_leaves_one_gap() -> None:
    device = {
        "nvmlDeviceGetPowerUsage": {"error": "NotSupported"},
        "nvmlDeviceGetTemperature": {"0": 55},
        "nvmlDeviceGetClockInfo": {"1": 1980, "2": 2619},
        "nvmlDeviceGetUtilizationRates": {"gpu": 97, "memory": 40},
        "nvmlDeviceGetMemoryInfo": {"total": 2**36, "free": 2**35, "used": 2**35},
    }
    nvml = Nvml(ReplayBackend({"format": "gpudiag-nvml-replay", "version": 1, "devices": [device]}))
    sample = sample_gpu(nvml, 0)
    assert sample.values["power"] is None and sample.errors["power"] == "NotSupported"
    assert sample.values["util"] == 97 and sample.values["mutil"] == 40
    assert sample.values["fb"] == 2**15  # MiB
    assert sample.errors["replay"] == "NotRecorded"  # never an invented value
    assert json.loads(next(format_rows([sample], "jsonl", True)))["power"] is None


def _one_gpu(failure: str, pci_info: object) -> Nvml:
    device = {
        "nvmlDeviceGetPowerUsage": {"error": failure},
        "nvmlDeviceGetTemperature": {"0": 55},
        "nvmlDeviceGetClockInfo": {"1": 1980, "2": 2619},
        "nvmlDeviceGetPciInfo": pci_info,
    }
    return Nvml(ReplayBackend({"format": "gpudiag-nvml-replay", "version": 1, "devices": [device]}))


def test_a_gpu_lost_by_one_call_is_lost_in_every_cell() -> None:
    """GpuIsLost from one column's call (the others answered first, or from a cache):
    the GPU is lost, LOST in every cell, as the snapshot's GPU001 says."""
    sample = sample_gpu(_one_gpu("GpuIsLost", {"busId": "00000000:18:00.0"}), 0)
    assert set(sample.values.values()) == {None}
    assert set(sample.errors.values()) == {"GpuIsLost"}


def test_an_unknown_error_is_lost_only_when_the_recheck_fails() -> None:
    answering = sample_gpu(_one_gpu("Unknown", {"busId": "00000000:18:00.0"}), 0)
    assert answering.errors["power"] == "Unknown" and answering.values["temp"] == 55
    lost = sample_gpu(_one_gpu("Unknown", {"error": "Unknown"}), 0)
    assert set(lost.errors.values()) == {"GpuIsLost"}


def test_history_is_a_ring_buffer() -> None:
    history = History(length=50)
    for i in range(1000):
        history.add(Sample(float(i), 0, {"power": float(i), "temp": None}))
    assert history.values(0, "power") == [float(i) for i in range(950, 1000)]
    assert len(history.series[(0, "temp")]) == 50 and history.values(0, "temp") == []
    assert history.latest[0].time == 999.0


def test_watch_waits_out_the_interval_between_rounds() -> None:
    lines: list[str] = []
    slept: list[float] = []
    now = [100.0]

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        now[0] += seconds + 0.25  # the next round's sampling takes 0.25 s

    rounds = watch(_demo("healthy"), 2.0, 3, "csv", lines.append, sleep, lambda: now[0])
    assert rounds == 3 and slept == [2.0, 1.75]  # the interval is kept, not added to
    assert lines[0].splitlines()[0].startswith("time,gpu,power,temp,sm,mem")
    assert sum(len(chunk.splitlines()) for chunk in lines) == 1 + 3 * 8


def test_watch_command_on_the_demo() -> None:
    run = run_cli(
        "watch", "--demo", "faulty", "--count", "2", "--interval", "0.05", "--format", "jsonl"
    )
    assert run.returncode == 0, run.stderr
    records = [json.loads(line) for line in run.stdout.splitlines()]
    assert len(records) == 16 and [r["gpu"] for r in records[:8]] == list(range(8))
    assert records[7]["errors"]["power"] == "GpuIsLost"


def test_watch_without_nvml_says_why_in_one_line(tmp_path) -> None:
    bad = tmp_path / "no-driver.toml"
    bad.write_text(
        'format = "gpudiag-nvml-replay"\nversion = 1\n[init]\nerror = "DriverNotLoaded"\n'
    )
    run = run_cli("--nvml-replay", str(bad), "watch", "--count", "1")
    assert run.returncode == 3 and run.stdout == ""
    (line,) = run.stderr.splitlines()
    assert "DriverNotLoaded" in line and "gpudiag watch --demo faulty" in line
    assert run_cli("watch", "--interval", "0").returncode == 3


def test_screen_lines_show_latest_values_and_sparklines() -> None:
    from gpudiag.watch import screen_lines, spark

    history = History(length=10)
    for i in range(12):
        for sample in sample_node(_demo(), 8):
            values = dict(sample.values)
            if sample.gpu == 0:
                values["power"] = float(100 + 50 * i)  # a rising load on GPU 0
            history.add(Sample(float(i), sample.gpu, values, sample.errors))
    lines = screen_lines(history, 8, 76)
    # two lines per GPU; GPU 6's throttle reasons wrap onto a third at 76 columns (they
    # were cut); the lost GPU 7 one line, saying so
    assert len(lines) == 16 and lines[13].split() == ["HwSlow,HwTherm"]
    assert lines[0].startswith("GPU0    650W   41C  sm  345")
    assert lines[1].split()[1] == spark([float(100 + 50 * i) for i in range(2, 12)], 26)
    assert lines[1].split()[1][-1] == "█" and lines[1].split()[1][0] < "▆"
    assert lines[15].startswith("GPU7   LOST: the GPU does not answer")
    assert spark([0.0, 0.0], 4) == "▁▁"


class CountingNvlink:
    """A backend of one GPU whose NVLink data counters grow by a known amount per read:
    it answers only the GPU count and nvmlDeviceGetFieldValues with the two throughput
    fields over every link (scope UINT_MAX), and NotSupported otherwise (the real call
    goes through pynvml and the C stand-in in test_nvml_standin.py)."""

    description = "counting NVLink counters"

    def __init__(self, tx_step_kib: int, rx_step_kib: int) -> None:
        self.steps = {FIELD_NVLINK_THROUGHPUT_DATA_TX: tx_step_kib}
        self.steps[FIELD_NVLINK_THROUGHPUT_DATA_RX] = rx_step_kib
        self.reads = {FIELD_NVLINK_THROUGHPUT_DATA_TX: 0, FIELD_NVLINK_THROUGHPUT_DATA_RX: 0}

    def init(self) -> None:
        return None

    def shutdown(self) -> None:
        return None

    def call(self, function: str, device: int | None, *args: int) -> object:
        from gpudiag.nvml import NvmlError

        if function == "nvmlDeviceGetCount" and device is None:
            return 1
        if function == "nvmlDeviceGetFieldValues" and device == 0:
            field, scope = args
            assert scope == SCOPE_ALL_LINKS and field in self.steps, args
            self.reads[field] += 1
            return 5_000_000 + self.reads[field] * self.steps[field]
        raise NvmlError("NotSupported", function)


def test_nvlink_throughput_is_the_counters_difference_over_time() -> None:
    nvml = Nvml(CountingNvlink(tx_step_kib=2_000_000, rx_step_kib=500_000))
    first = sample_gpu(nvml, 0, now=10.0)
    assert first.values["nvl_tx"] is None and first.errors["nvl_tx"] == FIRST_SAMPLE
    second = sample_gpu(nvml, 0, now=12.0, previous=first)
    # 2,000,000 KiB in 2 s: 1.024 GB/s; 500,000 KiB: 0.256 GB/s
    assert (second.values["nvl_tx"], second.values["nvl_rx"]) == (1.02, 0.26)
    assert "nvl_tx" not in second.errors and second.errors["power"] == "NotSupported"
    back = Sample(13.0, 0, {}, counters={"nvl_tx": 10**12, "nvl_rx": 0})
    third = sample_gpu(nvml, 0, now=14.0, previous=back)
    assert third.values["nvl_tx"] is None and "went back" in third.errors["nvl_tx"]
    assert third.values["nvl_rx"] is not None
    (chunk,) = format_rows([second], "csv", first=True)
    rows = chunk.splitlines()
    header, row = rows[0].split(","), rows[1].split(",")
    assert row[header.index("nvl_tx")] == "1.02" and row[header.index("nvl_rx")] == "0.26"
    (table_header, units, line) = format_rows([second], "table", first=True)
    assert "nvl_tx" in table_header and "GB/s" in units and "1.02" in line


def test_watch_carries_the_last_sample_for_nvlink() -> None:
    lines: list[str] = []
    now = [0.0]

    def sleep(seconds: float) -> None:
        now[0] += seconds

    nvml = Nvml(CountingNvlink(tx_step_kib=1_000_000, rx_step_kib=0))
    watch(nvml, 1.0, 3, "jsonl", lines.append, sleep, lambda: now[0])
    records = [json.loads(line) for line in lines]
    assert records[0]["nvl_tx"] is None and records[0]["errors"]["nvl_tx"] == FIRST_SAMPLE
    assert all(r["nvl_tx"] > 0 and r["nvl_rx"] == 0.0 for r in records[1:])


def test_watch_screen_shows_nvlink_where_it_fits() -> None:
    from gpudiag.watch import screen_lines

    history = History()
    nvml = Nvml(CountingNvlink(tx_step_kib=2_000_000, rx_step_kib=500_000))
    history.add(sample_gpu(nvml, 0, now=10.0))
    history.add(sample_gpu(nvml, 0, now=12.0, previous=history.latest[0]))
    assert "nvl  1.02/0.26 G" in screen_lines(history, 1, 110)[0]
    assert "nvl" not in screen_lines(history, 1, 77)[0]  # at 80 columns there is no room


def _with_processes(processes: list[dict[str, int]]) -> Nvml:
    device = {"nvmlDeviceGetComputeRunningProcesses": processes}
    return Nvml(ReplayBackend({"format": "gpudiag-nvml-replay", "version": 1, "devices": [device]}))


def test_a_replay_shows_its_processes_as_recorded_never_as_this_machines() -> None:
    me = os.getpid()  # a pid alive here: a replay must not describe it with psutil
    nvml = _with_processes([{"pid": me, "usedGpuMemory": 3 * 2**30}, {"pid": 77}])
    (sample,) = sample_node(nvml, 1)
    assert sample.values["procs"] == 2
    assert sample.processes == (
        f"{me} (recorded, 3072 MiB; not a process of this machine)",
        "77 (recorded; not a process of this machine)",
    )
    table = list(format_rows([sample], "table", first=False))
    assert len(table) == 3 and table[1].split()[:2] == ["proc", str(me)]
    record = json.loads(next(format_rows([sample], "jsonl", True)))
    assert record["processes"] == list(sample.processes)
    rows = list(csv.reader(next(format_rows([sample], "csv", True)).splitlines()))
    assert rows[0][-1] == "processes" and rows[1][-1] == "; ".join(sample.processes)
    assert json.loads(next(format_rows(sample_node(_demo(), 1), "jsonl", True)))["processes"] == []


def test_a_live_process_is_described_by_psutil_with_its_cpu_use() -> None:
    me = os.getpid()
    nvml = _with_processes([{"pid": me}, {"pid": 2**22 + 1}])  # beyond pid_max: gone
    first, second = (sample_node(nvml, 1, describe=describe)[0] for _ in range(2))
    name, user = psutil.Process(me).name(), psutil.Process(me).username()
    assert first.processes[0].startswith(f"{me} {name} ({user}, CPU ?): ")
    # this process's command line as the kernel gives it (pytest's, or an xdist worker's)
    command = " ".join(Path("/proc/self/cmdline").read_text().rstrip("\0").split("\0"))
    pattern = rf"{me} {re.escape(name)} \({user}, \d+% CPU\): {re.escape(command[:120])}$"
    assert re.match(pattern, second.processes[0]), second.processes[0]
    assert first.processes[1] == f"{2**22 + 1} (gone)"


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
def test_watch_in_an_80_column_terminal_keeps_one_line_per_gpu() -> None:
    """As nvidia-smi dmon: at 80 columns each GPU's sample is one line (columns dropped
    by width, throttle reasons in the GPU screen's short names), none wrapped; a pipe
    still gets every column (csv unchanged)."""
    from tmux_pane import start_session, tmux, wait_for

    session = f"gpudiag-watch-{os.getpid()}"
    command = shlex.join(
        [sys.executable, "-m", "gpudiag", "watch", "--demo", "faulty", "--count", "1"]
    )
    start_session(session, f"{command}; echo EXIT=$?; sleep 30", width=80, height=24)
    try:
        pane = wait_for(session, "EXIT=", timeout=20)
    finally:
        tmux("kill-session", "-t", session)
    shown = [line for line in pane.split("EXIT=")[0].splitlines() if line.strip()]
    assert len(shown) == 2 + 8, pane  # header, units, GPUs 0-7: nothing wrapped
    assert shown[0].split()[:3] == ["time", "gpu", "power"] and shown[0].endswith("throttle")
    assert re.search(r"^\d\d:\d\d:\d\d +6 .* HwSlow,HwTherm$", shown[8]), shown[8]
