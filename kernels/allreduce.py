"""All-reduce across the node's GPUs through NCCL, as nccl-tests' all_reduce_perf runs it:
one process driving every local GPU (ncclCommInitAll, calls grouped with
ncclGroupStart/End), float32 sums in place, sizes doubling from 8 B to a maximum, and
nccl-tests' definitions of the figures (its doc/PERFORMANCE.md):

    algbw = bytes / time                 (GB/s, 10^9 bytes per second)
    busbw = algbw * 2 (n - 1) / n        (what each GPU's links carried: comparable to
                                          the hardware's bandwidth whatever n is)

Each sample times ITERATIONS back-to-back all-reduces between CUDA events on every GPU
(the slowest GPU's time counts), behind one untimed lead all-reduce so that no host gap is
timed. After the timed samples of a size every GPU's buffer is refilled with its own
pattern, all-reduced once more and checked element for element against the exact sum.

It goes through the device boundary (kernels/device.py: cupy.cuda.nccl, NCCL from the
nvidia-nccl wheel). It has NEVER RUN ON A GPU in this project's CI: the tests run it
through a strict NumPy fake of the boundary, so no figure of it is claimed anywhere.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from gpudiag.kernels.stats import summarize
from gpudiag.model import KernelResult, ProbeStatus

ITERATIONS = 20  # all-reduces per timed sample (nccl-tests' default -n 20)
MIN_BYTES = 8


def sizes(max_bytes: int, min_bytes: int = MIN_BYTES) -> list[int]:
    """nccl-tests' -b MIN -e MAX -f 2: doubling sizes, whole float32 elements."""
    out, size = [], max(4, min_bytes - min_bytes % 4)
    while size <= max_bytes:
        out.append(size)
        size *= 2
    return out


def bus_factor(ranks: int) -> float:
    """busbw / algbw for all-reduce: 2 (n - 1) / n."""
    return 2.0 * (ranks - 1) / ranks


def pattern(rank: int, count: int) -> np.ndarray:
    """Rank r's input: (r + 1) * (i % 7 + 1), exact in float32; the sum over n ranks is
    n (n + 1) / 2 * (i % 7 + 1)."""
    return ((rank + 1) * (np.arange(count, dtype=np.int64) % 7 + 1)).astype(np.float32)


def run_allreduce(
    gpus: Sequence[int],
    *,
    max_bytes: int,
    min_bytes: int = MIN_BYTES,
    trials: int = 5,
    warmup: int = 1,
    iterations: int = ITERATIONS,
    cancel: threading.Event | None = None,
    progress: Callable[[float], None] | None = None,
    cuda: Any = None,
) -> list[KernelResult]:
    """For every size: busbw and algbw samples (GB/s) with statistics, device "gpus" (the
    node's GPUs together), metrics busbw.<bytes> and algbw.<bytes>, plus "busbw": the
    largest size's, which the rule judges. A wrong sum is an error result for the size.
    Never run on a GPU in this project's CI."""
    from gpudiag.kernels.device import Timer, api, pinned, to_host

    gpus = list(gpus)
    ranks = len(gpus)
    base = (("gpus", ranks), ("datatype", "float32"), ("op", "sum"), ("in_place", "yes"))
    if ranks < 2:
        reason = "one GPU: nothing to all-reduce across" if gpus else "no GPU"
        return [KernelResult("allreduce", "gpus", "busbw", "GB/s", ProbeStatus.SKIPPED,
                             error=reason, params=base)]  # fmt: skip
    cuda = cuda or api()
    max_bytes -= max_bytes % 4
    comms = cuda.nccl_initAll(gpus)
    streams, timers, buffers = [], [], []
    results: list[KernelResult] = []
    try:
        for gpu in gpus:
            cuda.setDevice(gpu)
            streams.append(cuda.Stream(non_blocking=True))
            timers.append(Timer(cuda, streams[-1]))
            buffers.append(cuda.malloc(max_bytes))

        def all_reduce(count: int) -> None:
            cuda.nccl_groupStart()
            for comm, buffer, stream in zip(comms, buffers, streams, strict=True):
                comm.allReduce(buffer, buffer, count, cuda.nccl_NCCL_FLOAT32,
                               cuda.nccl_NCCL_SUM, stream.ptr)  # fmt: skip
            cuda.nccl_groupEnd()

        def fill(count: int) -> None:
            for rank, (gpu, buffer, stream) in enumerate(zip(gpus, buffers, streams, strict=True)):
                cuda.setDevice(gpu)
                host = pattern(rank, count)
                with pinned(cuda, host):
                    kind = cuda.memcpyHostToDevice
                    cuda.memcpyAsync(buffer, host.ctypes.data, host.nbytes, kind, stream.ptr)
                    cuda.streamSynchronize(stream.ptr)

        def timed(count: int) -> float:
            all_reduce(count)  # the lead: every GPU busy while the timed calls are queued
            for gpu, timer in zip(gpus, timers, strict=True):
                cuda.setDevice(gpu)
                timer.start()
            for _ in range(iterations):
                all_reduce(count)
            for gpu, timer in zip(gpus, timers, strict=True):
                cuda.setDevice(gpu)
                timer.stop()
            return max(timer.seconds() for timer in timers) / iterations

        def wrong(count: int) -> str:
            fill(count)
            all_reduce(count)
            expected = pattern(0, count) * np.float32(ranks * (ranks + 1) // 2)
            for gpu, buffer, stream in zip(gpus, buffers, streams, strict=True):
                cuda.setDevice(gpu)
                got = to_host(cuda, buffer, np.empty(count, np.float32), stream)
                bad = np.flatnonzero(got != expected)
                if bad.size:
                    i = int(bad[0])
                    return (f"verification failed: gpu{gpu} element {i} is {got[i]!r}, "
                            f"the sum is {expected[i]!r} ({bad.size} wrong)")  # fmt: skip
            return ""

        all_sizes = sizes(max_bytes, min_bytes)
        for index, size in enumerate(all_sizes):
            if cancel is not None and cancel.is_set():
                break
            count = size // 4
            fill(count)
            algbw = []
            for trial in range(warmup + trials):
                seconds = timed(count)
                if trial >= warmup and seconds > 0:
                    algbw.append(size / seconds / 1e9)
            busbw = [a * bus_factor(ranks) for a in algbw]
            error = wrong(count)
            params = (*base, ("bytes", size), ("iterations", iterations), ("trials", trials))
            for metric, samples in ((f"busbw.{size}", busbw), (f"algbw.{size}", algbw)):
                results.append(_result(metric, samples, params, error))
            if index == len(all_sizes) - 1:  # the largest size: what the rule judges
                results.append(_result("busbw", busbw, params, error))
            if progress is not None:
                progress((index + 1) / len(all_sizes))
        return results
    finally:
        for gpu, timer, buffer in zip(gpus, timers, buffers, strict=False):
            cuda.setDevice(gpu)
            timer.close()
            cuda.free(buffer)
        for comm in comms:
            comm.destroy()


def _result(
    metric: str, samples: list[float], params: tuple[tuple[str, Any], ...], error: str
) -> KernelResult:
    if error:
        return KernelResult("allreduce", "gpus", metric, "GB/s", ProbeStatus.ERROR,
                            params=params, error=error)  # fmt: skip
    if len(samples) < 2:
        return KernelResult("allreduce", "gpus", metric, "GB/s", ProbeStatus.ERROR,
                            params=params, error="fewer than two timed trials")  # fmt: skip
    return KernelResult("allreduce", "gpus", metric, "GB/s", ProbeStatus.OK, tuple(samples),
                        summarize(samples), params)  # fmt: skip
