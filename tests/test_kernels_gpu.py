"""The GPU paths end to end through the strict NumPy fake of the device boundary
(tests/fakecuda.py): STREAM, GEMM, burn, copies, peer copies, all-reduce and the plan
runner, with figures checked against the fake's simulated rates."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from gpudiag.kernels import allreduce, burn, copies, device, gemm, stream
from gpudiag.kernels.plans import KERNELS, PLANS, KernelPlan
from gpudiag.kernels.readings import kernel_readings
from gpudiag.kernels.runner import PlanRun, cuda_to_nvml, rule_threshold, triad_threshold
from gpudiag.model import ProbeStatus, ReadingStatus, Snapshot
from gpudiag.nvml import Nvml, ReplayBackend
from gpudiag.snapshot import dumps, load, loads

import fakecuda
from fakecuda import FakeCuda
from hosttree import pci_tree

N = 1 << 20  # 8 MiB per FP64 array: a copy takes 8 us at the fake's 2000 GB/s, a launch 5 us


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_stream_on_a_gpu_times_the_kernels_only_and_verifies(cuda, dtype) -> None:
    ops = stream.CudaOperations(N * 8 // np.dtype(dtype).itemsize, dtype, 1)
    ops.LAUNCHES = 5  # fewer NumPy passes; the lead launch still hides the launch gap
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


def test_stream_arguments_of_the_wrong_type_are_refused(cuda) -> None:
    ops = stream.CudaOperations(4096, np.float32, 0)
    arrays = ops.allocate()
    ops.dtype = np.dtype(np.float64)  # a float64 scalar for the f32 kernels
    with pytest.raises(TypeError, match="float passed as float64"):
        ops.run("scale", arrays)
    ops.dtype = np.dtype(np.float32)
    ops.close()


def test_results_read_without_a_synchronisation_are_stale(cuda, monkeypatch) -> None:
    monkeypatch.setattr(cuda, "streamSynchronize", lambda stream: None)  # forgotten
    ops = stream.CudaOperations(4096, np.float64, 0)
    results = stream.run_stream(ops, device="gpu0", trials=2, warmup=0)
    assert all(r.status is ProbeStatus.ERROR and "verification" in r.error for r in results)


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


# ------------------------------------------------------------------ copies

CPUS = sorted(os.sched_getaffinity(0))
TWO_NODES = {0: CPUS[:1], 1: CPUS[1:2] or CPUS[:1]}
NBYTES = 1 << 20


def test_host_copies_on_gpus_are_copy_results_that_a_snapshot_keeps(cuda) -> None:
    engine = copies.CudaEngine([0, 1], TWO_NODES)
    try:
        results = copies.run_host_copies(
            engine, {0: 0, 1: 1}, [0, 1], nbytes=NBYTES, trials=2, warmup=0
        )
    finally:
        engine.close()
    assert {r.kernel for r in results} == {"copy"}  # not the engine object (issue 17, 1)
    by = {(r.device, r.metric): r for r in results}
    assert by[("gpu1", "h2d.local")].stats.median == pytest.approx(fakecuda.PCIE_GBS, rel=0.01)
    assert by[("gpu0", "bidir.remote")].stats.median == pytest.approx(
        2 * fakecuda.PCIE_GBS, rel=0.01
    )
    assert all(r.status is ProbeStatus.OK for r in results)
    snap = Snapshot("node", "2026-01-01T00:00:00Z", "0", kernels=tuple(results))
    back = loads(dumps(snap))
    assert back.kernels == snap.kernels
    derived = {r.key: r for r in kernel_readings(back.kernels, {})}
    assert derived["gpu.1.kernel.copy.h2d.local"].value == pytest.approx(fakecuda.PCIE_GBS, 0.01)
    assert not cuda.allocations and not cuda.registered


def test_peer_copies_between_gpus_with_access_and_no_latency_claim(cuda) -> None:
    engine = copies.CudaEngine([0, 1], TWO_NODES)
    try:
        results = copies.run_peer_matrix(engine, nbytes=8 * NBYTES, trials=2, warmup=0)
    finally:
        engine.close()
    assert [(r.device, r.metric) for r in results] == [
        ("gpu0", "to.gpu1"),
        ("gpu0", "bidir.gpu1"),
        ("gpu0", "latency.gpu1"),
        ("gpu1", "to.gpu0"),
        ("gpu1", "bidir.gpu0"),
        ("gpu1", "latency.gpu0"),
    ]
    assert results[0].stats.median == pytest.approx(fakecuda.NVLINK_GBS, rel=0.01)
    assert {dict(r.params)["peer_access"] for r in results} == {"enabled"}
    # the link's round trip, measured on the device: no Python call in it (issue 17, 7)
    latency = results[2].stats.median
    assert results[2].unit == "us" and latency == pytest.approx(fakecuda.PEER_LATENCY_S * 1e6, 0.01)


def test_no_latency_figure_without_peer_access() -> None:
    cuda = FakeCuda(2, peer=False)
    previous = device.use(cuda)
    try:
        engine = copies.CudaEngine([0, 1], TWO_NODES)
        try:
            results = copies.run_peer_matrix(engine, nbytes=NBYTES, trials=2, warmup=0)
        finally:
            engine.close()
    finally:
        device.use(previous)
    assert [r.metric for r in results] == ["to.gpu1", "bidir.gpu1", "to.gpu0", "bidir.gpu0"]
    assert {dict(r.params)["peer_access"] for r in results} == {"unsupported"}
    assert results[0].stats.median == pytest.approx(fakecuda.UNPEERED_GBS, rel=0.01)


def test_a_corrupted_gpu_copy_is_an_error(cuda, monkeypatch) -> None:
    engine = copies.CudaEngine([0, 1], TWO_NODES)
    original = cuda.memcpyPeerAsync

    def flip(dst, dstDevice, src, srcDevice, size, stream):
        original(dst, dstDevice, src, srcDevice, size - 8, stream)  # the last word is lost

    monkeypatch.setattr(cuda, "memcpyPeerAsync", flip)
    try:
        results = copies.run_peer_matrix(engine, nbytes=NBYTES, trials=2, warmup=0)
    finally:
        engine.close()
    copied = [r for r in results if r.unit == "GB/s"]
    assert len(copied) == 4 and all("verification failed" in r.error for r in copied)


# ------------------------------------------------------------------ burn


@pytest.mark.parametrize("precision", ["fp32", "bf16", "fp16", "fp64"])
def test_burn_fills_memory_and_compares_on_the_gpu(cuda, precision) -> None:
    report = burn.burn_gpu(0, 256, 0.01, precision=precision)
    assert not report.faulty, report.error
    nbytes = 256 * 256 * (8 if precision == "fp64" else 4 if precision == "fp32" else 2)
    # as gpu-burn: result matrices in 90% of the free memory (after A, B and the reference)
    assert report.matrices == int((fakecuda.DEVICE_BYTES - 3 * nbytes - 16) * 0.9) // nbytes
    assert report.iterations >= report.matrices and report.gflops > 0
    assert not cuda.allocations


def _corrupting(cuda, once: bool):
    """gemmEx that gets the fourth result matrix wrong (one element off, one NaN): every
    time it computes it (a broken GPU), or once only."""
    calls = {"n": 0, "target": None}
    original = cuda.cublas_gemmEx

    def flaky(*args):
        original(*args)
        calls["n"] += 1
        if calls["n"] == 5:
            calls["target"] = args[14]
        elif once or args[14] != calls["target"]:
            return
        stream = cuda._stream(cuda.handles[args[0]]["stream"], 0)
        c = cuda.device_view(args[14], 8, 0).view(np.float32)

        def corrupt() -> None:
            c[0], c[1] = c[0] + np.float32(1), np.float32(np.nan)

        cuda._enqueue(stream, corrupt, 0.0)

    return flaky


def test_burn_counts_a_wrong_product_and_a_nan(cuda, monkeypatch) -> None:
    monkeypatch.setattr(cuda, "cublas_gemmEx", _corrupting(cuda, once=False))
    report = burn.burn_gpu(0, 64, 0.01, fill=0.01)
    rounds = report.iterations // report.matrices  # every round gets it wrong again
    assert report.faulty and rounds >= 1
    assert (report.mismatches, report.nans) == (2 * rounds, rounds)
    assert report.unreproduced == 0 and report.persistent == rounds  # wrong again recomputed


def test_a_wrong_product_the_host_sees_is_a_fault_though_the_recompute_is_right(
    cuda, monkeypatch
) -> None:
    """One corrupted product (once: a transient fault) still wrong after the full
    synchronise: a fault, intermittent (its recompute is right). At n = 8 the host
    samples every row; tests/test_burn_faults.py plants faults in rows it does not."""
    monkeypatch.setattr(cuda, "cublas_gemmEx", _corrupting(cuda, once=True))
    report = burn.burn_gpu(0, 8, 0.05, fill=0.0001)  # more rounds after the faulty one
    assert report.faulty and report.mismatches == 2 and report.nans == 1
    assert report.unreproduced == 0 and report.intermittent == 1


def test_burn_mismatches_read_before_the_gemms_wrote_are_not_reproduced(cuda, monkeypatch):
    """The fault of ea3500d: the burn's GEMMs on CuPy's current (legacy default) stream,
    its compares on the engine's: they compare matrices not yet written. The confirmation
    (a full synchronise, compare again) finds none: a warning, never KRN003."""
    calls = {"n": 0}
    original = gemm.CublasGemm.multiply

    def racy(self) -> None:
        calls["n"] += 1
        if calls["n"] == 1:  # the reference, as the fix computes it
            return original(self)
        n, t, fake = self.n, self.data_type, self.cuda
        fake.cublas_gemmEx(
            self.handle, 0, 0, n, n, n, self.alpha.ctypes.data, self.b, t, n, self.a, t, n,
            self.beta.ctypes.data, self.c, t, n, self.compute_type, -1,
        )  # fmt: skip

    monkeypatch.setattr(gemm.CublasGemm, "multiply", racy)
    report = burn.burn_gpu(0, 256, 0.01, fill=0.05)
    assert (report.mismatches, report.nans, report.error) == (0, 0, "")
    assert report.unreproduced > 0 and not report.faulty
    by = {r.metric: r for r in burn.burn_results(report, 256)}
    assert by["mismatches"].samples == (0.0,)
    assert by["unreproduced"].samples == (float(report.unreproduced),)


def test_a_failing_gpu_burns_as_an_error_while_the_others_burn(cuda) -> None:
    cuda.fail = {1}
    reports = burn.burn_gpus([0, 1], 64, 0.05, fill=0.05)
    assert not reports[0].faulty and reports[0].iterations > 0
    # a launch failure says nothing about the GPU: the burn could not run (ERROR, UNKNOWN)
    assert not reports[1].faulty and "cudaErrorLaunchFailure" in reports[1].error
    results = burn.burn_results(reports[1], 64)
    assert [r.status for r in results] == [ProbeStatus.ERROR] * 3


def test_the_cpu_burn_leaves_a_cpu_per_gpu_to_the_launchers() -> None:
    assert burn.split_cpus([0, 1, 2, 3], 2) == ([0, 1], [2, 3])
    assert burn.split_cpus([0, 1], 8) == ([0], [1])
    assert burn.split_cpus([0], 1) == ([0], [])
    seen = {}

    def spy(xp, n, seconds, device, **kwargs):
        from threadpoolctl import threadpool_info

        seen["affinity"] = sorted(os.sched_getaffinity(0))
        seen["blas"] = {i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"}
        return burn.BurnReport(device)

    import threading

    original = burn.burn_device
    burn.burn_device = spy
    try:
        cpus = sorted(os.sched_getaffinity(0))[:1]
        thread = threading.Thread(target=burn.burn_cpu, args=(64, 0.01, cpus))
        thread.start()
        thread.join()
    finally:
        burn.burn_device = original
    assert seen == {"affinity": cpus, "blas": {1}}


def test_nvml_sampling_falls_back_to_the_throttle_reasons_call() -> None:
    import threading

    from gpudiag.nvml import Nvml, ReplayBackend

    old_driver = {
        "format": "gpudiag-nvml-replay",
        "version": 1,
        "system": {},
        "devices": [
            {
                "nvmlDeviceGetCurrentClocksEventReasons": {"error": "FunctionNotFound"},
                "nvmlDeviceGetCurrentClocksThrottleReasons": 8,
            },
            {"nvmlDeviceGetCurrentClocksEventReasons": 1},
        ],
    }
    nvml = Nvml(ReplayBackend(old_driver))
    reports = {0: burn.BurnReport("gpu0"), 1: burn.BurnReport("gpu1")}
    stop = threading.Event()
    # CUDA device 0 is NVML's GPU 1 and CUDA 1 NVML's 0 (CUDA_VISIBLE_DEVICES=1,0)
    sampler = threading.Thread(
        target=burn.sample_nvml, args=(nvml, [0, 1], stop, 0.02, reports, {0: 1, 1: 0})
    )
    sampler.start()
    threading.Event().wait(0.1)
    stop.set()
    sampler.join()
    assert reports[0].samples[0]["throttle_reasons"] == ["GpuIdle"]
    assert reports[1].samples[0]["throttle_reasons"] == ["HwSlowdown"]


# ------------------------------------------------------------------ the plan runner

SMALL_GPU = KernelPlan(
    ("stream", "gemm", "copy", "peer", "burn"),
    "gpu",
    1 << 20,
    trials=2,
    gemm_n=256,
    burn_seconds=0.02,
)


def test_a_failing_gpu_is_its_own_error_and_the_others_carry_on(cuda) -> None:
    cuda.fail = {1}
    run = PlanRun(SMALL_GPU)
    results = run.run()
    gpu0 = [r for r in results if r.device == "gpu0"]
    gpu1 = [r for r in results if r.device == "gpu1"]
    assert {r.kernel for r in gpu0 if r.status is ProbeStatus.OK} == {
        "stream",
        "gemm",
        "copy",
        "burn",
    }
    assert {r.kernel for r in gpu1} == {"stream", "gemm", "copy", "peer", "burn"}
    assert all(r.status is ProbeStatus.ERROR for r in gpu1)
    assert all("cudaErrorLaunchFailure" in r.error for r in gpu1)
    # the peer matrix needs both GPUs: each carries the reason
    assert {r.status for r in results if r.kernel == "peer"} == {ProbeStatus.ERROR}
    readings = {r.key: r for r in kernel_readings(results, {})}
    assert readings["gpu.1.kernel.gemm.fp64"].status is ReadingStatus.ERROR
    assert readings["gpu.0.kernel.gemm.fp64"].ok


def test_results_are_labelled_with_nvml_indices_by_uuid_or_bus_id(cuda) -> None:
    # CUDA_VISIBLE_DEVICES=2,0: CUDA 0 is NVML 2 (same UUID), CUDA 1 is NVML 0 (found by
    # its bus id: this NVML shows no UUID for it)
    cuda.devices[0].uuid = bytes.fromhex("c2" * 16)
    cuda.devices[1].bus_id = "0000:3A:00.0"
    nvml_gpus = [
        {"nvmlDeviceGetUUID": {"error": "NotSupported"},
         "nvmlDeviceGetPciInfo": {"busId": "00000000:3A:00.0"}},
        {"nvmlDeviceGetUUID": "GPU-" + "b1" * 4 + "-b1b1-b1b1-b1b1-" + "b1" * 6,
         "nvmlDeviceGetPciInfo": {"busId": "00000000:99:00.0"}},
        {"nvmlDeviceGetUUID": "GPU-c2c2c2c2-c2c2-c2c2-c2c2-c2c2c2c2c2c2",
         "nvmlDeviceGetPciInfo": {"busId": "00000000:18:00.0"}},
    ]  # fmt: skip
    replay = {"format": "gpudiag-nvml-replay", "version": 1, "system": {}, "devices": nvml_gpus}
    nvml = Nvml(ReplayBackend(replay))
    assert cuda_to_nvml([0, 1], nvml) == {0: 2, 1: 0}
    plan = KernelPlan(("gemm", "peer"), "gpu", 1 << 20, trials=2, gemm_n=64)
    results = PlanRun(plan, nvml=nvml).run()
    assert {r.device for r in results} == {"gpu2", "gpu0"}
    assert {r.metric for r in results if r.kernel == "peer" and r.device == "gpu2"} == {
        "to.gpu0",
        "bidir.gpu0",
        "latency.gpu0",
    }
    assert cuda_to_nvml([0, 1], None) == {0: 0, 1: 1}  # no NVML: CUDA's own indices


CLI_WITH_FAKE = """
import sys
sys.path.insert(0, {tests!r})
import fakecuda
from gpudiag.kernels import device, plans
device.use(fakecuda.FakeCuda(2, fail={{1}}))
# the quick plan, smaller: NumPy stands in for the GPUs' speed
plans.PLANS["quick"] = plans.KernelPlan(("stream", "gemm", "copy", "peer"), "all", 1 << 20,
                                        trials=2, gemm_n=128)
