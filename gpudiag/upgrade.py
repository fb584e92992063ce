"""A snapshot saved by an older gpudiag, brought to what its producers now record: the
readings a producer has since learned to make where the rules need them (why a rule does
not apply, instead of a silence), derived from what the snapshot holds, exactly as the
producer now derives them on a live node. A producer that did not run gains nothing.

Re-checking an old snapshot with new rules is a feature: without this, a rule reading
one of these keys said "missing (no probe produced it)" of a probe that ran.

- gpu: `gpu.N.nvlink.active` beside an unsupported `gpu.N.nvlink.count` (no NVLink:
  unsupported too); `gpu.N.fabric.status` from `gpu.N.fabric.state` (unsupported on no
  fabric, missing until registration completes: probes/gpu.py's fabric readings); with no
  fabric, its cluster, clique, cliques and health summary as probes/fabric.py's
  gpu_fabric makes them (unsupported, or failed as the state); beside any fabric state,
  `gpu.N.recovery_action` unsupported (saved before gpudiag read it, as
  gpu_recovery_action says of a recording without it), or failed as the state of a lost GPU.
- pcie: `pcie.D.numa_node` unsupported for the kernel's -1 on a machine with one NUMA
  node: node 0, as probes/pcie.py's numa_reading gives it; a paravirtual device's link
  files, missing: unsupported (its link_reading).
- cpu: `cpu.idle.C6.disabled` beside `cpu.idle.states` that could not be read: the same
  failure; on a VM, frequency scaling and idle states missing: unsupported (probes/cpu.py's
  _idle and hidden_by_vm).
- faults: no EDAC memory controllers on a VM: unsupported (probes/faults.py's _edac).
- gpu and the nvidia-smi imports: `gpu.N.temperature.slowdown_margin` beside the T.Limit
  margin and the slowdown's T.Limit value (probes/gpu.py's slowdown_margin); an absolute
  threshold an older gpudiag derived from the temperature and the T.Limit margin (two
  sensors: it drifted with the load) unsupported, as the driver gave it.

The probes' own functions are used where they have one, imported only when an old
reading needs them (a snapshot of this version loads without them).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping

from gpudiag.model import ProbeResult, Reading, ReadingStatus
from gpudiag.record import replace

OLDER = "derived on load: the snapshot was saved before gpudiag recorded it"
_GPU_KEY = re.compile(r"^gpu\.(\d+)\.(nvlink\.count|fabric\.state)$")
_PCIE_NUMA = re.compile(r"^pcie\.([^.]+(?:\.[0-7])?)\.numa_node$")
_PCIE_LINK = re.compile(r"^pcie\.([^.]+(?:\.[0-7])?)\.(current|max)_link_(speed|gen|width)$")


def _vm(node: Mapping[str, Reading]) -> str | None:
    """The hypervisor the host probe found (probes/common.py's hypervisor, which the
    probes ask), or None on bare metal ('none') or where not known."""
    vm = node.get("host.virt.vm")
    if vm is None or not vm.ok or not vm.value or vm.value == "none":
        return None
    return str(vm.value)


def _gpu(readings: Mapping[str, Reading], node: Mapping[str, Reading]) -> list[Reading]:
    added = []
    for key, reading in readings.items():
        if not key.endswith((".nvlink.count", ".fabric.state")):
            continue  # most keys: one string test, no pattern
        match = _GPU_KEY.match(key)
        if match is None:
            continue
        gpu, kind = match.groups()
        source = f"{reading.source} ({OLDER})"
        if kind == "nvlink.count":
            active = f"gpu.{gpu}.nvlink.active"
            if active not in readings and reading.status is ReadingStatus.UNSUPPORTED:
                added.append(Reading.failed(active, reading.status, reading.reason, source))
            continue
        recovery, field = f"gpu.{gpu}.recovery_action", f"nvml:nvmlDeviceGetFieldValues ({OLDER})"
        if recovery not in readings and "GpuIsLost" in reading.reason:
            added.append(Reading.failed(recovery, reading.status, reading.reason, field))
        elif recovery not in readings:
            why = "the snapshot was saved before gpudiag read the GPU recovery action"
            added.append(Reading.failed(recovery, ReadingStatus.UNSUPPORTED, why, field))
        if not reading.ok or reading.value == "not-supported":  # no fabric: as the probe says
            none = "the GPU has no NVLink fabric (fabric state not-supported)"
            for suffix in ("cluster_uuid", "clique_id", "cliques", "health_summary"):
                key = f"gpu.{gpu}.fabric.{suffix}"
                if key in readings:
                    continue
                if reading.ok:
                    added.append(Reading.failed(key, ReadingStatus.UNSUPPORTED, none, source))
                else:
                    added.append(Reading.failed(key, reading.status, reading.reason, source))
        status = f"gpu.{gpu}.fabric.status"
        if status in readings:
            continue
        if not reading.ok:
            added.append(Reading.failed(status, reading.status, reading.reason, source))
        elif reading.value == "not-supported":
            reason = "the GPU has no NVLink fabric (fabric state not-supported)"
            added.append(Reading.failed(status, ReadingStatus.UNSUPPORTED, reason, source))
        elif reading.value != "completed":
            reason = f"fabric registration has not completed (state {reading.value})"
            added.append(Reading.failed(status, ReadingStatus.MISSING, reason, source))
    return added + _temperatures(readings, node)


_GPU_INDEX = re.compile(r"^gpu\.(\d+)\.")


def _gpu_indices(readings: Mapping[str, Reading]) -> list[str]:
    """The GPUs of a producer's readings: 0 to its GPU count less one (the probe's
    gpu.count, an import's nvml.gpu_count), else every index its keys name."""
    for key in ("gpu.count", "nvml.gpu_count"):
        count = readings.get(key)
        if count is not None and count.ok and type(count.value) is int and count.value <= 1024:
            return [str(index) for index in range(count.value)]
    return sorted({m.group(1) for key in readings if (m := _GPU_INDEX.match(key))})


