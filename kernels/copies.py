"""Copies, after nvbandwidth: host-to-device, device-to-host and both at once per GPU with
pinned host memory on the GPU's own NUMA node and on a remote one (a wrong affinity shows
up as a slower local figure), and the endpoint-to-endpoint matrix (one way, both ways,
and the latency of a pointer chase over the link) with the peer-access status of every
pair.

One runner drives two engines. `NumaEngine` copies between NUMA nodes' memory with NumPy
on threads pinned to the destination node's CPUs: on the CPU the peer matrix is the
node-to-node (socket interconnect) bandwidth, and it runs for real in the tests, the
host-copy runner's placement, verification and statistics included. `CudaEngine` copies
between GPUs and pinned host memory through the device boundary's runtime calls, timed
with CUDA events; it has never run on a GPU in this project's CI.

Every copy is checked byte for byte after the timed trials: a fast wrong copy is an error.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from importlib import resources
from typing import Any

import numpy as np

from gpudiag.kernels.stats import summarize
from gpudiag.model import KernelResult, ProbeStatus

DIRECTIONS = ("h2d", "d2h", "bidir")
CHASE_STRIDE = 4096  # bytes between the chain's links: each load another page
CHASE_NODES = 1024
CHASE_STEPS = 10000


def fill_pattern(buffer: np.ndarray, seed: int) -> None:
    """A cheap pattern that differs per buffer and per position (uint64 words)."""
    words = buffer.view(np.uint64)
    np.multiply(np.arange(words.size, dtype=np.uint64), np.uint64(2654435761), out=words)
    words += np.uint64(seed)


class NumaMemory:
    """Host buffers first touched (so placed, by Linux's first-touch policy) by a thread
    pinned to one NUMA node's CPUs."""

    def __init__(self, node_cpus: dict[int, Sequence[int]]) -> None:
        self.node_cpus = {node: list(cpus) for node, cpus in node_cpus.items()}

    def on_node(self, node: int, work: Callable[[], Any]) -> Any:
        """Run `work` on a thread pinned to the node's CPUs (unpinned where none are known)."""
        result: list[Any] = []
        errors: list[BaseException] = []

        def run() -> None:
            try:
                if self.node_cpus.get(node):
                    os.sched_setaffinity(0, self.node_cpus[node])
                result.append(work())
            except BaseException as exc:  # handed to the caller's thread
                errors.append(exc)

        thread = threading.Thread(target=run, name=f"numa{node}")
        thread.start()
        thread.join()
        if errors:
            raise errors[0]
        return result[0]

    def buffer(self, node: int, nbytes: int, seed: int) -> np.ndarray:
        """nbytes (a multiple of 8) on the node, holding the pattern for `seed`."""

        def make() -> np.ndarray:
            array = np.empty(nbytes, dtype=np.uint8)
            fill_pattern(array, seed)
            return array

        return self.on_node(node, make)


class NumaEngine:
    """Endpoints are NUMA nodes; a copy runs on one pinned thread per CPU of the
    destination node, each copying its share (so it writes locally and reads remotely)."""

    kind = "cpu"

    def __init__(self, node_cpus: dict[int, Sequence[int]]) -> None:
        self.memory = NumaMemory(node_cpus)
        self.endpoints = sorted(node_cpus)
        most = max((len(c) for c in node_cpus.values()), default=1)
        self.pool = ThreadPoolExecutor(max_workers=2 * max(1, most), thread_name_prefix="copy")

    def name(self, endpoint: int) -> str:
        return f"cpu-numa{endpoint}"

    def buffer(self, endpoint: int, nbytes: int, seed: int) -> np.ndarray:
        return self.memory.buffer(endpoint, nbytes, seed)

    host_buffer = buffer

    def _jobs(self, dst: np.ndarray, src: np.ndarray, node: int) -> list[Callable[[], None]]:
        cpus = self.memory.node_cpus.get(node) or [None]
        bounds = np.linspace(0, dst.size, len(cpus) + 1).astype(np.int64)

        def job(cpu: int | None, start: int, stop: int) -> Callable[[], None]:
            def run() -> None:
                if cpu is not None:
                    os.sched_setaffinity(0, [cpu])
                np.copyto(dst[start:stop], src[start:stop])

            return run

        return [job(cpu, int(bounds[i]), int(bounds[i + 1])) for i, cpu in enumerate(cpus)]

    def time_copies(self, copies: Sequence[tuple[Any, Any, int]]) -> float:
        """Seconds for all (dst, src, dst_endpoint) copies running at once."""
        jobs = [j for dst, src, node in copies for j in self._jobs(dst, src, node)]
        started = time.perf_counter()
        for future in [self.pool.submit(job) for job in jobs]:
            future.result()
        return time.perf_counter() - started

    def same(self, dst: np.ndarray, src: np.ndarray) -> bool:
        return bool(np.array_equal(dst, src))

    def peer_access(self, dst: int, src: int) -> str:
        return "local" if dst == src else "numa"

    def latency(self, dst: Any, src: Any, dst_endpoint: int) -> float | None:
        """Not measured on the CPU: a Python call costs more than a small memcpy."""
        return None

    def release(self, *buffers: Any) -> None:
        """Nothing to do: NumPy frees the buffers."""

    def close(self) -> None:
        self.pool.shutdown(wait=True)


@dataclass(frozen=True)
class DeviceBuffer:
    """nbytes of one GPU's memory at a device pointer."""

    pointer: int
    device: int
    nbytes: int


class CudaEngine:
    """Endpoints are GPUs, through the device boundary (kernels/device.py); host buffers
    are NumaMemory buffers registered with CUDA (cudaHostRegister), so that their NUMA node
    is chosen, not left to the driver. Copies are cudaMemcpyAsync/cudaMemcpyPeerAsync on
    two streams per GPU, timed with CUDA events (several at once: from an event before the
    first to one after the last, on a stream that waits for all). Latency is measured on
    the device by a pointer chase (`latency`), not by timing small copies from Python,
    which measures Python's call rate. Never run on a GPU in this project's CI: the tests
    run it through a strict NumPy fake of the boundary."""

    kind = "gpu"

    def __init__(
        self, gpus: Sequence[int], node_cpus: dict[int, Sequence[int]], cuda: Any = None
    ) -> None:
        from gpudiag.kernels.device import Timer, api

        self.cuda = cuda = cuda or api()
        self.endpoints = list(gpus)
        self.memory = NumaMemory(node_cpus)
        self.registered: list[np.ndarray] = []
        self.allocated: list[DeviceBuffer] = []
        self.streams: dict[int, tuple[Any, Any]] = {}
        self.events: list[int] = []
        for gpu in self.endpoints:
            cuda.setDevice(gpu)
            self.streams[gpu] = (cuda.Stream(non_blocking=True), cuda.Stream(non_blocking=True))
        self.access: dict[tuple[int, int], bool] = {}
        self.chase: dict[int, tuple[Any, int]] = {}  # per GPU: the chase kernel, its output
        for i in self.endpoints:
            for j in self.endpoints:
                if i != j and cuda.deviceCanAccessPeer(i, j):
                    cuda.setDevice(i)
                    with contextlib.suppress(Exception):  # an error: enabled already
                        cuda.deviceEnablePeerAccess(j)
                    self.access[(i, j)] = True
        self.timers = {}
        for gpu in self.endpoints:
            cuda.setDevice(gpu)
            self.timers[gpu] = Timer(cuda, self.streams[gpu][0])

    def name(self, endpoint: int) -> str:
        return f"gpu{endpoint}"

    def _event(self) -> int:
        event = self.cuda.eventCreateWithFlags(self.cuda.eventDefault)
        self.events.append(event)
        return event

    def buffer(self, endpoint: int, nbytes: int, seed: int) -> DeviceBuffer:
        from gpudiag.kernels.device import to_device

        host = np.empty(nbytes, dtype=np.uint8)
        fill_pattern(host, seed)
        self.cuda.setDevice(endpoint)
        buffer = DeviceBuffer(
            to_device(self.cuda, host, self.streams[endpoint][0]), endpoint, nbytes
        )
        self.allocated.append(buffer)
        return buffer

    def host_buffer(self, node: int, nbytes: int, seed: int) -> np.ndarray:
        host = self.memory.buffer(node, nbytes, seed)
        self.cuda.hostRegister(host.ctypes.data, nbytes, 0)
        self.registered.append(host)  # kept alive while registered
        return host

    def release(self, *buffers: Any) -> None:
        """Unregister host buffers and free device buffers no longer needed (host memory
        freed while registered would leave its addresses registered for the next one)."""
        for buffer in buffers:
            if isinstance(buffer, DeviceBuffer):
                self.cuda.setDevice(buffer.device)
                self.cuda.free(buffer.pointer)
                self.allocated.remove(buffer)
            else:
                self.cuda.hostUnregister(buffer.ctypes.data)
                self.registered = [h for h in self.registered if h is not buffer]

    def _copy(self, dst: Any, src: Any, stream: Any) -> None:
        cuda = self.cuda
        if isinstance(dst, DeviceBuffer) and isinstance(src, DeviceBuffer):
            cuda.memcpyPeerAsync(
                dst.pointer, dst.device, src.pointer, src.device, dst.nbytes, stream.ptr
            )
        elif isinstance(dst, DeviceBuffer):
            kind = cuda.memcpyHostToDevice
            cuda.memcpyAsync(dst.pointer, src.ctypes.data, dst.nbytes, kind, stream.ptr)
        else:
            kind = cuda.memcpyDeviceToHost
            cuda.memcpyAsync(dst.ctypes.data, src.pointer, src.nbytes, kind, stream.ptr)

    def time_copies(self, copies: Sequence[tuple[Any, Any, int]], serial: bool = False) -> float:
        """Seconds for the copies: at once (two streams per GPU), or one after another.
        The first copy is issued once untimed before the start event (a lead copy), so
        that the copy engine is busy while the timed copies are queued and no host gap is
        timed; copying the same bytes again leaves the destination as it was."""
        cuda = self.cuda
        lead_dst, lead_src, first = copies[0]
        timer, home = self.timers[first], self.streams[first][0]
        cuda.setDevice(first)
        self._copy(lead_dst, lead_src, home)
        timer.start()
        used = []
        for index, (dst, src, endpoint) in enumerate(copies):
            stream = self.streams[endpoint][0 if serial else index % 2]
            cuda.setDevice(endpoint)
            cuda.streamWaitEvent(stream.ptr, timer.begin, 0)
            self._copy(dst, src, stream)
            done = self._event()
            cuda.eventRecord(done, stream.ptr)
            used.append(done)
        cuda.setDevice(first)
        for done in used:
            cuda.streamWaitEvent(home.ptr, done, 0)
        timer.stop()
        seconds = timer.seconds()
        for event in used:
            cuda.eventDestroy(event)
            self.events.remove(event)
        return seconds

    def _host_copy(self, buffer: Any) -> np.ndarray:
        if not isinstance(buffer, DeviceBuffer):
            return buffer
        from gpudiag.kernels.device import to_host

        self.cuda.setDevice(buffer.device)
        out = np.empty(buffer.nbytes, np.uint8)
        return to_host(self.cuda, buffer.pointer, out, self.streams[buffer.device][0])

    def same(self, dst: Any, src: Any) -> bool:
        return bool(np.array_equal(self._host_copy(dst), self._host_copy(src)))

    def peer_access(self, dst: int, src: int) -> str:
        if dst == src:
            return "local"
        return "enabled" if self.access.get((src, dst)) else "unsupported"

    def latency(self, dst: Any, src: Any, dst_endpoint: int) -> float | None:
        """Seconds per step of a pointer chase that the source GPU runs through a chain
        laid in the destination GPU's memory (kernels/copies.cu, as nvbandwidth's latency
        test): one round trip over the link per step, no launch cost or Python in it.
        None where the source GPU cannot access the destination's memory."""
        from gpudiag.kernels.device import pinned

        if not isinstance(dst, DeviceBuffer) or not isinstance(src, DeviceBuffer):
            return None
        if not self.access.get((src.device, dst.device)):
            return None
        cuda = self.cuda
        nodes = max(1, min(CHASE_NODES, dst.nbytes // CHASE_STRIDE))
        chain = np.zeros(nodes * CHASE_STRIDE // 8, np.uint64)
        offsets = np.arange(nodes, dtype=np.uint64) * np.uint64(CHASE_STRIDE)
        nexts = np.roll(offsets, -1) + np.uint64(dst.pointer)
        chain[offsets // np.uint64(8)] = nexts
        cuda.setDevice(dst.device)
        stream = self.streams[dst.device][0]
        with pinned(cuda, chain):
            kind = cuda.memcpyHostToDevice
            cuda.memcpyAsync(dst.pointer, chain.ctypes.data, chain.nbytes, kind, stream.ptr)
            cuda.streamSynchronize(stream.ptr)
        cuda.setDevice(src.device)
        if src.device not in self.chase:
            source = (resources.files("gpudiag.kernels") / "copies.cu").read_text(encoding="utf-8")
            module = cuda.RawModule(code=source, options=("-std=c++17",))
            self.chase[src.device] = (module.get_function("peer_latency_chase"), cuda.malloc(8))
        kernel, out = self.chase[src.device]
        timer, home = self.timers[src.device], self.streams[src.device][0]
        args = (np.uint64(dst.pointer), np.uint64(CHASE_STEPS), np.uint64(out))
        timer.start()
        kernel((1,), (1,), args, stream=home)
        timer.stop()
        return timer.seconds() / CHASE_STEPS

    def close(self) -> None:
        cuda = self.cuda
        for gpu, (_kernel, out) in self.chase.items():
            cuda.setDevice(gpu)
            cuda.free(out)
        self.chase.clear()
        for host in self.registered:
            cuda.hostUnregister(host.ctypes.data)
        self.registered.clear()
        for buffer in self.allocated:
            cuda.setDevice(buffer.device)
            cuda.free(buffer.pointer)
        self.allocated.clear()
        for gpu, timer in self.timers.items():
            cuda.setDevice(gpu)
            timer.close()


# ------------------------------------------------------------------ the runners


def _result(
    kernel: str,
    device: str,
    metric: str,
    unit: str,
    samples: list[float],
    params: tuple[tuple[str, Any], ...],
    error: str = "",
) -> KernelResult:
    if error:
        return KernelResult(
            kernel, device, metric, unit, ProbeStatus.ERROR, error=error, params=params
        )
    return KernelResult(
        kernel, device, metric, unit, ProbeStatus.OK, tuple(samples), summarize(samples), params
    )


def _measure(
    engine: Any,
    copies: Sequence[tuple[Any, Any, int]],
    nbytes: int,
    trials: int,
    warmup: int,
) -> tuple[list[float], str]:
    """GB/s samples of the copies running together, and "" or what was wrong with them."""
    samples = []
    for index in range(warmup + trials):
        seconds = engine.time_copies(copies)
        if index >= warmup and seconds > 0:
            samples.append(nbytes * len(copies) / seconds / 1e9)
    for dst, src, _ in copies:
        if not engine.same(dst, src):
            return samples, "verification failed: the copy differs from its source"
    if len(samples) < 2:
        return samples, "fewer than two timed trials"
    return samples, ""


NO_REMOTE = "one NUMA node: no remote host memory"


def run_host_copies(
    engine: Any,
    endpoint_nodes: dict[int, int],
    nodes: Sequence[int],
    *,
    nbytes: int,
    trials: int = 10,
    warmup: int = 2,
    cancel: threading.Event | None = None,
    progress: Callable[[float], None] | None = None,
    no_remote: str = NO_REMOTE,
) -> list[KernelResult]:
    """Per endpoint (GPU) and placement (host memory on its own node, "local", and on the
    first other node with CPUs, "remote"): host-to-device, device-to-host and both at once,
    in GB/s. `endpoint_nodes` maps each endpoint to its NUMA node (-1 where unknown: then
    the first node counts as local). Where there is no other node, the remote placement is
    a skipped result per direction saying why (`no_remote`): its readings are unsupported,
    so the rules comparing local with remote do not apply."""
    nbytes -= nbytes % 8
    results: list[KernelResult] = []
    steps = max(1, len(endpoint_nodes) * 2)
    done = 0
    for endpoint, own in endpoint_nodes.items():
        local = own if own in nodes else nodes[0]
        remote = next((n for n in nodes if n != local), None)
        device = engine.name(endpoint)
        for placement, node in (("local", local), ("remote", remote)):
            done += 1
            if node is None:
                results += [
                    KernelResult(
                        "copy", device, f"{direction}.{placement}", "GB/s",
                        ProbeStatus.SKIPPED, error=no_remote,
                    )
                    for direction in DIRECTIONS
                ]  # fmt: skip
                continue
            if cancel is not None and cancel.is_set():
                return results
            params = (("bytes", nbytes), ("numa_node", node), ("trials", trials))
            host = engine.host_buffer(node, nbytes, 1)
            host_back = engine.host_buffer(node, nbytes, 2)
            target = engine.buffer(endpoint, nbytes, 3)
            target_two = engine.buffer(endpoint, nbytes, 4)
            plans = {
                "h2d": [(target, host, endpoint)],
                "d2h": [(host_back, target_two, endpoint)],
                "bidir": [(target, host, endpoint), (host_back, target_two, endpoint)],
            }
            for direction in DIRECTIONS:
                samples, error = _measure(engine, plans[direction], nbytes, trials, warmup)
                results.append(
                    _result(
                        "copy", device, f"{direction}.{placement}", "GB/s", samples, params, error
                    )
                )
            engine.release(host, host_back, target, target_two)
            if progress is not None:
                progress(done / steps)
    return results


def run_peer_matrix(
    engine: Any,
    *,
    nbytes: int,
    trials: int = 10,
    warmup: int = 2,
    cancel: threading.Event | None = None,
    progress: Callable[[float], None] | None = None,
) -> list[KernelResult]:
    """For every ordered pair of endpoints (src, dst), src != dst where there are two or
    more: one-way and both-ways GB/s and the engine's latency, each with the pair's peer
    access status. Results belong to the source endpoint; the metric names the other."""
    nbytes -= nbytes % 8
    endpoints = list(engine.endpoints)
    pairs = [(s, d) for s in endpoints for d in endpoints if s != d or len(endpoints) == 1]
    buffers = {e: engine.buffer(e, nbytes, 10 + i) for i, e in enumerate(endpoints)}
    targets = {e: engine.buffer(e, nbytes, 0) for e in endpoints}
    returns = {e: engine.buffer(e, nbytes, 0) for e in endpoints}
    results: list[KernelResult] = []
    for index, (src, dst) in enumerate(pairs):
        if cancel is not None and cancel.is_set():
            break
        device, other = engine.name(src), engine.name(dst)
        params = (
            ("bytes", nbytes),
            ("peer_access", engine.peer_access(dst, src)),
            ("trials", trials),
        )
        one_way = [(targets[dst], buffers[src], dst)]
        samples, error = _measure(engine, one_way, nbytes, trials, warmup)
        results.append(_result("peer", device, f"to.{other}", "GB/s", samples, params, error))
        both = [(targets[dst], buffers[src], dst), (returns[src], buffers[dst], src)]
        samples, error = _measure(engine, both, nbytes, trials, warmup)
        results.append(_result("peer", device, f"bidir.{other}", "GB/s", samples, params, error))
        latencies = [engine.latency(targets[dst], buffers[src], dst) for _ in range(trials)]
        if all(v is not None for v in latencies):
            micro = [v * 1e6 for v in latencies if v is not None]
            results.append(_result("peer", device, f"latency.{other}", "us", micro, params))
        if progress is not None:
            progress((index + 1) / len(pairs))
    return results