from gpudiag.cli import main
sys.exit(main(sys.argv[1:]))
"""


def test_export_with_kernels_writes_the_snapshot_while_a_gpu_fails(tmp_path) -> None:
    target = tmp_path / "node.toml"
    script = CLI_WITH_FAKE.format(tests=str(Path(__file__).parent))
    result = subprocess.run(
        [sys.executable, "-c", script, "--export", str(target), "--kernels", "quick"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, "NO_COLOR": "1"},
    )
    assert result.returncode in (0, 1, 2), result.stderr
    assert "internal error" not in result.stderr
    snapshot = load(target)
    by = {(k.kernel, k.device, k.metric): k for k in snapshot.kernels}
    assert by[("copy", "gpu0", "h2d.local")].status is ProbeStatus.OK
    assert by[("gemm", "gpu0", "bf16")].status is ProbeStatus.OK
    assert by[("gemm", "gpu1", "bf16")].status is ProbeStatus.ERROR
    assert "cudaErrorLaunchFailure" in by[("gemm", "gpu1", "bf16")].error
    assert snapshot.probes  # the probe readings are kept with the kernel results


# ------------------------------------------------------------------ all-reduce


def _busbw(size: int, ranks: int) -> float:
    """What the fake's NCCL model gives: latency plus bytes at its bus bandwidth."""
    factor = 2 * (ranks - 1) / ranks
    seconds = fakecuda.NCCL_LATENCY_S + size * factor / (fakecuda.NCCL_BUSBW_GBS * 1e9)
    return size / seconds / 1e9 * factor


