"""STREAM: the shared runner and verifier on the CPU for real, and every .cu compiled."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import threading
from pathlib import Path

import numpy as np
import pytest

from gpudiag.kernels import stream
from gpudiag.model import ProbeStatus

from conftest import REPO

N = 1 << 20


def test_gold_values_follow_the_recurrence() -> None:
    a, b, c, dot = stream.gold_values(1, np.float64)
    assert (c, b) == pytest.approx((0.1 + 0.04, 0.04))  # c = a, b = 0.4 c, c = a + b
    assert a == pytest.approx(0.04 + 0.4 * 0.14)
    assert dot == pytest.approx(a * b)


ENGINES = ["numba", "numpy"]
THREADS = {"one-thread": [[0]], "all-cpus": []}
N_LARGE = 1 << 22  # a float32 sum of this many terms, one by one, is off by more than 1e-4


@pytest.mark.parametrize("threads", THREADS)
@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_cpu_stream_runs_verifies_and_counts_bytes(dtype, engine, threads) -> None:
    ops = stream.CpuOperations(N, dtype, cpus_per_thread=THREADS[threads], engine=engine)
    try:
        results = stream.run_stream(ops, device="cpu", trials=4, warmup=1)
    finally:
        ops.close()
    assert [r.metric for r in results] == list(stream.OPERATIONS)
    for result in results:
        assert result.status is ProbeStatus.OK, result.error
        assert len(result.samples) == 4 and result.stats is not None
        assert result.unit == "GB/s" and all(s > 0 for s in result.samples)
    assert dict(results[0].params)["dtype"] == ("fp64" if dtype == np.float64 else "fp32")
    assert dict(results[0].params)["engine"] == engine


def test_the_large_size_defeats_a_fixed_fp32_bound() -> None:
    """The size below is large enough that the old fixed 1e-4 failed: a float32 sum of its
    terms formed one after another (as BLAS may, per lane) is off by more than that."""
    _, _, _, product = stream.gold_values(1, np.float32)
    recursive = np.cumsum(np.full(N_LARGE, product, dtype=np.float32))[-1]
    assert abs(float(recursive) - product * N_LARGE) / (product * N_LARGE) > 1e-4


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_one_thread_over_a_large_array_verifies(dtype, engine) -> None:
    """One thread summing four million terms: where the NumPy fallback's FP32 dot failed."""
    ops = stream.CpuOperations(N_LARGE, dtype, cpus_per_thread=[[0]], engine=engine)
    try:
        results = stream.run_stream(ops, device="cpu", trials=2, warmup=0)
    finally:
        ops.close()
    assert all(r.status is ProbeStatus.OK for r in results), results[0].error


def test_bounds_follow_from_the_arithmetic() -> None:
    eps64 = float(np.finfo(np.float64).eps)
    # 25 rounds between refills: BabelStream's 100 epsilon, checked on every element
    assert stream.array_bound(stream.RESET_ROUNDS, np.float64) == pytest.approx(100 * eps64)
    assert stream.summation_bound(10, 0.5**24) == pytest.approx(10 * 0.5**24, rel=1e-5)
    assert stream.summation_bound(1 << 30, 0.5**24) == float("inf")
    for engine in ENGINES:
        small = stream.CpuOperations(1 << 16, np.float32, cpus_per_thread=[[0]], engine=engine)
        large = stream.CpuOperations(1 << 24, np.float32, cpus_per_thread=[[0]], engine=engine)
        try:
            # a pairwise (NumPy) or float64 (Numba) sum: 256 times the terms, a bound far
            # from 256 times wider
            assert large.dot_bound() < 4 * small.dot_bound() < 1e-5
        finally:
            small.close()
            large.close()


def test_long_runs_refill_before_the_values_underflow() -> None:
    a_after_3000 = stream.gold_values(3000, np.float32)[0]
    assert a_after_3000 < np.finfo(np.float32).tiny  # unchecked, a --seconds run ends in zeros
    checked = []

    class Counting(stream.CpuOperations):
        def reset(self, arrays):
            checked.append(True)
            super().reset(arrays)

    ops = Counting(1 << 12, np.float32, cpus_per_thread=[[0]])
    try:
        results = stream.run_stream(ops, device="cpu", trials=3 * stream.RESET_ROUNDS, warmup=0)
    finally:
        ops.close()
    assert all(r.status is ProbeStatus.OK for r in results), results[0].error
    assert len(checked) == 1 + 2  # allocation, then after rounds 25 and 50


