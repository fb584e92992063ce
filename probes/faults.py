"""Faults: NVIDIA Xid events from the kernel log, machine checks and EDAC memory errors.

The kernel log is read from /dev/kmsg (root, unless kernel.dmesg_restrict is 0). Where
it cannot be read on the live node, `journalctl -k` (this boot) is asked instead. In a
captured tree, dev/kmsg may be a text file of kmsg records or of `dmesg` lines.
"""

from __future__ import annotations

import errno
import os
import re
import stat
from collections.abc import Iterator
from dataclasses import dataclass

from gpudiag import catalog
from gpudiag.hostfs import LARGE_HOST_FILE, HostFS
from gpudiag.model import Reading, ReadingStatus
from gpudiag.probe import Cost, Probe, ProbeContext
from gpudiag.probes.common import hypervisor, node_ids
from gpudiag.textparse import parse_int

XID = re.compile(
    r"NVRM: Xid \((?:PCI:)?([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2})[^)]*\): (\d+)"
)
KMSG_RECORD = re.compile(r"^\d+,\d+,(\d+),[^;]*;(.*)$")
DMESG_LINE = re.compile(r"^\[\s*(\d+\.\d+)\]\s*(.*)$")
JOURNAL_TIMEOUT_S = 5.0
KMSG_MAX_BYTES = 16 * 1024 * 1024


@dataclass(frozen=True)
class XidEvent:
    """One Xid line: code, GPU bus address (function 0: NVRM names the device only),
    seconds since boot (None when unknown)."""

    code: int
    pci: str
    seconds: float | None


def parse_xid_events(text: str) -> list[XidEvent]:
    """Xid events from kmsg records ('6,1,5000000,-;NVRM: Xid ...') or dmesg lines
    ('[ 5.000000] NVRM: Xid ...', also journalctl's short-monotonic form)."""
    events = []
    for line in text.splitlines():
        seconds = None
        message = line
        if match := KMSG_RECORD.match(line):
            seconds, message = int(match.group(1)) / 1e6, match.group(2)
        elif match := DMESG_LINE.match(line):
            seconds, message = float(match.group(1)), match.group(2)
        if xid := XID.search(message):
            events.append(XidEvent(int(xid.group(2)), f"{xid.group(1).lower()}.0", seconds))
    return events


def parse_mce_count(interrupts: str) -> int:
    """The 'MCE:' line of /proc/interrupts, summed over CPUs."""
    for line in interrupts.splitlines():
        name, sep, rest = line.strip().partition(":")
        if sep and name == "MCE":
            return sum(int(word) for word in rest.split() if word.isdigit())
    raise ValueError("no MCE line (not x86?)")


