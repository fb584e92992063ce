"""Helpers shared by the host probes."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from gpudiag.hostfs import HostFS
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
