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
        prefix = f"power.rapl.{zone}"
        yield host.reading(f"{prefix}.name", f"{base}/name")
        yield host.reading(f"{prefix}.enabled", f"{base}/enabled", parse_bool01)
        for constraint in (0, 1):
            name = host.read(f"{base}/constraint_{constraint}_name")
            if not name.ok:
                continue
            label = (name.text or "").strip() or f"constraint_{constraint}"
            yield host.reading(
                f"{prefix}.{label}_limit",
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
        yield host.reading(f"power.thermal.{zone}.type", f"{base}/type")
        yield host.reading(f"power.thermal.{zone}.temp", f"{base}/temp", millicelsius, "C")
    yield host.reading(
        "power.intel_idle.max_cstate", "/sys/module/intel_idle/parameters/max_cstate", parse_int
    )


# the readings this probe makes (gpudiag/catalog.py)
READINGS = (
    *catalog.declare(
        "Power",
        catalog.config("power.intel_idle.max_cstate"),
        catalog.config("power.platform_profile"),
        catalog.config("power.rapl.{zone}.enabled"),
        catalog.config("power.rapl.{zone}.long_term_limit", "W"),
        catalog.config("power.rapl.{zone}.name"),
        catalog.config("power.rapl.{zone}.short_term_limit", "W"),
        catalog.config("power.rapl.zones"),
        catalog.volatile("power.thermal.{zone}.temp", "C"),
        catalog.config("power.thermal.{zone}.type"),
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
