"""Memory: totals, swap, transparent and explicit hugepages, reclaim settings, and DIMMs
(from dmidecode, which needs root and the live node)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from gpudiag import catalog
from gpudiag.hostfs import FileText
from gpudiag.model import Reading, ReadingStatus
from gpudiag.probe import Cost, Probe, ProbeContext
from gpudiag.textparse import parse_bracketed, parse_int, parse_meminfo

DMIDECODE_TIMEOUT_S = 5.0


def parse_dmidecode_memory(text: str) -> list[dict[str, str]]:
    """`dmidecode -t 17` -> one dict per 'Memory Device' block."""
    devices: list[dict[str, str]] = []
    current: dict[str, str] | None = None
    for line in text.splitlines():
        if line.strip() == "Memory Device":
            current = {}
            devices.append(current)
        elif current is not None and line.startswith("\t") and not line.startswith("\t\t"):
            name, sep, value = line.strip().partition(":")
            if sep:
                current[name.strip()] = value.strip()
        elif not line.strip():
            current = None
    return devices


def _size_gib(text: str) -> float | None:
    """'64 GB', '65536 MB', '1 TB' -> GiB; None for an empty slot."""
    words = text.split()
    if len(words) != 2 or not words[0].isdigit():
        return None
    factor = {"MB": 1 / 1024, "GB": 1, "TB": 1024, "KB": 1 / 1024 / 1024}.get(words[1].upper())
    return None if factor is None else int(words[0]) * factor


def _speed(text: str) -> int | None:
    """'4800 MT/s' or '4800 MHz' -> 4800; 'Unknown' -> None."""
    words = text.split()
    return int(words[0]) if words and words[0].isdigit() else None


def summarize_dimms(devices: list[dict[str, str]]) -> dict[str, object]:
    """Slot count, populated count, sizes and speeds of parsed memory devices."""
    populated = [d for d in devices if _size_gib(d.get("Size", "")) is not None]
    sizes = sorted({_size_gib(d["Size"]) for d in populated})
    speeds = sorted({s for d in populated if (s := _speed(d.get("Speed", ""))) is not None})
    configured = sorted(
        {
            s
            for d in populated
            if (s := _speed(d.get("Configured Memory Speed", d.get("Configured Clock Speed", ""))))
            is not None
        }
    )
    return {
        "slots": len(devices),
        "populated": len(populated),
        "empty": len(devices) - len(populated),
        "total_gib": sum(_size_gib(d["Size"]) or 0 for d in populated),
        "sizes_gib": sizes,
        "speeds": speeds,
        "configured_speeds": configured,
    }


def _dimms(context: ProbeContext) -> Iterator[Reading]:
    keys = (
        "mem.dimm.slots",
        "mem.dimm.populated",
        "mem.dimm.empty",
        "mem.dimm.total",
        "mem.dimm.sizes",
        "mem.dimm.speed",
        "mem.dimm.configured_speed",
    )
    source = "command:dmidecode -t 17"
    reason = ""
    status = ReadingStatus.MISSING
    if not context.host.is_live:
        status, reason = ReadingStatus.UNSUPPORTED, "DIMMs are read with dmidecode on the live node"
    elif not context.host.is_root_user:
        status, reason = ReadingStatus.NEEDS_ROOT, "dmidecode reads the SMBIOS table as root"
    if reason:
        for key in keys:
            yield Reading.failed(key, status, reason, source)
        return

    def dmidecode() -> dict[str, Any]:
        import shutil
        import subprocess

        binary = shutil.which("dmidecode")
        if binary is None:
            return {"missing": "dmidecode is not installed"}
        try:
            run = subprocess.run(
                [binary, "-t", "17"],
                capture_output=True,
                text=True,
                timeout=DMIDECODE_TIMEOUT_S,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            return {"failed": str(exc)}
        return {"returncode": run.returncode, "stdout": run.stdout, "stderr": run.stderr}

    run = context.host.output("dmidecode -t 17", dmidecode)
    if "missing" in run:
        for key in keys:
            yield Reading.failed(key, ReadingStatus.MISSING, run["missing"], source)
        return
    if "failed" in run:
        for key in keys:
            yield Reading.failed(
                key, ReadingStatus.ERROR, f"dmidecode failed: {run['failed']}", source
            )
        return
    devices = parse_dmidecode_memory(run["stdout"])
    stderr = run["stderr"].strip()
    if run["returncode"] != 0 or not devices:
        detail = stderr.splitlines()[-1] if stderr else "no memory devices"
        for key in keys:
            yield Reading.failed(key, ReadingStatus.UNSUPPORTED, f"dmidecode: {detail}", source)
        return
    summary = summarize_dimms(devices)
    yield Reading("mem.dimm.slots", summary["slots"], source=source)
    yield Reading("mem.dimm.populated", summary["populated"], source=source)
    yield Reading("mem.dimm.empty", summary["empty"], source=source)
    yield Reading("mem.dimm.total", summary["total_gib"], "GiB", source)
    yield Reading("mem.dimm.sizes", summary["sizes_gib"], "GiB", source)
    yield Reading("mem.dimm.speed", summary["speeds"], "MT/s", source)
    yield Reading("mem.dimm.configured_speed", summary["configured_speeds"], "MT/s", source)


def meminfo_reading(meminfo: FileText, key: str, field: str) -> Reading:
    """One field of a meminfo file, in KiB; a field this kernel does not report is missing."""
    if meminfo.ok and field not in parse_meminfo(meminfo.text or ""):
        reason = f"{meminfo.host_path} has no {field} (older kernel)"
        return Reading.failed(key, ReadingStatus.MISSING, reason, meminfo.source, "KiB")
    return meminfo.parsed(key, lambda text: parse_meminfo(text)[field], "KiB")


def collect(context: ProbeContext) -> Iterator[Reading]:
    """Memory readings."""
    host = context.host
    meminfo = host.read("/proc/meminfo")
    for key, field in (
        ("mem.total", "MemTotal"),
        ("mem.available", "MemAvailable"),
        ("mem.swap_total", "SwapTotal"),
        ("mem.swap_free", "SwapFree"),
        ("mem.hugepage_size", "Hugepagesize"),
    ):
        yield meminfo_reading(meminfo, key, field)
    thp = "/sys/kernel/mm/transparent_hugepage"
    yield host.reading("mem.thp.enabled", f"{thp}/enabled", parse_bracketed)
    yield host.reading("mem.thp.defrag", f"{thp}/defrag", parse_bracketed)
    for size, label in (("2048kB", "2M"), ("1048576kB", "1G")):
        yield host.reading(
            f"mem.hugepages_{label}",
            f"/sys/kernel/mm/hugepages/hugepages-{size}/nr_hugepages",
            parse_int,
        )
    yield host.reading("mem.zone_reclaim_mode", "/proc/sys/vm/zone_reclaim_mode", parse_int)
    yield host.reading("mem.swappiness", "/proc/sys/vm/swappiness", parse_int)
    yield from _dimms(context)


# the readings this probe makes (gpudiag/catalog.py)
READINGS = (
    *catalog.declare(
        "Memory",
        catalog.volatile("mem.available", "KiB"),
        catalog.config("mem.dimm.configured_speed"),
        catalog.config("mem.dimm.empty"),
        catalog.config("mem.dimm.populated"),
        catalog.config("mem.dimm.sizes"),
        catalog.config("mem.dimm.slots"),
        catalog.config("mem.dimm.speed"),
        catalog.config("mem.dimm.total"),
        catalog.config("mem.hugepage_size", "KiB"),
        catalog.config("mem.hugepages_1G"),
        catalog.config("mem.hugepages_2M"),
        catalog.volatile("mem.swap_free", "KiB"),
        catalog.config("mem.swap_total", "KiB"),
        catalog.config("mem.swappiness"),
        catalog.config("mem.thp.defrag"),
        catalog.config("mem.thp.enabled"),
        catalog.config("mem.total", "KiB"),
        catalog.config("mem.zone_reclaim_mode"),
    ),
)

PROBE = Probe(
    name="memory",
    title="Memory, hugepages and DIMMs",
    cost=Cost.INSTANT,
    needs=frozenset(),
    collect=collect,
    timeout_s=10.0,
    readings=READINGS,
)
