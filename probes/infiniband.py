"""InfiniBand and RoCE: every RDMA device (HCA) under /sys/class/infiniband with its
firmware, board, type, GUIDs and PCI function, and every port's logical and physical
state, rate, link layer and error counters since boot.

GPU nodes carry 4-8 HCAs for GPUDirect RDMA; a port down, slower than its peers or
counting link errors costs every job that crosses it. The probe also derives, for each
port, the fastest rate of an active port with the same link layer on the node (the rate
rule compares with it: InfiniBand ports with InfiniBand ports, RoCE with Ethernet).

sysfs writes `state` as "4: ACTIVE", `phys_state` as "5: LinkUp" and `rate` as
"40 Gb/sec (4X QDR)": the readings keep the names (ACTIVE, LinkUp), the rate in Gb/s and
its lanes and signalling ("4X QDR") apart. A counter the driver does not provide (no
counters/ directory, no such file, or "N/A (no PMA)" as i40iw writes) is unsupported,
with the reason; counters saturate (symbol_error at 65535, link_downed at 255).
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from gpudiag import catalog
from gpudiag.hostfs import HostFS, source_name
from gpudiag.model import Reading, ReadingStatus
from gpudiag.probe import Cost, Probe, ProbeContext
from gpudiag.probes.pcie import PCI_ADDRESS

IB_DIR = "/sys/class/infiniband"
SOURCE = "sysfs:class/infiniband"
HCA_NAME = re.compile(r"^[\w-]+$")  # one key segment: no dots
HCA_FILES = ("fw_ver", "board_id", "hca_type")
GUID_FILES = ("node_guid", "sys_image_guid")
# the error counters read from ports/N/counters/ (the PMA's PortCounters)
COUNTERS = (
    "link_downed",
    "symbol_error",
    "link_error_recovery",
    "port_rcv_errors",
    "port_xmit_discards",
    "local_link_integrity_errors",
    "excessive_buffer_overrun_errors",
)
_NUMBERED = re.compile(r"^\s*\d+:\s*(\S(?:.*\S)?)\s*$")
_RATE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*Gb/sec(?:\s*\(([^)]*)\))?\s*$")


def parse_numbered(text: str) -> str:
    """sysfs's 'N: NAME' state words: '4: ACTIVE' -> 'ACTIVE', '5: LinkUp' -> 'LinkUp'."""
    match = _NUMBERED.match(text)
    if not match:
        raise ValueError(f"{text.strip()!r} is not 'N: NAME'")
    return match.group(1)


def parse_rate(text: str) -> float:
    """'40 Gb/sec (4X QDR)' -> 40.0; '2.5 Gb/sec (1X SDR)' -> 2.5."""
    match = _RATE.match(text)
    if not match:
        raise ValueError(f"{text.strip()!r} is no 'N Gb/sec (...)' rate")
    return float(match.group(1))


def parse_link_mode(text: str) -> str:
    """The lanes and signalling of a rate: '40 Gb/sec (4X QDR)' -> '4X QDR'."""
    match = _RATE.match(text)
    if not match or not match.group(2) or not match.group(2).strip():
        raise ValueError(f"{text.strip()!r} names no lanes")
    return match.group(2).strip()


def parse_counter(text: str) -> int:
    """A counter file's count."""
    return int(text.strip())


def _counter(host: HostFS, key: str, port_dir: str, name: str, has_dir: bool) -> Reading:
    path = f"{port_dir}/counters/{name}"
    if not has_dir:
        return Reading.failed(
            key,
            ReadingStatus.UNSUPPORTED,
            f"the driver provides no counters for this port ({port_dir}/counters not found)",
            source_name(path),
        )
    result = host.read(path)
    if result.status is ReadingStatus.MISSING:
        return Reading.failed(
            key,
            ReadingStatus.UNSUPPORTED,
            f"the driver provides no {name} counter ({path} not found)",
            result.source,
        )
    text = (result.text or "").strip()
    if result.ok and text.startswith("N/A"):
        return Reading.failed(
            key,
            ReadingStatus.UNSUPPORTED,
            f"the driver has no count: {path} reads {text!r}",
            result.source,
        )
    return result.parsed(key, parse_counter)


def _hca(host: HostFS, hca: str) -> Iterator[Reading]:
    base = f"{IB_DIR}/{hca}"
    for name in (*HCA_FILES, *GUID_FILES):
        yield host.reading(_key(f"ib.{{hca}}.{name}", hca=hca), f"{base}/{name}")
    key = _key("ib.{hca}.pci_device", hca=hca)
    real = host.realpath(f"{base}/device") if host.exists(f"{base}/device") else None
    address = real.rsplit("/", 1)[-1] if real else ""
    if PCI_ADDRESS.match(address):
        yield Reading(key, address, source=f"{SOURCE}/{hca}/device")
    else:
        reason = f"{base}/device is not a PCI function" if real else f"{base}/device not found"
        yield Reading.failed(key, ReadingStatus.MISSING, reason, f"{SOURCE}/{hca}/device")


def _port(host: HostFS, hca: str, port: str) -> Iterator[Reading]:
    base = f"{IB_DIR}/{hca}/ports/{port}"

    def key(name: str) -> str:
        return _key(f"{_PORT}.{name}", hca=hca, port=port)

    yield host.reading(key("state"), f"{base}/state", parse_numbered)
    yield host.reading(key("phys_state"), f"{base}/phys_state", parse_numbered)
    yield host.reading(key("link_layer"), f"{base}/link_layer")
    rate = host.read(f"{base}/rate")
    yield rate.parsed(key("rate"), parse_rate, "Gb/s")
    yield rate.parsed(key("link_mode"), parse_link_mode)
    has_counters = host.exists(f"{base}/counters")
    for name in COUNTERS:
        yield _counter(host, key(name), base, name, has_counters)


