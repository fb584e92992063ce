"""Kernel plans: what to run, where, how large and for how long. No NumPy here, so that
the TUI and the command line can name plans without loading the kernels."""

from __future__ import annotations

from dataclasses import dataclass

KERNELS = ("stream", "gemm", "copy", "peer", "allreduce", "burn")
DTYPE_NAMES = ("fp64", "fp32")
BURN_PRECISIONS = ("fp32", "tf32", "bf16", "fp16", "fp64")  # the GPU GEMM's (kernels/gemm.py)


@dataclass(frozen=True)
class KernelPlan:
    """What to run: kernels, on which devices (cpu, gpu, all or a GPU index), array and
    copy size in bytes, STREAM's element types, trials, a time budget for STREAM and GEMM
    (trials go on until it has passed; None: just the trials), the burn's seconds, the
    GEMM size, and a budget in seconds for STREAM to go on until its interval is tight
    enough to judge (`--until-confident`; None: a fixed count)."""

    kernels: tuple[str, ...]
    device: str = "cpu"
    size_bytes: int = 256 * 2**20
    dtypes: tuple[str, ...] = ("fp64",)
    trials: int = 10
    seconds: float | None = None
    gemm_n: int = 4096
    burn_seconds: float = 60.0
    burn_precision: str = "fp32"
    until_confident: float | None = None


PLANS = {
    # Seconds on a GPU node; about a minute on a 2-core VM's CPU.
    "quick": KernelPlan(
        ("stream", "gemm", "copy", "peer"), "all", 64 * 2**20, trials=5, gemm_n=2048
    ),
    # Minutes: both STREAM precisions, larger arrays and GEMMs, all-reduce across the GPUs
    # (8 B up to the array size), and a 60 s burn.
    "full": KernelPlan(
        ("stream", "gemm", "copy", "peer", "allreduce", "burn"),
        "all",
        256 * 2**20,
        dtypes=("fp64", "fp32"),
        trials=10,
        gemm_n=8192,
    ),
}
