"""The fake CUDA's kernels (tests/fakecuda.py, split from it by subject): a RawModule
compiles the .cu source it is given for the host (tests/fakekernels.py) and finds each
kernel by the name the source gives it; a RawKernel checks its arguments as CuPy passes
them and the device pointers it is given (owner, peer access, bounds) and runs the
kernel's own source over the grid when its stream reaches it, timed by its bytes at the
fake GPU's memory rate or, where all its arrays fit the L2, at the L2's (CacheModel)."""

from __future__ import annotations

import re
import zlib
from typing import TYPE_CHECKING, Any

import numpy as np
from fakekernels import HostModule

from fakecuda import (
    L2_GBS,
    LOCAL_LATENCY_S,
    MEMORY_GBS,
    PEER_LATENCY_S,
    CUDARuntimeError,
)

if TYPE_CHECKING:
    from fakecuda import Device, FakeCuda, FakeStream


def _param_types(params: str, t: str = "") -> list[str]:
    """C parameter types ("double*", "index_t", "unsigned short*") of a parameter list."""
    types = []
    for param in params.split(","):
        words = param.replace("const", "").replace("__restrict__", "").replace("*", " ").split()
        base = " ".join(words[:-1])
        kind = (t if base == "T" else base) + ("*" if "*" in param else "")
        # a pointer to const: memory the kernel only reads (the memo of FakeKernel)
        types.append(f"const {kind}" if "*" in param and "const" in param else kind)
    return types


def _stream_signatures(source: str) -> dict[str, list[str]]:
    """The kernels a .cu file defines, with their parameter types, read from its source
    (stream.cu's are instantiated through its macro)."""
    kernels: dict[str, list[str]] = {}
    macro = re.search(r"#define GPUDIAG_STREAM_KERNELS\(T, SUFFIX\)(.*?)\n\n", source, re.S)
    for t, suffix in re.findall(r"^GPUDIAG_STREAM_KERNELS\((\w+), (\w+)\)", source, re.M):
        assert macro is not None
        body = macro.group(1).replace("##SUFFIX", suffix).replace("\\\n", "\n")
        for name, params in re.findall(r"__global__ void (\w+)\(([^)]*)\)", body):
            kernels[name] = _param_types(params, t)
    for name, params in re.findall(r'^extern "C" __global__ void (\w+)\(([^)]*)\)', source, re.M):
        kernels[name] = _param_types(params)
    return kernels


SCALARS = {
    "float": np.float32,
    "double": np.float64,
    "index_t": np.uint64,
    "unsigned short": np.uint16,
    "unsigned int": np.uint32,
}


class FakeModule:
    """A RawModule: the source compiled for the host (tests/fakekernels.py), each kernel
    found by the name the source gives it."""

    def __init__(self, cuda: FakeCuda, code: str) -> None:
        self.cuda, self.code = cuda, code
        self.signatures = _stream_signatures(code)
        self.host = HostModule(code, self.signatures)

    def get_function(self, name: str) -> FakeKernel:
        if name not in self.signatures:
            raise RuntimeError(f"CUDA_ERROR_NOT_FOUND: no kernel named {name}")
        return FakeKernel(self.cuda, self, name, self.signatures[name])


