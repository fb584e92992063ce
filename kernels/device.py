"""The one boundary between gpudiag's GPU kernels and the GPU.

Every CUDA runtime, cuBLAS, NCCL, stream and kernel-launch call the kernels make goes
through a `CudaApi`: each of its entries IS the real CuPy function or constant named in
`ENTRIES` (resolved on first use, nothing wrapped, so there is no wrapper to get wrong).
The tests replace the whole object with a strict NumPy fake (tests/fakecuda.py) whose
entries are checked against these real functions' signatures and constants in the
installed CuPy. This module has never run on a GPU in this project's CI.

How each entry takes its stream (read against CuPy 14's source; the fake takes them the
same way, tests/fakecuda.py):
- from CuPy's CURRENT stream (per thread and device; the legacy default stream, which
  waits for and delays every blocking stream, unless `with stream:` or `stream.use()`
  made another current): `cublas_gemmEx` (cupy_backends.cuda.libs.cublas calls
  `setStream(handle, get_current_stream_ptr())` before every cuBLAS call, so a stream set
  on the handle beforehand with `cublas_setStream` is overwritten): the kernels make
  their engine's stream current around every gemmEx (`gemm.CublasGemm.multiply`);
  `RawKernel.__call__` without `stream=` (cupy.cuda.function): the kernels always pass
  `stream=`.
- from the stream handle passed, never the current stream: `memcpyAsync`,
  `memcpyPeerAsync`, `streamSynchronize`, `streamWaitEvent`, `eventRecord` (runtime
  calls: the pointer given), `NcclCommunicator.allReduce` (its `stream` argument),
  `RawKernel.__call__` with `stream=`.
- no stream: `deviceSynchronize` (every stream of the current device), `eventSynchronize`,
  `eventElapsedTime`, `malloc`, `free` (waits for the device), `hostRegister`, and the
  device and property queries.

Pointers, not CuPy arrays: device memory is `malloc`ed, host memory is NumPy arrays
registered with `hostRegister` (pinned, as nvbandwidth's are), and results come back with
`memcpyAsync` and a synchronisation, so that every data movement is one visible call.
"""

from __future__ import annotations

import importlib
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

_RUNTIME = "cupy_backends.cuda.api.runtime"
_CUBLAS = "cupy_backends.cuda.libs:cublas"  # the package preloads libcublas from its wheel
_NCCL = "cupy.cuda.nccl"  # preloads libnccl from nvidia-nccl-cu12, where installed

# name on CudaApi: (module, attribute path in it)
ENTRIES: dict[str, tuple[str, str]] = {
    **{
        name: (_RUNTIME, name)
        for name in (
            "getDeviceCount",
            "setDevice",
            "getDevice",
            "deviceGetPCIBusId",
            "getDeviceProperties",
            "deviceGetAttribute",
            "memGetInfo",
            "malloc",
            "free",
            "hostRegister",
            "hostUnregister",
            "memcpyAsync",
            "memcpyPeerAsync",
            "streamSynchronize",
            "streamWaitEvent",
            "eventCreateWithFlags",
            "eventRecord",
            "eventSynchronize",
            "eventElapsedTime",
            "eventDestroy",
            "deviceSynchronize",
            "deviceCanAccessPeer",
            "deviceEnablePeerAccess",
            # constants
            "memcpyHostToDevice",
            "memcpyDeviceToHost",
            "memcpyDeviceToDevice",
            "eventDefault",
            "cudaDevAttrMultiProcessorCount",
            "cudaDevAttrL2CacheSize",
            "CUDA_R_64F",
            "CUDA_R_32F",
            "CUDA_R_16F",
            "CUDA_R_16BF",
        )
    },
    "Stream": ("cupy.cuda", "Stream"),
    "get_current_stream": ("cupy.cuda", "get_current_stream"),
    "RawModule": ("cupy", "RawModule"),
    **{
        f"cublas_{name}": (_CUBLAS, name)
        for name in (
            "create",
            "destroy",
            "setStream",
            "gemmEx",
            "CUBLAS_OP_N",
            "CUBLAS_GEMM_DEFAULT",
            "CUBLAS_COMPUTE_64F",
            "CUBLAS_COMPUTE_32F",
            "CUBLAS_COMPUTE_32F_FAST_TF32",
        )
    },
    **{
        f"nccl_{name}": (_NCCL, name)
        for name in ("groupStart", "groupEnd", "NCCL_SUM", "NCCL_FLOAT32", "NCCL_FLOAT64")
    },
    "nccl_initAll": (_NCCL, "NcclCommunicator.initAll"),
}

# Methods of the objects entries return, as the fake must provide them: (fake class
# attribute, real module, real attribute path).
METHODS: dict[str, tuple[str, str]] = {
    "NcclCommunicator.allReduce": ("cupy_backends.cuda.libs.nccl", "NcclCommunicator.allReduce"),
    "NcclCommunicator.destroy": ("cupy_backends.cuda.libs.nccl", "NcclCommunicator.destroy"),
    "RawModule.get_function": ("cupy", "RawModule.get_function"),
    "RawKernel.__call__": ("cupy", "RawKernel.__call__"),
    "Stream.use": ("cupy.cuda", "Stream.use"),
    "Stream.__enter__": ("cupy.cuda", "Stream.__enter__"),
    "Stream.__exit__": ("cupy.cuda", "Stream.__exit__"),
}


def resolve(module: str, path: str) -> Any:
    """The real object: `module` may name a package attribute (`package:attribute`)."""
    package, _, attribute = module.partition(":")
    target: Any = importlib.import_module(package)
    if attribute:
        target = getattr(target, attribute)
    for part in path.split("."):
        target = getattr(target, part)
    return target


