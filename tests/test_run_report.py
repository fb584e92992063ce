"""gpudiag run, honest about noise: progress on stderr, partial results on Ctrl-C, and a
warning beside a figure whose spread makes it untrustworthy (synthetic samples whose
spread is known)."""

from __future__ import annotations

import io
import random
import signal
import subprocess
import sys
from pathlib import Path

from gpudiag.hostfs import HostFS
from gpudiag.kernels.plans import KernelPlan
from gpudiag.kernels.runner import PlanRun
from gpudiag.kernels.stats import summarize
from gpudiag.model import KernelResult, ProbeStatus
from gpudiag.run_report import Progress, busy_note, print_results, trust_note

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
    """Ctrl-C once trials have been measured: the results so far, said to be partial.
    The first progress line (0%) is written before the warm-up (Numba's compile, seconds
    on a loaded machine), so a Ctrl-C a second after it could land before any trial and
    every row was CANCELLED with no figure. The 25% line comes once 3 s of the 12 asked
    for have passed AND 4 of the 16 rounds (2 warm-up, 14 trials) are done: 2 trials at
    least are measured, and 9 s of the run are left for the Ctrl-C to land in."""
    run = subprocess.Popen(
        [sys.executable, "-m", "gpudiag", "run", "stream", "--size", "65536",
         "--trials", "14", "--seconds", "12"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )  # fmt: skip
    assert run.stderr is not None
    try:
        lines = [run.stderr.readline()]
        # the first line past 0% (a quarter or more; per NUMA node: the first node's)
        while not lines[-1].startswith("gpudiag: stream fp64") or lines[-1].endswith(" 0%\n"):
            assert lines[-1], lines  # not the end of the output
            lines.append(run.stderr.readline())
        run.send_signal(signal.SIGINT)
        out, err = run.communicate(timeout=60)
    finally:
        run.kill()
    assert run.returncode == 130, err
    assert "interrupted: stopping at the next chunk" in err
    triad = [line.split() for line in out.splitlines() if line.startswith("stream.triad.fp64")]
    assert float(triad[0][2]) > 0, out  # a measured median, not a zero
    # a NUMA node not reached yet has no figure, and says so
    assert all(row[2] == "CANCELLED:" for row in triad[1:]), out
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


def test_gpu_kernels_on_a_node_without_an_nvidia_gpu_say_so_once(tmp_path: Path) -> None:
    """`--export --kernels` on a node whose PCI bus lists no NVIDIA GPU: one line saying
    so, not one per kernel naming CuPy (missing, or finding no driver), whose 140 MB
    would not help."""
    function = tmp_path / "sys/bus/pci/devices/0000:00:01.0"
    function.mkdir(parents=True)
    (function / "vendor").write_text("0x8086\n")
    (function / "class").write_text("0x060000\n")
    from gpudiag.kernels import device

    from fakecuda import FakeCuda

    run = PlanRun(KernelPlan(("copy", "allreduce"), "all", trials=1), HostFS(tmp_path))
    out = io.StringIO()
    previous = device.use(FakeCuda(0))  # CUDA sees no device, as on such a node
    try:
        print_results(run, run.run(), None, out)
    finally:
        device.use(previous)
    lines = out.getvalue().splitlines()
    gpu = [line for line in lines if " gpu " in line]
    assert gpu == [f"{'copy, allreduce':<22} {'gpu':<12} SKIPPED: no NVIDIA GPU on this node"]
    assert "CuPy" not in out.getvalue()