def fastest_rates(ports: dict[tuple[str, str], dict[str, Reading]]) -> Iterator[Reading]:
    """For each port, the fastest rate of an ACTIVE port with its link layer on the node
    (`ib.H.P.fastest_rate_on_node`): what the port should reach, if its peers do."""
    fastest: dict[str, float] = {}
    for readings in ports.values():
        state, layer, rate = (readings[n] for n in ("state", "link_layer", "rate"))
        if state.ok and state.value == "ACTIVE" and layer.ok and rate.ok:
            layer_name = str(layer.value)
            fastest[layer_name] = max(fastest.get(layer_name, 0.0), float(rate.value))
    for (hca, port), readings in ports.items():
        layer = readings["link_layer"]
        if not layer.ok:
            reason = f"its link layer is unknown: {layer.reason}"
            yield FASTEST_RATE.failed(layer.status, reason, SOURCE, hca=hca, port=port)
        elif str(layer.value) not in fastest:
            reason = f"no active {layer.value} port on the node has a readable rate"
            yield FASTEST_RATE.failed(ReadingStatus.UNSUPPORTED, reason, SOURCE, hca=hca, port=port)
        else:
            rate = fastest[str(layer.value)]
            yield FASTEST_RATE.reading(rate, f"{SOURCE}/*/ports/*/rate", hca=hca, port=port)


def collect(context: ProbeContext) -> Iterator[Reading]:
    """InfiniBand/RoCE readings."""
    host = context.host
    if not host.exists(IB_DIR):
        return  # no RDMA driver registered a device: nothing to read (no empty group)
    hcas = [name for name in host.listdir(IB_DIR) if HCA_NAME.match(name)]
    yield Reading("ib.hcas", hcas, source=SOURCE)
    ports: dict[tuple[str, str], dict[str, Reading]] = {}
    for hca in hcas:
        yield from _hca(host, hca)
        for port in host.listdir(f"{IB_DIR}/{hca}/ports"):
            if not port.isdigit():
                continue
            readings = list(_port(host, hca, port))
            yield from readings
            prefix = f"ib.{hca}.{port}."
            ports[(hca, port)] = {r.key.removeprefix(prefix): r for r in readings}
    yield from fastest_rates(ports)


_PORT = "ib.{hca}.{port}"
FASTEST_RATE = catalog.config(
    f"{_PORT}.fastest_rate_on_node",
    "Gb/s",
    help="the fastest rate of an active port with the same link layer on this node",
)
# the readings this probe makes (gpudiag/catalog.py)
READINGS = catalog.declare(
    "InfiniBand",
    catalog.config("ib.hcas", help="the RDMA devices (HCAs) under /sys/class/infiniband"),
    catalog.config("ib.{hca}.fw_ver", help="the HCA's firmware version"),
    catalog.config("ib.{hca}.board_id", help="the board's PSID (Mellanox/NVIDIA)"),
    catalog.config("ib.{hca}.hca_type", help="the HCA's model (MT4129: ConnectX-7)"),
    catalog.config("ib.{hca}.node_guid", help="the HCA's node GUID", identifying="guid"),
    catalog.config("ib.{hca}.sys_image_guid", help="the system image GUID", identifying="guid"),
    catalog.config("ib.{hca}.pci_device", help="the HCA's PCI function (pcie.{device})"),
    catalog.config(f"{_PORT}.state", help="logical state: ACTIVE once a subnet manager set it up"),
    catalog.config(f"{_PORT}.phys_state", help="physical state: LinkUp, Polling, Disabled"),
    catalog.config(f"{_PORT}.link_layer", help="InfiniBand, or Ethernet for RoCE"),
    catalog.config(f"{_PORT}.rate", "Gb/s", help="the link's data rate"),
    catalog.config(f"{_PORT}.link_mode", help="the rate's lanes and signalling: 4X NDR"),
    FASTEST_RATE,
    catalog.counter(f"{_PORT}.link_downed", help="times the link went down (saturates at 255)"),
    catalog.counter(f"{_PORT}.symbol_error", help="symbol errors on the lanes (at most 65535)"),
    catalog.counter(f"{_PORT}.link_error_recovery", help="link retrains after errors"),
    catalog.counter(f"{_PORT}.port_rcv_errors", help="received packets with errors"),
    catalog.counter(f"{_PORT}.port_xmit_discards", help="packets discarded on transmit"),
    catalog.counter(
        f"{_PORT}.local_link_integrity_errors", help="local physical errors past their threshold"
    ),
    catalog.counter(
        f"{_PORT}.excessive_buffer_overrun_errors", help="receive buffer overruns in a row"
    ),
)
# the probe emits through its declarations
_DECLARED = {d.template: d for d in READINGS}


def _key(template: str, **fields: str) -> str:
    """The key of a reading, through this probe's declaration of `template` (a KeyError
    for a template it does not declare)."""
    return _DECLARED[template].key(**fields)


PROBE = Probe(
    name="infiniband",
    title="InfiniBand/RoCE HCAs and ports",
    cost=Cost.INSTANT,
    needs=frozenset(),
    collect=collect,
    timeout_s=10.0,
    readings=READINGS,
)
