"""Figures that cannot be true are errors, never passes (issue 25): a GEMM above the
model's highest peak in its precision, a STREAM above its memory bandwidth, a copy above
its link, by more than 5%, or CUDA events that disagree with the synchronised wall clock;
a rule reports them as a measurement problem, in a new run and in an old snapshot. The
GPU runs are the NumPy fake of the device boundary (tests/fakecuda.py), not a GPU."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from gpudiag.kernels import device, gemm
from gpudiag.kernels.plans import KernelPlan
from gpudiag.kernels.readings import impossible, kernel_readings, physical_bound
from gpudiag.kernels.runner import PlanRun
from gpudiag.kernels.stats import summarize
from gpudiag.model import KernelResult, ProbeStatus
from gpudiag.profiles import load_profiles
from gpudiag.snapshot import dumps, load

import fakecuda
from conftest import FIXTURES, REPO, run_cli
from hosttree import pci_tree

H100 = load_profiles()["h100-sxm5"].values


def _gemm(precision: str, tflops: float, device_name: str = "gpu0") -> KernelResult:
    samples = (tflops * 0.99, tflops, tflops * 1.01)
    return KernelResult(
        "gemm", device_name, precision, "TFLOP/s", ProbeStatus.OK, samples, summarize(samples)
    )


def test_a_right_fp64_tensor_core_figure_is_not_called_impossible() -> None:
    """57 TFLOP/s FP64 on an H100: above its vector 34, under its FP64 tensor cores' 67."""
    assert physical_bound("gemm", "fp64", H100)[0] == 67
    assert impossible(_gemm("fp64", 57.0), H100) == ""
    assert impossible(_gemm("fp64", 70.0), H100) == ""  # within 5% of 67
    assert impossible(_gemm("bf16", 796.0), H100) == ""
    shares = {r.key: r.value for r in kernel_readings([_gemm("fp64", 57.0)], {}, H100)}
    assert shares["gpu.0.kernel.gemm.fp64.share_of_peak"] == pytest.approx(57 / 67, abs=1e-3)
    assert shares["gpu.0.kernel.timing_consistent"] is True


def test_every_gemm_has_its_share_of_peak_on_the_kernels_screen_and_in_the_export() -> None:
    """The H100's figures of FIGURES.md (after the stream fix): a share for each of the
    five precisions; an impossible figure of an old snapshot says so in that column."""
    from gpudiag import views

    figures = {"fp64": 56.1, "fp32": 49.9, "tf32": 374.0, "fp16": 688.7, "bf16": 718.8}
    results = [_gemm(p, v) for p, v in figures.items()]
    readings = {r.key: r for r in kernel_readings(results, {}, H100)}
    peaks = {"fp64": 67, "fp32": 67, "tf32": 494.5, "fp16": 989.5, "bf16": 989.5}
    for precision, value in figures.items():
        share = readings[f"gpu.0.kernel.gemm.{precision}.share_of_peak"].value
        assert share == pytest.approx(value / peaks[precision], abs=1e-3)
    rows = {row[0]: row for row in views.kernel_table(results, readings).rows}
    assert rows["gemm.fp64"][5] == "84%" and rows["gemm.bf16"][5] == "73%"
    old = [_gemm("fp64", 745.0)]
    shown = views.kernel_table(old, {r.key: r for r in kernel_readings(old, {}, H100)})
    assert shown.rows[0][5] == "impossible"


@pytest.mark.parametrize(
    ("result", "bound"),
    [
        (_gemm("fp64", 745.0), "highest FP64 peak (fp64_tensor_tflops 67 TFLOP/s)"),
        (_gemm("fp32", 1101.0), "highest FP32 peak (fp32_tflops 67 TFLOP/s)"),
        (replace(_gemm("triad", 3600.0), kernel="stream", unit="GB/s"), "memory bandwidth"),
        (replace(_gemm("h2d.local", 70.0), kernel="copy", unit="GB/s"), "PCIe link (Gen5 x16"),
        (replace(_gemm("to.gpu1", 600.0), kernel="peer", unit="GB/s"), "NVLinks (18 x 26.562"),
    ],
    ids=["gemm-fp64", "gemm-fp32", "stream", "copy", "peer"],
)
def test_a_figure_above_the_physical_bound_is_impossible(result, bound) -> None:
    why = impossible(result, H100)
    assert why.startswith("timing inconsistent: ") and bound in why, why
    assert "not a GPU figure" in why


