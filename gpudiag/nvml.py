"""The one interface gpudiag has to NVML, with two backends.

- `PynvmlBackend`: the real library through `pynvml` (from the `nvidia-ml-py` package).
- `ReplayBackend`: a recorded node, read from a replay file (`--nvml-replay FILE`),
  the way DCGM tests its diagnostics without GPUs.

Both answer one primitive, `call(function, device, *args)`, named after the NVML C
function (`nvmlDeviceGetCurrPcieLinkWidth`), and return plain Python data (str, int,
float, bool, lists and dicts). Every failure is an `NvmlError` with a code name taken
from NVML (`NotSupported`, `NoPermission`, `FunctionNotFound`, `GpuIsLost`, ...), which
`Nvml.reading` turns into that reading's status: one call failing never stops the rest.

Replay file format, version 1 (TOML, or JSON when the name ends in .json)::

    format = "gpudiag-nvml-replay"
    version = 1
    description = "what node this is and where its values come from"

    binding = "13.615.71"       # optional: the nvidia-ml-py version of a recorded node

    [init]                      # optional; `error` makes nvmlInit fail with that code
    error = "DriverNotLoaded"

    [system]                    # system-level calls, by NVML function name
    nvmlSystemGetDriverVersion = "550.54.15"
    nvmlSystemGetCudaDriverVersion_v2 = 12040

    [[devices]]                 # one table per GPU, in NVML index order
    nvmlDeviceGetName = "NVIDIA H100 80GB HBM3"
    nvmlDeviceGetMemoryInfo = { total = 85520809984, free = 0, used = 0 }   # a structure
    nvmlDeviceGetPowerUsage = { error = "NotSupported" }
    nvmlDeviceGetClockInfo = { "0" = 1980, "1" = 2619 }   # calls with arguments:
                                                          # keyed by the arguments, joined by ","

A device table holding only `all_calls = { error = "GpuIsLost" }` fails every call (a lost
GPU). Values are what pynvml returns, made plain: structures become tables of their
fields, arrays become lists. Calls that take a second GPU (topology, P2P status) take its
index as their first argument. A call the file does not record fails with code
`NotRecorded`, which shows as a missing reading: a replay never invents a value.
`nvmlDeviceGetCount` defaults to the number of `[[devices]]` tables.
"""

from __future__ import annotations

import contextlib
import ctypes
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from gpudiag.inputs import (
    InputError,
    number_too_large,
    parse_data,
    printable,
    read_text,
    too_large_text,
)
from gpudiag.model import Reading, ReadingStatus, Value, check_value

# NVML's return codes (nvml.h), by number, as the names used in replay files.
NVML_ERROR_NAMES: dict[int, str] = {
    1: "Uninitialized",
    2: "InvalidArgument",
    3: "NotSupported",
    4: "NoPermission",
    5: "AlreadyInitialized",
    6: "NotFound",
    7: "InsufficientSize",
    8: "InsufficientPower",
    9: "DriverNotLoaded",
    10: "Timeout",
    11: "IrqIssue",
    12: "LibraryNotFound",
    13: "FunctionNotFound",
    14: "CorruptedInforom",
    15: "GpuIsLost",
    16: "ResetRequired",
    17: "OperatingSystem",
    18: "LibRmVersionMismatch",
    19: "InUse",
    20: "Memory",
    21: "NoData",
    22: "VgpuEccNotSupported",
    23: "InsufficientResources",
    24: "FreqNotSupported",
    25: "ArgumentVersionMismatch",
    26: "Deprecated",
    27: "NotReady",
    28: "GpuNotFound",
    29: "InvalidState",
    999: "Unknown",
}
# Codes gpudiag itself raises.
EXTRA_ERROR_NAMES = ("NotRecorded", "PynvmlMissing")
KNOWN_ERROR_NAMES = frozenset(NVML_ERROR_NAMES.values()) | frozenset(EXTRA_ERROR_NAMES)

