"""Host identity: hostname, kernel, OS release, uptime and virtualisation."""

from __future__ import annotations

import shlex
from collections.abc import Iterator

from gpudiag import catalog
from gpudiag.hostfs import LARGE_HOST_FILE, FileText, HostFS
from gpudiag.model import Reading, ReadingStatus
from gpudiag.probe import Cost, Probe, ProbeContext
from gpudiag.probes.common import cpuinfo_has_flag, vm_from_dmi


def parse_os_release(text: str) -> dict[str, str]:
    """Parse os-release(5): KEY=value lines, values optionally shell-quoted."""
    fields: dict[str, str] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, _, raw = line.partition("=")
        try:
            parts = shlex.split(raw)
        except ValueError:
            parts = [raw.strip("\"'")]
        fields[key.strip()] = parts[0] if parts else ""
    return fields


def parse_proc_version(text: str) -> str | None:
    """The kernel release from /proc/version ('Linux version 6.1.0-18-amd64 (...) ...')."""
    words = text.split()
    if len(words) >= 3 and words[0] == "Linux" and words[1] == "version":
        return words[2]
    return None


def parse_uptime(text: str) -> float:
    """Seconds since boot, the first field of /proc/uptime."""
    return float(text.split()[0])


def _first_ok(host: HostFS, *paths: str) -> FileText:
    """The first of `paths` that reads, else the first path's failure."""
    results = [host.read(p) for p in paths]
    return next((r for r in results if r.ok), results[0])


def _virtualisation(host: HostFS) -> Iterator[Reading]:
    cpuinfo = host.read("/proc/cpuinfo", LARGE_HOST_FILE)
    flag: bool | None = None
    if cpuinfo.ok:
        flag = cpuinfo_has_flag(cpuinfo.text or "", "hypervisor")
        if flag is None:
            yield Reading.failed(
                "host.virt.cpu_hypervisor_flag",
                ReadingStatus.UNSUPPORTED,
                "/proc/cpuinfo has no x86 flags line",
                cpuinfo.source,
            )
        else:
            yield cpuinfo.reading("host.virt.cpu_hypervisor_flag", flag)
    else:
        yield cpuinfo.reading("host.virt.cpu_hypervisor_flag")

    vendor = host.read("/sys/class/dmi/id/sys_vendor")
    product = host.read("/sys/class/dmi/id/product_name")
    dmi_vm = (
        vm_from_dmi(vendor.text or "", product.text or "") if vendor.ok and product.ok else None
    )

    sources = "procfs:cpuinfo, sysfs:class/dmi/id"
    if dmi_vm is not None:
        yield Reading("host.virt.vm", dmi_vm, source=sources)
    elif flag is True:
        yield Reading("host.virt.vm", "unknown hypervisor", source=sources)
    elif flag is False and vendor.ok:
        yield Reading("host.virt.vm", "none", source=sources)
    elif flag is False:
        yield Reading("host.virt.vm", "none", source="procfs:cpuinfo")
    else:
        yield Reading.failed(
            "host.virt.vm",
            ReadingStatus.MISSING,
            "neither the CPU hypervisor flag nor DMI identify the platform",
            sources,
        )

    markers = {"/.dockerenv": "docker", "/run/.containerenv": "podman"}
    found = [name for path, name in markers.items() if host.exists(path)]
    source = "file:/.dockerenv, file:/run/.containerenv"
    if found or host.is_live:
        yield Reading("host.virt.container", found[0] if found else "none", source=source)
    else:
        reason = "container markers are only seen on the live node"
        yield Reading.failed("host.virt.container", ReadingStatus.MISSING, reason, source)


def collect(context: ProbeContext) -> Iterator[Reading]:
    """Readings of the host's identity."""
    host = context.host
    yield _first_ok(host, "/proc/sys/kernel/hostname", "/etc/hostname").reading("host.hostname")

    version = host.read("/proc/version")
    release = host.read("/proc/sys/kernel/osrelease")
    if release.ok:
        yield release.reading("host.kernel.release")
    elif version.ok and parse_proc_version(version.text or ""):
        yield version.reading("host.kernel.release", parse_proc_version(version.text or ""))
    else:
        yield release.reading("host.kernel.release")
    yield version.reading("host.kernel.version")

    os_release = _first_ok(host, "/etc/os-release", "/usr/lib/os-release")
    fields = parse_os_release(os_release.text or "")
    for key, field in (
        ("host.os.id", "ID"),
        ("host.os.version_id", "VERSION_ID"),
        ("host.os.pretty_name", "PRETTY_NAME"),
    ):
        if not os_release.ok:
            yield os_release.reading(key)
        elif field in fields:
            yield os_release.reading(key, fields[field])
        else:
            yield Reading.failed(
                key,
                ReadingStatus.MISSING,
                f"no {field} in {os_release.host_path}",
                os_release.source,
            )

    uptime = host.read("/proc/uptime")
    try:
        yield uptime.reading("host.uptime", parse_uptime(uptime.text) if uptime.ok else None, "s")
    except (ValueError, IndexError):
        yield Reading.failed(
            "host.uptime",
            ReadingStatus.ERROR,
            f"cannot parse /proc/uptime: {uptime.text!r:.40}",
            uptime.source,
            "s",
        )

    yield from _virtualisation(host)


# the readings this probe makes (gpudiag/catalog.py)
READINGS = (
    *catalog.declare(
        "Host and OS",
        catalog.volatile("host.hostname", identifying="host"),
        catalog.config("host.kernel.release"),
        catalog.volatile("host.kernel.version"),
        catalog.config("host.os.id"),
        catalog.config("host.os.pretty_name"),
        catalog.config("host.os.version_id"),
        catalog.volatile("host.uptime", "s"),
        catalog.config("host.virt.container"),
        catalog.config("host.virt.cpu_hypervisor_flag"),
        catalog.config("host.virt.vm"),
    ),
)

PROBE = Probe(
    name="host",
    title="Host identity",
    cost=Cost.INSTANT,
    needs=frozenset(),
    collect=collect,
    timeout_s=5.0,
    readings=READINGS,
)
