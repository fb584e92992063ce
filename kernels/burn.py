"""The burn test, after gpu-burn: for a given time, the same large GEMM again and again on
every device at once; every result is compared with the device's first, and NaNs and
mismatches are counted per device. A GPU that computes a different answer under heat and
power is broken however fast it is. NVML is sampled meanwhile (temperature, power, SM
clock, throttle reasons) so the report shows what the GPU did under load.

`burn_device` takes the array module: the tests run it for real with NumPy on the CPU.
The GPU path (`burn_gpu`, as gpu-burn: result matrices filling 90% of the free memory,
GEMMs in the GEMM kernel's precisions, products compared on the GPU; one launcher thread
per GPU) goes through the device boundary and has never run on a GPU in this project's
CI: the tests run it through a strict NumPy fake.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

import numpy as np

from gpudiag.kernels.stats import summarize
from gpudiag.model import KernelResult, ProbeStatus, Reading, ReadingStatus
from gpudiag.nvml import Nvml

SAMPLE_PERIOD_S = 1.0
# Drivers before R535 have no clocks-event API: they answer FunctionNotFound, and the
# throttle-reasons call of the same mask is asked instead.
CLOCK_EVENT_FUNCTIONS = (
    "nvmlDeviceGetCurrentClocksEventReasons",
    "nvmlDeviceGetCurrentClocksThrottleReasons",
)
SAMPLED = (
    ("temperature.gpu", "nvmlDeviceGetTemperature", (0,), "C", None),
    ("power.draw", "nvmlDeviceGetPowerUsage", (), "W", lambda mw: int(mw) / 1000.0),
    ("clocks.sm", "nvmlDeviceGetClockInfo", (1,), "MHz", None),
)


# CUDA errors that are the GPU's fault, not the tool's (runtime and driver API names):
# uncorrectable ECC and NVLink errors, a hardware stack error, and the unknown error a
# GPU that fell off the bus gives (Xid 79: wilicc/gpu-burn issue 1, CUDA_ERROR_UNKNOWN;
# proteneer/timemachine PR 1203, cudaErrorUnknown). Any other error (out of memory when
# another process allocated first, NVRTC missing, a launch the tool got wrong) says
# nothing about the GPU: the burn could not run.
GPU_FAULTS = (
    "cudaErrorECCUncorrectable",
    "CUDA_ERROR_ECC_UNCORRECTABLE",
    "cudaErrorNvlinkUncorrectable",
    "CUDA_ERROR_NVLINK_UNCORRECTABLE",
    "cudaErrorHardwareStackError",
    "CUDA_ERROR_HARDWARE_STACK_ERROR",
    "cudaErrorUnknown",
    "CUDA_ERROR_UNKNOWN",
)


def is_gpu_fault(text: str) -> bool:
    """Whether an exception's text names a CUDA error that is the GPU's fault."""
    return any(name in text for name in GPU_FAULTS)


@dataclass
class BurnReport:
    """What one device did during the burn. `error`: the burn could not run (a tool
    error: UNKNOWN, exit 3); `fault`: a CUDA error that is the GPU's (uncorrectable ECC,
    fallen off the bus) or a first product the host's float64 check finds wrong."""

    device: str
    iterations: int = 0
    mismatches: int = 0
    nans: int = 0
    seconds: float = 0.0
    gflops: float = 0.0
    error: str = ""
    samples: list[dict[str, Any]] = field(default_factory=list)
    precision: str = "fp32"
    matrices: int = 0
    unreproduced: int = 0  # differed, then agreed at the synchronised re-compare: not a fault
    intermittent: int = 0  # products still wrong after the synchronise, right when recomputed
    persistent: int = 0  # products still wrong after the synchronise, wrong again recomputed
    fault: str = ""
    note: str = ""  # more about the faults, for the findings' reason

    @property
    def faulty(self) -> bool:
        """True when any product differed from the first or held a NaN after the
        synchronise, or the GPU failed (`fault`); a tool error is not a fault."""
        return self.mismatches > 0 or self.nans > 0 or bool(self.fault)

    def kind(self) -> str:
        """Which faults the products showed, in words (the findings' reason), or ''."""
        words = []
        for count, what in (
            (self.intermittent, "intermittent: {} product{} right when recomputed"),
            (self.persistent, "persistent: {} product{} wrong again when recomputed"),
        ):
            if count:
                words.append(what.format(count, "" if count == 1 else "s"))
        return "; ".join([*words, *([self.note] if self.note else [])])


