"""Readings derived from several probes' readings, after the probes ran (reading no
files itself): for every GPU and every network or InfiniBand adapter, the label
`nvidia-smi topo -m` would print (PIX, PXB, PHB, NODE, SYS), and each GPU's nearest
adapter; whether GPUDirect RDMA is set up where InfiniBand is present."""

from __future__ import annotations

import functools
import re

from gpudiag import catalog
from gpudiag.model import ProbeResult, ProbeStatus, Reading, ReadingStatus

# the readings derived here (gpudiag/catalog.py)
GPU_NIC = catalog.config("topo.gpu.{gpu}.nic.{nic}", help="the topo -m label GPU to adapter")
NEAREST_NIC = catalog.config("topo.gpu.{gpu}.nearest_nic", help="the closest network adapter")
READINGS = (
    *catalog.declare("GPU topology", GPU_NIC, NEAREST_NIC),
    *catalog.declare(
        "Kernel",
        catalog.config("kernel.gpudirect_rdma", help="loaded, missing, or not needed"),
    ),
    *catalog.declare(
        "Node",
        catalog.config(
            "node.nvidia_gpus",
            help="whether the node has NVIDIA GPUs: on its PCI bus, or seen by NVML",
        ),
    ),
)

_GPU_BUS = re.compile(r"^gpu\.(\d+)\.pci\.bus_id$")
_NIC_KIND = re.compile(r"^pcie\.(.+)\.kind$")


def pcie_relation(
    a_bridges: list[str], b_bridges: list[str], same_host_bridge: bool, same_numa: bool
) -> str:
    """The topo -m label between two PCIe functions from the bridges above each (root
    port first): PIX through one bridge, PXB through several below a host bridge, PHB
    through the host bridge, NODE across host bridges of one NUMA node, SYS across nodes."""
    common = 0
    for x, y in zip(a_bridges, b_bridges, strict=False):
        if x != y:
            break
        common += 1
    if common:
        return "PIX" if len(a_bridges) == len(b_bridges) == common else "PXB"
    if same_host_bridge:
        return "PHB"
    return "NODE" if same_numa else "SYS"


CLOSENESS = ("PIX", "PXB", "PHB", "NODE", "SYS")
PEERMEM_MODULES = ("nvidia_peermem", "nv_peer_mem")


def _gpudirect(readings: dict[str, Reading], kinds: dict[str, Reading]) -> list[Reading]:
    """kernel.gpudirect_rdma: loaded, missing, or not needed (no InfiniBand adapter);
    `kinds` are the pcie.ADDRESS.kind readings by address."""
    modules = readings.get("kernel.modules")
    has_ib = any(r.value == "infiniband" and r.ok for r in kinds.values())
    source = "kernel.modules, pcie.*.kind"
    if not has_ib:
        devices = readings.get("pcie.devices")
        if not kinds and (devices is None or not devices.ok):
            return []  # the PCIe probe did not run (an import): nothing to say either way
        return [Reading("kernel.gpudirect_rdma", "not needed", source=source)]
    if modules is None or not modules.ok or not isinstance(modules.value, list):
        return [
            Reading.failed(
                "kernel.gpudirect_rdma",
                ReadingStatus.MISSING,
                "the loaded modules are not known",
                source,
            )
        ]
    loaded = any(m in modules.value for m in PEERMEM_MODULES)
    return [Reading("kernel.gpudirect_rdma", "loaded" if loaded else "missing", source=source)]


def _nvidia_gpus(readings: dict[str, Reading]) -> list[Reading]:
    """node.nvidia_gpus: true where the PCI bus lists an NVIDIA GPU or NVML sees one;
    false where the bus was read, lists none, and NVML sees none (a node without GPUs:
    the NVML and bus-count rules do not apply; where GPUs are expected there, Slurm's
    GRES as node.expected_gpus (NODE001) or a site rule, examples/site-rules/
    expected-gpus.toml, says so). Nothing without
    the bus (an nvidia-smi import, a tree without /sys/bus/pci): the GPU rules apply."""
    source = "pcie.gpu_count, nvml.gpu_count"
    on_bus, in_nvml = readings.get("pcie.gpu_count"), readings.get("nvml.gpu_count")
    functions = readings.get("pcie.functions")
    seen = [r for r in (on_bus, in_nvml) if r is not None and r.ok and r.value]
    if seen:
        return [Reading("node.nvidia_gpus", True, source=source)]
    if functions is None:
        return []  # the PCIe probe did not run (an import): nothing to say
    listed = functions.value if functions.ok else 0
    if on_bus is None or not on_bus.ok or not listed:
        return []  # the bus was not read (no /sys/bus/pci/devices): the GPU rules apply
    reason = f"no NVIDIA GPU on this node: its PCI bus lists {listed} functions, no NVIDIA GPU"
    if in_nvml is not None and not in_nvml.ok:
        reason += ", and NVML does not answer"
    return [Reading("node.nvidia_gpus", False, source=source, reason=reason)]


