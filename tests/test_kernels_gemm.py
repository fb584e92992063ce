"""GEMM: the runner and its check, for real on the CPU; unsupported precisions say why."""

from __future__ import annotations

import re

import numpy as np
import pytest

from gpudiag.kernels import gemm
from gpudiag.model import ProbeStatus


@pytest.mark.parametrize("precision", ["fp64", "fp32"])
def test_cpu_gemm_measures_and_checks(precision: str) -> None:
    result = gemm.run_gemm(np, precision, 256, device="cpu", trials=3)
    assert result.status is ProbeStatus.OK, result.error
    assert result.unit == "TFLOP/s" and len(result.samples) == 3
    assert result.stats is not None and all(s > 0 for s in result.samples)


@pytest.mark.parametrize("precision", ["tf32", "fp16", "bf16"])
def test_cpu_says_which_precisions_it_cannot_do(precision: str) -> None:
    result = gemm.run_gemm(np, precision, 64, device="cpu", trials=2)
    assert result.status is ProbeStatus.SKIPPED and result.error


def test_a_wrong_product_is_caught() -> None:
    class BrokenNumpy:
        """NumPy, but matmul flips one element's sign."""

        float64 = np.float64
        float32 = np.float32

        @staticmethod
        def asarray(x, dtype=None):
            return np.asarray(x, dtype=dtype)

        @staticmethod
        def matmul(a, b):
            c = np.matmul(a, b)
            c[3, 5] = -c[3, 5] + 1.0
            return c

    # every row is checked at n = 8 (CHECKED_ROWS rows), so the bad element is seen
    result = gemm.run_gemm(BrokenNumpy, "fp64", 8, device="cpu", trials=2)
    assert result.status is ProbeStatus.ERROR
    assert result.error.startswith("verification failed: relative error")


def test_check_product_measures_relative_error() -> None:
    rng = np.random.default_rng(1)
    a, b = rng.uniform(-1, 1, (16, 16)), rng.uniform(-1, 1, (16, 16))
    rows = np.arange(16)
    assert gemm.check_product(a, b, a @ b, "fp64", rows) < 1e-14
    fp32 = a.astype(np.float32) @ b.astype(np.float32)
    assert gemm.check_product(a, b, fp32, "fp32", rows) < gemm.TOLERANCE["fp32"]


def test_cli_runs_gemm_and_reports_skipped_precisions() -> None:
    from conftest import run_cli

    result = run_cli("run", "gemm", "--device", "cpu", "--gemm-n", "256", "--trials", "2")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "gemm.fp64" in result.stdout and "TFLOP/s" in result.stdout
    assert re.search(r"^gemm\.fp16 +cpu +SKIPPED: NumPy's BLAS has no FP16", result.stdout, re.M)


def test_bf16_bits_round_to_nearest_even_and_back() -> None:
    exact = np.array([1.0, -2.5, 0.0, 3.140625], dtype=np.float32)  # bf16-representable
    assert np.array_equal(gemm.from_bf16_bits(gemm.to_bf16_bits(exact)), exact)
    # 1 + 2^-8 lies halfway between bf16 neighbours 1 and 1 + 2^-7: ties go to even (1.0)
    halfway = np.array([1.0 + 2.0**-8, 1.0 + 3 * 2.0**-8], dtype=np.float32)
    assert gemm.from_bf16_bits(gemm.to_bf16_bits(halfway)).tolist() == [1.0, 1.0 + 2.0**-6]
    assert np.isnan(gemm.from_bf16_bits(gemm.to_bf16_bits(np.array([np.nan], np.float32))))


def _emulated_bf16(corrupt: bool = False) -> gemm.Codec:
    """The BF16 codec's logic with NumPy standing in for cuBLAS: bf16 inputs, FP32
    products rounded to bf16 (what gemmEx with a bf16 output returns)."""

    def matmul(a, b):
        c = gemm.to_bf16_bits(gemm.from_bf16_bits(a) @ gemm.from_bf16_bits(b))
        if corrupt:
            c[2, 3] ^= np.uint16(0x4000)  # one exponent bit flipped
        return c

    return gemm.Codec(encode=gemm.to_bf16_bits, decode=gemm.from_bf16_bits, matmul=matmul)


def test_bf16_codec_is_checked_like_any_precision() -> None:
    ok = gemm.run_gemm(np, "bf16", 64, device="cpu", trials=2, codec=_emulated_bf16())
    assert ok.status is ProbeStatus.OK, ok.error
    bad = gemm.run_gemm(np, "bf16", 8, device="cpu", trials=2, codec=_emulated_bf16(True))
    assert bad.status is ProbeStatus.ERROR and bad.error.startswith("verification failed")


def _noisy_timer(cv: float, seed: int = 5):
    """A timer around 1 ms with a known spread (the product is still computed and checked),
    so that --until-confident's stopping can be checked against a known truth."""
    rng = np.random.default_rng(seed)

    def timer(work) -> float:
        work()
        return float(abs(rng.normal(1e-3, cv * 1e-3))) + 1e-6

    return timer


N_SMALL = 64  # 2 x 64^3 flops in 1 ms: 0.000524 TFLOP/s


def test_until_confident_goes_on_until_the_interval_is_tight() -> None:
    result = gemm.run_gemm(
        np, "fp64", N_SMALL, device="cpu", trials=2, warmup=0,
        timer=_noisy_timer(0.10), until_confident=30,
    )  # fmt: skip
    s = result.stats  # at the sequential looks' confidence (kernels/stats.py)
    assert result.status is ProbeStatus.OK and dict(result.params)["confident"] is True
    assert s is not None and (s.ci95_high - s.ci95_low) / 2 <= 0.03 * s.median
    assert s.count > 30  # many more than the 2 trials asked for
    assert "threshold" not in dict(result.params)


def test_until_confident_says_when_the_budget_ran_out() -> None:
    result = gemm.run_gemm(
        np, "fp64", N_SMALL, device="cpu", trials=2, warmup=0,
        timer=_noisy_timer(3.0), until_confident=0.3,
    )  # fmt: skip
    assert dict(result.params)["confident"] is False


@pytest.mark.parametrize("threshold", [0.0002, 0.002], ids=["above-it", "below-it"])
def test_until_confident_stops_once_the_interval_clears_the_threshold(threshold: float) -> None:
    result = gemm.run_gemm(
        np, "fp64", N_SMALL, device="cpu", trials=2, warmup=0,
        timer=_noisy_timer(0.15), until_confident=30, threshold=threshold,
    )  # fmt: skip
    params, s = dict(result.params), result.stats
    assert params["threshold"] == threshold and params["threshold_cleared"] is True
    assert params["confident"] is True
    assert s is not None and 6 <= s.count < 30  # the tight interval alone takes more
    assert (s.ci95_low > threshold) if threshold < 0.0005 else (s.ci95_high < threshold)


def test_without_until_confident_the_trials_are_the_trials() -> None:
    result = gemm.run_gemm(
        np, "fp64", N_SMALL, device="cpu", trials=3, warmup=0, timer=_noisy_timer(3.0)
    )
    assert len(result.samples) == 3 and "confident" not in dict(result.params)
