"""Storage: NVMe controllers (/sys/class/nvme) and the PCIe links of their PCI functions
(PCI class 0x0108xx), which GPUDirect Storage and data loading read through.

For each controller: model, serial, firmware, state ("live" when usable), transport and
address; for a PCIe controller its PCI function and that function's link: the current
speed and width, the SSD's maximum, the maximum of the port above it (the slot), and
the link's attainable maximum, the lower of the two ends (what the link should train
to). A controller reached over a fabric (fc, tcp, rdma, loop) has no PCIe link of its
own: those readings say so. NVMe PCI functions no driver is bound to are listed.
Keys name a controller by its number: nvme0's model is `nvme.0.model`.

Controllers are the `nvmeN` entries of /sys/class/nvme and of each subsystem in
/sys/class/nvme-subsystem (on a live node the same controllers, as links; a capture may
hold only one listing). A controller's PCI function is its `device` link, else the PCI
function whose `nvme/` directory holds it, else its address when the transport is pcie.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from gpudiag import catalog
from gpudiag.hostfs import HostFS, source_name
from gpudiag.model import Reading, ReadingStatus
from gpudiag.probe import Cost, Probe, ProbeContext
from gpudiag.probes.pcie import PCI_ADDRESS, PCI_DIR, parse_link_speed, upstream_bridges
from gpudiag.textparse import parse_int

NVME_CLASS = "/sys/class/nvme"
SUBSYSTEM_CLASS = "/sys/class/nvme-subsystem"
CONTROLLER = re.compile(r"^nvme\d+$")
NVME_PCI_CLASS = 0x0108  # mass storage (01), non-volatile memory (08); any interface
CONTROLLER_FILES = ("model", "firmware_rev", "state", "transport", "address")
# (reading name, sysfs file, parse, unit) of a PCI function's link
LINK_FILES = (
    ("speed", "link_speed", parse_link_speed, "GT/s"),
    ("width", "link_width", parse_int, "lanes"),
)


def _key(name: str, reading: str) -> str:
    """The key of a controller's reading, through this probe's declaration of
    nvme.{ctrl}.<reading>: ('nvme0', 'model') -> 'nvme.0.model' (a KeyError for a
    reading it does not declare)."""
    return _DECLARED[f"nvme.{{ctrl}}.{reading}"].key(ctrl=name.removeprefix("nvme"))


def controller_dirs(host: HostFS) -> dict[str, str]:
    """Controller name -> its sysfs directory, /sys/class/nvme first, then the
    subsystems' listings for controllers /sys/class/nvme does not hold."""
    found = {c: f"{NVME_CLASS}/{c}" for c in host.listdir(NVME_CLASS) if CONTROLLER.match(c)}
    for subsystem in host.listdir(SUBSYSTEM_CLASS):
        for name in host.listdir(f"{SUBSYSTEM_CLASS}/{subsystem}"):
            if CONTROLLER.match(name):
                found.setdefault(name, f"{SUBSYSTEM_CLASS}/{subsystem}/{name}")
    return dict(sorted(found.items(), key=lambda item: int(item[0][4:])))


def nvme_functions(host: HostFS) -> list[str]:
    """The PCI functions of class 0x0108xx (NVMe), in address order."""
    functions = []
    for address in host.listdir(PCI_DIR):
        text = host.read(f"{PCI_DIR}/{address}/class").text
        try:
            code = int(text or "", 16)
        except ValueError:
            continue
        if code >> 8 == NVME_PCI_CLASS:
            functions.append(address)
    return functions


def _pci_function(
    host: HostFS, base: str, name: str, owners: dict[str, str], transport: Reading
) -> Reading:
    """The reading of the PCI address of a controller's function, or why there is none."""
    key = _key(name, "pci_address")
    if host.exists(f"{base}/device"):
        real = host.realpath(f"{base}/device") or ""
        address = real.rsplit("/", 1)[-1]
        if PCI_ADDRESS.match(address):
            return Reading(key, address, source=source_name(f"{base}/device"))
    if name in owners:
        return Reading(key, owners[name], source=f"sysfs:bus/pci/devices/{owners[name]}/nvme")
    if transport.ok and transport.value != "pcie":
        return Reading.failed(
            key,
            ReadingStatus.UNSUPPORTED,
            f"{name} is reached over {transport.value}: it has no PCI function of its own",
            transport.source,
        )
    address = host.read(f"{base}/address")
    if transport.ok and address.ok and PCI_ADDRESS.match((address.text or "").strip()):
        return address.reading(key)
    return Reading.failed(
        key,
        ReadingStatus.MISSING,
        f"{name}: no device link, no PCI function holding it, and no PCI address",
        source_name(base),
    )


def _failed_link(name: str, reason_of: Reading) -> Iterator[Reading]:
    """Every link reading of a controller whose PCI function is not known, saying why."""
    for what, _, _, unit in LINK_FILES:
        for reading in ("current", "max", "port_max", "attainable"):
            yield Reading.failed(
                _key(name, f"{reading}_link_{what}"),
                reason_of.status,
                reason_of.reason,
                reason_of.source,
                unit,
            )


def _number(reading: Reading) -> float:
    """The value of a link reading that was taken (GT/s or lanes)."""
    assert isinstance(reading.value, (int, float))
    return float(reading.value)


