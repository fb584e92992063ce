"""Kernel plans: what to run, where, how large and for how long. No NumPy here, so that
the TUI and the command line can name plans without loading the kernels."""

from __future__ import annotations

from dataclasses import dataclass

KERNELS = ("stream", "gemm", "copy", "peer", "burn")
DTYPE_NAMES = ("fp64", "fp32")


@dataclass(frozen=True)
class KernelPlan:
    """What to run: kernels, on which devices (cpu, gpu, all or a GPU index), array and
    copy size in bytes, STREAM's element type, trials, the burn's seconds (and, where
    given, a time budget for STREAM and GEMM), and the GEMM size."""

    kernels: tuple[str, ...]
    device: str = "cpu"
    size_bytes: int = 256 * 2**20
    dtype: str = "fp64"
    trials: int = 10
    seconds: float | None = None
    gemm_n: int = 4096

    @property
    def burn_seconds(self) -> float:
        return 60.0 if self.seconds is None else self.seconds


PLANS = {
    # Seconds on a GPU node; about a minute on a 2-core VM's CPU.
    "quick": KernelPlan(
        ("stream", "gemm", "copy", "peer"), "all", 64 * 2**20, trials=5, gemm_n=2048
    ),
    "full": KernelPlan(
        ("stream", "gemm", "copy", "peer", "burn"),
        "all",
        256 * 2**20,
        trials=10,
        seconds=60.0,
        gemm_n=8192,
    ),
}
