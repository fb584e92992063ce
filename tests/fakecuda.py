"""A strict NumPy stand-in for gpudiag's device boundary (gpudiag.kernels.device).

Every entry has the real CuPy function's name and parameters (tests/test_kernels_device.py
checks each against the installed CuPy) and fails where CUDA would:
- work is queued per stream and runs when the host waits (a stream, event or device
  synchronisation): then every piece of work whose simulated end has passed runs, in the
  order of those ends, whatever stream it is on, as a GPU runs work as soon as it is
  submitted: a result read before a sync is stale, work on two streams that are not
  ordered against each other races (a kernel reading a buffer that another stream's
  unfinished work writes sees the old bytes), and an event's elapsed time before its
  completion raises cudaErrorNotReady;
- memory belongs to a device; a copy's kind must match its pointers, a host pointer must
  be registered (pinned), a peer copy or kernel reading another GPU needs peer access,
  work on a stream of another device than the current one is refused;
- streams as CUDA orders them: each device has its legacy default stream (handle 0),
  whose work waits for all earlier work of the device's blocking streams and delays
  their later work; a non-blocking stream (`Stream(non_blocking=True)`) is ordered
  against neither;
- CuPy's current stream, per thread and per device (`Stream.use()`, `with stream:`,
  `get_current_stream`; the legacy default stream until one is made current), and the
  entries that CuPy routes through it take their stream there as CuPy's source does:
  cuBLAS's wrappers (cupy_backends.cuda.libs.cublas) call
  `setStream(handle, get_current_stream_ptr())` before every call, so a gemmEx runs on
  the current stream whatever stream was set on its handle before; a RawKernel launched
  without `stream=` runs on the current stream (cupy.cuda.function); the runtime's
  memcpyAsync, eventRecord and streamSynchronize and NCCL's allReduce take the stream
  they are given;
- gemmEx interprets its buffers by the data-type and compute-type enums, in cuBLAS's
  column-major order, with alpha and beta read as the compute type's scalars; TF32 rounds
  its inputs to TF32; a wrong enum is refused or computes a visibly wrong product;
- kernels are the real ones: a RawModule compiles the source it is given (kernels/*.cu)
  for the host and a launch runs it over the grid (tests/fakecuda_kernels.py, through
  tests/fakekernels.py), on device
  memory that is host memory at the device pointer, with guard bytes after every
  allocation that a kernel writing past its array changes (cudaErrorIllegalAddress);
- time is simulated: each call costs the host HOST_CALL_S, each piece of work its bytes
  or flops at the device's rates (a kernel whose arrays fit the device's L2 at L2_GBS:
  CacheModel), and a stream idles until the host has submitted.
`fail` makes every call on a device raise, as a broken GPU does (`fail_with`: the error).
"""

from __future__ import annotations

import bisect
import ctypes
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from fakecuda_kernels import FakeModule

HOST_CALL_S = 1e-6  # what a Python call into CUDA costs the host
MEMORY_GBS = 2000.0  # device memory, GB/s (bytes read + written)
PCIE_GBS = 25.0
NVLINK_GBS = 300.0
UNPEERED_GBS = 10.0
# slow rates, so that the tests' small GEMMs still outlast a call
TFLOPS = {"fp64": 1.0, "fp32": 2.0, "tf32": 8.0, "fp16": 16.0, "bf16": 15.0}
PEER_LATENCY_S = 2.5e-6  # one load's round trip over the link
LOCAL_LATENCY_S = 0.6e-6
NCCL_BUSBW_GBS = 150.0
NCCL_LATENCY_S = 10e-6
DEVICE_BYTES = 64 * 2**20
# The fake GPU's L2 (CacheModel): arrays that all fit it run at L2_GBS. Small, as the
# fake's memory is: the tests' smallest STREAM arrays (16 KiB) are 4x it, STREAM's rule.
L2_BYTES = 4096
L2_GBS = 5000.0
CANARY, CANARY_BYTE = 256, 0xA5  # bytes after every allocation, checked after a kernel


class CUDARuntimeError(RuntimeError):
    """What CuPy raises for a failed runtime call."""


