"""What every nvidia-smi importer shares: the readings an import makes (its
declaration in the catalog), the error for a file that is none of the formats, and the
parsing of nvidia-smi's values and placeholders.

A field that is absent is missing; 'N/A', '[Not Supported]' and 'deprecated' are
unsupported; '[Insufficient Permissions]' is needs-root; an error text is an error.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from gpudiag import catalog
from gpudiag.model import Reading, ReadingStatus, Value

# the readings an import makes (gpudiag/catalog.py): the GPU and driver probes' keys, and
# the product brand, which only nvidia-smi prints
BRAND = catalog.config("gpu.{gpu}.brand", help="nvidia-smi's brand")
# the NUMA node of the GPU's own memory, where the GPU's memory is one (Grace: GH200, GB200):
# nvidia-smi topo -m's 'GPU NUMA ID' column, N/A elsewhere
MEMORY_NUMA = catalog.config(
    "gpu.{gpu}.memory_numa_node", help="the NUMA node of the GPU's memory (topo -m 'GPU NUMA ID')"
)
MAKES = catalog.also(
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
    "gpu.{gpu}.kernel.verified",
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
    "gpu.{gpu}.nvlink.{link}.errors.crc_data",
    "gpu.{gpu}.nvlink.{link}.errors.crc_flit",
    "gpu.{gpu}.nvlink.{link}.errors.recovery",
    "gpu.{gpu}.nvlink.{link}.errors.replay",
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
    "gpu.{gpu}.recovery_action",
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
    "gpu.{gpu}.temperature.slowdown_margin",
    "gpu.{gpu}.throttle_reasons",
    "gpu.{gpu}.utilization.gpu",
    "gpu.{gpu}.utilization.memory",
    "gpu.{gpu}.uuid",
    "gpu.{gpu}.vbios",
    "faults.xid.codes",
    "faults.xid.total",
    "faults.xid.{xid}.count",
    "faults.xid.{xid}.gpus",
    "faults.xid.{xid}.last_seen",
    "nvml.cuda_driver_version",
    "nvml.driver_version",
    "nvml.gpu_count",
    "nvml.init",
    "topo.gpu.{gpu}.{peer}",
    "topo.gpu.{gpu}.nic.{nic}",
)
DECLARED = {d.template: d for d in (BRAND, MEMORY_NUMA)}
READINGS = (*catalog.declare("GPU", *DECLARED.values()), MAKES)


def key_of(template: str, **fields: object) -> str:
    """The key of a reading an import makes, through its declaration (BRAND) or the
    template it says it makes (MAKES): a KeyError for a template it does not name, a
    ValueError for a missing or unknown field. The importers emit through this."""
    if template in DECLARED:
        return DECLARED[template].key(**fields)
    return MAKES.key(template, **fields)


# nvidia-smi's underline (topo -m's header), with its ESC byte or without it: a paste from
# a web page or an environment dump keeps '[4m' ... '[0m' and drops the ESC
ANSI = re.compile(r"\x1b\[[0-9;]*m|\[[0-9;]{0,6}m")


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


_EXPONENT = re.compile(r"[eE][+-]?[0-9]")


def number(text: str) -> float:
    """'700.00 W', '1980 MHz', '16x', '41 C' -> the number (a finite float). nvidia-smi
    never prints an exponent: '1e400 W' is refused, not read as 1."""
    match = _NUMBER.match(text)
    if not match or (len(text) > match.end() and text[match.end()].isdigit()):
        raise ValueError(f"no number in {text.strip()[:60]!r}")
    if _EXPONENT.match(text, match.end()):
        raise ValueError(f"not a number nvidia-smi prints: {text.strip()[:60]!r}")
    return float(match.group(1))


# What a value of each unit can physically be, the one place an import bounds values: a
# value outside is refused (an error reading that says why), never stored as ok.
# Temperatures: nvidia-smi prints NVML's unsigned degrees (never below 0), and 150 C is
# the junction limit of silicon (JEDEC's Tj max for commercial parts; the highest GPU
# shutdown threshold in realdata/ is 101 C). A temperature relative to T.Limit (the
# margin, a threshold's T.Limit value, the margin to slowdown) is bounded by the same 150
# either way. Power: 4x the largest board power NVIDIA lists (1,400 W, B300) = 5,600 W.
# Percentages: 0-100.
PHYSICAL: dict[str, tuple[float, float]] = {"C": (0.0, 150.0), "W": (0.0, 5600.0), "%": (0, 100)}
RELATIVE_TEMPERATURE = (".temperature.tlimit_margin", "_tlimit", ".temperature.slowdown_margin")


def out_of_range(key: str, value: Value, unit: str) -> str | None:
    """Why `value` (of `key`, in `unit`) cannot be physical, or None when it can."""
    bounds = PHYSICAL.get(unit)
    if bounds is None or type(value) not in (int, float):
        return None
    low, high = bounds
    if unit == "C" and key.endswith(RELATIVE_TEMPERATURE):
        low = -high
    if low <= value <= high:  # type: ignore[operator]
        return None
    return f"{value:g} {unit} is outside what it can physically be ({low:g} to {high:g} {unit})"


def checked(reading: Reading) -> Reading:
    """`reading`, or an error reading in its place where its value is not physical."""
    if reading.status is not ReadingStatus.OK:
        return reading
    why = out_of_range(reading.key, reading.value, reading.unit)
    if why is None:
        return reading
    return Reading.failed(reading.key, ReadingStatus.ERROR, why, reading.source, reading.unit)


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


ABSENT = "not in the imported file"  # the reason of a field the file does not print


def held(readings: list[Reading]) -> list[Reading]:
    """`readings` without the fields the file does not print (ABSENT): what a file does
    not hold did not apply (docs/rules.md), as a section a `-q -d` file leaves out, or a
    field a trimmed file (telegraf's) or an older driver leaves out of a section. What a
    paste cut short cannot show is said otherwise (query_text's CUT) and kept: unknown;
    so is what the last GPU shown lacks where the file shows fewer GPUs than it counts
    (gpus.with_unreached: the paste may stop inside that GPU's section)."""
    unreached = [r.key.split(".")[1] for r in readings if r.status is ReadingStatus.NOT_REACHED]
    last = f"gpu.{int(min(unreached, key=int)) - 1}." if unreached else None
    kept = []
    for reading in readings:
        if reading.status is ReadingStatus.MISSING and reading.reason == ABSENT:
            if last is None or not reading.key.startswith(last):
                continue
            reason = f"{ABSENT}, which stops in this GPU's section or after it"
            reading = Reading.failed(
                reading.key, ReadingStatus.MISSING, reason, reading.source, reading.unit
            )
        kept.append(reading)
    return kept


def reading_of(
    key: str, raw: str | None, parse: Callable[[str], Value], unit: str, source: str
) -> Reading:
    if raw is None:
        return Reading.failed(key, ReadingStatus.MISSING, ABSENT, source, unit)
    placeholder = status_of(raw)
    if placeholder is not None:
        return Reading.failed(key, placeholder[0], placeholder[1], source, unit)
    try:
        return checked(Reading(key, parse(raw), unit, source))
    except (ValueError, KeyError) as exc:
        return Reading.failed(
            key, ReadingStatus.ERROR, f"cannot parse {raw.strip()!r}: {exc}", source, unit
        )


Lookup = Callable[[str], "str | None"]