def _copy(reading: Reading, key: str) -> Reading:
    """The same reading (value or failure, unit, source) under another key."""
    if reading.ok:
        return Reading(key, reading.value, reading.unit, reading.source)
    return Reading.failed(key, reading.status, reading.reason, reading.source, reading.unit)


def _link(host: HostFS, name: str, address: str) -> Iterator[Reading]:
    """The link readings of a controller's PCI function at `address`."""
    base = f"{PCI_DIR}/{address}"
    real = host.realpath(base)
    bridges = upstream_bridges(real) if real else []
    port = bridges[-1] if bridges else None
    for what, sysfs, parse, unit in LINK_FILES:
        current_key = _key(name, f"current_link_{what}")
        yield host.reading(current_key, f"{base}/current_{sysfs}", parse, unit)
        max_key = _key(name, f"max_link_{what}")
        device_max = host.reading(max_key, f"{base}/max_{sysfs}", parse, unit)
        yield device_max
        port_key = _key(name, f"port_max_link_{what}")
        attainable_key = _key(name, f"attainable_link_{what}")
        if port is None:
            # on a root bus (a VM's passthrough, an integrated endpoint): no port file to
            # cap the link, so the link's maximum is the SSD's own
            yield Reading.failed(
                port_key,
                ReadingStatus.UNSUPPORTED,
                f"{address} sits on a root bus: sysfs shows no port above it",
                f"sysfs:bus/pci/devices/{address}",
                unit,
            )
            yield _copy(device_max, attainable_key)
            continue
        port_max = host.reading(port_key, f"{PCI_DIR}/{port}/max_{sysfs}", parse, unit)
        yield port_max
        failed = [end for end in (device_max, port_max) if not end.ok]
        if failed:
            yield Reading.failed(
                attainable_key,
                failed[0].status,
                f"the link's maximum needs both ends': {failed[0].reason}",
                failed[0].source,
                unit,
            )
        else:
            # the SSD's figure where the ends agree (the port's only where it is lower)
            lower = port_max if _number(port_max) < _number(device_max) else device_max
            yield _copy(lower, attainable_key)


def collect(context: ProbeContext) -> Iterator[Reading]:
    """NVMe controller and link readings."""
    host = context.host
    functions = nvme_functions(host)
    owners: dict[str, str] = {}  # controller -> the PCI function whose nvme/ holds it
    unbound = []
    for address in functions:
        for name in host.listdir(f"{PCI_DIR}/{address}/nvme"):
            if CONTROLLER.match(name):
                owners.setdefault(name, address)
        # the link itself, not its target: a capture may leave out /sys/bus/pci/drivers
        if "driver" not in host.listdir(f"{PCI_DIR}/{address}"):
            unbound.append(address)
    yield Reading("nvme.functions", functions, source="sysfs:bus/pci/devices")
    yield Reading("nvme.unbound_functions", unbound, source="sysfs:bus/pci/devices")
    controllers = controller_dirs(host)
    yield Reading("nvme.controllers", list(controllers), source="sysfs:class/nvme")
    for name, base in controllers.items():
        readings = {f: host.reading(_key(name, f), f"{base}/{f}") for f in CONTROLLER_FILES}
        yield from readings.values()
        yield host.reading(_key(name, "serial"), f"{base}/serial")
        function = _pci_function(host, base, name, owners, readings["transport"])
        yield function
        if function.ok:
            yield from _link(host, name, str(function.value))
        else:
            yield from _failed_link(name, function)


# the readings this probe makes (gpudiag/catalog.py)
READINGS = catalog.declare(
    "Storage",
    catalog.config("nvme.functions", help="NVMe PCI functions (class 0x0108xx)"),
    catalog.config("nvme.unbound_functions", help="NVMe PCI functions with no driver bound"),
    catalog.config("nvme.controllers", help="NVMe controllers in /sys/class/nvme"),
    catalog.config("nvme.{ctrl}.model"),
    catalog.volatile("nvme.{ctrl}.serial", identifying="serial"),
    catalog.config("nvme.{ctrl}.firmware_rev"),
    catalog.config("nvme.{ctrl}.state", help="live when the controller is usable"),
    catalog.config("nvme.{ctrl}.transport"),
    catalog.config("nvme.{ctrl}.address"),
    catalog.config("nvme.{ctrl}.pci_address"),
    catalog.config("nvme.{ctrl}.current_link_speed", "GT/s"),
    catalog.config("nvme.{ctrl}.max_link_speed", "GT/s", help="the SSD's maximum"),
    catalog.config("nvme.{ctrl}.port_max_link_speed", "GT/s", help="the slot's maximum"),
    catalog.config("nvme.{ctrl}.attainable_link_speed", "GT/s", help="the lower of the two"),
    catalog.config("nvme.{ctrl}.current_link_width", "lanes"),
    catalog.config("nvme.{ctrl}.max_link_width", "lanes", help="the SSD's maximum"),
    catalog.config("nvme.{ctrl}.port_max_link_width", "lanes", help="the slot's maximum"),
    catalog.config("nvme.{ctrl}.attainable_link_width", "lanes", help="the lower of the two"),
)
# the probe emits through its declarations (_key)
_DECLARED = {d.template: d for d in READINGS}

PROBE = Probe(
    name="nvme",
    title="NVMe controllers and their PCIe links",
    cost=Cost.INSTANT,
    needs=frozenset(),
    collect=collect,
    timeout_s=10.0,
    readings=READINGS,
)
