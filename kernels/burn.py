"""The burn test, after gpu-burn: for a given time, the same large GEMM again and again on
every device at once; every result is compared with the device's first, and NaNs and
mismatches are counted per device. A GPU that computes a different answer under heat and
power is broken however fast it is. NVML is sampled meanwhile (temperature, power, SM
clock, throttle reasons) so the report shows what the GPU did under load.

The runner takes the array module: the tests run it for real with NumPy on the CPU. The
CuPy path (one thread per GPU, each with its device current) has never run on a GPU in
this project's CI.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from gpudiag.kernels.stats import summarize
from gpudiag.model import KernelResult, ProbeStatus, Reading
from gpudiag.nvml import Nvml

SAMPLE_PERIOD_S = 1.0
SAMPLED = (
    ("temperature.gpu", "nvmlDeviceGetTemperature", (0,), "C", None),
    ("power.draw", "nvmlDeviceGetPowerUsage", (), "W", lambda mw: int(mw) / 1000.0),
    ("clocks.sm", "nvmlDeviceGetClockInfo", (1,), "MHz", None),
)


@dataclass
class BurnReport:
    """What one device did during the burn."""

    device: str
    iterations: int = 0
    mismatches: int = 0
    nans: int = 0
    seconds: float = 0.0
    gflops: float = 0.0
    error: str = ""
    samples: list[dict[str, Any]] = field(default_factory=list)

    @property
    def faulty(self) -> bool:
        """True when any result differed from the first or held a NaN."""
        return self.mismatches > 0 or self.nans > 0 or bool(self.error)


def burn_device(
    xp: Any,
    n: int,
    seconds: float,
    device: str,
    *,
    matmul: Callable[[Any, Any], Any] | None = None,
    cancel: threading.Event | None = None,
    synchronize: Callable[[], None] = lambda: None,
    progress: Callable[[float], None] | None = None,
) -> BurnReport:
    """Multiply the same two n x n matrices for `seconds`, comparing every product with
    the first bit for bit (a deterministic library gives identical results for identical
    inputs on one device) and counting NaNs."""
    report = BurnReport(device)
    rng = np.random.default_rng(0)
    a = xp.asarray(rng.uniform(-1, 1, (n, n)).astype(np.float32))
    b = xp.asarray(rng.uniform(-1, 1, (n, n)).astype(np.float32))
    multiply = matmul or xp.matmul
    reference = multiply(a, b)
    synchronize()
    if bool(xp.isnan(reference).any()):
        report.error = "the first product already holds NaNs"
        return report
    started = time.perf_counter()
    while time.perf_counter() - started < seconds:
        if cancel is not None and cancel.is_set():
            break
        product = multiply(a, b)
        report.nans += int(xp.isnan(product).sum())
        report.mismatches += int((product != reference).sum())
        report.iterations += 1
        if progress is not None:
            progress(min(1.0, (time.perf_counter() - started) / seconds))
    synchronize()
    report.seconds = time.perf_counter() - started
    if report.seconds > 0:
        report.gflops = 2.0 * n**3 * report.iterations / report.seconds / 1e9
    return report


def sample_nvml(
    nvml: Nvml,
    gpus: Sequence[int],
    stop: threading.Event,
    period: float,
    reports: dict[int, BurnReport],
) -> None:
    """Every `period` seconds until `stop`: temperature, power, SM clock and throttle
    reasons of each GPU into its report (a reading that fails is left out of the sample)."""
    from gpudiag.probes.gpu import decode_throttle_reasons

    while not stop.wait(period):
        for gpu in gpus:
            sample: dict[str, Any] = {"t": time.monotonic()}
            for key, function, args, unit, convert in SAMPLED:
                reading: Reading = nvml.reading(
                    key, function, gpu, *args, unit=unit, convert=convert
                )
                if reading.ok:
                    sample[key] = reading.value
            reasons = nvml.reading(
                "throttle_reasons",
                "nvmlDeviceGetCurrentClocksEventReasons",
                gpu,
                convert=lambda mask: decode_throttle_reasons(int(mask)),
            )
            if reasons.ok:
                sample["throttle_reasons"] = reasons.value
            reports[gpu].samples.append(sample)


def burn_gpus(
    gpus: Sequence[int],
    n: int,
    seconds: float,
    nvml: Nvml | None = None,
    cancel: threading.Event | None = None,
    period: float = SAMPLE_PERIOD_S,
) -> list[BurnReport]:
    """Burn every GPU at once through CuPy, sampling NVML. Never run on a GPU in CI."""
    import cupy

    reports = {gpu: BurnReport(f"gpu{gpu}") for gpu in gpus}

    def burn(gpu: int) -> None:
        with cupy.cuda.Device(gpu):
            result = burn_device(
                cupy,
                n,
                seconds,
                f"gpu{gpu}",
                cancel=cancel,
                synchronize=cupy.cuda.Device(gpu).synchronize,
            )
            result.samples = reports[gpu].samples
            reports[gpu] = result

    stop = threading.Event()
    sampler = None
    if nvml is not None:
        sampler = threading.Thread(
            target=sample_nvml, args=(nvml, gpus, stop, period, reports), daemon=True
        )
        sampler.start()
    workers = [threading.Thread(target=burn, args=(gpu,), daemon=True) for gpu in gpus]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    stop.set()
    if sampler is not None:
        sampler.join(timeout=period * 2)
    return [reports[gpu] for gpu in gpus]


def burn_results(report: BurnReport, n: int) -> list[KernelResult]:
    """The report as kernel results for the snapshot: throughput, mismatch and NaN counts
    (an error result when the burn could not run), and each NVML series sampled."""
    seen = sorted(
        {str(r) for s in report.samples for r in s.get("throttle_reasons", ())} - {"GpuIdle"}
    )
    params = (("n", n), ("seconds", round(report.seconds, 3)), ("iterations", report.iterations))
    if any("throttle_reasons" in s for s in report.samples):
        params += (("throttle_reasons_seen", ", ".join(seen) or "none"),)
    if report.error:
        return [
            KernelResult(
                "burn",
                report.device,
                "gflops",
                "GFLOP/s",
                ProbeStatus.ERROR,
                error=report.error,
                params=params,
            )
        ]
    totals = (
        ("gflops", "GFLOP/s", round(report.gflops, 3)),
        ("mismatches", "count", float(report.mismatches)),
        ("nans", "count", float(report.nans)),
    )
    results = [
        KernelResult("burn", report.device, metric, unit, ProbeStatus.OK, (value,), params=params)
        for metric, unit, value in totals
    ]
    for key, _function, _args, unit, _convert in SAMPLED:
        series = [float(s[key]) for s in report.samples if key in s]
        if len(series) >= 2:
            results.append(
                KernelResult(
                    "burn",
                    report.device,
                    key,
                    unit,
                    ProbeStatus.OK,
                    tuple(series),
                    summarize(series),
                    (("period_s", SAMPLE_PERIOD_S),),
                )
            )
    return results
