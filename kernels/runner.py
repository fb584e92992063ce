"""Which kernel runs where: one plan (kernels, devices, sizes, time) and one function that
runs it, for `gpudiag run`, `gpudiag --export --kernels quick|full` and the TUI alike.

On the CPU, STREAM runs once per NUMA node, one thread per CPU of the node, pinned there,
with the node's memory first touched by those threads; the peer matrix is node to node.
GPU kernels need CuPy; where CuPy or a GPU is absent the plan's GPU part is one skipped
result that says why (and `gpudiag run --device gpu` exits 3 with that reason).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence

import numpy as np

from gpudiag.hostfs import HostFS
from gpudiag.kernels import burn, copies, gemm, stream
from gpudiag.kernels.plans import KERNELS, KernelPlan
from gpudiag.model import KernelResult, ProbeStatus
from gpudiag.textparse import parse_cpulist

DTYPES = {"fp64": np.float64, "fp32": np.float32}
Progress = Callable[[str, float], None]


class KernelUnavailable(Exception):
    """A kernel cannot run on the device asked for; str() says why in one line."""


def numa_cpus(host: HostFS) -> dict[int, list[int]]:
    """CPUs of every NUMA node that has some; {} where sysfs shows no nodes."""
    nodes: dict[int, list[int]] = {}
    for name in host.listdir("/sys/devices/system/node"):
        if name.startswith("node") and name[4:].isdigit():
            text = host.read(f"/sys/devices/system/node/{name}/cpulist")
            cpus = parse_cpulist(text.text or "") if text.ok else []
            if cpus:
                nodes[int(name[4:])] = cpus
    return nodes


def usable_cpus(nodes: dict[int, list[int]]) -> dict[int, list[int]]:
    """The nodes' CPUs this process may run on (a container's cpuset can hide some);
    {-1: []} (unpinned, no NUMA) where no node keeps any."""
    allowed = os.sched_getaffinity(0)
    kept = {node: [c for c in cpus if c in allowed] for node, cpus in nodes.items()}
    return {node: cpus for node, cpus in kept.items() if cpus} or {-1: []}


def gpu_count() -> int:
    """GPUs CuPy sees; KernelUnavailable (with the reason) where it cannot look."""
    try:
        import cupy
    except ImportError:
        raise KernelUnavailable(
            "CuPy is not installed: pip install 'gpudiag[cuda12]' (or [cuda13])"
        ) from None
    try:
        return int(cupy.cuda.runtime.getDeviceCount())
    except Exception as exc:  # CUDA runtime errors have no common base class here
        raise KernelUnavailable(f"no usable GPU: {exc}") from None


def plan_gpus(device: str) -> list[int]:
    """The GPU indices a --device value names (KernelUnavailable where there are none)."""
    if device == "cpu":
        return []
    if device not in ("gpu", "all") and not device.isdigit():
        raise KernelUnavailable(f"{device}: cpu, gpu, all or a GPU index")
    count = gpu_count()
    if device.isdigit():
        if not int(device) < count:
            raise KernelUnavailable(f"no GPU {device} (this node has {count})")
        return [int(device)]
    if count == 0:
        raise KernelUnavailable("CuPy sees no GPU")
    return list(range(count))


def gpu_numa_nodes(host: HostFS, gpus: Sequence[int]) -> dict[int, int]:
    """Each GPU's NUMA node from sysfs, by the PCI address CUDA gives (-1 where unknown).
    Never run on a GPU in this project's CI."""
    import cupy

    nodes = {}
    for gpu in gpus:
        bus = cupy.cuda.runtime.deviceGetPCIBusId(gpu).lower()
        text = host.read(f"/sys/bus/pci/devices/{bus}/numa_node")
        nodes[gpu] = int(text.text) if text.ok and text.text.strip().lstrip("-").isdigit() else -1
    return nodes


def _skipped(kernel: str, device: str, reason: str) -> KernelResult:
    return KernelResult(kernel, device, "all", "", ProbeStatus.SKIPPED, error=reason)