class CudaApi:
    """The real CUDA, through CuPy: attributes resolve to the functions in `ENTRIES`.
    Never run on a GPU in this project's CI."""

    def __getattr__(self, name: str) -> Any:
        if name not in ENTRIES:
            raise AttributeError(f"CudaApi has no entry {name!r}")
        value = resolve(*ENTRIES[name])
        setattr(self, name, value)
        return value


_API: Any = None


def api() -> Any:
    """The process's CudaApi (the tests swap in their fake with `use`)."""
    global _API
    if _API is None:
        _API = CudaApi()
    return _API


def use(replacement: Any) -> Any:
    """Make `replacement` the boundary (None: the real CuPy again); returns the old one."""
    global _API
    previous, _API = _API, replacement
    return previous


# ------------------------------------------------------------------ small helpers


class DeviceError(Exception):
    """A CUDA, cuBLAS, NCCL or CuPy call failed; str() names the device and the call."""


@contextmanager
def pinned(cuda: Any, *arrays: np.ndarray) -> Iterator[None]:
    """Register NumPy arrays as pinned host memory for the duration."""
    done = []
    try:
        for array in arrays:
            cuda.hostRegister(array.ctypes.data, array.nbytes, 0)
            done.append(array)
        yield
    finally:
        for array in done:
            cuda.hostUnregister(array.ctypes.data)


class Timer:
    """Two timing events on a stream: `start()`, work, `stop()`, then `seconds()`."""

    def __init__(self, cuda: Any, stream: Any) -> None:
        self.cuda, self.stream = cuda, stream
        self.begin = cuda.eventCreateWithFlags(cuda.eventDefault)
        self.end = cuda.eventCreateWithFlags(cuda.eventDefault)

    def start(self) -> None:
        self.cuda.eventRecord(self.begin, self.stream.ptr)

    def stop(self) -> None:
        self.cuda.eventRecord(self.end, self.stream.ptr)

    def seconds(self) -> float:
        """Waits for the stop event, then the GPU time between the two."""
        self.cuda.eventSynchronize(self.end)
        return float(self.cuda.eventElapsedTime(self.begin, self.end)) / 1000.0

    def close(self) -> None:
        self.cuda.eventDestroy(self.begin)
        self.cuda.eventDestroy(self.end)


def host_clock(cuda: Any) -> Callable[[], float]:
    """The host's wall clock, to check event times against: time.perf_counter on a GPU;
    the fake's simulated host clock (its `host_clock`) in the tests."""
    return getattr(cuda, "host_clock", None) or time.perf_counter


WALL_AGREEMENT = 0.10  # CUDA events and the synchronised wall clock agree this well,
WALL_SLACK_S = 1e-4  # give or take the host's few CUDA calls around the batch
WALL_TRIES = 3  # a disagreement is measured again (a preempted host) before it counts


def events_against_wall(
    cuda: Any, device: int, timer: Timer, work: Callable[[], None]
) -> tuple[float, float]:
    """(event seconds, wall seconds) of `work` between `timer`'s events, the wall clock
    taken between two device synchronisations: work the events missed (on another stream)
    still takes wall time."""
    clock = host_clock(cuda)
    cuda.setDevice(device)
    cuda.deviceSynchronize()
    started = clock()
    timer.start()
    work()
    timer.stop()
    cuda.deviceSynchronize()
    wall = clock() - started
    return timer.seconds(), wall


def timing_inconsistency(
    measure: Callable[[], tuple[float, float]], what: str, count: int
) -> tuple[str, float]:
    """("timing inconsistent: ..." or "", events / wall): `measure` (events_against_wall)
    up to WALL_TRIES times until the two agree within WALL_AGREEMENT (plus WALL_SLACK_S);
    `count` pieces of `what` were in the batch."""
    reason, ratio = "", 1.0
    for _ in range(WALL_TRIES):
        events, wall = measure()
        ratio = events / wall if wall > 0 else 0.0
        if abs(wall - events) <= WALL_AGREEMENT * wall + WALL_SLACK_S:
            return "", ratio
        reason = (
            f"timing inconsistent: CUDA events {events / count * 1e3:.4g} ms per {what}, the "
            f"wall clock between device synchronisations {wall / count * 1e3:.4g} ms "
            f"({count} per batch, {WALL_TRIES} tries): the events did not time the work, a "
            "measurement problem, not a GPU figure"
        )
    return reason, ratio


def to_device(cuda: Any, host: np.ndarray, stream: Any) -> int:
    """A new device buffer holding `host` (copied and synchronised)."""
    pointer = cuda.malloc(host.nbytes)
    with pinned(cuda, host):
        kind = cuda.memcpyHostToDevice
        cuda.memcpyAsync(pointer, host.ctypes.data, host.nbytes, kind, stream.ptr)
        cuda.streamSynchronize(stream.ptr)
    return pointer


def to_host(cuda: Any, pointer: int, out: np.ndarray, stream: Any) -> np.ndarray:
    """Copy a device buffer into `out` after the stream's work, and wait for it."""
    with pinned(cuda, out):
        cuda.memcpyAsync(out.ctypes.data, pointer, out.nbytes, cuda.memcpyDeviceToHost, stream.ptr)
        cuda.streamSynchronize(stream.ptr)
    return out


def device_uuid(cuda: Any, device: int) -> str:
    """The device's UUID as NVML prints it (GPU-xxxxxxxx-...), from the runtime's
    properties; "" where the runtime gives none."""
    raw = cuda.getDeviceProperties(device).get("uuid", b"")
    raw = bytes(raw)[:16] if raw else b""
    if len(raw) != 16:
        return ""
    h = raw.hex()
    return f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"
