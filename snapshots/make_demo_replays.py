"""Write the demo NVML replays of an 8-GPU HGX H100 node, healthy and with planted faults.

    python snapshots/make_demo_replays.py        # rewrites snapshots/demo-hgx-h100-*.toml

Where the values come from:
- Published H100 SXM5 facts: PCI device id 0x2330, PCIe Gen5 x16, 700 W default power
  limit, 18 NVLink 4 links per GPU at 26.562 GB/s each, all to the node's 4 NVSwitches.
- The real H100 capture in ../shared/realdata/nvidia-smi-q (driver 590.48.01): name,
  VBIOS, InfoROM image, board part number, 81559 MiB of memory of which 479 MiB reserved by
  the driver and none in use, 131072 MiB of BAR1 (1 MiB used), clocks
  (345 MHz SM idle, 1980 MHz SM maximum, 2619 MHz memory), 200-700 W power limit range,
  41 C at idle and 46 C below T.Limit (shutdown 8 C, slowdown 2 C past it, max operating
  at it), 'Idle' as the only clock event reason, fabric
  state Completed with status Success and no health flags, GPU Recovery Action None
  (NVML field 230: 0), retired pages N/A
  (NotSupported: H100 remaps rows instead), application clocks answered 'deprecated',
  and each NVLink at 26.562 GB/s (`nvidia-smi nvlink -s`). That driver reports
  temperature limits only relative to the limit (T.Limit), so the absolute thresholds are
  recorded as NotSupported.
- Made up, and marked so: UUIDs, serial numbers, bus addresses (DGX-like), the CPU
  affinity (2 x 56 cores with SMT), and power draw at idle.

Beside each NVML replay the script writes a whole-node capture (`*.capture.json`, the
format of gpudiag/capture.py, for `gpudiag --replay`): the same NVML recording, and the
host files, links and command outputs the probes read, recorded by running today's probes
on a host tree made here. The host is made up, and marked so: a two-socket HGX H100
(2 x 56-core Xeon Platinum 8480+ with SMT, two NUMA nodes, as the CPU affinity above),
the eight GPUs on the PCIe bus at the replay's bus addresses, each behind a PCIe switch
shared with its ConnectX-7 InfiniBand adapter (one per GPU), GPUs 0-3 on socket 0 and 4-7
on socket 1, driver 590.48.01 loaded with nvidia_peermem. The NVSwitches are left off the
PCIe bus (NVML names them as NVLink peers only). The faulty node's host carries its
faults too: GPU 3's link at x8 in sysfs, and Xid 79 for GPU 7 in the kernel log.

Planted faults in the faulty replay: GPU 3 at PCIe x8 of x16, NVLink 5 of GPU 2 inactive,
persistence mode off on GPU 5, a pending row remap on GPU 1, a hardware slowdown on
GPU 6, NVLink 3 of GPU 4 at half speed, and GPU 7 lost.
"""

from __future__ import annotations

import copy
import json
import os
import tempfile
from pathlib import Path
from typing import Any

import tomli_w

HERE = Path(__file__).parent
BUS_IDS = [
    "00000000:18:00.0",
    "00000000:2A:00.0",
    "00000000:3A:00.0",
    "00000000:5D:00.0",
    "00000000:9A:00.0",
    "00000000:AB:00.0",
    "00000000:BA:00.0",
    "00000000:DB:00.0",
]
SWITCH_BUS_IDS = ["00000000:05:00.0", "00000000:06:00.0", "00000000:07:00.0", "00000000:08:00.0"]
LINKS_PER_SWITCH = (5, 4, 4, 5)  # 18 links spread over the 4 NVSwitches
MIB = 2**20
NVLINK_MBPS = 26562  # NVML_FI_DEV_NVLINK_GET_SPEED of an NVLink 4 link, 26.562 GB/s
NOT_SUPPORTED = {"error": "NotSupported"}
DEPRECATED = {"error": "Deprecated"}


