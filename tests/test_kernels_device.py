"""The device boundary: every entry the NumPy fake provides has the real CuPy function's
parameters and every constant its real value, in the CuPy installed here (the test extra
installs cupy-cuda12x).

cuBLAS and NCCL: CuPy's bindings (cupy_backends.cuda.libs.cublas, .nccl) link
libcublas.so.12 and libnccl.so.2, whose wheels are 770 MB and 530 MB. Rather than install
them, the test compiles a stub of each library (every symbol the binding needs, returning
an error status) with the C compiler and preloads it, so that the REAL binding modules
import: their constants are read from them, and their signatures from the line Cython puts
first in each docstring (the binding's declared signature).
"""

from __future__ import annotations

import ctypes
import importlib
import inspect
import os
import re
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from gpudiag.kernels import device

from fakecuda import FakeCommunicator, FakeCuda, FakeStream
from fakecuda_kernels import FakeKernel, FakeModule

cupy = pytest.importorskip("cupy", reason="the test extra installs cupy-cuda12x")

STUBS = {"cublas": "libcublas.so.12", "nccl": "libnccl.so.2"}


def _binding_path(name: str) -> Path:
    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    spec = importlib.util.find_spec("cupy_backends.cuda.libs")
    assert spec is not None and spec.submodule_search_locations
    return Path(next(iter(spec.submodule_search_locations))) / f"{name}{suffix}"