def test_allreduce_sizes_and_bus_factor_as_nccl_tests() -> None:
    assert allreduce.sizes(64) == [8, 16, 32, 64]
    assert allreduce.sizes(100, 10) == [8, 16, 32, 64]  # whole float32 elements
    assert allreduce.bus_factor(8) == pytest.approx(1.75) and allreduce.bus_factor(2) == 1.0


@pytest.mark.parametrize("ranks", [2, 4])
def test_allreduce_across_gpus_measures_busbw_and_checks_the_sums(ranks) -> None:
    cuda = FakeCuda(ranks)
    results = allreduce.run_allreduce(
        list(range(ranks)), max_bytes=1 << 20, min_bytes=8, trials=2, warmup=0, cuda=cuda
    )
    by = {r.metric: r for r in results}
    assert all(r.status is ProbeStatus.OK for r in results), [r.error for r in results]
    assert {r.device for r in results} == {"gpus"}
    assert len(allreduce.sizes(1 << 20)) == 18 and len(results) == 2 * 18 + 1
    for size in (8, 1 << 12, 1 << 20):
        assert by[f"busbw.{size}"].stats.median == pytest.approx(_busbw(size, ranks), rel=0.02)
        algbw = by[f"algbw.{size}"].stats.median
        assert by[f"busbw.{size}"].stats.median == pytest.approx(algbw * 2 * (ranks - 1) / ranks)
    assert by["busbw"].stats == by[f"busbw.{1 << 20}"].stats
    assert not cuda.allocations


