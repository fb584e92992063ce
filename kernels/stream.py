"""STREAM (copy, scale, add, triad, dot), after BabelStream: the same runner for the CPU
(NumPy) and the GPU (CuPy), with STREAM's byte counts and BabelStream's verification made
stricter: every element is checked, and each tolerance follows from the arithmetic (the element
type's rounding, how many rounds ran, and how each engine forms the dot product's sum).

The CPU path runs for real in the tests: one fused loop per operation compiled with Numba
(kernels/cpu_loops.py; NumPy in cache-sized blocks where Numba is absent), on several
threads (both release the GIL), each pinned to given CPUs and first-touching its own part
of the arrays. The GPU path (`CudaOperations`) launches kernels/stream.cu through the
device boundary (kernels/device.py: CuPy's RawModule and runtime) and times with CUDA
events; it has never run on a GPU in this project's CI (the tests run it through a strict
NumPy fake of that boundary).
"""

from __future__ import annotations

import math
import os
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from importlib import resources
from typing import Any

import numpy as np

from gpudiag.kernels.stats import more_trials, progress_fraction, summarize
from gpudiag.model import KernelResult, ProbeStatus, Statistics

SCALAR = 0.4
START_A, START_B, START_C = 0.1, 0.2, 0.0
OPERATIONS = ("copy", "scale", "add", "triad", "dot")
# Bytes moved per element, as STREAM counts them (reads plus writes of whole arrays).
ARRAYS_TOUCHED = {"copy": 2, "scale": 2, "add": 3, "triad": 3, "dot": 2}
BLOCK_BYTES = 256 * 1024  # a block of each array stays in L2 across the fused steps
# Verify and refill the arrays every 25 rounds: the values shrink by 0.96 a round and would
# reach subnormals (then zero, which any kernel can "compute") in a long --seconds run, and
# the element bound (array_bound) grows with the rounds since the last refill.
RESET_ROUNDS = 25


class VerificationError(Exception):
    """The arrays do not hold what the operations must have produced."""


@dataclass
class StreamArrays:
    """The three STREAM arrays, and the dot product's last value."""

    a: Any
    b: Any
    c: Any
    dot: float = 0.0


def gold_values(iterations: int, dtype: Any) -> tuple[float, float, float, float]:
    """What a, b, c and the dot product must be after `iterations` rounds of all five
    operations (BabelStream's scalar replay of the same recurrence)."""
    t = np.dtype(dtype).type
    a, b, c, scalar = t(START_A), t(START_B), t(START_C), t(SCALAR)
    for _ in range(iterations):
        c = a
        b = scalar * c
        c = a + b
        a = b + scalar * c
    return float(a), float(b), float(c), float(a * b)


def summation_bound(chain: int, unit_roundoff: float) -> float:
    """Higham's bound gamma_d = d*u / (1 - d*u) on the relative error of a sum of
    non-negative terms in which no term passes through more than `chain` roundings
    (Accuracy and Stability of Numerical Algorithms, 2nd ed., section 4.2). A recursive sum
    of n terms has chain n - 1; a pairwise one about log2(n): the shape of the sum, not its
    length, sets the bound."""
    product = chain * unit_roundoff
    return math.inf if product >= 1 else product / (1 - product)


def unit_roundoff(dtype: Any) -> float:
    """u = epsilon / 2: the largest relative error of one rounding to nearest."""
    return float(np.finfo(dtype).eps) / 2


def array_bound(rounds: int, dtype: Any) -> float:
    """The largest relative difference, element by element, between an array after
    `rounds` rounds and the scalar replay of the same recurrence in the same type.

    Every value stays positive and every coefficient is at most 1 in size (a shrinks by 0.96
    a round), so a relative error is never amplified: one round adds at most four roundings
    to a's chain (s*c for b, a+b for c, s*c and the sum for a), 4u. The replay and the
    device each carry at most 4u per round, and they may differ in both directions (a GPU
    contracts b + s*c into one FMA, the replay does not): 8u = 4 eps per round. With
    RESET_ROUNDS = 25 this is at most 100 eps, BabelStream's tolerance, but checked on
    every element instead of on the mean, so one wrong element cannot hide among millions.
    """
    return max(rounds, 1) * 8 * unit_roundoff(dtype)


