"""The C stand-in libnvidia-ml.so.1 (tests/nvml_standin/libnvidia_ml.c): building it, and
turning an NVML replay (the recording the Python fake reads) into the flat file it reads.

The stand-in is not a GPU: it proves the calls gpudiag makes through the real pynvml
(signatures, pointers, structure layouts, missing symbols), never a GPU's behaviour.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gpudiag.nvml import NVML_ERROR_NAMES

SOURCE = Path(__file__).parent / "nvml_standin" / "libnvidia_ml.c"
GENERATIONS = {"current": [], "old": ["-DOLD_DRIVER"]}
ERROR_CODES = {name: number for number, name in NVML_ERROR_NAMES.items()}
# nvmlValueType_t of the field values gpudiag reads (NVML_VALUE_TYPE_UNSIGNED_INT = 1)
# 5: NVML_VALUE_TYPE_SIGNED_INT; 230: NVML_FI_DEV_GET_GPU_RECOVERY_ACTION, an unsigned int
FIELD_VALUE_TYPES = {164: 1, 193: 5, 194: 5, 195: 5, 196: 5, 230: 1}


def build(generation: str, directory: Path) -> Path:
    """Compile one generation into DIRECTORY/libnvidia-ml.so.1; returns the directory."""
    directory.mkdir(parents=True, exist_ok=True)
    target = directory / "libnvidia-ml.so.1"
    subprocess.run(
        [
            "gcc",
            "-shared",
            "-fPIC",
            "-O1",
            "-Wall",
            "-Wextra",
            "-Werror",
            *GENERATIONS[generation],
            "-o",
            str(target),
            str(SOURCE),
            "-lpthread",
        ],
        check=True,
        capture_output=True,
        text=True,
    )
    return directory


def _pci(p: dict[str, Any]) -> list[Any]:
    return [
        p["busIdLegacy"],
        p["domain"],
        p["bus"],
        p["device"],
        p["pciDeviceId"],
        p["pciSubSystemId"],
        p["busId"],
    ]


def _fabric(f: dict[str, Any]) -> list[Any]:
    summary = [f["healthSummary"]] if "healthSummary" in f else []  # v3's (see the C file)
    values = [*f["clusterUuid"], f["status"], f["cliqueId"], f["state"], f.get("healthMask", 0)]
    return values + summary


def _processes(ps: list[dict[str, Any]]) -> list[Any]:
    return [
        v
        for p in ps
        for v in (p["pid"], p["usedGpuMemory"], p["gpuInstanceId"], p["computeInstanceId"])
    ]


ENCODERS: dict[str, Callable[[Any], list[Any]]] = {
    "nvmlDeviceGetPciInfo": _pci,
    "nvmlDeviceGetNvLinkRemotePciInfo": _pci,
    "nvmlDeviceGetMemoryInfo": lambda m: [m["total"], m["free"], m["used"], m.get("reserved", 0)],
    "nvmlDeviceGetBAR1MemoryInfo": lambda m: [m["bar1Total"], m["bar1Free"], m["bar1Used"]],
    "nvmlDeviceGetUtilizationRates": lambda u: [u["gpu"], u["memory"]],
    "nvmlDeviceGetGpuFabricInfo": _fabric,
    "nvmlDeviceGetGpuFabricInfoV": _fabric,
    "nvmlDeviceGetMarginTemperature": lambda m: [m["marginTemperature"]],
    "gpudiagMigDevices": lambda ds: [
        v
        for d in ds
        for v in (
            d["index"],
            d["uuid"],
            d["gpu_instance"],
            d["compute_instance"],
            d["memory_total"],
        )
    ],
    "nvmlDeviceGetComputeRunningProcesses": _processes,
    "nvmlDeviceGetGraphicsRunningProcesses": _processes,
}


def _tokens(function: str, value: Any) -> list[str]:
    if function in ENCODERS:
        values = ENCODERS[function](value)
    elif isinstance(value, list):
        values = value
    else:
        values = [value]
    return [str(int(v)) if isinstance(v, bool) else str(v) for v in values]


def _line(prefix: list[str], function: str, argkey: str, value: Any) -> str:
    if isinstance(value, dict) and "error" in value:
        return "\t".join([*prefix, function, argkey, str(ERROR_CODES[value["error"]])])
    if function == "nvmlDeviceGetFieldValues":
        field = int(argkey.split(",")[0])
        return "\t".join(
            [*prefix, function, argkey, "0", str(FIELD_VALUE_TYPES.get(field, 3)), str(value)]
        )
    return "\t".join([*prefix, function, argkey, "0", *_tokens(function, value)])


def _records(prefix: list[str], table: dict[str, Any], keyed: frozenset[str]) -> list[str]:
    lines = []
    for function, value in table.items():
        if function in keyed and isinstance(value, dict) and "error" not in value:
            lines += [_line(prefix, function, key, item) for key, item in value.items()]
        else:
            lines.append(_line(prefix, function, "-", value))
    return lines


# calls recorded by their arguments ({"1": 1980}); the others hold one value or structure
KEYED = frozenset(
    {
        "nvmlDeviceGetClockInfo",
        "nvmlDeviceGetMaxClockInfo",
        "nvmlDeviceGetApplicationsClock",
        "nvmlDeviceGetDefaultApplicationsClock",
        "nvmlDeviceGetTemperature",
        "nvmlDeviceGetTemperatureThreshold",
        "nvmlDeviceGetTotalEccErrors",
        "nvmlDeviceGetMemoryErrorCounter",
        "nvmlDeviceGetRetiredPages",
        "nvmlDeviceGetCpuAffinity",
        "nvmlDeviceGetNvLinkState",
        "nvmlDeviceGetNvLinkVersion",
        "nvmlDeviceGetNvLinkRemotePciInfo",
        "nvmlDeviceGetNvLinkRemoteDeviceType",
        "nvmlDeviceGetNvLinkErrorCounter",
        "nvmlDeviceGetTopologyCommonAncestor",
        "nvmlDeviceGetP2PStatus",
        "nvmlDeviceGetFieldValues",
    }
)


# calls NVML renamed: an older driver has only the second name, for the same answer
RENAMED = {"nvmlDeviceGetCurrentClocksEventReasons": "nvmlDeviceGetCurrentClocksThrottleReasons"}


def flatten(replay: dict[str, Any]) -> str:
    """A replay's recording as the stand-in's flat file (see the C file's header)."""
    lines = ["# gpudiag NVML stand-in recording"]
    init = replay.get("init", {})
    if "error" in init:
        lines.append(f"I\t{ERROR_CODES[init['error']]}")
    devices = replay.get("devices", [])
    lines.append(f"N\t{len(devices)}")
    system = dict(replay.get("system", {}))
    system.setdefault("nvmlDeviceGetCount", len(devices))
    lines += _records(["S"], system, KEYED)
    for index, device in enumerate(devices):
        if "all_calls" in device:
            lines.append(f"L\t{index}\t{ERROR_CODES[device['all_calls']['error']]}")
            continue
        device = dict(device)
        for new, old in RENAMED.items():  # an older driver answers the older name
            if new in device:
                device.setdefault(old, device[new])
        lines += _records(["D", str(index)], device, KEYED)
    return "\n".join(lines) + "\n"


def environment(library_dir: Path, data: Path, log: Path, pythonpath: str = "") -> dict[str, str]:
    """The environment of a subprocess whose pynvml loads the stand-in."""
    env = {
        **os.environ,
        "LD_LIBRARY_PATH": str(library_dir),
        "GPUDIAG_STANDIN_DATA": str(data),
        "GPUDIAG_STANDIN_LOG": str(log),
        "NO_COLOR": "1",
    }
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    return env


# Runs the driver and GPU probes through the real pynvml (whichever sys.path finds first)
# and prints every reading as JSON: {key: [status, value, reason]}.
PROBE_SCRIPT = """
import json, sys
from gpudiag.hostfs import HostFS
from gpudiag.nvml import Nvml, PynvmlBackend
from gpudiag.probe import ProbeContext
from gpudiag.probes import driver, gpu
context = ProbeContext(host=HostFS(sys.argv[1]), nvml=Nvml(PynvmlBackend()))
out = {}
for probe in (driver, gpu):
    for r in probe.collect(context):
        out[r.key] = [r.status.value, r.value, r.reason]
context.nvml.close()
print(json.dumps(out))
"""


def run_python(
    code: str, env: dict[str, str], *args: str, timeout: float = 60
) -> subprocess.CompletedProcess:
    """Run python code in a subprocess with ENV."""
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
        check=False,
    )


# ---- fabric info v4 (nvmlGpuFabricInfo_v4_t; see the C file's fabric section) ----------
def _fabric_v4(f: dict[str, Any]) -> list[Any]:
    pairs = [v for c in f["cliques"] for v in (c["type"], c["id"])]
    head = [*f["clusterUuid"], f["status"], f["state"], f["healthMask"], f["healthSummary"]]
    return [*head, len(f["cliques"]), *pairs]


ENCODERS["nvmlDeviceGetGpuFabricInfo_v4"] = _fabric_v4
ENCODERS["nvmlDeviceGetC2cModeInfoV"] = lambda c: [c["isC2cEnabled"]]
