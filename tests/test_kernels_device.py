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
import re
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from gpudiag.kernels import device

from fakecuda import FakeCommunicator, FakeCuda, FakeKernel, FakeModule

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


def test_the_gpu_benchmark_says_in_one_line_that_it_needs_a_gpu() -> None:
    from conftest import REPO

    result = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "gpu_kernels.py")],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 3
    assert result.stderr.startswith("gpu_kernels: ") and "GPU" in result.stderr
