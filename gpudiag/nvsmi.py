"""Import of nvidia-smi outputs into readings with the same keys a live probe gives:
`nvidia-smi -q -x` XML (DTD v10 to v13), `nvidia-smi -q` text, an nvidia-bug-report.log
holding either, `nvidia-smi topo -m` and `nvidia-smi nvlink -s`.

A field that is absent is missing; 'N/A', '[Not Supported]' and 'deprecated' are
unsupported; '[Insufficient Permissions]' is needs-root; an error text is an error.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from functools import partial
from pathlib import Path
from typing import Any

import defusedxml.ElementTree as SafeET

from gpudiag import __version__, catalog
from gpudiag.catalog import normalize_bus_id
from gpudiag.inputs import InputError, printable, read_input
from gpudiag.model import ProbeResult, ProbeStatus, Reading, ReadingStatus, Snapshot, Value

# the readings an import makes (gpudiag/catalog.py): the GPU and driver probes' keys, and
# the product brand, which only nvidia-smi prints
READINGS = (
    *catalog.declare("GPU", catalog.config("gpu.{gpu}.brand", help="nvidia-smi's brand")),
    catalog.also(
        "gpu.{gpu}.bar1.total",
        "gpu.{gpu}.bar1.used",
        "gpu.{gpu}.board_part_number",
        "gpu.{gpu}.clocks.app_mem",
        "gpu.{gpu}.clocks.app_sm",
        "gpu.{gpu}.clocks.default_app_mem",
        "gpu.{gpu}.clocks.default_app_sm",
        "gpu.{gpu}.clocks.max_mem",
        "gpu.{gpu}.clocks.max_sm",
        "gpu.{gpu}.clocks.mem",
        "gpu.{gpu}.clocks.sm",
        "gpu.{gpu}.compute_mode",
        "gpu.{gpu}.cpu_affinity",
        "gpu.{gpu}.ecc.aggregate.corrected",
        "gpu.{gpu}.ecc.aggregate.corrected.dram",
        "gpu.{gpu}.ecc.aggregate.corrected.sram",
        "gpu.{gpu}.ecc.aggregate.uncorrected",
        "gpu.{gpu}.ecc.aggregate.uncorrected.dram",
        "gpu.{gpu}.ecc.aggregate.uncorrected.sram",
        "gpu.{gpu}.ecc.current",
        "gpu.{gpu}.ecc.pending",
        "gpu.{gpu}.ecc.volatile.corrected",
        "gpu.{gpu}.ecc.volatile.corrected.dram",
        "gpu.{gpu}.ecc.volatile.corrected.sram",
        "gpu.{gpu}.ecc.volatile.uncorrected",
        "gpu.{gpu}.ecc.volatile.uncorrected.dram",
        "gpu.{gpu}.ecc.volatile.uncorrected.sram",
        "gpu.{gpu}.fabric.health_flags",
        "gpu.{gpu}.fabric.state",
        "gpu.{gpu}.fabric.status",
        "gpu.{gpu}.health",
        "gpu.{gpu}.inforom.image",
        "gpu.{gpu}.memory.total",
        "gpu.{gpu}.memory.used",
        "gpu.{gpu}.memory.reserved",
        "gpu.{gpu}.mig.current",
        "gpu.{gpu}.mig.instances",
        "gpu.{gpu}.mig.pending",
        "gpu.{gpu}.name",
        "gpu.{gpu}.numa_node",
        "gpu.{gpu}.nvlink.active",
        "gpu.{gpu}.nvlink.count",
        "gpu.{gpu}.nvlink.{link}.speed",
        "gpu.{gpu}.nvlink.{link}.state",
        "gpu.{gpu}.pci.bus_id",
        "gpu.{gpu}.pci.device_id",
        "gpu.{gpu}.pcie.link_gen",
        "gpu.{gpu}.pcie.link_width",
        "gpu.{gpu}.pcie.max_link_gen",
        "gpu.{gpu}.pcie.max_link_width",
        "gpu.{gpu}.pcie.replay_counter",
        "gpu.{gpu}.persistence_mode",
        "gpu.{gpu}.power.default_limit",
        "gpu.{gpu}.power.draw",
        "gpu.{gpu}.power.enforced_limit",
        "gpu.{gpu}.power.limit",
        "gpu.{gpu}.power.max_limit",
        "gpu.{gpu}.power.min_limit",
        "gpu.{gpu}.processes.compute",
        "gpu.{gpu}.processes.graphics",
        "gpu.{gpu}.pstate",
        "gpu.{gpu}.remapped_rows.correctable",
        "gpu.{gpu}.remapped_rows.failure",
        "gpu.{gpu}.remapped_rows.pending",
        "gpu.{gpu}.remapped_rows.uncorrectable",
        "gpu.{gpu}.retired_pages.double_bit",
        "gpu.{gpu}.retired_pages.pending",
        "gpu.{gpu}.retired_pages.single_bit",
        "gpu.{gpu}.serial",
        "gpu.{gpu}.temperature.gpu",
        "gpu.{gpu}.temperature.gpu_max",
        "gpu.{gpu}.temperature.gpu_max_tlimit",
        "gpu.{gpu}.temperature.shutdown_tlimit",
        "gpu.{gpu}.temperature.slowdown_tlimit",
        "gpu.{gpu}.temperature.tlimit_margin",
        "gpu.{gpu}.temperature.shutdown",
        "gpu.{gpu}.temperature.slowdown",
        "gpu.{gpu}.throttle_reasons",
        "gpu.{gpu}.utilization.gpu",
        "gpu.{gpu}.utilization.memory",
        "gpu.{gpu}.uuid",
        "gpu.{gpu}.vbios",
        "nvml.cuda_driver_version",
        "nvml.driver_version",
        "nvml.gpu_count",
        "nvml.init",
        "topo.gpu.{gpu}.{peer}",
        "topo.gpu.{gpu}.nic.{nic}",
    ),
)

ANSI = re.compile(r"\x1b\[[0-9;]*m")


class ImportError_(ValueError):
    """A file that is none of the formats gpudiag imports."""


# ------------------------------------------------------------------ value parsing

_UNSUPPORTED = ("n/a", "[not supported]", "not supported", "[n/a]")


def status_of(raw: str) -> tuple[ReadingStatus, str] | None:
    """The status an nvidia-smi placeholder stands for, or None for a real value."""
    text = raw.strip()
    lower = text.lower()
    if lower in _UNSUPPORTED or lower == "":
        return ReadingStatus.UNSUPPORTED, f"nvidia-smi printed {text!r}"
    if "deprecated" in lower:
        return ReadingStatus.UNSUPPORTED, "nvidia-smi: deprecated on this driver"
    if "insufficient permissions" in lower:
        return ReadingStatus.NEEDS_ROOT, f"nvidia-smi printed {text!r}"
    if (lower.startswith("[") and lower.endswith("]")) or "error" in lower:
        return ReadingStatus.ERROR, f"nvidia-smi printed {text!r}"
    return None


MAX_DIGITS = 40  # nvidia-smi prints 64-bit counters: 20 digits at most
_NUMBER = re.compile(rf"^\s*(-?[0-9]{{1,{MAX_DIGITS}}}(\.[0-9]{{1,{MAX_DIGITS}}})?)")


def number(text: str) -> float:
    """'700.00 W', '1980 MHz', '16x', '41 C' -> the number (a finite float)."""
    match = _NUMBER.match(text)
    if not match or (len(text) > match.end() and text[match.end()].isdigit()):
        raise ValueError(f"no number in {text.strip()[:60]!r}")
    return float(match.group(1))


def integer(text: str) -> int:
    """An integer field: '16x' -> 16, '81559 MiB' -> 81559, '0x00' -> 0."""
    stripped = text.strip()
    if stripped.lower().startswith("0x"):
        if len(stripped) > MAX_DIGITS:
            raise ValueError(f"hex number too long: {stripped[:60]!r}")
        return int(stripped, 16)
    number(text)  # bounded and well-formed, or ValueError
    match = _NUMBER.match(text)
    assert match is not None
    return int(match.group(1)) if match.group(2) is None else int(float(match.group(1)))


def _pid(text: str) -> int:
    """A process id: a decimal integer."""
    stripped = text.strip()
    if not stripped.isdigit() or len(stripped) > MAX_DIGITS:
        raise ValueError(f"not a process id: {stripped[:60]!r}")
    return int(stripped)


def enabled(text: str) -> bool:
    """'Enabled'/'Disabled', 'Yes'/'No', 'Active'/'Not Active' -> bool."""
    value = text.strip().lower()
    if value in ("enabled", "yes", "active"):
        return True
    if value in ("disabled", "no", "not active"):
        return False
    raise ValueError(f"not a yes/no value: {text.strip()!r}")


def device_id(text: str) -> str:
    """'0x233010DE' or '233010DE' -> '0x2330'."""
    return f"0x{int(text.strip(), 16) >> 16:04x}"


def compute_mode(text: str) -> str:
    """'Default', 'Exclusive_Process' -> 'default', 'exclusive-process'."""
    return text.strip().lower().replace("_", "-").replace(" ", "-")


def text_value(text: str) -> str:
    return text.strip()


# (counter, kind, XML word, -q word, pre-R450 XML group) of each ECC count
ECC_COUNTERS = tuple(
    (counter, kind, xml_kind, text_kind, old)
    for counter in ("volatile", "aggregate")
    for kind, xml_kind, text_kind, old in (
        ("corrected", "correctable", "Correctable", "single_bit"),
        ("uncorrected", "uncorrectable", "Uncorrectable", "double_bit"),
    )
)


@dataclass(frozen=True)
class Field:
    """One GPU reading and where each format keeps it (first path found wins)."""

    suffix: str
    xml: tuple[str, ...]
    text: tuple[str, ...]
    parse: Callable[[str], Value] = text_value
    unit: str = ""


def _f(
    suffix: str, xml: str, text: str, parse: Callable[[str], Value] = text_value, unit: str = ""
) -> Field:
    return Field(suffix, tuple(xml.split("|")), tuple(text.split("|")), parse, unit)


FIELDS = (
    _f("name", "product_name", "Product Name"),
    _f("brand", "product_brand", "Product Brand"),
    _f("pci.bus_id", "pci/pci_bus_id", "PCI/Bus Id", normalize_bus_id),
    _f("pci.device_id", "pci/pci_device_id", "PCI/Device Id", device_id),
    _f("uuid", "uuid", "GPU UUID"),
    _f("serial", "serial", "Serial Number"),
    _f("vbios", "vbios_version", "VBIOS Version"),
    _f("inforom.image", "inforom_version/img_version", "Inforom Version/Image Version"),
    _f("board_part_number", "board_part_number", "Board Part Number"),
    _f("memory.total", "fb_memory_usage/total", "FB Memory Usage/Total", integer, "MiB"),
    _f("memory.used", "fb_memory_usage/used", "FB Memory Usage/Used", integer, "MiB"),
    _f("memory.reserved", "fb_memory_usage/reserved", "FB Memory Usage/Reserved", integer, "MiB"),
    _f("bar1.total", "bar1_memory_usage/total", "BAR1 Memory Usage/Total", integer, "MiB"),
    _f("bar1.used", "bar1_memory_usage/used", "BAR1 Memory Usage/Used", integer, "MiB"),
    _f("compute_mode", "compute_mode", "Compute Mode", compute_mode),
    _f("persistence_mode", "persistence_mode", "Persistence Mode", enabled),
    _f("mig.current", "mig_mode/current_mig", "MIG Mode/Current", enabled),
    _f("mig.pending", "mig_mode/pending_mig", "MIG Mode/Pending", enabled),
    _f("ecc.current", "ecc_mode/current_ecc", "ECC Mode/Current", enabled),
    _f("ecc.pending", "ecc_mode/pending_ecc", "ECC Mode/Pending", enabled),
    *(
        _f(
            f"ecc.{counter}.{kind}.dram",
            f"ecc_errors/{counter}/dram_{xml_kind}|ecc_errors/{counter}/{old}/device_memory",
            f"ECC Errors/{counter.title()}/DRAM {text_kind}"
            f"|ECC Errors/{counter.title()}/{old.replace('_', ' ').title()}/Device Memory",
            integer,
        )
        for counter, kind, xml_kind, text_kind, old in ECC_COUNTERS
    ),
    _f(
        "retired_pages.single_bit",
        "retired_pages/multiple_single_bit_retirement/retired_count",
        "Retired Pages/Single Bit ECC",
        integer,
    ),
    _f(
        "retired_pages.double_bit",
        "retired_pages/double_bit_retirement/retired_count",
        "Retired Pages/Double Bit ECC",
        integer,
    ),
    _f(
        "retired_pages.pending",
        "retired_pages/pending_retirement|retired_pages/pending_blacklist",
        "Retired Pages/Pending Page Blacklist|Retired Pages/Pending",
        enabled,
    ),
    _f(
        "remapped_rows.correctable",
        "remapped_rows/remapped_row_corr",
        "Remapped Rows/Correctable Error",
        integer,
    ),
    _f(
        "remapped_rows.uncorrectable",
        "remapped_rows/remapped_row_unc",
        "Remapped Rows/Uncorrectable Error",
        integer,
    ),
    _f(
        "remapped_rows.pending",
        "remapped_rows/remapped_row_pending",
        "Remapped Rows/Pending",
        enabled,
    ),
    _f(
        "remapped_rows.failure",
        "remapped_rows/remapped_row_failure",
        "Remapped Rows/Remapping Failure Occurred",
        enabled,
    ),
    _f("clocks.sm", "clocks/sm_clock", "Clocks/SM", integer, "MHz"),
    _f("clocks.mem", "clocks/mem_clock", "Clocks/Memory", integer, "MHz"),
    _f("clocks.max_sm", "max_clocks/sm_clock", "Max Clocks/SM", integer, "MHz"),
    _f("clocks.max_mem", "max_clocks/mem_clock", "Max Clocks/Memory", integer, "MHz"),
    _f(
        "clocks.app_sm",
        "applications_clocks/graphics_clock",
        "Applications Clocks/Graphics",
        integer,
        "MHz",
    ),
    _f(
        "clocks.app_mem",
        "applications_clocks/mem_clock",
        "Applications Clocks/Memory",
        integer,
        "MHz",
    ),
    _f(
        "clocks.default_app_sm",
        "default_applications_clocks/graphics_clock",
        "Default Applications Clocks/Graphics",
        integer,
        "MHz",
    ),
    _f(
        "clocks.default_app_mem",
        "default_applications_clocks/mem_clock",
        "Default Applications Clocks/Memory",
        integer,
        "MHz",
    ),
    _f("pstate", "performance_state", "Performance State"),
    _f(
        "power.draw",
        "gpu_power_readings/instant_power_draw|gpu_power_readings/power_draw"
        "|power_readings/power_draw",
        "GPU Power Readings/Instantaneous Power Draw|GPU Power Readings/Power Draw"
        "|Power Readings/Power Draw",
        number,
        "W",
    ),
    _f(
        "power.limit",
        "gpu_power_readings/current_power_limit|power_readings/power_limit",
        "GPU Power Readings/Current Power Limit|Power Readings/Power Limit"
        "|GPU Power Readings/GPU Ceiling Power Limit/Current Power Limit",
        number,
        "W",
    ),
    _f(
        "power.default_limit",
        "gpu_power_readings/default_power_limit|power_readings/default_power_limit",
        "GPU Power Readings/Default Power Limit|Power Readings/Default Power Limit"
        "|GPU Power Readings/GPU Ceiling Power Limit/Default Power Limit",
        number,
        "W",
    ),
    _f(
        "power.enforced_limit",
        "power_readings/enforced_power_limit",
        "Power Readings/Enforced Power Limit",
        number,
        "W",
    ),
    _f(
        "power.min_limit",
        "gpu_power_readings/min_power_limit|power_readings/min_power_limit",
        "GPU Power Readings/Min Power Limit|Power Readings/Min Power Limit",
        number,
        "W",
    ),
    _f(
        "power.max_limit",
        "gpu_power_readings/max_power_limit|power_readings/max_power_limit",
        "GPU Power Readings/Max Power Limit|Power Readings/Max Power Limit",
        number,
        "W",
    ),
    _f("temperature.gpu", "temperature/gpu_temp", "Temperature/GPU Current Temp", integer, "C"),
    _f(
        "temperature.slowdown",
        "temperature/gpu_temp_slow_threshold",
        "Temperature/GPU Slowdown Temp",
        integer,
        "C",
    ),
    _f(
        "temperature.shutdown",
        "temperature/gpu_temp_max_threshold",
        "Temperature/GPU Shutdown Temp",
        integer,
        "C",
    ),
    _f(
        "temperature.gpu_max",
        "temperature/gpu_temp_max_gpu_threshold",
        "Temperature/GPU Max Operating Temp",
        integer,
        "C",
    ),
    _f(
        "pcie.link_gen",
        "pci/pci_gpu_link_info/pcie_gen/current_link_gen",
        "PCI/GPU Link Info/PCIe Generation/Current",
        integer,
    ),
    _f(
        "pcie.max_link_gen",
        "pci/pci_gpu_link_info/pcie_gen/max_device_link_gen|pci/pci_gpu_link_info/pcie_gen/"
        "max_link_gen",
        "PCI/GPU Link Info/PCIe Generation/Device Max|PCI/GPU Link Info/PCIe Generation/Max",
        integer,
    ),
    _f(
        "pcie.link_width",
        "pci/pci_gpu_link_info/link_widths/current_link_width",
        "PCI/GPU Link Info/Link Width/Current",
        integer,
        "lanes",
    ),
    _f(
        "pcie.max_link_width",
        "pci/pci_gpu_link_info/link_widths/max_link_width",
        "PCI/GPU Link Info/Link Width/Max",
        integer,
        "lanes",
    ),
    _f("pcie.replay_counter", "pci/replay_counter", "PCI/Replays Since Reset", integer),
    _f("utilization.gpu", "utilization/gpu_util", "Utilization/GPU|Utilization/Gpu", integer, "%"),
    _f("utilization.memory", "utilization/memory_util", "Utilization/Memory", integer, "%"),
    _f("fabric.state", "fabric/state", "Fabric/State", compute_mode),
)

THROTTLE_NAMES = {
    "gpu_idle": "GpuIdle",
    "idle": "GpuIdle",
    "applications_clocks_setting": "ApplicationsClocksSetting",
    "sw_power_cap": "SwPowerCap",
    "hw_slowdown": "HwSlowdown",
    "sync_boost": "SyncBoost",
    "sw_thermal_slowdown": "SwThermalSlowdown",
    "hw_thermal_slowdown": "HwThermalSlowdown",
    "hw_power_brake_slowdown": "HwPowerBrakeSlowdown",
    "display_clocks_setting": "DisplayClockSetting",
    "display_clock_setting": "DisplayClockSetting",
}


def _throttle_name(label: str) -> str | None:
    slug = re.sub(r"[^a-z0-9]+", "_", label.lower()).strip("_")
    slug = re.sub(r"^clocks_(event|throttle)_reason_", "", slug)
    return THROTTLE_NAMES.get(slug)


def _throttle_reading(index: int, active: list[str] | None, source: str) -> Reading:
    """The throttle reasons marked Active, or missing when the file has no such section."""
    key = f"gpu.{index}.throttle_reasons"
    if active is None:
        return Reading.failed(key, ReadingStatus.MISSING, "not in the imported file", source)
    return Reading(key, active, source=source)


def _reading(
    key: str, raw: str | None, parse: Callable[[str], Value], unit: str, source: str
) -> Reading:
    if raw is None:
        return Reading.failed(key, ReadingStatus.MISSING, "not in the imported file", source, unit)
    placeholder = status_of(raw)
    if placeholder is not None:
        return Reading.failed(key, placeholder[0], placeholder[1], source, unit)
    try:
        return Reading(key, parse(raw), unit, source)
    except (ValueError, KeyError) as exc:
        return Reading.failed(
            key, ReadingStatus.ERROR, f"cannot parse {raw.strip()!r}: {exc}", source, unit
        )


# ------------------------------------------------------------------ ECC counts

Lookup = Callable[[str], "str | None"]


def _sum_readings(key: str, parts: list[Reading], source: str) -> Reading:
    """The sum of counts: the ones taken, when the others are counters the GPU does not
    have (unsupported); unsupported when none is; the first failure when one could not
    be read (a sum without it would be a guess)."""
    failed = [p for p in parts if not p.ok and p.status is not ReadingStatus.UNSUPPORTED]
    if failed:
        return Reading.failed(key, failed[0].status, failed[0].reason, source)
    taken = [p for p in parts if p.ok]
    if not taken:
        return Reading.failed(key, ReadingStatus.UNSUPPORTED, parts[0].reason, source)
    return Reading(key, sum(int(p.value) for p in taken), source=source)  # type: ignore[arg-type]


def _ecc_readings(index: int, find: Lookup, xml: bool, prefix: str) -> list[Reading]:
    """gpu.N.ecc.{volatile,aggregate}.{corrected,uncorrected}.sram, and the totals where
    the file prints them. The SRAM count: from driver 535 on the uncorrectable one is
    printed split into parity and SEC-DED errors, which are summed (NVML's SRAM location
    counts both). Files from drivers before R450 count by unit (register file, L1, L2),
    not SRAM: the SRAM count is missing there, and their printed total is the total."""
    readings = []
    for counter, kind, xml_kind, text_kind, old in ECC_COUNTERS:
        key = f"gpu.{index}.ecc.{counter}.{kind}.sram"
        if xml:
            base = f"ecc_errors/{counter}/sram_{xml_kind}"
            split = (f"{base}_parity", f"{base}_secded")
            old_total = f"ecc_errors/{counter}/{old}/total"
        else:
            base = f"ECC Errors/{counter.title()}/SRAM {text_kind}"
            split = (f"{base} Parity", f"{base} SEC-DED")
            old_total = f"ECC Errors/{counter.title()}/{old.replace('_', ' ').title()}/Total"
        if find(base) is not None:
            readings.append(_reading(key, find(base), integer, "", f"{prefix}/{base}"))
        elif any(find(path) is not None for path in split):
            parts = [_reading(key, find(path), integer, "", f"{prefix}/{path}") for path in split]
            readings.append(_sum_readings(key, parts, f"{prefix}/{split[0]}+{split[1]}"))
        else:
            reason = "not in the imported file (drivers before R450 count by unit, not SRAM)"
            readings.append(Reading.failed(key, ReadingStatus.MISSING, reason, f"{prefix}/{base}"))
        if find(old_total) is not None:
            total_key = f"gpu.{index}.ecc.{counter}.{kind}"
            readings.append(
                _reading(total_key, find(old_total), integer, "", f"{prefix}/{old_total}")
            )
    return readings


_ECC_DRAM = re.compile(r"^gpu\.\d+\.ecc\.(volatile|aggregate)\.(corrected|uncorrected)\.dram$")


def with_ecc_totals(readings: tuple[Reading, ...]) -> tuple[Reading, ...]:
    """`readings` plus gpu.N.ecc.{volatile,aggregate}.{corrected,uncorrected} where only
    the DRAM and SRAM counts are there: their sum, the same count NVML's
    nvmlDeviceGetTotalEccErrors gives the live probe (every location; nvidia-smi splits
    it into DRAM and SRAM). Used by the importer and to migrate version 1 snapshots."""
    by_key = {r.key: r for r in readings}
    added = []
    for reading in readings:
        if _ECC_DRAM.match(reading.key) is None:
            continue
        total_key = reading.key[: -len(".dram")]
        if total_key in by_key:
            continue
        sram = by_key.get(f"{total_key}.sram")
        if sram is not None and sram.source.endswith(("/register_file", "/Register File")):
            # a version 1 import of a pre-R450 file took the register file for SRAM
            reason = "a pre-R450 file counts by unit; import it again for its printed total"
            added.append(Reading.failed(total_key, ReadingStatus.MISSING, reason, sram.source))
            continue
        parts = [reading] if sram is None else [reading, sram]
        sources = "+".join(p.source for p in parts)
        added.append(_sum_readings(total_key, parts, f"sum of {sources}"))
    return (*readings, *added)


# ------------------------------------------------------------------ the two GPU formats


@dataclass
class Node:
    """One line of `nvidia-smi -q`: a label, its value (may be None) and nested lines."""

    value: str | None = None
    children: dict[str, Node] = field(default_factory=dict)
    entries: list[tuple[str, Node]] = field(default_factory=list)  # in order, repeats kept

    def find(self, path: str) -> Node | None:
        node: Node | None = self
        for part in path.split("/"):
            if node is None:
                return None
            node = node.children.get(part)
        return node

    def walk(self) -> Iterator[tuple[str, Node]]:
        for label, child in self.children.items():
            yield label, child
            yield from child.walk()


def parse_q_text(text: str) -> tuple[dict[str, str], list[tuple[str, Node]]]:
    """`nvidia-smi -q` -> (header fields, [(GPU bus id, tree of its lines)])."""
    header: dict[str, str] = {}
    gpus: list[tuple[str, Node]] = []
    stack: list[tuple[int, Node]] = []
    for raw_line in text.replace("\r\n", "\n").split("\n"):
        line = raw_line.rstrip()
        if not line.strip() or line.startswith("="):
            continue
        indent = len(line) - len(line.lstrip(" "))
        label, sep, value = line.strip().partition(":")
        label = label.strip()
        if indent == 0:
            match = re.match(
                r"^GPU ([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7])$", line.strip()
            )
            if match:
                root = Node()
                gpus.append((match.group(1), root))
                stack = [(0, root)]
            elif sep:
                header[label] = value.strip()
            continue
        if not stack:
            continue
        while stack and stack[-1][0] >= indent:
            stack.pop()
        if not stack:
            continue
        node = Node(value.strip() if sep else None)
        stack[-1][1].children.setdefault(label, node)
        stack[-1][1].entries.append((label, node))
        stack.append((indent, node))
    return header, gpus


def _q_value(tree: Node, path: str) -> str | None:
    """The value at `path`, or the placeholder a whole section was printed as
    ('Remapped Rows : N/A' holds no fields: each is N/A), or None when absent."""
    node = tree
    for part in path.split("/"):
        child = node.children.get(part)
        if child is None:
            placeholder = node is not tree and node.value and status_of(node.value)
            return node.value if placeholder else None
        node = child
    return node.value


def _xml_value(gpu: Any, path: str) -> str | None:
    """As _q_value, for one <gpu> element: `<remapped_rows>N/A</remapped_rows>`."""
    element = gpu
    for part in path.split("/"):
        child = element.find(part)
        if child is None:
            text = (element.text or "").strip()
            return text if element is not gpu and text and status_of(text) else None
        element = child
    return element.text or ""


# thresholds that drivers from R570 on print only relative to T.Limit (as the live probe
# reads them: NVML answers NotSupported for the absolute value)
RELATIVE_THRESHOLDS = {
    "temperature.slowdown": (
        "temperature/gpu_temp_slow_tlimit_threshold",
        "Temperature/GPU Slowdown T.Limit Temp",
    ),
    "temperature.shutdown": (
        "temperature/gpu_temp_max_tlimit_threshold",
        "Temperature/GPU Shutdown T.Limit Temp",
    ),
    "temperature.gpu_max": (
        "temperature/gpu_temp_max_gpu_tlimit_threshold",
        "Temperature/GPU Max Operating T.Limit Temp",
    ),
}


TLIMIT_MARGIN = ("temperature/gpu_temp_tlimit", "Temperature/GPU T.Limit Temp")
CURRENT_TEMPERATURE = ("temperature/gpu_temp", "Temperature/GPU Current Temp")


def _from_tlimit(
    key: str, shown: str, find: Lookup, xml: bool, prefix: str, relative: str
) -> Reading:
    """An absolute threshold nvidia-smi prints only relative to T.Limit, as the live
    probe derives it (probes/gpu.py from_tlimit): the current temperature plus the margin
    to T.Limit ('GPU T.Limit Temp'), less the threshold's T.Limit value; unsupported,
    saying so, where the current temperature or the margin is not printed."""
    margin_path, current_path = TLIMIT_MARGIN[0 if xml else 1], CURRENT_TEMPERATURE[0 if xml else 1]
    margin, current = find(margin_path), find(current_path)
    source = f"{prefix}/{current_path}+{margin_path}+{relative}"
    try:
        value = integer(current or "") + integer(margin or "") - integer(shown)
    except (ValueError, KeyError):
        reason = f"nvidia-smi prints it only relative to T.Limit ({shown.strip()})"
        return Reading.failed(key, ReadingStatus.UNSUPPORTED, reason, f"{prefix}/{relative}", "C")
    return Reading(key, value, "C", source)


def _field_readings(
    index: int, find: Lookup, xml: bool, prefix: str, sections: set[str]
) -> list[Reading]:
    """The FIELDS of one GPU. `sections`: the top-level sections the file holds for it.
    A field whose whole section is absent is left out, as something the file cannot
    hold (a `nvidia-smi -q -d ...` file holds one section; a driver older than a
    section, such as Remapped Rows before R450, does not print it); a field absent from
    a section that is there is missing."""
    readings = []
    for spec in FIELDS:
        paths = spec.xml if xml else spec.text
        if not any(p.split("/")[0] in sections for p in paths):
            continue
        path = next((p for p in paths if find(p) is not None), paths[0])
        key = f"gpu.{index}.{spec.suffix}"
        raw = find(path)
        relative = RELATIVE_THRESHOLDS.get(spec.suffix, ("", ""))[0 if xml else 1]
        if raw is None and relative and (shown := find(relative)) is not None:
            reading = _from_tlimit(key, shown, find, xml, prefix, relative)
        elif spec.suffix == "fabric.state" and raw is not None and status_of(raw):
            # nvidia-smi prints N/A where NVML answers the state 'not supported'
            reading = Reading(key, "not-supported", "", f"{prefix}/{path}")
        else:
            reading = _reading(key, raw, spec.parse, spec.unit, f"{prefix}/{path}")
        readings.append(reading)
    return readings


# the T.Limit temperatures (R5xx on): the margin to T.Limit and each threshold relative to it
TLIMIT_FIELDS = (
    ("temperature.tlimit_margin", "temperature/gpu_temp_tlimit", "Temperature/GPU T.Limit Temp"),
    *((f"temperature.{name}_tlimit", xml, text) for name, (xml, text) in (
        ("slowdown", RELATIVE_THRESHOLDS["temperature.slowdown"]),
        ("shutdown", RELATIVE_THRESHOLDS["temperature.shutdown"]),
        ("gpu_max", RELATIVE_THRESHOLDS["temperature.gpu_max"]),
    )),
)  # fmt: skip


def _tlimit_readings(index: int, find: Lookup, xml: bool, prefix: str) -> list[Reading]:
    """gpu.N.temperature.{tlimit_margin,*_tlimit}, where the file has its Temperature
    section; unsupported where it prints no T.Limit lines (drivers before them: NVML
    answers NotSupported there too)."""
    readings = []
    for suffix, xml_path, text_path in TLIMIT_FIELDS:
        path = xml_path if xml else text_path
        key, raw = f"gpu.{index}.{suffix}", find(path)
        if raw is None:
            reason = "nvidia-smi prints no T.Limit temperatures here (older driver)"
            readings.append(
                Reading.failed(key, ReadingStatus.UNSUPPORTED, reason, f"{prefix}/{path}", "C")
            )
        else:
            readings.append(_reading(key, raw, integer, "C", f"{prefix}/{path}"))
    return readings


def _fabric_status(index: int, find: Lookup, xml: bool, prefix: str) -> list[Reading]:
    """gpu.N.fabric.status as the live probe gives it: 'ok' for nvidia-smi's 'Success'
    (else its text) once the state is Completed; unsupported where the state is N/A (no
    NVLink fabric); missing while registration has not completed."""
    state_path, status_path = ("fabric/state", "fabric/status") if xml else (
        "Fabric/State", "Fabric/Status")  # fmt: skip
    state, status = find(state_path), find(status_path)
    key, source = f"gpu.{index}.fabric.status", f"{prefix}/{status_path}"
    if state is None:
        return []  # a file without the Fabric section (older driver, -q -d) cannot hold it
    if status_of(state):
        reason = "the GPU has no NVLink fabric (fabric state not-supported)"
        return [Reading.failed(key, ReadingStatus.UNSUPPORTED, reason, source)]
    if state.strip().lower() != "completed":
        reason = f"fabric registration has not completed (state {state.strip().lower()})"
        return [Reading.failed(key, ReadingStatus.MISSING, reason, source)]
    if status is not None and status.strip().lower() == "success":
        return [Reading(key, "ok", source=source)]
    return [_reading(key, status, text_value, "", source)]


# the fabric health lines nvidia-smi prints (R560 on) -> the live probe's flag names
FABRIC_HEALTH = (
    ("degraded-bandwidth", "health/bandwidth", "Health/Bandwidth"),
    ("route-recovery", "health/route_recovery_in_progress", "Health/Route Recovery in progress"),
    ("route-unhealthy", "health/route_unhealthy", "Health/Route Unhealthy"),
    ("access-timeout-recovery", "health/access_timeout_recovery", "Health/Access Timeout Recovery"),
)
FLAG_SET = {"true": True, "degraded": True, "false": False, "full": False}


def _fabric_health(index: int, find: Lookup, xml: bool, prefix: str) -> list[Reading]:
    """gpu.N.fabric.health_flags from the fabric's Health lines, as the live probe reads
    NVML's mask: the flags whose line says True (Bandwidth: Degraded); a line printed
    N/A is a flag not set (NVML's 'not supported' bits, which the live probe does not
    count either: the real H100s' lines are all N/A, live and imported []). Unsupported
    where the file has a Fabric section but no Health lines (a driver before them); an
    error naming a value this importer does not know, never a guess."""
    base = "fabric" if xml else "Fabric"
    state = find(f"{base}/state" if xml else f"{base}/State")
    health = f"{base}/{'health' if xml else 'Health'}"
    key, source = f"gpu.{index}.fabric.health_flags", f"{prefix}/{health}"
    if state is None:
        return []  # no Fabric section: the file cannot hold it
    values = [(name, find(f"{base}/{x if xml else t}")) for name, x, t in FABRIC_HEALTH]
    if all(v is None for _, v in values):
        reason = "nvidia-smi prints no fabric health lines (a driver before them)"
        return [Reading.failed(key, ReadingStatus.UNSUPPORTED, reason, source)]
    shown = [(name, v.strip()) for name, v in values if v is not None and not status_of(v)]
    unknown = [f"{name} {v!r}" for name, v in shown if v.lower() not in FLAG_SET]
    if unknown:
        reason = f"cannot parse the fabric health: {', '.join(unknown)[:120]}"
        return [Reading.failed(key, ReadingStatus.ERROR, reason, source)]
    return [Reading(key, [name for name, v in shown if FLAG_SET[v.lower()]], source=source)]


def _mig_instances(
    index: int, devices: list[tuple[str | None, str | None, str | None, str | None]], source: str
) -> Reading:
    """gpu.N.mig.instances from (index, GPU instance, compute instance, FB total) of each
    MIG device, as the live probe gives them: 'GI 2 / CI 0: 40448 MiB', in index order."""
    key = f"gpu.{index}.mig.instances"
    try:
        rows = sorted((integer(i or ""), integer(g or ""), integer(c or ""), integer(t or ""))
                      for i, g, c, t in devices)  # fmt: skip
    except ValueError as exc:
        return Reading.failed(key, ReadingStatus.ERROR, f"cannot parse a MIG device: {exc}", source)
    return Reading(key, [f"GI {g} / CI {c}: {t} MiB" for _, g, c, t in rows], source=source)


def _q_mig(index: int, tree: Node, prefix: str) -> list[Reading]:
    """MIG devices of a GPU in MIG mode: 'MIG Device' blocks (R590 prints them in the
    GPU's section, older drivers under 'MIG Devices'); none where MIG is off."""
    current = _q_value(tree, "MIG Mode/Current")
    if current is None or current.strip() != "Enabled":
        return []
    holder = tree.children.get("MIG Devices", tree)
    if holder is not tree and holder.value is not None and holder.value.strip() == "None":
        return [Reading(f"gpu.{index}.mig.instances", [], source=f"{prefix}/MIG Devices")]
    blocks = [node for label, node in holder.entries if label == "MIG Device"]
    if not blocks:
        return []
    devices = [
        (
            _q_value(b, "Index"),
            _q_value(b, "GPU Instance ID"),
            _q_value(b, "Compute Instance ID"),
            _q_value(b, "Shared FB Memory Usage/Total") or _q_value(b, "FB Memory Usage/Total"),
        )
        for b in blocks
    ]
    return [_mig_instances(index, devices, f"{prefix}/MIG Device")]


def _xml_mig(index: int, gpu: Any, prefix: str) -> list[Reading]:
    """As _q_mig, for <mig_devices><mig_device> (never seen in a real file here: the
    real XML files have MIG off or 'None'; the tags are nvidia-smi's DTD's)."""
    if (gpu.findtext("mig_mode/current_mig") or "").strip() != "Enabled":
        return []
    holder = gpu.find("mig_devices")
    if holder is None:
        return []
    devices = [
        (
            d.findtext("index"),
            d.findtext("gpu_instance_id"),
            d.findtext("compute_instance_id"),
            d.findtext("shared_fb_memory_usage/total") or d.findtext("fb_memory_usage/total"),
        )
        for d in holder.findall("mig_device")
    ]
    return [_mig_instances(index, devices, f"{prefix}/mig_devices")]


def _q_processes(index: int, tree: Node, prefix: str) -> list[Reading]:
    """gpu.N.processes.{compute,graphics}: the PIDs by type ('C', 'G', 'C+G')."""
    processes = tree.children.get("Processes")
    if processes is None:
        return []
    source = f"{prefix}/Processes"
    if processes.value is not None and status_of(processes.value):
        return [
            _reading(f"gpu.{index}.processes.{kind}", processes.value, text_value, "", source)
            for kind in ("compute", "graphics")
        ]
    entries = [
        (int(node.value), node)
        for label, node in processes.entries
        if label == "Process ID" and node.value and node.value.strip().isdigit()
    ]
    readings = []
    for kind, letter in (("compute", "C"), ("graphics", "G")):
        pids = [pid for pid, node in entries if letter in (_q_value(node, "Type") or "")]
        readings.append(Reading(f"gpu.{index}.processes.{kind}", pids, source=source))
    return readings


# what a paste puts where it left lines out
ELISIONS = frozenset({"...", "[...]", "\u2026", "[\u2026]", "<snip>", "[snip]", "[snipped]"})
CUT = "the paste is cut here (lines replaced by '...'): not known"


def _is_cut(tree: Node) -> bool:
    """Whether a GPU's section had lines left out of the paste."""
    return any(label in ELISIONS for label, _ in tree.walk())


def _said_cut(readings: list[Reading]) -> list[Reading]:
    """A cut section's readings that are absent say so: unknown, never 'not there'."""
    return [
        Reading.failed(r.key, ReadingStatus.MISSING, CUT, r.source, r.unit)
        if r.status is ReadingStatus.MISSING and r.reason == "not in the imported file"
        else r
        for r in readings
    ]


NVSMI_BANNER = re.compile(r"^==============NVSMI LOG==============\s*$", re.MULTILINE)


def ends_cut(text: str) -> tuple[str, str] | None:
    """(bus id, the text without its last line) where the file stops part-way through
    its last GPU's section: a whole -q section (it starts with 'Product Name') always
    prints 'Processes', and this one does not. Its last line may be cut mid-value, so it
    is dropped. None where the last section is whole, or cannot be told whole (a
    `-q -d` file prints only the sections asked for)."""
    last = [p for p in NVSMI_BANNER.split(text) if p.strip()] or [text]
    gpus = parse_q_text(last[-1])[1]
    if not gpus:
        return None
    bus_id, tree = gpus[-1]
    if "Product Name" not in tree.children or "Processes" in tree.children:
        return None
    kept = text.rstrip().rsplit("\n", 1)[0]
    return bus_id, kept


def _merged_q(text: str) -> tuple[dict[str, str], list[tuple[str, Node]]]:
    """A file of one or several -q outputs one after another (a bug report, an
    exporter's bundle: idle, then under load): the first output's header, and each GPU
    once, by bus id, as the first output that lists it shows it."""
    parts = [p for p in NVSMI_BANNER.split(text) if p.strip()] or [text]
    header: dict[str, str] = {}
    gpus: dict[str, tuple[str, Node]] = {}
    for part in parts:
        part_header, part_gpus = parse_q_text(part)
        if not header and "Driver Version" in part_header:
            header = part_header
        for bus_id, tree in part_gpus:
            gpus.setdefault(normalize_bus_id(bus_id), (bus_id, tree))
    if not header:
        header = parse_q_text(parts[0])[0]
    return header, list(gpus.values())


def _ended(bus_id: str) -> str:
    return f"the file stops part-way through GPU {bus_id}'s section: not known"


def _q_readings(text: str) -> list[Reading]:
    cut_at_end = ends_cut(text)
    if cut_at_end is not None:
        text = cut_at_end[1]
    header, gpus = _merged_q(text)
    readings = _node_readings(
        header.get("Driver Version"),
        header.get("CUDA Version"),
        header.get("Attached GPUs"),
        "nvidia-smi-q",
        len(gpus),
    )
    cut = any(line.strip() in ELISIONS for line in text.splitlines())
    if cut and header.get("Attached GPUs") is None:  # a count of a cut paste's GPUs: wrong
        readings = [
            Reading.failed(r.key, ReadingStatus.MISSING, f"{CUT}: how many GPUs", r.source, "GPUs")
            if r.key == "nvml.gpu_count"
            else r
            for r in readings
        ]
    ended = cut_at_end is not None and gpus[-1][0] == cut_at_end[0]
    if ended and header.get("Attached GPUs") is None:  # GPUs after the cut are not listed
        reason = f"{_ended(gpus[-1][0])}: how many GPUs"
        readings = [
            Reading.failed(r.key, ReadingStatus.MISSING, reason, r.source, "GPUs")
            if r.key == "nvml.gpu_count"
            else r
            for r in readings
        ]
    for index, (bus_id, tree) in enumerate(gpus):
        source_prefix = f"nvidia-smi-q:GPU {bus_id}"
        readings.append(Reading(f"gpu.{index}.health", "ok", source=source_prefix))
        sections = set(tree.children)
        find = partial(_q_value, tree)
        if ended and index == len(gpus) - 1:  # what the file does not reach is unknown
            readings.extend(_ended_readings(index, tree, bus_id, source_prefix))
            continue
        if _is_cut(tree):  # a section left out may be one the GPU has: every field is asked
            every = {p.split("/")[0] for spec in FIELDS for p in spec.text}
            readings.extend(_said_cut(_field_readings(index, find, False, source_prefix, every)))
        else:
            readings.extend(_field_readings(index, find, False, source_prefix, sections))
        if "ECC Errors" in sections:
            readings.extend(_ecc_readings(index, find, False, source_prefix))
        if "Temperature" in sections:
            readings.extend(_tlimit_readings(index, find, False, source_prefix))
        readings.extend(_fabric_status(index, find, False, source_prefix))
        readings.extend(_fabric_health(index, find, False, source_prefix))
        readings.extend(_q_mig(index, tree, source_prefix))
        readings.extend(_q_processes(index, tree, source_prefix))
        reasons = tree.find("Clocks Event Reasons") or tree.find("Clocks Throttle Reasons")
        if reasons is None:
            continue
        active = (
            None
            if reasons is None
            else [
                name
                for label, node in reasons.walk()
                if node.value and node.value.strip() == "Active" and (name := _throttle_name(label))
            ]
        )
        readings.append(_throttle_reading(index, active, f"{source_prefix}/Clocks Event Reasons"))
    return list(with_ecc_totals(tuple(readings)))


def _ended_readings(index: int, tree: Node, bus_id: str, prefix: str) -> list[Reading]:
    """The readings of a GPU whose section the file stops in: what it shows, and every
    other field, its ECC counts, processes and throttle reasons unknown, saying so."""
    find = partial(_q_value, tree)
    every = {p.split("/")[0] for spec in FIELDS for p in spec.text}
    readings = _field_readings(index, find, False, prefix, every)
    readings += _ecc_readings(index, find, False, prefix)
    readings += _q_processes(index, tree, prefix) or [
        Reading.failed(f"gpu.{index}.processes.{kind}", ReadingStatus.MISSING, "", prefix)
        for kind in ("compute", "graphics")
    ]
    reasons = tree.find("Clocks Event Reasons") or tree.find("Clocks Throttle Reasons")
    if reasons is None or reasons is tree.entries[-1][1]:  # absent, or where the file stops
        readings.append(_throttle_reading(index, None, f"{prefix}/Clocks Event Reasons"))
    else:
        active = [
            name
            for label, node in reasons.walk()
            if node.value and node.value.strip() == "Active" and (name := _throttle_name(label))
        ]
        readings.append(_throttle_reading(index, active, f"{prefix}/Clocks Event Reasons"))
    reason = _ended(bus_id)
    return [
        Reading.failed(r.key, ReadingStatus.MISSING, reason, r.source, r.unit)
        if r.status is ReadingStatus.MISSING
        else r
        for r in readings
    ]


_XML_TAG = re.compile(r"<(/?)([A-Za-z_][\w.:-]*)((?:\s[^<>]*?)?)(/?)>")
_GPU_ID = re.compile(r"""\bid\s*=\s*["']([^"']+)["']""")


def xml_stops_part_way(text: str) -> str | None:
    """Where an XML that stops before its end leaves off: 'in <gpu id=...>, <clocks>',
    naming the elements it does not close, innermost last; None where every element it
    opens is closed (any other fault is the parser's to name)."""
    stack: list[str] = []
    for match in _XML_TAG.finditer(text):
        closing, name, attributes, empty = match.groups()
        if empty:
            continue
        if not closing:
            bus = _GPU_ID.search(attributes) if name == "gpu" else None
            stack.append(f"<gpu id={bus.group(1)}>" if bus else f"<{name}>")
        elif stack and stack[-1].startswith((f"<{name}>", f"<{name} ")):
            stack.pop()
        else:
            return None  # mismatched: not a file cut short
    if not stack:
        return None
    shown = stack if len(stack) <= 8 else [*stack[:3], "...", *stack[-4:]]
    return ", ".join(shown)


def _xml_readings(text: str) -> list[Reading]:
    try:
        root = SafeET.fromstring(text.encode("utf-8"))
    except Exception as exc:  # defusedxml raises several types for hostile or broken XML
        if (open_ := xml_stops_part_way(text)) is not None:
            raise ImportError_(
                f"the XML stops part-way ({exc}): the end of {open_} is missing"
            ) from None
        raise ImportError_(f"not readable XML: {exc}") from None
    if root.tag != "nvidia_smi_log":
        raise ImportError_(f"XML root is <{root.tag}>, not <nvidia_smi_log>")
    readings = _node_readings(
        root.findtext("driver_version"),
        root.findtext("cuda_version"),
        root.findtext("attached_gpus"),
        "nvidia-smi-xml",
        len(root.findall("gpu")),
    )
    for index, gpu in enumerate(root.findall("gpu")):
        prefix = f"nvidia-smi-xml:gpu[{index}]"
        readings.append(Reading(f"gpu.{index}.health", "ok", source=prefix))
        sections = {child.tag for child in gpu}
        find = partial(_xml_value, gpu)
        readings.extend(_field_readings(index, find, True, prefix, sections))
        if "ecc_errors" in sections:
            readings.extend(_ecc_readings(index, find, True, prefix))
        if "temperature" in sections:
            readings.extend(_tlimit_readings(index, find, True, prefix))
        readings.extend(_fabric_status(index, find, True, prefix))
        readings.extend(_fabric_health(index, find, True, prefix))
        readings.extend(_xml_mig(index, gpu, prefix))
        reasons = gpu.find("clocks_event_reasons")
        if reasons is None:
            reasons = gpu.find("clocks_throttle_reasons")
        active = (
            None
            if reasons is None
            else [
                name
                for child in reasons
                if (child.text or "").strip() == "Active" and (name := _throttle_name(child.tag))
            ]
        )
        if reasons is not None:  # a file without them cannot hold them
            readings.append(_throttle_reading(index, active, f"{prefix}/clocks_event_reasons"))
        processes = gpu.find("processes")
        if processes is not None:
            infos = processes.findall("process_info")
            for suffix, letter in (("compute", "C"), ("graphics", "G")):
                try:
                    pids = [
                        _pid(p.findtext("pid") or "")
                        for p in infos
                        if letter in (p.findtext("type") or "")
                    ]
                except ValueError as exc:
                    readings.append(
                        Reading.failed(
                            f"gpu.{index}.processes.{suffix}",
                            ReadingStatus.ERROR,
                            f"cannot parse a process id: {exc}",
                            f"{prefix}/processes",
                        )
                    )
                    continue
                readings.append(
                    Reading(f"gpu.{index}.processes.{suffix}", pids, source=f"{prefix}/processes")
                )
    return list(with_ecc_totals(tuple(readings)))


def _node_readings(
    driver: str | None, cuda: str | None, count: str | None, source: str, listed: int
) -> list[Reading]:
    """The node's NVML readings; a file without 'Attached GPUs' (a trimmed paste) counts
    the GPUs it lists."""
    if count is None and listed:
        gpu_count = Reading("nvml.gpu_count", listed, "GPUs", f"{source}:count of GPUs listed")
    else:
        gpu_count = _reading("nvml.gpu_count", count, integer, "GPUs", f"{source}:attached_gpus")
    return [
        Reading("nvml.init", "ok", source=source),
        _reading("nvml.driver_version", driver, text_value, "", f"{source}:driver_version"),
        _reading("nvml.cuda_driver_version", cuda, text_value, "", f"{source}:cuda_version"),
        gpu_count,
    ]


# ------------------------------------------------------------------ topology and NVLink


_TOPO_COLUMN = re.compile(r"GPU NUMA ID|CPU Affinity|NUMA Affinity|\S+")
_CPU_LIST = re.compile(r"^\d+(-\d+)?(,\d+(-\d+)?)*$")


def split_glued_affinity(cell: str) -> tuple[str, str] | None:
    """'0-45,92-1370' (CPU affinity and NUMA node printed without a gap) -> ('0-45,92-137',
    '0'); None when no split gives a CPU list. The NUMA node is the last one or two digits;
    where both splits give a list, the one whose ranges are all the same size wins (a
    GPU's CPUs are its socket's cores and their SMT siblings), else the one-digit node."""
    candidates = []
    for digits in (1, 2):
        cpus, node = cell[:-digits], cell[-digits:]
        if not node.isdigit() or not _CPU_LIST.match(cpus):
            continue
        sizes = []
        for part in cpus.split(","):
            low, _, high = part.partition("-")
            if high and int(high) < int(low):
                break
            sizes.append(int(high or low) - int(low) + 1)
        else:
            candidates.append((len(set(sizes)) == 1, -digits, cpus, node))
    if not candidates:
        return None
    _, _, cpus, node = max(candidates)
    return cpus, str(int(node))


def _topo_cells(line: str, header: str, columns: list[str]) -> list[str]:
    """The cells of one matrix row after its label, one per column: tab-separated as
    nvidia-smi prints them (empty cells kept), or space-aligned as pasted. Space-aligned
    cells go to the column they stand under; where that is not clear (spaces lost in the
    paste) they are taken in order. A CPU affinity glued to its NUMA node is split."""
    if "\t" in line:
        cells = [c.strip() for c in line.split("\t")[1:]]
        while len(cells) > len(columns) and "" in cells:
            del cells[len(cells) - 1 - cells[::-1].index("")]  # nvidia-smi's extra tab
        return cells
    tokens = [(m.start(), m.group()) for m in re.finditer(r"\S+", line)][1:]
    if "CPU Affinity" in columns and "NUMA Affinity" in columns and len(tokens) == len(columns) - 1:
        # one cell short: the CPU affinity ran into the NUMA node; take the cells in order
        cells = [token for _, token in tokens]
        cpu = columns.index("CPU Affinity")
        if cpu < len(cells) and (split := split_glued_affinity(cells[cpu])) is not None:
            cells[cpu : cpu + 1] = list(split)
            return cells
    starts = [m.start() for m in _TOPO_COLUMN.finditer(header)]
    placed: dict[int, str] = {}
    for start, token in tokens:
        # the column it starts under (' X ' and NV18 may start a character or two late)
        at = max((i for i, s in enumerate(starts) if s <= start + 2), default=-1)
        if at < 0 or at in placed:
            return [token for _, token in tokens]  # not aligned: in order
        placed[at] = token
    return [placed.get(i, "") for i in range(len(columns))]


def parse_topo_matrix(text: str) -> list[Reading]:
    """`nvidia-smi topo -m` -> topo.gpu.I.J, topo.gpu.I.nic.NAME, gpu.I.cpu_affinity and
    gpu.I.numa_node readings. Reads what nvidia-smi prints (tab-separated, with ANSI
    underlining) and what people paste: space-aligned, after a prompt line, with the
    NIC legend, and with the CPU and NUMA affinity glued together on wide CPU lists."""
    lines = [
        ANSI.sub("", line).replace("\r", "").rstrip()
        for line in text.replace("\r\n", "\n").split("\n")
    ]
    header_index = next(
        (i for i, line in enumerate(lines) if re.match(r"^\s*GPU0(\s|$)", line)), None
    )
    if header_index is None:
        raise ImportError_("no topology matrix (a header line starting with GPU0)")
    header = lines[header_index]
    if "\t" in header:
        columns = [c.strip() for c in header.split("\t") if c.strip()]
    else:
        columns = _TOPO_COLUMN.findall(header)
    nic_names = {}
    for line in lines:
        if match := re.match(r"^\s*(NIC\d+):\s*(\S+)\s*$", line):
            nic_names[match.group(1)] = match.group(2)
    readings: list[Reading] = []
    source = "nvidia-smi-topo"
    for line in lines[header_index + 1 :]:
        label = line.strip().split("\t")[0].split(" ")[0] if line.strip() else ""
        if not re.match(r"^GPU\d+$", label):
            if label and not label.startswith(("NIC", "GPU")):  # the legend: the matrix ended
                break
            continue
        gpu = int(label[3:])
        values = _topo_cells(line, header, columns)
        for column, value in zip(columns, values, strict=False):
            if column.startswith("GPU") and column[3:].isdigit():
                other = int(column[3:])
                if other != gpu:
                    readings.append(Reading(f"topo.gpu.{gpu}.{other}", value, source=source))
            elif column.startswith("NIC"):
                readings.append(
                    Reading(
                        f"topo.gpu.{gpu}.nic.{nic_names.get(column, column)}", value, source=source
                    )
                )
            elif column == "CPU Affinity":
                readings.append(_reading(f"gpu.{gpu}.cpu_affinity", value, text_value, "", source))
            elif column == "NUMA Affinity":
                readings.append(_reading(f"gpu.{gpu}.numa_node", value, integer, "", source))
    if not readings:
        raise ImportError_("the topology matrix has no GPU rows")
    return readings


def parse_nvlink_status(text: str) -> list[Reading]:
    """`nvidia-smi nvlink -s` -> per link state and speed, and counts per GPU."""
    readings: list[Reading] = []
    gpu = None
    links: dict[int, list[bool]] = {}
    notes: dict[int, str] = {}
    after_header = False
    source = "nvidia-smi-nvlink"
    for raw in text.replace("\r\n", "\n").split("\n"):
        line = raw.strip()
        if match := re.match(r"^GPU (\d+): ", line):  # never a -q section's 'GPU 0000:3B:..
            gpu = int(match.group(1))
            links[gpu] = []
            notes.pop(gpu, None)
            after_header = True
            continue
        match = re.match(r"^Link (\d+): (.+)$", line)
        if gpu is not None and line and not match and after_header:
            # 'NVML: Unable to retrieve NVLink information as ...': the line right after
            # the GPU's (in a bundle, the other outputs' lines that follow are not)
            notes[gpu] = line
        after_header = after_header and not line
        if gpu is None or not match:
            continue
        link, state = int(match.group(1)), match.group(2).strip()
        prefix = f"gpu.{gpu}.nvlink.{link}"
        if "inactive" in state.lower():
            readings.append(Reading(f"{prefix}.state", "inactive", source=source))
            links[gpu].append(False)
        else:
            readings.append(Reading(f"{prefix}.state", "active", source=source))
            readings.append(_reading(f"{prefix}.speed", state, number, "GB/s", source))
            links[gpu].append(True)
    if not links:
        raise ImportError_("no 'GPU N:' lines of nvidia-smi nvlink -s")
    for gpu, states in links.items():
        note = notes.get(gpu, "nvidia-smi nvlink -s lists no links")
        count_key, active_key = f"gpu.{gpu}.nvlink.count", f"gpu.{gpu}.nvlink.active"
        if states:
            readings.append(Reading(count_key, len(states), source=source))
            readings.append(Reading(active_key, sum(states), source=source))
        elif "all links are inactive" in note.lower():
            readings.append(Reading(active_key, 0, source=source))
            reason = f"nvidia-smi: {note}"
            readings.append(Reading.failed(count_key, ReadingStatus.MISSING, reason, source))
        else:  # no NVLink, or MIG mode: the active count does not apply either, as live
            reason = f"nvidia-smi: {note}"
            readings.append(Reading.failed(count_key, ReadingStatus.UNSUPPORTED, reason, source))
            readings.append(Reading.failed(active_key, ReadingStatus.UNSUPPORTED, reason, source))
    return readings


# ------------------------------------------------------------------ detection


def detect(text: str) -> str:
    """Which format a file is: xml, q, topo, nvlink (a bug report yields xml or q)."""
    stripped = text.lstrip()
    if stripped.startswith(("ERROR:", "Failed to", "NVIDIA-SMI has failed")):
        first = stripped.splitlines()[0].strip()
        raise ImportError_(f"the file holds an nvidia-smi error, not its output: {first}")
    if "<nvidia_smi_log" in text[:4096] or stripped.startswith("<?xml"):
        return "xml"
    if "==============NVSMI LOG==============" in text or re.search(
        r"^GPU [0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:", text, re.MULTILINE
    ):
        return "q"
    if re.search(r"^\s*(\x1b\[[0-9;]*m)?GPU0(\x1b\[[0-9;]*m)?\s", text, re.MULTILINE) and (
        "Legend" in text or "CPU Affinity" in text
    ):
        return "topo"
    if re.search(r"^GPU \d+: .+\n\s*Link \d+:", text, re.MULTILINE) or re.search(
        r"^GPU \d+: .+\(UUID", text, re.MULTILINE
    ):
        return "nvlink"
    if lost_gpus(text):  # nothing but the error lines of GPUs it could not reach
        return "q"
    raise ImportError_("not an nvidia-smi -q, -q -x, topo -m or nvlink -s output")


def extract_from_bug_report(text: str) -> str:
    """The nvidia-smi XML or -q section of an nvidia-bug-report.log, or the text itself."""
    start = text.find("<?xml")
    end = text.find("</nvidia_smi_log>")
    if start != -1 and end != -1:
        return text[start : end + len("</nvidia_smi_log>")]
    marker = text.find("==============NVSMI LOG==============")
    if marker != -1:
        rest = text[marker:]
        stop = re.search(r"\n\*{3,}|\n_{5,}|\n____", rest[1:])
        return rest[: stop.start() + 1] if stop else rest
    return text


def import_files(paths: list[str]) -> Snapshot:
    """A snapshot (without findings) of the nvidia-smi outputs in `paths`: one pseudo-probe
    result per file. Raises ImportError_ naming the file and the problem."""
    results = []
    host = "imported"
    for path in paths:
        try:  # '-' is standard input; an nvidia-bug-report.log.gz is unpacked
            raw = read_input(path, stdin_ok=True, gzip_ok=True)
        except InputError as exc:
            raise ImportError_(str(exc)) from None
        if not raw.strip():
            raise ImportError_(f"{path}: file is empty")
        if b"\x00" in raw:
            raise ImportError_(f"{path}: binary data, not an nvidia-smi output")
        text = printable(raw.decode("utf-8", errors="replace"))
        try:
            kind, readings = import_text(text)
        except ValueError as exc:  # ImportError_, or a malformed number in a table
            raise ImportError_(f"{path}: {exc}") from None
        except RecursionError:
            raise ImportError_(f"{path}: nested too deeply") from None
        if match := re.search(r"<hostname>([^<]+)</hostname>", text):
            host = match.group(1).strip()
        results.append(
            ProbeResult(
                name=f"import-{kind}",
                title=f"imported {'standard input' if path == '-' else Path(path).name}",
                status=ProbeStatus.OK,
                duration_s=0.0,
                readings=tuple(readings),
            )
        )
    return Snapshot(
        host=host,
        created=datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        gpudiag_version=__version__,
        command_line=("gpudiag", "import", *paths),
        probes=tuple(results),
    )


# nvidia-smi's line for a GPU it cannot reach, printed instead of the GPU's section:
# "Unable to determine the device handle for GPU 0000:3B:00.0: Unknown Error",
# "GPU 00000000:3B:00.0: GPU is lost.  Reboot the system to recover this GPU"
_LOST_LINE = re.compile(
    r"^\s*(Unable to determine the device handle for\s+)?(?:GPU|gpu)\s?"
    r"([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7]):\s*(\S.*?)\s*$",
    re.MULTILINE,
)


def lost_gpus(text: str) -> list[tuple[str, str]]:
    """(bus id, nvidia-smi's line) of every GPU nvidia-smi printed an error line for:
    lost, fallen off the bus, or its handle not determined."""
    found: dict[str, str] = {}
    for match in _LOST_LINE.finditer(text):
        handle, bus, why = match.groups()
        if handle or re.search(r"lost|fallen off the bus|Unknown Error", why, re.IGNORECASE):
            found.setdefault(normalize_bus_id(bus), match.group(0).strip())
    return list(found.items())


def _with_lost_gpus(readings: list[Reading], lost: list[tuple[str, str]]) -> list[Reading]:
    """The GPUs nvidia-smi could not reach, after the ones it printed: each lost (its
    health reading failed, GPU001), with its bus id; never dropped as if absent."""
    listed = {r.value for r in readings if r.key.endswith(".pci.bus_id") and r.ok}
    indices = [int(k.split(".")[1]) for k in (r.key for r in readings) if k.endswith(".health")]
    index = max(indices, default=-1) + 1
    for bus, line in lost:
        if bus in listed:
            continue
        source = "nvidia-smi:error line"
        reason = f"nvidia-smi: {line}"
        readings.append(Reading.failed(f"gpu.{index}.health", ReadingStatus.ERROR, reason, source))
        readings.append(Reading(f"gpu.{index}.pci.bus_id", bus, source=source))
        index += 1
    return readings


def _with_unreached(readings: list[Reading]) -> list[Reading]:
    """The GPUs nvidia-smi counts ('Attached GPUs : 8') that the file shows neither a
    section nor an error line for (a paste cut short, or `-i` chose the others): each
    not reached (GPU001 cannot check it, and says why), never dropped as if the node had
    fewer GPUs, never lost."""
    count = next((r for r in readings if r.key == "nvml.gpu_count"), None)
    shown = sum(1 for r in readings if r.key.startswith("gpu.") and r.key.endswith(".health"))
    if count is None or not count.ok or not isinstance(count.value, int) or count.value <= shown:
        return readings
    total = min(count.value, MAX_UNREACHED)
    reason = (
        f"the file shows {shown} of the {count.value} attached GPUs and not this one: "
        "the paste stops before it, or nvidia-smi -i left it out"
    )
    return readings + [
        Reading.failed(f"gpu.{index}.health", ReadingStatus.NOT_REACHED, reason, count.source)
        for index in range(shown, total)
    ]


# no node has more GPUs than this: a larger 'Attached GPUs' is not taken as so many GPUs
MAX_UNREACHED = 1024


def _with_bundled(text: str, readings: list[Reading]) -> list[Reading]:
    """A file holding other outputs after the -q or -q -x one (an exporter's or a bug
    report's bundle): its `topo -m` matrix and `nvlink -s` too, each read as its kind,
    where they add what the first did not say."""
    have = {r.key for r in readings}
    for parse in (parse_topo_matrix, parse_nvlink_status):
        try:
            extra = parse(text)
        except ImportError_:
            continue  # not in this file
        readings += [r for r in extra if r.key not in have and r.key.startswith("gpu.")]
        have |= {r.key for r in extra}
    return readings


def import_text(text: str) -> tuple[str, list[Reading]]:
    """(format, readings) of one file's text."""
    kind = detect(text)
    if kind == "xml":
        readings = _with_lost_gpus(_xml_readings(extract_from_bug_report(text)), lost_gpus(text))
        return kind, _with_bundled(text, _with_unreached(readings))
    if kind == "q":
        readings = _with_lost_gpus(_q_readings(extract_from_bug_report(text)), lost_gpus(text))
        return kind, _with_bundled(text, _with_unreached(readings))
    if kind == "topo":
        return kind, parse_topo_matrix(text)
    return kind, parse_nvlink_status(text)
