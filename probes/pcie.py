"""PCIe: every NVIDIA device and every network or InfiniBand adapter, with its link,
NUMA node, local CPUs, driver, the bridges above it, AER counters and IOMMU group;
ACS on those bridges (from config space, root only); IOMMU state and kernel options.

Devices are enumerated from /sys/bus/pci/devices under the host root, so a captured
tree works like the live node (pyudev reads only the live /sys, so it is not used).
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from gpudiag import catalog
from gpudiag.hostfs import HostFS
from gpudiag.model import Reading, ReadingStatus
from gpudiag.probe import Cost, Probe, ProbeContext
from gpudiag.probes.common import node_ids
from gpudiag.textparse import (
    format_cpulist,
    parse_cpulist,
    parse_cpumask,
    parse_int,
    parse_key_counts,
)

PCI_DIR = "/sys/bus/pci/devices"
NVIDIA = 0x10DE
PCI_ADDRESS = re.compile(f"^{catalog.PCI_ADDRESS}$")  # one PCI function's address
GEN_BY_SPEED = {2.5: 1, 5.0: 2, 8.0: 3, 16.0: 4, 32.0: 5, 64.0: 6}
ACS_CONTROL_BITS = (
    "SourceValidation",
    "TranslationBlocking",
    "P2PRequestRedirect",
    "P2PCompletionRedirect",
    "UpstreamForwarding",
    "P2PEgressControl",
    "DirectTranslatedP2P",
)
ACS_CAPABILITY_ID = 0x000D
# PCI vendors of paravirtual devices, which have no PCIe link (no *_link_* files)
VIRTUAL_VENDORS = {
    0x1AF4: "virtio",
    0x1B36: "QEMU",
    0x15AD: "VMware",
    0x1414: "Hyper-V",
    0x5853: "Xen",
}
IOMMU_OPTIONS = ("iommu", "intel_iommu", "amd_iommu", "iommu.passthrough", "iommu.strict")


def device_kind(vendor: int | None, class_code: int) -> str | None:
    """What gpudiag calls a PCI function, or None when it is not one it reports.
    `vendor` is None where the tree does not say (hwloc's POWER9 capture)."""
    base, sub = class_code >> 16, (class_code >> 8) & 0xFF
    if base == 0x02:
        return "infiniband" if sub == 0x07 else "nic"
    if base == 0x0C and sub == 0x06:
        return "infiniband"
    if vendor is None:
        return "display" if base == 0x03 else None
    if vendor == NVIDIA:
        if base == 0x03:
            return "gpu"
        if base == 0x06 and sub == 0x80:
            return "nvswitch"
        return "nvidia-other"
    return None


def parse_link_speed(text: str) -> float:
    """'16.0 GT/s PCIe' or '8 GT/s' -> GT/s. 'Unknown' raises ValueError."""
    match = re.match(r"^\s*([0-9.]+)\s*GT/s", text)
    if not match:
        raise ValueError(f"no GT/s figure in {text.strip()!r}")
    return float(match.group(1))


def link_generation(speed_gts: float) -> int:
    """PCIe generation of a link speed: 16.0 GT/s -> 4."""
    if speed_gts not in GEN_BY_SPEED:
        raise ValueError(f"{speed_gts} GT/s is no PCIe generation's rate")
    return GEN_BY_SPEED[speed_gts]


def parse_acs_control(config: bytes) -> list[str] | None:
    """Enabled ACS control bits from a function's config space (at least 260 bytes: the
    extended capabilities start at 0x100). None when it has no ACS capability."""
    if len(config) < 0x104:
        raise ValueError(f"config space is {len(config)} bytes, extended capabilities need 4096")
    offset, seen = 0x100, set()
    while offset and offset not in seen and offset + 8 <= len(config):
        seen.add(offset)
        header = int.from_bytes(config[offset : offset + 4], "little")
        if header in (0, 0xFFFFFFFF):
            return None
        if header & 0xFFFF == ACS_CAPABILITY_ID:
            control = int.from_bytes(config[offset + 6 : offset + 8], "little")
            return [name for bit, name in enumerate(ACS_CONTROL_BITS) if control >> bit & 1]
        offset = (header >> 20) & 0xFFC
    return None


def parse_cmdline_options(cmdline: str, names: tuple[str, ...]) -> list[str]:
    """The 'name=value' (or bare 'name') words of a kernel command line whose name is listed."""
    return [word for word in cmdline.split() if word.partition("=")[0] in names]


def upstream_bridges(real_path: str) -> list[str]:
    """PCI addresses above a device, root port first, from its resolved sysfs path."""
    parts = [p for p in real_path.split("/") if PCI_ADDRESS.match(p)]
    return parts[:-1]


def _key(address: str, reading: str) -> str:
    """The key of a PCI function's reading, through this probe's declaration of
    pcie.{device}.<reading> (a KeyError for a reading it does not declare)."""
    return _DECLARED[f"pcie.{{device}}.{reading}"].key(device=address)


def _acs(host: HostFS, bridge: str) -> Reading:
    key = _key(bridge, "acs")
    result = host.read(f"{PCI_DIR}/{bridge}/config")
    if not result.ok or result.data is None:
        return result.reading(key)
    if len(result.data) <= 256:
        if not host.is_root_user:
            return Reading.failed(
                key,
                ReadingStatus.NEEDS_ROOT,
                "only root can read extended config space",
                result.source,
            )
        return Reading.failed(
            key, ReadingStatus.UNSUPPORTED, "no PCIe extended config space", result.source
        )
    flags = parse_acs_control(result.data)
    if flags is None:
        return Reading.failed(key, ReadingStatus.UNSUPPORTED, "no ACS capability", result.source)
    return Reading(key, flags, source=result.source)


def numa_reading(numa: Reading, numa_nodes: int) -> Reading:
    """A device's NUMA node: the kernel's -1 (no affinity) is unsupported, which PCIE010
    reports, but on a machine with one NUMA node, where the kernel gives -1 for every
    device, the device is local to node 0 (as `nvidia-smi topo -m` says): 0, with why."""
    if not (numa.ok and isinstance(numa.value, int) and numa.value < 0):
        return numa
    if numa_nodes == 1:
        reason = "the kernel reports -1 (no affinity) on a machine with one NUMA node, node 0"
        return Reading(
            numa.key, 0, source=f"{numa.source}, sysfs:devices/system/node", reason=reason
        )
    reason = "the platform reports no NUMA affinity (-1)"
    return Reading.failed(numa.key, ReadingStatus.UNSUPPORTED, reason, numa.source)


def link_reading(link: Reading, vendor: int | None) -> Reading:
    """A link file a paravirtual device (virtio...) does not have: unsupported, so the
    link rules do not apply to it; on any other device a missing link file stays missing."""
    if link.status is not ReadingStatus.MISSING or vendor not in VIRTUAL_VENDORS:
        return link
    reason = f"a virtual {VIRTUAL_VENDORS[vendor]} device (vendor 0x{vendor:04x}) has no PCIe link"
    return Reading.failed(link.key, ReadingStatus.UNSUPPORTED, reason, link.source, link.unit)


def _device(
    host: HostFS,
    address: str,
    kind: str,
    vendor: int | None,
    class_code: int,
    numa_nodes: int = 0,
) -> Iterator[Reading]:
    base = f"{PCI_DIR}/{address}"
    source = f"sysfs:bus/pci/devices/{address}"
    yield Reading(_key(address, "kind"), kind, source=f"{source}/class")
    if vendor is None:
        yield host.reading(_key(address, "vendor"), f"{base}/vendor")
    else:
        yield Reading(_key(address, "vendor"), f"0x{vendor:04x}", source=f"{source}/vendor")
    yield host.reading(_key(address, "device"), f"{base}/device")
    yield Reading(_key(address, "class"), f"0x{class_code:06x}", source=f"{source}/class")
    yield numa_reading(
        host.reading(_key(address, "numa_node"), f"{base}/numa_node", parse_int), numa_nodes
    )
    if host.exists(f"{base}/local_cpulist"):
        yield host.reading(
            _key(address, "local_cpus"),
            f"{base}/local_cpulist",
            lambda t: format_cpulist(parse_cpulist(t)),
        )
    else:  # older kernels and some captures only have the hex mask
        yield host.reading(
            _key(address, "local_cpus"),
            f"{base}/local_cpus",
            lambda t: format_cpulist(parse_cpumask(t)),
        )
    driver = host.realpath(f"{base}/driver") if host.exists(f"{base}/driver") else None
    yield Reading(
        _key(address, "driver"),
        driver.rsplit("/", 1)[-1] if driver else "none",
        source=f"{source}/driver",
    )
    for name in ("current_link_speed", "max_link_speed"):
        speed = link_reading(
            host.reading(_key(address, name), f"{base}/{name}", parse_link_speed, "GT/s"), vendor
        )
        yield speed
        gen_key = _key(address, name.replace("speed", "gen"))
        if speed.ok and float(speed.value) in GEN_BY_SPEED:
            yield Reading(gen_key, link_generation(float(speed.value)), source=speed.source)
        else:
            yield Reading.failed(
                gen_key,
                speed.status if not speed.ok else ReadingStatus.ERROR,
                speed.reason or f"{speed.value} GT/s is no PCIe rate",
                speed.source,
            )
    for name in ("current_link_width", "max_link_width"):
        yield link_reading(
            host.reading(_key(address, name), f"{base}/{name}", parse_int, "lanes"), vendor
        )
    aer = host.exists(f"{base}/aer_dev_correctable")
    for name, field in (
        ("correctable", "TOTAL_ERR_COR"),
        ("fatal", "TOTAL_ERR_FATAL"),
        ("nonfatal", "TOTAL_ERR_NONFATAL"),
    ):
        if not aer:
            reason = "the kernel reports no AER counters for this device"
            yield Reading.failed(
                _key(address, f"aer.{name}"),
                ReadingStatus.UNSUPPORTED,
                reason,
                f"{source}/aer_dev_{name}",
            )
            continue
        yield host.reading(
            _key(address, f"aer.{name}"),
            f"{base}/aer_dev_{name}",
            lambda t, f=field: parse_key_counts(t)[f],
        )
    group = host.realpath(f"{base}/iommu_group") if host.exists(f"{base}/iommu_group") else None
    if group:
        yield Reading(
            _key(address, "iommu_group"),
            int(group.rsplit("/", 1)[-1]),
            source=f"{source}/iommu_group",
        )
    real = host.realpath(base)
    if real is None:
        yield Reading.failed(
            _key(address, "bridges"),
            ReadingStatus.ERROR,
            f"{base} does not resolve inside the root",
            source,
        )
    else:
        yield Reading(_key(address, "bridges"), upstream_bridges(real), source=source)
        roots = [p for p in real.split("/") if p.startswith("pci") and ":" in p]
        if roots:
            yield Reading(_key(address, "host_bridge"), roots[0], source=source)


def collect(context: ProbeContext) -> Iterator[Reading]:
    """PCIe readings."""
    host = context.host
    addresses = host.listdir(PCI_DIR)
    reported: list[str] = []
    gpus: list[str] = []
    bridges: set[str] = set()
    numa_nodes = len(node_ids(host, "/sys/devices/system/node", "node"))
    for address in addresses:
        base = f"{PCI_DIR}/{address}"
        vendor_file, class_file = host.read(f"{base}/vendor"), host.read(f"{base}/class")
        try:
            class_code = int(class_file.text or "", 16)
            vendor = int(vendor_file.text or "", 16) if vendor_file.ok else None
        except ValueError:
            continue
        kind = device_kind(vendor, class_code)
        if kind is None:
            continue
        reported.append(address)
        if kind == "gpu":
            gpus.append(address)
        readings = list(_device(host, address, kind, vendor, class_code, numa_nodes))
        yield from readings
        for reading in readings:
            if reading.key.endswith(".bridges") and isinstance(reading.value, list):
                bridges.update(reading.value)
    yield Reading("pcie.devices", reported, source="sysfs:bus/pci/devices")
    yield Reading("pcie.functions", len(addresses), source="sysfs:bus/pci/devices")
    yield Reading("pcie.gpu_count", len(gpus), unit="GPUs", source="sysfs:bus/pci/devices")
    for bridge in sorted(bridges):
        yield _acs(host, bridge)
    groups = host.listdir("/sys/kernel/iommu_groups")
    yield Reading("iommu.groups", len(groups), source="sysfs:kernel/iommu_groups")
    yield Reading("iommu.units", host.listdir("/sys/class/iommu"), source="sysfs:class/iommu")
    yield host.reading(
        "iommu.cmdline", "/proc/cmdline", lambda t: parse_cmdline_options(t, IOMMU_OPTIONS)
    )


# the readings this probe makes (gpudiag/catalog.py)
READINGS = (
    *catalog.declare(
        "IOMMU",
        catalog.config("iommu.cmdline"),
        catalog.config("iommu.groups"),
        catalog.config("iommu.units"),
    ),
    *catalog.declare(
        "PCIe",
        catalog.config("pcie.devices"),
        catalog.config("pcie.gpu_count", "GPUs"),
        catalog.config("pcie.{device}.acs"),
        catalog.counter("pcie.{device}.aer.correctable"),
        catalog.counter("pcie.{device}.aer.fatal"),
        catalog.counter("pcie.{device}.aer.nonfatal"),
        catalog.config("pcie.{device}.bridges"),
        catalog.config("pcie.{device}.class"),
        catalog.config("pcie.{device}.current_link_gen"),
        catalog.config("pcie.{device}.current_link_speed", "GT/s"),
        catalog.config("pcie.{device}.current_link_width", "lanes"),
        catalog.config("pcie.{device}.device"),
        catalog.config("pcie.{device}.driver"),
        catalog.config("pcie.{device}.host_bridge"),
        catalog.config("pcie.{device}.iommu_group"),
        catalog.config("pcie.{device}.kind"),
        catalog.position("pcie.{device}.local_cpus"),
        catalog.config("pcie.{device}.max_link_gen"),
        catalog.config("pcie.{device}.max_link_speed", "GT/s"),
        catalog.config("pcie.{device}.max_link_width", "lanes"),
        catalog.position("pcie.{device}.numa_node"),
        catalog.config("pcie.functions", help="how many PCI functions the bus lists"),
        catalog.config("pcie.{device}.vendor"),
    ),
)
# the probe emits a function's readings through its declarations (_key)
_DECLARED = {d.template: d for d in READINGS}

PROBE = Probe(
    name="pcie",
    title="PCIe devices, links, ACS and IOMMU",
    cost=Cost.INSTANT,
    needs=frozenset(),
    collect=collect,
    timeout_s=10.0,
    readings=READINGS,
)
