"""GEMM throughput: C = A @ B on square matrices, in TFLOP/s (2 n^3 per product), every
product checked against a float64 reference on sampled rows.

One runner for NumPy (the CPU's BLAS: FP64 and FP32) and CuPy (cuBLAS: FP64, FP32, TF32,
FP16, and BF16 through cuBLAS's gemmEx on bf16 bit patterns, since CuPy has no bfloat16
dtype). A precision a library cannot do is reported as skipped, with the reason (NumPy has
no FP16, TF32 or BF16 BLAS). The CuPy path has never run on a GPU in this project's CI.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from gpudiag.kernels.stats import progress_fraction, summarize
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


def cublas_bf16_codec(cupy: Any) -> Codec:
    """BF16 GEMM through cuBLAS's gemmEx (CuPy has no bfloat16 dtype, but its cuBLAS
    binding takes raw pointers): bf16 inputs and output held as uint16, FP32 accumulation
    (CUBLAS_COMPUTE_32F), as PyTorch multiplies bf16 tensors. Row-major C = A @ B is
    column-major C^T = B^T A^T, so B goes first. Never run on a GPU in this project's CI."""
    from cupy_backends.cuda.libs import cublas

    # cudaDataType CUDA_R_16BF, cublasComputeType_t CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT,
    # cublasOperation_t CUBLAS_OP_N (cuda_runtime and cublas_api.h)
    cuda_r_16bf, compute_32f, default_algo, op_n = 14, 68, -1, 0
    one, zero = np.ones(1, np.float32), np.zeros(1, np.float32)

    def matmul(a: Any, b: Any) -> Any:
        n = a.shape[0]
        c = cupy.empty((n, n), dtype=cupy.uint16)
        handle = cupy.cuda.device.get_cublas_handle()
        cublas.gemmEx(
            handle, op_n, op_n, n, n, n,
            one.ctypes.data, b.data.ptr, cuda_r_16bf, n, a.data.ptr, cuda_r_16bf, n,
            zero.ctypes.data, c.data.ptr, cuda_r_16bf, n, compute_32f, default_algo,
        )  # fmt: skip
        return c

    return Codec(
        encode=lambda host: cupy.asarray(to_bf16_bits(host)),
        decode=lambda device: from_bf16_bits(cupy.asnumpy(device)),
        matmul=matmul,
    )


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
) -> KernelResult:
    """Multiply two n x n matrices `warmup + trials` times (more, until `seconds` have
    passed, where given) and return TFLOP/s samples; each product is checked (sampled rows
    against float64), and a wrong product is an error."""
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
    while round_index < rounds or (seconds is not None and time.monotonic() - started < seconds):
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
        summarize(samples) if len(samples) >= 2 else None,
        params,
    )


def _wall_clock(work: Callable[[], Any]) -> float:
    started = time.perf_counter()
    work()
    return time.perf_counter() - started


def cuda_timer(cupy: Any) -> Callable[[Callable[[], Any]], float]:
    """Seconds of GPU work between two CUDA events. Never run on a GPU in CI."""

    def timer(work: Callable[[], Any]) -> float:
        start, stop = cupy.cuda.Event(), cupy.cuda.Event()
        start.record()
        work()
        stop.record()
        stop.synchronize()
        return cupy.cuda.get_elapsed_time(start, stop) / 1000.0

    return timer


def run_gpu_gemm(device: int, precision: str, n: int, trials: int, **kwargs: Any) -> KernelResult:
    """GEMM on one GPU through CuPy/cuBLAS; TF32 through CuPy's CUPY_TF32 switch (keyword
    arguments go to run_gemm: cancel, seconds, progress). Never run on a GPU in this
    project's CI."""
    import cupy

    with cupy.cuda.Device(device):
        previous = os.environ.get("CUPY_TF32")
        os.environ["CUPY_TF32"] = "1" if precision == "tf32" else "0"
        try:
            return run_gemm(
                cupy,
                precision,
                n,
                device=f"gpu{device}",
                trials=trials,
                timer=cuda_timer(cupy),
                to_host=cupy.asnumpy,
                codec=cublas_bf16_codec(cupy) if precision == "bf16" else None,
                **kwargs,
            )
        finally:
            if previous is None:
                os.environ.pop("CUPY_TF32", None)
            else:
                os.environ["CUPY_TF32"] = previous
