"""What a rack-scale NVLink node needs around its GPUs: the fabric manager (and whether
this node needs one), NVLink 5's kernel modules, IMEX for multi-node NVLink, the CUDA
driver's initialisation itself, and Grace's NUMA layout.

Which node needs what:
- The fabric manager runs on the node where the NVSwitches are on its PCIe bus (HGX A100
  and H100: `/dev/nvidia-nvswitch*`, NVIDIA bridges of class 0x0680) and on HGX B200,
  whose NVLink 5 switches it reaches through `mlx5_ib` and `ib_umad` (NVIDIA's fabric
  manager guide; NVIDIA/gpu-operator 2781). A Grace node (GB200, GB300, GH200) has no
  switch on its bus: its switch trays run their own, and NVML's fabric state is its
  health (leptonai/gpud PRs 1106 and 1151 got this wrong once each way).
- IMEX (the import/export daemon of multi-node NVLink memory) where the node is a
  Grace-Blackwell tray (two GPUs per Grace, as GB200 and GB300 NVL72 trays) or where
  IMEX is installed or configured (`/etc/nvidia-imex/nodes_config.cfg`).
Where a node does not need a thing, its readings are `unsupported` saying why, so the
rules about it do not apply there.

A service's state: `systemctl show` on the live node (5 s at most, no shell), else its
systemd cgroup (`cgroup.events`: populated), else a process of that name in /proc (a
fabric manager in a container): the first that answers. The CUDA initialisation runs
`cuInit(0)` of libcuda.so.1 in a child process with a time limit (a hung driver cannot
hang gpudiag); its return code is the reading (802: the system is not yet initialised,
the NVLink fabric not ready).

Never run on a rack-scale node in this project: tested on made-up host trees and stand-ins
(tests/rackscale_nodes.py) only.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from gpudiag import catalog
from gpudiag.hostfs import HostFS
from gpudiag.model import Reading, ReadingStatus
from gpudiag.probe import Cost, Probe, ProbeContext
from gpudiag.textparse import format_cpulist, parse_cpulist

FM_UNIT = "nvidia-fabricmanager.service"
FM_PROCESS = "nv-fabricmanager"
FM_LOG = "/var/log/fabricmanager.log"
IMEX_UNIT = "nvidia-imex.service"
IMEX_PROCESS = "nvidia-imex"
IMEX_NODES = "/etc/nvidia-imex/nodes_config.cfg"
IMEX_CHANNELS = "/dev/nvidia-caps-imex-channels"
NVLINK5_MODULES = ("mlx5_ib", "ib_umad")  # the fabric manager's NVLink 5 prerequisites
# PCI device ids of HGX GPUs with NVLink 5 behind NVSwitches (DCGM diag-skus: B200)
NVLINK5_HGX_IDS = {"0x2901": "B200"}
NVIDIA = "0x10de"
BRIDGE_OTHER = "0x0680"  # an NVSwitch on the PCIe bus (HGX A100/H100)
# MIDR_EL1 of NVIDIA Grace's cores: Arm Neoverse V2 (implementer 0x41, part 0xd4f)
GRACE_PART = 0xD4F
MIDR = "/sys/devices/system/cpu/cpu0/regs/identification/midr_el1"
SYSTEMCTL_TIMEOUT_S = 5.0
CUINIT_TIMEOUT_S = 10.0
# CUresult names (cuda.h) of the codes cuInit gives on a node that is not ready
CUDA_ERRORS = {
    0: "CUDA_SUCCESS",
    3: "CUDA_ERROR_NOT_INITIALIZED",
    35: "CUDA_ERROR_INSUFFICIENT_DRIVER",
    46: "CUDA_ERROR_DEVICES_UNAVAILABLE",
    100: "CUDA_ERROR_NO_DEVICE",
    101: "CUDA_ERROR_INVALID_DEVICE",
    304: "CUDA_ERROR_OPERATING_SYSTEM",
    802: "CUDA_ERROR_SYSTEM_NOT_READY",
    803: "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH",
    804: "CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE",
    999: "CUDA_ERROR_UNKNOWN",
}
# the child: load the driver's library, initialise, print the code
CUINIT_CHILD = (
    "import ctypes, sys\n"
    "try:\n"
    "    lib = ctypes.CDLL('libcuda.so.1')\n"
    "except OSError as exc:\n"
    "    print('nolib', exc)\n"
    "    sys.exit(0)\n"
    "print('code', lib.cuInit(0))\n"
)


@dataclass(frozen=True)
class Layout:
    """What the PCIe bus and the CPUs say about the node."""

    gpus: dict[str, str]  # PCI address -> device id of every NVIDIA GPU
    nvswitch: str  # why the node has NVSwitches on its bus, '' when it has none
    grace: bool


def pci_layout(host: HostFS) -> Layout:
    """The node's NVIDIA GPUs and NVSwitches (sysfs) and whether its CPU is Grace."""
    gpus: dict[str, str] = {}
    switches = []
    for address in host.listdir("/sys/bus/pci/devices"):
        base = f"/sys/bus/pci/devices/{address}"
        vendor = host.read(f"{base}/vendor")
        if not vendor.ok or (vendor.text or "").strip() != NVIDIA:
            continue
        klass = (host.read(f"{base}/class").text or "").strip()
        if klass.startswith("0x03"):
            gpus[address] = (host.read(f"{base}/device").text or "").strip()
        elif klass.startswith(BRIDGE_OTHER):
            switches.append(address)
    nvswitch = ""
    if switches:
        nvswitch = f"{len(switches)} NVSwitch{'es' if len(switches) > 1 else ''} on the PCIe bus"
    elif any(n.startswith("nvidia-nvswitch") for n in host.listdir("/dev")):
        nvswitch = "NVSwitch device files (/dev/nvidia-nvswitch*)"
    return Layout(gpus, nvswitch, grace_cpu(host))


