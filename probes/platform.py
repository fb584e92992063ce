"""Platform: DMI (system, board, BIOS), firmware type and Secure Boot, and the cgroup
limits of the process (a container or a systemd slice can cap CPUs and memory)."""

from __future__ import annotations

from collections.abc import Iterator

from gpudiag import catalog
from gpudiag.hostfs import HostFS
from gpudiag.model import Reading, ReadingStatus
from gpudiag.probe import Cost, Probe, ProbeContext

DMI_DIR = "/sys/class/dmi/id"
DMI_FIELDS = (
    "sys_vendor",
    "product_name",
    "product_version",
    "board_vendor",
    "board_name",
    "board_version",
    "bios_vendor",
    "bios_version",
    "bios_date",
    "bios_release",
    "chassis_type",
)
EFI_GLOBAL = "8be4df61-93ca-11d2-aa0d-00e098032b8c"


def parse_efi_bool(data: bytes) -> bool:
    """An EFI variable file: 4 bytes of attributes, then the value (1 byte here)."""
    if len(data) < 5:
        raise ValueError(f"EFI variable too short ({len(data)} bytes)")
    return data[4] == 1


def parse_cgroups(text: str) -> dict[str, str]:
    """/proc/self/cgroup -> {controller: path}; the unified (v2) hierarchy's key is ''.
    '0::/user.slice' -> {'': '/user.slice'}; '4:memory:/slurm/job1' -> {'memory': ...}."""
    paths: dict[str, str] = {}
    for line in text.splitlines():
        _, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        for controller in controllers.split(",") if controllers else [""]:
            paths[controller] = path.strip()
    if not paths:
        raise ValueError("no cgroup entries")
    return paths


def parse_v1_quota(quota_text: str, period_text: str) -> str:
    """cgroup v1 cpu.cfs_quota_us and cpu.cfs_period_us -> 'unlimited' or 'N CPUs'."""
    quota = int(quota_text.strip())
    return "unlimited" if quota < 0 else f"{quota / int(period_text.strip()):g} CPUs"


def parse_v1_memory_limit(text: str) -> str:
    """cgroup v1 memory.limit_in_bytes: a page-rounded 2**63 means no limit."""
    value = int(text.strip())
    return "unlimited" if value >= 2**62 else f"{value / 2**30:g} GiB"


def parse_cpu_max(text: str) -> str:
    """cgroup v2 cpu.max: 'max 100000' -> 'unlimited'; '400000 100000' -> '4 CPUs'."""
    words = text.split()
    if not words:
        raise ValueError("empty cpu.max")
    if words[0] == "max":
        return "unlimited"
    period = int(words[1]) if len(words) > 1 else 100000
    return f"{int(words[0]) / period:g} CPUs"


def parse_memory_max(text: str) -> str:
    """cgroup v2 memory.max: 'max' -> 'unlimited'; bytes -> 'N GiB'."""
    value = text.strip()
    return "unlimited" if value == "max" else f"{int(value) / 2**30:g} GiB"


def collect(context: ProbeContext) -> Iterator[Reading]:
    """Platform readings."""
    host = context.host
    for field in DMI_FIELDS:
        yield host.reading(f"dmi.{field}", f"{DMI_DIR}/{field}")
    yield from _firmware(host)
    yield from _cgroup_limits(host)


