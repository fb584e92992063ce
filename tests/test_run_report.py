"""gpudiag run, honest about noise: progress on stderr, partial results on Ctrl-C, and a
warning beside a figure whose spread makes it untrustworthy (synthetic samples whose
spread is known)."""

from __future__ import annotations

import io
import random
import signal
import subprocess
import sys
import time

from gpudiag.kernels.stats import summarize
from gpudiag.model import KernelResult, ProbeStatus
from gpudiag.run_report import Progress, busy_note, trust_note

from conftest import REPO


def _result(cv: float) -> KernelResult:
    rng = random.Random(1)
    samples = tuple(100 * (1 + rng.gauss(0, cv)) for _ in range(200))
    return KernelResult(
        "stream", "cpu", "triad", "GB/s", ProbeStatus.OK, samples, summarize(samples)
    )


def test_a_noisy_result_is_called_untrustworthy_and_a_quiet_one_is_not() -> None:
    assert trust_note(_result(0.40)).startswith("WARNING: cv 38% over 10%")  # 40% drawn
    assert trust_note(_result(0.02)) == ""
    assert busy_note(60.0).startswith("WARNING: other processes used 60%")
    assert busy_note(5.0) == "" and busy_note(None) == ""


def test_progress_writes_lines_when_not_a_terminal() -> None:
    out = io.StringIO()
    progress = Progress(out)
    for fraction in (0.0, 0.1, 0.3, 0.31, 1.0):
        progress("stream fp64 cpu", fraction)
    assert out.getvalue().splitlines() == [
        "gpudiag: stream fp64 cpu: 0%",
        "gpudiag: stream fp64 cpu: 30%",
        "gpudiag: stream fp64 cpu: 100%",
    ]


def test_ctrl_c_prints_the_partial_results() -> None:
    run = subprocess.Popen(
        [sys.executable, "-m", "gpudiag", "run", "stream", "--size", "65536", "--seconds", "60"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )
    assert run.stderr is not None
    try:
        line = run.stderr.readline()  # the first progress line: the trials have begun
        assert line.startswith("gpudiag: stream fp64"), line
        time.sleep(1.0)
        run.send_signal(signal.SIGINT)
        out, err = run.communicate(timeout=60)
    finally:
        run.kill()
    assert run.returncode == 130, err
    assert "interrupted: stopping at the next chunk" in err
    triad = [line for line in out.splitlines() if line.startswith("stream.triad.fp64")]
    assert triad and float(triad[0].split()[2]) > 0  # a measured median, not a zero
    assert err.rstrip().endswith("gpudiag: interrupted (the results above are partial)")


def test_varying_trials_with_a_tight_median_are_noted_not_condemned() -> None:
    rng = random.Random(2)
    samples = tuple(100 * (1 + rng.gauss(0, 0.2)) for _ in range(2000))
    result = KernelResult(
        "stream", "cpu", "triad", "GB/s", ProbeStatus.OK, samples, summarize(samples)
    )
    note = trust_note(result)
    assert note.startswith("note: trials vary (cv 20%), but over 2000 of them the median")


def test_until_confident_goes_with_kernels() -> None:
    from conftest import run_cli

    run = run_cli("--until-confident", "3")
    assert run.returncode == 3
    assert run.stderr.strip() == (
        "gpudiag: --until-confident takes positive seconds and goes with --kernels"
    )
