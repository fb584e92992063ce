"""A small host tree of our own, written into a temporary folder: a 2-socket GPU node
with one GPU on a degraded link behind a PCIe switch, an InfiniBand adapter, mixed CPU
governors, a CPU-less memory node, ACS redirection on the switch port, Xid events in the
kernel log, a healthy NVMe SSD, and the other files the host probes read. Every value is
made up here."""

from __future__ import annotations

import os
from pathlib import Path

from gpudiag.hostfs import HostFS

GPU = "0000:18:00.0"
HCA = "0000:19:00.0"
ROOT_PORT = "0000:15:01.0"
SWITCH_PORT = "0000:16:00.0"
PCI_PARENT = f"devices/pci0000:15/{ROOT_PORT}/{SWITCH_PORT}"
NVME = "0000:5a:00.0"  # a healthy PCIe 5.0 x4 SSD on a root port of its own
NVME_PORT = "0000:59:01.0"
NVME_DIR = f"devices/pci0000:59/{NVME_PORT}/{NVME}"


def acs_config_space(control: int) -> bytes:
    """4096 bytes of config space whose only extended capability is ACS (id 0x000D) at
    0x100, with the given ACS control register."""
    config = bytearray(4096)
    header = 0x000D | (1 << 16)  # id, version 1, next capability 0
    config[0x100:0x104] = header.to_bytes(4, "little")
    config[0x104:0x106] = (0x7F).to_bytes(2, "little")  # every ACS capability offered
    config[0x106:0x108] = control.to_bytes(2, "little")
    return bytes(config)


