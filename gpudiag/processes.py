"""The processes NVML reports on each GPU, described as nvitop shows them (name, user,
command line, CPU use), with psutil: for the kernels' "GPUs busy?" question and the GPU
screen. A process that has gone, or that this user may not inspect, says so."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

import psutil

from gpudiag.model import Reading

_PROCESSES = re.compile(r"^gpu\.(\d+)\.processes\.(compute|graphics)$")


@dataclass(frozen=True)
class GpuProcess:
    """One process on one GPU."""

    gpu: int
    pid: int
    text: str  # "1234 python (alice, 35% CPU): python train.py --lr 3e-4"


_SEEN: dict[int, psutil.Process] = {}  # psutil measures CPU use between two calls on one object
_SEEN_MAX = 4096


def describe(pid: int) -> str:
    """pid, name, user, CPU share and command line of a process (psutil), or why not.
    The CPU share is since this process was last described (watch: the last sample); the
    first time it is not known yet ("CPU ?"), never a made-up 0%."""
    first = pid not in _SEEN
    try:
        process = _SEEN.get(pid) or psutil.Process(pid)
        with process.oneshot():
            name = process.name()
            user = process.username()
            cpu = process.cpu_percent(interval=None)  # since the last call: no sleep
            command = " ".join(process.cmdline())[:120]
    except psutil.NoSuchProcess:
        _SEEN.pop(pid, None)
        return f"{pid} (gone)"
    except psutil.AccessDenied:
        return f"{pid} (not visible to this user)"
    if len(_SEEN) >= _SEEN_MAX:
        _SEEN.clear()
    _SEEN[pid] = process
    share = "CPU ?" if first else f"{cpu:.0f}% CPU"
    return f"{pid} {name} ({user}, {share}): {command or name}"


def gpu_processes(readings: Mapping[str, Reading]) -> list[GpuProcess]:
    """Every process NVML listed on a GPU, in GPU order."""
    found: list[GpuProcess] = []
    for key in sorted(readings):
        match = _PROCESSES.match(key)
        reading = readings[key]
        if not match or not reading.ok or not isinstance(reading.value, list):
            continue
        for pid in reading.value:
            found.append(GpuProcess(int(match.group(1)), int(pid), describe(int(pid))))
    return sorted(found, key=lambda p: (p.gpu, p.pid))


def host_load() -> float:
    """The host's CPU use (percent of all CPUs) since the last call; a busy CPU makes a
    kernel figure untrustworthy."""
    return float(psutil.cpu_percent(interval=None))
