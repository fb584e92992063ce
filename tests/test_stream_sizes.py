"""STREAM's rule on a GPU: arrays at least 4x the last-level cache (the GPU's L2), or the
figure is the cache's. Through the CUDA fake, whose L2 (CacheModel) runs arrays that fit
it at L2_GBS: every plan's arrays are 4x the largest L2 known, and smaller ones are
refused, in one line with exit 3 from `gpudiag run`."""

from __future__ import annotations

import numpy as np
import pytest

from gpudiag.kernels import stream
from gpudiag.kernels.plans import (
    CACHE_MULTIPLE,
    KNOWN_L2_BYTES,
    LARGEST_L2,
    PLANS,
    KernelPlan,
)
from gpudiag.kernels.runner import PlanRun
from gpudiag.model import ProbeStatus

import fakecuda

H100_L2 = 50 * 2**20  # cudaDevAttrL2CacheSize on an H100
N = 1 << 20  # 8 MiB of FP64 per array: a quarter of an H100's L2 for the three


def test_every_plans_stream_arrays_on_a_gpu_are_4x_the_largest_l2_known() -> None:
    assert LARGEST_L2 == "B200" and KNOWN_L2_BYTES["B200"] == 126.5 * 2**20
    for name, plan in PLANS.items():
        assert "stream" in plan.kernels, name
        assert plan.gpu_stream_bytes is not None, name
        assert plan.gpu_stream_bytes >= CACHE_MULTIPLE * KNOWN_L2_BYTES[LARGEST_L2], name


def triad_gbs(cuda, n: int = N) -> float:
    """The triad's GB/s on the fake GPU 0, as STREAM counts bytes (3 arrays)."""
    ops = stream.CudaOperations(n, np.float64, 0)
    ops.LAUNCHES = 5
    try:
        seconds = ops.time("triad", ops.allocate())
    finally:
        ops.close()
    return 3 * n * 8 / seconds / 1e9


def test_arrays_in_the_l2_measure_the_cache_not_memory(cuda, monkeypatch) -> None:
    """Why the rule: without it (as at c9eee35), 8 MiB arrays on a GPU with an H100's L2
    report the cache's rate as memory bandwidth; beyond the L2, the memory's."""
    assert triad_gbs(cuda) == pytest.approx(fakecuda.MEMORY_GBS, rel=0.02)  # L2: 4 KiB
    cuda.devices[0].l2_bytes = H100_L2
    monkeypatch.setattr(stream, "check_not_cache_resident", lambda *args: None)
    assert triad_gbs(cuda) == pytest.approx(fakecuda.L2_GBS, rel=0.02)


def test_arrays_under_4x_the_gpus_l2_are_refused(cuda) -> None:
    cuda.devices[0].l2_bytes = H100_L2
    with pytest.raises(stream.CacheResident) as refused:
        stream.CudaOperations(N, np.float64, 0)
    assert str(refused.value) == (
        "STREAM arrays of 8388608 bytes are under 4x GPU 0's L2 cache (52428800 bytes, "
        "cudaDevAttrL2CacheSize): they would measure the cache, not memory; use 209715200 "
        "bytes or more"
    )
    assert not cuda.allocations


def test_an_l2_the_gpu_does_not_give_is_taken_as_the_largest_known(cuda, monkeypatch) -> None:
    def no_l2(attrib: int, device: int) -> int:
        raise fakecuda.CUDARuntimeError("cudaErrorInvalidValue")

    monkeypatch.setattr(cuda, "deviceGetAttribute", no_l2)
    assert stream.l2_bytes(cuda, 0) == (
        126.5 * 2**20,
        "not known: taken as the largest known, B200's",
    )


def test_a_plan_whose_arrays_fit_a_gpus_l2_gives_that_gpu_an_error(cuda) -> None:
    """A plan (the TUI's, --export --kernels) is never refused as a whole: the GPU whose
    L2 its arrays would fit gets an error result, never a memory figure."""
    cuda.devices[1].l2_bytes = 2**20  # 64 KiB arrays: 4x GPU 0's L2, in GPU 1's
    plan = KernelPlan(("stream",), "gpu", 1 << 20, trials=2, gpu_stream_bytes=1 << 16)
    results = PlanRun(plan).run()
    assert {r.device for r in results if r.status is ProbeStatus.OK} == {"gpu0"}
    (failed,) = [r for r in results if r.device == "gpu1"]
    assert failed.status is ProbeStatus.ERROR and failed.error.startswith("CacheResident: ")


def test_cli_refuses_a_cache_sized_stream_in_one_line(cuda, capsys) -> None:
    from gpudiag.cli import main

    cuda.devices[0].l2_bytes = H100_L2
    code = main(["run", "stream", "--device", "0", "--size", str(N * 8), "--trials", "2"])
    captured = capsys.readouterr()
    assert code == 3 and captured.out == ""
    assert captured.err.splitlines()[-1] == (
        "gpudiag: --size 8388608: STREAM arrays of 8388608 bytes are under 4x GPU 0's L2 "
        "cache (52428800 bytes, cudaDevAttrL2CacheSize): they would measure the cache, not "
        "memory; use 209715200 bytes or more"
    )