_STATUS_BY_CODE = {
    "NotSupported": ReadingStatus.UNSUPPORTED,
    "Deprecated": ReadingStatus.UNSUPPORTED,
    "FunctionNotFound": ReadingStatus.UNSUPPORTED,
    "NoPermission": ReadingStatus.NEEDS_ROOT,
    "LibraryNotFound": ReadingStatus.MISSING,
    "DriverNotLoaded": ReadingStatus.MISSING,
    "PynvmlMissing": ReadingStatus.MISSING,
    "NotRecorded": ReadingStatus.MISSING,
    "NoData": ReadingStatus.MISSING,
    "NotFound": ReadingStatus.MISSING,
}

_HINTS = {
    "LibraryNotFound": (
        "NVML library not found (libnvidia-ml.so.1): is the NVIDIA driver installed? "
        "Check `lsmod | grep nvidia` and that the driver's library directory is in the "
        "loader path (ldconfig -p | grep nvidia-ml)"
    ),
    "DriverNotLoaded": (
        "NVIDIA driver not loaded: libnvidia-ml is present but the kernel module is not "
        "(modprobe nvidia; check dmesg for the reason)"
    ),
    "PynvmlMissing": "the pynvml module is missing: pip install nvidia-ml-py",
    "NoPermission": "NVML denied the call: run as root",
    "FunctionNotFound": "this NVML function is not available",
    "Deprecated": "this driver no longer offers it",
    "GpuIsLost": "the GPU is lost: it fell off the bus or stopped answering; reset or reboot",
}


class NvmlError(Exception):
    """A failed NVML call. `code` is NVML's name for the return code."""

    def __init__(self, code: str, function: str, detail: str = "") -> None:
        self.code = code
        self.function = function
        self.detail = detail
        super().__init__(self.reason)

    @property
    def status(self) -> ReadingStatus:
        """The reading status this failure gives."""
        return _STATUS_BY_CODE.get(self.code, ReadingStatus.ERROR)

    @property
    def reason(self) -> str:
        """A one-line explanation for the user."""
        text = f"{self.function}: {self.code}"
        hint = _HINTS.get(self.code)
        if hint:
            text += f" ({hint})"
        if self.detail:
            text += f": {self.detail}"
        return text


class NvmlBackend(Protocol):
    """What both backends provide."""

    description: str

    def init(self) -> None:
        """Initialise; raises NvmlError."""

    def shutdown(self) -> None:
        """Release the library."""

    def call(self, function: str, device: int | None, *args: int) -> Any:
        """Call an NVML function by its C name; raises NvmlError."""


def plain(value: Any) -> Any:
    """Turn what pynvml returns (ctypes structures, arrays, bytes) into plain data."""
    if isinstance(value, bytes):  # control characters removed, as from any file
        return printable(value.decode("utf-8", errors="replace").rstrip("\x00"))
    if isinstance(value, str):
        return printable(value)
    if isinstance(value, ctypes.Structure):
        return {name: plain(getattr(value, name)) for name, *_ in value._fields_}
    if isinstance(value, (ctypes.Array, list, tuple)):
        return [plain(v) for v in value]
    if type(value).__name__ == "nvmlFriendlyObject":  # what pynvml's process lists hold
        return {name: plain(v) for name, v in vars(value).items()}
    return value


# nvml.h structures gpudiag passes itself (by pointer) where a binding's declaration is
# wrong or missing: the 12.x bindings declare nvmlGpuFabricInfo_t with an 80-byte UUID
# (nvml.h: 16), and the oldest admitted binding has no fabric V or margin temperature call.
class GpuFabricInfo(ctypes.Structure):
    """nvmlGpuFabricInfo_t (28 bytes)."""

    _fields_ = (
        ("clusterUuid", ctypes.c_ubyte * 16),
        ("status", ctypes.c_int),
        ("cliqueId", ctypes.c_uint),
        ("state", ctypes.c_ubyte),
    )


class GpuFabricInfoV2(ctypes.Structure):
    """nvmlGpuFabricInfo_v2_t (36 bytes), for nvmlDeviceGetGpuFabricInfoV."""

    _fields_ = (
        ("version", ctypes.c_uint),
        ("clusterUuid", ctypes.c_ubyte * 16),
        ("status", ctypes.c_int),
        ("cliqueId", ctypes.c_uint),
        ("state", ctypes.c_ubyte),
        ("healthMask", ctypes.c_uint),
    )


