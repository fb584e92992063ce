"""Scripted GPM counter traces for the C NVML stand-in (tests/nvml_standin/): what each kind
of work would show, window by window, written as the stand-in's flat recording. They are
made up to be what the verdicts must tell apart, not recorded from a GPU.

Node "verdicts" (8 H100 SXM5, 4 windows; window 0 is the first GPM sample, which has no
window before it):
  GPU 0 STREAM-like, 1 BF16 GEMM-like, 2 all-reduce-like, 3 GEMM under a power cap,
  4 idle (window 3: counters held by another profiler), 5 launch-bound (a MIG GPU,
  sampled by nvmlGpmMigSampleGet on GPU instance 1), 6 without GPM (older counters,
  PCIe-heavy), 7 vector FP64 (lost in window 2 only).
Node "straggler" (8 GPUs in an all-reduce; GPU 5 in HW slowdown computes while the others
wait on it).
"""

from __future__ import annotations

from typing import Any

from standin import ERROR_CODES

WINDOWS = 4
H100_PCI = ["00000000:{bus:02X}:00.0", 0, 0, 0, 0x233010DE, 0x16C110DE, "00000000:{bus:02X}:00.0"]
# GPM metric ids (nvml.h nvmlGpmMetricId_t), values in NVML's units (percent, MiB/s)
GR, SM, OCC, TENSOR, HMMA, DMMA, DRAM, FP64, FP32, PCIE_TX, PCIE_RX, NVL_RX, NVL_TX = (
    1, 2, 3, 5, 7, 8, 10, 11, 12, 20, 21, 60, 61,
)  # fmt: skip
QUIET = {PCIE_TX: 50, PCIE_RX: 50, NVL_RX: 0, NVL_TX: 0, FP32: 1}
STREAM = QUIET | {GR: 99, SM: 95, OCC: 60, TENSOR: 0, DRAM: 88, FP64: 20}
GEMM = QUIET | {GR: 100, SM: 98, OCC: 30, TENSOR: 85, HMMA: 85, DRAM: 25}
ALLREDUCE = QUIET | {GR: 100, SM: 40, TENSOR: 0, DRAM: 30, NVL_TX: 300_000, NVL_RX: 300_000}
IDLE = {GR: 0, SM: 0, TENSOR: 0, DRAM: 0, PCIE_TX: 0, PCIE_RX: 0, NVL_RX: 0, NVL_TX: 0}
LAUNCH = QUIET | {GR: 95, SM: 8, OCC: 3, TENSOR: 0, DRAM: 5}
FP64_VECTOR = QUIET | {GR: 100, SM: 97, TENSOR: 0, DMMA: 0, FP64: 75, DRAM: 35}


def gpu(
    index: int,
    windows: list[dict[int, float] | str],
    clock: int = 1980,
    mask: int = 0,
    power: int = 450_000,
    temp: int = 60,
    mig_instance: int | None = None,
    gpm: bool = True,
) -> dict[str, Any]:
    """One GPU: its identity, its clocks and power, and a GPM sample per window (a string:
    that sample fails with the NVML error of that name)."""
    return {
        "index": index,
        "windows": windows,
        "clock": clock,
        "mask": mask,
        "power": power,
        "temp": temp,
        "mig_instance": mig_instance,
        "gpm": gpm,
    }


def _lines(g: dict[str, Any]) -> list[str]:
    i = str(g["index"])
    pci = [str(v).format(bus=0x18 + 0x10 * g["index"]) for v in H100_PCI]
    lines = [
        ["nvmlDeviceGetName", "-", "0", "NVIDIA H100 80GB HBM3"],
        ["nvmlDeviceGetPciInfo", "-", "0", *pci],
        ["nvmlGpmQueryDeviceSupport", "-", "0", "1" if g["gpm"] else "0"],
        ["nvmlDeviceGetClockInfo", "1", "0", str(g["clock"])],
        ["nvmlDeviceGetMaxClockInfo", "1", "0", "1980"],
        ["nvmlDeviceGetPowerUsage", "-", "0", str(g["power"])],
        ["nvmlDeviceGetEnforcedPowerLimit", "-", "0", "700000"],
        ["nvmlDeviceGetTemperature", "0", "0", str(g["temp"])],
        ["nvmlDeviceGetCurrentClocksEventReasons", "-", "0", str(g["mask"])],
    ]
    function, key = "nvmlGpmSampleGet", "-"
    if g["mig_instance"] is not None:  # MIG mode on; one MIG device in that GPU instance
        function, key = "nvmlGpmMigSampleGet", str(g["mig_instance"])
        lines.append(["nvmlDeviceGetMigMode", "-", "0", "1", "1"])
        mig = ["0", f"MIG-{i}", key, "0", str(10 * 2**30)]
        lines.append(["gpudiagMigDevices", "-", "0", *mig])
    else:
        lines.append(["nvmlDeviceGetMigMode", "-", "0", "0", "0"])
    for window in g["windows"]:
        if isinstance(window, str):
            lines.append([function, key, str(ERROR_CODES[window])])
        elif g["gpm"]:
            lines.append([function, key, "0", *(f"{m}:{v}" for m, v in window.items())])
        else:  # the older counters: utilisation, PCIe throughput (KB/s), no NVLink
            lines.append(["nvmlDeviceGetUtilizationRates", "-", "0", str(window[GR]), "20"])
            lines.append(["nvmlDeviceGetPcieThroughput", "0", "0", str(window[PCIE_TX] * 1000)])
            lines.append(["nvmlDeviceGetPcieThroughput", "1", "0", "1000"])
    if not g["gpm"]:
        for field in (138, 139):
            lines.append(["nvmlDeviceGetFieldValues", f"{field},4294967295", "3"])
    return ["\t".join(["D", i, *line]) for line in lines]