@dataclass(eq=False)
class Op:
    run: Any
    deps: list[Op]
    done: bool = False
    end: float = 0.0  # simulated time it ends
    seq: int = 0  # submission order, among ops that end at the same time

    def finish(self) -> None:
        stack = [self]
        order: list[Op] = []
        seen: set[int] = set()
        while stack:  # dependencies first, each once
            op = stack.pop()
            if op.done or id(op) in seen:
                continue
            seen.add(id(op))
            order.append(op)
            stack.extend(op.deps)
        for op in reversed(order):
            if not op.done:
                op.run()
                op.done = True


@dataclass(eq=False)
class FakeStream:
    """A CUDA stream as CuPy's Stream object shows it (ptr, device_id, use, with)."""

    device: int
    ptr: int
    cuda: Any = field(default=None, repr=False)
    non_blocking: bool = False
    last: Op | None = None
    ready: float = 0.0  # simulated time its last work ends

    @property
    def device_id(self) -> int:
        return self.device

    def use(self) -> FakeStream:
        """Make this stream the current one of its device (cupy.cuda.Stream.use)."""
        self.cuda._check_stream_device(self)
        self.cuda._current()[self.device] = self
        return self

    def __enter__(self) -> FakeStream:
        """`with stream:` makes it current until the block ends (CuPy's push_stream)."""
        self.cuda._check_stream_device(self)
        stacks, order = self.cuda._stacks()
        stacks.setdefault(self.device, [None]).append(self)  # None: the legacy default
        order.append(self.device)
        self.cuda._current()[self.device] = self
        return self

    def __exit__(self, *args: Any) -> None:
        stacks, order = self.cuda._stacks()
        device = order.pop()
        stacks[device].pop()
        previous = stacks[device][-1]
        current = self.cuda._current()
        if previous is None:
            current.pop(device, None)
        else:
            current[device] = previous

    def synchronize(self) -> None:
        self.cuda.streamSynchronize(self.ptr)


@dataclass
class FakeEvent:
    device: int
    op: Op | None = None
    time: float = 0.0


@dataclass
class Allocation:
    """Device memory: host memory at a 256-byte aligned address (cudaMalloc's), which
    is the device pointer, so that the kernels' own code runs on it (tests/fakekernels.py);
    CANARY bytes of a known pattern follow it, checked after every kernel."""

    device: int
    memory: np.ndarray
    canary: np.ndarray = field(default_factory=lambda: np.empty(0, np.uint8))


@dataclass
class Device:
    index: int
    uuid: bytes
    bus_id: str
    sms: int = 4
    free_bytes: int = DEVICE_BYTES
    l2_bytes: int = L2_BYTES
    peers: set[int] = field(default_factory=set)


def tf32(values: np.ndarray) -> np.ndarray:
    """float32 rounded to TF32 (10 mantissa bits), as tensor cores read FP32 inputs."""
    bits = np.ascontiguousarray(values, np.float32).view(np.uint32)
    rounded = (bits + np.uint32(0xFFF) + ((bits >> np.uint32(13)) & np.uint32(1))) & np.uint32(
        0xFFFFE000
    )
    return rounded.view(np.float32)


