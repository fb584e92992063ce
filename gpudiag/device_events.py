"""Device events as they happen, for `gpudiag watch` on a live node: a GPU, NIC or NVMe
drive removed or added, a driver bound or unbound (the moment a GPU falls off the bus),
from the kernel's uevents through pyudev.

`DeviceWatch` opens a pyudev netlink monitor (kernel uevents: no udev daemon needed) and
drains it without blocking once per sampling round; `describe` turns one pyudev Device
into a line. The tests build real pyudev Devices from synthetic uevent environments and
pass them through `describe`, and feed `DeviceWatch.poll` and watch's printing many
events in one process. The live path (a netlink monitor receiving real uevents
on a GPU node) was not run here: no udev daemon runs on these machines and no device was
removed; replays and captures have no live events and fall back to what sysfs showed.
"""

from __future__ import annotations

import errno
import os
import time
from dataclasses import dataclass
from typing import Any, Protocol

SUBSYSTEMS = ("pci", "net", "nvme")
ACTIONS = {"add": "added", "remove": "removed", "bind": "bound", "unbind": "unbound"}
NVIDIA = "10de"


@dataclass(frozen=True)
class DeviceEvent:
    """One device event: when, what happened, to what kind of device, and a line to print."""

    time: float
    action: str
    kind: str
    name: str
    text: str


def _pci_kind(properties: Any) -> str:
    vendor = str(properties.get("PCI_ID", "")).split(":")[0].lower()
    pci_class = str(properties.get("PCI_CLASS", "")).lower().rjust(6, "0")
    if vendor == NVIDIA and pci_class.startswith("03"):
        return "GPU"
    if vendor == NVIDIA and pci_class.startswith("068"):
        return "NVSwitch"
    if pci_class.startswith("02"):
        return "NIC"
    if pci_class.startswith("0108"):
        return "NVMe"
    return "PCIe device"


def describe(device: Any, now: float | None = None) -> DeviceEvent | None:
    """The event a pyudev Device carries, as a line; None for events that do not bear on
    the node's GPUs, NICs or drives (other subsystems, 'change' events)."""
    action = device.action
    if action not in ACTIONS or device.subsystem not in SUBSYSTEMS:
        return None
    name = device.sys_name
    if device.subsystem == "pci":
        kind = _pci_kind(device.properties)
    elif device.subsystem == "net":
        kind = "NIC"
    else:
        kind = "NVMe"
    driver = device.driver or device.properties.get("DRIVER")
    if action in ("bind", "unbind"):
        preposition = "to" if action == "bind" else "from"
        text = f"driver {driver or '?'} {ACTIONS[action]} {preposition} {kind} {name}"
    else:
        text = f"{kind} {name} {ACTIONS[action]}" + (f" (driver {driver})" if driver else "")
    if kind == "GPU" and action in ("remove", "unbind"):
        text += ": the GPU is off the bus or without its driver"
    return DeviceEvent(time.time() if now is None else now, action, kind, name, text)


class Monitor(Protocol):
    """What DeviceWatch needs of pyudev.Monitor."""

    def poll(self, timeout: float | None = None) -> Any: ...


class DeviceWatch:
    """Device events since the last poll, from a pyudev monitor (or any Monitor)."""

    def __init__(self, monitor: Monitor) -> None:
        self.monitor = monitor

    @classmethod
    def open(cls) -> tuple[DeviceWatch | None, str]:
        """A watch on this machine's uevents, or None and why not."""
        try:
            import pyudev

            monitor = pyudev.Monitor.from_netlink(pyudev.Context(), source="kernel")
            for subsystem in SUBSYSTEMS:
                monitor.filter_by(subsystem)
            monitor.start()
        except (ImportError, OSError, ValueError) as exc:
            return None, f"device events unavailable: {exc}"
        return cls(monitor), ""

    def poll(self, limit: int = 1000) -> list[DeviceEvent]:
        """Every event waiting (at most `limit`), without blocking."""
        events = []
        for _ in range(limit):
            device = self.monitor.poll(timeout=0)
            if device is None:
                break
            if (event := describe(device)) is not None:
                events.append(event)
        return events


class XidFollower:
    """Xid events as the kernel logs them: /dev/kmsg opened without blocking, moved to its
    end (the history is the faults probe's), and read to its end once per round. Records
    are parsed by the faults probe's parser. On this machine the real /dev/kmsg is opened
    and followed (it holds no Xid); the events themselves are tested through a FIFO that
    behaves as kmsg does (one record per read, EAGAIN when none waits): no Xid was raised."""

    def __init__(self, path: str = "/dev/kmsg") -> None:
        self.fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        try:
            os.lseek(self.fd, 0, os.SEEK_END)
        except OSError as exc:  # a FIFO cannot seek; kmsg can
            if exc.errno != errno.ESPIPE:
                raise

    @classmethod
    def open(cls, path: str = "/dev/kmsg") -> tuple[XidFollower | None, str]:
        """A follower of the kernel log, or None and why not (it needs root, usually)."""
        try:
            return cls(path), ""
        except OSError as exc:
            return None, f"Xid events unavailable: {path}: {exc.strerror}"

    def poll(self, limit: int = 1000) -> list[DeviceEvent]:
        """The Xid events logged since the last poll."""
        from gpudiag.probes.faults import parse_xid_events

        records = []
        for _ in range(limit):
            try:
                record = os.read(self.fd, 8192)
            except BlockingIOError:
                break
            except OSError as exc:
                if exc.errno == errno.EPIPE:  # records overwritten meanwhile: go on
                    continue
                raise
            if not record:
                break
            records.append(record.decode("utf-8", errors="replace"))
        now = time.time()
        return [
            DeviceEvent(now, "xid", "GPU", xid.pci, f"Xid {xid.code} on GPU {xid.pci}")
            for xid in parse_xid_events("".join(records))
        ]

    def close(self) -> None:
        os.close(self.fd)