class GpuFabricInfoV3(ctypes.Structure):
    """nvmlGpuFabricInfo_v3_t (40 bytes, R570 on): v2 and the health summary."""

    _fields_ = (*GpuFabricInfoV2._fields_, ("healthSummary", ctypes.c_ubyte))


NVML_GPU_FABRIC_CLIQUE_MAX = 64  # nvml.h


class GpuFabricClique(ctypes.Structure):
    """nvmlGpuFabricClique_v1_t: one (type, id) clique assignment."""

    _fields_ = (("type", ctypes.c_ubyte), ("id", ctypes.c_uint))


class GpuFabricInfoV4(ctypes.Structure):
    """nvmlGpuFabricInfo_v4_t (548 bytes, for nvmlDeviceGetGpuFabricInfo_v4): v3's
    cliqueId replaced by the typed clique list; no version field (NVML API reference,
    docs.nvidia.com/deploy/nvml-api/api/structnvmlGpuFabricInfo__v4__t.html)."""

    _fields_ = (
        ("clusterUuid", ctypes.c_ubyte * 16),
        ("status", ctypes.c_int),
        ("cliques", GpuFabricClique * NVML_GPU_FABRIC_CLIQUE_MAX),
        ("numCliques", ctypes.c_uint),
        ("state", ctypes.c_ubyte),
        ("healthMask", ctypes.c_uint),
        ("healthSummary", ctypes.c_ubyte),
    )


class C2cModeInfoV1(ctypes.Structure):
    """nvmlC2cModeInfo_v1_t: whether the GPU reaches its CPU over NVLink-C2C (Grace);
    no version field, despite the V of nvmlDeviceGetC2cModeInfoV."""

    _fields_ = (("isC2cEnabled", ctypes.c_uint),)


class MarginTemperatureV1(ctypes.Structure):
    """nvmlMarginTemperature_v1_t: the distance to the slowdown limit (T.Limit)."""

    _fields_ = (("version", ctypes.c_uint), ("marginTemperature", ctypes.c_int))


def struct_version(struct: type[ctypes.Structure], version: int) -> int:
    """nvml.h's NVML_STRUCT_VERSION: the structure's size with the version in the top byte."""
    return ctypes.sizeof(struct) | version << 24


# gpudiag's own calls: C symbol, structure, version (0: none), pynvml-free
class MemoryV2(ctypes.Structure):
    """nvml.h's nvmlMemory_v2_t: used without the memory the driver reserves (R510 on)."""

    _fields_ = [
        ("version", ctypes.c_uint),
        ("total", ctypes.c_ulonglong),
        ("reserved", ctypes.c_ulonglong),
        ("free", ctypes.c_ulonglong),
        ("used", ctypes.c_ulonglong),
    ]


OWN_STRUCT_CALLS: dict[str, tuple[type[ctypes.Structure], int]] = {
    "nvmlDeviceGetMemoryInfo_v2": (MemoryV2, 2),
    "nvmlDeviceGetGpuFabricInfo": (GpuFabricInfo, 0),
    "nvmlDeviceGetGpuFabricInfoV": (GpuFabricInfoV3, 3),
    "nvmlDeviceGetGpuFabricInfo_v4": (GpuFabricInfoV4, 0),
    "nvmlDeviceGetC2cModeInfoV": (C2cModeInfoV1, 0),
    "nvmlDeviceGetMarginTemperature": (MarginTemperatureV1, 1),
}
# a driver that knows only an older version of the structure answers the newer one with
# NVML_ERROR_ARGUMENT_VERSION_MISMATCH (25): the call is made again with this one
OLDER_STRUCT_VERSIONS: dict[str, tuple[type[ctypes.Structure], int]] = {
    "nvmlDeviceGetGpuFabricInfoV": (GpuFabricInfoV2, 2),  # R535 to R565
}
FIELD_VALUES = "nvmlDeviceGetFieldValues"
# nvmlValueType_t -> the member of nvmlValue_t holding the value
VALUE_MEMBERS = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal"}


