"""The GPU paths end to end through the strict NumPy fake of the device boundary
(tests/fakecuda.py): STREAM, GEMM, burn, copies, peer copies, all-reduce and the plan
runner, with figures checked against the fake's simulated rates."""

from __future__ import annotations

import numpy as np
import pytest

from gpudiag.kernels import device, gemm, stream
from gpudiag.model import ProbeStatus

import fakecuda
from fakecuda import FakeCuda


@pytest.fixture
def cuda():
    fake = FakeCuda(2)
    previous = device.use(fake)
    yield fake
    device.use(previous)


N = 1 << 20  # 8 MiB per FP64 array: a copy takes 8 us at the fake's 2000 GB/s, a launch 5 us


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_stream_on_a_gpu_times_the_kernels_only_and_verifies(cuda, dtype) -> None:
    ops = stream.CudaOperations(N * 8 // np.dtype(dtype).itemsize, dtype, 1)
    try:
        results = stream.run_stream(ops, device="gpu1", trials=2, warmup=0)
    finally:
        ops.close()
    assert [r.metric for r in results] == list(stream.OPERATIONS)
    for result in results:
        assert result.status is ProbeStatus.OK, result.error
        # no launch gap and no host copy inside the timed region: the fake's own rate
        assert result.stats.median == pytest.approx(fakecuda.MEMORY_GBS, rel=0.01), result.metric
    assert not cuda.allocations  # every buffer freed


def test_stream_with_a_wrong_kernel_fails_verification(cuda, monkeypatch) -> None:
    ops = stream.CudaOperations(4096, np.float64, 0)
    launch = ops._launch

    def wrong(operation, arrays):  # triad launched as add: a = b + c
        launch("add" if operation == "triad" else operation, arrays)

    monkeypatch.setattr(ops, "_launch", wrong)
    results = stream.run_stream(ops, device="gpu0", trials=2, warmup=0)
    ops.close()
    assert all(r.status is ProbeStatus.ERROR and "verification" in r.error for r in results)


def test_stream_arguments_of_the_wrong_type_are_refused(cuda, monkeypatch) -> None:
    ops = stream.CudaOperations(4096, np.float32, 0)
    monkeypatch.setattr(stream, "SCALAR", 0.4)
    original = np.float32
    arrays = ops.allocate()
    ops.dtype = np.dtype(np.float64)  # a float64 scalar for the f32 kernels
    with pytest.raises(TypeError, match="float passed as float64"):
        ops.run("scale", arrays)
    ops.dtype = np.dtype(original)
    ops.close()


# ------------------------------------------------------------------ GEMM


@pytest.mark.parametrize("precision", gemm.PRECISIONS)
def test_gemm_on_a_gpu_times_batches_in_the_precision_asked(cuda, precision) -> None:
    result = gemm.run_gpu_gemm(0, precision, 256, 2, warmup=0, sample_seconds=2e-4)
    assert result.status is ProbeStatus.OK, result.error
    params = dict(result.params)
    assert params["batch"] > 1
    # the fake's rate for exactly this precision (TF32 is not FP32), no launch gap timed
    assert result.stats.median == pytest.approx(fakecuda.TFLOPS[precision], rel=0.01)
    assert not cuda.allocations and not cuda.handles


def test_gemm_with_swapped_operands_fails_its_check(cuda, monkeypatch) -> None:
    engine_type = gemm.CublasGemm
    original = engine_type.multiply

    def swapped(self):  # A first: the row-major product comes out transposed
        self.a, self.b = self.b, self.a
        original(self)
        self.a, self.b = self.b, self.a

    monkeypatch.setattr(engine_type, "multiply", swapped)
    result = gemm.run_gpu_gemm(0, "fp32", 64, 2, warmup=0, sample_seconds=1e-5)
    assert result.status is ProbeStatus.ERROR and "verification failed" in result.error


def test_gemm_with_a_wrong_compute_type_is_refused(cuda, monkeypatch) -> None:
    monkeypatch.setitem(
        gemm.CUBLAS_TYPES, "fp16", ("CUDA_R_16F", "cublas_CUBLAS_COMPUTE_64F", np.float16)
    )
    with pytest.raises(RuntimeError, match="NOT_SUPPORTED"):
        gemm.run_gpu_gemm(0, "fp16", 64, 2, warmup=0)


def test_gemm_with_a_wrong_scalar_type_computes_garbage(cuda, monkeypatch) -> None:
    original = gemm.CublasGemm.__init__

    def float64_scalars(self, *args):
        original(self, *args)
        self.alpha, self.beta = np.ones(1, np.float64), np.zeros(1, np.float64)

    monkeypatch.setattr(gemm.CublasGemm, "__init__", float64_scalars)
    result = gemm.run_gpu_gemm(0, "bf16", 64, 2, warmup=0, sample_seconds=1e-5)
    assert result.status is ProbeStatus.ERROR  # alpha read as float32 bits of a float64 1.0