def verify(arrays: StreamArrays, rounds: int, dot_bound: float) -> None:
    """Every element of a, b and c within `array_bound` of the replay, and the dot product
    within `dot_bound` (relative; the engine's own, from how it forms the sum) of n times the
    replayed product."""
    dtype = arrays.a.dtype
    gold = gold_values(rounds, dtype)
    bound = array_bound(rounds, dtype)
    for name, array, expected in zip("abc", (arrays.a, arrays.b, arrays.c), gold[:3], strict=True):
        worst = float(np.max(np.abs(array - expected)))
        error = worst / abs(expected) if expected else worst
        if not math.isfinite(error) or error > bound:
            raise VerificationError(
                f"array {name}: largest relative error {error:.3g} exceeds {bound:.3g}"
            )
    n = int(arrays.a.shape[0])
    expected_dot = gold[3] * n
    error = abs(arrays.dot - expected_dot) / abs(expected_dot) if expected_dot else abs(arrays.dot)
    if not math.isfinite(error) or error > dot_bound:
        raise VerificationError(
            f"dot product {arrays.dot!r}, expected {expected_dot!r} "
            f"(relative error {error:.3g} exceeds {dot_bound:.3g})"
        )


# ------------------------------------------------------------------ CPU (NumPy)


class CpuOperations:
    """The five operations on NumPy arrays, blocked and spread over threads."""

    def __init__(
        self,
        n: int,
        dtype: Any,
        cpus_per_thread: Sequence[Sequence[int]] = (),
        engine: str = "auto",
    ) -> None:
        """`engine`: "numba" (compiled fused loops), "numpy" (NumPy in blocks) or "auto"
        (Numba where it can be imported)."""
        from gpudiag.kernels import cpu_loops  # imports Numba: only when a kernel runs

        if engine == "numba" and cpu_loops.LOOPS is None:
            raise RuntimeError(cpu_loops.UNAVAILABLE)
        self.loops = cpu_loops.LOOPS if engine in ("auto", "numba") else None
        self.engine = "numpy" if self.loops is None else "numba"
        self.n = n
        self.dtype = np.dtype(dtype)
        self.threads = max(1, len(cpus_per_thread) or (os.cpu_count() or 1))
        self.cpus = list(cpus_per_thread)
        self.block = max(1024, BLOCK_BYTES // self.dtype.itemsize)
        bounds = np.linspace(0, n, self.threads + 1).astype(np.int64)
        self.parts = [(int(bounds[i]), int(bounds[i + 1])) for i in range(self.threads)]
        self.pool = ThreadPoolExecutor(max_workers=self.threads, thread_name_prefix="stream")
        self.pinned = [False] * self.threads

    def _pin(self, index: int) -> None:
        # The pool's threads take parts in any order: pin for the part at hand each time
        # (a system call of a microsecond, against a block loop of milliseconds).
        if self.cpus:
            os.sched_setaffinity(0, self.cpus[index])  # this thread only, on Linux
            self.pinned[index] = True

    def _each(self, work: Callable[[int, int], Any]) -> list[Any]:
        def run(index: int) -> Any:
            self._pin(index)
            start, stop = self.parts[index]
            return work(start, stop)

        return list(self.pool.map(run, range(self.threads)))

    def allocate(self) -> StreamArrays:
        """Arrays first touched by the threads that will use them (NUMA placement)."""
        arrays = StreamArrays(*(np.empty(self.n, dtype=self.dtype) for _ in range(3)))
        self.reset(arrays)
        return arrays

    def reset(self, arrays: StreamArrays) -> None:
        """The starting values, each part written by the thread that uses it."""

        def touch(start: int, stop: int) -> None:
            arrays.a[start:stop] = START_A
            arrays.b[start:stop] = START_B
            arrays.c[start:stop] = START_C

        self._each(touch)

    def dot_bound(self) -> float:
        """The dot product's relative error bound for how this engine forms the sum.

        Each product is rounded once in the element type (u). Numba: each thread adds its
        part one term after another in float64 (chain: the part's length), then the
        threads' sums are added in float64 (chain: the thread count). NumPy: each thread
        multiplies a cache-sized block into a buffer and sums it with NumPy's pairwise sum
        in the element type (numpy's pairwise_sum: eight running sums over blocks of at most
        128 terms, at most 15 + 3 + 7 = 25 roundings, then halving: one more per level),
        then adds the block sums in float64 (chain: blocks per thread plus threads)."""
        part = -(-self.n // self.threads)
        u, u64 = unit_roundoff(self.dtype), unit_roundoff(np.float64)
        if self.loops is not None:
            return u + summation_bound(part + self.threads, u64)
        levels = max(0, math.ceil(math.log2(self.block / 128)))
        blocks = -(-part // self.block)
        return u + summation_bound(25 + levels, u) + summation_bound(blocks + self.threads, u64)

    def _blocks(self, start: int, stop: int) -> range:
        return range(start, stop, self.block)

    def run(self, operation: str, arrays: StreamArrays) -> None:
        """One operation over the whole arrays."""
        if self.loops is None:
            self._run_numpy(operation, arrays)
            return
        a, b, c, scalar, loops = arrays.a, arrays.b, arrays.c, self.dtype.type(SCALAR), self.loops
        work = {
            "copy": lambda i, j: loops.copy(a[i:j], c[i:j]),
            "scale": lambda i, j: loops.scale(b[i:j], c[i:j], scalar),
            "add": lambda i, j: loops.add(a[i:j], b[i:j], c[i:j]),
            "triad": lambda i, j: loops.triad(a[i:j], b[i:j], c[i:j], scalar),
            "dot": lambda i, j: loops.dot(a[i:j], b[i:j]),
        }[operation]
        results = self._each(work)
        if operation == "dot":
            arrays.dot = float(sum(results))

    def _run_numpy(self, operation: str, arrays: StreamArrays) -> None:
        """The same with NumPy's loops, in cache-sized blocks where two passes are needed."""
        a, b, c, scalar, step = arrays.a, arrays.b, arrays.c, self.dtype.type(SCALAR), self.block

        def copy(start: int, stop: int) -> None:
            np.copyto(c[start:stop], a[start:stop])

        def scale(start: int, stop: int) -> None:
            np.multiply(c[start:stop], scalar, out=b[start:stop])

        def add(start: int, stop: int) -> None:
            np.add(a[start:stop], b[start:stop], out=c[start:stop])

        def triad(start: int, stop: int) -> None:
            for i in self._blocks(start, stop):
                j = min(i + step, stop)
                np.multiply(c[i:j], scalar, out=a[i:j])  # a's block is written once more below
                np.add(a[i:j], b[i:j], out=a[i:j])  # while it is still in cache

        def dot(start: int, stop: int) -> float:
            # Not np.dot: BLAS sums in the element type in an order of its own, and one
            # thread's FP32 sum of a million terms missed any fixed bound (see dot_bound).
            products = np.empty(min(step, stop - start), dtype=self.dtype)
            total = 0.0
            for i in self._blocks(start, stop):
                j = min(i + step, stop)
                np.multiply(a[i:j], b[i:j], out=products[: j - i])
                total += float(np.add.reduce(products[: j - i]))
            return total

        work = {"copy": copy, "scale": scale, "add": add, "triad": triad, "dot": dot}[operation]
        results = self._each(work)
        if operation == "dot":
            arrays.dot = float(sum(results))

    def time(self, operation: str, arrays: StreamArrays) -> float:
        """Seconds for one operation."""
        started = time.perf_counter()
        self.run(operation, arrays)
        return time.perf_counter() - started

    def fetch(self, arrays: StreamArrays) -> StreamArrays:
        """The arrays as the host sees them (they are host arrays already)."""
        return arrays

    def close(self) -> None:
        self.pool.shutdown(wait=True)


# ------------------------------------------------------------------ GPU (CuPy)


class CacheResident(ValueError):
    """STREAM arrays under 4x the GPU's L2: they would measure the cache, not memory
    (STREAM's rule, kernels/plans.py); str() says so in one line."""


def l2_bytes(cuda: Any, device: int) -> tuple[int, str]:
    """(bytes, where from) of the GPU's L2: what the GPU says (cudaDevAttrL2CacheSize),
    else the largest L2 known (kernels/plans.py), with a note."""
    from gpudiag.kernels.plans import KNOWN_L2_BYTES, LARGEST_L2

    try:
        size = int(cuda.deviceGetAttribute(cuda.cudaDevAttrL2CacheSize, device))
    except Exception:  # an attribute the runtime cannot give: the largest known
        size = 0
    if size > 0:
        return size, "cudaDevAttrL2CacheSize"
    return KNOWN_L2_BYTES[LARGEST_L2], f"not known: taken as the largest known, {LARGEST_L2}'s"


def check_not_cache_resident(cuda: Any, device: int, nbytes: int) -> None:
    """CacheResident where arrays of `nbytes` are under CACHE_MULTIPLE x the GPU's L2."""
    from gpudiag.kernels.plans import CACHE_MULTIPLE

    size, where = l2_bytes(cuda, device)
    if nbytes < CACHE_MULTIPLE * size:
        raise CacheResident(
            f"STREAM arrays of {nbytes} bytes are under {CACHE_MULTIPLE}x GPU {device}'s L2 "
            f"cache ({size} bytes, {where}): they would measure the cache, not memory; "
            f"use {CACHE_MULTIPLE * size} bytes or more"
        )


class CudaOperations:
    """The five operations as kernels/stream.cu launched through the device boundary
    (kernels/device.py), timed with CUDA events. Each timed sample is LAUNCHES back-to-back
    launches behind one untimed lead launch, so the GPU is already busy when the start
    event is recorded and Python's launch gap is never inside the timed region; the dot
    product's partial sums are copied back and added after the stop event. Arrays under
    4x the GPU's L2 are refused (CacheResident). Never run on a GPU in this project's CI:
    the tests run it through the CUDA fake, which runs stream.cu itself."""

    THREADS = 1024
    LAUNCHES = 20
    engine = "cuda"

    def __init__(self, n: int, dtype: Any, device: int = 0, cuda: Any = None) -> None:
        from gpudiag.kernels.device import Timer, api

        self.cuda = cuda = cuda or api()
        self.n = n
        self.dtype = np.dtype(dtype)
        self.device = device
        cuda.setDevice(device)
        check_not_cache_resident(cuda, device, n * self.dtype.itemsize)
        self.stream = cuda.Stream(non_blocking=True)
        source = (resources.files("gpudiag.kernels") / "stream.cu").read_text(encoding="utf-8")
        module = cuda.RawModule(code=source, options=("-std=c++17",))
        suffix = "f32" if self.dtype == np.float32 else "f64"
        self.kernels = {op: module.get_function(f"stream_{op}_{suffix}") for op in OPERATIONS}
        sms = cuda.deviceGetAttribute(cuda.cudaDevAttrMultiProcessorCount, device)
        # one 16-byte vector per thread (at least 4 blocks per SM): on an H100 at ea3500d,
        # 1 GiB FP64, the triad went from 2904 GB/s at 4 blocks per SM to 3078 (1.013 of
        # one fused CuPy triad) and the copy from 2841 to 3053 (1.027 of torch copy_)
        # (../shared/realdata/h100-vm/FIGURES.md, "STREAM launch shape")
        vectors = -(-n // (16 // self.dtype.itemsize))
        self.blocks = max(int(sms) * 4, -(-vectors // self.THREADS))
        self.partial = cuda.malloc(self.blocks * self.dtype.itemsize)
        self.buffers = [self.partial]
        self.timer = Timer(cuda, self.stream)

    def allocate(self) -> StreamArrays:
        from gpudiag.kernels.device import to_device

        self.cuda.setDevice(self.device)
        pointers = [
            to_device(self.cuda, np.full(self.n, value, dtype=self.dtype), self.stream)
            for value in (START_A, START_B, START_C)
        ]
        self.buffers += pointers
        return StreamArrays(*pointers)

    def reset(self, arrays: StreamArrays) -> None:
        """The starting values again (copied from the host, synchronised)."""
        from gpudiag.kernels.device import pinned

        cuda = self.cuda
        cuda.setDevice(self.device)
        for pointer, value in zip((arrays.a, arrays.b, arrays.c), (START_A, START_B, START_C),
                                  strict=True):  # fmt: skip
            host = np.full(self.n, value, dtype=self.dtype)
            with pinned(cuda, host):
                kind = cuda.memcpyHostToDevice
                cuda.memcpyAsync(pointer, host.ctypes.data, host.nbytes, kind, self.stream.ptr)
                cuda.streamSynchronize(self.stream.ptr)

    def dot_bound(self) -> float:
        """stream.cu's dot: each thread adds its grid-stride terms in the element type
        (each vector's products fused into FMAs, so at most one rounding per term), a tree
        over the block's threads (log2 of them), then the host adds the blocks' partial
        sums in float64 (bounded here, generously, by one rounding of the element type per
        partial)."""
        u = unit_roundoff(self.dtype)
        per_thread = -(-self.n // (self.blocks * self.THREADS))
        tree = math.ceil(math.log2(self.THREADS))
        return u + summation_bound(per_thread + tree + self.blocks, u)

    def _launch(self, operation: str, arrays: StreamArrays) -> None:
        n, scalar = np.uint64(self.n), self.dtype.type(SCALAR)
        a, b, c, partial = (np.uint64(p) for p in (arrays.a, arrays.b, arrays.c, self.partial))
        args = {
            "copy": (a, c, n),
            "scale": (b, c, scalar, n),
            "add": (a, b, c, n),
            "triad": (a, b, c, scalar, n),
            "dot": (a, b, partial, n),
        }[operation]
        self.kernels[operation]((self.blocks,), (self.THREADS,), args, stream=self.stream)

    def _read_dot(self, arrays: StreamArrays) -> None:
        from gpudiag.kernels.device import to_host

        sums = to_host(self.cuda, self.partial, np.empty(self.blocks, self.dtype), self.stream)
        arrays.dot = float(sums.astype(np.float64).sum())

    def run(self, operation: str, arrays: StreamArrays) -> None:
        self.cuda.setDevice(self.device)
        self._launch(operation, arrays)
        if operation == "dot":
            self._read_dot(arrays)

    def time(self, operation: str, arrays: StreamArrays) -> float:
        """Seconds for one operation: the mean of LAUNCHES back-to-back launches. Every
        operation writes what it reads from alone (c = a, b = s c, c = a + b, a = b + s c),
        so repeating one leaves the arrays as one run does and verification holds."""
        self.cuda.setDevice(self.device)
        self._launch(operation, arrays)  # the lead launch: keeps the GPU busy meanwhile
        self.timer.start()
        for _ in range(self.LAUNCHES):
            self._launch(operation, arrays)
        self.timer.stop()
        seconds = self.timer.seconds() / self.LAUNCHES
        if operation == "dot":
            self._read_dot(arrays)
        return seconds

    def against_wall(self, operation: str, arrays: StreamArrays) -> tuple[float, float]:
        """(event seconds, wall seconds) of LAUNCHES launches of `operation` between two
        device synchronisations (device.events_against_wall); the arrays are left as one
        run leaves them."""
        from gpudiag.kernels.device import events_against_wall

        def work() -> None:
            for _ in range(self.LAUNCHES):
                self._launch(operation, arrays)

        measured = events_against_wall(self.cuda, self.device, self.timer, work)
        if operation == "dot":
            self._read_dot(arrays)
        return measured

    def fetch(self, arrays: StreamArrays) -> StreamArrays:
        """The arrays copied to the host for verification (after the stream's work)."""
        from gpudiag.kernels.device import to_host

        self.cuda.setDevice(self.device)
        host = [
            to_host(self.cuda, p, np.empty(self.n, self.dtype), self.stream)
            for p in (arrays.a, arrays.b, arrays.c)
        ]
        return StreamArrays(*host, dot=arrays.dot)

    def close(self) -> None:
        self.cuda.setDevice(self.device)
        self.timer.close()
        for pointer in self.buffers:
            self.cuda.free(pointer)
        self.buffers.clear()


# ------------------------------------------------------------------ the runner


def run_stream(
    ops: Any,
    *,
    device: str,
    trials: int = 10,
    warmup: int = 2,
    cancel: threading.Event | None = None,
    progress: Callable[[float], None] | None = None,
    seconds: float | None = None,
    until_confident: float | None = None,
    thresholds: dict[str, float] | None = None,
) -> list[KernelResult]:
    """Warm up, run `trials` rounds of the five operations (more, until `seconds` have
    passed, where given; with `until_confident`, more until every operation's 95% interval
    of the median lies within CONFIDENT_WIDTH of it, or, where `thresholds` gives the
    figure a rule judges an operation by (GB/s: KRN005/KRN006's share of the model's
    bandwidth for triad), until each such interval lies wholly above or below it, or that
    many seconds have passed: sequential testing, params say whether and how it was
    reached), verify the arrays every
    RESET_ROUNDS rounds (then refill them) and at the end, and return one result per
    operation in GB/s (10^9 bytes per second). A failed verification is an error result for every
    operation: a fast wrong answer is no answer."""
    arrays = ops.allocate()
    itemsize = ops.dtype.itemsize
    samples: dict[str, list[float]] = {op: [] for op in OPERATIONS}
    rounds = warmup + trials
    dtype_name = "fp32" if ops.dtype == np.float32 else "fp64"
    params = (("n", ops.n), ("dtype", dtype_name), ("trials", trials))
    params += (("engine", ops.engine),)

    def ended(status: ProbeStatus, error: str) -> list[KernelResult]:
        return [
            KernelResult("stream", device, op, "GB/s", status, error=error, params=params)
            for op in OPERATIONS
        ]

    dot_bound = ops.dot_bound()
    started = time.monotonic()
    round_index = since_reset = 0

    judged = thresholds or {}

    def cleared(op: str) -> bool:
        return len(samples[op]) >= 6 and _clears(summarize(samples[op]), judged[op])

    def confident() -> bool:
        if judged and all(cleared(op) for op in judged):
            return True  # the verdict the rules give can no longer change
        return all(len(v) >= 6 and _tight(summarize(v)) for v in samples.values())

    try:
        while more_trials(
            started, round_index, rounds, seconds, until_confident, lambda: not confident()
        ):
            if cancel is not None and cancel.is_set():
                if round_index >= rounds:  # the trials asked for are done: keep them
                    break
                measured = max(0, round_index - warmup)
                if measured < 2:
                    return ended(ProbeStatus.CANCELLED, "cancelled")
                verify(ops.fetch(arrays), since_reset, dot_bound)  # partial, but checked
                return [  # what was measured before the cancel, said so
                    KernelResult(
                        "stream",
                        device,
                        op,
                        "GB/s",
                        ProbeStatus.CANCELLED,
                        tuple(samples[op]),
                        summarize(samples[op]),
                        params,
                        f"cancelled after {measured} of {trials} trials",
                    )
                    for op in OPERATIONS
                ]
            if since_reset == RESET_ROUNDS:  # outside the timed operations
                verify(ops.fetch(arrays), since_reset, dot_bound)
                ops.reset(arrays)
                since_reset = 0
            for op in OPERATIONS:
                elapsed = ops.time(op, arrays)
                if round_index >= warmup and elapsed > 0:
                    samples[op].append(ARRAYS_TOUCHED[op] * itemsize * ops.n / elapsed / 1e9)
            round_index += 1
            since_reset += 1
            if progress is not None:
                progress(progress_fraction(round_index, rounds, started, seconds))
        verify(ops.fetch(arrays), since_reset, dot_bound)
    except VerificationError as exc:
        return ended(ProbeStatus.ERROR, f"verification failed: {exc}")
    against_wall = getattr(ops, "against_wall", None)  # a GPU's CUDA events
    if against_wall is not None:
        from gpudiag.kernels.device import timing_inconsistency

        launches = getattr(ops, "LAUNCHES", 1)
        inconsistent, ratio = timing_inconsistency(
            lambda: against_wall("triad", arrays), "triad", launches
        )
        if inconsistent:
            return ended(ProbeStatus.ERROR, inconsistent)
        params += (("event_over_wall", round(ratio, 3)),)
    return [
        KernelResult(
            "stream",
            device,
            op,
            "GB/s",
            ProbeStatus.OK,
            tuple(samples[op]),
            summarize(samples[op]) if len(samples[op]) >= 2 else None,
            params
            + ((("confident", confident()),) if until_confident is not None else ())
            + (
                (("threshold", judged[op]), ("threshold_cleared", cleared(op)))
                if op in judged and until_confident is not None
                else ()
            ),
        )
        for op in OPERATIONS
    ]


# --until-confident stops once each interval of the median is within +-3% of it: the
# smallest effect `gpudiag diff` calls, so two such runs can be compared with a verdict.
CONFIDENT_WIDTH = 0.03


def _clears(stats: Statistics, threshold: float) -> bool:
    """The 95% interval lies wholly above or wholly below the threshold."""
    return stats.ci95_low > threshold or stats.ci95_high < threshold


def _tight(stats: Statistics) -> bool:
    return (
        stats.median > 0
        and (stats.ci95_high - stats.ci95_low) / 2 <= CONFIDENT_WIDTH * stats.median
    )