FILES: dict[str, str | bytes] = {
    "proc/sys/kernel/hostname": "hgx-test-01\n",
    "proc/sys/kernel/osrelease": "6.8.0-45-generic\n",
    "proc/sys/kernel/numa_balancing": "1\n",
    "proc/sys/kernel/tainted": "4097\n",  # P (proprietary) and O (out-of-tree)
    "proc/sys/vm/zone_reclaim_mode": "0\n",
    "proc/sys/vm/swappiness": "10\n",
    "proc/uptime": "3600.50 7000.00\n",
    "proc/cmdline": "BOOT_IMAGE=/vmlinuz root=/dev/sda1 ro iommu=pt intel_iommu=on quiet\n",
    "proc/modules": (
        "nvidia_uvm 1531904 0 - Live 0x0000000000000000 (POE)\n"
        "nvidia_drm 77824 0 - Live 0x0000000000000000 (POE)\n"
        "nvidia 8531968 2 nvidia_uvm, Live 0x0000000000000000 (POE)\n"
        "mlx5_core 2113536 0 - Live 0x0000000000000000\n"
    ),
    "proc/self/limits": (
        "Limit                     Soft Limit           Hard Limit           Units\n"
        "Max locked memory         8388608              8388608              bytes\n"
    ),
    "proc/self/cgroup": "0::/slurm/job42\n",
    "proc/meminfo": (
        "MemTotal:       2113929216 kB\nMemFree:        2000000000 kB\n"
        "MemAvailable:   2050000000 kB\nSwapTotal:              0 kB\n"
        "SwapFree:               0 kB\n"
        "Hugepagesize:       2048 kB\n"
    ),
    "proc/interrupts": (
        "           CPU0       CPU1\n"
        "MCE:          1          2   Machine check exceptions\n"
        "MCP:         10         10   Machine check polls\n"
    ),
    "proc/cpuinfo": "".join(
        f"processor\t: {cpu}\nvendor_id\t: GenuineIntel\nmodel name\t: Intel(R) Xeon(R) "
        f"Platinum 8480+\nmicrocode\t: 0x2b0004b1\nflags\t\t: fpu sse avx2 avx512f amx_tile "
        f"amx_bf16\n\n"
        for cpu in range(8)
    ),
    "dev/kmsg": (
        "6,100,1000000,-;Linux version 6.8.0-45-generic\n"
        f"4,200,2000000,-;NVRM: Xid (PCI:{GPU[:-2]}): 79, pid=0, GPU has fallen off the bus.\n"
        f"4,201,3500000,-;NVRM: Xid (PCI:{GPU[:-2]}): 79, pid=0, GPU has fallen off the bus.\n"
        "4,202,4000000,-;NVRM: Xid (PCI:0000:2a:00): 48, pid=12, name=train, DBE error\n"
    ),
    "etc/os-release": 'ID=ubuntu\nVERSION_ID="24.04"\nPRETTY_NAME="Ubuntu 24.04.1 LTS"\n',
    "etc/tuned/active_profile": "throughput-performance\n",
    "sys/class/dmi/id/sys_vendor": "Supermicro\n",
    "sys/class/dmi/id/product_name": "SYS-821GE-TNHR\n",
    "sys/class/dmi/id/bios_vendor": "American Megatrends International, LLC.\n",
    "sys/class/dmi/id/bios_version": "2.1\n",
    "sys/class/dmi/id/bios_date": "03/15/2024\n",
    "sys/firmware/efi/efivars/SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c": (
        b"\x06\x00\x00\x00\x00"
    ),
    "sys/firmware/acpi/platform_profile": "performance\n",
    "sys/fs/cgroup/slurm/job42/cpu.max": "800000 100000\n",
    "sys/fs/cgroup/slurm/job42/memory.max": "549755813888\n",
    "sys/kernel/mm/transparent_hugepage/enabled": "[always] madvise never\n",
    "sys/kernel/mm/transparent_hugepage/defrag": "always defer defer+madvise [madvise] never\n",
    "sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages": "0\n",
    "sys/kernel/mm/hugepages/hugepages-1048576kB/nr_hugepages": "16\n",
    "sys/class/powercap/intel-rapl:0/name": "package-0\n",
    "sys/class/powercap/intel-rapl:0/enabled": "1\n",
    "sys/class/powercap/intel-rapl:0/constraint_0_name": "long_term\n",
    "sys/class/powercap/intel-rapl:0/constraint_0_power_limit_uw": "350000000\n",
    "sys/class/thermal/thermal_zone0/type": "x86_pkg_temp\n",
    "sys/class/thermal/thermal_zone0/temp": "45000\n",
    "sys/devices/system/clocksource/clocksource0/current_clocksource": "tsc\n",
    "sys/devices/system/clocksource/clocksource0/available_clocksource": "tsc hpet acpi_pm\n",
    "sys/devices/system/edac/mc/mc0/ce_count": "3\n",
    "sys/devices/system/edac/mc/mc0/ue_count": "0\n",
    "sys/devices/system/edac/mc/mc1/ce_count": "4\n",
    "sys/devices/system/edac/mc/mc1/ue_count": "1\n",
    "sys/module/nvidia/version": "550.90.07\n",
    "sys/devices/system/cpu/online": "0-7\n",
    "sys/devices/system/cpu/offline": "\n",
    "sys/devices/system/cpu/isolated": "6-7\n",
    "sys/devices/system/cpu/smt/active": "1\n",
    "sys/devices/system/cpu/smt/control": "on\n",
    "sys/devices/system/cpu/cpufreq/boost": "1\n",
    "sys/devices/system/cpu/cpuidle/current_driver": "intel_idle\n",
    "sys/devices/system/node/node2/cpulist": "\n",
    "sys/devices/system/node/node2/meminfo": (
        "Node 2 MemTotal: 100663296 kB\nNode 2 MemFree: 100000000 kB\n"
    ),
    "sys/devices/system/node/node2/distance": "40 40 10\n",
    f"sys/{PCI_PARENT}/config": acs_config_space(0b1101),  # SV, RR, CR
    f"sys/{PCI_PARENT}/class": "0x060400\n",
    f"sys/devices/pci0000:59/{NVME_PORT}/class": "0x060400\n",
    f"sys/devices/pci0000:59/{NVME_PORT}/max_link_speed": "32.0 GT/s PCIe\n",
    f"sys/devices/pci0000:59/{NVME_PORT}/max_link_width": "4\n",
    f"sys/{NVME_DIR}/class": "0x010802\n",
    f"sys/{NVME_DIR}/current_link_speed": "32.0 GT/s PCIe\n",
    f"sys/{NVME_DIR}/max_link_speed": "32.0 GT/s PCIe\n",
    f"sys/{NVME_DIR}/current_link_width": "4\n",
    f"sys/{NVME_DIR}/max_link_width": "4\n",
    f"sys/{NVME_DIR}/nvme/nvme0/model": "Made Up NVMe 7.68TB                     \n",
    f"sys/{NVME_DIR}/nvme/nvme0/serial": "MADEUPNVME0001      \n",
    f"sys/{NVME_DIR}/nvme/nvme0/firmware_rev": "MU10    \n",
    f"sys/{NVME_DIR}/nvme/nvme0/state": "live\n",
    f"sys/{NVME_DIR}/nvme/nvme0/transport": "pcie\n",
    f"sys/{NVME_DIR}/nvme/nvme0/address": f"{NVME}\n",
}