class FakeCuda:
    """Several fake GPUs; see the module docstring. Constants have the real values (checked)."""

    # cudaMemcpyKind, event flags, attributes, cudaDataType, cuBLAS and NCCL enums
    memcpyHostToDevice, memcpyDeviceToHost, memcpyDeviceToDevice = 1, 2, 3
    eventDefault = 0
    cudaDevAttrMultiProcessorCount = 16
    cudaDevAttrL2CacheSize = 38
    CUDA_R_64F, CUDA_R_32F, CUDA_R_16F, CUDA_R_16BF = 1, 0, 2, 14
    cublas_CUBLAS_OP_N = 0
    cublas_CUBLAS_GEMM_DEFAULT = -1
    cublas_CUBLAS_COMPUTE_64F, cublas_CUBLAS_COMPUTE_32F = 70, 68
    cublas_CUBLAS_COMPUTE_32F_FAST_TF32 = 77
    nccl_NCCL_SUM, nccl_NCCL_FLOAT32, nccl_NCCL_FLOAT64 = 0, 7, 8

    def __init__(self, count: int = 2, fail: set[int] | None = None, peer: bool = True) -> None:
        self.devices = [
            Device(i, bytes([0xA0 + i] * 16), f"0000:{0x18 + i:02x}:00.0") for i in range(count)
        ]
        self.peer_capable = peer
        self.fail = set(fail or ())
        # what a failing device raises: a launch failure says nothing about the GPU;
        # cudaErrorECCUncorrectable or cudaErrorUnknown (fallen off the bus) is a GPU fault
        self.fail_with = "cudaErrorLaunchFailure"
        self.local = threading.local()
        self.lock = threading.RLock()
        self.host_time = 0.0
        self.allocations: dict[int, Allocation] = {}
        self.bases: list[int] = []  # the allocations' pointers, sorted (a burn holds thousands)
        self.registered: dict[int, int] = {}
        self.streams: dict[int, FakeStream] = {}
        # each device's legacy default stream: handle 0 on whichever device is current
        self.legacy = [FakeStream(i, 0, self) for i in range(count)]
        self.events: dict[int, FakeEvent] = {}
        self.handles: dict[int, dict[str, int]] = {}
        self.calls: list[tuple[str, Any]] = []
        self.next_handle = 0x1000
        self.in_group = False
        self.gemm_cache: dict[tuple[Any, ...], np.ndarray] = {}
        self.pending: list[Op] = []  # submitted work not yet run
        self.run_lock = threading.RLock()  # one thread at a time runs the work

    # ------------------------------------------------------------ bookkeeping

    def _call(self, name: str, *args: Any, device: int | None = None) -> int:
        with self.lock:
            self.host_time += HOST_CALL_S
            self.calls.append((name, args))
        current = self.getDevice() if device is None else device
        if current in self.fail:
            raise CUDARuntimeError(f"{self.fail_with}: {name} on device {current}")
        return current

    def host_clock(self) -> float:
        """The simulated host time, as the kernels' wall clock (device.host_clock)."""
        with self.lock:
            return self.host_time

    def _handle(self) -> int:
        with self.lock:
            self.next_handle += 16
            return self.next_handle

    def _current(self) -> dict[int, FakeStream]:
        """This thread's current stream per device (absent: the legacy default stream)."""
        if not hasattr(self.local, "current"):
            self.local.current = {}
        return self.local.current

    def _stacks(self) -> tuple[dict[int, list[Any]], list[int]]:
        """This thread's `with stream:` stacks per device, and the order of their devices."""
        if not hasattr(self.local, "stacks"):
            self.local.stacks, self.local.order = {}, []
        return self.local.stacks, self.local.order

    def _check_stream_device(self, stream: FakeStream) -> None:
        if stream.device != self.getDevice():
            raise RuntimeError(
                f"The device that the stream is created on ({stream.device}) does not match "
                f"with the current device ({self.getDevice()})"
            )

    def get_current_stream(self, device_id: int = -1) -> FakeStream:
        """cupy.cuda.get_current_stream: the current device's unless `device_id` is given."""
        device = self.getDevice() if device_id == -1 else device_id
        return self._current().get(device, self.legacy[device])

    def _implicit(self, stream: FakeStream) -> list[FakeStream]:
        """The streams whose earlier work `stream`'s next work waits for without being
        asked: the legacy default stream waits for every blocking stream of its device,
        a blocking stream for the legacy default stream, a non-blocking one for none."""
        if stream.non_blocking:
            return []
        legacy = self.legacy[stream.device]
        if stream is not legacy:
            return [legacy]
        with self.lock:
            return [
                s for s in self.streams.values() if s.device == stream.device and not s.non_blocking
            ]

    def _stream(self, ptr: int, device: int) -> FakeStream:
        if ptr == 0:  # the legacy default stream of the current device
            return self.legacy[device]
        with self.lock:
            stream = self.streams.get(ptr)
        if stream is None:
            raise CUDARuntimeError("cudaErrorInvalidResourceHandle: not a stream")
        if stream.device != device:
            raise CUDARuntimeError(
                f"cudaErrorInvalidResourceHandle: stream of device {stream.device} used on "
                f"device {device}"
            )
        return stream

    def _enqueue(self, stream: FakeStream, run: Any, seconds: float, extra: list[Op] = ()) -> Op:
        with self.lock:
            implicit = self._implicit(stream)
            start = max(stream.ready, self.host_time, *(s.ready for s in implicit))
            stream.ready = start + seconds
            deps = [d for d in (stream.last, *(s.last for s in implicit), *extra) if d is not None]
            op = Op(run, deps, end=stream.ready, seq=len(self.calls))
            self.pending.append(op)
            stream.last = op
            return op

    def device_view(self, pointer: int, nbytes: int, device: int | None = None) -> np.ndarray:
        """The bytes at a device pointer (any offset into an allocation)."""
        found = self._allocation(pointer)
        if found is not None:
            base, allocation = found
            if pointer + nbytes <= base + allocation.memory.size:
                peers = self.devices[device].peers if device is not None else set()
                if device is not None and allocation.device not in (device, *peers):
                    raise CUDARuntimeError(
                        f"cudaErrorIllegalAddress: device {device} reads device "
                        f"{allocation.device}'s memory without peer access"
                    )
                return allocation.memory[pointer - base : pointer - base + nbytes]
        raise CUDARuntimeError(f"cudaErrorInvalidValue: {pointer:#x}+{nbytes} is not device memory")

    def _allocation(self, pointer: int) -> tuple[int, Allocation] | None:
        """(base, allocation) holding `pointer`, read under the lock (another thread may
        be allocating or freeing); None where no allocation holds it."""
        with self.lock:
            index = bisect.bisect_right(self.bases, pointer) - 1
            if index < 0:
                return None
            base = self.bases[index]
            allocation = self.allocations[base]
        return (base, allocation) if pointer < base + allocation.memory.size else None

    def _is_device(self, pointer: int) -> bool:
        return self._allocation(pointer) is not None

    def host_view(self, pointer: int, nbytes: int) -> np.ndarray:
        with self.lock:
            registered = list(self.registered.items())
        for base, size in registered:
            if base <= pointer and pointer + nbytes <= base + size:
                return np.ctypeslib.as_array((ctypes.c_uint8 * nbytes).from_address(pointer))
        raise CUDARuntimeError(f"host pointer {pointer:#x}+{nbytes} is not registered (pinned)")

    # ------------------------------------------------------------ runtime

    def getDeviceCount(self) -> int:
        if not self.devices:  # CUDA answers an error, not 0 (CUDA_VISIBLE_DEVICES=-1 too)
            raise CUDARuntimeError("cudaErrorNoDevice: no CUDA-capable device is detected")
        return len(self.devices)

    def setDevice(self, device: int) -> None:
        if not 0 <= device < len(self.devices):
            raise CUDARuntimeError("cudaErrorInvalidDevice")
        self.local.device = device
        self._call("setDevice", device)

    def getDevice(self) -> int:
        return getattr(self.local, "device", 0)

    def deviceGetPCIBusId(self, device: int) -> str:
        self._call("deviceGetPCIBusId", device, device=device)
        return self.devices[device].bus_id.upper()

    def getDeviceProperties(self, device: int) -> dict[str, Any]:
        self._call("getDeviceProperties", device, device=device)
        return {"uuid": self.devices[device].uuid, "name": b"Fake GPU"}

    def deviceGetAttribute(self, attrib: int, device: int) -> int:
        self._call("deviceGetAttribute", attrib, device, device=device)
        if attrib == self.cudaDevAttrL2CacheSize:
            return self.devices[device].l2_bytes
        if attrib != self.cudaDevAttrMultiProcessorCount:
            raise CUDARuntimeError("cudaErrorInvalidValue: attribute not faked")
        return self.devices[device].sms

    def memGetInfo(self) -> tuple[int, int]:
        device = self._call("memGetInfo")
        return self.devices[device].free_bytes, DEVICE_BYTES

    def malloc(self, size: int) -> int:
        device = self._call("malloc", size)
        with self.lock:
            if size > self.devices[device].free_bytes:
                raise CUDARuntimeError("cudaErrorMemoryAllocation: out of memory")
            self.devices[device].free_bytes -= size
            # uninitialised memory is not zero
            whole = np.full(max(size, 1) + 256 + CANARY, 0xFF, np.uint8)
            start = -whole.ctypes.data % 256
            memory, canary = whole[start : start + size], whole[start + size :][:CANARY]
            canary[:] = CANARY_BYTE
            pointer = memory.ctypes.data if size else whole[start:].ctypes.data
            self.allocations[pointer] = Allocation(device, memory, canary)
            bisect.insort(self.bases, pointer)
            return pointer

    def check_canaries(self, pointers: list[Any]) -> None:
        """After a kernel: the bytes after each allocation it was given must be as
        written (a kernel that wrote past its array is what a GPU reports as
        cudaErrorIllegalAddress, or corrupts the next allocation silently)."""
        for pointer in pointers:
            found = self._allocation(pointer) if isinstance(pointer, int) else None
            if found is not None and not (found[1].canary == CANARY_BYTE).all():
                raise CUDARuntimeError(
                    f"cudaErrorIllegalAddress: a kernel wrote past the allocation at {pointer:#x}"
                )

    def free(self, ptr: int) -> None:
        with self.lock:
            allocation = self.allocations.get(ptr)
        if allocation is None:
            raise CUDARuntimeError("cudaErrorInvalidValue: free of a pointer not allocated")
        self.deviceSynchronize()  # cudaFree waits for the device
        with self.lock:
            del self.allocations[ptr]
            self.bases.remove(ptr)
            self.devices[allocation.device].free_bytes += allocation.memory.size

    def hostRegister(self, ptr: int, size: int, flags: int) -> None:
        self._call("hostRegister", ptr, size, flags, device=0)
        with self.lock:
            if ptr in self.registered:
                raise CUDARuntimeError("cudaErrorHostMemoryAlreadyRegistered")
            self.registered[ptr] = size

    def hostUnregister(self, ptr: int) -> None:
        self._call("hostUnregister", ptr, device=0)
        with self.lock:
            missing = self.registered.pop(ptr, None) is None
        if missing:
            raise CUDARuntimeError("cudaErrorHostMemoryNotRegistered")

    def memcpyAsync(self, dst: int, src: int, size: int, kind: int, stream: int) -> None:
        device = self._call("memcpyAsync", dst, src, size, kind, stream)
        s = self._stream(stream, device)
        if kind == self.memcpyHostToDevice:
            source, target = self.host_view(src, size), self.device_view(dst, size, device)
            rate = PCIE_GBS
        elif kind == self.memcpyDeviceToHost:
            source, target = self.device_view(src, size, device), self.host_view(dst, size)
            rate = PCIE_GBS
        elif kind == self.memcpyDeviceToDevice:
            source, target = self.device_view(src, size, device), self.device_view(dst, size)
            rate = MEMORY_GBS / 2
        else:
            raise CUDARuntimeError(f"cudaErrorInvalidMemcpyDirection: {kind}")

        def run() -> None:
            target[:] = source

        self._enqueue(s, run, size / rate / 1e9)

    def memcpyPeerAsync(
        self, dst: int, dstDevice: int, src: int, srcDevice: int, size: int, stream: int
    ) -> None:
        device = self._call("memcpyPeerAsync", dst, dstDevice, src, srcDevice, size, stream)
        s = self._stream(stream, device)
        target, source = self.device_view(dst, size), self.device_view(src, size)
        for pointer, owner in ((dst, dstDevice), (src, srcDevice)):
            if self._owner(pointer) != owner:
                raise CUDARuntimeError("cudaErrorInvalidValue: pointer not on that device")
        peered = dstDevice in self.devices[srcDevice].peers or srcDevice in (
            self.devices[dstDevice].peers
        )

        def run() -> None:
            target[:] = source

        self._enqueue(s, run, size / (NVLINK_GBS if peered else UNPEERED_GBS) / 1e9)

    def _owner(self, pointer: int) -> int:
        found = self._allocation(pointer)
        return found[1].device if found is not None else -1

    def streamSynchronize(self, stream: int) -> None:
        device = self._call("streamSynchronize", stream)
        with self.lock:
            s = self.legacy[device] if stream == 0 else self.streams.get(stream)
        if s is None:
            raise CUDARuntimeError("cudaErrorInvalidResourceHandle")
        for waited in (s, *(self._implicit(s) if s.ptr == 0 else ())):
            self._wait(waited.last, waited.ready)

    def _wait(self, op: Op | None, until: float) -> None:
        """The host waits until `until` (simulated): all work that has ended by then runs,
        in the order of its ends, then `op` (already among it)."""
        with self.lock:
            self.host_time = max(self.host_time, until)
            due = sorted(
                (o for o in self.pending if o.end <= self.host_time), key=lambda o: (o.end, o.seq)
            )
            self.pending = [o for o in self.pending if o.end > self.host_time]
        with self.run_lock:
            for o in due:
                o.finish()
            if op is not None:
                op.finish()

    def streamWaitEvent(self, stream: int, event: int, flags: int = 0) -> None:
        device = self._call("streamWaitEvent", stream, event, flags)
        s, e = self._stream(stream, device), self.events[event]
        with self.lock:
            s.ready = max(s.ready, e.time)
            s.last = Op(lambda: None, [d for d in (s.last, e.op) if d is not None])

    def eventCreateWithFlags(self, flags: int) -> int:
        device = self._call("eventCreateWithFlags", flags)
        if flags != self.eventDefault:
            raise CUDARuntimeError("the fake times only events created with eventDefault")
        handle = self._handle()
        self.events[handle] = FakeEvent(device)
        return handle

    def eventRecord(self, event: int, stream: int) -> None:
        device = self._call("eventRecord", event, stream)
        s, e = self._stream(stream, device), self.events[event]
        if e.device != device:
            raise CUDARuntimeError("cudaErrorInvalidResourceHandle: event of another device")
        with self.lock:
            implicit = self._implicit(s)  # a stream operation like any other
            e.time = max(s.ready, self.host_time, *(w.ready for w in implicit))
            s.ready = e.time
            e.op = Op(lambda: None, [w.last for w in (s, *implicit) if w.last is not None])
            s.last = e.op

    def eventSynchronize(self, event: int) -> None:
        self._call("eventSynchronize", event, device=self.events[event].device)
        e = self.events[event]
        self._wait(e.op, e.time)

    def eventElapsedTime(self, start: int, end: int) -> float:
        self._call("eventElapsedTime", start, end, device=self.events[end].device)
        a, b = self.events[start], self.events[end]
        for e in (a, b):
            if e.op is None or not e.op.done:
                raise CUDARuntimeError("cudaErrorNotReady: event not completed")
        return (b.time - a.time) * 1000.0

    def eventDestroy(self, event: int) -> None:
        self.events.pop(event)

    def deviceSynchronize(self) -> None:
        device = self._call("deviceSynchronize")
        with self.lock:
            streams = [s for s in self.streams.values() if s.device == device]
        for s in (*streams, self.legacy[device]):
            self._wait(s.last, s.ready)

    def deviceCanAccessPeer(self, device: int, peerDevice: int) -> int:
        self._call("deviceCanAccessPeer", device, peerDevice, device=device)
        return int(self.peer_capable and device != peerDevice)

    def deviceEnablePeerAccess(self, peerDevice: int) -> None:
        device = self._call("deviceEnablePeerAccess", peerDevice)
        if not self.peer_capable or peerDevice in self.devices[device].peers:
            raise CUDARuntimeError("cudaErrorPeerAccessAlreadyEnabled or unsupported")
        self.devices[device].peers.add(peerDevice)

    # ------------------------------------------------------------ CuPy objects

    def Stream(self, null: bool = False, non_blocking: bool = False, ptds: bool = False,
               priority: Any = None) -> FakeStream:  # fmt: skip
        device = self._call("Stream", non_blocking)
        if null:
            return self.legacy[device]
        if ptds:
            raise RuntimeError("the fake has no per-thread default stream")
        stream = FakeStream(device, self._handle(), self, non_blocking)
        with self.lock:
            self.streams[stream.ptr] = stream
        return stream

    def RawModule(self, code: str | None = None, *, path: str | None = None,
                  options: tuple[str, ...] = (), backend: str = "nvrtc",
                  translate_cucomplex: bool = False, enable_cooperative_groups: bool = False,
                  name_expressions: Any = None, jitify: Any = None) -> FakeModule:  # fmt: skip
        self._call("RawModule", options)
        if code is None:
            raise ValueError("the fake compiles source only")
        from fakecuda_kernels import FakeModule  # its kernels' module (it imports this one)

        return FakeModule(self, code)

    # ------------------------------------------------------------ cuBLAS

    def cublas_create(self) -> int:
        device = self._call("cublasCreate")
        handle = self._handle()
        self.handles[handle] = {"device": device, "stream": 0}
        return handle

    def cublas_destroy(self, handle: int) -> None:
        self.handles.pop(handle)

    def cublas_setStream(self, handle: int, stream: int) -> None:
        self._call("cublasSetStream", handle, stream)
        self.handles[handle]["stream"] = stream

    def cublas_gemmEx(
        self, handle: int, transa: int, transb: int, m: int, n: int, k: int,
        alpha: int, A: int, Atype: int, lda: int, B: int, Btype: int, ldb: int,
        beta: int, C: int, Ctype: int, ldc: int, computeType: int, algo: int,
    ) -> None:  # fmt: skip
        # cupy_backends.cuda.libs.cublas.gemmEx: _setStream(handle) first, i.e.
        # setStream(handle, get_current_stream_ptr()): the GEMM runs on CuPy's current
        # stream, whatever stream was set on the handle before
        self.cublas_setStream(handle, self.get_current_stream().ptr)
        device = self._call("cublasGemmEx", m, n, k, Atype, computeType)
        state = self.handles[handle]
        if state["device"] != device:
            raise RuntimeError("CUBLAS_STATUS_EXECUTION_FAILED: handle of another device")
        if (transa, transb) != (self.cublas_CUBLAS_OP_N,) * 2:
            raise RuntimeError("the fake multiplies untransposed matrices only")
        if not (Atype == Btype == Ctype):
            raise RuntimeError("CUBLAS_STATUS_NOT_SUPPORTED: mixed data types")
        allowed = {
            self.cublas_CUBLAS_COMPUTE_64F: {self.CUDA_R_64F: "fp64"},
            self.cublas_CUBLAS_COMPUTE_32F: {
                self.CUDA_R_32F: "fp32", self.CUDA_R_16F: "fp16", self.CUDA_R_16BF: "bf16",
            },
            self.cublas_CUBLAS_COMPUTE_32F_FAST_TF32: {self.CUDA_R_32F: "tf32"},
        }  # fmt: skip
        precision = allowed.get(computeType, {}).get(Atype)
        if precision is None or algo != self.cublas_CUBLAS_GEMM_DEFAULT:
            raise RuntimeError("CUBLAS_STATUS_NOT_SUPPORTED: type/compute/algo combination")
        if min(lda, ldb, ldc) < max(m, k, 1) or ldb < k:
            raise RuntimeError("CUBLAS_STATUS_INVALID_VALUE: leading dimension")
        item = {"fp64": 8, "fp32": 4, "tf32": 4}.get(precision, 2)
        scalar = np.float64 if precision == "fp64" else np.float32
        a_alpha = np.ctypeslib.as_array((ctypes.c_uint8 * 8).from_address(alpha)).copy()
        a_beta = np.ctypeslib.as_array((ctypes.c_uint8 * 8).from_address(beta)).copy()
        al = float(a_alpha[: np.dtype(scalar).itemsize].view(scalar)[0])
        be = float(a_beta[: np.dtype(scalar).itemsize].view(scalar)[0])
        a_mem = self.device_view(A, lda * k * item, device)
        b_mem = self.device_view(B, ldb * n * item, device)
        c_mem = self.device_view(C, ldc * n * item, device)

        def decode(raw: np.ndarray, ld: int, rows: int, cols: int) -> np.ndarray:
            if Atype == self.CUDA_R_16BF:
                values = (raw.view(np.uint16).astype(np.uint32) << np.uint32(16)).view(np.float32)
            else:
                kind = {"fp64": np.float64, "fp16": np.float16}.get(precision, np.float32)
                values = raw.view(kind)
            return values.reshape(cols, ld).T[:rows, :cols]  # column-major

        def run() -> None:
            key = (precision, al, be, m, n, k, hash(a_mem.tobytes()), hash(b_mem.tobytes()))
            if not be and key in self.gemm_cache:  # the same product again: no NumPy work
                c_mem[:] = self.gemm_cache[key]
                return
            compute()
            if not be:
                self.gemm_cache[key] = c_mem.copy()

        def compute() -> None:
            a = decode(a_mem, lda, m, k).astype(np.float64)
            b = decode(b_mem, ldb, k, n).astype(np.float64)
            if precision == "tf32":
                a, b = tf32(a.astype(np.float32)), tf32(b.astype(np.float32))
            if precision != "fp64":
                product = (a.astype(np.float32) @ b.astype(np.float32)).astype(np.float64)
            else:
                product = a @ b
            c_old = decode(c_mem, ldc, m, n).astype(np.float64)
            c = al * product + (be * c_old if be else 0.0)
            if precision == "bf16":
                from gpudiag.kernels.gemm import to_bf16_bits

                out: np.ndarray = to_bf16_bits(c.astype(np.float32))
            else:
                out = c.astype({"fp64": np.float64, "fp16": np.float16}.get(precision, np.float32))
            c_mem.view(out.dtype).reshape(n, ldc)[:, :m] = out.T

        self._enqueue(
            self._stream(state["stream"], device),
            run,
            2.0 * m * n * k / (TFLOPS[precision] * 1e12),
        )

    # ------------------------------------------------------------ NCCL

    def nccl_initAll(self, devices: Any) -> list[FakeCommunicator]:
        devices = list(range(devices)) if isinstance(devices, int) else list(devices)
        for device in devices:
            self._call("ncclCommInitAll", device, device=device)
        group = CommGroup(self, devices)
        return [FakeCommunicator(group, rank) for rank in range(len(devices))]

    def nccl_groupStart(self) -> None:
        self._call("ncclGroupStart", device=0)
        self.in_group = True

    def nccl_groupEnd(self) -> None:
        self._call("ncclGroupEnd", device=0)
        self.in_group = False


