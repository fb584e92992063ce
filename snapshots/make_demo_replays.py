"""Write the demo NVML replays of an 8-GPU HGX H100 node, healthy and with planted faults.

    python snapshots/make_demo_replays.py        # rewrites snapshots/demo-hgx-h100-*.toml

Where the values come from:
- Published H100 SXM5 facts: PCI device id 0x2330, PCIe Gen5 x16, 700 W default power
  limit, 18 NVLink 4 links per GPU at 26.562 GB/s each, all to the node's 4 NVSwitches.
- The real H100 capture in ../shared/realdata/nvidia-smi-q (driver 590.48.01): name,
  VBIOS, InfoROM image, board part number, 81559 MiB of memory, 131072 MiB of BAR1, clocks
  (345 MHz SM idle, 1980 MHz SM maximum, 2619 MHz memory), 200-700 W power limit range,
  41 C at idle and 46 C below T.Limit, 'Idle' as the only clock event reason, fabric
  state Completed with status Success and no health flags, retired pages N/A
  (NotSupported: H100 remaps rows instead), application clocks answered 'deprecated',
  and each NVLink at 26.562 GB/s (`nvidia-smi nvlink -s`). That driver reports
  temperature limits only relative to the limit (T.Limit), so the absolute thresholds are
  recorded as NotSupported.
- Made up, and marked so: UUIDs, serial numbers, bus addresses (DGX-like), the CPU
  affinity (2 x 56 cores with SMT), and power draw at idle.

Planted faults in the faulty replay: GPU 3 at PCIe x8 of x16, NVLink 5 of GPU 2 inactive,
persistence mode off on GPU 5, a pending row remap on GPU 1, a hardware slowdown on
GPU 6, NVLink 3 of GPU 4 at half speed, and GPU 7 lost.
"""

from __future__ import annotations

import copy
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
        "nvmlDeviceGetMemoryInfo": {"total": 81559 * MIB, "free": 81081 * MIB, "used": 0},
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
        "nvmlDeviceGetCpuAffinity": {"16": cpu_affinity(index)},
        "nvmlDeviceGetNumaNodeId": 0 if index < 4 else 1,
        "nvmlDeviceGetNvLinkState": {str(link): 1 for link in range(18)},
        "nvmlDeviceGetNvLinkVersion": {str(link): 4 for link in range(18)},
        "nvmlDeviceGetNvLinkRemotePciInfo": {
            str(link): pci_info(link_switch(link), 0x22A310DE) for link in range(18)
        },
        "nvmlDeviceGetNvLinkRemoteDeviceType": {str(link): 2 for link in range(18)},
        "nvmlDeviceGetFieldValues": {f"164,{link}": NVLINK_MBPS for link in range(18)},
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


def write(path: Path, data: dict[str, Any]) -> None:
    header = "".join(f"# {line}\n".replace("# \n", "#\n") for line in (__doc__ or "").splitlines())
    path.write_text(header + "\n" + tomli_w.dumps(data))


def main() -> None:
    devices = [healthy_gpu(i) for i in range(8)]
    write(
        HERE / "demo-hgx-h100-healthy.toml",
        replay("HGX H100 8-GPU, healthy (demo, from published facts)", devices),
    )
    write(
        HERE / "demo-hgx-h100-faulty.toml",
        replay("HGX H100 8-GPU with planted faults (demo)", faulty(devices)),
    )


if __name__ == "__main__":
    main()