def grace_cpu(host: HostFS) -> bool:
    """Whether the node's CPU is Grace: cpu0's MIDR_EL1 part is Neoverse V2's."""
    midr = host.read(MIDR)
    if not midr.ok:
        return False
    try:
        return (int((midr.text or "").strip(), 16) >> 4) & 0xFFF == GRACE_PART
    except ValueError:
        return False


def fm_need(layout: Layout) -> tuple[bool, str]:
    """Whether the node needs its own fabric manager, and why."""
    if layout.grace:
        return False, (
            "a Grace node (GB200/GB300/GH200): the fabric manager runs on the switch trays; "
            "NVML's fabric state is this node's"
        )
    nvlink5 = sorted({NVLINK5_HGX_IDS[d] for d in layout.gpus.values() if d in NVLINK5_HGX_IDS})
    if nvlink5:
        return True, f"HGX {nvlink5[0]}: NVLink 5 through NVSwitches the fabric manager configures"
    if layout.nvswitch:
        return True, f"{layout.nvswitch}: the fabric manager configures them"
    return False, "no NVSwitch on this node: no fabric manager to run"


def imex_need(host: HostFS, layout: Layout, cpu_nodes: list[int]) -> tuple[bool, str]:
    """Whether the node takes part in a multi-node NVLink domain that IMEX serves."""
    if layout.grace and cpu_nodes and len(layout.gpus) >= 2 * len(cpu_nodes):
        return True, "a Grace-Blackwell tray (two GPUs per Grace): multi-node NVLink via IMEX"
    if host.exists(IMEX_NODES):
        return True, f"IMEX is configured here ({IMEX_NODES})"
    return False, "not a Grace-Blackwell tray and no IMEX configured"


def parse_systemctl_show(text: str) -> dict[str, str]:
    """`systemctl show -p ...` output -> {property: value}."""
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)