for _cpu in range(8):
    _base = f"sys/devices/system/cpu/cpu{_cpu}"
    FILES[f"{_base}/topology/physical_package_id"] = f"{_cpu // 4}\n"
    FILES[f"{_base}/topology/core_id"] = f"{_cpu % 4 // 2}\n"
    FILES[f"{_base}/cpufreq/scaling_driver"] = "intel_pstate\n"
    FILES[f"{_base}/cpufreq/scaling_governor"] = "performance\n" if _cpu < 6 else "powersave\n"
    FILES[f"{_base}/cpufreq/energy_performance_preference"] = "performance\n"
    FILES[f"{_base}/cpufreq/scaling_min_freq"] = "800000\n"
    FILES[f"{_base}/cpufreq/scaling_max_freq"] = "3800000\n"
    FILES[f"{_base}/cpufreq/cpuinfo_max_freq"] = "3800000\n"
    FILES[f"{_base}/cpufreq/scaling_cur_freq"] = f"{2000000 + _cpu * 100000}\n"
    for _state, (_name, _latency) in enumerate((("POLL", 0), ("C1", 2), ("C1E", 10), ("C6", 170))):
        FILES[f"{_base}/cpuidle/state{_state}/name"] = f"{_name}\n"
        FILES[f"{_base}/cpuidle/state{_state}/latency"] = f"{_latency}\n"
        FILES[f"{_base}/cpuidle/state{_state}/disable"] = "1\n" if _name == "C6" else "0\n"
for _node, _cpus in ((0, "0-3"), (1, "4-7")):
    _base = f"sys/devices/system/node/node{_node}"
    FILES[f"{_base}/cpulist"] = f"{_cpus}\n"
    FILES[f"{_base}/meminfo"] = (
        f"Node {_node} MemTotal: 1056964608 kB\nNode {_node} MemFree: 1000000000 kB\n"
    )
    FILES[f"{_base}/distance"] = "10 21 40\n" if _node == 0 else "21 10 40\n"
    FILES[f"{_base}/hugepages/hugepages-1048576kB/nr_hugepages"] = "8\n"

PCI_DEVICES = {
    GPU: {
        "vendor": "0x10de",
        "device": "0x2330",
        "class": "0x030200",
        "current_link_speed": "32.0 GT/s PCIe",
        "max_link_speed": "32.0 GT/s PCIe",
        "current_link_width": "8",
        "max_link_width": "16",
        "numa_node": "0",
        "local_cpulist": "0-3",
        "driver": "nvidia",
        "iommu_group": "42",
        "aer_dev_correctable": "RxErr 0\nBadTLP 2\nTOTAL_ERR_COR 12\n",
        "aer_dev_fatal": "TOTAL_ERR_FATAL 0\n",
        "aer_dev_nonfatal": "TOTAL_ERR_NONFATAL 0\n",
    },
    HCA: {
        "vendor": "0x15b3",
        "device": "0x1021",
        "class": "0x020700",
        "current_link_speed": "32.0 GT/s PCIe",
        "max_link_speed": "32.0 GT/s PCIe",
        "current_link_width": "16",
        "max_link_width": "16",
        "numa_node": "0",
        "local_cpulist": "0-3",
        "driver": "mlx5_core",
        "iommu_group": "43",
    },
}


