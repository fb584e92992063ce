"""NUMA: nodes, their CPUs and memory, distances, CPU-less memory nodes (GPU memory on
POWER9 and Grace), nodes per socket (NPS/SNC), numa_balancing and hugepages per node."""

from __future__ import annotations

from collections.abc import Iterator

from gpudiag import catalog
from gpudiag.model import Reading, ReadingStatus
from gpudiag.probe import Cost, Probe, ProbeContext
from gpudiag.probes.common import node_ids
from gpudiag.probes.memory import meminfo_reading
from gpudiag.textparse import format_cpulist, parse_cpulist, parse_int, parse_meminfo

NODE_DIR = "/sys/devices/system/node"
CPU_DIR = "/sys/devices/system/cpu"


def parse_distance(text: str) -> list[int]:
    """'10 21' -> [10, 21]."""
    return [int(word) for word in text.split()]


def collect(context: ProbeContext) -> Iterator[Reading]:
    """NUMA readings."""
    host = context.host
    nodes = node_ids(host, NODE_DIR, "node")
    source = "sysfs:devices/system/node"
    yield host.reading("numa.balancing", "/proc/sys/kernel/numa_balancing", parse_int)
    if not nodes:  # every node-wide reading says why, for the rules that judge them
        reason = f"{NODE_DIR} lists no nodes (kernel without NUMA support?)"
        for key in ("numa.nodes", "numa.memory_imbalance", "numa.nodes_per_socket"):
            yield Reading.failed(key, ReadingStatus.MISSING, reason, source)
        return
    yield Reading("numa.nodes", nodes, source=source)
    cpu_nodes: list[int] = []
    memory_only: list[int] = []
    socket_of_node: dict[int, str | None] = {}
    fields_by_node: dict[int, int] = {}
    for node in nodes:
        base = f"{NODE_DIR}/node{node}"
        cpulist = host.read(f"{base}/cpulist")
        try:
            cpus = parse_cpulist(cpulist.text or "") if cpulist.ok else []
        except ValueError:  # corrupt: the numa.N.cpus reading says so
            cpus = []
        yield cpulist.parsed(f"numa.{node}.cpus", lambda t: format_cpulist(parse_cpulist(t)))
        meminfo = host.read(f"{base}/meminfo")
        fields = parse_meminfo(meminfo.text or "") if meminfo.ok else {}
        fields_by_node[node] = fields.get("MemTotal", 0)
        for key, field in (("mem_total", "MemTotal"), ("mem_free", "MemFree")):
            yield meminfo_reading(meminfo, f"numa.{node}.{key}", field)
        yield host.reading(f"numa.{node}.distance", f"{base}/distance", parse_distance)
        for size, label in (("2048kB", "2M"), ("1048576kB", "1G")):
            path = f"{base}/hugepages/hugepages-{size}/nr_hugepages"
            if host.exists(path):
                yield host.reading(f"numa.{node}.hugepages_{label}", path, parse_int)
        if cpus:
            cpu_nodes.append(node)
            package = host.read(f"{CPU_DIR}/cpu{cpus[0]}/topology/physical_package_id")
            socket_of_node[node] = package.text.strip() if package.ok and package.text else None
        elif fields.get("MemTotal", 0) > 0:
            memory_only.append(node)
    yield Reading("numa.cpu_nodes", cpu_nodes, source=source)
    yield Reading("numa.memory_only_nodes", memory_only, source=source)
    totals = [fields_by_node[n] for n in cpu_nodes if fields_by_node.get(n)]
    if len(totals) >= 2:
        spread = (max(totals) - min(totals)) / max(totals) * 100
        yield Reading(
            "numa.memory_imbalance",
            round(spread, 1),
            "%",
            source="sysfs:devices/system/node/node*/meminfo",
        )
    elif len(cpu_nodes) == 1:
        yield Reading.failed(
            "numa.memory_imbalance",
            ReadingStatus.UNSUPPORTED,
            "one NUMA node with CPUs: no imbalance between nodes",
            "sysfs:devices/system/node",
            "%",
        )
    else:  # no node with CPUs, or their memory sizes unread
        yield Reading.failed(
            "numa.memory_imbalance",
            ReadingStatus.MISSING,
            "the memory of the NUMA nodes with CPUs was not read (node*/meminfo, node*/cpulist)",
            "sysfs:devices/system/node/node*/meminfo",
            "%",
        )
    topology = "sysfs:devices/system/cpu/cpu*/topology/physical_package_id"
    sockets = set(socket_of_node.values())
    if sockets and None not in sockets:
        per_socket = round(len(cpu_nodes) / len(sockets), 2)
        yield Reading("numa.nodes_per_socket", per_socket, source=topology)
    else:
        reason = "CPU topology (physical_package_id) not in sysfs"
        yield Reading.failed("numa.nodes_per_socket", ReadingStatus.MISSING, reason, topology)


# the readings this probe makes (gpudiag/catalog.py)
READINGS = (
    *catalog.declare(
        "NUMA",
        catalog.config("numa.balancing"),
        catalog.config("numa.cpu_nodes"),
        catalog.config("numa.memory_imbalance", "%"),
        catalog.config("numa.memory_only_nodes"),
        catalog.config("numa.nodes"),
        catalog.config("numa.nodes_per_socket"),
        catalog.config("numa.{node}.cpus"),
        catalog.config("numa.{node}.distance"),
        catalog.config("numa.{node}.hugepages_1G"),
        catalog.config("numa.{node}.hugepages_2M"),
        catalog.volatile("numa.{node}.mem_free", "KiB"),
        catalog.config("numa.{node}.mem_total", "KiB"),
    ),
)

PROBE = Probe(
    name="numa",
    title="NUMA nodes",
    cost=Cost.INSTANT,
    needs=frozenset(),
    collect=collect,
    timeout_s=10.0,
    readings=READINGS,
)