N_PLANTED = 1 << 16  # small enough that one term of the dot (1/n) exceeds every dot bound
OUTPUT = {"copy": "c", "scale": "b", "add": "c", "triad": "a"}


@pytest.mark.parametrize("operation", stream.OPERATIONS)
@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_one_wrong_element_is_caught_in_every_operation(operation, engine, dtype) -> None:
    class Planted(stream.CpuOperations):
        def run(self, op, arrays):
            super().run(op, arrays)
            if op != operation:
                return
            if op == "dot":  # one term counted twice
                arrays.dot += float(arrays.a[7] * arrays.b[7])
            else:  # one element off by a thousandth of itself
                array = getattr(arrays, OUTPUT[op])
                array[N_PLANTED // 2] *= 1.001

    ops = Planted(N_PLANTED, dtype, cpus_per_thread=[[0]], engine=engine)
    try:
        results = stream.run_stream(ops, device="cpu", trials=2, warmup=0)
    finally:
        ops.close()
    assert all(r.status is ProbeStatus.ERROR for r in results)
    assert "verification failed" in results[0].error


def test_cancel_stops_between_rounds() -> None:
    cancel = threading.Event()
    seen = []

    def progress(fraction: float) -> None:
        seen.append(fraction)
        cancel.set()

    ops = stream.CpuOperations(N, np.float64)
    try:
        results = stream.run_stream(
            ops, device="cpu", trials=50, warmup=0, cancel=cancel, progress=progress
        )
    finally:
        ops.close()
    assert len(seen) == 1
    assert all(r.status is ProbeStatus.CANCELLED for r in results)
    assert all(r.stats is None and not r.samples for r in results)  # one trial: no figure


def test_cancel_keeps_the_trials_measured_and_says_so() -> None:
    cancel = threading.Event()
    seen = []

    def progress(fraction: float) -> None:
        seen.append(fraction)
        if len(seen) == 3:
            cancel.set()

    ops = stream.CpuOperations(N, np.float64)
    try:
        results = stream.run_stream(
            ops, device="cpu", trials=50, warmup=1, cancel=cancel, progress=progress
        )
    finally:
        ops.close()
    assert all(r.status is ProbeStatus.CANCELLED for r in results)
    assert all(len(r.samples) == 2 and r.stats is not None for r in results)
    assert results[0].error == "cancelled after 2 of 50 trials"


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="pinning two threads needs two CPUs")
def test_threads_are_pinned_to_their_cpus() -> None:
    ops = stream.CpuOperations(N, np.float64, cpus_per_thread=[[0], [1]])
    try:
        stream.run_stream(ops, device="cpu", trials=2, warmup=0)
        assert ops.pinned == [True, True]
    finally:
        ops.close()


CU_FILES = sorted((REPO / "kernels").glob("*.cu"))


def _nvcc() -> str | None:
    found = shutil.which("nvcc")
    candidates = sorted(Path("/usr/local").glob("cuda*/bin/nvcc"), reverse=True)
    return found or (str(candidates[0]) if candidates else None)


NVCC = _nvcc()
ARCHES = ("sm_80", "sm_90", "sm_100")


