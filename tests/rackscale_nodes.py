"""Made-up rack-scale nodes for the fabric tests: a GB200 NVL72 compute tray, an HGX B200
and a GH200, each an NVML replay and a host tree, built from the healthy demo HGX H100
(snapshots/make_demo_replays.py) with what differs changed. What is published and where:

- GB200 tray: two Grace CPUs of 72 cores each, NUMA node 0 with GPUs 0-1 and cores 0-71,
  node 1 with GPUs 2-3 and cores 72-143 (ishandhanani/srt-slurm PR 164); Grace's cores are
  Arm Neoverse V2 (MIDR part 0xd4f); each GPU's memory is also NUMA nodes without CPUs,
  eight per GPU (NVIDIA/mlperf-common PR 16: a 4-GPU GH200 node lists 4 + 4 x 8 nodes),
  here 2 + 4 x 8 = 34; 18 NVLink 5 links per GPU to the rack's switch trays, no switch on
  the tray's bus (no local fabric manager), IMEX running with channel0, 18 trays in
  nodes_config.cfg.
- GH200: one Grace with cores 0-71 on node 0 and eight CPU-less nodes 1-8
  (bytedance/xpu-perf issue 129's lscpu), no NVLink fabric.
- HGX B200: PCI device 0x2901 (DCGM diag-skus), 8 GPUs of 18 NVLink 5 links behind
  NVSwitches, the fabric manager running with mlx5_ib and ib_umad loaded.
Made up, and marked so: UUIDs, serials, bus addresses, the GB200 device id (0x2941 here:
no source names it), memory sizes' last digits, cluster UUIDs and clique ids.
"""

from __future__ import annotations

import copy
import functools
import importlib.util
import json
from typing import Any

from gpudiag.capture import CapturedHostFS

from conftest import REPO

_spec = importlib.util.spec_from_file_location(
    "make_demo_replays", REPO / "snapshots" / "make_demo_replays.py"
)
assert _spec is not None and _spec.loader is not None
demo = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(demo)

MIB = 2**20
GB200_ID = 0x2941  # made up (see the docstring)
B200_ID = 0x2901
GB300_ID = 0x31C2  # DCGM diag-skus: GB300 NVL Bianca
HEALTHY_MASK = 0x1AA  # the four conditions false (2 each), configuration 'none' (1)
RACK_UUID = [0x52, 0x07, *range(14)]
CLIQUE = 0x7FFD
# NVLink 5 as nvidia-smi nvlink -s prints it: 50 GB/s a link (NVML field 164, MB/s)
NVLINK5_SPEEDS = {f"164,{link}": 50000 for link in range(18)}
GRACE_MIDR = "0x00000000410fd4f0\n"  # implementer 0x41 (Arm), part 0xd4f (Neoverse V2)


def fabric(
    mask: int = HEALTHY_MASK,
    state: int = 3,
    status: int = 0,
    clique: int = CLIQUE,
    summary: int = 1,
    uuid: list[int] | None = None,
) -> dict[str, dict[str, Any]]:
    """The fabric records of one GPU: the v3 structure and v4's typed cliques."""
    uuid = list(RACK_UUID if uuid is None else uuid)
    common = {"clusterUuid": uuid, "status": status, "state": state, "healthMask": mask}
    return {
        "nvmlDeviceGetGpuFabricInfoV": {**common, "cliqueId": clique, "healthSummary": summary},
        "nvmlDeviceGetGpuFabricInfo_v4": {
            **common,
            "healthSummary": summary,
            "cliques": [{"type": 0, "id": clique}, {"type": 1, "id": clique}],
        },
    }