def flat(gpus: list[dict[str, Any]]) -> str:
    """The stand-in's flat recording of a node of these GPUs."""
    lines = [
        "# gpudiag telemetry trace",
        f"N\t{len(gpus)}",
        f"S\tnvmlDeviceGetCount\t-\t0\t{len(gpus)}",
    ]
    lines += ["S\tnvmlSystemGetDriverVersion\t-\t0\t550.54.15"]
    for g in gpus:
        lines += _lines(g)
    return "\n".join(lines) + "\n"


def verdicts_node() -> list[dict[str, Any]]:
    """Node "verdicts" (see the module docstring)."""
    pcie_heavy = {GR: 90, PCIE_TX: 40_000}  # the stand-in answers 40,000,000 KB/s
    return [
        gpu(0, [STREAM] * WINDOWS),
        gpu(1, [GEMM] * WINDOWS, power=690_000),
        gpu(2, [ALLREDUCE] * WINDOWS),
        gpu(3, [GEMM] * WINDOWS, clock=1500, mask=0x4, power=700_000),
        gpu(4, [IDLE, IDLE, IDLE, "InUse"], clock=345, mask=0x1, power=70_000),
        gpu(5, [LAUNCH] * WINDOWS, mig_instance=1),
        gpu(6, [pcie_heavy] * WINDOWS, gpm=False),
        gpu(7, [FP64_VECTOR, FP64_VECTOR, "GpuIsLost", FP64_VECTOR]),
    ]


def straggler_node() -> list[dict[str, Any]]:
    """Node "straggler": GPU 5 in HW slowdown, the others waiting on it."""
    slow = ALLREDUCE | {SM: 95, NVL_TX: 100_000, NVL_RX: 100_000}
    return [
        gpu(i, [slow] * WINDOWS, clock=1410, mask=0x8) if i == 5 else gpu(i, [ALLREDUCE] * WINDOWS)
        for i in range(8)
    ]


# Runs the sampler through the real pynvml against the stand-in, for each recording given,
# and prints each window's verdicts and stragglers as JSON.
SAMPLER_SCRIPT = """
import json, os, sys
from gpudiag.nvml import Nvml, PynvmlBackend
from gpudiag.profiles import load_profiles
from gpudiag.telemetry.sampler import Sampler
from gpudiag.telemetry.verdicts import ceilings_for, classify, stragglers
peaks = load_profiles()["h100-sxm5"].values
out = {}
for name, path, windows, mig in json.loads(sys.argv[1]):
    os.environ["GPUDIAG_STANDIN_DATA"] = path
    nvml = Nvml(PynvmlBackend())
    count = int(nvml.call("nvmlDeviceGetCount"))
    sampler = Sampler(nvml, count, {int(k): v for k, v in mig.items()})
    ceilings = [ceilings_for(g, peaks, "h100-sxm5") for g in range(count)]
    rows = []
    for t in range(windows):
        got = sampler.sample(now=1000.0 + t)
        verdicts = [classify(w, ceilings[w.gpu]) for w in got]
        rows.append({
            "verdicts": [[v.kind, v.detail, v.text] for v in verdicts],
            "sources": [w.source for w in got],
            "stragglers": [s.text for s in stragglers(got, verdicts)],
        })
    nvml.close()
    out[name] = rows
print(json.dumps(out))
"""


# Runs after SAMPLER_SCRIPT in the same process (one start for both): the monitor on the
# recording sys.argv[2] for sys.argv[3] windows, its Prometheus endpoint served on a free
# port and scraped over HTTP; prints the scrape and the event lines as a second JSON line.
MONITOR_SCRIPT = """
import json, os, sys, urllib.request
from gpudiag.nvml import Nvml, PynvmlBackend
from gpudiag.profiles import load_profiles
from gpudiag.telemetry.monitor import Monitor, serve
from gpudiag.telemetry.verdicts import ceilings_for
os.environ["GPUDIAG_STANDIN_DATA"] = sys.argv[2]
peaks = load_profiles()["h100-sxm5"].values
nvml = Nvml(PynvmlBackend())
count = int(nvml.call("nvmlDeviceGetCount"))
events = []
monitor = Monitor(nvml, count, [ceilings_for(g, peaks, "h100-sxm5") for g in range(count)],
                  events.append, ring=2)
for t in range(int(sys.argv[3])):
    monitor.step(now=1000.0 + t)
server = serve(monitor, "127.0.0.1", 0)
url = f"http://127.0.0.1:{server.server_port}/metrics"
scrape = urllib.request.urlopen(url, timeout=10).read().decode()
server.shutdown()
nvml.close()
print(json.dumps({"scrape": scrape, "events": events, "ring": len(monitor.ring)}))
"""
