"""Helpers shared by the host probes."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from gpudiag.hostfs import LARGE_HOST_FILE, HostFS
from gpudiag.model import Reading, ReadingStatus, Value
from gpudiag.textparse import format_cpulist


def per_cpu_reading(
    host: HostFS,
    key: str,
    cpus: Sequence[int],
    path_of: Callable[[int], str],
    source_pattern: str,
    parse: Callable[[str], Value] = str.strip,
    unit: str = "",
    absent_reason: str = "",
) -> Reading:
    """One reading for a per-CPU file: the value itself when every CPU agrees, else a
    list of 'value: cpulist' strings. CPUs whose file is absent are left out; when no
    CPU has it, the reading is missing (with `absent_reason`, when given) or carries
    the first failure's status."""
    groups: dict[str, list[int]] = {}
    values: dict[str, Value] = {}
    first_failure = None
    for cpu in cpus:
        result = host.read(path_of(cpu))
        if not result.ok:
            first_failure = first_failure or result
            continue
        try:
            value = parse(result.text or "")
        except (ValueError, IndexError, KeyError) as exc:
            return Reading.failed(
                key,
                ReadingStatus.ERROR,
                f"cannot parse {result.host_path}: {exc}",
                source_pattern,
                unit,
            )
        label = str(value)
        groups.setdefault(label, []).append(cpu)
        values[label] = value
    if not groups:
        if first_failure is None:
            return Reading.failed(key, ReadingStatus.MISSING, "no CPUs found", source_pattern, unit)
        status = first_failure.status
        reason = first_failure.reason
        if status is ReadingStatus.MISSING and absent_reason:
            reason = absent_reason
        return Reading.failed(key, status, reason, source_pattern, unit)
    if len(groups) == 1:
        return Reading(key, next(iter(values.values())), unit, source_pattern)
    mixed = [f"{label}: cpus {format_cpulist(cpu_list)}" for label, cpu_list in groups.items()]
    return Reading(key, mixed, unit, source_pattern)


def node_ids(host: HostFS, directory: str, prefix: str) -> list[int]:
    """Numbers of entries named PREFIX<N> in a directory: cpu0, node3, ..."""
    return [
        int(name[len(prefix) :])
        for name in host.listdir(directory)
        if name.startswith(prefix) and name[len(prefix) :].isdigit()
    ]


# DMI system vendors (and product names) that only virtual machines report.
VM_VENDORS = {
    "qemu": "qemu",
    "kvm": "kvm",
    "vmware, inc.": "vmware",
    "xen": "xen",
    "innotek gmbh": "virtualbox",
    "parallels software international inc.": "parallels",
    "openstack foundation": "openstack",
    "bochs": "bochs",
}


def cpuinfo_has_flag(text: str, flag: str) -> bool | None:
    """Whether the first x86 'flags' line of /proc/cpuinfo lists `flag`; None when the
    file has no flags line (other architectures)."""
    for line in text.splitlines():
        name, sep, value = line.partition(":")
        if sep and name.strip() == "flags":
            return flag in value.split()
    return None


def vm_from_dmi(sys_vendor: str, product_name: str) -> str | None:
    """The hypervisor a DMI vendor/product pair names, or None for physical hardware."""
    vendor = sys_vendor.strip().lower()
    product = product_name.strip().lower()
    if vendor in VM_VENDORS:
        return VM_VENDORS[vendor]
    if vendor == "microsoft corporation" and product == "virtual machine":
        return "hyper-v"
    if vendor == "google" and product == "google compute engine":
        return "gce"
    if vendor == "amazon ec2" and not product.endswith(".metal"):
        return "aws-nitro"
    return None


def hypervisor(host: HostFS) -> str | None:
    """The hypervisor the node runs under (DMI's name for it, else 'unknown hypervisor'
    from the CPU's hypervisor flag), or None on bare metal or where neither says. The
    probes use it to tell a file a VM never has (cpufreq, EDAC) from one that is missing:
    the host probe's host.virt.vm reports the same, for HOST001."""
    vendor = host.read("/sys/class/dmi/id/sys_vendor")
    product = host.read("/sys/class/dmi/id/product_name")
    if vendor.ok and product.ok:
        found = vm_from_dmi(vendor.text or "", product.text or "")
        if found is not None:
            return found
    cpuinfo = host.read("/proc/cpuinfo", LARGE_HOST_FILE)
    if cpuinfo.ok and cpuinfo_has_flag(cpuinfo.text or "", "hypervisor"):
        return "unknown hypervisor"
    return None