def _affinity(cpus: range) -> list[int]:
    words = [0] * 4
    for cpu in cpus:
        words[cpu // 64] |= 1 << (cpu % 64)
    return words


def gb200_replay(tray: str = "t01", links: int = 18, **fabric_args: Any) -> dict[str, Any]:
    """One healthy GB200 tray's NVML (four GPUs), with FABRIC_ARGS on every GPU."""
    devices = []
    for index in range(4):
        gpu = demo.healthy_gpu(index)
        gpu["nvmlDeviceGetName"] = "NVIDIA GB200"
        gpu["nvmlDeviceGetPciInfo"]["pciDeviceId"] = GB200_ID << 16 | 0x10DE
        gpu["nvmlDeviceGetUUID"] = f"GPU-0000gb20-{tray}-0000-0000-00000000000{index}"
        gpu["nvmlDeviceGetMemoryInfo"] = {
            "total": 189471 * MIB,
            "free": 188992 * MIB,
            "used": 479 * MIB,
        }
        gpu["nvmlDeviceGetPowerManagementLimit"] = 1200000
        gpu["nvmlDeviceGetPowerManagementDefaultLimit"] = 1200000
        gpu["nvmlDeviceGetEnforcedPowerLimit"] = 1200000
        gpu["nvmlDeviceGetPowerManagementLimitConstraints"] = [200000, 1200000]
        gpu["nvmlDeviceGetCpuAffinity"] = {
            "16": _affinity(range(72 * (index // 2), 72 * (index // 2 + 1)))
        }
        gpu["nvmlDeviceGetNumaNodeId"] = index // 2
        gpu["nvmlDeviceGetTopologyCommonAncestor"] = {
            str(p): 40 if p // 2 == index // 2 else 50 for p in range(4) if p != index
        }
        gpu["nvmlDeviceGetP2PStatus"] = {
            f"{p},{cap}": 0 for p in range(4) if p != index for cap in range(4)
        }
        gpu["nvmlDeviceGetNvLinkVersion"] = {str(link): 5 for link in range(18)}
        gpu["nvmlDeviceGetFieldValues"].update(NVLINK5_SPEEDS)
        gpu["nvmlDeviceGetC2cModeInfoV"] = {"isC2cEnabled": 1}  # Grace: NVLink-C2C
        for link in range(links, 18):  # links out of the fabric
            gpu["nvmlDeviceGetNvLinkState"][str(link)] = 0
        gpu.update(fabric(**fabric_args))
        devices.append(gpu)
    return demo.replay(f"GB200 NVL72 tray {tray} (made up, rackscale_nodes.py)", devices)


def b200_replay() -> dict[str, Any]:
    """A healthy HGX B200's NVML (eight GPUs): the demo H100's with B200 figures."""
    devices = []
    for index in range(8):
        gpu = demo.healthy_gpu(index)
        gpu["nvmlDeviceGetName"] = "NVIDIA B200"
        gpu["nvmlDeviceGetPciInfo"]["pciDeviceId"] = B200_ID << 16 | 0x10DE
        gpu["nvmlDeviceGetMemoryInfo"] = {
            "total": 183359 * MIB,
            "free": 182880 * MIB,
            "used": 479 * MIB,
        }
        for call in (
            "nvmlDeviceGetPowerManagementLimit",
            "nvmlDeviceGetPowerManagementDefaultLimit",
            "nvmlDeviceGetEnforcedPowerLimit",
        ):
            gpu[call] = 1000000
        gpu["nvmlDeviceGetPowerManagementLimitConstraints"] = [200000, 1000000]
        gpu["nvmlDeviceGetNvLinkVersion"] = {str(link): 5 for link in range(18)}
        gpu["nvmlDeviceGetFieldValues"].update(NVLINK5_SPEEDS)
        gpu.update(fabric(mask=HEALTHY_MASK, uuid=[0] * 16, clique=0))
        devices.append(gpu)
    return demo.replay("HGX B200 (made up, rackscale_nodes.py)", devices)


DEMO_CAPTURE = REPO / "snapshots" / "demo-hgx-h100-healthy.capture.json"
CPU_DIR = "/sys/devices/system/cpu"
NODE_DIR = "/sys/devices/system/node"


@functools.cache
def _demo_host() -> str:
    """The healthy demo HGX H100's recorded host files (the capture's host section)."""
    return json.dumps(json.loads(DEMO_CAPTURE.read_text())["host"])


def demo_host() -> dict[str, Any]:
    """A fresh copy of the demo's host record, to change."""
    return json.loads(_demo_host())


def _put(host: dict[str, Any], files: dict[str, str]) -> None:
    for path, text in files.items():
        host["files"][path] = {"text": text}
        host["exists"][path] = True


def _grace_cpus(host: dict[str, Any], sockets: int, gpu_nodes: int) -> None:
    """The demo's 224 Xeon CPUs made SOCKETS Graces of 72 cores (no SMT), with GPU_NODES
    CPU-less NUMA nodes (GPU memory) after the Graces' own."""
    cpus = 72 * sockets
    files = host["files"]
    for path in [p for p in files if p.startswith(CPU_DIR + "/cpu")]:
        number = path[len(CPU_DIR) + 4 :].split("/")[0]
        if number.isdigit() and int(number) >= cpus:
            del files[path]
    for path in [p for p in files if p.startswith(NODE_DIR + "/")]:
        del files[path]
    put = {
        f"{CPU_DIR}/cpu0/regs/identification/midr_el1": GRACE_MIDR,
        f"{CPU_DIR}/online": f"0-{cpus - 1}\n",
        f"{CPU_DIR}/smt/active": "0\n",
        f"{CPU_DIR}/smt/control": "notsupported\n",
        "/proc/cpuinfo": "".join(
            f"processor\t: {cpu}\nBogoMIPS\t: 2000.00\nFeatures\t: fp asimd sve2\n"
            f"CPU implementer\t: 0x41\nCPU architecture: 8\nCPU part\t: 0xd4f\n\n"
            for cpu in range(cpus)
        ),
    }
    for cpu in range(cpus):
        put[f"{CPU_DIR}/cpu{cpu}/topology/physical_package_id"] = f"{cpu // 72}\n"
        put[f"{CPU_DIR}/cpu{cpu}/topology/core_id"] = f"{cpu % 72}\n"
    total = sockets + gpu_nodes
    host["listdir"][NODE_DIR] = [f"node{node}" for node in range(total)]
    for node in range(total):
        base = f"{NODE_DIR}/node{node}"
        kib = 503316480 if node < sockets else 0  # 480 GiB LPDDR5X per Grace
        put[f"{base}/cpulist"] = (f"{72 * node}-{72 * node + 71}" if node < sockets else "") + "\n"
        put[f"{base}/meminfo"] = (
            f"Node {node} MemTotal: {kib} kB\nNode {node} MemFree: {kib // 2} kB\n"
        )
        put[f"{base}/distance"] = " ".join("10" if n == node else "40" for n in range(total)) + "\n"
        for size in ("2048kB", "1048576kB"):
            put[f"{base}/hugepages/hugepages-{size}/nr_hugepages"] = "0\n"
    _put(host, put)


def _keep_gpus(host: dict[str, Any], keep: int, numa: list[int], cpus_of: list[str]) -> None:
    """Keep the demo's first KEEP GPUs on the bus (with their NICs), on these NUMA nodes."""
    devices = host["listdir"]["/sys/bus/pci/devices"]
    for index, bus_id in enumerate(demo.BUS_IDS):
        bus = int(bus_id.split(":")[1], 16)
        for address in (f"0000:{bus:02x}:00.0", f"0000:{bus + 1:02x}:00.0"):
            base = f"/sys/bus/pci/devices/{address}"
            if index >= keep:
                devices.remove(address)
                continue
            _put(
                host,
                {
                    f"{base}/numa_node": f"{numa[index]}\n",
                    f"{base}/local_cpulist": cpus_of[index] + "\n",
                },
            )
    host["listdir"]["/dev"] = [
        n for n in host["listdir"]["/dev"] if n not in {f"nvidia{i}" for i in range(keep, 8)}
    ]


def service(host: dict[str, Any], unit: str, running: bool) -> None:
    """A systemd unit's cgroup: populated while its service runs."""
    events = f"populated {int(running)}\nfrozen 0\n"
    _put(host, {f"/sys/fs/cgroup/system.slice/{unit}/cgroup.events": events})


def _numa(host: dict[str, Any], numa: dict[str, int]) -> None:
    """GPUs' PCI functions reported on other NUMA nodes (address -> node)."""
    _put(host, {f"/sys/bus/pci/devices/{a}/numa_node": f"{n}\n" for a, n in numa.items()})


def gb200_host(
    imex: bool = True, channels: int = 1, numa: dict[str, int] | None = None
) -> dict[str, Any]:
    """A GB200 NVL72 compute tray's host record."""
    host = demo_host()
    _grace_cpus(host, sockets=2, gpu_nodes=32)
    _keep_gpus(host, 4, [0, 0, 1, 1], ["0-71", "0-71", "72-143", "72-143"])
    service(host, "nvidia-imex.service", imex)
    _put(
        host, {"/etc/nvidia-imex/nodes_config.cfg": "".join(f"10.7.0.{t}\n" for t in range(1, 19))}
    )
    host["listdir"]["/dev/nvidia-caps-imex-channels"] = [f"channel{c}" for c in range(channels)]
    _numa(host, numa or {})
    return host


def gh200_host(numa: dict[str, int] | None = None) -> dict[str, Any]:
    """A GH200 node's host record: one Grace, one GPU, GPU memory on nodes 1-8."""
    host = demo_host()
    _grace_cpus(host, sockets=1, gpu_nodes=8)
    _keep_gpus(host, 1, [0], ["0-71"])
    _numa(host, numa or {})
    return host


def b200_host(fm_running: bool = True, modules: tuple[str, ...] = ("ib_umad",)) -> dict[str, Any]:
    """An HGX B200's host record: the demo's, its GPUs 0x2901, the fabric manager's state."""
    host = demo_host()
    for bus_id in demo.BUS_IDS:
        bus = int(bus_id.split(":")[1], 16)
        _put(host, {f"/sys/bus/pci/devices/0000:{bus:02x}:00.0/device": "0x2901\n"})
    loaded = host["files"]["/proc/modules"]["text"]
    extra = "".join(f"{m} 45056 0 - Live 0x0000000000000000\n" for m in modules)
    _put(host, {"/proc/modules": loaded + extra})
    service(host, "nvidia-fabricmanager.service", fm_running)
    log = (
        "[Nov 27 2026 10:00:01] [INFO] [tid 812] Successfully configured all the available"
        " NVSwitches to route GPU NVLink traffic\n"
    )
    _put(host, {"/var/log/fabricmanager.log": log})
    return host


def hostfs(host: dict[str, Any]) -> CapturedHostFS:
    """The record as the host a replayed capture reads (not live, root)."""
    return CapturedHostFS(host, live=False, root_user=True)


def copied(replay: dict[str, Any]) -> dict[str, Any]:
    """A deep copy, to change."""
    return copy.deepcopy(replay)