@pytest.mark.skipif(NVCC is None, reason="nvcc is not installed here (nor in /usr/local/cuda*)")
@pytest.mark.parametrize("arch", ARCHES)
def test_every_stream_kernel_loads_128_bits_at_a_time(arch: str, tmp_path: Path) -> None:
    """Each STREAM kernel's PTX holds 16-byte vector loads (ld.global[.nc].v2.f64 /
    .v4.f32)."""
    source = REPO / "kernels" / "stream.cu"
    ptx = tmp_path / "out.ptx"
    result = subprocess.run(
        [str(NVCC), "-ptx", "-std=c++17", f"-arch={arch}", str(source), "-o", str(ptx)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    vector = re.compile(r"ld\.global(\.nc)?\.v(2\.f64|4\.f32|2\.u64|4\.u32|2\.b64|4\.b32)")
    kernels: dict[str, bool] = {}
    name = ""
    for line in ptx.read_text().splitlines():
        if m := re.match(r"^\.visible \.entry (\w+)\(", line.strip()):
            name = m.group(1)
            kernels[name] = False
        elif name and vector.search(line):
            kernels[name] = True
    assert len(kernels) == 10, sorted(kernels)
    assert all(kernels.values()), [k for k, v in kernels.items() if not v]


@pytest.mark.skipif(NVCC is None, reason="nvcc is not installed here (nor in /usr/local/cuda*)")
@pytest.mark.parametrize("source", CU_FILES, ids=lambda p: p.name)
def test_every_cuda_file_compiles_for_sm80_sm90_and_sm100(source: Path, tmp_path: Path) -> None:
    arches = [f"-gencode=arch=compute_{a[3:]},code={a}" for a in ARCHES]
    result = subprocess.run(
        [str(NVCC), "-c", "-std=c++17", *arches, str(source), "-o", str(tmp_path / "out.o")],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr


def test_the_compiled_loops_are_used_where_numba_is_installed() -> None:
    ops = stream.CpuOperations(N, np.float64)
    ops.close()
    assert ops.engine == "numba"  # the test extra installs numba (cpu-kernels)


def test_there_is_cuda_source_to_compile() -> None:
    assert [p.name for p in CU_FILES] == ["burn.cu", "copies.cu", "stream.cu"]


def test_cli_runs_cpu_stream_per_numa_node() -> None:
    from conftest import run_cli

    result = run_cli("run", "stream", "--device", "cpu", "--size", str(8 * 2**20), "--trials", "3")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("kernel")
    triad = [line for line in lines if line.startswith("stream.triad")]
    assert triad and all(line.rstrip().endswith("GB/s") for line in triad)


def _tree_with_an_nvidia_gpu(folder: Path) -> Path:
    """A host tree whose PCI bus lists one NVIDIA GPU (vendor 0x10de, class 0x0302): CuPy's
    or the driver's absence is then the reason no GPU kernel runs, not the bus."""
    function = folder / "sys" / "bus" / "pci" / "devices" / "0000:1b:00.0"
    function.mkdir(parents=True)
    (function / "vendor").write_text("0x10de\n")
    (function / "class").write_text("0x030200\n")
    return folder


def test_cli_gpu_without_cupy_says_so(tmp_path: Path) -> None:
    from conftest import run_cli

    for package in ("cupy", "cupy_backends"):  # shadow the installed CuPy: not importable
        (tmp_path / package).mkdir()
        (tmp_path / package / "__init__.py").write_text("raise ImportError('shadowed')\n")
    root = _tree_with_an_nvidia_gpu(tmp_path / "root")
    result = run_cli(
        "--root", str(root), "run", "stream", "--device", "gpu",
        env={"PYTHONPATH": str(tmp_path)},
    )  # fmt: skip
    assert result.returncode == 3
    assert "CuPy is not installed" in result.stderr and result.stderr.count("\n") == 1
    bad = run_cli("run", "stream", "--trials", "1")
    assert bad.returncode == 3 and "at least 2" in bad.stderr


def test_cli_gpu_without_a_driver_says_so(tmp_path: Path) -> None:
    """The installed CuPy where CUDA sees no GPU (here: no driver; on a GPU node: the
    devices hidden with CUDA_VISIBLE_DEVICES=-1, before NVML is opened), on a node whose
    bus lists an NVIDIA GPU: one line, exit 3."""
    from conftest import run_cli

    root = str(_tree_with_an_nvidia_gpu(tmp_path))
    result = run_cli(
        "--root", root, "run", "stream", "--device", "gpu", env={"CUDA_VISIBLE_DEVICES": "-1"}
    )
    assert result.returncode == 3, result.stderr
    assert "no usable GPU (CuPy: " in result.stderr and result.stderr.count("\n") == 1


def test_loops_compile_without_a_writable_cache() -> None:
    from gpudiag.kernels import cpu_loops

    numba = pytest.importorskip("numba", reason="numba has no wheel for this machine")
    calls = []

    def jit(**options):
        """Numba's own njit, which refuses an option it does not know when it compiles,
        except that a cache has nowhere to go (as in a read-only install without a home)."""
        calls.append(options["cache"])
        if options["cache"]:
            raise RuntimeError("cannot cache function: no locator available")
        return numba.njit(**options)

    loops = cpu_loops.Loops(jit)
    a, b, c = np.ones(8), np.full(8, 2.0), np.zeros(8)
    loops.triad(a, b, c, 0.5)
    assert calls == [True, False] * 5 and a.tolist() == [2.0] * 8
    assert loops.dot(a, b) == 32.0


class _Noisy:
    """CpuOperations whose timings are drawn around 1 ms with a known spread, so that the
    sequential test's stopping can be checked against a known truth."""

    def __init__(self, cv: float) -> None:
        self.inner = stream.CpuOperations(N, np.float64)
        self.rng = np.random.default_rng(5)
        self.cv = cv
        self.n, self.dtype, self.engine = self.inner.n, self.inner.dtype, self.inner.engine

    def __getattr__(self, name: str):
        return getattr(self.inner, name)

    def time(self, op: str, arrays) -> float:
        self.inner.time(op, arrays)  # the real work, so verification stays real
        return float(abs(self.rng.normal(1e-3, self.cv * 1e-3))) + 1e-6


def test_until_confident_goes_on_until_the_interval_is_tight() -> None:
    noisy = _Noisy(0.06)  # cv 6%: 2 trials give no usable interval, 80 (the 4th look) do
    try:
        results = stream.run_stream(noisy, device="cpu", trials=2, warmup=0, until_confident=30)
    finally:
        noisy.inner.close()
    for r in results:
        assert dict(r.params)["confident"] is True
        s = r.stats
        assert s is not None and (s.ci95_high - s.ci95_low) / 2 <= 0.03 * s.median
        assert s.count > 50  # it took many more than the 2 trials asked for


def test_until_confident_says_when_the_budget_ran_out() -> None:
    noisy = _Noisy(3.0)  # far too noisy for a tight interval in 0.3 s
    try:
        results = stream.run_stream(noisy, device="cpu", trials=2, warmup=0, until_confident=0.3)
    finally:
        noisy.inner.close()
    assert all(dict(r.params)["confident"] is False for r in results)


@pytest.mark.parametrize("threshold", [12.0, 50.0], ids=["above-it", "below-it"])
def test_until_confident_stops_once_the_interval_clears_the_threshold(threshold: float) -> None:
    """Triad's truth here is 3 arrays x 8 bytes x N in 1 ms: about 25 GB/s (cv 15%). A rule
    threshold far from it is cleared, either way, long before the interval is tight."""
    noisy = _Noisy(0.15)
    try:
        results = stream.run_stream(
            noisy,
            device="cpu",
            trials=2,
            warmup=0,
            until_confident=30,
            thresholds={"triad": threshold},
        )
    finally:
        noisy.inner.close()
    triad = next(r for r in results if r.metric == "triad")
    params = dict(triad.params)
    assert params["threshold"] == threshold and params["threshold_cleared"] is True
    assert params["confident"] is True
    s = triad.stats
    assert s is not None and 6 <= s.count < 30  # the tight interval takes ~150 (above)
    assert (s.ci95_low > threshold) if threshold < 25 else (s.ci95_high < threshold)
    assert "threshold" not in dict(results[0].params)  # copy is judged by no threshold


class _Split(_Noisy):
    """Timings alternating between 0.5 and 2 ms: every interval of the median spans both,
    so it never tightens and never clears a threshold between them."""

    def time(self, op: str, arrays) -> float:
        self.inner.time(op, arrays)
        self.cv = -self.cv
        return 0.5e-3 if self.cv > 0 else 2e-3


def test_until_confident_at_the_threshold_runs_out_the_budget() -> None:
    split = _Split(1.0)
    halfway = 3 * 8 * N / 1e-3 / 1e9  # between 12.6 and 50.3 GB/s, the two triad figures
    try:
        results = stream.run_stream(
            split,
            device="cpu",
            trials=2,
            warmup=0,
            until_confident=0.3,
            thresholds={"triad": halfway},
        )
    finally:
        split.inner.close()
    triad = next(r for r in results if r.metric == "triad")
    params = dict(triad.params)
    assert params["threshold_cleared"] is False and params["confident"] is False
    assert triad.stats is not None and triad.stats.count > 6  # it went on, to the budget