class CommGroup:
    """The communicators of one initAll: an all-reduce runs when every rank has called."""

    def __init__(self, cuda: FakeCuda, devices: list[int]) -> None:
        self.cuda, self.devices = cuda, devices
        self.pending: dict[int, tuple[Any, ...]] = {}

    def submit(self, rank: int, call: tuple[Any, ...]) -> None:
        if rank in self.pending:
            raise RuntimeError("NCCL: rank called twice before the others (deadlock)")
        self.pending[rank] = call
        if len(self.pending) < len(self.devices):
            return
        calls, self.pending = self.pending, {}
        cuda = self.cuda
        counts = {c[2] for c in calls.values()}
        types = {c[3] for c in calls.values()}
        if len(counts) != 1 or len(types) != 1:
            raise RuntimeError("NCCL: ranks disagree on count or datatype (hangs on a GPU)")
        count, datatype = counts.pop(), types.pop()
        dtype = {cuda.nccl_NCCL_FLOAT32: np.float32, cuda.nccl_NCCL_FLOAT64: np.float64}[datatype]
        nbytes = count * np.dtype(dtype).itemsize
        views = []
        ops = []
        ready = 0.0
        for rank, (send, recv, _c, _d, op, stream) in sorted(calls.items()):
            if op != cuda.nccl_NCCL_SUM:
                raise RuntimeError("the fake sums only")
            device = self.devices[rank]
            s = cuda._stream(stream, device)
            views.append(
                (cuda.device_view(send, nbytes, device), cuda.device_view(recv, nbytes, device))
            )
            ready = max(ready, s.ready, cuda.host_time)
            ops.append(s)
        n = len(self.devices)
        seconds = NCCL_LATENCY_S + nbytes * 2 * (n - 1) / n / (NCCL_BUSBW_GBS * 1e9)
        done: dict[str, bool] = {}

        def run() -> None:
            if done:
                return
            done["yes"] = True
            total = sum(v[0].view(dtype).astype(np.float64) for v in views)
            for _send, recv in views:
                recv.view(dtype)[:] = total.astype(dtype)

        last = [s.last for s in ops]
        for s, previous in zip(ops, last, strict=True):
            s.ready = ready
            s.last = None
            cuda._enqueue(s, run, seconds, [p for p in last if p is not None] + [previous])


class FakeCommunicator:
    def __init__(self, group: CommGroup, rank: int) -> None:
        self.group, self.rank = group, rank

    def allReduce(
        self, sendbuf: int, recvbuf: int, count: int, datatype: int, op: int, stream: int
    ) -> None:
        device = self.group.devices[self.rank]
        self.group.cuda._call("ncclAllReduce", count, datatype, device=device)
        if self.group.cuda.getDevice() != device and not self.group.cuda.in_group:
            raise RuntimeError("NCCL: one thread driving several GPUs must use groupStart/End")
        self.group.submit(self.rank, (sendbuf, recvbuf, count, datatype, op, stream))

    def destroy(self) -> None:
        return None