def _read_kmsg_device(path: str) -> str:
    """Every record the kernel still holds in /dev/kmsg, without blocking."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    chunks, size = [], 0
    try:
        while size < KMSG_MAX_BYTES:
            try:
                record = os.read(fd, 8192)
            except BlockingIOError:
                break
            except OSError as exc:
                if exc.errno == errno.EPIPE:  # records overwritten while reading: go on
                    continue
                raise
            if not record:
                break
            chunks.append(record)
            size += len(record)
    finally:
        os.close(fd)
    return b"".join(chunks).decode("utf-8", errors="replace")


def kernel_log(host: HostFS) -> tuple[str | None, str, ReadingStatus, str]:
    """(text, source, status, reason) of the kernel log, through the host's output seam
    (a capture records it)."""
    text, source, status, reason = host.output("kernel log", lambda: _read_kernel_log(host))
    return text, source, ReadingStatus(status), reason


def _read_kernel_log(host: HostFS) -> tuple[str | None, str, str, str]:
    text, source, status, reason = _kernel_log(host)
    return text, source, status.value, reason


def _kernel_log(host: HostFS) -> tuple[str | None, str, ReadingStatus, str]:
    import shutil
    import subprocess

    path = host.path("/dev/kmsg")
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return None, "file:/dev/kmsg", ReadingStatus.MISSING, "/dev/kmsg not found"
    if not stat.S_ISCHR(mode):
        result = host.read("/dev/kmsg", KMSG_MAX_BYTES)
        return result.text, "file:/dev/kmsg", result.status, result.reason
    try:
        return _read_kmsg_device(str(path)), "file:/dev/kmsg", ReadingStatus.OK, ""
    except PermissionError:
        kmsg_failure = "reading /dev/kmsg needs root (kernel.dmesg_restrict)"
    except OSError as exc:
        kmsg_failure = f"/dev/kmsg: {exc.strerror}"
    journalctl = shutil.which("journalctl") if host.is_live else None
    if journalctl:
        try:
            run = subprocess.run(
                [journalctl, "-k", "-b", "-o", "short-monotonic", "--no-pager", "-q"],
                capture_output=True,
                text=True,
                timeout=JOURNAL_TIMEOUT_S,
                check=False,
            )
            if run.returncode == 0 and run.stdout.strip():
                return run.stdout, "command:journalctl -k -b", ReadingStatus.OK, ""
        except (OSError, subprocess.TimeoutExpired):
            pass
    status = ReadingStatus.NEEDS_ROOT if not host.is_root_user else ReadingStatus.ERROR
    return None, "file:/dev/kmsg", status, kmsg_failure + "; the journal gave nothing either"


def _xids(host: HostFS) -> Iterator[Reading]:
    text, source, status, reason = kernel_log(host)
    if text is None:
        for key in ("faults.xid.total", "faults.xid.codes"):
            yield Reading.failed(key, status, reason, source)
        return
    events = parse_xid_events(text)
    yield Reading("faults.xid.total", len(events), source=source)
    codes = sorted({e.code for e in events})
    yield Reading("faults.xid.codes", codes, source=source)
    for code in codes:
        mine = [e for e in events if e.code == code]
        yield XID_COUNT.reading(len(mine), source, xid=code)
        yield XID_GPUS.reading(sorted({e.pci for e in mine}), source, xid=code)
        times = [e.seconds for e in mine if e.seconds is not None]
        if times:
            yield XID_LAST_SEEN.reading(max(times), source, xid=code)


def _edac(host: HostFS) -> Iterator[Reading]:
    base = "/sys/devices/system/edac/mc"
    controllers = node_ids(host, base, "mc")
    if not controllers:
        vm = hypervisor(host)  # a VM has none: its memory errors are the host's to see
        status = ReadingStatus.UNSUPPORTED if vm else ReadingStatus.MISSING
        reason = (
            f"a VM ({vm}) has no EDAC memory controllers: the hypervisor handles memory errors"
            if vm
            else "no EDAC memory controllers (EDAC driver not loaded)"
        )
        for key in ("faults.edac.correctable", "faults.edac.uncorrectable"):
            yield Reading.failed(key, status, reason, "sysfs:devices/system/edac/mc")
        return
    totals = {"ce_count": 0, "ue_count": 0}
    for mc in controllers:
        for name, declared in (("ce_count", EDAC_CORRECTABLE), ("ue_count", EDAC_UNCORRECTABLE)):
            reading = host.reading(declared.key(mc=f"mc{mc}"), f"{base}/mc{mc}/{name}", parse_int)
            yield reading
            if reading.ok and isinstance(reading.value, int):
                totals[name] += reading.value
    source = "sysfs:devices/system/edac/mc/mc*"
    yield Reading("faults.edac.correctable", totals["ce_count"], source=source)
    yield Reading("faults.edac.uncorrectable", totals["ue_count"], source=source)


def collect(context: ProbeContext) -> Iterator[Reading]:
    """Fault readings."""
    host = context.host
    yield from _xids(host)
    interrupts = host.read("/proc/interrupts", LARGE_HOST_FILE)
    if interrupts.ok and not re.search(r"^\s*MCE:", interrupts.text or "", re.MULTILINE):
        yield Reading.failed(
            "faults.mce.count",
            ReadingStatus.UNSUPPORTED,
            "/proc/interrupts has no MCE line (not x86, or a VM)",
            interrupts.source,
        )
    else:
        yield interrupts.parsed("faults.mce.count", parse_mce_count)
    yield from _edac(host)


# the readings of one XID code or one memory controller, emitted through these
XID_COUNT = catalog.counter("faults.xid.{xid}.count")
XID_GPUS = catalog.volatile("faults.xid.{xid}.gpus")
XID_LAST_SEEN = catalog.volatile("faults.xid.{xid}.last_seen", "s since boot")
EDAC_CORRECTABLE = catalog.counter("faults.edac.{mc}.correctable")
EDAC_UNCORRECTABLE = catalog.counter("faults.edac.{mc}.uncorrectable")

# the readings this probe makes (gpudiag/catalog.py)
READINGS = (
    *catalog.declare(
        "Faults",
        catalog.counter("faults.edac.correctable"),
        catalog.counter("faults.edac.uncorrectable"),
        EDAC_CORRECTABLE,
        EDAC_UNCORRECTABLE,
        catalog.counter("faults.mce.count"),
        catalog.volatile("faults.xid.codes"),
        catalog.counter("faults.xid.total"),
        XID_COUNT,
        XID_GPUS,
        XID_LAST_SEEN,
    ),
)

PROBE = Probe(
    name="faults",
    title="Xid events, machine checks, EDAC",
    cost=Cost.INSTANT,
    needs=frozenset(),
    collect=collect,
    timeout_s=10.0,
    readings=READINGS,
)
