"""Kernel plans: what to run, where, how large and for how long. No NumPy here, so that
the TUI and the command line can name plans without loading the kernels."""

from __future__ import annotations

from dataclasses import dataclass

KERNELS = ("stream", "gemm", "copy", "peer", "allreduce", "burn")
DTYPE_NAMES = ("fp64", "fp32")
BURN_PRECISIONS = ("fp32", "tf32", "bf16", "fp16", "fp64")  # the GPU GEMM's (kernels/gemm.py)

# STREAM's rule: each array at least 4x the last-level cache, or the figure is the cache's
# (McCalpin's STREAM FAQ; BabelStream's default array is 2^25 doubles, 256 MiB). A GPU's
# L2 is read from the GPU itself (cudaDevAttrL2CacheSize: kernels/stream.py); the known
# ones, in bytes as that attribute gives them: A100 40 MiB, H100 and H200 50 MiB (NVIDIA
# A100 and H100 Tensor Core GPU Architecture whitepapers; the H200 is the same GH100),
# B200 126.5 MiB (CUDA's device query of a B200, "L2 Cache Size 126.50 MB", pytorch/ao
# PR 4002). A GPU whose L2 cannot be read is taken to have the largest of them.
CACHE_MULTIPLE = 4
KNOWN_L2_BYTES = {
    "A100": 40 * 2**20,
    "H100": 50 * 2**20,
    "H200": 50 * 2**20,
    "B200": 253 * 2**19,  # 126.5 MiB
}
LARGEST_L2 = max(KNOWN_L2_BYTES, key=KNOWN_L2_BYTES.__getitem__)
# The plans' STREAM arrays on a GPU: 512 MiB, over 4x the largest L2 known (506 MiB)
GPU_STREAM_BYTES = 512 * 2**20


@dataclass(frozen=True)
class KernelPlan:
    """What to run: kernels, on which devices (cpu, gpu, all or a GPU index), array and
    copy size in bytes, STREAM's element types, trials, a time budget for STREAM and GEMM
    (trials go on until it has passed; None: just the trials), the burn's seconds, the
    GEMM size, a budget in seconds for STREAM to go on until its interval is tight
    enough to judge (`--until-confident`; None: a fixed count), and the bytes of each
    STREAM array on a GPU (None: size_bytes; at least 4x the GPU's L2, or refused)."""

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
    gpu_stream_bytes: int | None = None


PLANS = {
    # Seconds on a GPU node; about a minute on a 2-core VM's CPU.
    "quick": KernelPlan(
        ("stream", "gemm", "copy", "peer"),
        "all",
        64 * 2**20,
        trials=5,
        gemm_n=2048,
        gpu_stream_bytes=GPU_STREAM_BYTES,
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
        gpu_stream_bytes=GPU_STREAM_BYTES,
    ),
}
