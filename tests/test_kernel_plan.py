"""Kernel plans end to end: the runner on this machine's CPU, kernel results as readings,
rules judging them, and `gpudiag --export --kernels` writing them into the snapshot."""

from __future__ import annotations

import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest

from gpudiag import views
from gpudiag.catalog import device_prefix
from gpudiag.hostfs import HostFS
from gpudiag.kernels import burn
from gpudiag.kernels.plans import PLANS, KernelPlan
from gpudiag.kernels.readings import kernel_readings
from gpudiag.kernels.runner import KernelUnavailable, PlanRun, usable_cpus
from gpudiag.kernels.stats import summarize
from gpudiag.model import KernelResult, ProbeStatus, Reading, ReadingStatus
from gpudiag.nvml import Nvml, ReplayBackend
from gpudiag.probes import default_probes
from gpudiag.profiles import load_profiles
from gpudiag.rulefile import load_rules
from gpudiag.session import LiveNode, judged_readings, with_findings
from gpudiag.snapshot import load

from conftest import FIXTURES, REPO, run_cli

SMALL = KernelPlan(("stream", "gemm", "copy", "peer"), "all", 1 << 20, trials=2, gemm_n=128)


@pytest.fixture
def no_gpu(monkeypatch):
    """A node without GPUs, also on a developer's GPU node: the device boundary answers
    as CUDA does when it sees no device (cudaErrorNoDevice, what CUDA_VISIBLE_DEVICES=-1
    gives), so the GPU part of a plan is skipped with the reason. NVML is not asked: a
    plan opens it only for GPUs that CUDA sees. Whatever this machine's PCI bus lists,
    it is taken to list an NVIDIA GPU (CUDA's answer is the reason given; a bus without
    one is test_run_report's)."""
    from gpudiag.kernels import device, runner

    from fakecuda import FakeCuda

    monkeypatch.setattr(runner, "no_nvidia_gpu_on_bus", lambda host: False)
    previous = device.use(FakeCuda(0))
    yield
    device.use(previous)


def _ok(kernel: str, device: str, metric: str, unit: str, values, params=()) -> KernelResult:
    values = tuple(float(v) for v in values)
    return KernelResult(
        kernel, device, metric, unit, ProbeStatus.OK, values, summarize(values), params
    )


def test_small_plan_runs_on_this_cpu_and_says_why_gpus_are_skipped(no_gpu) -> None:
    progress: list[tuple[str, float]] = []
    results = PlanRun(SMALL, progress=lambda label, f: progress.append((label, f))).run()
    by = {(r.kernel, r.device, r.metric): r for r in results}
    skipped_gpu = [r for r in results if r.device == "gpu"]
    assert [r.kernel for r in skipped_gpu] == ["stream", "gemm", "copy", "peer"]
    assert all(r.status is ProbeStatus.SKIPPED and "CuPy" in r.error for r in skipped_gpu)
    numa = next(d for (k, d, m) in by if k == "stream" and d != "gpu")
    assert numa.startswith("cpu-numa") or numa == "cpu"
    assert by[("stream", numa, "triad")].status is ProbeStatus.OK
    assert by[("gemm", "cpu", "fp64")].status is ProbeStatus.OK
    assert by[("copy", "cpu", "all")].status is ProbeStatus.SKIPPED  # host copies need a GPU
    assert by[("peer", numa, f"to.{numa}")].status is ProbeStatus.OK
    assert progress[-1][1] == pytest.approx(1.0)
    assert {label.split()[0] for label, _ in progress} == {"stream", "gemm", "peer"}


def test_strict_run_refuses_gpus_it_cannot_use(no_gpu) -> None:
    with pytest.raises(KernelUnavailable, match="no usable GPU \\(CuPy: cudaErrorNoDevice"):
        PlanRun(replace(SMALL, device="gpu")).run(strict=True)
    with pytest.raises(KernelUnavailable, match="cpu, gpu, all or a GPU index"):
        PlanRun(replace(SMALL, device="tpu")).run()