def test_a_wrong_allreduce_sum_is_an_error(monkeypatch) -> None:
    cuda = FakeCuda(2)
    original = fakecuda.CommGroup.submit

    def drop_rank_one(self, rank, call):  # rank 1's data never arrives: sum == rank 0's
        _send, _recv, count, datatype, op, stream = call
        if rank == 1:
            scratch = cuda.malloc(count * 4)  # an all-zero buffer instead
            zeros = cuda.device_view(scratch, count * 4)
            zeros[:] = 0
            call = (scratch, scratch, count, datatype, op, stream)
        original(self, rank, call)

    monkeypatch.setattr(fakecuda.CommGroup, "submit", drop_rank_one)
    results = allreduce.run_allreduce([0, 1], max_bytes=64, trials=2, warmup=0, cuda=cuda)
    assert all(r.status is ProbeStatus.ERROR for r in results)
    assert "verification failed: gpu0 element 0" in results[0].error


def test_allreduce_on_one_gpu_is_skipped_with_the_reason() -> None:
    (result,) = allreduce.run_allreduce([0], max_bytes=64, cuda=FakeCuda(1))
    assert result.status is ProbeStatus.SKIPPED and "one GPU" in result.error


def test_allreduce_in_a_plan_becomes_a_node_reading_that_the_rule_judges(cuda) -> None:
    plan = KernelPlan(("allreduce",), "gpu", 1 << 20, trials=2)
    results = PlanRun(plan).run()
    assert results[-1].metric == "busbw" and results[-1].status is ProbeStatus.OK
    peaks = {"nvlink_count": 18, "nvlink_gbs": 26.562}
    derived = {r.key: r for r in kernel_readings(results, {}, peaks)}
    busbw = derived["node.kernel.allreduce.busbw"].value
    assert busbw == pytest.approx(_busbw(1 << 20, 2), rel=0.02)
    share = derived["node.kernel.allreduce.busbw.share_of_nvlink"].value
    assert share == pytest.approx(busbw / (18 * 26.562), abs=1e-4)
    assert "allreduce" in PLANS["full"].kernels and "allreduce" in KERNELS