def cpu_affinity(gpu: int) -> list[int]:
    """64-bit words of CPUs 0-55,112-167 (socket 0) or 56-111,168-223 (socket 1)."""
    first = 0 if gpu < 4 else 56
    cpus = [*range(first, first + 56), *range(first + 112, first + 168)]
    words = [0] * 4
    for cpu in cpus:
        words[cpu // 64] |= 1 << (cpu % 64)
    return words


def pci_info(bus_id: str, device_id: int = 0x233010DE) -> dict[str, Any]:
    domain, bus, rest = bus_id.split(":")
    device, _function = rest.split(".")
    return {
        "busIdLegacy": bus_id[4:],
        "domain": int(domain, 16),
        "bus": int(bus, 16),
        "device": int(device, 16),
        "pciDeviceId": device_id,
        "pciSubSystemId": 0x16C110DE,
        "busId": bus_id,
    }


def link_switch(link: int) -> str:
    edge = 0
    for switch, count in enumerate(LINKS_PER_SWITCH):
        edge += count
        if link < edge:
            return SWITCH_BUS_IDS[switch]
    raise ValueError(link)


def healthy_gpu(index: int) -> dict[str, Any]:
    """Every NVML call gpudiag makes for one healthy H100 SXM5."""
    peers = [p for p in range(8) if p != index]

    def same_socket(peer: int) -> bool:
        return (index < 4) == (peer < 4)

    return {
        "nvmlDeviceGetName": "NVIDIA H100 80GB HBM3",
        "nvmlDeviceGetPciInfo": pci_info(BUS_IDS[index]),
        "nvmlDeviceGetUUID": f"GPU-0000demo-0000-0000-0000-00000000000{index}",
        "nvmlDeviceGetSerial": f"165000000000{index}",
        "nvmlDeviceGetVbiosVersion": "96.00.A5.00.01",
        "nvmlDeviceGetInforomImageVersion": "G520.0200.00.05",
        "nvmlDeviceGetBoardPartNumber": "692-2G520-0200-000",
        # nvidia-smi shows Used 0 MiB and Reserved 479 MiB; the v1 call gpudiag makes
        # counts the driver's reservation as used
        "nvmlDeviceGetMemoryInfo": {
            "total": 81559 * MIB,
            "free": (81559 - 479) * MIB,
            "used": 479 * MIB,
        },
        "nvmlDeviceGetBAR1MemoryInfo": {
            "bar1Total": 131072 * MIB,
            "bar1Free": 131071 * MIB,
            "bar1Used": 1 * MIB,
        },
        "nvmlDeviceGetComputeMode": 0,
        "nvmlDeviceGetPersistenceMode": 1,
        "nvmlDeviceGetMigMode": [0, 0],
        "nvmlDeviceGetEccMode": [1, 1],
        "nvmlDeviceGetTotalEccErrors": {f"{e},{c}": 0 for e in (0, 1) for c in (0, 1)},
        "nvmlDeviceGetMemoryErrorCounter": {
            f"{e},{c},{loc}": 0 for e in (0, 1) for c in (0, 1) for loc in (2, 7)
        },
        "nvmlDeviceGetRetiredPages": {"0": NOT_SUPPORTED, "1": NOT_SUPPORTED},
        "nvmlDeviceGetRetiredPagesPendingStatus": NOT_SUPPORTED,
        "nvmlDeviceGetRemappedRows": [0, 0, 0, 0],
        "nvmlDeviceGetClockInfo": {"1": 345, "2": 2619},
        "nvmlDeviceGetMaxClockInfo": {"1": 1980, "2": 2619},
        "nvmlDeviceGetApplicationsClock": {"1": DEPRECATED, "2": DEPRECATED},
        "nvmlDeviceGetDefaultApplicationsClock": {"1": DEPRECATED, "2": DEPRECATED},
        "nvmlDeviceGetCurrentClocksEventReasons": 0x1,
        "nvmlDeviceGetPerformanceState": 0,
        "nvmlDeviceGetPowerUsage": 69000 + 1000 * index,
        "nvmlDeviceGetPowerManagementLimit": 700000,
        "nvmlDeviceGetPowerManagementDefaultLimit": 700000,
        "nvmlDeviceGetEnforcedPowerLimit": 700000,
        "nvmlDeviceGetPowerManagementLimitConstraints": [200000, 700000],
        "nvmlDeviceGetTemperature": {"0": 41},
        "nvmlDeviceGetMarginTemperature": {"marginTemperature": 46},
        "nvmlDeviceGetTemperatureThreshold": {
            "0": NOT_SUPPORTED,
            "1": NOT_SUPPORTED,
            "3": NOT_SUPPORTED,
        },
        "nvmlDeviceGetCurrPcieLinkGeneration": 5,
        "nvmlDeviceGetGpuMaxPcieLinkGeneration": 5,
        "nvmlDeviceGetCurrPcieLinkWidth": 16,
        "nvmlDeviceGetMaxPcieLinkWidth": 16,
        "nvmlDeviceGetPcieReplayCounter": 0,
        "nvmlDeviceGetUtilizationRates": {"gpu": 0, "memory": 0},
        "nvmlDeviceGetComputeRunningProcesses": [],
        "nvmlDeviceGetGraphicsRunningProcesses": [],
        "nvmlDeviceGetGpuFabricInfoV": {
            "clusterUuid": [0] * 16,
            "status": 0,
            "cliqueId": 0,
            "state": 3,
            "healthMask": 0,
        },
        "nvmlDeviceGetC2cModeInfoV": NOT_SUPPORTED,  # no NVLink-C2C: an x86 host
        "nvmlDeviceGetCpuAffinity": {"16": cpu_affinity(index)},
        "nvmlDeviceGetNumaNodeId": 0 if index < 4 else 1,
        "nvmlDeviceGetNvLinkState": {str(link): 1 for link in range(18)},
        "nvmlDeviceGetNvLinkVersion": {str(link): 4 for link in range(18)},
        "nvmlDeviceGetNvLinkRemotePciInfo": {
            str(link): pci_info(link_switch(link), 0x22A310DE) for link in range(18)
        },
        "nvmlDeviceGetNvLinkRemoteDeviceType": {str(link): 2 for link in range(18)},
        "nvmlDeviceGetFieldValues": {
            **{f"164,{link}": NVLINK_MBPS for link in range(18)},
            # the temperature limits relative to T.Limit (shutdown, slowdown, max operating)
            **{"193,0": -8, "194,0": -2, "196,0": 0},
            # NVML_FI_DEV_GET_GPU_RECOVERY_ACTION: none (the capture's "GPU Recovery
            # Action : None")
            "230,0": 0,
        },
        "nvmlDeviceGetNvLinkErrorCounter": {
            f"{link},{counter}": 0 for link in range(18) for counter in range(4)
        },
        "nvmlDeviceGetTopologyCommonAncestor": {
            str(p): 40 if same_socket(p) else 50 for p in peers
        },
        "nvmlDeviceGetP2PStatus": {f"{p},{cap}": 0 for p in peers for cap in range(4)},
    }


def replay(description: str, devices: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "format": "gpudiag-nvml-replay",
        "version": 1,
        "description": description,
        "system": {
            "nvmlSystemGetDriverVersion": "590.48.01",
            "nvmlSystemGetNVMLVersion": "13.590.48.01",
            "nvmlSystemGetCudaDriverVersion_v2": 13010,
        },
        "devices": devices,
    }


def faulty(devices: list[dict[str, Any]]) -> list[dict[str, Any]]:
    devices = copy.deepcopy(devices)
    devices[3]["nvmlDeviceGetCurrPcieLinkWidth"] = 8
    devices[2]["nvmlDeviceGetNvLinkState"]["5"] = 0
    devices[5]["nvmlDeviceGetPersistenceMode"] = 0
    devices[1]["nvmlDeviceGetRemappedRows"] = [0, 1, 1, 0]
    devices[6]["nvmlDeviceGetCurrentClocksEventReasons"] = 0x8 | 0x40
    devices[6]["nvmlDeviceGetClockInfo"]["1"] = 1155
    devices[4]["nvmlDeviceGetFieldValues"]["164,3"] = NVLINK_MBPS // 2
    devices[7] = {"all_calls": {"error": "GpuIsLost"}}
    return devices


CPUS_PER_SOCKET = 56


def socket_cpus(socket: int) -> str:
    """The CPU list of a socket: its cores, then their SMT siblings."""
    first = socket * CPUS_PER_SOCKET
    last = first + CPUS_PER_SOCKET - 1
    return f"{first}-{last},{first + 2 * CPUS_PER_SOCKET}-{last + 2 * CPUS_PER_SOCKET}"


def host_files(faulty_node: bool) -> dict[str, str]:
    """The made-up host's files, by path below the root."""
    files = {
        "proc/sys/kernel/hostname": "hgx-h100-demo\n",
        "proc/sys/kernel/osrelease": "6.8.0-60-generic\n",
        "proc/sys/kernel/numa_balancing": "0\n",
        "proc/sys/kernel/tainted": "4097\n",
        "proc/sys/vm/zone_reclaim_mode": "0\n",
        "proc/sys/vm/swappiness": "60\n",
        "proc/uptime": "86400.00 19000000.00\n",
        "proc/cmdline": "BOOT_IMAGE=/vmlinuz-6.8.0-60-generic root=/dev/nvme0n1p2 ro"
        " iommu=pt intel_iommu=on\n",
        "proc/modules": (
            "nvidia_peermem 16384 0 - Live 0x0000000000000000 (POE)\n"
            "nvidia_uvm 1794048 0 - Live 0x0000000000000000 (POE)\n"
            "nvidia 14315520 2 nvidia_peermem,nvidia_uvm, Live 0x0000000000000000 (POE)\n"
            "mlx5_ib 487424 0 - Live 0x0000000000000000\n"
            "mlx5_core 2424832 1 mlx5_ib, Live 0x0000000000000000\n"
        ),
        "proc/self/limits": (
            "Limit                     Soft Limit           Hard Limit           Units\n"
            "Max locked memory         unlimited            unlimited            bytes\n"
        ),
        "proc/self/cgroup": "0::/user.slice\n",
        "proc/meminfo": (
            "MemTotal:       2113422604 kB\nMemFree:        2080000000 kB\n"
            "MemAvailable:   2090000000 kB\nSwapTotal:              0 kB\n"
            "SwapFree:               0 kB\nHugepagesize:       2048 kB\n"
        ),
        "proc/cpuinfo": "".join(
            f"processor\t: {cpu}\nvendor_id\t: GenuineIntel\nmodel name\t: Intel(R) Xeon(R)"
            f" Platinum 8480+\nmicrocode\t: 0x2b000603\nflags\t\t: fpu sse avx2 avx512f"
            f" amx_tile amx_bf16\n\n"
            for cpu in range(4 * CPUS_PER_SOCKET)
        ),
        "dev/kmsg": "6,100,1000000,-;Linux version 6.8.0-60-generic\n"
        + (
            "4,900,5000000000,-;NVRM: Xid (PCI:0000:db:00): 79, pid=0, GPU has fallen off"
            " the bus.\n"
            if faulty_node
            else ""
        ),
        "etc/os-release": 'ID=ubuntu\nVERSION_ID="24.04"\nPRETTY_NAME="Ubuntu 24.04.2 LTS"\n',
        "sys/class/dmi/id/sys_vendor": "Supermicro\n",
        "sys/class/dmi/id/product_name": "SYS-821GE-TNHR\n",
        "sys/class/dmi/id/bios_vendor": "American Megatrends International, LLC.\n",
        "sys/class/dmi/id/bios_version": "2.1\n",
        "sys/class/dmi/id/bios_date": "03/15/2024\n",
        "sys/kernel/mm/transparent_hugepage/enabled": "always [madvise] never\n",
        "sys/kernel/mm/transparent_hugepage/defrag": "always defer defer+madvise [madvise] never\n",
        "sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages": "0\n",
        "sys/kernel/mm/hugepages/hugepages-1048576kB/nr_hugepages": "0\n",
        "sys/devices/system/clocksource/clocksource0/current_clocksource": "tsc\n",
        "sys/devices/system/clocksource/clocksource0/available_clocksource": "tsc hpet acpi_pm\n",
        "sys/module/nvidia/version": "590.48.01\n",
        "sys/devices/system/cpu/online": f"0-{4 * CPUS_PER_SOCKET - 1}\n",
        "sys/devices/system/cpu/offline": "\n",
        "sys/devices/system/cpu/isolated": "\n",
        "sys/devices/system/cpu/smt/active": "1\n",
        "sys/devices/system/cpu/smt/control": "on\n",
        "sys/devices/system/cpu/cpufreq/boost": "1\n",
        "sys/devices/system/cpu/cpuidle/current_driver": "intel_idle\n",
        "proc/interrupts": (
            "           CPU0       CPU1\n"
            "MCE:          0          0   Machine check exceptions\n"
            "MCP:         24         24   Machine check polls\n"
        ),
        "etc/tuned/active_profile": "throughput-performance\n",
        "sys/firmware/acpi/platform_profile": "performance\n",
        "dev/nvidiactl": "",
        **{f"dev/nvidia{gpu}": "" for gpu in range(8)},
    }
    for controller in (0, 1):
        files[f"sys/devices/system/edac/mc/mc{controller}/ce_count"] = "0\n"
        files[f"sys/devices/system/edac/mc/mc{controller}/ue_count"] = "0\n"
    for cpu in range(4 * CPUS_PER_SOCKET):
        base = f"sys/devices/system/cpu/cpu{cpu}"
        files[f"{base}/topology/physical_package_id"] = f"{cpu // CPUS_PER_SOCKET % 2}\n"
        files[f"{base}/topology/core_id"] = f"{cpu % CPUS_PER_SOCKET}\n"
        files[f"{base}/cpufreq/scaling_driver"] = "intel_pstate\n"
        files[f"{base}/cpufreq/scaling_governor"] = "performance\n"
        files[f"{base}/cpufreq/energy_performance_preference"] = "performance\n"
        files[f"{base}/cpufreq/scaling_min_freq"] = "800000\n"
        files[f"{base}/cpufreq/scaling_max_freq"] = "3800000\n"
        files[f"{base}/cpufreq/cpuinfo_max_freq"] = "3800000\n"
        files[f"{base}/cpufreq/scaling_cur_freq"] = "2000000\n"
        for state, (name, latency) in enumerate((("POLL", 0), ("C1", 2))):
            files[f"{base}/cpuidle/state{state}/name"] = f"{name}\n"
            files[f"{base}/cpuidle/state{state}/latency"] = f"{latency}\n"
            files[f"{base}/cpuidle/state{state}/disable"] = "0\n"
    for node in (0, 1):
        base = f"sys/devices/system/node/node{node}"
        files[f"{base}/cpulist"] = f"{socket_cpus(node)}\n"
        files[f"{base}/meminfo"] = (
            f"Node {node} MemTotal: 1056711302 kB\nNode {node} MemFree: 1040000000 kB\n"
        )
        files[f"{base}/distance"] = "10 21\n" if node == 0 else "21 10\n"
    return files


def pci_devices(faulty_node: bool) -> dict[str, tuple[str, dict[str, str]]]:
    """address -> (its parent path below /sys/devices, its sysfs attributes): each GPU and
    its InfiniBand adapter behind one PCIe switch port."""
    devices = {}
    for gpu, bus_id in enumerate(BUS_IDS):
        bus = int(bus_id.split(":")[1], 16)
        root_port = f"0000:{bus - 3:02x}:01.0"
        switch_port = f"0000:{bus - 2:02x}:00.0"
        parent = f"pci0000:{bus - 3:02x}/{root_port}/{switch_port}"
        socket = 0 if gpu < 4 else 1
        common = {
            "current_link_speed": "32.0 GT/s PCIe",
            "max_link_speed": "32.0 GT/s PCIe",
            "max_link_width": "16",
            "numa_node": str(socket),
            "local_cpulist": socket_cpus(socket),
        }
        width = "8" if faulty_node and gpu == 3 else "16"
        devices[f"0000:{bus:02x}:00.0"] = (
            parent,
            {
                **common,
                "vendor": "0x10de",
                "device": "0x2330",
                "class": "0x030200",
                "current_link_width": width,
                "driver": "nvidia",
                "iommu_group": str(10 + 2 * gpu),
            },
        )
        devices[f"0000:{bus + 1:02x}:00.0"] = (
            parent,
            {
                **common,
                "vendor": "0x15b3",
                "device": "0x1021",
                "class": "0x020700",
                "current_link_width": "16",
                "driver": "mlx5_core",
                "iommu_group": str(11 + 2 * gpu),
            },
        )
    return devices


def acs_config_space(control: int) -> bytes:
    """4096 bytes of PCIe config space whose only extended capability is ACS (0x000D) at
    0x100, every ACS capability offered, with the given control register."""
    config = bytearray(4096)
    config[0x100:0x104] = (0x000D | 1 << 16).to_bytes(4, "little")
    config[0x104:0x106] = (0x7F).to_bytes(2, "little")
    config[0x106:0x108] = control.to_bytes(2, "little")
    return bytes(config)


def build_host(root: Path, faulty_node: bool) -> Path:
    """Write the made-up host's tree below ROOT."""
    for relative, content in host_files(faulty_node).items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content)
    (root / "sys/bus/pci/devices").mkdir(parents=True, exist_ok=True)
    (root / "sys/class/iommu/dmar0").mkdir(parents=True, exist_ok=True)
    for address, (parent, attributes) in pci_devices(faulty_node).items():
        device_dir = root / "sys/devices" / parent / address
        device_dir.mkdir(parents=True, exist_ok=True)
        up = "../" * (parent.count("/") + 3)
        for name, value in attributes.items():
            if name == "driver":
                (root / f"sys/bus/pci/drivers/{value}").mkdir(parents=True, exist_ok=True)
                os.symlink(f"{up}bus/pci/drivers/{value}", device_dir / "driver")
            elif name == "iommu_group":
                (root / f"sys/kernel/iommu_groups/{value}").mkdir(parents=True, exist_ok=True)
                os.symlink(f"{up}kernel/iommu_groups/{value}", device_dir / "iommu_group")
            else:
                (device_dir / name).write_text(value + "\n")
        os.symlink(f"../../../devices/{parent}/{address}", root / "sys/bus/pci/devices" / address)
        # the bridges above: ACS redirection off, as GPUDirect peer traffic wants it
        bridge = ""
        for port in parent.split("/")[1:]:
            bridge = f"{bridge}/{port}"
            port_dir = root / "sys/devices" / parent.split("/")[0] / bridge.lstrip("/")
            (port_dir / "config").write_bytes(acs_config_space(0))
            (port_dir / "class").write_text("0x060400\n")
            link = root / "sys/bus/pci/devices" / port
            if not link.is_symlink():
                target = "../../../devices/" + parent.split("/")[0] + bridge
                os.symlink(target, link)
    return root