class FakeKernel:
    """A RawKernel: its arguments checked as CuPy passes them (NumPy scalars of the
    parameter's type, pointers as uint64), the device pointers it is given checked
    (owner, peer access, bounds), then the kernel's own source run over the grid on the
    host when the stream reaches it; its time is its bytes at the device's memory rate,
    or at its L2 rate where all the arrays it touches fit the L2 (CacheModel)."""

    def __init__(self, cuda: FakeCuda, module: FakeModule, name: str, types: list[str]) -> None:
        self.cuda, self.module, self.name, self.types = cuda, module, name, types
        self.memo: dict[str, list[np.ndarray]] = {}  # _key -> the bytes it wrote

    def __call__(self, grid: Any, block: Any, args: Any, *, shared_mem: int = 0,
                 stream: Any = None) -> None:  # fmt: skip
        cuda = self.cuda
        device = cuda._call(f"launch {self.name}", grid, block)
        # cupy.cuda.function: stream=None launches on the current stream
        s = cuda._stream((stream or cuda.get_current_stream()).ptr, device)
        if len(args) != len(self.types):
            raise TypeError(f"{self.name}: {len(args)} arguments for {len(self.types)} parameters")
        blocks, threads = int(grid[0]), int(block[0])
        if threads > 1024 or threads & (threads - 1):
            raise RuntimeError("block size must be a power of two up to 1024")
        values: list[Any] = []
        for arg, kind in zip(args, self.types, strict=True):
            if kind.endswith("*"):
                if type(arg) is not np.uint64:
                    raise TypeError(f"{self.name}: pointer passed as {type(arg).__name__}")
                values.append(int(arg))
            else:
                expected = SCALARS[kind]
                if type(arg) is not expected:
                    raise TypeError(f"{self.name}: {kind} passed as {type(arg).__name__}")
                values.append(arg)
        if self.name == "peer_latency_chase":
            self._chase(s, device, values)
            return
        views = self._views(device, values, blocks)
        host = self.module.host
        writes = [
            view
            for view, kind in zip(views, [k for k in self.types if k.endswith("*")], strict=True)
            if not kind.startswith("const ")
        ]

        def run() -> None:
            barriers = host.barriers[self.name]  # None until its first launch
            key = self._key(blocks, threads, values, views) if barriers else ""
            if key in self.memo:
                for view, after in zip(writes, self.memo[key], strict=True):
                    view[:] = after
                return
            before = [v.copy() for v in views] if barriers is None else []

            def restore() -> None:  # a first launch that reached a barrier, run again
                for view, old in zip(views, before, strict=True):
                    view[:] = old

            host.launch(self.name, blocks, threads, values, restore)
            cuda.check_canaries(values)
            if host.barriers[self.name]:
                key = key or self._key(blocks, threads, values, before)
                self.memo = {**dict(list(self.memo.items())[-7:]), key: [w.copy() for w in writes]}

        touched = sum(v.nbytes for v in views)
        cuda._enqueue(s, run, CacheModel.seconds(cuda.devices[device], views, touched))

    def _views(self, device: int, values: list[Any], blocks: int) -> list[np.ndarray]:
        """The device memory each pointer argument reaches, checked as the GPU would
        (owner, peer access, bounds): n elements of the element type for STREAM's and
        the burn's arrays, a partial sum per block, the burn's two counters."""
        cuda = self.cuda
        if self.name.startswith("burn_compare_"):
            item = int(self.name.rsplit("_", 1)[1]) // 8
            product, reference, n, _e, _m, counts = values
            sizes = ((product, int(n) * item), (reference, int(n) * item), (counts, 16))
            return [cuda.device_view(p, size, device) for p, size in sizes]
        item = 4 if self.name.endswith("f32") else 8
        n = int(values[-1])
        views = []
        for kind, value in zip(self.types, values, strict=True):
            if kind.endswith("*"):
                count = blocks if self.name.startswith("stream_dot") and len(views) == 2 else n
                views.append(cuda.device_view(value, count * item, device))
        return views

    @staticmethod
    def _key(blocks: int, threads: int, values: list[Any], views: list[np.ndarray]) -> str:
        """A launch's grid, arguments and the bytes its arrays held before it (a CRC-32
        and the length of each): a kernel with barriers (stream.cu's dot, whose threads
        run as fibers, slowly) launched again on the same key writes what its last such
        launch wrote (`memo`)."""
        sums = [
            (zlib.crc32(memoryview(np.ascontiguousarray(v)).cast("B")), v.nbytes) for v in views
        ]
        return repr((blocks, threads, [str(v) for v in values], sums))

    def _chase(self, s: FakeStream, device: int, values: list[Any]) -> None:
        """copies.cu's pointer chase: the chain walked here first (every link must be
        memory this device may read: a wrong link would crash the host, not raise), then
        the kernel itself run."""
        cuda = self.cuda
        chain, steps, out = values
        owner = cuda._owner(chain)
        cuda.device_view(chain, 8, device)  # the peer-access check, now as on a GPU
        cuda.device_view(out, 8, device)

        def run() -> None:
            p, seen = chain, set()
            while p not in seen and len(seen) < min(int(steps), 1 << 16):
                seen.add(p)
                p = int(cuda.device_view(p, 8, device).view(np.uint64)[0])
            if p not in seen and len(seen) < int(steps):
                raise CUDARuntimeError("cudaErrorIllegalAddress: the chain does not close")
            self.module.host.launch(self.name, 1, 1, values)

        latency = PEER_LATENCY_S if owner != device else LOCAL_LATENCY_S
        cuda._enqueue(s, run, int(steps) * latency)


class CacheModel:
    """The fake GPU's L2: a kernel whose arrays all fit it runs at L2_GBS, else at the
    device memory's MEMORY_GBS, as STREAM on a real GPU reports the cache's bandwidth for
    arrays under its L2 (the reason for STREAM's rule: arrays at least 4x the cache)."""

    @staticmethod
    def seconds(device: Device, views: list[np.ndarray], touched: int) -> float:
        resident = sum(v.nbytes for v in views) <= device.l2_bytes
        return touched / ((L2_GBS if resident else MEMORY_GBS) * 1e9)
