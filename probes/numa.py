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
        yield cpulist.parsed(NODE_CPUS.key(node=node), lambda t: format_cpulist(parse_cpulist(t)))
        meminfo = host.read(f"{base}/meminfo")
        fields = parse_meminfo(meminfo.text or "") if meminfo.ok else {}
        fields_by_node[node] = fields.get("MemTotal", 0)
        for declared, field in ((NODE_MEM_TOTAL, "MemTotal"), (NODE_MEM_FREE, "MemFree")):
            yield meminfo_reading(meminfo, declared.key(node=node), field)
        yield host.reading(NODE_DISTANCE.key(node=node), f"{base}/distance", parse_distance)
        for size, declared in (("2048kB", NODE_HUGEPAGES_2M), ("1048576kB", NODE_HUGEPAGES_1G)):
            path = f"{base}/hugepages/hugepages-{size}/nr_hugepages"
            if host.exists(path):
                yield host.reading(declared.key(node=node), path, parse_int)
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
        yield MEMORY_IMBALANCE.reading(round(spread, 1), "sysfs:devices/system/node/node*/meminfo")
    elif len(cpu_nodes) == 1:
        yield MEMORY_IMBALANCE.failed(
            ReadingStatus.UNSUPPORTED,
            "one NUMA node with CPUs: no imbalance between nodes",
            "sysfs:devices/system/node",
        )
    else:  # no node with CPUs, or their memory sizes unread
        yield MEMORY_IMBALANCE.failed(
            ReadingStatus.MISSING,
            "the memory of the NUMA nodes with CPUs was not read (node*/meminfo, node*/cpulist)",
            "sysfs:devices/system/node/node*/meminfo",
        )
    topology = "sysfs:devices/system/cpu/cpu*/topology/physical_package_id"
    sockets = set(socket_of_node.values())
    if sockets and None not in sockets:
        per_socket = round(len(cpu_nodes) / len(sockets), 2)
        yield Reading("numa.nodes_per_socket", per_socket, source=topology)
    else:
        reason = "CPU topology (physical_package_id) not in sysfs"
        yield Reading.failed("numa.nodes_per_socket", ReadingStatus.MISSING, reason, topology)


# the readings of a unit or a node's, emitted through these
MEMORY_IMBALANCE = catalog.config("numa.memory_imbalance", "%")
NODE_CPUS = catalog.config("numa.{node}.cpus")
NODE_DISTANCE = catalog.config("numa.{node}.distance")
NODE_HUGEPAGES_1G = catalog.config("numa.{node}.hugepages_1G")
NODE_HUGEPAGES_2M = catalog.config("numa.{node}.hugepages_2M")
NODE_MEM_FREE = catalog.volatile("numa.{node}.mem_free", "KiB")
NODE_MEM_TOTAL = catalog.config("numa.{node}.mem_total", "KiB")

# the readings this probe makes (gpudiag/catalog.py)
READINGS = (
    *catalog.declare(
        "NUMA",
        catalog.config("numa.balancing"),
        catalog.config("numa.cpu_nodes"),
        MEMORY_IMBALANCE,
        catalog.config("numa.memory_only_nodes"),
        catalog.config("numa.nodes"),
        catalog.config("numa.nodes_per_socket"),
        NODE_CPUS,
        NODE_DISTANCE,
        NODE_HUGEPAGES_1G,
        NODE_HUGEPAGES_2M,
        NODE_MEM_FREE,
        NODE_MEM_TOTAL,
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
