"""Every script in benchmarks/ runs with its smallest settings, exits 0 and prints its figures
beside its reference: benchmarks rot when nothing runs them. Timings are not judged here
(a test on a shared machine cannot); the scripts print them for people."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO

BENCHMARKS = REPO / "benchmarks"
# script: (its smallest settings, what it must print: its figure and its reference)
SMALLEST = {
    "cli_speed.py": (  # one run for both tests of it (test_cli_speed_prints_sane_figures)
        ["--runs", "1", "--gpus", "9"],
        ["gpudiag --version:", "gpudiag --help:", "gpudiag check, 9 GPUs", "gpudiag diff of"],
    ),
    "cpu_triad.py": (
        ["--mib", "8", "--trials", "2", "--rounds", "1"],
        ["C OpenMP (gcc -O3 -fopenmp):", "gpudiag CPU (Numba loops):", "NumPy blocks"],
    ),
    "diff_speed.py": (  # each of its steps runs once a repeat: one is every step
        ["--repeat", "1", "--gpus", "1", "--runs", "1"],
        [
            *("diff step of two 8-GPU snapshots", "the whole `gpudiag diff", "reference, a Python"),
            "1 GPU (",
        ],
    ),
    "gpu_kernels.py": (  # on a GPU node only: without one it exits 3 (test_kernels_device)
        ["--mib", "64", "--gemm-n", "1024", "--burn-seconds", "1", "--no-plans"],
        ["STREAM triad fp64 GB/s", "BF16 GEMM TFLOP/s", "torch.matmul", "h2d local GB/s"],
    ),
    "fleet_scale.py": "test_fleet_bench.py",  # run there, its figures checked in detail
    "change_errors.py": "test_changes.py",  # run there in-process, at --smallest
    "dataset_scale.py": (  # and its scale part: 10 nodes copied to 20, 2 runs deep
        [
            *("--nodes", "10", "--gpus", "2", "--repeat", "1"),
            *("--report-nodes", "20", "--history-runs", "2", "--base-nodes", "10"),
        ],
        ["append CPU", "reference", "same report: True", "report over 20 nodes", "over 2 runs"],
    ),
    "fuzz_loaders.py": (  # a fuzzing run, not a timing: iterations and crashes
        ["--seconds", "0.5"],
        ["iterations", "0 crashes"],
    ),
    "host_probes.py": (
        ["--repeat", "2"],
        ["host probes inside gpudiag", "as a process of its own", "reference, lscpu"],
    ),
    "rules_eval.py": (
        ["--snapshots", "3"],
        ["as a `gpudiag check` process pays it", "rule plan cached", "reference, one pass"],
    ),
    "watch_sampling.py": (
        ["--rounds", "20", "--long", "600"],
        ["gpudiag watch round", "reference, bare replay calls", "history memory over 600"],
    ),
    "monitor_budget.py": (  # builds the C NVML stand-in: needs gcc
        ["--rounds", "5", "--seconds", "0"],
        ["monitor window (sample", "reference, bare NVML sampling loop", "resident memory"],
    ),
    "tui_startup.py": (
        ["--runs", "1"],
        ["minimal Textual app: painted", "gpudiag (faulty demo): first screen", "ratio to the"],
    ),
}
NEEDS = {
    "cpu_triad.py": ["gcc"],
    "gpu_kernels.py": ["nvidia-smi"],  # a GPU node's driver
    "host_probes.py": ["lscpu"],
    "monitor_budget.py": ["gcc"],
    "tui_startup.py": ["tmux"],
}


def test_every_benchmark_has_its_smallest_settings() -> None:
    # _wheel.py: the wheel's environment they all run in (not a benchmark)
    scripts = [p.name for p in BENCHMARKS.glob("*.py") if not p.name.startswith("_")]
    assert sorted(scripts) == sorted(SMALLEST)
    for script in scripts:  # each runs in the wheel's environment, first thing
        assert "\n    use_the_wheel()" in (BENCHMARKS / script).read_text(), script
    for script, where in SMALLEST.items():
        if isinstance(where, str):  # another test file runs it
            assert script in (REPO / "tests" / where).read_text(), (script, where)


def _runs_and_prints_its_figures(
    script: str, venv: Path, cwd: Path
) -> subprocess.CompletedProcess[str]:
    """SCRIPT run with its smallest settings, from CWD (the checkout's root, or a folder
    outside it: a benchmark runs from any), in the wheel's environment VENV: it exits 0
    and prints its figures."""
    arguments, expected = SMALLEST[script]
    run = subprocess.run(
        [sys.executable, str(BENCHMARKS / script), *arguments],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=cwd,
        env={**os.environ, "GPUDIAG_BENCH_VENV": str(venv)},
    )
    assert run.returncode == 0, run.stderr[-2000:]
    for text in expected:
        assert text in run.stdout, (text, run.stdout)
    assert "Traceback" not in run.stderr
    return run


@pytest.mark.parametrize(
    "script",
    sorted(k for k, v in SMALLEST.items() if isinstance(v, tuple) and k != "cli_speed.py"),
)
def test_benchmark_runs_and_prints_its_figures(script: str, wheel_venv) -> None:
    """From the checkout's root, where a developer runs them (and where a `python -m
    gpudiag` child would import the checkout's sources unless it runs elsewhere);
    cli_speed.py runs from a folder outside it."""
    missing = [tool for tool in NEEDS.get(script, []) if shutil.which(tool) is None]
    if missing:
        pytest.skip(f"{script} needs {', '.join(missing)}, not installed here")
    _runs_and_prints_its_figures(script, wheel_venv, REPO)


def test_cli_speed_prints_sane_figures(wheel_venv, tmp_path) -> None:
    """cli_speed.py, run once for both checks: it runs and prints its figures (as every
    benchmark, test_benchmark_runs_and_prints_its_figures), and each line of them is a
    positive CPU time beside a positive reference, and their ratio (the figures, not
    judged against the targets)."""
    run = _runs_and_prints_its_figures("cli_speed.py", wheel_venv, tmp_path)
    figures = re.findall(
        r"^(.+): (\d+) ms CPU \((\d+) ms wall\) \| reference (\d+) ms CPU \((\d+) ms wall\)"
        r" \| ratio ([0-9.]+) \(target <= ([0-9.]+): (?:met|NOT met)\)$",
        run.stdout,
        re.M,
    )
    labels = [re.sub(r"\d+ readings", "N readings", f[0]) for f in figures]
    assert labels == [
        "gpudiag --version",
        "gpudiag --help",
        "gpudiag check, 8 GPUs (N readings)",
        "gpudiag check, 9 GPUs (N readings)",
        "gpudiag diff of two 8-GPU snapshots (text report)",
        "gpudiag diff of two 9-GPU snapshots (text report)",
    ], run.stdout
    for label, cpu, wall, ref_cpu, ref_wall, ratio, _target in figures:
        assert int(cpu) > 0 and int(wall) > 0 and int(ref_cpu) > 0 and int(ref_wall) > 0, label
        assert abs(float(ratio) - int(cpu) / int(ref_cpu)) < 0.1 * float(ratio) + 0.05, label


def test_a_benchmark_refuses_to_report_from_the_editable_install() -> None:
    """Where gpudiag would come from the checkout (this environment's editable install),
    a benchmark says why and reports nothing (exit 3)."""
    run = subprocess.run(
        [sys.executable, str(BENCHMARKS / "rules_eval.py"), "--snapshots", "3"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**os.environ, "GPUDIAG_BENCH_INSIDE": sys.prefix},  # as if re-run here
    )
    assert run.returncode == 3 and run.stdout == ""
    assert "editable install" in run.stderr and run.stderr.count("\n") == 1
    assert "rules_eval.py: gpudiag here is the checkout's" in run.stderr


def test_a_wheel_that_cannot_be_built_is_one_line_and_exit_3(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A review: `benchmarks/fleet_scale.py --help` under a Python whose setuptools cannot
    build the wheel printed a CalledProcessError traceback. Now one line naming the build
    backend's error (not pip's 'subprocess-exited-with-error'), and exit 3."""
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    import _wheel

    said = (
        "  error: subprocess-exited-with-error\n  \n  × python setup.py egg_info did not run\n"
        "      error: invalid command 'bdist_wheel'\n      [end of output]\n"
        "error: metadata-generation-failed\n"
    )

    def fails(out: Path) -> Path:
        raise subprocess.CalledProcessError(1, ["pip", "wheel"], b"", said.encode())

    monkeypatch.setattr(_wheel, "build_wheel", fails)
    monkeypatch.delenv(_wheel.INSIDE, raising=False)
    monkeypatch.delenv("GPUDIAG_BENCH_VENV", raising=False)
    monkeypatch.setattr(sys, "argv", ["fleet_scale.py", "--help"])
    with pytest.raises(SystemExit) as ended:
        _wheel.use_the_wheel()
    assert ended.value.code == 3
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith("fleet_scale.py: gpudiag's wheel could not be built")
    assert err.rstrip().endswith("error: invalid command 'bdist_wheel'")
