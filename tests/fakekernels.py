"""kernels/*.cu run on the host, for the CUDA fake (tests/fakecuda.py, fakecuda_kernels.py).

The fake's RawModule compiles the source it is given (the real burn.cu, stream.cu,
copies.cu, or a test's changed copy) with the system g++ against tests/cuhost/cuda_host.h,
which maps __global__, threadIdx, blockIdx, blockDim, gridDim, __shared__, atomicAdd,
float4/double2 and __syncthreads to a loop over the grid; one generated C function per
kernel launches it, loaded with ctypes. A wrong index or a half compare in a kernel is
then a wrong result in the tests, as it would be on a GPU.

Each distinct source is compiled once into a folder (GPUDIAG_CUHOST_DIR, which the tests'
`host_kernels` fixture sets to a folder built once per pytest run, tests/conftest.py;
else a folder of this machine's temporary directory), named by a digest of the source,
the header and this generator, so that every xdist worker and every subprocess of the
run loads the same build.
"""

from __future__ import annotations

import ctypes
import fcntl
import hashlib
import os
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path
from typing import Any

HEADER = Path(__file__).parent / "cuhost" / "cuda_host.h"
FLAGS = ("-std=c++17", "-O2", "-fno-strict-aliasing", "-shared", "-fPIC", "-w")
SCALARS = {
    "float": ctypes.c_float,
    "double": ctypes.c_double,
    "index_t": ctypes.c_uint64,
    "unsigned short": ctypes.c_uint16,
    "unsigned int": ctypes.c_uint32,
}
# one launch at a time: a module's grid state (threadIdx, fibers) is global
_LAUNCH = threading.Lock()
_LOADED: dict[Path, ctypes.CDLL] = {}


class KernelFault(RuntimeError):
    """What a kernel did that a GPU would refuse or that the harness cannot run."""


def folder() -> Path:
    """Where builds go (see the module docstring)."""
    named = os.environ.get("GPUDIAG_CUHOST_DIR")
    if named:
        return Path(named)
    return Path(tempfile.gettempdir()) / f"gpudiag-tests-cuhost-{os.getuid()}"


def translation_unit(signatures: dict[str, list[str]]) -> str:
    """The source included after the header, and one launch function per kernel:
    gd_launch_NAME(grid, block, fibers, args), args[i] pointing at parameter i's value
    (a pointer parameter's value is the device address, here a host one)."""
    lines = ['#include "cuda_host.h"', '#include "kernel.cu"']
    for name, types in signatures.items():
        values = ", ".join(
            f"*reinterpret_cast<{kind}{' const' if kind.endswith('*') else ''}*>(a[{i}])"
            for i, kind in enumerate(types)
        )
        lines.append(f"static void gd_call_{name}(void** a) {{ {name}({values}); }}")
        lines.append(
            f'extern "C" int gd_launch_{name}(unsigned grid, unsigned block, int fibers, '
            f"void** a) {{ return gd::launch(grid, block, fibers, gd_call_{name}, a); }}"
        )
    return "\n".join(lines) + "\n"


def build(code: str, signatures: dict[str, list[str]], where: Path | None = None) -> Path:
    """The shared library of `code` (compiled if this folder has none yet)."""
    unit = translation_unit(signatures)
    digest = hashlib.sha256(
        "\0".join((code, unit, HEADER.read_text(), " ".join(FLAGS))).encode()
    ).hexdigest()[:20]
    base = where or folder()
    base.mkdir(parents=True, exist_ok=True)
    library = base / f"{digest}.so"
    with open(base / ".lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            if not library.exists():
                work = Path(tempfile.mkdtemp(dir=base))
                try:
                    (work / "kernel.cu").write_text(code)
                    (work / "unit.cpp").write_text(unit)
                    compiler = shutil.which("g++")
                    if compiler is None:
                        raise KernelFault("g++ is not installed: apt-get install g++")
                    command = [compiler, *FLAGS, f"-I{HEADER.parent}", "-o", "out.so", "unit.cpp"]
                    done = subprocess.run(command, cwd=work, capture_output=True, text=True)
                    if done.returncode != 0:
                        raise KernelFault(f"the kernel source does not compile:\n{done.stderr}")
                    os.replace(work / "out.so", library)
                finally:
                    shutil.rmtree(work, ignore_errors=True)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    return library


class HostModule:
    """A compiled kernel source: launch(name, grid, block, args) runs a kernel."""

    def __init__(self, code: str, signatures: dict[str, list[str]]) -> None:
        self.signatures = signatures
        path = build(code, signatures)
        if path not in _LOADED:
            _LOADED[path] = ctypes.CDLL(str(path))
        self.library = _LOADED[path]
        # per kernel: whether it reached __syncthreads (None: not launched yet)
        self.barriers: dict[str, bool | None] = dict.fromkeys(signatures)

    def launch(
        self, name: str, grid: int, block: int, values: list[Any], restore: Any = None
    ) -> None:
        """Run kernel `name` over the grid; `values`: each parameter's value (an int
        address for a pointer, a NumPy scalar of the parameter's type otherwise). Its
        threads run one after another; on its first launch, one that reaches
        __syncthreads is abandoned there, `restore()` puts its memory back, and it runs
        again (and from then on) with each block's threads as fibers."""
        holders = []
        for kind, value in zip(self.signatures[name], values, strict=True):
            ctype = ctypes.c_uint64 if kind.endswith("*") else SCALARS[kind]
            holders.append(ctype(int(value) if kind.endswith("*") else value.item()))
        args = (ctypes.c_void_p * len(holders))(*(ctypes.addressof(h) for h in holders))
        function = getattr(self.library, f"gd_launch_{name}")
        function.restype = ctypes.c_int
        function.argtypes = (ctypes.c_uint, ctypes.c_uint, ctypes.c_int, ctypes.c_void_p)
        with _LAUNCH:
            code = function(grid, block, int(bool(self.barriers[name])), args)
            if code == -1 and self.barriers[name] is None and restore is not None:
                restore()
                code = function(grid, block, 1, args)
        if code == -2:
            raise KernelFault(f"{name}: a block of {block} threads (1 to 1024)")
        if code == -1:
            raise KernelFault(f"{name} reached __syncthreads only on a later launch")
        if self.barriers[name] is None:
            self.barriers[name] = code == 1
