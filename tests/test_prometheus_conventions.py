"""The Prometheus exposition keeps the conventions long-term storage relies on: no series
for checks that did not apply, counters typed as counters with `_total`, one metric per
kernel quantity in base units, and a series budget per node."""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import replace

import pytest
from test_formats import promtool_check

from gpudiag import shipped
from gpudiag.catalog import Kind
from gpudiag.model import KernelResult, ProbeStatus, Snapshot, Statistics
from gpudiag.output import is_not_applicable
from gpudiag.output.prometheus import GPU_GAUGES, KERNEL_QUANTITIES, prometheus

# The series of a healthy 8-GPU node (the shipped demo, no kernels run): 15 for the node
# (info, timestamp, status, 6 actions, 4 severities, its one finding, the not-applicable
# count) and 26 per GPU (GPU_GAUGES' readings). 223 in all; 319 when each check that did
# not apply was a series of its own.
NODE_SERIES = 15
GPU_SERIES = 26


@pytest.fixture(scope="module")
def healthy() -> Snapshot:
    from gpudiag.demo import demo_node

    return demo_node("healthy").snapshot()


def _series(text: str) -> list[str]:
    return [line for line in text.splitlines() if line and not line.startswith("#")]


def _types(text: str) -> dict[str, str]:
    return dict(re.findall(r"^# TYPE (\S+) (\S+)$", text, re.M))


def test_a_healthy_8_gpu_node_stays_within_its_series_budget(healthy: Snapshot) -> None:
    text = prometheus(healthy)
    checked = promtool_check(text)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert checked.stdout + checked.stderr == ""  # promtool's lint too: no warning
    gpus = {g for g in re.findall(r'\{gpu="(\d+)"', text)}
    assert len(gpus) == 8
    series = _series(text)
    assert len(series) <= NODE_SERIES + GPU_SERIES * len(gpus), Counter(
        s.split("{")[0].split(" ")[0] for s in series
    )
    not_applicable = sum(map(is_not_applicable, healthy.findings))
    assert not_applicable > 50  # the demo has many checks that do not apply
    assert f"gpudiag_rules_not_applicable {not_applicable}\n" in text
    assert "not_applicable" not in "\n".join(s for s in series if "rules_not" not in s)


def test_counters_are_counters_named_total_by_the_catalogs_kind(healthy: Snapshot) -> None:
    types = _types(prometheus(healthy))
    for gauge in GPU_GAUGES:
        counter = shipped.kind_of(f"gpu.0.{gauge.reading}") is Kind.COUNTER
        assert types.get(gauge.name) in ((None,) if counter else (None, "gauge"))
        assert types.get(f"{gauge.name}_total") in (("counter", None) if counter else (None,))
    assert {
        "gpudiag_gpu_ecc_errors_total",
        "gpudiag_gpu_pcie_replays_total",
        "gpudiag_gpu_remapped_rows_total",
    } <= {n for n, t in types.items() if t == "counter"}
    assert all(n.endswith("_total") == (t == "counter") for n, t in types.items())


def test_each_kernel_quantity_is_its_own_metric_in_base_units(healthy: Snapshot) -> None:
    def result(metric: str, unit: str, median: float) -> KernelResult:
        stats = Statistics(3, median, median, median, median, 0.01, median, median)
        return KernelResult("k", "gpu0", metric, unit, ProbeStatus.OK, (median,) * 3, stats)

    kernels = (
        result("triad", "GB/s", 3000.0),
        result("fp16", "TFLOP/s", 700.0),
        result("burn", "GFLOP/s", 50.0),
        result("latency.1", "us", 2.5),
        result("mismatches", "count", 0.0),
        result("odd", "furlongs", 1.0),
    )
    text = prometheus(replace(healthy, kernels=kernels))
    checked = promtool_check(text)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    values = {
        (name, metric): float(value)
        for name, metric, value in re.findall(
            r'^(gpudiag_kernel_\w+)\{kernel="k",device="gpu0",metric="([^"]+)"\} (\S+)$',
            text,
            re.M,
        )
    }
    assert values[("gpudiag_kernel_bandwidth_bytes_per_second", "triad")] == 3e12
    assert values[("gpudiag_kernel_flops", "fp16")] == 7e14
    assert values[("gpudiag_kernel_flops", "burn")] == 5e10
    assert values[("gpudiag_kernel_latency_seconds", "latency.1")] == pytest.approx(2.5e-6)
    assert values[("gpudiag_kernel_events", "mismatches")] == 0.0
    assert ("gpudiag_kernel_ok", "odd") in values  # an unknown unit: no quantity series
    assert not [
        n
        for n, m in values
        if m == "odd" and n not in ("gpudiag_kernel_ok", "gpudiag_kernel_cv_ratio")
    ]
    assert 'unit="' not in text and "gpudiag_kernel_median" not in text
    assert {q.name for q in KERNEL_QUANTITIES.values()} <= set(_types(text))