def test_cancel_before_start_runs_nothing() -> None:
    cancel = threading.Event()
    cancel.set()
    assert PlanRun(replace(SMALL, device="cpu"), cancel=cancel).run() == []


def test_seconds_keep_trials_running_until_the_time_has_passed() -> None:
    plan = KernelPlan(("stream",), "cpu", 1 << 16, trials=2, seconds=0.4)
    PlanRun(replace(plan, seconds=None)).run()  # compiled first (numba): its two trials
    # are then milliseconds, and the 0.4 s must be filled by more rounds, loaded or not
    started = time.monotonic()
    results = PlanRun(plan).run()
    assert time.monotonic() - started >= 0.4
    assert len(results[0].samples) > 2  # many more rounds than the two trials asked for


def test_burn_in_a_plan_reports_the_cpu() -> None:
    run = PlanRun(KernelPlan(("burn",), "cpu", gemm_n=64, burn_seconds=0.3))
    results = run.run()
    assert [r.metric for r in results] == ["gflops", "mismatches", "nans"]
    assert results[1].samples == (0.0,) and len(run.burns) == 1
    assert run.burns[0].seconds >= 0.3 and run.burns[0].iterations > 0


def test_usable_cpus_drop_what_the_cpuset_hides() -> None:
    assert usable_cpus({0: [10_000], 1: []}) == {-1: []}


def test_plans_are_defined() -> None:
    assert set(PLANS) == {"quick", "full"}
    assert "burn" in PLANS["full"].kernels and "burn" not in PLANS["quick"].kernels
    # the full plan's minute is the burn's: STREAM and GEMM run their trials only
    assert PLANS["full"].seconds is None and PLANS["full"].burn_seconds == 60.0
    assert PLANS["full"].dtypes == ("fp64", "fp32")