class ProcessInfoV2(ctypes.Structure):
    """nvml.h's nvmlProcessInfo_v2_t, filled by the _v2 process calls (R470 on)."""

    _fields_ = [
        ("pid", ctypes.c_uint),
        ("usedGpuMemory", ctypes.c_ulonglong),
        ("gpuInstanceId", ctypes.c_uint),
        ("computeInstanceId", ctypes.c_uint),
    ]


# Calls gpudiag makes through the binding's function lookup where the binding has no
# wrapper for them (nvidia-ml-py 12.535.161 has neither the _v2 process calls, the only
# ones of drivers R470 to R505, nor nvmlDeviceGetNumaNodeId): the driver still answers.
PROCESS_CALLS = frozenset(
    {
        "nvmlDeviceGetComputeRunningProcesses",
        "nvmlDeviceGetGraphicsRunningProcesses",
        "nvmlDeviceGetComputeRunningProcesses_v2",
        "nvmlDeviceGetGraphicsRunningProcesses_v2",
    }
)
SYMBOL_CALLS = frozenset(
    {
        "nvmlDeviceGetNumaNodeId",
        "nvmlDeviceGetComputeRunningProcesses_v2",
        "nvmlDeviceGetGraphicsRunningProcesses_v2",
    }
)
PROCESS_RETRIES = 3  # a list that grows between the size query and the read: ask again

# Calls whose first argument after the device is a second device (index -> handle).
PEER_FUNCTIONS = frozenset({"nvmlDeviceGetTopologyCommonAncestor", "nvmlDeviceGetP2PStatus"})
# gpudiag's own composite call: the MIG devices of a GPU, each a table of plain values.
MIG_DEVICES = "gpudiagMigDevices"
# gpudiag's own composite call: the GPM metrics of a GPU (or of one of its MIG GPU
# instances) over the window since the previous call, {metric id: value or error name}
# (nvmlGpmSampleGet or nvmlGpmMigSampleGet, then nvmlGpmMetricsGet on the two samples).
# Arguments: the GPU instance id (GPM_WHOLE_GPU: the whole GPU), then the metric ids.
GPM_METRICS = "gpudiagGpmMetrics"
GPM_WHOLE_GPU = 0xFFFFFFFF


class _NotInThisBinding(Exception):
    """Stands for NVMLLibraryMismatchError where the binding has none (never raised)."""