def burn_device(
    xp: Any,
    n: int,
    seconds: float,
    device: str,
    *,
    matmul: Callable[[Any, Any], Any] | None = None,
    cancel: threading.Event | None = None,
    synchronize: Callable[[], None] = lambda: None,
    progress: Callable[[float], None] | None = None,
) -> BurnReport:
    """Multiply the same two n x n matrices for `seconds`, comparing every product with
    the first bit for bit (a deterministic library gives identical results for identical
    inputs on one device) and counting NaNs."""
    report = BurnReport(device)
    rng = np.random.default_rng(0)
    a = xp.asarray(rng.uniform(-1, 1, (n, n)).astype(np.float32))
    b = xp.asarray(rng.uniform(-1, 1, (n, n)).astype(np.float32))
    multiply = matmul or xp.matmul
    reference = multiply(a, b)
    synchronize()
    if bool(xp.isnan(reference).any()):
        report.error = "the first product already holds NaNs"
        return report
    started = time.perf_counter()
    while time.perf_counter() - started < seconds:
        if cancel is not None and cancel.is_set():
            break
        product = multiply(a, b)
        report.nans += int(xp.isnan(product).sum())
        report.mismatches += int((product != reference).sum())
        report.iterations += 1
        if progress is not None:
            progress(min(1.0, (time.perf_counter() - started) / seconds))
    synchronize()
    report.seconds = time.perf_counter() - started
    if report.seconds > 0:
        report.gflops = 2.0 * n**3 * report.iterations / report.seconds / 1e9
    return report


def sample_nvml(
    nvml: Nvml,
    gpus: Sequence[int],
    stop: threading.Event,
    period: float,
    reports: dict[int, BurnReport],
    nvml_index: dict[int, int] | None = None,
) -> None:
    """Every `period` seconds until `stop`: temperature, power, SM clock and throttle
    reasons of each GPU into its report (a reading that fails is left out of the sample).
    `nvml_index`: NVML's index of each CUDA device, where they differ."""
    from gpudiag.probes.gpu import decode_throttle_reasons

    while not stop.wait(period):
        for cuda_gpu in gpus:
            gpu = (nvml_index or {}).get(cuda_gpu, cuda_gpu)
            sample: dict[str, Any] = {"t": time.monotonic()}
            for key, function, args, unit, convert in SAMPLED:
                reading: Reading = nvml.reading(
                    key, function, gpu, *args, unit=unit, convert=convert
                )
                if reading.ok:
                    sample[key] = reading.value
            for function in CLOCK_EVENT_FUNCTIONS:  # the newer name first, then the older
                reasons = nvml.reading(
                    "throttle_reasons",
                    function,
                    gpu,
                    convert=lambda mask: decode_throttle_reasons(int(mask)),
                )
                if reasons.ok or reasons.status is not ReadingStatus.UNSUPPORTED:
                    break
            if reasons.ok:
                sample["throttle_reasons"] = reasons.value
            reports[cuda_gpu].samples.append(sample)


# The burn's element widths and NaN masks per precision (exponent, mantissa): the GPU
# compares products bit for bit in words of the element's width (kernels/burn.cu).
MASKS = {
    "fp64": (64, 0x7FF0000000000000, 0x000FFFFFFFFFFFFF),
    "fp32": (32, 0x7F800000, 0x007FFFFF),
    "tf32": (32, 0x7F800000, 0x007FFFFF),
    "fp16": (16, 0x7C00, 0x03FF),
    "bf16": (16, 0x7F80, 0x007F),
}
WORDS = {16: np.uint16, 32: np.uint32, 64: np.uint64}
FILL = 0.9  # of the GPU's free memory, in result matrices, as gpu-burn does
COMPARE_THREADS = 256