def test_both_stream_precisions_become_their_own_readings() -> None:
    plan = KernelPlan(("stream",), "cpu", 1 << 16, dtypes=("fp64", "fp32"), trials=2)
    results = PlanRun(plan).run()
    assert [dict(r.params)["dtype"] for r in results if r.metric == "triad"] == [
        "fp64",
        "fp32",
    ] * (len(results) // 10)
    keys = {r.key for r in kernel_readings(results, {})}
    assert any(k.endswith("kernel.stream.triad.fp32") for k in keys)
    assert any(k.endswith("kernel.stream.triad.fp64") for k in keys)


# ------------------------------------------------------------------ results as readings


def test_results_become_keyed_readings_with_shares_and_checks() -> None:
    results = [
        _ok("stream", "gpu0", "triad", "GB/s", [3000, 3010], (("dtype", "fp64"),)),
        _ok("stream", "gpu1", "triad", "GB/s", [2000, 2010], (("dtype", "fp64"),)),
        _ok("stream", "gpu2", "triad", "GB/s", [3020, 3030], (("dtype", "fp64"),)),
        KernelResult(
            "gemm",
            "gpu1",
            "fp16",
            "TFLOP/s",
            ProbeStatus.ERROR,
            error="verification failed: relative error 1 exceeds 0.02",
        ),
        KernelResult(
            "gemm",
            "gpu0",
            "bf16",
            "TFLOP/s",
            ProbeStatus.SKIPPED,
            error="CuPy and NumPy have no bfloat16 dtype",
        ),
        _ok("stream", "cpu-numa1", "triad", "GB/s", [100, 101], (("dtype", "fp32"),)),
    ]
    derived = {r.key: r for r in kernel_readings(results, {})}
    assert derived["gpu.0.kernel.stream.triad.fp64"].value == pytest.approx(3005)
    assert derived["gpu.0.kernel.stream.triad.fp64"].unit == "GB/s"
    assert derived["gpu.1.kernel.stream.triad.fp64.share_of_median"].value == pytest.approx(
        2005 / 3005, abs=1e-4
    )
    assert derived["gpu.1.kernel.verified"].value is False
    assert derived["gpu.0.kernel.verified"].value is True
    assert derived["gpu.1.kernel.gemm.fp16"].status is ReadingStatus.ERROR
    assert derived["gpu.0.kernel.gemm.bf16"].status is ReadingStatus.UNSUPPORTED
    assert derived["numa.1.kernel.stream.triad.fp32"].value == pytest.approx(100.5)
    assert "numa.1.kernel.stream.triad.fp32.share_of_median" not in derived  # only one node


def test_peer_copies_are_compared_within_their_link_type() -> None:
    links = {
        "topo.gpu.0.1": Reading("topo.gpu.0.1", "NV18"),
        "topo.gpu.1.0": Reading("topo.gpu.1.0", "NV18"),
        "topo.gpu.0.2": Reading("topo.gpu.0.2", "NV18"),
        "topo.gpu.2.0": Reading("topo.gpu.2.0", "SYS"),
    }
    access = (("peer_access", "enabled"),)
    results = [
        _ok("peer", "gpu0", "to.gpu1", "GB/s", [370, 372], access),
        _ok("peer", "gpu1", "to.gpu0", "GB/s", [371, 373], access),
        _ok("peer", "gpu0", "to.gpu2", "GB/s", [200, 202], access),
        _ok("peer", "gpu2", "to.gpu0", "GB/s", [50, 51], (("peer_access", "unsupported"),)),
    ]
    derived = {r.key: r for r in kernel_readings(results, links)}
    assert derived["topo.gpu.0.1.copy_gbs"].value == pytest.approx(371)
    assert derived["topo.gpu.0.2.copy_share_of_median"].value == pytest.approx(201 / 371, 1e-3)
    assert "topo.gpu.2.0.copy_share_of_median" not in derived  # the only SYS pair
    assert derived["topo.gpu.2.0.peer_access"].value == "unsupported"


def test_kernel_rules_fire_on_a_snapshot_with_results() -> None:
    node = LiveNode(
        host=HostFS(FIXTURES / "host-basic"),
        nvml=Nvml(ReplayBackend.from_file(REPO / "snapshots" / "demo-hgx-h100-healthy.toml")),
        probes=default_probes(),
        rules=load_rules(),
    )
    snapshot = node.snapshot()
    results = [
        _ok("stream", f"gpu{g}", "triad", "GB/s", [v, v + 1], (("dtype", "fp64"),))
        for g, v in enumerate([3000, 3005, 2000, 3010, 3000, 3002, 3001, 3003])
    ]
    judged = with_findings(replace(snapshot, kernels=tuple(results)), load_rules())
    fired = {(f.rule_id, f.subject) for f in judged.findings if f.rule_id.startswith("KRN")}
    assert fired == {("KRN005", "GPU 2"), ("KRN009", "GPU 2")}
    readings = judged_readings(judged)[0]  # against the H100 SXM5's 3350 GB/s
    share = readings["gpu.2.kernel.stream.triad.fp64.share_of_peak"]
    assert share.value == pytest.approx(2000.5 / 3350, abs=1e-4)
    row = next(r for r in views.kernel_table(judged.kernels, readings).rows if r[1] == "gpu2")
    assert row[views.kernel_table([]).headers.index("of peak")] == "60%"
    quiet = with_findings(snapshot, load_rules())
    assert not [f for f in quiet.findings if f.rule_id.startswith("KRN")]


def test_burn_report_becomes_results_with_nvml_series() -> None:
    report = burn.BurnReport("gpu0", iterations=10, mismatches=2, seconds=5.0, gflops=900.0)
    report.samples = [{"t": 0, "temperature.gpu": 60}, {"t": 1, "temperature.gpu": 70}]
    results = {r.metric: r for r in burn.burn_results(report, 1024)}
    assert results["mismatches"].samples == (2.0,) and results["gflops"].samples == (900.0,)
    assert results["temperature.gpu"].stats.maximum == 70
    derived = {r.key: r for r in kernel_readings(list(results.values()), {})}
    assert derived["gpu.0.kernel.burn.mismatches"].value == 2
    assert "throttle_reasons_seen" not in dict(results["gflops"].params)  # none sampled
    report.samples[1]["throttle_reasons"] = ["GpuIdle", "HwSlowdown"]
    gflops = burn.burn_results(report, 1024)[0]
    assert dict(gflops.params)["throttle_reasons_seen"] == "HwSlowdown"
    failed = burn.burn_results(burn.BurnReport("gpu1", error="out of memory"), 1024)
    assert [r.status for r in failed] == [ProbeStatus.ERROR] * 3  # gflops, mismatches, NaNs


# ------------------------------------------------------------------ the command line


def test_export_with_kernels_writes_results_into_the_snapshot(tmp_path: Path) -> None:
    target = tmp_path / "node.toml"
    result = run_cli("--export", str(target), "--kernels", "quick", timeout=120)
    assert result.returncode in (0, 1, 2), result.stderr
    snapshot = load(target)
    kernels = {(k.kernel, k.device, k.metric): k for k in snapshot.kernels}
    triad = [
        k for (kernel, _, metric), k in kernels.items() if (kernel, metric) == ("stream", "triad")
    ]
    assert triad and all(k.status is ProbeStatus.OK and len(k.samples) == 5 for k in triad)
    assert kernels[("gemm", "cpu", "fp64")].stats is not None
    assert "kernel results" in result.stdout.splitlines()[0]
    # what the user sees meanwhile, as `gpudiag run` shows it (it was one line for 45 s
    # and "17 kernel results" without one of them): progress per kernel, then the table
    err = result.stderr.splitlines()
    assert any(line.startswith("gpudiag: stream fp64 cpu") for line in err), err
    assert any(line.startswith("gpudiag: gemm cpu fp64") for line in err), err
    header = next(i for i, line in enumerate(err) if line.startswith("kernel "))
    assert err[header].split()[:4] == ["kernel", "device", "median", "min"]
    rows = [line.split()[0] for line in err[header + 1 :] if not line.startswith(" ")]
    assert "stream.triad.fp64" in rows and "gemm.fp64" in rows, err
    # the figures as readings, stored once in the derived result when the export was judged
    (derived,) = [p for p in snapshot.probes if p.name == "derived"]
    held = {r.key: r for r in derived.readings}
    for k in triad:
        key = f"{device_prefix(k.device)}kernel.stream.triad.{dict(k.params)['dtype']}"
        assert held[key].value == round(k.stats.median, 6)
    assert held["host.kernel.gemm.fp64"].ok


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--kernels", "quick"), "--kernels goes with --export"),
        (("--root", str(REPO), "--export", "-", "--kernels", "quick"), "measures this machine"),
        (("--export", "-", "--kernels", "slow"), "invalid choice"),
    ],
)
def test_kernels_option_misuse_is_one_line(args, message) -> None:
    result = run_cli(*args)
    assert result.returncode == 3 and message in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