class PynvmlBackend:
    """The real NVML, through pynvml. It has never run on a GPU: the tests run it through
    the real pynvml against a C stand-in libnvidia-ml.so.1 (tests/nvml_standin/), which
    proves the calls (signatures, pointers, layouts, missing symbols), not a GPU's answers;
    and on a machine without the driver, where it must report LibraryNotFound as a status."""

    description = "NVML (pynvml)"

    def __init__(self) -> None:
        self._pynvml: Any = None
        self._handles: dict[int, Any] = {}
        self._gpm: dict[tuple[int, int], list[Any]] = {}  # [last sample, spare, taken]
        self._gpm_requests: dict[tuple[int, int], Any] = {}

    def _convert(self, exc: Exception, function: str) -> NvmlError:
        code_number = getattr(exc, "value", None)
        code = NVML_ERROR_NAMES.get(code_number, f"Error{code_number}")
        return NvmlError(code, function)

    def init(self) -> None:
        try:
            import pynvml
        except ImportError:
            raise NvmlError("PynvmlMissing", "import pynvml") from None
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as exc:
            raise self._convert(exc, "nvmlInit") from None
        self._pynvml = pynvml

    def shutdown(self) -> None:
        if self._pynvml is not None:
            for pair in self._gpm.values():  # the GPM samples this backend allocated
                for sample in pair[:2]:
                    with contextlib.suppress(self._pynvml.NVMLError):
                        self._pynvml.nvmlGpmSampleFree(sample)
            with contextlib.suppress(self._pynvml.NVMLError):
                self._pynvml.nvmlShutdown()
            self._pynvml = None
            self._handles.clear()
            self._gpm.clear()
            self._gpm_requests.clear()

    def call(self, function: str, device: int | None, *args: int) -> Any:
        pynvml = self._pynvml
        if pynvml is None:
            raise NvmlError("Uninitialized", function)
        if function == MIG_DEVICES and device is not None:
            return self._mig_devices(device)
        if function == GPM_METRICS and device is not None:
            return self._gpm_metrics(device, *args)
        mismatch = getattr(pynvml, "NVMLLibraryMismatchError", None) or _NotInThisBinding
        try:
            if device is not None and function in OWN_STRUCT_CALLS:
                return self._own_struct_call(function, device)
            if device is not None and function == FIELD_VALUES:
                return self._field_value(device, *args)
            func: Callable[..., Any] | None = getattr(pynvml, function, None)
            if func is None and device is not None and function in SYMBOL_CALLS:
                return self._symbol_call(function, device)
            if func is None:
                raise NvmlError(
                    "FunctionNotFound", function, f"not in nvidia-ml-py {self._binding()}"
                )
            if device is None:
                return plain(func(*args))
            call_args: list[Any] = [self._handle(device), *args]
            if function in PEER_FUNCTIONS:
                call_args[1] = self._handle(args[0])
            for _ in range(PROCESS_RETRIES - 1):  # a process list that grew: ask again
                try:
                    return plain(func(*call_args))
                except pynvml.NVMLError as exc:
                    if function not in PROCESS_CALLS or getattr(exc, "value", None) != 7:
                        raise
            return plain(func(*call_args))
        except mismatch as exc:  # nvidia-ml-py 13: the driver lacks the _vN it calls
            raise NvmlError(
                "FunctionNotFound",
                function,
                f"the driver's libnvidia-ml lacks the versioned call nvidia-ml-py "
                f"{self._binding()} makes (an older driver): {exc}",
            ) from None
        except pynvml.NVMLError as exc:
            error = self._convert(exc, function)
            if error.code == "FunctionNotFound":
                error.detail = "the driver's libnvidia-ml lacks it (an older driver)"
            raise error from None

    @property
    def binding(self) -> str:
        """The installed nvidia-ml-py's version, '' when it is not installed."""
        from importlib import metadata  # 25 ms to import: only when asked, not at start

        try:
            return metadata.version("nvidia-ml-py")
        except metadata.PackageNotFoundError:
            return ""

    def _binding(self) -> str:
        return self.binding or "(version unknown)"

    def _symbol(self, name: str) -> Any:
        """A C function of the loaded library (pynvml raises FunctionNotFound if absent)."""
        return self._pynvml._nvmlGetFunctionPointer(name)

    def _symbol_call(self, function: str, device: int) -> Any:
        """A call the binding has no wrapper for, through its function lookup (pynvml
        raises FunctionNotFound where the driver lacks it too)."""
        func = self._symbol(function)
        handle = self._handle(device)
        if function == "nvmlDeviceGetNumaNodeId":
            node = ctypes.c_uint()
            self._check(func(handle, ctypes.byref(node)), function)
            return node.value
        count = ctypes.c_uint(0)  # the process lists: the size first, then the list
        for _ in range(PROCESS_RETRIES):
            room = count.value
            infos = (ProcessInfoV2 * max(room, 1))()
            code = func(handle, ctypes.byref(count), infos if room else None)
            if code == 0:
                return [plain(infos[i]) for i in range(min(count.value, room))]
            if code != 7:  # NVML_ERROR_INSUFFICIENT_SIZE: retry with the size NVML gave
                self._check(code, function)
        self._check(7, function)
        return []

    def _check(self, code: int, function: str) -> None:
        if code != 0:
            raise NvmlError(NVML_ERROR_NAMES.get(code, f"Error{code}"), function)

    def _own_struct_call(self, function: str, device: int) -> dict[str, Any]:
        """Call FUNCTION(handle, &struct) with gpudiag's own nvml.h structure."""
        struct_type, version = OWN_STRUCT_CALLS[function]
        func = self._symbol(function)
        while True:
            struct = struct_type()
            if version:
                struct.version = struct_version(struct_type, version)
            code = func(self._handle(device), ctypes.byref(struct))
            older = OLDER_STRUCT_VERSIONS.get(function)
            if code != 25 or older is None or older[0] is struct_type:
                break
            struct_type, version = older  # ArgumentVersionMismatch: the driver's version
        self._check(code, function)
        values = {k: v for k, v in plain(struct).items() if k != "version"}
        if "numCliques" in values:  # only the first numCliques entries are the driver's
            count = min(int(values.pop("numCliques")), NVML_GPU_FABRIC_CLIQUE_MAX)
            values["cliques"] = values["cliques"][:count]
        return values

    def _field_value(self, device: int, field_id: int, scope_id: int = 0) -> Any:
        """One field value (nvmlDeviceGetFieldValues), by its type; its own return code
        becomes the error."""
        pynvml = self._pynvml
        values = pynvml.nvmlDeviceGetFieldValues(self._handle(device), [(field_id, scope_id)])
        value = values[0]
        self._check(int(value.nvmlReturn), FIELD_VALUES)
        return getattr(value.value, VALUE_MEMBERS.get(int(value.valueType), "ullVal"))

    def _mig_devices(self, device: int) -> list[dict[str, Any]]:
        """Every MIG device of a GPU: index, UUID, GPU and compute instance, memory."""
        pynvml = self._pynvml
        try:
            handle = self._handle(device)
            devices = []
            for index in range(pynvml.nvmlDeviceGetMaxMigDeviceCount(handle)):
                try:
                    mig = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, index)
                except pynvml.NVMLError as exc:
                    if NVML_ERROR_NAMES.get(getattr(exc, "value", None)) == "NotFound":
                        continue  # an unused slot
                    raise
                devices.append(
                    {
                        "index": index,
                        "uuid": plain(pynvml.nvmlDeviceGetUUID(mig)),
                        "gpu_instance": int(pynvml.nvmlDeviceGetGpuInstanceId(mig)),
                        "compute_instance": int(pynvml.nvmlDeviceGetComputeInstanceId(mig)),
                        "memory_total": int(pynvml.nvmlDeviceGetMemoryInfo(mig).total),
                    }
                )
            return devices
        except pynvml.NVMLError as exc:
            raise self._convert(exc, MIG_DEVICES) from None

    def _gpm_metrics(self, device: int, instance: int, *metric_ids: int) -> dict[int, Any]:
        """GPM_METRICS: take a sample of the GPU (or its GPU instance) and read the metrics
        over the window since the last sample; the first call has no window (NoData). A
        sample that fails keeps the previous one, so the next window spans both."""
        pynvml = self._pynvml
        key = (device, instance)
        try:
            handle = self._handle(device)
            pair = self._gpm.get(key)
            if pair is None:
                pair = [pynvml.nvmlGpmSampleAlloc(), pynvml.nvmlGpmSampleAlloc(), False]
                self._gpm[key] = pair
            if instance == GPM_WHOLE_GPU:
                pynvml.nvmlGpmSampleGet(handle, pair[1])
            else:
                pynvml.nvmlGpmMigSampleGet(handle, instance, pair[1])
            pair[0], pair[1], had_first = pair[1], pair[0], pair[2]
            pair[2] = True
            if not had_first:
                raise NvmlError("NoData", GPM_METRICS, "the first sample: a window needs two")
            request = self._gpm_request(key, len(metric_ids))
            request.sample1, request.sample2 = pair[1], pair[0]
            for slot, metric in zip(request.metrics, metric_ids, strict=False):
                slot.metricId = metric
            pynvml.nvmlGpmMetricsGet(request)
        except pynvml.NVMLError as exc:
            raise self._convert(exc, GPM_METRICS) from None
        out: dict[int, Any] = {}
        for slot in request.metrics[: len(metric_ids)]:
            code = int(slot.nvmlReturn)
            out[int(slot.metricId)] = (
                float(slot.value) if code == 0 else NVML_ERROR_NAMES.get(code, f"Error{code}")
            )
        return out

    def _gpm_request(self, key: tuple[int, int], count: int) -> Any:
        """The nvmlGpmMetricsGet_t of one GPU (made once: 19 KB with nvidia-ml-py 13)."""
        request = self._gpm_requests.get(key)
        if request is None:
            request = self._pynvml.c_nvmlGpmMetricsGet_t()
            request.version = self._pynvml.NVML_GPM_METRICS_GET_VERSION
            self._gpm_requests[key] = request
        request.numMetrics = min(count, len(request.metrics))
        return request

    def _handle(self, device: int) -> Any:
        handle = self._handles.get(device)
        if handle is None:
            handle = self._pynvml.nvmlDeviceGetHandleByIndex(device)
            self._handles[device] = handle
        return handle


