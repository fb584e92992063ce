"""GEMM throughput: C = A @ B on square matrices, in TFLOP/s (2 n^3 per product), every
product checked against a float64 reference on sampled rows.

`run_gemm` runs NumPy (the CPU's BLAS: FP64 and FP32); a precision NumPy cannot do is
reported as skipped, with the reason (it has no FP16, TF32 or BF16 BLAS). `run_gpu_gemm`
runs cuBLAS's gemmEx through the device boundary (kernels/device.py) in FP64, FP32, TF32,
FP16 and BF16 (on bf16 bit patterns: CuPy has no bfloat16 dtype), timing batches of
back-to-back GEMMs; it has never run on a GPU in this project's CI.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from gpudiag.kernels.stats import (
    last_look,
    look_confidence,
    more_trials,
    progress_fraction,
    reported,
    summarize,
)
from gpudiag.kernels.stream import _clears, _tight
from gpudiag.model import KernelResult, ProbeStatus

PRECISIONS = ("fp64", "fp32", "tf32", "fp16", "bf16")
# Relative error allowed against the float64 reference, per precision (inputs in [-1, 1],
# so an element of C is a sum of n products of magnitude up to 1).
TOLERANCE = {"fp64": 1e-10, "fp32": 1e-4, "tf32": 5e-3, "fp16": 2e-2, "bf16": 5e-2}
CHECKED_ROWS = 8


class GemmUnsupported(Exception):
    """This library cannot multiply in this precision; str() says why."""


def numpy_dtype(precision: str, xp: Any) -> Any:
    """The array dtype of a precision for an array module, or GemmUnsupported."""
    is_numpy = xp is np
    if precision == "fp64":
        return xp.float64
    if precision == "fp32":
        return xp.float32
    if precision == "tf32":
        if is_numpy:
            raise GemmUnsupported("TF32 is a GPU tensor-core mode: NumPy's BLAS has none")
        return xp.float32
    if precision == "fp16":
        if is_numpy:
            raise GemmUnsupported("NumPy's BLAS has no FP16 matrix multiply")
        return xp.float16
    if is_numpy:
        raise GemmUnsupported("NumPy has no bfloat16 dtype or BF16 matrix multiply")
    raise GemmUnsupported("BF16 runs through cuBLAS gemmEx (cublas_bf16_codec), not a dtype")


def check_product(
    a: np.ndarray, b: np.ndarray, c: np.ndarray, precision: str, rows: np.ndarray
) -> float:
    """Largest relative error of sampled rows of C against float64 A @ B."""
    reference = a[rows].astype(np.float64) @ b.astype(np.float64)
    scale = np.abs(a[rows].astype(np.float64)) @ np.abs(b.astype(np.float64))
    error = np.abs(c[rows].astype(np.float64) - reference) / np.maximum(scale, 1e-30)
    return float(error.max())


@dataclass(frozen=True)
class Codec:
    """How a precision's matrices reach the device and come back: `encode` a float32 host
    matrix, `decode` a device matrix to host floats (the inputs for the reference, the
    product for the check), and `matmul` two device matrices."""

    encode: Callable[[np.ndarray], Any]
    decode: Callable[[Any], np.ndarray]
    matmul: Callable[[Any, Any], Any]


def to_bf16_bits(values: np.ndarray) -> np.ndarray:
    """float32 -> bfloat16 bit patterns (uint16), rounded to nearest even; NaN stays NaN."""
    bits = np.ascontiguousarray(values, dtype=np.float32).view(np.uint32)
    rounded = (bits + np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16)
    out = rounded.astype(np.uint16)
    nan = np.isnan(values)
    out[nan] = np.uint16(0x7FC0)
    return out


def from_bf16_bits(bits: np.ndarray) -> np.ndarray:
    """bfloat16 bit patterns (uint16) -> float32, exactly."""
    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << np.uint32(16)).view(np.float32)


def _unsettled(samples: list[float], threshold: float | None) -> bool:
    """--until-confident goes on: the 95% interval of the median neither within
    stream.CONFIDENT_WIDTH of it nor (where a rule's threshold is given) wholly on one side
    of the threshold; fewer than 6 samples give no interval to trust."""
    if len(samples) < 6:
        return True
    stats = summarize(samples)  # at the look's confidence while more_trials looks
    return not (_tight(stats) or (threshold is not None and _clears(stats, threshold)))


def _confidence(
    samples: list[float], until_confident: float | None, threshold: float | None, rounds: int
) -> tuple[tuple[str, Any], ...]:
    """The params that say whether --until-confident reached its goal (as STREAM's)."""
    if until_confident is None:
        return ()
    cleared = (
        len(samples) >= 6
        and threshold is not None
        and _clears(reported(samples, until_confident, rounds), threshold)
    )
    said: tuple[tuple[str, Any], ...] = (
        ("confident", not _unsettled(samples, threshold)),
        # the level of its reported interval
        ("confidence", round(look_confidence(last_look(len(samples), rounds)), 6)),
    )
    return said + ((("threshold", threshold), ("threshold_cleared", cleared)) if threshold else ())


def run_gemm(
    xp: Any,
    precision: str,
    n: int,
    *,
    device: str,
    trials: int = 5,
    warmup: int = 1,
    timer: Callable[[Callable[[], Any]], float] | None = None,
    to_host: Callable[[Any], np.ndarray] = np.asarray,
    cancel: Any = None,
    seconds: float | None = None,
    progress: Callable[[float], None] | None = None,
    codec: Codec | None = None,
    until_confident: float | None = None,
    threshold: float | None = None,
) -> KernelResult:
    """Multiply two n x n matrices `warmup + trials` times (more, until `seconds` have
    passed, where given; with `until_confident`, more until the 95% interval of the median
    is within 3% of it or clears `threshold`, a rule's TFLOP/s, either way, or that many
    seconds have passed: as STREAM's, params say whether it was reached) and return TFLOP/s
    samples; each product is checked (sampled rows against float64), and a wrong product
    is an error."""
    params = (("n", n), ("precision", precision), ("trials", trials))
    try:
        dtype = numpy_dtype(precision, xp) if codec is None else None
    except GemmUnsupported as exc:
        return KernelResult(
            "gemm", device, precision, "TFLOP/s", ProbeStatus.SKIPPED, error=str(exc), params=params
        )
    codec = codec or Codec(
        encode=lambda host: xp.asarray(host, dtype=dtype), decode=to_host, matmul=xp.matmul
    )
    rng = np.random.default_rng(0)
    host_dtype = dtype if xp is np and dtype is not None else np.float32
    host_a = rng.uniform(-1, 1, (n, n)).astype(host_dtype)
    host_b = rng.uniform(-1, 1, (n, n)).astype(host_dtype)
    a, b = codec.encode(host_a), codec.encode(host_b)
    rows = rng.choice(n, size=min(CHECKED_ROWS, n), replace=False)
    checked_a, checked_b = codec.decode(a), codec.decode(b)  # as the device holds them
    time_it = timer or _wall_clock
    samples: list[float] = []
    started, rounds, round_index = time.monotonic(), warmup + trials, 0

    def unsettled() -> bool:
        return _unsettled(samples, threshold)

    while more_trials(started, round_index, rounds, seconds, until_confident, unsettled):
        if cancel is not None and cancel.is_set():
            return KernelResult(
                "gemm",
                device,
                precision,
                "TFLOP/s",
                ProbeStatus.CANCELLED,
                error="cancelled",
                params=params,
            )
        product: dict[str, Any] = {}
        elapsed = time_it(lambda product=product: product.setdefault("c", codec.matmul(a, b)))
        error = check_product(checked_a, checked_b, codec.decode(product["c"]), precision, rows)
        if not error <= TOLERANCE[precision]:
            return KernelResult(
                "gemm",
                device,
                precision,
                "TFLOP/s",
                ProbeStatus.ERROR,
                error=f"verification failed: relative error {error:.3g} "
                f"exceeds {TOLERANCE[precision]:g}",
                params=params,
            )
        if round_index >= warmup and elapsed > 0:
            samples.append(2.0 * n**3 / elapsed / 1e12)
        round_index += 1
        if progress is not None:
            progress(progress_fraction(round_index, rounds, started, seconds))
    return KernelResult(
        "gemm",
        device,
        precision,
        "TFLOP/s",
        ProbeStatus.OK,
        tuple(samples),
        reported(samples, until_confident, trials) if len(samples) >= 2 else None,
        params + _confidence(samples, until_confident, threshold, trials),
    )


def _wall_clock(work: Callable[[], Any]) -> float:
    started = time.perf_counter()
    work()
    return time.perf_counter() - started


# precision: (cudaDataType entry, cublasComputeType_t entry, host dtype of the device data)
CUBLAS_TYPES = {
    "fp64": ("CUDA_R_64F", "cublas_CUBLAS_COMPUTE_64F", np.float64),
    "fp32": ("CUDA_R_32F", "cublas_CUBLAS_COMPUTE_32F", np.float32),
    "tf32": ("CUDA_R_32F", "cublas_CUBLAS_COMPUTE_32F_FAST_TF32", np.float32),
    "fp16": ("CUDA_R_16F", "cublas_CUBLAS_COMPUTE_32F", np.float16),
    "bf16": ("CUDA_R_16BF", "cublas_CUBLAS_COMPUTE_32F", np.uint16),  # bf16 bit patterns
}
SAMPLE_SECONDS = 0.05  # each timed sample is a batch of back-to-back GEMMs this long
MAX_BATCH = 200


class CublasGemm:
    """n x n GEMMs of one precision on one GPU through cuBLAS's gemmEx, with the data and
    compute types given explicitly on every call (TF32 is CUBLAS_COMPUTE_32F_FAST_TF32,
    never a process-wide switch such as CUPY_TF32, which CuPy reads once); FP16 and BF16
    accumulate in FP32 (CUBLAS_COMPUTE_32F), as PyTorch multiplies them. Row-major
    C = A @ B is column-major C^T = B^T A^T, so B goes first. CuPy's gemmEx runs on CuPy's
    current stream (it sets the handle's stream to it before every call), so `multiply`
    makes the engine's stream current around each GEMM: the timing events, copies and the
    burn's compare kernels on that stream are then ordered with the GEMMs. Never run on a
    GPU in this project's CI: the tests run it through a strict NumPy fake of the device
    boundary."""

    def __init__(self, cuda: Any, device: int, precision: str, n: int) -> None:
        from gpudiag.kernels.device import Timer

        self.cuda, self.device, self.precision, self.n = cuda, device, precision, n
        data_type, compute_type, self.host_dtype = CUBLAS_TYPES[precision]
        self.data_type = getattr(cuda, data_type)
        self.compute_type = getattr(cuda, compute_type)
        cuda.setDevice(device)
        self.stream = cuda.Stream(non_blocking=True)
        self.handle = cuda.cublas_create()  # its stream: the current one, on every call
        scalar = np.float64 if precision == "fp64" else np.float32  # the compute type's
        self.alpha, self.beta = np.ones(1, scalar), np.zeros(1, scalar)
        nbytes = n * n * np.dtype(self.host_dtype).itemsize
        self.a, self.b, self.c = (cuda.malloc(nbytes) for _ in range(3))
        self.timer = Timer(cuda, self.stream)

    def encode(self, values: np.ndarray) -> np.ndarray:
        """Float32/64 host values as the device holds them."""
        if self.precision == "bf16":
            return to_bf16_bits(values.astype(np.float32))
        return np.ascontiguousarray(values, dtype=self.host_dtype)

    def decode(self, held: np.ndarray) -> np.ndarray:
        return from_bf16_bits(held) if self.precision == "bf16" else held

    def upload(self, host_a: np.ndarray, host_b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Copy A and B to the device; returns them as the device holds them, decoded."""
        from gpudiag.kernels.device import pinned

        held = [self.encode(host_a), self.encode(host_b)]
        cuda = self.cuda
        cuda.setDevice(self.device)
        with pinned(cuda, *held):
            for pointer, array in zip((self.a, self.b), held, strict=True):
                kind = cuda.memcpyHostToDevice
                cuda.memcpyAsync(pointer, array.ctypes.data, array.nbytes, kind, self.stream.ptr)
            cuda.streamSynchronize(self.stream.ptr)
        return self.decode(held[0]), self.decode(held[1])

    def multiply(self) -> None:
        """One GEMM into C on the engine's stream (made CuPy's current stream for the call:
        gemmEx takes its stream from there)."""
        n, cuda = self.n, self.cuda
        op_n, t = cuda.cublas_CUBLAS_OP_N, self.data_type
        with self.stream:
            cuda.cublas_gemmEx(
                self.handle, op_n, op_n, n, n, n,
                self.alpha.ctypes.data, self.b, t, n, self.a, t, n,
                self.beta.ctypes.data, self.c, t, n, self.compute_type,
                cuda.cublas_CUBLAS_GEMM_DEFAULT,
            )  # fmt: skip

    def time(self, batch: int) -> float:
        """Seconds per GEMM over `batch` back-to-back GEMMs, behind one untimed lead GEMM
        (the GPU is busy when the start event is recorded: no launch gap is timed)."""
        self.cuda.setDevice(self.device)
        self.multiply()
        self.timer.start()
        for _ in range(batch):
            self.multiply()
        self.timer.stop()
        return self.timer.seconds() / batch

    def against_wall(self, batch: int) -> tuple[float, float]:
        """(event seconds, wall seconds) of one batch of `batch` GEMMs between two device
        synchronisations (device.events_against_wall)."""
        from gpudiag.kernels.device import events_against_wall

        def work() -> None:
            for _ in range(batch):
                self.multiply()

        return events_against_wall(self.cuda, self.device, self.timer, work)

    def product(self) -> np.ndarray:
        """C on the host, decoded to floats, after the stream's work."""
        from gpudiag.kernels.device import to_host

        self.cuda.setDevice(self.device)
        held = np.empty((self.n, self.n), self.host_dtype)
        return self.decode(to_host(self.cuda, self.c, held, self.stream))

    def close(self) -> None:
        cuda = self.cuda
        cuda.setDevice(self.device)
        self.timer.close()
        for pointer in (self.a, self.b, self.c):
            cuda.free(pointer)
        cuda.cublas_destroy(self.handle)


def run_gpu_gemm(
    device: int,
    precision: str,
    n: int,
    trials: int,
    *,
    warmup: int = 1,
    cancel: Any = None,
    seconds: float | None = None,
    progress: Callable[[float], None] | None = None,
    cuda: Any = None,
    sample_seconds: float = SAMPLE_SECONDS,
    until_confident: float | None = None,
    threshold: float | None = None,
) -> KernelResult:
    """TFLOP/s samples of batches of back-to-back GEMMs on one GPU (a batch lasts about
    `sample_seconds`, so launch overhead is amortised and sustained clocks are seen), then
    one batch's event time checked against the wall clock between two device
    synchronisations (more than 10% apart, three times: an error, "timing inconsistent"),
    and the product checked against float64 on sampled rows after the timed trials;
    `until_confident` and `threshold` as for run_gemm. Never run on a GPU in this
    project's CI (the CUDA fake only)."""
    from gpudiag.kernels.device import api

    cuda = cuda or api()
    compute = CUBLAS_TYPES[precision][1].removeprefix("cublas_")
    params: tuple[tuple[str, Any], ...] = (
        ("n", n), ("precision", precision), ("trials", trials), ("compute_type", compute),
    )  # fmt: skip

    def result(status: ProbeStatus, samples: list[float], error: str = "") -> KernelResult:
        ok = status is ProbeStatus.OK and len(samples) >= 2
        stats = reported(samples, until_confident, trials) if ok else None
        return KernelResult(
            "gemm", f"gpu{device}", precision, "TFLOP/s", status, tuple(samples), stats,
            params, error,
        )  # fmt: skip

    rng = np.random.default_rng(0)
    host_a = rng.uniform(-1, 1, (n, n))
    host_b = rng.uniform(-1, 1, (n, n))
    rows = rng.choice(n, size=min(CHECKED_ROWS, n), replace=False)
    engine = CublasGemm(cuda, device, precision, n)
    try:
        checked_a, checked_b = engine.upload(host_a, host_b)
        single = engine.time(1)
        batch = max(1, min(MAX_BATCH, int(sample_seconds / single) if single > 0 else 1))
        params += (("batch", batch),)
        samples: list[float] = []
        started, rounds, index = time.monotonic(), warmup + trials, 0

        def unsettled() -> bool:
            return _unsettled(samples, threshold)

        while more_trials(started, index, rounds, seconds, until_confident, unsettled):
            if cancel is not None and cancel.is_set():
                return result(ProbeStatus.CANCELLED, [], "cancelled")
            elapsed = engine.time(batch)
            if index >= warmup and elapsed > 0:
                samples.append(2.0 * n**3 / elapsed / 1e12)
            index += 1
            if progress is not None:
                progress(progress_fraction(index, rounds, started, seconds))
        from gpudiag.kernels.device import timing_inconsistency

        inconsistent, ratio = timing_inconsistency(
            lambda: engine.against_wall(batch), "GEMM", batch
        )
        params += (("event_over_wall", round(ratio, 3)),)
        error = check_product(checked_a, checked_b, engine.product(), precision, rows)
    finally:
        engine.close()
    if not error <= TOLERANCE[precision]:  # checked after a device synchronise: a fault
        return result(
            ProbeStatus.ERROR,
            [],
            f"verification failed: relative error {error:.3g} exceeds {TOLERANCE[precision]:g}",
        )
    if inconsistent:
        return result(ProbeStatus.ERROR, [], inconsistent)
    params += _confidence(samples, until_confident, threshold, trials)
    return result(ProbeStatus.OK, samples)