def _cgroup_limits(host: HostFS) -> Iterator[Reading]:
    cgroup = host.read("/proc/self/cgroup")
    keys = ("platform.cgroup.path", "platform.cgroup.cpu_max", "platform.cgroup.memory_max")
    if not cgroup.ok:
        for key in keys:
            yield cgroup.reading(key)
        return
    try:
        paths = parse_cgroups(cgroup.text or "")
    except ValueError as exc:
        for key in keys:
            yield Reading.failed(key, ReadingStatus.ERROR, str(exc), cgroup.source)
        return
    if "" in paths and len(paths) == 1:  # cgroup v2 only
        path = paths[""]
        yield Reading(keys[0], path, source=cgroup.source)
        if path == "/":
            reason = "the root cgroup has no limits of its own (a container's are set outside it)"
            for key in keys[1:]:
                yield Reading.failed(key, ReadingStatus.UNSUPPORTED, reason, "sysfs:fs/cgroup")
            return
        yield host.reading(keys[1], f"/sys/fs/cgroup{path}/cpu.max", parse_cpu_max)
        yield host.reading(keys[2], f"/sys/fs/cgroup{path}/memory.max", parse_memory_max)
        return
    cpu_path, memory_path = paths.get("cpu", "/"), paths.get("memory", "/")
    yield Reading(keys[0], memory_path, source=cgroup.source)
    for mount in ("cpu,cpuacct", "cpu"):
        base = f"/sys/fs/cgroup/{mount}{cpu_path.rstrip('/')}"
        quota, period = (
            host.read(f"{base}/cpu.cfs_quota_us"),
            host.read(f"{base}/cpu.cfs_period_us"),
        )
        if quota.ok and period.ok:
            try:
                yield Reading(
                    keys[1],
                    parse_v1_quota(quota.text or "", period.text or ""),
                    source=quota.source,
                )
            except ValueError as exc:
                yield Reading.failed(keys[1], ReadingStatus.ERROR, str(exc), quota.source)
            break
    else:
        yield Reading.failed(
            keys[1],
            ReadingStatus.MISSING,
            "no cgroup v1 cpu controller files",
            "sysfs:fs/cgroup/cpu",
        )
    yield host.reading(
        keys[2],
        f"/sys/fs/cgroup/memory{memory_path.rstrip('/')}/memory.limit_in_bytes",
        parse_v1_memory_limit,
    )


def _firmware(host: HostFS) -> Iterator[Reading]:
    source = "sysfs:firmware/efi"
    efi = host.exists("/sys/firmware/efi")
    if efi or host.is_live:
        yield Reading("platform.firmware", "uefi" if efi else "legacy-bios", source=source)
    else:
        reason = "the captured tree has no sys/firmware/efi"
        yield Reading.failed("platform.firmware", ReadingStatus.MISSING, reason, source)
    if not efi:
        reason = "no UEFI firmware interface (/sys/firmware/efi)"
        yield Reading.failed("platform.secure_boot", ReadingStatus.UNSUPPORTED, reason, source)
        return
    secure = host.read(f"/sys/firmware/efi/efivars/SecureBoot-{EFI_GLOBAL}")
    if not secure.ok or secure.data is None:
        yield secure.reading("platform.secure_boot")
        return
    try:
        yield Reading("platform.secure_boot", parse_efi_bool(secure.data), source=secure.source)
    except ValueError as exc:
        yield Reading.failed("platform.secure_boot", ReadingStatus.ERROR, str(exc), secure.source)


# the readings this probe makes (gpudiag/catalog.py)
READINGS = (
    *catalog.declare(
        "BIOS and board",
        catalog.config("dmi.bios_date"),
        catalog.config("dmi.bios_release"),
        catalog.config("dmi.bios_vendor"),
        catalog.config("dmi.bios_version"),
        catalog.config("dmi.board_name"),
        catalog.config("dmi.board_vendor"),
        catalog.config("dmi.board_version"),
        catalog.config("dmi.chassis_type"),
        catalog.config("dmi.product_name"),
        catalog.config("dmi.product_version"),
        catalog.config("dmi.sys_vendor"),
    ),
    *catalog.declare(
        "Platform",
        catalog.config("platform.cgroup.cpu_max"),
        catalog.config("platform.cgroup.memory_max"),
        catalog.volatile("platform.cgroup.path"),
        catalog.config("platform.firmware"),
        catalog.config("platform.secure_boot"),
    ),
)

PROBE = Probe(
    name="platform",
    title="Platform, BIOS and limits",
    cost=Cost.INSTANT,
    needs=frozenset(),
    collect=collect,
    timeout_s=5.0,
    readings=READINGS,
)