@pytest.fixture(scope="module")
def bindings(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    """The real cuBLAS and NCCL binding modules, loaded over stub libraries."""
    if shutil.which("cc") is None or shutil.which("nm") is None:
        pytest.skip("no C compiler or nm here to build the cuBLAS/NCCL stubs")
    out = tmp_path_factory.mktemp("stubs")
    for name, soname in STUBS.items():
        if f"cupy_backends.cuda.libs.{name}" in sys.modules:
            continue
        symbols = subprocess.run(
            ["nm", "-D", "--undefined-only", str(_binding_path(name))],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split()
        wanted = sorted({s.split("@")[0] for s in symbols if s.startswith(("cublas", "nccl"))})
        (out / f"{name}.c").write_text("".join(f"int {s}(void) {{ return 1; }}\n" for s in wanted))
        (out / f"{name}.map").write_text(f"{soname} {{ global: *; }};\n")
        subprocess.run(
            ["cc", "-shared", "-fPIC", "-o", str(out / soname), f"-Wl,-soname,{soname}",
             f"-Wl,--version-script={out / f'{name}.map'}", str(out / f"{name}.c")],
            check=True,
        )  # fmt: skip
        ctypes.CDLL(str(out / soname), mode=ctypes.RTLD_GLOBAL)
    return {name: importlib.import_module(f"cupy_backends.cuda.libs.{name}") for name in STUBS}


def declared(function: object) -> list[str]:
    """Parameter names from Cython's embedded signature (first docstring line), or from
    inspect where Python has one; `self` left out."""
    try:
        params = list(inspect.signature(function).parameters.values())  # type: ignore[arg-type]
        return [p.name for p in params if p.name != "self"]
    except (TypeError, ValueError):
        pass
    first = (function.__doc__ or "").splitlines()[0]
    m = re.match(r"^[\w.]+\((.*)\)", first)
    assert m, f"no declared signature in {first!r}"
    names = []
    for param in m.group(1).split(","):
        param = param.split("=")[0].strip().replace("\\", "")
        if not param or param in ("*", "self"):
            continue
        names.append(param.split()[-1].lstrip("*"))
    return names


def fake_params(function: object) -> list[str]:
    return [p for p in inspect.signature(function).parameters if p != "self"]  # type: ignore


def _real(bindings: dict[str, object], module: str, path: str) -> object:
    if module.endswith(":cublas"):
        target: object = bindings["cublas"]
    elif module == "cupy.cuda.nccl":
        target = bindings["nccl"]
    else:
        return device.resolve(module, path)
    for part in path.split("."):
        target = getattr(target, part)
    return target


@pytest.mark.parametrize("name", sorted(device.ENTRIES))
def test_every_fake_entry_matches_the_real_cupy(name: str, bindings) -> None:
    real = _real(bindings, *device.ENTRIES[name])
    fake = getattr(FakeCuda(), name)
    if isinstance(real, int):
        assert fake == real, f"{name}: the fake's constant {fake} is {real} in CuPy"
        return
    assert callable(fake)
    expected = declared(real.__init__ if name in ("Stream",) else real)  # type: ignore[misc]
    if name == "nccl_initAll":  # initAll(devices): a list of device ids or a count
        assert expected == ["devices"]
    assert fake_params(fake) == expected, f"{name}: fake {fake_params(fake)} vs {expected}"


METHOD_FAKES = {
    "NcclCommunicator.allReduce": FakeCommunicator.allReduce,
    "NcclCommunicator.destroy": FakeCommunicator.destroy,
    "RawModule.get_function": FakeModule.get_function,
    "RawKernel.__call__": FakeKernel.__call__,
    "Stream.use": FakeStream.use,
    "Stream.__enter__": FakeStream.__enter__,
    "Stream.__exit__": FakeStream.__exit__,
}


@pytest.mark.parametrize("name", sorted(device.METHODS))
def test_every_fake_method_matches_the_real_cupy(name: str, bindings) -> None:
    module, path = device.METHODS[name]
    real = bindings["nccl"] if module.endswith(".nccl") else importlib.import_module(module)
    for part in path.split("."):
        real = getattr(real, part)
    fake = fake_params(METHOD_FAKES[name])
    if name == "RawKernel.__call__":
        # "RawKernel.__call__(self, grid, block, args, **kwargs)", documented on its third
        # line as "__call__(self, grid, block, args, \*, shared_mem=0)"; the keywords go to
        # cupy.cuda.function.Function, whose launches take stream= (its linear_launch's
        # declared signature shows the same keyword).
        doc = real.__doc__.splitlines()
        assert declared(real) == ["grid", "block", "args", "kwargs"]
        assert doc[2].strip() == r"__call__(self, grid, block, args, \*, shared_mem=0)"
        from cupy.cuda import function

        assert "stream=None" in function.Function.linear_launch.__doc__.splitlines()[0]
        assert fake == ["grid", "block", "args", "shared_mem", "stream"]
        return
    assert fake == declared(real), f"{name}: fake {fake} vs {declared(real)}"


def test_the_real_boundary_resolves_runtime_entries_without_a_gpu() -> None:
    from cupy_backends.cuda.api import runtime

    api = device.CudaApi()
    assert api.memcpyAsync is runtime.memcpyAsync
    assert api.memcpyHostToDevice == runtime.memcpyHostToDevice
    with pytest.raises(AttributeError, match="no entry"):
        api.cudaMalloc  # noqa: B018


def test_the_fake_refuses_what_cuda_refuses() -> None:
    import numpy as np

    cuda = FakeCuda(2)
    cuda.setDevice(0)
    stream = cuda.Stream(non_blocking=True)
    pointer = cuda.malloc(64)
    host = np.zeros(8, np.float64)
    with pytest.raises(RuntimeError, match="not registered"):
        cuda.memcpyAsync(host.ctypes.data, pointer, 64, cuda.memcpyDeviceToHost, stream.ptr)
    cuda.hostRegister(host.ctypes.data, 64, 0)
    with pytest.raises(RuntimeError, match="is not registered"):  # kind backwards
        cuda.memcpyAsync(host.ctypes.data, pointer, 64, cuda.memcpyHostToDevice, stream.ptr)
    cuda.memcpyAsync(host.ctypes.data, pointer, 64, cuda.memcpyDeviceToHost, stream.ptr)
    assert host.tolist() == [0.0] * 8  # not run yet: nothing waited for it
    cuda.streamSynchronize(stream.ptr)
    assert host.view(np.uint8).tolist() == [0xFF] * 64  # uninitialised device memory
    start, stop = cuda.eventCreateWithFlags(0), cuda.eventCreateWithFlags(0)
    cuda.eventRecord(start, stream.ptr)
    cuda.eventRecord(stop, stream.ptr)
    with pytest.raises(RuntimeError, match="NotReady"):
        cuda.eventElapsedTime(start, stop)
    cuda.setDevice(1)
    with pytest.raises(RuntimeError, match="stream of device 0"):
        cuda.eventRecord(stop, stream.ptr)


def test_the_cuda_extras_bring_cupys_toolkit_wheels_and_nccl() -> None:
    """A driver-only node: the extra must bring cuBLAS, NVRTC and the runtime (CuPy's
    `ctk` extra, which CuPy 13 lacks) and NCCL. Checked against the installed CuPy's own
    metadata."""
    from importlib.metadata import requires

    from gpudiag.tomlcompat import tomllib

    from conftest import REPO

    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    assert "cupy-cuda12x[ctk]>=14" in extras["cuda12"]
    assert "cupy-cuda13x[ctk]>=14" in extras["cuda13"]
    assert any(r.startswith("nvidia-nccl-cu12") for r in extras["cuda12"])
    ctk = [r for r in requires("cupy-cuda12x") or [] if 'extra == "ctk"' in r]
    assert len(ctk) == 1
    wanted = re.match(r"cuda-toolkit\[([\w,]+)\]", ctk[0])
    assert wanted and {"cublas", "cudart", "nvrtc"} <= set(wanted.group(1).split(","))


def test_the_gpu_benchmark_says_in_one_line_that_it_needs_a_gpu(wheel_venv) -> None:
    from conftest import REPO

    # no GPU here; on a GPU node the devices are hidden (CUDA_VISIBLE_DEVICES=-1); in the
    # wheel's environment built once per run (benchmarks/_wheel.py)
    result = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "gpu_kernels.py")],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**os.environ, "CUDA_VISIBLE_DEVICES": "-1", "GPUDIAG_BENCH_VENV": str(wheel_venv)},
    )
    assert result.returncode == 3
    assert result.stderr.startswith("gpu_kernels: ") and "GPU" in result.stderr