def build_hgx_tree(root: Path) -> Path:
    """Write the tree below `root` and return `root`."""
    for relative, content in FILES.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)
    (root / "sys/bus/pci/devices").mkdir(parents=True, exist_ok=True)
    for address, attributes in PCI_DEVICES.items():
        device_dir = root / "sys" / PCI_PARENT / address
        device_dir.mkdir(parents=True, exist_ok=True)
        for name, value in attributes.items():
            if name == "driver":
                (root / f"sys/bus/pci/drivers/{value}").mkdir(parents=True, exist_ok=True)
                os.symlink(f"../../../../../bus/pci/drivers/{value}", device_dir / "driver")
            elif name == "iommu_group":
                (root / f"sys/kernel/iommu_groups/{value}").mkdir(parents=True, exist_ok=True)
                os.symlink(
                    f"../../../../../kernel/iommu_groups/{value}", device_dir / "iommu_group"
                )
            else:
                (device_dir / name).write_text(value + "\n")
        os.symlink(f"../../../{PCI_PARENT}/{address}", root / "sys/bus/pci/devices" / address)
    os.symlink(
        f"../../../devices/pci0000:15/{ROOT_PORT}/{SWITCH_PORT}",
        root / "sys/bus/pci/devices" / SWITCH_PORT,
    )
    (root / "sys/class/iommu/dmar0").mkdir(parents=True, exist_ok=True)
    for address, target in ((NVME_PORT, f"devices/pci0000:59/{NVME_PORT}"), (NVME, NVME_DIR)):
        os.symlink(f"../../../{target}", root / "sys/bus/pci/devices" / address)
    (root / "sys/bus/pci/drivers/nvme").mkdir(parents=True, exist_ok=True)
    os.symlink("../../../../../bus/pci/drivers/nvme", root / f"sys/{NVME_DIR}/driver")
    os.symlink(f"../../../{NVME}", root / f"sys/{NVME_DIR}/nvme/nvme0/device")
    (root / "sys/class/nvme").mkdir(parents=True, exist_ok=True)
    os.symlink(f"../../{NVME_DIR}/nvme/nvme0", root / "sys/class/nvme/nvme0")
    return root


# ------------------------------------------------------------------ InfiniBand (not in the
# base tree, whose screens the SVG snapshots show: add_infiniband adds it where wanted)

IB_COUNTERS = (
    "link_downed",
    "symbol_error",
    "link_error_recovery",
    "port_rcv_errors",
    "port_xmit_discards",
    "local_link_integrity_errors",
    "excessive_buffer_overrun_errors",
)


def ib_port_files(
    rate: str = "400 Gb/sec (4X NDR)",
    state: str = "4: ACTIVE",
    phys_state: str = "5: LinkUp",
    link_layer: str = "InfiniBand",
    **counters: int,
) -> dict[str, str]:
    """The files of one port as sysfs writes them; every error counter 0 unless given."""
    files = {"rate": rate, "state": state, "phys_state": phys_state, "link_layer": link_layer}
    files |= {f"counters/{name}": str(counters.get(name, 0)) for name in IB_COUNTERS}
    return files


def write_hca(
    root: Path,
    name: str,
    ports: dict[int, dict[str, str]],
    node_guid: str = "946d:ae03:00fa:5c10",
    pci: str | None = None,
) -> None:
    """One HCA under sys/class/infiniband as a ConnectX-7 shows it (files given as text;
    a port's file mapped to None is left out)."""
    base = root / "sys/class/infiniband" / name
    files = {
        "fw_ver": "28.39.1002",
        "board_id": "MT_0000000838",
        "hca_type": "MT4129",
        "node_guid": node_guid,
        "sys_image_guid": node_guid,
    }
    for port, port_files in ports.items():
        files |= {f"ports/{port}/{k}": v for k, v in port_files.items() if v is not None}
    for relative, text in files.items():
        path = base / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text + "\n")
    if pci is not None:
        os.symlink(f"../../../{PCI_PARENT}/{pci}", base / "device")


def add_infiniband(root: Path) -> Path:
    """Eight ConnectX-7 HCAs at 400 Gb/s NDR, one port each, healthy (mlx5_0 is the
    tree's HCA PCI function); returns `root`."""
    for i in range(8):
        write_hca(
            root,
            f"mlx5_{i}",
            {1: ib_port_files()},
            node_guid=f"946d:ae03:00fa:5c{i:02x}",
            pci=HCA if i == 0 else None,
        )
    return root


def pci_tree(root: Path, device_ids: dict[str, str]) -> HostFS:
    """A host tree under `root` whose PCI bus lists these devices (bus id -> device id)."""
    for bus, device_id in device_ids.items():
        folder = root / "sys/bus/pci/devices" / bus
        folder.mkdir(parents=True)
        (folder / "device").write_text(device_id + "\n")
    return HostFS(root)