def write_capture(path: Path, data: dict[str, Any], faulty_node: bool) -> None:
    """Record today's probes on the made-up host and the NVML replay into a capture."""
    from gpudiag.capture import record
    from gpudiag.hostfs import HostFS
    from gpudiag.nvml import Nvml, ReplayBackend
    from gpudiag.probes import default_probes
    from gpudiag.session import LiveNode

    def probe(host: HostFS, nvml: Nvml) -> Any:
        return LiveNode(host=host, nvml=nvml, probes=default_probes(), rules=()).snapshot()

    with tempfile.TemporaryDirectory() as directory:
        root = build_host(Path(directory), faulty_node)
        host = HostFS(root, is_root_user=True)
        capture, _ = record(host, Nvml(ReplayBackend(data, path.name)), probe)
    capture["created"] = "2026-01-01T00:00:00Z"  # made up: the generator's output is stable
    del capture["gpudiag_version"]
    capture["description"] = data["description"] + "; host made up (see make_demo_replays.py)"
    path.write_text(json.dumps(capture, indent=1, sort_keys=True) + "\n")


def write(path: Path, data: dict[str, Any]) -> None:
    header = "".join(f"# {line}\n".replace("# \n", "#\n") for line in (__doc__ or "").splitlines())
    path.write_text(header + "\n" + tomli_w.dumps(data))


def main() -> None:
    devices = [healthy_gpu(i) for i in range(8)]
    write(
        HERE / "demo-hgx-h100-healthy.toml",
        replay("HGX H100 8-GPU, healthy (demo, from published facts)", devices),
    )
    faulty_replay = replay("HGX H100 8-GPU with planted faults (demo)", faulty(devices))
    write(HERE / "demo-hgx-h100-faulty.toml", faulty_replay)
    healthy_replay = replay("HGX H100 8-GPU, healthy (demo, from published facts)", devices)
    write_capture(HERE / "demo-hgx-h100-healthy.capture.json", healthy_replay, False)
    write_capture(HERE / "demo-hgx-h100-faulty.capture.json", faulty_replay, True)


if __name__ == "__main__":
    main()
