"""GEMM throughput: C = A @ B on square matrices, in TFLOP/s (2 n^3 per product), every
product checked against a float64 reference on sampled rows.

One runner for NumPy (the CPU's BLAS: FP64 and FP32) and CuPy (cuBLAS: FP64, FP32, TF32
and FP16). A precision a library cannot do is reported as skipped, with the reason (NumPy
has no FP16 or TF32 BLAS; CuPy has no bfloat16 dtype). The CuPy path has never run on a
GPU in this project's CI.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
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
    raise GemmUnsupported("CuPy and NumPy have no bfloat16 dtype")


def check_product(
    a: np.ndarray, b: np.ndarray, c: np.ndarray, precision: str, rows: np.ndarray
) -> float:
    """Largest relative error of sampled rows of C against float64 A @ B."""
    reference = a[rows].astype(np.float64) @ b.astype(np.float64)
    scale = np.abs(a[rows].astype(np.float64)) @ np.abs(b.astype(np.float64))
    error = np.abs(c[rows].astype(np.float64) - reference) / np.maximum(scale, 1e-30)
    return float(error.max())


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
) -> KernelResult:
    """Multiply two n x n matrices `warmup + trials` times (more, until `seconds` have
    passed, where given) and return TFLOP/s samples; each product is checked (sampled rows
    against float64), and a wrong product is an error."""
    params = (("n", n), ("precision", precision), ("trials", trials))
    try:
        dtype = numpy_dtype(precision, xp)
    except GemmUnsupported as exc:
        return KernelResult(
            "gemm", device, precision, "TFLOP/s", ProbeStatus.SKIPPED, error=str(exc), params=params
        )
    rng = np.random.default_rng(0)
    host_a = rng.uniform(-1, 1, (n, n)).astype(dtype if xp is np else np.float32)
    host_b = rng.uniform(-1, 1, (n, n)).astype(dtype if xp is np else np.float32)
    a, b = xp.asarray(host_a, dtype=dtype), xp.asarray(host_b, dtype=dtype)
    rows = rng.choice(n, size=min(CHECKED_ROWS, n), replace=False)
    checked_a, checked_b = to_host(a), to_host(b)  # the inputs as the device holds them
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
        elapsed = time_it(lambda product=product: product.setdefault("c", xp.matmul(a, b)))
        error = check_product(checked_a, checked_b, to_host(product["c"]), precision, rows)
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
                **kwargs,
            )
        finally:
            if previous is None:
                os.environ.pop("CUPY_TF32", None)
            else:
                os.environ["CUPY_TF32"] = previous