class ReplayError(Exception):
    """A replay file that cannot be used; str() is the one-line message."""


def _check_recorded(value: Any, where: str) -> None:
    if isinstance(value, dict):
        if "error" in value:
            code = value["error"]
            if not isinstance(code, str) or code not in KNOWN_ERROR_NAMES:
                raise ReplayError(f"{where}: unknown NVML error code {code!r}")
            if set(value) - {"error", "detail"}:
                raise ReplayError(f"{where}: an error entry holds only 'error' and 'detail'")
            return
        for key, item in value.items():
            _check_recorded(item, f"{where}.{key}")
    elif isinstance(value, list):
        for i, item in enumerate(value):
            _check_recorded(item, f"{where}[{i}]")
    elif number_too_large(value):  # the bound of every loader (inputs.MAX_NUMBER)
        raise ReplayError(f"{where}: {too_large_text(value)}")


class ReplayBackend:
    """A recorded node read from a replay file (see the module docstring)."""

    def __init__(self, data: dict[str, Any], name: str = "<replay>") -> None:
        self.name = name
        if data.get("format") != "gpudiag-nvml-replay":
            raise ReplayError(
                f"{name}: not an NVML replay file (format must be 'gpudiag-nvml-replay')"
            )
        if data.get("version") != 1:
            raise ReplayError(
                f"{name}: replay version {data.get('version')!r} is not supported (1)"
            )
        unknown = set(data) - {
            "format",
            "version",
            "description",
            "binding",
            "init",
            "system",
            "devices",
        }
        if unknown:
            raise ReplayError(f"{name}: unknown top-level key(s) {', '.join(sorted(unknown))}")
        self.description = f"NVML replay {Path(name).name}: {data.get('description', '')}".rstrip(
            ": "
        )
        binding = data.get("binding")
        # the nvidia-ml-py version of the recorded node (a capture's); None: not recorded
        self.binding: str | None = binding if isinstance(binding, str) else None
        self._init = data.get("init", {})
        self._system = data.get("system", {})
        self._devices = data.get("devices", [])
        if not isinstance(self._init, dict) or not isinstance(self._system, dict):
            raise ReplayError(f"{name}: [init] and [system] must be tables")
        if not isinstance(self._devices, list) or not all(
            isinstance(d, dict) for d in self._devices
        ):
            raise ReplayError(f"{name}: devices must be a list of tables ([[devices]])")
        _check_recorded(self._init, f"{name}: init")
        _check_recorded(self._system, f"{name}: system")
        for i, device in enumerate(self._devices):
            _check_recorded(device, f"{name}: devices[{i}]")

    @classmethod
    def from_file(cls, path: str | Path) -> ReplayBackend:
        """Load a replay file, TOML or JSON; raises ReplayError with a one-line reason."""
        name = str(path)
        try:
            text = read_text(path, "an NVML replay file")
            data = parse_data(text, name, as_json=None)  # every string printable
        except InputError as exc:
            raise ReplayError(str(exc)) from None
        except RecursionError:
            raise ReplayError(f"{name}: nested too deeply") from None
        if not isinstance(data, dict):
            raise ReplayError(f"{name}: not an NVML replay file")
        try:
            return cls(data, name)
        except RecursionError:
            raise ReplayError(f"{name}: nested too deeply") from None

    def init(self) -> None:
        if "error" in self._init:
            raise NvmlError(self._init["error"], "nvmlInit", self._init.get("detail", ""))

    def shutdown(self) -> None:
        return None

    def call(self, function: str, device: int | None, *args: int) -> Any:
        if device is None:
            table = self._system
            if (
                function in ("nvmlDeviceGetCount", "nvmlDeviceGetCount_v2")
                and function not in table
            ):
                return len(self._devices)
        else:
            if not 0 <= device < len(self._devices):
                raise NvmlError("InvalidArgument", function, f"no device {device} in the replay")
            table = self._devices[device]
            if "all_calls" in table:  # a lost GPU: every call fails the same way
                return self._value_or_error(table["all_calls"], function)
        if function not in table:
            raise NvmlError("NotRecorded", function, f"not in {Path(self.name).name}")
        value = table[function]
        if args:
            if not isinstance(value, dict) or "error" in value:
                return self._value_or_error(value, function)
            arg_key = ",".join(str(a) for a in args)
            if arg_key not in value:
                raise NvmlError("NotRecorded", function, f"arguments ({arg_key}) not recorded")
            value = value[arg_key]
        return self._value_or_error(value, function)

    @staticmethod
    def _value_or_error(value: Any, function: str) -> Any:
        if isinstance(value, dict) and "error" in value:
            raise NvmlError(value["error"], function, value.get("detail", ""))
        return value