def test_an_impossible_gemm_in_a_new_run_is_an_error(cuda, tmp_path, monkeypatch) -> None:
    """The fake computes FP64 at 25 TFLOP/s on a GPU that sysfs calls an A100 (FP64 tensor
    19.5): the run's result is an error that says why, not a figure."""
    monkeypatch.setitem(fakecuda.TFLOPS, "fp64", 25.0)
    monkeypatch.setattr(gemm, "MAX_BATCH", 8)
    host = pci_tree(tmp_path, {"0000:18:00.0": "0x20b0", "0000:19:00.0": "0x1234"})
    plan = KernelPlan(("gemm",), "gpu", trials=2, gemm_n=512)
    results = {(r.device, r.metric): r for r in PlanRun(plan, host=host).run()}
    on_a100 = results[("gpu0", "fp64")]
    assert on_a100.status is ProbeStatus.ERROR and on_a100.stats is None
    assert on_a100.error.startswith("timing inconsistent: gemm fp64 25 TFLOP/s is above")
    assert results[("gpu1", "fp64")].status is ProbeStatus.OK  # no profile: not judged
    readings = {r.key: r for r in kernel_readings(list(results.values()), {}, {})}
    assert readings["gpu.0.kernel.timing_consistent"].value is False
    assert readings["gpu.0.kernel.verified"].value is True  # not a wrong result


def test_events_that_miss_the_gemms_are_an_error(cuda, monkeypatch) -> None:
    """The fault of ea3500d: the GEMMs on CuPy's current (legacy default) stream, the
    events on the engine's; the wall clock between device synchronisations sees them."""

    def on_the_current_stream(self) -> None:
        n, t, fake = self.n, self.data_type, self.cuda
        fake.cublas_gemmEx(
            self.handle, 0, 0, n, n, n, self.alpha.ctypes.data, self.b, t, n, self.a, t, n,
            self.beta.ctypes.data, self.c, t, n, self.compute_type, -1,
        )  # fmt: skip

    monkeypatch.setattr(gemm.CublasGemm, "multiply", on_the_current_stream)
    result = gemm.run_gpu_gemm(0, "fp64", 256, 2, warmup=0, sample_seconds=0.005)
    assert result.status is ProbeStatus.ERROR
    assert result.error.startswith("timing inconsistent: CUDA events "), result.error
    assert "wall clock between device synchronisations" in result.error


def test_events_that_agree_with_the_wall_clock_are_a_figure(cuda) -> None:
    result = gemm.run_gpu_gemm(0, "fp64", 256, 2, warmup=0, sample_seconds=0.005)
    assert result.status is ProbeStatus.OK, result.error
    assert dict(result.params)["event_over_wall"] == pytest.approx(1.0, abs=0.1)


def test_check_reads_an_old_snapshots_impossible_figure_as_a_measurement_problem(
    tmp_path,
) -> None:
    """A snapshot written by ea3500d on an H100 holds GEMM FP64 at 745 TFLOP/s as a
    result that passed: `check` reports it as a measurement problem (KRN022, a warning,
    action none), never as a GPU figure or a GPU fault, and the rule that would have
    judged it (KRN007) as UNKNOWN with KRN022 as the reason, not "not judged"."""
    target = tmp_path / "old.toml"
    replay = str(REPO / "snapshots" / "demo-hgx-h100-healthy.toml")
    export = run_cli("--root", str(FIXTURES / "host-basic"), "--nvml-replay", replay,
                     "--export", str(target))  # fmt: skip
    assert export.returncode in (0, 1), export.stderr
    snapshot = load(target)
    old = replace(snapshot, kernels=(_gemm("fp64", 745.0), _gemm("bf16", 719.0)))
    target.write_text(dumps(old))
    result = run_cli("check", str(target))
    assert result.returncode != 3, result.stderr
    lines = [line for line in result.stdout.splitlines() if line.split()[1:2] == ["KRN022"]]
    assert len(lines) == 1, result.stdout
    assert "WARNING" in lines[0].upper() and "CRITICAL" not in lines[0].upper()
    assert "measurement problem, not a GPU fault" in lines[0]
    assert "745" in lines[0] and "KRN001" not in result.stdout
    # the rule that would have judged the figure is UNKNOWN, with KRN022 as the reason
    (krn007,) = [line for line in result.stdout.splitlines() if "KRN007" in line]
    assert "UNKNOWN" in krn007 and "KRN022: timing inconsistent" in krn007