def _temperatures(readings: Mapping[str, Reading], node: Mapping[str, Reading]) -> list[Reading]:
    """The margin to slowdown where the snapshot holds its two parts, and the absolute
    thresholds an older gpudiag made up (a '+' in the source: temperature + margin -
    T.Limit value) unsupported, saying what was dropped. Looked up GPU by GPU, not by a
    pass over every key (a snapshot is upgraded at each load)."""
    added = []
    for gpu in _gpu_indices(readings):
        for name in ("slowdown", "shutdown", "gpu_max"):
            key = f"gpu.{gpu}.temperature.{name}"
            reading = readings.get(key)
            if reading is None or not reading.ok or "+" not in reading.source:
                continue
            reason = (
                f"the driver gives it only relative to T.Limit ({key}_tlimit); the "
                f"{reading.value} C an older gpudiag derived from the temperature and the "
                "T.Limit margin (two sensors) is dropped"
            )
            source = f"{reading.source} (dropped on load: an older gpudiag derived it)"
            added.append(Reading.failed(key, ReadingStatus.UNSUPPORTED, reason, source, "C"))
        tlimit = readings.get(f"gpu.{gpu}.temperature.slowdown_tlimit")
        margin = readings.get(f"gpu.{gpu}.temperature.tlimit_margin")
        if tlimit is None or margin is None or f"gpu.{gpu}.temperature.slowdown_margin" in readings:
            continue
        if any(r.ok and type(r.value) is not int for r in (tlimit, margin)):
            continue  # not what the producer writes (an edited file): nothing to derive
        from gpudiag.probes.gpu import slowdown_margin  # the producer's own rule

        derived = slowdown_margin(margin, tlimit, int(gpu))
        added.append(replace(derived, source=f"{derived.source} ({OLDER})"))
    return added