class Nvml:
    """The narrow NVML interface the probes use: lazy initialisation, and every call
    answered either with a value or with a reading status."""

    def __init__(self, backend: NvmlBackend) -> None:
        self.backend = backend
        self._lock = threading.Lock()
        self._initialised = False
        self._init_error: NvmlError | None = None

    def ensure_init(self) -> None:
        """Initialise once; re-raises the first failure on every later call."""
        with self._lock:
            if self._initialised:
                return
            if self._init_error is not None:
                raise self._init_error
            try:
                self.backend.init()
            except NvmlError as exc:
                self._init_error = exc
                raise
            self._initialised = True

    def call(self, function: str, device: int | None = None, *args: int) -> Any:
        """Call after initialising; raises NvmlError."""
        self.ensure_init()
        return self.backend.call(function, device, *args)

    def confirms_lost(self, device: int, error: NvmlError) -> bool:
        """Whether `error`, from a call on GPU `device`, says the GPU is lost: GpuIsLost
        from any call does; an Unknown error only when a re-check of the handle (its PCI
        info, asked again) fails too, so one call's Unknown error never loses a GPU."""
        if error.code == "GpuIsLost":
            return True
        if error.code != "Unknown":
            return False
        try:
            self.call("nvmlDeviceGetPciInfo", device)
        except NvmlError:
            return True
        return False

    def reading(
        self,
        key: str,
        function: str,
        device: int | None = None,
        *args: int,
        unit: str = "",
        convert: Callable[[Any], Value] | None = None,
    ) -> Reading:
        """One reading from one NVML call; a failed call gives that failure's status."""
        return self.reading_of(
            key, function, lambda: self.call(function, device, *args), unit, convert
        )

    def reading_of(
        self,
        key: str,
        function: str,
        call: Callable[[], Any],
        unit: str = "",
        convert: Callable[[Any], Value] | None = None,
    ) -> Reading:
        """A reading of what `call` (an NVML call of `function`) returns, through `convert`;
        an NvmlError or a value `convert` cannot handle becomes the reading's status."""
        source = f"nvml:{function}"
        try:
            raw = call()
        except NvmlError as exc:
            reason = exc.reason
            if exc is self._init_error:  # said in full once, by the nvml.init reading
                reason = f"NVML unavailable ({exc.code}, see nvml.init)"
            return Reading.failed(key, exc.status, reason, source=source, unit=unit)
        try:
            value = check_value(convert(raw) if convert else raw)
        except (ValueError, TypeError, KeyError, IndexError) as exc:
            return Reading.failed(
                key, ReadingStatus.ERROR, f"{function} returned {raw!r:.80}: {exc}", source, unit
            )
        return Reading(key=key, value=value, unit=unit, source=source)

    def close(self) -> None:
        """Shut NVML down if it was initialised."""
        with self._lock:
            if self._initialised:
                self.backend.shutdown()
                self._initialised = False


def open_nvml(replay: str | Path | None) -> Nvml:
    """The NVML interface: the replay file when given, else the real library."""
    if replay is not None:
        return Nvml(ReplayBackend.from_file(replay))
    return Nvml(PynvmlBackend())