def test_cli_run_allreduce_prints_busbw_per_size() -> None:
    script = CLI_WITH_FAKE.format(tests=str(Path(__file__).parent)).replace("fail={1}", "")
    result = subprocess.run(
        [sys.executable, "-c", script, "run", "allreduce", "--device", "gpu",
         "--size", "65536", "--trials", "2"],
        capture_output=True, text=True, timeout=120, check=False,
        env={**os.environ, "NO_COLOR": "1"},
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].split()[:3] == ["kernel", "device", "median"]
    # result rows only: a note on a busy host ("WARNING: other processes used ...") may
    # follow them, as it should on a loaded machine
    rows = {line.split()[0]: line.split() for line in lines[1:] if line.startswith("all")}
    assert rows["allreduce.busbw.8"][1] == "gpus" and rows["allreduce.busbw"][-1] == "GB/s"
    assert "allreduce.algbw.65536" in rows and len(rows) == 2 * 14 + 1


def test_cli_burns_the_gpus_in_the_precision_asked() -> None:
    script = CLI_WITH_FAKE.format(tests=str(Path(__file__).parent)).replace("fail={1}", "")
    script = script.replace("sys.exit(main", "code = main").replace(
        "(sys.argv[1:]))", "(sys.argv[1:])"
    )
    script += "\nprint(sorted({name for name, _ in device.api().calls if 'Gemm' in name}))\n"
    script += "print({a[3:5] for name, a in device.api().calls if name == 'cublasGemmEx'})\n"
    script += "sys.exit(code)\n"
    result = subprocess.run(
        [sys.executable, "-c", script, "run", "burn", "--device", "gpu", "--seconds", "0.05",
         "--gemm-n", "256", "--burn-precision", "bf16"],
        capture_output=True, text=True, timeout=120, check=False,
        env={**os.environ, "NO_COLOR": "1"},
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("burn           gpu0         ok: ")
    assert lines[1].startswith("burn           gpu1         ok: ")
    assert lines[-2] == "['cublasGemmEx']"
    # every GEMM on CUDA_R_16BF data with CUBLAS_COMPUTE_32F (values checked against CuPy)
    assert lines[-1] == f"{{({FakeCuda.CUDA_R_16BF}, {FakeCuda.cublas_CUBLAS_COMPUTE_32F})}}"


def test_the_triad_threshold_is_the_rule_share_of_the_model_bandwidth(tmp_path: Path) -> None:
    host = pci_tree(tmp_path, {"0000:18:00.0": "0x2330", "0000:19:00.0": "0x1234"})
    # H100 SXM5: KRN005/KRN006 judge triad at its band floor, 0.78 x 3350 GB/s
    # (rules/profiles.toml)
    assert triad_threshold(host, "0000:18:00.0", "fp64") == pytest.approx(2613)
    assert triad_threshold(host, "00000000:18:00.0", "fp32") == pytest.approx(2613)
    assert triad_threshold(host, "0000:19:00.0", "fp64") is None  # no profile for 0x1234
    assert triad_threshold(host, "0000:1a:00.0", "fp64") is None  # no such device
    assert triad_threshold(host, "0000:18:00.0", "fp16") is None  # no rule judges it


def test_until_confident_on_a_gpu_stops_at_its_models_threshold(cuda, tmp_path: Path) -> None:
    """The fake GPU 0 is an H100 SXM5 by its sysfs device id; its triad (the fake's 2000
    GB/s copy engine, not a GPU figure) lies wholly under 2613 GB/s: the run says so.
    GPU 1 has no profile: the tight interval alone decides, no threshold recorded."""
    host = pci_tree(tmp_path, {"0000:18:00.0": "0x2330", "0000:19:00.0": "0x1234"})
    plan = KernelPlan(("stream",), "gpu", 1 << 20, trials=2, dtypes=("fp64",))
    plan = replace(plan, until_confident=5.0)
    results = PlanRun(plan, host=host).run()
    triads = {r.device: r for r in results if r.metric == "triad"}
    params = dict(triads["gpu0"].params)
    assert params["threshold"] == pytest.approx(2613) and params["threshold_cleared"] is True
    assert triads["gpu0"].stats is not None and triads["gpu0"].stats.ci95_high < 2613
    assert "threshold" not in dict(triads["gpu1"].params)


def test_the_gemm_thresholds_are_krn007_and_krn008s(tmp_path: Path) -> None:
    host = pci_tree(tmp_path, {"0000:18:00.0": "0x2330", "0000:19:00.0": "0x1234"})
    # H100 SXM5: 67 TFLOP/s FP64 GEMM (its tensor cores), 989.5 FP16 (rules/profiles.toml),
    # judged at their band floors, half of each
    assert rule_threshold(host, "0000:18:00.0", "gemm.fp64") == pytest.approx(33.5)
    assert rule_threshold(host, "0000:18:00.0", "gemm.fp16") == pytest.approx(494.75)
    assert rule_threshold(host, "0000:18:00.0", "gemm.bf16") is None  # no rule judges it
    assert rule_threshold(host, "0000:19:00.0", "gemm.fp64") is None  # no profile


def test_until_confident_reaches_gemm_on_a_gpu(cuda, tmp_path: Path) -> None:
    """GEMM on the CUDA fake (its timings, not a GPU figure) with --until-confident: the
    plan's budget reaches run_gpu_gemm, which records whether its interval settled and,
    on the H100 (GPU 0), the FP64 threshold it was judged against."""
    host = pci_tree(tmp_path, {"0000:18:00.0": "0x2330", "0000:19:00.0": "0x1234"})
    plan = replace(KernelPlan(("gemm",), "gpu", trials=2, gemm_n=64), until_confident=2.0)
    results = PlanRun(plan, host=host).run()
    gemms = {(r.device, r.metric): r for r in results if r.status is ProbeStatus.OK}
    on_h100 = dict(gemms[("gpu0", "fp64")].params)
    assert on_h100["threshold"] == pytest.approx(33.5) and "confident" in on_h100
    assert "threshold" not in dict(gemms[("gpu1", "fp64")].params)
    assert all("confident" in dict(r.params) for r in gemms.values())


def test_cuda_devices_are_matched_by_uuid_first_then_by_bus_id(cuda) -> None:
    """NVML answers no bus id for GPU 1 and 2 (a failed nvmlDeviceGetPciInfo): CUDA 0 and
    1 are found by UUID alone. Where a UUID and a bus id name different NVML GPUs, the
    UUID (the GPU itself) wins over the bus id (where it sits)."""
    cuda.devices[0].uuid = bytes.fromhex("c2" * 16)
    cuda.devices[1].uuid = bytes.fromhex("b1" * 16)
    nvml_gpus = [
        {"nvmlDeviceGetUUID": "GPU-" + "d3" * 4 + "-d3d3-d3d3-d3d3-" + "d3" * 6,
         "nvmlDeviceGetPciInfo": {"busId": "00000000:18:00.0"}},  # CUDA 0's bus id
        {"nvmlDeviceGetUUID": "GPU-" + "b1" * 4 + "-b1b1-b1b1-b1b1-" + "b1" * 6,
         "nvmlDeviceGetPciInfo": {"error": "NotSupported"}},
        {"nvmlDeviceGetUUID": "GPU-c2c2c2c2-c2c2-c2c2-c2c2-c2c2c2c2c2c2",
         "nvmlDeviceGetPciInfo": {"error": "NotSupported"}},
    ]  # fmt: skip
    replay = {"format": "gpudiag-nvml-replay", "version": 1, "system": {}, "devices": nvml_gpus}
    assert cuda_to_nvml([0, 1], Nvml(ReplayBackend(replay))) == {0: 2, 1: 1}
