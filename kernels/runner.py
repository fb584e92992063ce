"""Which kernel runs where: one plan (kernels, devices, sizes, time) and one function that
runs it, for `gpudiag run`, `gpudiag --export --kernels quick|full` and the TUI alike.

On the CPU, STREAM runs once per NUMA node, one thread per CPU of the node, pinned there,
with the node's memory first touched by those threads; the peer matrix is node to node.
GPU kernels need CuPy; where CuPy or a GPU is absent the plan's GPU part is one skipped
result that says why (and `gpudiag run --device gpu` exits 3 with that reason).
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace

import numpy as np

from gpudiag.hostfs import HostFS
from gpudiag.kernels import allreduce, burn, copies, device, gemm, stream
from gpudiag.kernels.conditions import ConditionSampler
from gpudiag.kernels.plans import KERNELS, KernelPlan
from gpudiag.model import KernelResult, ProbeStatus
from gpudiag.probes.gpu import normalize_bus_id
from gpudiag.textparse import parse_cpulist

DTYPES = {"fp64": np.float64, "fp32": np.float32}
Progress = Callable[[str, float], None]


def at_looks_confidence(results: list[KernelResult], plan: KernelPlan) -> list[KernelResult]:
    """STREAM's results after --until-confident with their interval at the confidence of
    the last sequential look (kernels/stats.py `reported`): its stop was decided at that
    level, and a 95% interval read after would spend more than the error budget; the
    threshold's "cleared" is said again of that interval."""
    from gpudiag.kernels.stats import last_look, look_confidence, reported

    if plan.until_confident is None:
        return results
    out = []
    for result in results:
        if result.status is not ProbeStatus.OK or len(result.samples) < 2:
            out.append(result)
            continue
        stats = reported(result.samples, plan.until_confident, plan.trials)
        params = dict(result.params)
        if isinstance(params.get("threshold"), int | float):
            threshold = float(params["threshold"])
            params["threshold_cleared"] = len(result.samples) >= 6 and (
                stats.ci95_low > threshold or stats.ci95_high < threshold
            )
        level = look_confidence(last_look(len(result.samples), plan.trials))
        params["confidence"] = round(level, 6)
        out.append(replace(result, stats=stats, params=tuple(params.items())))
    return out


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
    """GPUs CUDA sees (through the device boundary); KernelUnavailable (with the reason)
    where it cannot look."""
    try:
        cuda = device.api()
        count = cuda.getDeviceCount
    except ImportError:
        raise KernelUnavailable(
            "CuPy is not installed: pip install 'gpudiag[cuda12]' (or [cuda13])"
        ) from None
    try:
        return int(count())
    except Exception as exc:  # CUDA runtime errors have no common base class here
        raise KernelUnavailable(f"no usable GPU (CuPy: {exc})") from None


NO_NVIDIA_GPU = "no NVIDIA GPU on this node"
PCI_DEVICES = "/sys/bus/pci/devices"


def no_nvidia_gpu_on_bus(host: HostFS) -> bool:
    """True where the PCI bus lists functions and none is an NVIDIA GPU (vendor 0x10de,
    a display controller, class 0x03xxxx): no GPU kernel can run, whatever CuPy says
    (CuPy missing, or a driver it finds wanting, are not the reason). False where the bus
    is not read (a tree without it), as probes/topology.py's node.nvidia_gpus."""
    functions = host.listdir(PCI_DEVICES)
    for function in functions:
        vendor = host.read(f"{PCI_DEVICES}/{function}/vendor")
        if vendor.ok and vendor.text.strip().lower() == "0x10de":
            klass = host.read(f"{PCI_DEVICES}/{function}/class")
            if not klass.ok or klass.text.strip().lower().startswith("0x03"):
                return False
    return bool(functions)


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
    Never run on a GPU in this project's CI (the tests use the device fake)."""
    cuda = device.api()
    nodes = {}
    for gpu in gpus:
        bus = normalize_bus_id(cuda.deviceGetPCIBusId(gpu))
        text = host.read(f"/sys/bus/pci/devices/{bus}/numa_node")
        nodes[gpu] = int(text.text) if text.ok and text.text.strip().lstrip("-").isdigit() else -1
    return nodes