# ------------------------------------------------------------------ the fake's streams


def _gemm_args(cuda: FakeCuda, n: int, data_type: int, b_type: int | None = None) -> tuple:
    """gemmEx arguments for n x n float32/float64 matrices already on the device."""
    import numpy as np

    scalar = np.float64 if data_type == cuda.CUDA_R_64F else np.float32
    item = 8 if data_type == cuda.CUDA_R_64F else 4
    a, b, c = (cuda.malloc(n * n * item) for _ in range(3))
    for pointer in (a, b):
        cuda.device_view(pointer, n * n * item)[:] = np.ones(n * n, scalar).view(np.uint8)
    one, zero = np.ones(1, scalar), np.zeros(1, scalar)
    compute = cuda.cublas_CUBLAS_COMPUTE_64F if item == 8 else cuda.cublas_CUBLAS_COMPUTE_32F
    op = cuda.cublas_CUBLAS_OP_N
    args = (op, op, n, n, n, one.ctypes.data, a, data_type, n, b,
            data_type if b_type is None else b_type, n, zero.ctypes.data, c, data_type, n,
            compute, cuda.cublas_CUBLAS_GEMM_DEFAULT)  # fmt: skip
    return args, (one, zero), c


def test_the_fakes_current_stream_is_per_device_and_thread_as_cupys() -> None:
    import threading

    cuda = FakeCuda(2)
    cuda.setDevice(0)
    legacy = cuda.get_current_stream()
    assert legacy.ptr == 0 and cuda.get_current_stream(1).ptr == 0
    s = cuda.Stream(non_blocking=True)
    with s:
        assert cuda.get_current_stream() is s
        assert cuda.get_current_stream(1).ptr == 0  # device 1's is its own
        seen = {}
        thread = threading.Thread(target=lambda: seen.setdefault("s", cuda.get_current_stream()))
        thread.start()
        thread.join()
        assert seen["s"].ptr == 0  # another thread's current stream is not this one
    assert cuda.get_current_stream() is legacy
    s.use()
    assert cuda.get_current_stream() is s
    cuda.setDevice(1)
    with pytest.raises(RuntimeError, match=r"created on \(0\) does not match"):
        s.use()
    with pytest.raises(RuntimeError, match="does not match"):
        s.__enter__()


def test_the_fakes_gemm_runs_on_the_current_stream_not_the_handles() -> None:
    """As cupy_backends.cuda.libs.cublas.gemmEx: setStream(handle, current) first."""
    cuda = FakeCuda(1)
    cuda.setDevice(0)
    s = cuda.Stream(non_blocking=True)
    handle = cuda.cublas_create()
    cuda.cublas_setStream(handle, s.ptr)
    args, _keep, _c = _gemm_args(cuda, 128, cuda.CUDA_R_32F)
    cuda.cublas_gemmEx(handle, *args)
    assert cuda.handles[handle]["stream"] == 0  # the current stream: the legacy default
    assert s.last is None and cuda.legacy[0].last is not None
    with s:
        cuda.cublas_gemmEx(handle, *args)
    assert cuda.handles[handle]["stream"] == s.ptr and s.last is not None


