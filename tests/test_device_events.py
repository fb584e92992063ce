"""Device events for watch: real pyudev Device objects built from synthetic uevent
environments go through describe(), the code a live node's netlink monitor feeds (no udev
daemon runs here, and no GPU is removed); the poll loop and watch's printing take many
events through objects with the Device attributes describe() reads."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass, field

import pytest

from gpudiag.demo import demo_file
from gpudiag.device_events import DeviceWatch
from gpudiag.nvml import Nvml, ReplayBackend
from gpudiag.watch import watch

# libudev builds a device from the environment once per process, so each synthetic
# uevent becomes a real pyudev Device in a process of its own, and goes through describe()
DESCRIBE = """
import json, pyudev
from gpudiag.device_events import describe
event = describe(pyudev.Devices.from_environment(pyudev.Context()), now=0.0)
print(json.dumps(event and [event.kind, event.name, event.text]))
"""
GPU_PATH = "/devices/pci0000:17/0000:17:01.0/0000:18:00.0"
GPU = {"SUBSYSTEM": "pci", "DEVPATH": GPU_PATH, "PCI_ID": "10DE:2330", "PCI_CLASS": "30200"}


def _described(**env: str) -> list[str] | None:
    run = subprocess.run(
        [sys.executable, "-c", DESCRIBE],
        env={**os.environ, "SEQNUM": "7", **env},
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return json.loads(run.stdout)


@dataclass
class Uevent:
    """The attributes of a pyudev Device that describe() reads, for feeding the poll loop
    many events in one process (the real Device is checked above)."""

    action: str
    subsystem: str
    sys_name: str
    driver: str | None = None
    properties: dict[str, str] = field(default_factory=dict)


class Queue:
    """A monitor whose poll(timeout=0) hands out queued devices, as pyudev's does."""

    def __init__(self, devices: list[Uevent]) -> None:
        self.devices = devices

    def poll(self, timeout: float | None = None) -> Uevent | None:
        assert timeout == 0  # never blocks the sampling loop
        return self.devices.pop(0) if self.devices else None


def test_a_gpu_falling_off_the_bus_is_named() -> None:
    kind, name, text = _described(ACTION="remove", DRIVER="nvidia", **GPU)
    assert (kind, name) == ("GPU", "0000:18:00.0")
    assert text == (
        "GPU 0000:18:00.0 removed (driver nvidia): the GPU is off the bus or without its driver"
    )
    unbound = _described(ACTION="unbind", DRIVER="nvidia", **GPU)
    assert unbound[2].startswith("driver nvidia unbound from GPU 0000:18:00.0")
    assert _described(ACTION="change", **GPU) is None  # not an event watch reports
    drive = {"PCI_ID": "144D:A80A", "PCI_CLASS": "10802", "DEVPATH": "/devices/pci0/0000:81:00.0"}
    assert _described(ACTION="remove", SUBSYSTEM="pci", **drive)[0] == "NVMe"


def test_nics_and_drives_are_told_apart_and_other_events_ignored() -> None:
    nic = Uevent("add", "net", "ib0")
    drive = Uevent(
        "remove", "pci", "0000:81:00.0", None, {"PCI_ID": "144D:A80A", "PCI_CLASS": "10802"}
    )
    usb = Uevent("add", "usb", "1-1")
    change = Uevent("change", "pci", "0000:18:00.0", "nvidia", {"PCI_ID": "10DE:2330"})
    events = DeviceWatch(Queue([nic, drive, usb, change])).poll()
    assert [e.text for e in events] == ["NIC ib0 added", "NVMe 0000:81:00.0 removed"]


def test_watch_prints_events_before_the_round() -> None:
    lines: list[str] = []
    gpu = Uevent(
        "remove", "pci", "0000:18:00.0", "nvidia", {"PCI_ID": "10DE:2330", "PCI_CLASS": "30200"}
    )
    pending = DeviceWatch(Queue([gpu]))
    nvml = Nvml(ReplayBackend.from_file(demo_file("healthy")))
    watch(nvml, 0.01, 2, "jsonl", lines.append, events=pending.poll)
    first = json.loads(lines[0])
    assert (first["event"], first["kind"], first["device"]) == ("remove", "GPU", "0000:18:00.0")
    assert len(lines) == 1 + 2 * 8  # the event once, then two rounds of 8 GPUs


def test_xid_events_are_followed_as_the_kernel_logs_them(tmp_path) -> None:
    from gpudiag.device_events import XidFollower

    kmsg = tmp_path / "kmsg"
    os.mkfifo(kmsg)  # non-blocking reads, EAGAIN while nothing waits: as /dev/kmsg
    follower = XidFollower(str(kmsg))
    writer = os.open(kmsg, os.O_WRONLY | os.O_NONBLOCK)
    try:
        assert follower.poll() == []
        os.write(writer, b"6,100,5000000,-;nvidia-nvswitch: probe\n")
        os.write(
            writer,
            b"3,101,6000000,-;NVRM: Xid (PCI:0000:18:00): 79, pid='<unknown>',"
            b" name=<unknown>, GPU has fallen off the bus.\n",
        )
        os.write(
            writer,
            b"4,102,7000000,-;NVRM: Xid (PCI:0000:2a:00): 48, An uncorrectable double bit error\n",
        )
        texts = [e.text for e in follower.poll()]
        assert texts == ["Xid 79 on GPU 0000:18:00.0", "Xid 48 on GPU 0000:2a:00.0"]
        assert follower.poll() == []  # each record once
    finally:
        os.close(writer)
        follower.close()


def test_the_real_kernel_log_can_be_followed() -> None:
    from gpudiag.device_events import XidFollower

    follower, why = XidFollower.open()
    if follower is None:
        pytest.skip(f"this user cannot read the kernel log: {why}")
    try:
        # from its end: the history (the faults probe's) is not repeated, and no GPU here
        assert follower.poll() == []
    finally:
        follower.close()
