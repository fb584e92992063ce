"""Power and thermal: CPU RAPL power limits, the ACPI platform profile, tuned's active
profile, and thermal zones."""

from __future__ import annotations

from collections.abc import Iterator

from gpudiag import catalog
from gpudiag.model import Reading
from gpudiag.probe import Cost, Probe, ProbeContext
from gpudiag.textparse import parse_bool01, parse_int

POWERCAP = "/sys/class/powercap"


def microwatts_to_watts(text: str) -> float:
    """RAPL limits are in microwatts."""
    return int(text.strip()) / 1e6


def millicelsius(text: str) -> float:
    """Thermal zone temperatures are in millidegrees Celsius."""
    return int(text.strip()) / 1000.0


def collect(context: ProbeContext) -> Iterator[Reading]:
    """Power and thermal readings."""
    host = context.host
    zones = [z for z in host.listdir(POWERCAP) if z.startswith("intel-rapl:")]
    yield Reading("power.rapl.zones", zones, source="sysfs:class/powercap")
    for zone in zones:
        base = f"{POWERCAP}/{zone}"
        yield host.reading(RAPL_NAME.key(zone=zone), f"{base}/name")
        yield host.reading(RAPL_ENABLED.key(zone=zone), f"{base}/enabled", parse_bool01)
        for constraint in (0, 1):
            name = host.read(f"{base}/constraint_{constraint}_name")
            if not name.ok:
                continue
            # the key names the constraint as the kernel does (long_term, short_term: the
            # two declared); left an f-string, as a name the file gives is no field
            label = (name.text or "").strip() or f"constraint_{constraint}"
            yield host.reading(
                f"power.rapl.{zone}.{label}_limit",
                f"{base}/constraint_{constraint}_power_limit_uw",
                microwatts_to_watts,
                "W",
            )
    yield host.reading("power.platform_profile", "/sys/firmware/acpi/platform_profile")
    yield host.reading("power.tuned_profile", "/etc/tuned/active_profile")
    thermal = [z for z in host.listdir("/sys/class/thermal") if z.startswith("thermal_zone")]
    yield Reading("power.thermal.zones", thermal, source="sysfs:class/thermal")
    for zone in thermal:
        base = f"/sys/class/thermal/{zone}"
        yield host.reading(THERMAL_TYPE.key(zone=zone), f"{base}/type")
        yield host.reading(
            THERMAL_TEMP.key(zone=zone), f"{base}/temp", millicelsius, THERMAL_TEMP.unit
        )
    yield host.reading(
        "power.intel_idle.max_cstate", "/sys/module/intel_idle/parameters/max_cstate", parse_int
    )


# the per-zone readings, emitted through these
RAPL_NAME = catalog.config("power.rapl.{zone}.name")
RAPL_ENABLED = catalog.config("power.rapl.{zone}.enabled")
THERMAL_TYPE = catalog.config("power.thermal.{zone}.type")
THERMAL_TEMP = catalog.volatile("power.thermal.{zone}.temp", "C")

# the readings this probe makes (gpudiag/catalog.py)
READINGS = (
    *catalog.declare(
        "Power",
        catalog.config("power.intel_idle.max_cstate"),
        catalog.config("power.platform_profile"),
        RAPL_ENABLED,
        catalog.config("power.rapl.{zone}.long_term_limit", "W"),
        RAPL_NAME,
        catalog.config("power.rapl.{zone}.short_term_limit", "W"),
        catalog.config("power.rapl.zones"),
        THERMAL_TEMP,
        THERMAL_TYPE,
        catalog.config("power.thermal.zones"),
        catalog.config("power.tuned_profile"),
    ),
)

PROBE = Probe(
    name="power",
    title="Power limits and thermal zones",
    cost=Cost.INSTANT,
    needs=frozenset(),
    collect=collect,
    timeout_s=5.0,
    readings=READINGS,
)
