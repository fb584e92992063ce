"""The GPU paths end to end through the strict NumPy fake of the device boundary
(tests/fakecuda.py): STREAM, GEMM, burn, copies, peer copies, all-reduce and the plan
runner, with figures checked against the fake's simulated rates."""

from __future__ import annotations

import numpy as np
import pytest

from gpudiag.kernels import device, stream
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