class PlanRun:
    """One run of a plan: results so far, progress and cancel shared with a caller's
    thread (the TUI's worker), and the burn reports for printing. The CPU branches run in
    the tests; the GPU branches (CuPy) have never run on a GPU in this project's CI."""

    def __init__(
        self,
        plan: KernelPlan,
        host: HostFS | None = None,
        progress: Progress | None = None,
        cancel: threading.Event | None = None,
        nvml: object = None,
    ) -> None:
        self.plan = plan
        self.host = host or HostFS("/")
        self.progress = progress or (lambda label, fraction: None)
        self.cancel = cancel or threading.Event()
        self.nvml = nvml
        self.results: list[KernelResult] = []
        self.burns: list[burn.BurnReport] = []

    def _step(self, label: str) -> Callable[[float], None]:
        self.progress(label, 0.0)
        return lambda fraction: self.progress(label, fraction)

    def run(self, strict: bool = False) -> list[KernelResult]:
        """Run every kernel of the plan. `strict`: KernelUnavailable where the GPUs asked
        for cannot be used (the command line); otherwise a skipped result says why."""
        plan = self.plan
        on_cpu = plan.device in ("cpu", "all")
        try:
            gpus = plan_gpus(plan.device)
        except KernelUnavailable as exc:
            if strict or not on_cpu:
                raise
            gpus = []
            self.results += [_skipped(k, "gpu", str(exc)) for k in plan.kernels]
        nodes = usable_cpus(numa_cpus(self.host))
        for kernel in dict.fromkeys(plan.kernels):
            if self.cancel.is_set():
                break
            if kernel not in KERNELS:
                raise KernelUnavailable(f"no kernel {kernel} (known: {', '.join(KERNELS)})")
            getattr(self, f"_{kernel}")(on_cpu, gpus, nodes)
        return self.results

    def _stream(self, on_cpu: bool, gpus: list[int], nodes: dict[int, list[int]]) -> None:
        plan = self.plan
        common = {"trials": plan.trials, "cancel": self.cancel, "seconds": plan.seconds}
        common["until_confident"] = plan.until_confident
        for name in plan.dtypes:
            dtype = DTYPES[name]
            n = max(1024, plan.size_bytes // np.dtype(dtype).itemsize)
            if on_cpu:
                for node, cpus in nodes.items():
                    device = "cpu" if node < 0 else f"cpu-numa{node}"
                    ops = stream.CpuOperations(n, dtype, [[cpu] for cpu in cpus])
                    try:
                        step = self._step(f"stream {name} {device}")
                        self.results += stream.run_stream(
                            ops, device=device, progress=step, **common
                        )
                    finally:
                        ops.close()
            for gpu in gpus:
                ops = stream.CudaOperations(n, dtype, gpu)
                step = self._step(f"stream {name} gpu{gpu}")
                self.results += stream.run_stream(ops, device=f"gpu{gpu}", progress=step, **common)

    def _gemm(self, on_cpu: bool, gpus: list[int], nodes: dict[int, list[int]]) -> None:
        plan = self.plan
        common = {"trials": plan.trials, "cancel": self.cancel, "seconds": plan.seconds}
        if on_cpu:
            for precision in gemm.PRECISIONS:
                self.results.append(
                    gemm.run_gemm(
                        np,
                        precision,
                        plan.gemm_n,
                        device="cpu",
                        progress=self._step(f"gemm cpu {precision}"),
                        **common,
                    )
                )
        for gpu in gpus:
            for precision in gemm.PRECISIONS:
                step = self._step(f"gemm gpu{gpu} {precision}")
                self.results.append(
                    gemm.run_gpu_gemm(gpu, precision, plan.gemm_n, progress=step, **common)
                )

    def _copy(self, on_cpu: bool, gpus: list[int], nodes: dict[int, list[int]]) -> None:
        if on_cpu and not gpus:
            self.results.append(
                _skipped("copy", "cpu", "host-to-device copies need a GPU (peer: node to node)")
            )
        if not gpus:
            return
        engine = copies.CudaEngine(gpus, nodes)
        try:
            self.results += copies.run_host_copies(
                engine,
                gpu_numa_nodes(self.host, gpus),
                sorted(nodes),
                nbytes=self.plan.size_bytes,
                trials=self.plan.trials,
                cancel=self.cancel,
                progress=self._step("copy host<->gpu"),
            )
        finally:
            engine.close()

    def _peer(self, on_cpu: bool, gpus: list[int], nodes: dict[int, list[int]]) -> None:
        engines = []
        if on_cpu:
            engines.append(copies.NumaEngine({max(node, 0): cpus for node, cpus in nodes.items()}))
        if len(gpus) >= 2:
            engines.append(copies.CudaEngine(gpus, nodes))
        elif gpus:
            self.results.append(_skipped("peer", f"gpu{gpus[0]}", "one GPU: no peer to copy to"))
        for engine in engines:
            try:
                self.results += copies.run_peer_matrix(
                    engine,
                    nbytes=self.plan.size_bytes,
                    trials=self.plan.trials,
                    cancel=self.cancel,
                    progress=self._step(f"peer {engine.kind}"),
                )
            finally:
                engine.close()

    def _burn(self, on_cpu: bool, gpus: list[int], nodes: dict[int, list[int]]) -> None:
        """The CPU and every GPU asked for burn at the same time, for the plan's seconds."""
        plan = self.plan
        step = self._step("burn")
        cpu_reports: list[burn.BurnReport] = []
        cpu = threading.Thread(
            target=lambda: cpu_reports.append(
                burn.burn_device(
                    np, plan.gemm_n, plan.burn_seconds, "cpu", cancel=self.cancel, progress=step
                )
            ),
            name="burn-cpu",
            daemon=True,
        )
        if on_cpu:
            cpu.start()
        gpu_reports: list[burn.BurnReport] = []
        if gpus:
            from gpudiag.nvml import Nvml, open_nvml

            nvml = self.nvml if isinstance(self.nvml, Nvml) else open_nvml(None)
            try:
                gpu_reports = burn.burn_gpus(
                    gpus, plan.gemm_n, plan.burn_seconds, nvml, self.cancel
                )
            finally:
                if nvml is not self.nvml:
                    nvml.close()
        if on_cpu:
            cpu.join()
        self.burns += cpu_reports + gpu_reports
        for report in self.burns:
            self.results += burn.burn_results(report, plan.gemm_n)
        self.progress("burn", 1.0)