def burn_inputs(n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The GPU burn's A and B (uniform in [-1, 1], seeded) and the rows of the first
    product its float64 host check samples (CHECKED_ROWS of n)."""
    from gpudiag.kernels.gemm import CHECKED_ROWS

    rng = np.random.default_rng(0)
    a, b = rng.uniform(-1, 1, (n, n)), rng.uniform(-1, 1, (n, n))
    return a, b, rng.choice(n, size=min(CHECKED_ROWS, n), replace=False)


def burn_gpu(
    gpu: int,
    n: int,
    seconds: float,
    *,
    precision: str = "fp32",
    fill: float = FILL,
    cancel: threading.Event | None = None,
    progress: Callable[[float], None] | None = None,
    cuda: Any = None,
) -> BurnReport:
    """gpu-burn on one GPU through the device boundary: A and B once, then as many n x n
    result matrices as fill `fill` of the free memory, each written by a cuBLAS GEMM
    (gemmEx in `precision`: BF16 and FP16 stress the tensor cores) round after round, and
    every product compared on the GPU with the first (bit for bit, NaNs counted). The
    first product's sampled rows are checked once against float64 on the host (wrong:
    the report's `fault`). A round whose compare found differences is confirmed before
    the next round overwrites the products (`_confirm`). Never run on a GPU in this
    project's CI: the tests run it through the CUDA fake, which runs burn.cu itself."""
    from gpudiag.kernels.device import api, to_device, to_host
    from gpudiag.kernels.gemm import TOLERANCE, CublasGemm, check_product

    cuda = cuda or api()
    report = BurnReport(f"gpu{gpu}", precision=precision)
    engine = CublasGemm(cuda, gpu, precision, n)
    reference = engine.c
    results: list[int] = []
    counts = 0
    try:
        host_a, host_b, rows = burn_inputs(n)
        inputs = engine.upload(host_a, host_b)
        width, exponent, mantissa = MASKS[precision]
        word = WORDS[width]
        words = n * n * np.dtype(engine.host_dtype).itemsize // (width // 8)
        source = (resources.files("gpudiag.kernels") / "burn.cu").read_text(encoding="utf-8")
        compare = cuda.RawModule(code=source, options=("-std=c++17",)).get_function(
            f"burn_compare_{width}"
        )
        counts = to_device(cuda, np.zeros(2, np.uint64), engine.stream)
        blocks = (max(1, min(1024, (words + COMPARE_THREADS - 1) // COMPARE_THREADS)),)

        def check(product: int, into: int = 0) -> None:
            args = (np.uint64(product), np.uint64(reference), np.uint64(words),
                    word(exponent), word(mantissa), np.uint64(into or counts))  # fmt: skip
            compare(blocks, (COMPARE_THREADS,), args, stream=engine.stream)

        engine.multiply()  # the reference product, into engine.c
        check(reference)  # NaNs in the reference itself
        first = to_host(cuda, counts, np.empty(2, np.uint64), engine.stream)
        if first[1]:  # from finite inputs: a GPU fault (KRN004)
            report.nans, report.note = int(first[1]), "in the first product: the burn stopped"
            return report
        wrong = check_product(*inputs, engine.product(), precision, rows)
        if not wrong <= TOLERANCE[precision]:  # every later product is compared with it
            report.fault = (
                f"verification failed: the burn's first product differs from float64 on "
                f"the host: relative error {wrong:.3g} exceeds {TOLERANCE[precision]:g}"
            )
            return report
        cuda.setDevice(gpu)
        free, _total = cuda.memGetInfo()
        nbytes = n * n * np.dtype(engine.host_dtype).itemsize
        for _ in range(max(1, int(free * fill) // nbytes)):
            results.append(cuda.malloc(nbytes))
        report.matrices = len(results)
        seen = (0, 0)  # the counts so far (one counter, added to round after round)
        started = time.perf_counter()
        while time.perf_counter() - started < seconds:
            if cancel is not None and cancel.is_set():
                break
            cuda.setDevice(gpu)
            for product in results:
                engine.c = product
                engine.multiply()
            engine.c = reference
            for product in results:
                check(product)
            totals = to_host(cuda, counts, np.empty(2, np.uint64), engine.stream)  # a sync
            report.iterations += len(results)
            found = (int(totals[0]) - seen[0], int(totals[1]) - seen[1])  # this round's
            seen = (int(totals[0]), int(totals[1]))
            if found != (0, 0):  # before the next round overwrites the products
                _confirm(cuda, engine, report, results, check, found[0])
            if progress is not None:
                progress(min(1.0, (time.perf_counter() - started) / seconds))
        report.seconds = time.perf_counter() - started
        if report.seconds > 0:
            report.gflops = 2.0 * n**3 * report.iterations / report.seconds / 1e9
        return report
    finally:
        engine.c = reference
        cuda.setDevice(gpu)
        for pointer in [*results, *([counts] if counts else [])]:
            cuda.free(pointer)
        engine.close()


def _confirm(
    cuda: Any,
    engine: Any,
    report: BurnReport,
    results: list[int],
    check: Callable[[int, int], None],
    found: int,
) -> None:
    """A round's `found` mismatches, after a full device synchronise: every result
    matrix compared with the first product again. What still differs has certainly been
    written and is wrong: every such element counts (the report's mismatches and NaNs,
    as gpu-burn counts), and the product is recomputed once to say which kind of fault it
    is (`intermittent`: right again; `persistent`: wrong again). Only what agrees at this
    synchronised re-compare was read before the GPU had written it (the report's
    `unreproduced`: a measurement problem, not a GPU fault).
    Never run on a GPU in this project's CI (the tests use the device fake)."""
    from gpudiag.kernels.device import to_device, to_host

    reference = engine.c
    cuda.setDevice(int(report.device.removeprefix("gpu")))
    cuda.deviceSynchronize()
    scratch = to_device(cuda, np.zeros(2, np.uint64), engine.stream)
    seen = np.zeros(2, np.uint64)

    def count(product: int) -> tuple[int, int]:
        nonlocal seen
        check(product, scratch)
        now = to_host(cuda, scratch, np.empty(2, np.uint64), engine.stream)
        delta, seen = now - seen, now
        return int(delta[0]), int(delta[1])

    mismatches = 0
    try:
        for product in results:
            first = count(product)
            if first == (0, 0):
                continue
            mismatches += first[0]
            report.mismatches += first[0]
            report.nans += first[1]
            engine.c = product
            engine.multiply()
            engine.c = reference
            cuda.deviceSynchronize()
            if count(product) == (0, 0):
                report.intermittent += 1
            else:
                report.persistent += 1
    finally:
        engine.c = reference
        cuda.free(scratch)
    report.unreproduced += max(0, found - mismatches)


def burn_gpus(
    gpus: Sequence[int],
    n: int,
    seconds: float,
    nvml: Nvml | None = None,
    cancel: threading.Event | None = None,
    period: float = SAMPLE_PERIOD_S,
    *,
    precision: str = "fp32",
    fill: float = FILL,
    launcher_cpus: Sequence[int] = (),
    nvml_index: dict[int, int] | None = None,
) -> list[BurnReport]:
    """Burn every GPU at once, one launcher thread per GPU (pinned to `launcher_cpus`,
    where given, so that a CPU burn beside it cannot starve it), sampling NVML. A GPU
    whose burn raises gets a report that says why: a fault where the error is the GPU's
    (GPU_FAULTS), else an error (the burn could not run); the others carry on. Never run
    on a GPU in this project's CI (the tests use the device fake)."""
    reports = {gpu: BurnReport(f"gpu{gpu}", precision=precision) for gpu in gpus}

    def burn(gpu: int) -> None:
        if launcher_cpus:
            os.sched_setaffinity(0, list(launcher_cpus))
        try:
            result = burn_gpu(gpu, n, seconds, precision=precision, fill=fill, cancel=cancel)
        except Exception as exc:  # this GPU's result; the others carry on
            result = BurnReport(f"gpu{gpu}", precision=precision)
            why = " ".join(f"{type(exc).__name__}: {exc}".split())[:300]
            if is_gpu_fault(why):
                result.fault = why
            else:
                result.error = f"could not burn GPU {gpu}: {why}"
        result.samples = reports[gpu].samples
        reports[gpu] = result

    stop = threading.Event()
    sampler = None
    if nvml is not None:
        sampler = threading.Thread(
            target=sample_nvml,
            args=(nvml, gpus, stop, period, reports, nvml_index),
            daemon=True,
        )
        sampler.start()
    workers = [threading.Thread(target=burn, args=(gpu,), daemon=True) for gpu in gpus]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    stop.set()
    if sampler is not None:
        sampler.join(timeout=period * 2)
    return [reports[gpu] for gpu in gpus]


def split_cpus(cpus: Sequence[int], gpus: int) -> tuple[list[int], list[int]]:
    """(CPUs for the CPU burn, CPUs for the GPU launcher threads): one per GPU reserved
    for the launchers, at least one left to the CPU burn."""
    cpus = sorted(cpus)
    reserve = min(gpus, max(0, len(cpus) - 1))
    return cpus[: len(cpus) - reserve], cpus[len(cpus) - reserve :]


def burn_cpu(
    n: int,
    seconds: float,
    cpus: Sequence[int],
    cancel: threading.Event | None = None,
    progress: Callable[[float], None] | None = None,
) -> BurnReport:
    """The CPU burn on `cpus` only: this thread pinned there and the BLAS library's
    threads limited to their number (threadpoolctl), so that it leaves the GPU launcher
    threads their CPUs."""
    from threadpoolctl import threadpool_limits

    if cpus:
        os.sched_setaffinity(0, list(cpus))
    with threadpool_limits(limits=max(1, len(cpus)) if cpus else None, user_api="blas"):
        return burn_device(np, n, seconds, "cpu", cancel=cancel, progress=progress)


def burn_results(report: BurnReport, n: int) -> list[KernelResult]:
    """The report as kernel results for the snapshot: throughput, mismatch and NaN counts
    (with `note`: intermittent or persistent, for KRN003/KRN004's message), and each NVML
    series sampled. A burn that could not run gives its counts as errors (KRN003 and
    KRN004 cannot check: UNKNOWN); a GPU fault adds an error result of its own:
    `reference` for a first product the host finds wrong (verification failed: KRN001),
    `gpu_error` for a CUDA error that is the GPU's (KRN025)."""
    seen = sorted(
        {str(r) for s in report.samples for r in s.get("throttle_reasons", ())} - {"GpuIdle"}
    )
    params = (("n", n), ("seconds", round(report.seconds, 3)), ("iterations", report.iterations))
    if report.device.startswith("gpu"):
        params += (("precision", report.precision), ("result_matrices", report.matrices))
    if any("throttle_reasons" in s for s in report.samples):
        params += (("throttle_reasons_seen", ", ".join(seen) or "none"),)
    if report.error:
        return [
            KernelResult(
                "burn",
                report.device,
                metric,
                unit,
                ProbeStatus.ERROR,
                error=report.error,
                params=params,
            )
            for metric, unit in (("gflops", "GFLOP/s"), ("mismatches", "count"), ("nans", "count"))
        ]
    note = (("note", report.kind()),) if report.kind() else ()
    totals = (
        ("gflops", "GFLOP/s", round(report.gflops, 3), ()),
        ("mismatches", "count", float(report.mismatches), note),
        ("nans", "count", float(report.nans), note),
    )
    if report.device.startswith("gpu"):  # differed, then agreed after the synchronise
        totals += (("unreproduced", "count", float(report.unreproduced), ()),)
    results = [
        KernelResult(
            "burn", report.device, metric, unit, ProbeStatus.OK, (value,), params=params + extra
        )
        for metric, unit, value, extra in totals
    ]
    if report.fault:
        metric = "reference" if report.fault.startswith("verification failed") else "gpu_error"
        results.append(
            KernelResult(
                "burn",
                report.device,
                metric,
                "",
                ProbeStatus.ERROR,
                error=report.fault,
                params=params,
            )
        )
    for key, _function, _args, unit, _convert in SAMPLED:
        series = [float(s[key]) for s in report.samples if key in s]
        if len(series) >= 2:
            results.append(
                KernelResult(
                    "burn",
                    report.device,
                    key,
                    unit,
                    ProbeStatus.OK,
                    tuple(series),
                    summarize(series),
                    (("period_s", SAMPLE_PERIOD_S),),
                )
            )
    return results