# triads on an H100 SXM5 around its band floor (2613 GB/s), in no drifting order
STRADDLING = [2500, 2660, 2400, 2620, 2590, 2700, 2605, 2800, 2580]  # median 2605
BELOW = [2450, 2410, 2480, 2400, 2470, 2430, 2460, 2420, 2440]
ABOVE = [2800, 2830, 2770, 2850, 2790, 2820, 2760, 2840, 2810]


def test_triad_rule_judges_the_interval_not_the_median() -> None:
    # H100 SXM5: its band floor 0.78 x 3350 GB/s = 2613. Medians of both GPUs are below
    # it; only GPU 1's whole interval is, so only GPU 1 is called slow; GPU 0's is
    # inconclusive (quiet).
    node = LiveNode(
        host=HostFS(FIXTURES / "host-basic"),
        nvml=Nvml(ReplayBackend.from_file(REPO / "snapshots" / "demo-hgx-h100-healthy.toml")),
        probes=default_probes(),
        rules=load_rules(),
    )
    snapshot = node.snapshot()
    straddling = STRADDLING  # median 2605
    below = BELOW
    results = [
        _ok("stream", "gpu0", "triad", "GB/s", straddling, (("dtype", "fp64"),)),
        _ok("stream", "gpu1", "triad", "GB/s", below, (("dtype", "fp64"),)),
    ]
    judged = with_findings(replace(snapshot, kernels=tuple(results)), load_rules())
    readings = judged_readings(judged)[0]
    assert readings["gpu.0.kernel.stream.triad.fp64"].value == 2605
    assert readings["gpu.0.kernel.stream.triad.fp64.ci_high"].value > 2613
    fired = {f.subject for f in judged.findings if f.rule_id == "KRN005"}
    assert fired == {"GPU 1"}