def _pcie(readings: Mapping[str, Reading], node: Mapping[str, Reading]) -> list[Reading]:
    added = []
    nodes = node.get("numa.nodes")
    if nodes is not None and nodes.ok and isinstance(nodes.value, list) and len(nodes.value) == 1:
        reason = "the kernel reports -1 (no affinity) on a machine with one NUMA node, node 0"
        added += [
            Reading(key, 0, source=f"{r.source}, numa.nodes ({OLDER})", reason=reason)
            for key, r in readings.items()
            if _PCIE_NUMA.match(key)
            and r.status is ReadingStatus.UNSUPPORTED
            and "(-1)" in r.reason
        ]
    links = [
        (key, r, match.group(1))
        for key, r in readings.items()
        if r.status is ReadingStatus.MISSING
        and "_link_" in key
        and (match := _PCIE_LINK.match(key))
    ]
    if links:
        from gpudiag.probes.pcie import link_reading  # the producer's own rule

        for _, reading, device in links:
            vendor = readings.get(f"pcie.{device}.vendor")
            if vendor is None or not vendor.ok or not str(vendor.value).startswith("0x"):
                continue
            upgraded_link = link_reading(reading, int(str(vendor.value), 16))
            if upgraded_link is not reading:
                added.append(replace(upgraded_link, source=f"{reading.source} ({OLDER})"))
    return added


def _cpu(readings: Mapping[str, Reading], node: Mapping[str, Reading]) -> list[Reading]:
    added = []
    states = readings.get("cpu.idle.states")
    if "cpu.idle.C6.disabled" not in readings and states is not None and not states.ok:
        source = f"{states.source} ({OLDER})"
        added.append(Reading.failed("cpu.idle.C6.disabled", states.status, states.reason, source))
    vm = _vm(node)
    if vm is None:
        return added
    # what the cpu probe passes through hidden_by_vm: every frequency reading, and the
    # idle states where sysfs has none
    hidden = [
        (r, "CPU idle states" if r.key.startswith("cpu.idle.") else "CPU frequency scaling")
        for r in [*readings.values(), *added]
        if r.status is ReadingStatus.MISSING
        and (
            r.key.startswith("cpu.freq.")
            or (
                r.key in ("cpu.idle.states", "cpu.idle.C6.disabled")
                and r.reason == "no cpuidle states in sysfs"
            )
        )
    ]
    if not hidden:
        return added
    from gpudiag.probes.cpu import hidden_by_vm  # the producer's own rule

    by_key = {r.key: r for r in added}
    for reading, what in hidden:
        by_key[reading.key] = hidden_by_vm(reading, vm, what)
    return list(by_key.values())


def _faults(readings: Mapping[str, Reading], node: Mapping[str, Reading]) -> list[Reading]:
    vm = _vm(node)
    if vm is None:
        return []
    # probes/faults.py's _edac: a VM has no EDAC memory controllers
    reason = f"a VM ({vm}) has no EDAC memory controllers: the hypervisor handles memory errors"
    return [
        Reading.failed(r.key, ReadingStatus.UNSUPPORTED, reason, f"{r.source} ({OLDER})")
        for key in ("faults.edac.correctable", "faults.edac.uncorrectable")
        if (r := readings.get(key)) is not None
        and r.status is ReadingStatus.MISSING
        and r.reason.startswith("no EDAC memory controllers")
    ]


# producer -> what it now derives from the readings it (and the node) holds
UPGRADES: dict[str, Callable[[Mapping[str, Reading], Mapping[str, Reading]], list[Reading]]] = {
    "gpu": _gpu,
    "pcie": _pcie,
    "cpu": _cpu,
    "faults": _faults,
    "import-q": _temperatures,
    "import-xml": _temperatures,
}


def upgraded(probes: tuple[ProbeResult, ...]) -> tuple[ProbeResult, ...]:
    """The probe results, each producer's with the readings it now derives from what the
    snapshot holds (replacing the one it derives again); the others as they are. The
    same tuple where nothing is added (a snapshot of this version)."""
    if not any(p.name in UPGRADES for p in probes):
        return probes
    node = {r.key: r for p in probes if p.name in ("host", "numa") for r in p.readings}
    out, changed = [], False
    for probe in probes:
        upgrade = UPGRADES.get(probe.name)
        if upgrade is None:
            out.append(probe)
            continue
        readings = {r.key: r for r in probe.readings}
        added = upgrade(readings, node)
        if not added:
            out.append(probe)
            continue
        readings.update({r.key: r for r in added})
        out.append(replace(probe, readings=tuple(readings.values())))
        changed = True
    return tuple(out) if changed else probes
