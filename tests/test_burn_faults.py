"""The GPU burn's verdicts through the CUDA fake (tests/fakecuda.py) at a realistic size,
where the float64 host check samples 8 rows of 256: every element still wrong after the
full synchronise is a fault, intermittent or persistent (KRN003, KRN004); only what the
synchronised re-compare finds right again is a measurement problem (KRN023); a CUDA error
of the tool is ERROR (UNKNOWN, exit 3), one of the GPU's is a fault (KRN025)."""

from __future__ import annotations

import numpy as np
import pytest

from gpudiag.kernels import burn
from gpudiag.model import ProbeStatus, Severity, Snapshot
from gpudiag.rulefile import load_rules
from gpudiag.session import with_findings

RULES = load_rules()
N = 256  # 8 sampled rows of 256: a fault planted elsewhere is one the host never sees
FILL = 0.02  # of the fake's 64 MiB: 5 result matrices of 256 KiB


def unsampled_row(n: int = N) -> int:
    """A row of the product that the burn's float64 host check does not sample."""
    _a, _b, rows = burn.burn_inputs(n)
    return next(r for r in range(n // 2, n) if r not in set(rows.tolist()))


def plant(cuda, index: int, mutate, when: int = 5, every: bool = False) -> None:
    """gemmEx that writes product number `when` (counting the reference as 1) and then,
    on the same stream, changes its FP32 element `index` with `mutate` (uint32 -> uint32):
    once (a transient fault), or every time that matrix is computed again (`every`)."""
    calls = {"n": 0, "target": None}
    original = cuda.cublas_gemmEx

    def flaky(*args):
        original(*args)
        calls["n"] += 1
        if calls["n"] == when:
            calls["target"] = args[14]
        elif not every or args[14] != calls["target"]:
            return
        stream = cuda._stream(cuda.handles[args[0]]["stream"], 0)
        word = cuda.device_view(args[14] + 4 * index, 4, 0).view(np.uint32)

        def corrupt() -> None:
            word[0] = mutate(int(word[0]))

        cuda._enqueue(stream, corrupt, 0.0)

    cuda.cublas_gemmEx = flaky


def bits(value: float) -> int:
    return int(np.array(value, np.float32).view(np.uint32))


FAULTS = {
    "bit flip": lambda w: w ^ 1,  # the last mantissa bit: far under any float tolerance
    "NaN": lambda w: bits(float("nan")),
    "12345.0": lambda w: bits(12345.0),  # |C| <= 256 here
}


def findings(report: burn.BurnReport) -> dict[str, object]:
    """The burn's results judged by the shipped rules: rule id -> finding."""
    results = tuple(burn.burn_results(report, N))
    judged = with_findings(Snapshot("node", "2026-11-28T00:00:00Z", "test", kernels=results), RULES)
    return {f.rule_id: f for f in judged.findings if f.rule_id.startswith("KRN")}


@pytest.mark.parametrize("fault", FAULTS)
def test_a_transient_fault_in_an_unsampled_row_is_faulty(cuda, fault) -> None:
    plant(cuda, unsampled_row() * N + 3, FAULTS[fault])
    report = burn.burn_gpu(0, N, 0.01, fill=FILL)
    assert report.faulty, report
    assert (report.mismatches, report.nans) == (1, int(fault == "NaN"))
    assert (report.intermittent, report.persistent, report.unreproduced) == (1, 0, 0)
    fired = findings(report)
    assert fired["KRN003"].severity is Severity.CRITICAL
    assert "intermittent: 1 product right when recomputed" in fired["KRN003"].message
    assert ("KRN004" in fired) == (fault == "NaN") and "KRN023" not in fired


def test_a_fault_that_repeats_is_persistent(cuda) -> None:
    plant(cuda, unsampled_row() * N + 7, FAULTS["12345.0"], every=True)
    report = burn.burn_gpu(0, N, 0.01, fill=FILL)
    rounds = report.iterations // report.matrices
    assert report.faulty and rounds >= 1
    assert (report.mismatches, report.persistent, report.intermittent) == (rounds, rounds, 0)
    assert "persistent" in findings(report)["KRN003"].message


def test_a_wrong_first_product_is_found_by_the_host_check(cuda) -> None:
    """The reference itself wrong in a sampled row: every later product agrees with it,
    so only the float64 host check can see it (KRN001, verification failed)."""
    _a, _b, rows = burn.burn_inputs(N)
    plant(cuda, int(rows[0]) * N, FAULTS["12345.0"], when=1)
    report = burn.burn_gpu(0, N, 0.01, fill=FILL)
    assert report.faulty and report.fault.startswith("verification failed")
    assert findings(report)["KRN001"].severity is Severity.CRITICAL


def test_out_of_memory_during_the_fill_is_an_error_not_a_fault(cuda, monkeypatch) -> None:
    """Another process allocates between memGetInfo and the fill: the burn could not
    run. ERROR, and KRN003/KRN004 cannot check (UNKNOWN), never FAULTY."""
    memory = cuda.memGetInfo

    def raced() -> tuple[int, int]:
        free, total = memory()
        cuda.devices[cuda.getDevice()].free_bytes //= 4  # taken by someone else meanwhile
        return free, total

    monkeypatch.setattr(cuda, "memGetInfo", raced)
    (report,) = burn.burn_gpus([0], N, 0.01)
    assert not report.faulty
    assert report.error.startswith("could not burn GPU 0: CUDARuntimeError: cudaErrorMemoryAlloc")
    results = burn.burn_results(report, N)
    assert {r.metric: r.status for r in results} == dict.fromkeys(
        ("gflops", "mismatches", "nans"), ProbeStatus.ERROR
    )
    fired = findings(report)
    assert {fired[i].severity for i in ("KRN003", "KRN004")} == {Severity.UNKNOWN}
    assert "could not burn GPU 0" in fired["KRN003"].message
    assert not cuda.allocations  # what it had allocated is freed


@pytest.mark.parametrize("error", ["cudaErrorECCUncorrectable", "cudaErrorUnknown"])
def test_a_cuda_error_of_the_gpu_is_a_fault(cuda, error) -> None:
    """Uncorrectable ECC, or the unknown error of a GPU fallen off the bus: KRN025."""
    cuda.fail, cuda.fail_with = {1}, error
    reports = burn.burn_gpus([0, 1], 64, 0.01, fill=0.01)
    assert not reports[0].faulty and reports[0].iterations > 0
    assert reports[1].faulty and not reports[1].error
    assert error in reports[1].fault
    fired = findings(reports[1])
    assert fired["KRN025"].severity is Severity.CRITICAL and error in fired["KRN025"].message


def test_a_compiler_missing_is_an_error_not_a_fault(cuda, monkeypatch) -> None:
    """NVRTC missing (CuPy raises when RawModule compiles): the burn could not run."""

    def no_nvrtc(*args, **kwargs):
        raise RuntimeError("CuPy failed to load libnvrtc.so.12: OSError: cannot open shared file")

    monkeypatch.setattr(cuda, "RawModule", no_nvrtc)
    (report,) = burn.burn_gpus([0], 64, 0.01, fill=0.01)
    assert not report.faulty and "libnvrtc.so.12" in report.error
    assert findings(report)["KRN003"].severity is Severity.UNKNOWN


def test_cli_prints_error_and_exits_3_when_the_burn_cannot_run(cuda, capsys) -> None:
    """`gpudiag run burn` where another process takes the memory between memGetInfo and
    the fill (out of memory): at c9eee35 'FAULTY', exit 2; the burn could not run."""
    from gpudiag.cli import main

    memory = cuda.memGetInfo

    def raced() -> tuple[int, int]:
        free, total = memory()
        cuda.devices[cuda.getDevice()].free_bytes //= 4
        return free, total

    cuda.memGetInfo = raced
    code = main(["run", "burn", "--device", "1", "--seconds", "0.01", "--gemm-n", "64"])
    out = capsys.readouterr().out.splitlines()
    assert code == 3, out
    assert out[0].startswith(
        "burn           gpu1         ERROR: could not burn GPU 1: CUDARuntimeError: "
        "cudaErrorMemoryAllocation: out of memory"
    )
    assert "FAULTY" not in "\n".join(out)