def test_the_gpu_benchmark_runs_through_the_fake_and_gives_a_verdict_per_figure(
    cuda, monkeypatch, capsys
) -> None:
    """benchmarks/gpu_kernels.py's own logic on one fake GPU (its figures are the fake's,
    no GPU's): each figure on one line with its CuPy reference (without torch: no torch
    line; BF16, which CuPy has not, says so), GEMM's events beside the wall clock, the
    burn in FP32 and BF16."""
    import importlib.util
    import sys

    spec = importlib.util.spec_from_file_location(
        "gpu_kernels", REPO / "benchmarks" / "gpu_kernels.py"
    )
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    cuda.devices = cuda.devices[:1]
    cuda.devices[0].free_bytes = 4 << 20  # a small GPU: the burn's matrices fill 90% of it
    monkeypatch.setattr(bench, "fused_triad_gbs", lambda gpu, n: 1950.0)  # CuPy's own kernel
    monkeypatch.setattr(bench, "cupy_copy_gbs", lambda gpu, n: 1900.0)  # (CuPy's own calls,
    monkeypatch.setattr(bench, "cupy_h2d_gbs", lambda gpu, n: 24.0)  # not the fake's)
    real_gemm = bench.cupy_gemm_tflops
    monkeypatch.setattr(bench, "cupy_gemm_tflops", lambda g, p, n: None if p == "bf16" else 0.5)
    monkeypatch.setattr(bench, "_torch", lambda: None)
    monkeypatch.setattr(sys, "argv", ["gpu_kernels", "--mib", "1", "--gemm-n", "128",
                                      "--burn-seconds", "0.01", "--no-plans"])  # fmt: skip
    try:
        assert bench.main() == 0
    finally:
        device.use(cuda)  # main() hands the boundary back to CuPy at its end
    lines = capsys.readouterr().out.splitlines()
    by = {line[:36].strip(): line for line in lines[1:]}
    assert "reference 1950" in by["gpu0 STREAM triad fp64 GB/s"]
    assert "reference 1900" in by["gpu0 STREAM copy fp64 GB/s"]
    assert "(cupy.ndarray.copy)" in by["gpu0 STREAM copy fp64 GB/s"]
    assert not [line for line in lines if "(torch)" in line]  # no torch: no torch lines
    for precision in gemm.PRECISIONS:
        line = by[f"gpu0 {precision.upper()} GEMM TFLOP/s"]
        if precision == "bf16":
            assert "CuPy has no bfloat16" in line and "no torch: reference skipped" in line
        else:
            assert "reference 0.5" in line and "cupy.matmul; events/wall " in line
    assert real_gemm(0, "bf16", 8) is None  # BF16 asks CuPy for nothing
    assert "pinned cudaMemcpy (CuPy)" in by["gpu0 h2d local GB/s"]
    assert by["gpu0 burn fp32"].split()[3] == "ok" and "0 not reproduced" in by["gpu0 burn bf16"]
    assert "gpu0 h2d local GB/s" in by


def test_stream_kernels_the_events_miss_are_an_error(cuda) -> None:
    """STREAM's timing events on another stream than its launches (the class of fault
    of ea3500d's GEMM): the kernels verify, but the triad's events disagree with the wall
    clock between device synchronisations, so no figure is given."""
    from gpudiag.kernels import stream
    from gpudiag.kernels.device import Timer

    ops = stream.CudaOperations(1 << 20, np.float64, 0)
    ops.timer.close()
    ops.timer = Timer(cuda, cuda.Stream(non_blocking=True))
    try:
        results = stream.run_stream(ops, device="gpu0", trials=2, warmup=0)
    finally:
        ops.close()
    assert {r.status for r in results} == {ProbeStatus.ERROR}
    assert results[3].error.startswith("timing inconsistent: CUDA events "), results[3].error
    assert "per triad" in results[3].error