@functools.lru_cache(maxsize=16)
def _shape(
    keys: tuple[str, ...],
) -> tuple[tuple[tuple[int, str], ...], tuple[tuple[str, str], ...]]:
    """Among these keys, each GPU's bus id key (index, key) and each PCIe address's kind
    key (address, key), in order: found once per shape of readings."""
    gpus, kinds = [], []
    for key in keys:
        if key.endswith(".kind"):
            if m := _NIC_KIND.match(key):
                kinds.append((m.group(1), key))
        elif key.endswith(".bus_id") and (m := _GPU_BUS.match(key)):
            gpus.append((int(m.group(1)), key))
    return tuple(gpus), tuple(kinds)


def _gpus_and_kinds(readings: dict[str, Reading]) -> tuple[dict[int, str], dict[str, Reading]]:
    """GPU index -> its PCI bus id, and PCIe address -> its pcie.ADDRESS.kind reading
    (every judgment derives the topology again: the keys are found once per shape)."""
    bus_keys, kind_keys = _shape(tuple(readings))
    gpus = {gpu: str(r.value) for gpu, key in bus_keys if (r := readings[key]).ok}
    return gpus, {address: readings[key] for address, key in kind_keys}


def derive(readings: dict[str, Reading]) -> ProbeResult:
    """The derived topology readings, as the result of a pseudo-probe named topology."""
    derived: list[Reading] = []
    gpus, kinds = _gpus_and_kinds(readings)
    nics = [nic for nic, r in kinds.items() if r.value in ("nic", "infiniband")]
    for gpu, bus in sorted(gpus.items()):
        first = len(derived)  # this GPU's readings follow (not every GPU's again: 64 GPUs)
        for nic in nics:
            source = f"pcie:{bus}, pcie:{nic}"
            needed = [
                f"pcie.{bus}.bridges",
                f"pcie.{nic}.bridges",
                f"pcie.{bus}.host_bridge",
                f"pcie.{nic}.host_bridge",
            ]
            absent = [k for k in needed if k not in readings or not readings[k].ok]
            if absent:
                reason = f"no {absent[0]} reading"
                derived.append(
                    GPU_NIC.failed(ReadingStatus.MISSING, reason, source, gpu=gpu, nic=nic)
                )
                continue
            numa = [readings.get(f"pcie.{x}.numa_node") for x in (bus, nic)]
            same_numa = all(r is not None and r.ok for r in numa) and (
                numa[0].value == numa[1].value
            )  # type: ignore[union-attr]
            label = pcie_relation(
                list(readings[needed[0]].value),  # type: ignore[arg-type]
                list(readings[needed[1]].value),  # type: ignore[arg-type]
                readings[needed[2]].value == readings[needed[3]].value,
                same_numa,
            )
            derived.append(GPU_NIC.reading(label, source, gpu=gpu, nic=nic))
        prefix = f"topo.gpu.{gpu}.nic."
        labels = [r.value for r in derived[first:] if r.key.startswith(prefix) and r.ok]
        if labels:
            nearest = min(labels, key=lambda label: CLOSENESS.index(str(label)))
            derived.append(NEAREST_NIC.reading(nearest, "topo.gpu.*.nic.*", gpu=gpu))
    derived.extend(_gpudirect(readings, kinds))
    derived.extend(_nvidia_gpus(readings))
    return ProbeResult(
        name="topology",
        title="GPU-NIC topology (derived)",
        status=ProbeStatus.OK,
        duration_s=0.0,
        readings=tuple(derived),
    )
