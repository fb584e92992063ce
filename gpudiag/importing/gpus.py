"""What the two whole-GPU formats (`nvidia-smi -q` text and `-q -x` XML) share: the
fields and where each format keeps them, the ECC counts and their totals, the T.Limit
temperatures, the fabric, MIG devices, throttle reasons, the node's NVML readings, and
the GPUs a file names only in an error line or counts without showing."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from gpudiag.catalog import normalize_bus_id
from gpudiag.importing.common import (
    ABSENT,
    Lookup,
    checked,
    compute_mode,
    device_id,
    enabled,
    integer,
    key_of,
    number,
    reading_of,
    status_of,
    text_value,
)
from gpudiag.model import Reading, ReadingStatus, Value

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
    # drivers before R470 print the section as 'Ecc Mode'
    _f("ecc.current", "ecc_mode/current_ecc", "ECC Mode/Current|Ecc Mode/Current", enabled),
    _f("ecc.pending", "ecc_mode/pending_ecc", "ECC Mode/Pending|Ecc Mode/Pending", enabled),
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
    _f("recovery_action", "gpu_recovery_action", "GPU Recovery Action", compute_mode),
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


def throttle_name(label: str) -> str | None:
    slug = re.sub(r"[^a-z0-9]+", "_", label.lower()).strip("_")
    slug = re.sub(r"^clocks_(event|throttle)_reason_", "", slug)
    return THROTTLE_NAMES.get(slug)


def throttle_reading(index: int, active: list[str] | None, source: str) -> Reading:
    """The throttle reasons marked Active, or missing when the file has no such section."""
    key = key_of("gpu.{gpu}.throttle_reasons", gpu=index)
    if active is None:
        return Reading.failed(key, ReadingStatus.MISSING, ABSENT, source)
    return Reading(key, active, source=source)


# ------------------------------------------------------------------ ECC counts


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


def ecc_readings(index: int, find: Lookup, xml: bool, prefix: str) -> list[Reading]:
    """gpu.N.ecc.{volatile,aggregate}.{corrected,uncorrected}.sram, and the totals where
    the file prints them. The SRAM count: from driver 535 on the uncorrectable one is
    printed split into parity and SEC-DED errors, which are summed (NVML's SRAM location
    counts both). Files from drivers before R450 count by unit (register file, L1, L2),
    not SRAM: the SRAM count is missing there, and their printed total is the total."""
    readings = []
    for counter, kind, xml_kind, text_kind, old in ECC_COUNTERS:
        key = key_of(f"gpu.{{gpu}}.ecc.{counter}.{kind}.sram", gpu=index)
        if xml:
            base = f"ecc_errors/{counter}/sram_{xml_kind}"
            split = (f"{base}_parity", f"{base}_secded")
            old_total = f"ecc_errors/{counter}/{old}/total"
        else:
            base = f"ECC Errors/{counter.title()}/SRAM {text_kind}"
            split = (f"{base} Parity", f"{base} SEC-DED")
            old_total = f"ECC Errors/{counter.title()}/{old.replace('_', ' ').title()}/Total"
        if find(base) is not None:
            readings.append(reading_of(key, find(base), integer, "", f"{prefix}/{base}"))
        elif any(find(path) is not None for path in split):
            parts = [reading_of(key, find(path), integer, "", f"{prefix}/{path}") for path in split]
            readings.append(_sum_readings(key, parts, f"{prefix}/{split[0]}+{split[1]}"))
        else:
            reason = "not in the imported file (drivers before R450 count by unit, not SRAM)"
            readings.append(Reading.failed(key, ReadingStatus.MISSING, reason, f"{prefix}/{base}"))
        if find(old_total) is not None:
            total_key = key_of(f"gpu.{{gpu}}.ecc.{counter}.{kind}", gpu=index)
            readings.append(
                reading_of(total_key, find(old_total), integer, "", f"{prefix}/{old_total}")
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


# ------------------------------------------------------------------ thresholds, fabric, MIG


# thresholds that nvidia-smi from R570 on prints only relative to T.Limit (the live probe
# reads both from NVML, which may or may not answer the absolute one)
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


def _relative_only(key: str, shown: str, prefix: str, relative: str) -> Reading:
    """An absolute threshold nvidia-smi prints only relative to T.Limit: unsupported (the
    file does not give it), saying where the relative one is. Never made up from the
    current temperature and the T.Limit margin: those are of two sensors, and the sum
    drifts with the load (89 C idle, 87 C loaded on one H100). NVML may still give it
    (580.159.04 gave a real H100's slowdown as 89 C where nvidia-smi printed -2 C)."""
    reason = f"nvidia-smi prints it only relative to T.Limit ({shown.strip()}: {key}_tlimit)"
    return Reading.failed(key, ReadingStatus.UNSUPPORTED, reason, f"{prefix}/{relative}", "C")


def field_readings(
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
        key = key_of(f"gpu.{{gpu}}.{spec.suffix}", gpu=index)
        raw = find(path)
        relative = RELATIVE_THRESHOLDS.get(spec.suffix, ("", ""))[0 if xml else 1]
        if raw is None and relative and (shown := find(relative)) is not None:
            reading = _relative_only(key, shown, prefix, relative)
        elif spec.suffix == "fabric.state" and raw is not None and status_of(raw):
            # nvidia-smi prints N/A where NVML answers the state 'not supported'
            reading = Reading(key, "not-supported", "", f"{prefix}/{path}")
        else:
            reading = reading_of(key, raw, spec.parse, spec.unit, f"{prefix}/{path}")
        readings.append(reading)
    return readings


# the T.Limit temperatures (R5xx on): the margin to T.Limit and each threshold relative to
# it; the -q text's places, first found (R610's -q calls the margin 'GPU Current T.Limit
# Temp': realdata nvidia-smi-q/*2080-super__610.57.04*)
TLIMIT_FIELDS = (
    (
        "temperature.tlimit_margin",
        "temperature/gpu_temp_tlimit",
        ("Temperature/GPU T.Limit Temp", "Temperature/GPU Current T.Limit Temp"),
    ),
    *((f"temperature.{name}_tlimit", xml, (text,)) for name, (xml, text) in (
        ("slowdown", RELATIVE_THRESHOLDS["temperature.slowdown"]),
        ("shutdown", RELATIVE_THRESHOLDS["temperature.shutdown"]),
        ("gpu_max", RELATIVE_THRESHOLDS["temperature.gpu_max"]),
    )),
)  # fmt: skip


def tlimit_readings(index: int, find: Lookup, xml: bool, prefix: str) -> list[Reading]:
    """gpu.N.temperature.{tlimit_margin,*_tlimit}, where the file has its Temperature
    section; unsupported where it prints no T.Limit lines (drivers before them: NVML
    answers NotSupported there too). Then gpu.N.temperature.slowdown_margin, the margin
    less the slowdown's T.Limit value, as the live probe makes it (probes/gpu.py
    slowdown_margin)."""
    readings = []
    for suffix, xml_path, text_paths in TLIMIT_FIELDS:
        paths = (xml_path,) if xml else text_paths
        path = next((p for p in paths if find(p) is not None), paths[0])
        key, raw = key_of(f"gpu.{{gpu}}.{suffix}", gpu=index), find(path)
        if raw is None:
            reason = (
                "nvidia-smi prints no T.Limit value here (an older driver, or absolute thresholds)"
            )
            readings.append(
                Reading.failed(key, ReadingStatus.UNSUPPORTED, reason, f"{prefix}/{path}", "C")
            )
        else:
            readings.append(reading_of(key, raw, integer, "C", f"{prefix}/{path}"))
    by_suffix = {r.key.split(".temperature.")[1]: r for r in readings}
    margin, slowdown = by_suffix["tlimit_margin"], by_suffix["slowdown_tlimit"]
    key = key_of("gpu.{gpu}.temperature.slowdown_margin", gpu=index)
    if margin.ok and slowdown.ok:
        value = int(margin.value) - int(slowdown.value)  # type: ignore[arg-type]
        source = f"{margin.source} minus {slowdown.source}"
        readings.append(checked(Reading(key, value, "C", source)))
    else:
        failure = margin if not margin.ok else slowdown
        readings.append(Reading.failed(key, failure.status, failure.reason, failure.source, "C"))
    return readings


def fabric_status(index: int, find: Lookup, xml: bool, prefix: str) -> list[Reading]:
    """gpu.N.fabric.status as the live probe gives it: 'ok' for nvidia-smi's 'Success'
    (else its text) once the state is Completed; unsupported where the state is N/A (no
    NVLink fabric); missing while registration has not completed."""
    state_path, status_path = ("fabric/state", "fabric/status") if xml else (
        "Fabric/State", "Fabric/Status")  # fmt: skip
    state, status = find(state_path), find(status_path)
    key, source = key_of("gpu.{gpu}.fabric.status", gpu=index), f"{prefix}/{status_path}"
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
    return [reading_of(key, status, text_value, "", source)]


# the fabric health lines nvidia-smi prints (R560 on) -> the live probe's flag names
FABRIC_HEALTH = (
    ("degraded-bandwidth", "health/bandwidth", "Health/Bandwidth"),
    ("route-recovery", "health/route_recovery_in_progress", "Health/Route Recovery in progress"),
    ("route-unhealthy", "health/route_unhealthy", "Health/Route Unhealthy"),
    ("access-timeout-recovery", "health/access_timeout_recovery", "Health/Access Timeout Recovery"),
)
FLAG_SET = {"true": True, "degraded": True, "false": False, "full": False}


def fabric_health(index: int, find: Lookup, xml: bool, prefix: str) -> list[Reading]:
    """gpu.N.fabric.health_flags from the fabric's Health lines, as the live probe reads
    NVML's mask: the flags whose line says True (Bandwidth: Degraded); a line printed
    N/A is a flag not set (NVML's 'not supported' bits, which the live probe does not
    count either: the real H100s' lines are all N/A, live and imported []). Unsupported
    where the file has a Fabric section but no Health lines (a driver before them); an
    error naming a value this importer does not know, never a guess."""
    base = "fabric" if xml else "Fabric"
    state = find(f"{base}/state" if xml else f"{base}/State")
    health = f"{base}/{'health' if xml else 'Health'}"
    key, source = key_of("gpu.{gpu}.fabric.health_flags", gpu=index), f"{prefix}/{health}"
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


def mig_instances(
    index: int, devices: list[tuple[str | None, str | None, str | None, str | None]], source: str
) -> Reading:
    """gpu.N.mig.instances from (index, GPU instance, compute instance, FB total) of each
    MIG device, as the live probe gives them: 'GI 2 / CI 0: 40448 MiB', in index order."""
    key = key_of("gpu.{gpu}.mig.instances", gpu=index)
    try:
        rows = sorted((integer(i or ""), integer(g or ""), integer(c or ""), integer(t or ""))
                      for i, g, c, t in devices)  # fmt: skip
    except ValueError as exc:
        return Reading.failed(key, ReadingStatus.ERROR, f"cannot parse a MIG device: {exc}", source)
    return Reading(key, [f"GI {g} / CI {c}: {t} MiB" for _, g, c, t in rows], source=source)


def node_readings(
    driver: str | None, cuda: str | None, count: str | None, source: str, listed: int
) -> list[Reading]:
    """The node's NVML readings; a file without 'Attached GPUs' (a trimmed paste) counts
    the GPUs it lists."""
    if count is None and listed:
        gpu_count = Reading("nvml.gpu_count", listed, "GPUs", f"{source}:count of GPUs listed")
    else:
        gpu_count = reading_of("nvml.gpu_count", count, integer, "GPUs", f"{source}:attached_gpus")
    return [
        Reading("nvml.init", "ok", source=source),
        reading_of("nvml.driver_version", driver, text_value, "", f"{source}:driver_version"),
        reading_of("nvml.cuda_driver_version", cuda, text_value, "", f"{source}:cuda_version"),
        gpu_count,
    ]


# ------------------------------------------------------------------ GPUs not shown


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


def with_lost_gpus(readings: list[Reading], lost: list[tuple[str, str]]) -> list[Reading]:
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
        readings.append(
            Reading.failed(
                key_of("gpu.{gpu}.health", gpu=index), ReadingStatus.ERROR, reason, source
            )
        )
        readings.append(Reading(key_of("gpu.{gpu}.pci.bus_id", gpu=index), bus, source=source))
        index += 1
    return readings


def with_unreached(readings: list[Reading]) -> list[Reading]:
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
        Reading.failed(
            key_of("gpu.{gpu}.health", gpu=index), ReadingStatus.NOT_REACHED, reason, count.source
        )
        for index in range(shown, total)
    ]


# no node has more GPUs than this: a larger 'Attached GPUs' is not taken as so many GPUs
MAX_UNREACHED = 1024