def test_the_legacy_default_stream_orders_blocking_streams_but_not_non_blocking_ones() -> None:
    cuda = FakeCuda(1)
    cuda.setDevice(0)
    blocking, free = cuda.Stream(), cuda.Stream(non_blocking=True)
    handle = cuda.cublas_create()
    args, _keep, c = _gemm_args(cuda, 256, cuda.CUDA_R_32F)
    after = {}
    gemm_seconds = 2 * 256**3 / 2e12  # at the fake's 2 TFLOP/s FP32: 17 us; a call is 1 us
    for name, stream in (("blocking", blocking), ("free", free)):
        cuda.deviceSynchronize()
        submitted = cuda.host_time
        cuda.cublas_gemmEx(handle, *args)  # on the legacy default stream
        event = cuda.eventCreateWithFlags(0)
        cuda.eventRecord(event, stream.ptr)
        after[name] = cuda.events[event].time - submitted
    # the blocking stream's event waited for the GEMM; the non-blocking one's did not
    assert after["blocking"] >= gemm_seconds > after["free"]
    # and a non-blocking stream's kernel reads what an unfinished GEMM has not written
    cuda.deviceSynchronize()
    out = cuda.malloc(4)
    with free:
        cuda.device_view(c, 4)[:] = 0xFF
        cuda.cublas_gemmEx(handle, *args)  # now on `free`: ordered with the copy below
    import numpy as np

    host = np.zeros(1, np.float32)
    cuda.hostRegister(host.ctypes.data, 4, 0)
    cuda.memcpyAsync(host.ctypes.data, c, 4, cuda.memcpyDeviceToHost, free.ptr)
    cuda.streamSynchronize(free.ptr)
    assert host[0] == 256.0  # ordered: the product
    cuda.device_view(c, 4)[:] = 0
    cuda.cublas_gemmEx(handle, *args)  # legacy again
    cuda.memcpyAsync(host.ctypes.data, c, 4, cuda.memcpyDeviceToHost, free.ptr)
    cuda.streamSynchronize(free.ptr)
    assert host[0] == 0.0  # raced: the copy ran before the GEMM wrote C
    cuda.hostUnregister(host.ctypes.data)
    cuda.free(out)


def test_a_kernel_launched_without_a_stream_runs_on_the_current_one() -> None:
    from importlib import resources

    import numpy as np

    cuda = FakeCuda(1)
    cuda.setDevice(0)
    source = (resources.files("gpudiag.kernels") / "burn.cu").read_text(encoding="utf-8")
    compare = cuda.RawModule(code=source).get_function("burn_compare_32")
    s = cuda.Stream(non_blocking=True)
    a, b, counts = cuda.malloc(64), cuda.malloc(64), cuda.malloc(16)
    args = (np.uint64(a), np.uint64(b), np.uint64(16), np.uint32(0x7F800000),
            np.uint32(0x007FFFFF), np.uint64(counts))  # fmt: skip
    compare((1,), (32,), args)
    assert cuda.legacy[0].last is not None and s.last is None
    with s:
        compare((1,), (32,), args)
    assert s.last is not None


def test_the_fake_refuses_mixed_gemm_types_and_a_wrong_copy_direction() -> None:
    import numpy as np

    cuda = FakeCuda(1)
    cuda.setDevice(0)
    handle = cuda.cublas_create()
    args, _keep, _c = _gemm_args(cuda, 16, cuda.CUDA_R_32F, b_type=cuda.CUDA_R_16F)
    with pytest.raises(RuntimeError, match="NOT_SUPPORTED: mixed data types"):
        cuda.cublas_gemmEx(handle, *args)
    s = cuda.Stream(non_blocking=True)
    pointer, host = cuda.malloc(64), np.zeros(8, np.float64)
    cuda.hostRegister(host.ctypes.data, 64, 0)
    with pytest.raises(RuntimeError, match="cudaErrorInvalidMemcpyDirection"):
        cuda.memcpyAsync(pointer, host.ctypes.data, 64, 7, s.ptr)
    with pytest.raises(RuntimeError, match="is not device memory"):  # D2D from the host
        cuda.memcpyAsync(pointer, host.ctypes.data, 64, cuda.memcpyDeviceToDevice, s.ptr)
    with pytest.raises(RuntimeError, match="is not registered"):  # H2D the wrong way
        cuda.memcpyAsync(host.ctypes.data, pointer, 64, cuda.memcpyHostToDevice, s.ptr)
    cuda.hostUnregister(host.ctypes.data)


def test_the_fakes_tables_are_read_under_its_lock() -> None:
    """A burn thread allocating while another reads the tables: no "dictionary changed
    size during iteration" (the lock-free reads failed a burn test under load)."""
    import threading

    cuda = FakeCuda(2)
    cuda.setDevice(0)
    base = [cuda.malloc(64) for _ in range(300)][-1]  # a table long enough to be caught
    stop = threading.Event()
    errors: list[BaseException] = []

    def churn() -> None:
        cuda.setDevice(1)
        try:
            while not stop.is_set():
                cuda.free(cuda.malloc(64))
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=churn)
    thread.start()
    try:
        for _ in range(1000):  # the lock-free reads failed within a few hundred
            cuda.device_view(base, 64, 0)
            cuda._owner(base)
            cuda._is_device(base)
    finally:
        stop.set()
        thread.join()
    assert not errors