def _systemctl_show(unit: str) -> dict[str, str] | None:
    """`systemctl show` of a unit on this machine, None where there is no systemctl."""
    systemctl = shutil.which("systemctl")
    if systemctl is None:
        return None
    try:
        run = subprocess.run(
            [systemctl, "show", unit, "-p", "LoadState,ActiveState,SubState", "--no-pager"],
            capture_output=True,
            text=True,
            timeout=SYSTEMCTL_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return parse_systemctl_show(run.stdout) if run.returncode == 0 else None


def _recorded(host: HostFS, name: str, produce: Callable[[], Any]) -> Any:
    """host.output, or None where a capture made before this probe did not record it."""
    try:
        return host.output(name, produce)
    except ValueError:
        return None


def service_running(host: HostFS, unit: str, process: str) -> tuple[bool | None, str, str]:
    """(running, how it is known, source) of a service: systemd's word on the live node,
    else its cgroup, else a process of that name; None where nothing says."""
    if host.is_live:
        shown = _recorded(host, f"systemctl show {unit}", lambda: _systemctl_show(unit))
        if shown and shown.get("LoadState") == "loaded":
            state = f"{shown.get('ActiveState', '?')} ({shown.get('SubState', '?')})"
            return shown.get("ActiveState") == "active", f"systemd: {state}", f"systemctl:{unit}"
    events = host.read(f"/sys/fs/cgroup/system.slice/{unit}/cgroup.events")
    if events.ok:
        populated = re.search(r"^populated\s+1\s*$", events.text or "", re.M) is not None
        word = "running" if populated else "no process in its cgroup"
        return populated, f"systemd cgroup: {word}", events.source
    for pid in host.listdir("/proc"):
        if pid.isdigit() and (host.read(f"/proc/{pid}/comm").text or "").strip() == process:
            return True, f"process {process} (pid {pid})", "procfs:*/comm"
    return False, f"no {unit} cgroup and no {process} process", "procfs:*/comm"


def last_error_line(text: str) -> str:
    """The last line of a log that reports an error ('' when none does)."""
    lines = [line.strip() for line in text.splitlines() if re.search(r"\berror\b", line, re.I)]
    return lines[-1][:200] if lines else ""


def count_config_lines(text: str) -> int:
    """The entries of a one-per-line config (IMEX's node addresses): not blank, not '#'."""
    return len([line for line in text.splitlines() if line.strip() and line.strip()[0] != "#"])


def cpu_numa_nodes(host: HostFS) -> tuple[dict[int, list[int]], list[int]]:
    """({node: CPUs} of the NUMA nodes with CPUs, nodes with none (GPU memory on Grace))."""
    with_cpus: dict[int, list[int]] = {}
    without: list[int] = []
    for name in host.listdir("/sys/devices/system/node"):
        if not (name.startswith("node") and name[4:].isdigit()):
            continue
        text = host.read(f"/sys/devices/system/node/{name}/cpulist").text or ""
        cpus = parse_cpulist(text) if text.strip() else []
        if cpus:
            with_cpus[int(name[4:])] = cpus
        else:
            without.append(int(name[4:]))
    return with_cpus, without


def numa_binding_problems(
    host: HostFS, layout: Layout, cpu_nodes: dict[int, list[int]]
) -> list[str]:
    """GPUs whose NUMA node has no CPUs, and (Grace) GPUs spread unevenly over the Graces."""
    problems = []
    per_node: dict[int, int] = {}
    for address in layout.gpus:
        text = (host.read(f"/sys/bus/pci/devices/{address}/numa_node").text or "").strip()
        if not text.lstrip("-").isdigit() or int(text) < 0:
            continue  # no NUMA affinity at all: PCIE010's
        node = int(text)
        per_node[node] = per_node.get(node, 0) + 1
        if node not in cpu_nodes:
            problems.append(f"GPU {address} on NUMA node {node}, which has no CPUs")
    if layout.grace and len(cpu_nodes) > 1 and per_node:
        counts = {n: per_node.get(n, 0) for n in sorted(cpu_nodes)}
        if len(set(counts.values())) > 1:
            spread = ", ".join(
                f"node {n} (CPUs {format_cpulist(cpu_nodes[n])}): {c}" for n, c in counts.items()
            )
            problems.append(f"GPUs per Grace differ: {spread}")
    return problems


def run_cuinit(timeout: float = CUINIT_TIMEOUT_S) -> tuple[int | None, str]:
    """cuInit(0) in a child process: (code, '') or (None, why it gave none)."""
    try:
        run = subprocess.run(
            [sys.executable, "-c", CUINIT_CHILD],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return None, f"cuInit gave no answer within {timeout:g} s (a hung driver)"
    except OSError as exc:
        return None, f"cannot start the child: {exc.strerror}"
    words = run.stdout.split()
    if words[:1] == ["code"] and len(words) > 1 and words[1].lstrip("-").isdigit():
        return int(words[1]), ""
    if words[:1] == ["nolib"]:
        return None, "no libcuda.so.1 (the driver's CUDA library) to load"
    return None, f"the child ended with {run.returncode}: {run.stderr.strip()[-160:]}"


def cuda_error_name(code: int) -> str:
    """'ok' or 'CUDA_ERROR_SYSTEM_NOT_READY (802)'."""
    return "ok" if code == 0 else f"{CUDA_ERRORS.get(code, 'CUresult')} ({code})"


def cuda_init_reading(host: HostFS) -> Reading:
    """cuda.init: what cuInit returns on this node."""
    key, source = "cuda.init", "cuda:cuInit"
    if not host.is_this_machine and not host.is_live:
        reason = "a host tree: CUDA initialises only on the node itself"
        return CUDA_INIT.failed(ReadingStatus.UNSUPPORTED, reason, source)
    if not host.exists("/dev/nvidiactl"):
        reason = "no /dev/nvidiactl: no NVIDIA driver loaded to initialise"
        return CUDA_INIT.failed(ReadingStatus.UNSUPPORTED, reason, source)
    answer = _recorded(host, "cuInit", lambda: list(run_cuinit()))
    if answer is None:
        reason = "the capture holds no CUDA initialisation (taken before gpudiag tried it)"
        return CUDA_INIT.failed(ReadingStatus.UNSUPPORTED, reason, source)
    code, why = answer
    if code is None:
        status = ReadingStatus.UNSUPPORTED if "no libcuda" in why else ReadingStatus.ERROR
        return CUDA_INIT.failed(status, why, source)
    return Reading(key, cuda_error_name(int(code)), source=source)


def collect(context: ProbeContext) -> Iterator[Reading]:
    """The fabric manager, NVLink 5 modules, IMEX, CUDA initialisation and Grace NUMA."""
    host = context.host
    layout = pci_layout(host)
    cpu_nodes, memory_nodes = cpu_numa_nodes(host)
    needed, why = fm_need(layout)
    yield Reading("fabric.manager.needed", needed, source="sysfs:bus/pci/devices", reason=why)
    if needed:
        running, how, source = service_running(host, FM_UNIT, FM_PROCESS)
        yield Reading("fabric.manager.running", running, source=source, reason=how)
        log = host.read(FM_LOG)
        yield log.parsed("fabric.manager.last_error", last_error_line)
    else:
        for key in ("fabric.manager.running", "fabric.manager.last_error"):
            yield Reading.failed(key, ReadingStatus.UNSUPPORTED, why, "sysfs:bus/pci/devices")
    nvlink5 = any(d in NVLINK5_HGX_IDS for d in layout.gpus.values()) and needed
    if nvlink5:
        modules = host.read("/proc/modules")
        loaded = {line.split()[0] for line in (modules.text or "").splitlines() if line.strip()}
        yield modules.reading(
            "fabric.manager.modules_missing", [m for m in NVLINK5_MODULES if m not in loaded]
        )
    else:
        reason = "no B200-class HGX GPU behind a local fabric manager"
        yield Reading.failed(
            "fabric.manager.modules_missing", ReadingStatus.UNSUPPORTED, reason, "procfs:modules"
        )
    imex, imex_why = imex_need(host, layout, sorted(cpu_nodes))
    yield Reading("imex.needed", imex, source="sysfs:bus/pci/devices", reason=imex_why)
    if imex:
        running, how, source = service_running(host, IMEX_UNIT, IMEX_PROCESS)
        yield Reading("imex.running", running, source=source, reason=how)
        channels = [n for n in host.listdir(IMEX_CHANNELS) if n.startswith("channel")]
        yield Reading("imex.channels", len(channels), source=f"file:{IMEX_CHANNELS}")
        yield host.read(IMEX_NODES).parsed("imex.domain_nodes", count_config_lines)
    else:
        for key in ("imex.running", "imex.channels", "imex.domain_nodes"):
            yield Reading.failed(key, ReadingStatus.UNSUPPORTED, imex_why, f"file:{IMEX_NODES}")
    yield cuda_init_reading(host)
    source = "sysfs:devices/system/node"
    yield Reading("grace.cpu", layout.grace, source=f"sysfs:{MIDR[5:]}")
    yield Reading("grace.cpu_numa_nodes", sorted(cpu_nodes), source=source)
    yield Reading("grace.memory_numa_nodes", memory_nodes, source=source)
    yield Reading(
        "grace.numa_binding", numa_binding_problems(host, layout, cpu_nodes), source=source
    )


CUDA_INIT = catalog.config("cuda.init", help="what cuInit(0) returns: ok, or the CUresult")
READINGS = catalog.declare(
    "Fabric",
    catalog.config("fabric.manager.needed"),
    catalog.config("fabric.manager.running"),
    catalog.volatile("fabric.manager.last_error"),
    catalog.config("fabric.manager.modules_missing"),
    catalog.config("imex.needed"),
    catalog.config("imex.running"),
    catalog.config("imex.channels"),
    catalog.config("imex.domain_nodes"),
    CUDA_INIT,
    catalog.config("grace.cpu"),
    catalog.config("grace.cpu_numa_nodes"),
    catalog.config("grace.memory_numa_nodes"),
    catalog.config("grace.numa_binding"),
)

PROBE = Probe(
    name="rackscale",
    title="Fabric manager, IMEX, CUDA initialisation, Grace NUMA",
    cost=Cost.INSTANT,
    needs=frozenset(),
    collect=collect,
    timeout_s=20.0,
    readings=READINGS,
)