def _wait_through_interrupts(done: threading.Event) -> None:
    """Wait for `done`, a further Ctrl-C notwithstanding. (An Event, not Thread.join:
    a join that Ctrl-C interrupts marks a running thread as ended on Python 3.11.)"""
    while not done.is_set():
        try:
            done.wait()
        except KeyboardInterrupt:
            continue


def _skipped(kernel: str, device: str, reason: str) -> KernelResult:
    return KernelResult(kernel, device, "all", "", ProbeStatus.SKIPPED, error=reason)


def _failed(kernel: str, gpu: int, exc: Exception) -> KernelResult:
    """A kernel that raised on a GPU: that device's result, the others carry on."""
    reason = f"{type(exc).__name__}: {exc}".strip()[:300]
    return KernelResult(kernel, f"gpu{gpu}", "all", "", ProbeStatus.ERROR, error=reason)


def cuda_to_nvml(gpus: Sequence[int], nvml: object) -> dict[int, int]:
    """NVML's index of each CUDA device, matched by UUID, else by PCI bus id: under
    CUDA_VISIBLE_DEVICES (or CUDA's FASTEST_FIRST order) CUDA device 0 need not be NVML's
    GPU 0, and kernel results must land on the readings of the same GPU. A device NVML
    does not show, or that CUDA cannot query, keeps its CUDA index. Never run on a GPU in
    this project's CI (the tests use the device fake and NVML replays)."""
    from gpudiag.nvml import Nvml

    if not isinstance(nvml, Nvml):
        return {gpu: gpu for gpu in gpus}
    cuda = device.api()
    count = nvml.reading("count", "nvmlDeviceGetCount")
    known: dict[str, int] = {}
    for index in range(int(count.value) if count.ok else 0):  # type: ignore[arg-type]
        uuid = nvml.reading("uuid", "nvmlDeviceGetUUID", index)
        bus = nvml.reading("bus", "nvmlDeviceGetPciInfo", index, convert=lambda p: p["busId"])
        if uuid.ok:
            known[f"uuid:{uuid.value}"] = index
        if bus.ok:
            known[f"bus:{normalize_bus_id(str(bus.value))}"] = index
    mapping = {}
    for gpu in gpus:
        try:
            uuid = device.device_uuid(cuda, gpu)
            bus = normalize_bus_id(cuda.deviceGetPCIBusId(gpu))
        except Exception:  # a GPU CUDA cannot query keeps its CUDA index
            mapping[gpu] = gpu
            continue
        mapping[gpu] = known.get(f"uuid:{uuid}", known.get(f"bus:{bus}", gpu))
    return mapping


def nvml_label(text: str, mapping: dict[int, int]) -> str:
    """gpuN (a CUDA index) in a device or metric name as gpuM (NVML's index)."""
    return re.sub(r"gpu(\d+)", lambda m: f"gpu{mapping.get(int(m.group(1)), m.group(1))}", text)


def relabel(result: KernelResult, mapping: dict[int, int]) -> KernelResult:
    """A result of CUDA devices labelled with their NVML indices (device and peer)."""
    return replace(
        result, device=nvml_label(result.device, mapping), metric=nvml_label(result.metric, mapping)
    )


def triad_threshold(host: HostFS, bus_id: str, dtype: str) -> float | None:
    """The GB/s a shipped rule judges this GPU's STREAM triad by (KRN005 for fp64, KRN006
    for fp32: a share of the model's memory bandwidth), from the GPU's PCI device id in
    sysfs and its model's profile; None where the model has no profile with a bandwidth
    or no rule judges that triad. `--until-confident` stops once the interval clears it."""
    return rule_threshold(host, bus_id, f"stream.triad.{dtype}")