def test_verdict_says_when_the_interval_straddles_the_threshold() -> None:
    # H100 SXM5: its band floors, 0.78 x 3350 GB/s = 2613 and half of its FP64 GEMM peak
    # (the tensor cores' 67 TFLOP/s) = 33.5
    straddling = STRADDLING
    below = BELOW
    above = ABOVE
    results = [
        _ok("stream", "gpu0", "triad", "GB/s", straddling, (("dtype", "fp64"),)),
        _ok("stream", "gpu1", "triad", "GB/s", below, (("dtype", "fp64"),)),
        _ok("stream", "gpu2", "triad", "GB/s", above, (("dtype", "fp64"),)),
        _ok("gemm", "gpu0", "fp64", "TFLOP/s", [31, 32, 33, 33.5, 34, 35, 36]),
    ]
    peaks = load_profiles()["h100-sxm5"].values
    derived = {r.key: r for r in kernel_readings(results, {}, peaks)}
    verdict = {g: derived[f"gpu.{g}.kernel.stream.triad.fp64.verdict"].value for g in range(3)}
    assert verdict == {0: "inconclusive", 1: "below", 2: "above"}
    low = derived["gpu.0.kernel.stream.triad.fp64.ci_low"].value
    high = derived["gpu.0.kernel.stream.triad.fp64.ci_high"].value
    assert f"{low:.6g}-{high:.6g} GB/s" in derived["gpu.0.kernel.stream.triad.fp64.verdict"].reason
    assert "2613 GB/s (profile stream_triad_floor_gbs)" in (
        derived["gpu.0.kernel.stream.triad.fp64.verdict"].reason
    )
    assert derived["gpu.0.kernel.gemm.fp64.verdict"].value == "inconclusive"
    assert "33.5 TFLOP/s (profile gemm_fp64_floor_tflops)" in (
        derived["gpu.0.kernel.gemm.fp64.verdict"].reason
    )
    # no profile field: no threshold, no verdict (never a guessed one)
    assert not any(k.endswith(".verdict") for k in (r.key for r in kernel_readings(results, {})))


def test_verdict_thresholds_are_the_krn_rules_own() -> None:
    from gpudiag.kernels.readings import THRESHOLDS

    rules = {r.id: r for r in load_rules()}
    for rule_id, metric in (
        ("KRN005", "stream.triad.fp64"),
        ("KRN006", "stream.triad.fp32"),
        ("KRN007", "gemm.fp64"),
        ("KRN008", "gemm.fp16"),
    ):
        rule = rules[rule_id]
        assert rule.reading == f"gpu.{{gpu}}.kernel.{metric}.ci_high"
        assert rule.operator == "min_profile"
        assert THRESHOLDS[metric] == (rule.factor, rule.operand)


def test_an_inconclusive_triad_is_reported_with_its_numbers() -> None:
    node = LiveNode(
        host=HostFS(FIXTURES / "host-basic"),
        nvml=Nvml(ReplayBackend.from_file(REPO / "snapshots" / "demo-hgx-h100-healthy.toml")),
        probes=default_probes(),
        rules=load_rules(),
    )
    straddling = STRADDLING
    below = BELOW
    results = [
        _ok("stream", "gpu0", "triad", "GB/s", straddling, (("dtype", "fp64"),)),
        _ok("stream", "gpu1", "triad", "GB/s", below, (("dtype", "fp64"),)),
    ]
    judged = with_findings(replace(node.snapshot(), kernels=tuple(results)), load_rules())
    (finding,) = [f for f in judged.findings if f.rule_id == "KRN018"]
    assert finding.subject == "GPU 0" and "straddles it" in finding.message
    assert "the threshold 2613 GB/s" in finding.message and "--until-confident" in finding.message
    assert {f.subject for f in judged.findings if f.rule_id == "KRN005"} == {"GPU 1"}
