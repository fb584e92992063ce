"""The burn test's logic on the CPU: repeated products compared with the first, NaNs and
mismatches counted, a cancel honoured, NVML sampled from a replay."""

from __future__ import annotations

import threading

import numpy as np

from gpudiag.kernels import burn
from gpudiag.nvml import Nvml, ReplayBackend

from conftest import REPO


def test_a_healthy_device_gives_the_same_answer_every_time() -> None:
    report = burn.burn_device(np, 64, 0.2, "cpu")
    assert report.iterations > 1 and not report.faulty
    assert report.mismatches == 0 and report.nans == 0 and report.gflops > 0


def test_a_device_that_miscomputes_is_faulty() -> None:
    calls = {"n": 0}

    def flaky(a, b):
        c = np.matmul(a, b)
        calls["n"] += 1
        if calls["n"] == 5:  # one bad product among many
            c[1, 2] += 1e-3
        if calls["n"] == 7:
            c[0, 0] = np.nan
        return c

    report = burn.burn_device(np, 32, 0.2, "cpu", matmul=flaky)
    assert report.faulty
    assert report.mismatches >= 2 and report.nans == 1  # the NaN differs from the first too


def test_cancel_ends_the_burn_early() -> None:
    cancel = threading.Event()
    cancel.set()
    report = burn.burn_device(np, 32, 30.0, "cpu", cancel=cancel)
    assert report.iterations == 0 and report.seconds < 5


def test_nvml_is_sampled_during_the_burn() -> None:
    nvml = Nvml(ReplayBackend.from_file(REPO / "snapshots" / "demo-hgx-h100-faulty.toml"))
    reports = {0: burn.BurnReport("gpu0"), 6: burn.BurnReport("gpu6"), 7: burn.BurnReport("gpu7")}
    stop = threading.Event()
    sampler = threading.Thread(target=burn.sample_nvml, args=(nvml, [0, 6, 7], stop, 0.05, reports))
    sampler.start()
    threading.Event().wait(0.3)
    stop.set()
    sampler.join()
    first = reports[0].samples[0]
    assert (first["temperature.gpu"], first["power.draw"], first["clocks.sm"]) == (41, 69.0, 345)
    assert first["throttle_reasons"] == ["GpuIdle"]
    assert "HwSlowdown" in reports[6].samples[0]["throttle_reasons"]  # the planted slowdown
    # the lost GPU answers nothing: its samples hold only the time
    assert set(reports[7].samples[0]) == {"t"}


def test_cli_burns_the_cpu() -> None:
    from conftest import run_cli

    result = run_cli("run", "burn", "--device", "cpu", "--seconds", "0.5", "--gemm-n", "128")
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.startswith("burn           cpu          ok: ")
    assert "0 mismatches, 0 NaNs" in result.stdout
    assert "kernel" not in result.stdout  # no empty results table