def rule_threshold(host: HostFS, bus_id: str, metric: str) -> float | None:
    """The figure a shipped rule judges this GPU's `metric` (stream.triad.fp64, gemm.fp16)
    by: the rule's factor x its profile field (min_profile on `<metric>.ci_high`) for the
    model found by the GPU's PCI device id in sysfs; None where no profile or rule has it."""
    from gpudiag.rulefile import load_rules

    profile = gpu_peaks(host, bus_id)
    if not profile:
        return None
    reading = f"gpu.{{gpu}}.kernel.{metric}.ci_high"
    for rule in load_rules():
        if (rule.reading, rule.operator) == (reading, "min_profile") and not rule.disabled:
            value = profile.get(rule.operand)
            return rule.factor * float(value) if isinstance(value, int | float) else None
    return None


def gpu_peaks(host: HostFS, bus_id: str) -> dict[str, object]:
    """The profile values of this GPU's model, found by its PCI device id in sysfs; {}
    where sysfs or the profiles do not know it."""
    from gpudiag.profiles import load_profiles

    found = host.read(f"/sys/bus/pci/devices/{normalize_bus_id(bus_id)}/device")
    if not found.ok or not found.text:
        return {}
    device_id = found.text.strip().lower()
    profile = next((p for p in load_profiles().values() if device_id in p.device_ids), None)
    return dict(profile.values) if profile is not None else {}


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
        self.strict = False  # run(strict=True): a refused size is the caller's error
        self._sampler: ConditionSampler | None = None

    def _open_conditions(self, gpus: list[int]) -> Callable[[], None]:
        """The sampler of the GPUs' conditions for this run (kernels/conditions.py), over
        the run's NVML or one opened for it; returns what closes it."""
        from gpudiag.nvml import Nvml, NvmlError, open_nvml

        nvml = self.nvml if isinstance(self.nvml, Nvml) else open_nvml(None)
        try:
            nvml.ensure_init()
            mapping = cuda_to_nvml(gpus, nvml)
            self._sampler = ConditionSampler(nvml, mapping)
        except NvmlError as exc:  # no NVML: each GPU figure says its conditions are unknown
            self._sampler = ConditionSampler(None, why_not=f"NVML unavailable ({exc.reason})")
        return (lambda: None) if nvml is self.nvml else nvml.close

    @contextmanager
    def _conditions(self, gpus: list[int]) -> Iterator[None]:
        """Sample `gpus`' conditions while the block runs; each GPU result it added (gpuN,
        or "gpus" for all of them) gets their params: the clocks it ran at."""
        start, sampler = len(self.results), self._sampler
        if sampler is None:
            yield
            return
        with sampler.watch(gpus) as taken:
            yield
        for position in range(start, len(self.results)):
            result = self.results[position]
            own = re.fullmatch(r"gpu(\d+)", result.device)
            members = [int(own.group(1))] if own else gpus if result.device == "gpus" else []
            if members and set(members) <= set(gpus) and result.status is ProbeStatus.OK:
                params = result.params + sampler.params(members, taken)
                self.results[position] = replace(result, params=params)

    def _step(self, label: str) -> Callable[[float], None]:
        self.progress(label, 0.0)
        return lambda fraction: self.progress(label, fraction)

    def run(self, strict: bool = False) -> list[KernelResult]:
        """Run every kernel of the plan. `strict`: KernelUnavailable where the GPUs asked
        for cannot be used (the command line); otherwise a skipped result says why."""
        plan = self.plan
        self.strict = strict
        on_cpu = plan.device in ("cpu", "all")
        try:
            try:
                gpus = plan_gpus(plan.device)
            except KernelUnavailable:
                # CuPy missing or finding no driver is not the reason on a node whose bus
                # lists no NVIDIA GPU: say that, once (not "pip install" CuPy's 140 MB)
                if no_nvidia_gpu_on_bus(self.host):
                    raise KernelUnavailable(NO_NVIDIA_GPU) from None
                raise
        except KernelUnavailable as exc:
            if strict or not on_cpu:
                raise
            gpus = []
            self.results += [_skipped(k, "gpu", str(exc)) for k in plan.kernels]
        nodes = usable_cpus(numa_cpus(self.host))
        close = self._open_conditions(gpus) if gpus else (lambda: None)
        try:
            for kernel in dict.fromkeys(plan.kernels):
                if self.cancel.is_set():
                    break
                if kernel not in KERNELS:
                    raise KernelUnavailable(f"no kernel {kernel} (known: {', '.join(KERNELS)})")
                getattr(self, f"_{kernel}")(on_cpu, gpus, nodes)
        finally:
            close()
        if gpus:
            self.results = self._judged(self.results, gpus)
            mapping = self._nvml_indices(gpus)
            if any(k != v for k, v in mapping.items()):
                self.results = [relabel(r, mapping) for r in self.results]
                for report in self.burns:
                    report.device = nvml_label(report.device, mapping)
        return self.results

    def _judged(self, results: list[KernelResult], gpus: list[int]) -> list[KernelResult]:
        """Each GPU result whose figure cannot be true on its model (above the physical
        peak: kernels/readings.impossible) made an error, "timing inconsistent: ...". On a
        Grace node a GPU's host copies may go over NVLink-C2C, not its PCIe link: they are
        left to the derived readings, which judge them by gpu.N.c2c.enabled."""
        from gpudiag.kernels.readings import judged
        from gpudiag.probes.rackscale import grace_cpu

        over_c2c = grace_cpu(self.host)
        peaks = {}
        for gpu in gpus:
            try:
                peaks[f"gpu{gpu}"] = gpu_peaks(self.host, device.api().deviceGetPCIBusId(gpu))
            except Exception:  # a GPU CUDA cannot query: its figures are not judged here
                peaks[f"gpu{gpu}"] = {}
        return [
            r if over_c2c and r.kernel == "copy" else judged(r, peaks.get(r.device, {}))
            for r in results
        ]

    def _nvml_indices(self, gpus: list[int]) -> dict[int, int]:
        """cuda_to_nvml with the run's NVML, or one opened for it (`gpudiag run`)."""
        from gpudiag.nvml import Nvml, open_nvml

        nvml = self.nvml if isinstance(self.nvml, Nvml) else open_nvml(None)
        try:
            return cuda_to_nvml(gpus, nvml)
        finally:
            if nvml is not self.nvml:
                nvml.close()

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
                        self.results += at_looks_confidence(
                            stream.run_stream(ops, device=device, progress=step, **common), plan
                        )
                    finally:
                        ops.close()
            gpu_bytes = plan.gpu_stream_bytes or plan.size_bytes  # 4x L2 or refused
            on_gpu = max(1024, gpu_bytes // np.dtype(dtype).itemsize)
            for gpu in gpus:
                step = self._step(f"stream {name} gpu{gpu}")
                try:
                    thresholds = self._triad_thresholds(gpu, name)
                    ops = stream.CudaOperations(on_gpu, dtype, gpu)
                    try:
                        with self._conditions([gpu]):
                            measured = stream.run_stream(
                                ops,
                                device=f"gpu{gpu}",
                                progress=step,
                                thresholds=thresholds,
                                **common,
                            )
                            self.results += at_looks_confidence(measured, plan)
                    finally:
                        ops.close()
                except Exception as exc:  # a broken GPU is this GPU's result
                    if self.strict and isinstance(exc, stream.CacheResident):
                        raise  # `gpudiag run --size`: refused, exit 3
                    failed = _failed("stream", gpu, exc)
                    self.results.append(replace(failed, params=(("dtype", name),)))

    def _confident_bus_id(self, gpu: int) -> str | None:
        """The GPU's PCI bus id, which its rule thresholds are found by, when the plan
        runs --until-confident; None without it, or for a GPU CUDA cannot query (then the
        tight interval alone decides)."""
        if self.plan.until_confident is None:
            return None
        try:
            return device.api().deviceGetPCIBusId(gpu)
        except Exception:
            return None

    def _triad_thresholds(self, gpu: int, dtype: str) -> dict[str, float] | None:
        """{'triad': GB/s} that --until-confident may stop at (triad_threshold); None
        without --until-confident, or where the GPU's model has none."""
        bus_id = self._confident_bus_id(gpu)
        threshold = None if bus_id is None else triad_threshold(self.host, bus_id, dtype)
        return {"triad": threshold} if threshold is not None else None

    def _gemm_threshold(self, gpu: int, precision: str) -> float | None:
        """The TFLOP/s a rule judges this GEMM by (KRN007/KRN008), for --until-confident;
        None without it, or where no rule or profile gives one."""
        bus_id = self._confident_bus_id(gpu)
        return None if bus_id is None else rule_threshold(self.host, bus_id, f"gemm.{precision}")

    def _gemm(self, on_cpu: bool, gpus: list[int], nodes: dict[int, list[int]]) -> None:
        plan = self.plan
        common = {"trials": plan.trials, "cancel": self.cancel, "seconds": plan.seconds}
        common["until_confident"] = plan.until_confident
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
                with self._conditions([gpu]):
                    try:
                        threshold = self._gemm_threshold(gpu, precision)
                        result = gemm.run_gpu_gemm(
                            gpu,
                            precision,
                            plan.gemm_n,
                            progress=step,
                            threshold=threshold,
                            **common,
                        )
                    except Exception as exc:  # a broken GPU is this GPU's result
                        result = replace(_failed("gemm", gpu, exc), metric=precision)
                    self.results.append(result)

    def _copy(self, on_cpu: bool, gpus: list[int], nodes: dict[int, list[int]]) -> None:
        if on_cpu and not gpus:
            self.results.append(
                _skipped("copy", "cpu", "host-to-device copies need a GPU (peer: node to node)")
            )
        if not gpus:
            return
        step = self._step("copy host<->gpu")
        no_remote = copies.NO_REMOTE
        if len(numa_cpus(self.host)) > len(nodes):  # a cpuset hides the other nodes' CPUs
            no_remote = "no CPU of another NUMA node is in this process's cpuset"
        for index, gpu in enumerate(gpus):  # one engine per GPU: a broken one fails alone
            try:
                engine = copies.CudaEngine([gpu], nodes)
                try:
                    with self._conditions([gpu]):
                        self.results += copies.run_host_copies(
                            engine,
                            gpu_numa_nodes(self.host, [gpu]),
                            sorted(nodes),
                            nbytes=self.plan.size_bytes,
                            trials=self.plan.trials,
                            cancel=self.cancel,
                            progress=lambda f, i=index: step((i + f) / len(gpus)),
                            no_remote=no_remote,
                        )
                finally:
                    engine.close()
            except Exception as exc:  # a broken GPU is this GPU's result
                self.results.append(_failed("copy", gpu, exc))

    def _peer(self, on_cpu: bool, gpus: list[int], nodes: dict[int, list[int]]) -> None:
        engines = []
        if on_cpu:
            engines.append(copies.NumaEngine({max(node, 0): cpus for node, cpus in nodes.items()}))
        if len(gpus) >= 2:
            try:
                engines.append(copies.CudaEngine(gpus, nodes))
            except Exception as exc:
                self.results += [_failed("peer", gpu, exc) for gpu in gpus]
        elif gpus:
            self.results.append(_skipped("peer", f"gpu{gpus[0]}", "one GPU: no peer to copy to"))
        for engine in engines:
            try:
                with self._conditions(gpus if engine.kind == "gpu" else []):
                    self.results += copies.run_peer_matrix(
                        engine,
                        nbytes=self.plan.size_bytes,
                        trials=self.plan.trials,
                        cancel=self.cancel,
                        progress=self._step(f"peer {engine.kind}"),
                    )
            except Exception as exc:  # the matrix needs every GPU: each gets the reason
                if engine.kind != "gpu":
                    raise
                self.results += [_failed("peer", gpu, exc) for gpu in gpus]
            finally:
                engine.close()

    def _allreduce(self, on_cpu: bool, gpus: list[int], nodes: dict[int, list[int]]) -> None:
        """NCCL all-reduce across every GPU asked for (two or more)."""
        if not gpus:
            if on_cpu:
                self.results.append(_skipped("allreduce", "cpu", "all-reduce needs GPUs"))
            return
        try:
            with self._conditions(gpus):
                self.results += allreduce.run_allreduce(
                    gpus,
                    max_bytes=self.plan.size_bytes,
                    trials=self.plan.trials,
                    cancel=self.cancel,
                    progress=self._step("allreduce"),
                )
        except AttributeError as exc:  # cupy.cuda.nccl without its library
            reason = f"NCCL is not available (pip install 'gpudiag[cuda12]'): {exc}"
            self.results.append(_skipped("allreduce", "gpus", reason))
        except Exception as exc:  # an NCCL or CUDA error: the node's result, not a crash
            reason = f"{type(exc).__name__}: {exc}"[:300]
            self.results.append(
                KernelResult("allreduce", "gpus", "busbw", "GB/s", ProbeStatus.ERROR, error=reason)
            )

    def _burn(self, on_cpu: bool, gpus: list[int], nodes: dict[int, list[int]]) -> None:
        """The CPU and every GPU asked for burn at the same time, for the plan's seconds;
        one CPU per GPU is kept from the CPU burn for the GPUs' launcher threads."""
        plan = self.plan
        step = self._step("burn")
        allowed = sorted(os.sched_getaffinity(0))
        cpu_cpus, launcher_cpus = burn.split_cpus(allowed, len(gpus))
        cpu_reports: list[burn.BurnReport] = []
        cpu_done = threading.Event()

        def burn_cpu() -> None:
            try:
                cpu_reports.append(
                    burn.burn_cpu(
                        plan.gemm_n,
                        plan.burn_seconds,
                        cpu_cpus,
                        cancel=self.cancel,
                        progress=step,
                    )
                )
            finally:
                cpu_done.set()

        cpu = threading.Thread(target=burn_cpu, name="burn-cpu", daemon=True)
        if on_cpu:
            cpu.start()
        gpu_reports: list[burn.BurnReport] = []
        try:
            if gpus:
                from gpudiag.nvml import Nvml, open_nvml

                nvml = self.nvml if isinstance(self.nvml, Nvml) else open_nvml(None)
                try:
                    gpu_reports = burn.burn_gpus(
                        gpus,
                        plan.gemm_n,
                        plan.burn_seconds,
                        nvml,
                        self.cancel,
                        precision=plan.burn_precision,
                        launcher_cpus=launcher_cpus if on_cpu else (),
                        nvml_index=cuda_to_nvml(gpus, nvml),
                    )
                finally:
                    if nvml is not self.nvml:
                        nvml.close()
            if on_cpu:
                cpu_done.wait()
        except KeyboardInterrupt:
            # Ctrl-C: stop the CPU burn after its current product and keep what it did.
            # Leaving it running would hang the exit: OpenBLAS's shutdown waits for the
            # BLAS workers of the product the frozen thread started.
            self.cancel.set()
            if on_cpu:
                _wait_through_interrupts(cpu_done)
            self.burns += cpu_reports + gpu_reports
            raise
        self.burns += cpu_reports + gpu_reports
        for report in self.burns:
            self.results += burn.burn_results(report, plan.gemm_n)
        self.progress("burn", 1.0)
