"""Derived readings (gpudiag/derive.py) are computed once, when a snapshot is judged, and
stored in it as one result; `run_kernels` / `with_kernel_results` put kernel results into
a snapshot and judge it again (what the CLI, the health check and the TUI call)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from gpudiag.derive import DERIVED, derive, ensure_derived, source_readings
from gpudiag.diff import diff_snapshots
from gpudiag.hostfs import HostFS
from gpudiag.kernels.plans import KernelPlan
from gpudiag.kernels.readings import kernel_readings
from gpudiag.kernels.runner import PlanRun
from gpudiag.kernels.stats import summarize
from gpudiag.model import KernelResult, ProbeResult, ProbeStatus, Reading, ReadingStatus, Snapshot
from gpudiag.nvml import Nvml, ReplayBackend
from gpudiag.probes import default_probes
from gpudiag.probes.topology import derive as topology_derive
from gpudiag.rule_operators import RuleError
from gpudiag.rulefile import load_rules
from gpudiag.session import (
    LiveNode,
    judged_readings,
    run_kernels,
    with_findings,
    with_kernel_results,
)
from gpudiag.shipped import is_kernel_reading
from gpudiag.snapshot import load, save

from conftest import FIXTURES, REPO
from hosttree import build_hgx_tree

RULES = load_rules()
TRIAD = (("dtype", "fp64"),)


def _ok(device: str, values: list[float], kernel: str = "stream", metric: str = "triad"):
    samples = tuple(float(v) for v in values)
    unit = "GB/s" if kernel == "stream" else "TFLOP/s"
    params = TRIAD if kernel == "stream" else ()
    return KernelResult(
        kernel, device, metric, unit, ProbeStatus.OK, samples, summarize(samples), params
    )


def _triads(values: list[float]) -> list[KernelResult]:
    """Made-up STREAM triad results of 8 GPUs (no GPU figure is claimed: test input)."""
    return [_ok(f"gpu{g}", [v, v + 1, v + 2]) for g, v in enumerate(values)]


@pytest.fixture(scope="module")
def judged(tmp_path_factory: pytest.TempPathFactory) -> Snapshot:
    """The healthy demo HGX H100 on the made-up host tree (an InfiniBand adapter beside
    GPU 0), probed and judged."""
    root = build_hgx_tree(tmp_path_factory.mktemp("hgx"))
    node = LiveNode(
        host=HostFS(root, is_root_user=True),
        nvml=Nvml(ReplayBackend.from_file(REPO / "snapshots" / "demo-hgx-h100-healthy.toml")),
        probes=default_probes(),
        rules=RULES,
    )
    return node.snapshot()


def _copies(snapshot: Snapshot, key: str) -> int:
    return sum(1 for p in snapshot.probes for r in p.readings if r.key == key)


def test_the_derived_readings_are_stored_once_in_one_result(judged: Snapshot) -> None:
    assert [p.name for p in judged.probes].count(DERIVED) == 1
    assert judged.probes[-1].name == DERIVED and "topology" not in [p.name for p in judged.probes]
    r = judged.readings_by_key
    assert r["node.profile"].value == "h100-sxm5"
    assert r["node.profile.device_ids"].value == ["0x2330"]
    assert r["topo.gpu.0.nic.0000:19:00.0"].value == "PIX"  # derived from the PCIe readings
    again = with_findings(with_findings(judged, RULES), RULES)
    assert again.probes == judged.probes and again.findings == judged.findings
    for key in ("node.profile", "topo.gpu.0.nic.0000:19:00.0", "kernel.gpudirect_rdma"):
        assert _copies(again, key) == 1, key


def test_judged_readings_is_a_plain_read_of_what_is_stored(judged: Snapshot) -> None:
    readings, profile, device_ids = judged_readings(judged)
    assert readings is judged.readings_by_key
    assert profile is not None and profile.name == "h100-sxm5" and device_ids == ["0x2330"]


def test_the_profile_named_is_the_one_stored_and_judged_against(judged: Snapshot) -> None:
    measured = with_kernel_results(judged, _triads([3000] * 8), RULES, "h200-sxm")
    r = measured.readings_by_key
    assert (r["node.profile"].value, r["node.profile"].source) == ("h200-sxm", "--profile")
    # the share of peak is of the H200's 4800 GB/s, not the H100's 3350
    assert r["gpu.0.kernel.stream.triad.fp64.share_of_peak"].value == pytest.approx(
        3001 / 4800, abs=1e-4
    )
    assert judged_readings(measured)[1].name == "h200-sxm"
    assert {f.subject for f in measured.findings if f.rule_id == "KRN005"} == {
        f"GPU {g}" for g in range(8)
    }  # 3000 GB/s is under the H200's band floor (3720 GB/s), not the H100's (2613)
    auto = with_findings(measured, RULES)  # judged again without the name: the H100's
    assert auto.readings_by_key["node.profile"].value == "h100-sxm5"
    assert _copies(auto, "gpu.0.kernel.stream.triad.fp64.share_of_peak") == 1
    assert not [f for f in auto.findings if f.rule_id == "KRN005"]
    with pytest.raises(RuleError, match="--profile h999: no such profile"):
        with_findings(judged, RULES, "h999")


def test_no_matching_profile_is_a_reading_that_says_why() -> None:
    v1_import = load(FIXTURES / "schema-v1" / "a10g-import.json")  # its XML says 0x0000
    readings = derive(source_readings(v1_import.probes)).result.readings
    by_key = {r.key: r for r in readings}
    assert by_key["node.profile.device_ids"].value == ["0x0000"]
    profile = by_key["node.profile"]
    assert profile.status is ReadingStatus.MISSING
    assert profile.reason == "no profile matches PCI device id(s) 0x0000"


def test_a_version_1_snapshot_judged_gets_the_derived_readings() -> None:
    old = load(FIXTURES / "schema-v1" / "demo-faulty-export.toml")
    assert DERIVED not in [p.name for p in old.probes] and "node.profile" not in old.readings_by_key
    judged = with_findings(old, RULES)
    assert [p.name for p in judged.probes].count(DERIVED) == 1
    assert judged.readings_by_key["node.profile"].value == "h100-sxm5"
    assert len(judged.probes) == len(old.probes) + 1


def test_an_older_topology_result_is_replaced_not_kept_beside(judged: Snapshot) -> None:
    probes = [p for p in judged.probes if p.name != DERIVED]
    topology = topology_derive({r.key: r for p in probes for r in p.readings})
    assert topology.name == "topology" and topology.readings
    older = replace(judged, probes=(*probes, topology))  # as a saved v2 snapshot held it
    again = with_findings(older, RULES)
    assert [p.name for p in again.probes] == [p.name for p in judged.probes]
    assert _copies(again, "topo.gpu.0.nic.0000:19:00.0") == 1


def test_the_derived_result_round_trips_a_saved_file(judged: Snapshot, tmp_path: Path) -> None:
    measured = with_kernel_results(judged, _triads([3000] * 8), RULES)
    for name in ("node.toml", "node.json"):
        save(measured, tmp_path / name)
        back = load(tmp_path / name)
        assert back.readings_by_key == measured.readings_by_key
        assert with_findings(back, RULES).findings == measured.findings


def test_kernel_results_go_in_and_the_snapshot_is_judged_again(judged: Snapshot) -> None:
    assert not [f for f in judged.findings if f.rule_id.startswith("KRN")]
    slow = with_kernel_results(
        judged, _triads([3000, 3005, 2000, 3010, 3000, 3002, 3001, 3003]), RULES
    )
    assert len(slow.kernels) == 8
    assert slow.readings_by_key["gpu.2.kernel.stream.triad.fp64"].value == 2001
    assert slow.readings_by_key["gpu.2.kernel.stream.triad.fp64.verdict"].value == "below"
    fired = {(f.rule_id, f.subject) for f in slow.findings if f.rule_id.startswith("KRN")}
    assert fired == {("KRN005", "GPU 2"), ("KRN009", "GPU 2")}
    # GPU 2 measured again: its result replaced, the others kept; a GEMM figure appended
    fixed = with_kernel_results(
        slow, [_ok("gpu2", [3004, 3005, 3006]), _ok("gpu0", [60, 61, 62], "gemm", "fp64")], RULES
    )
    assert len(fixed.kernels) == 9
    assert fixed.readings_by_key["gpu.2.kernel.stream.triad.fp64"].value == 3005
    assert "gpu.0.kernel.gemm.fp64.share_of_peak" in fixed.readings_by_key
    assert not [f for f in fixed.findings if f.rule_id in ("KRN005", "KRN009")]
    assert _copies(fixed, "gpu.2.kernel.stream.triad.fp64") == 1


def test_run_kernels_runs_a_plan_on_this_cpu_into_the_snapshot(judged: Snapshot) -> None:
    plan = KernelPlan(("stream",), "cpu", 1 << 16, ("fp64",), 2, None, 64, 0.2)
    run = PlanRun(plan)
    measured = run_kernels(judged, run, RULES)
    assert measured.kernels == tuple(run.results) and run.results
    triads = [k for k in measured.kernels if k.metric == "triad" and k.status is ProbeStatus.OK]
    assert triads
    for result in triads:
        prefix = (
            "host." if result.device == "cpu" else f"numa.{result.device.removeprefix('cpu-numa')}."
        )
        reading = measured.readings_by_key[f"{prefix}kernel.stream.triad.fp64"]
        assert reading.value == round(result.stats.median, 6)
        derived = next(p for p in measured.probes if p.name == DERIVED)
        assert reading in derived.readings
    assert measured.findings != () and measured.probes[:-1] == judged.probes[:-1]


def test_the_diff_compares_kernel_figures_as_results_not_readings(judged: Snapshot) -> None:
    a = with_kernel_results(judged, _triads([3000] * 8), RULES)
    b = with_kernel_results(judged, _triads([2900] * 8), RULES)
    diff = diff_snapshots(a, b)
    assert [c.key for c in diff.differences(include_noisy=True)] == []
    assert len(diff.metrics) == 8  # compared as kernel results (too few samples to call)


def test_the_kernel_reading_grammar_matches_the_kernel_readings_only(judged: Snapshot) -> None:
    results = [_ok("gpu0", [1, 2]), _ok("cpu-numa1", [1, 2]), _ok("cpu", [1, 2], "gemm", "fp64")]
    results += [
        _ok("gpus", [1, 2], "allreduce", "busbw"),
        _ok("gpu0", [1, 2], "peer", "to.gpu1"),
        replace(_ok("gpu1", [1, 2], "burn", "mismatches"), unit="count"),
        KernelResult(
            "copy", "gpu0", "h2d.local", "GB/s", ProbeStatus.ERROR, error="verification failed"
        ),
    ]
    keys = {r.key for r in kernel_readings(results, judged.readings_by_key, {"fp64_tflops": 34})}
    assert {"gpu.0.kernel.verified", "topo.gpu.0.1.copy_gbs", "node.kernel.allreduce.busbw"} <= keys
    assert [k for k in keys if not is_kernel_reading(k)] == []
    probed = [
        k
        for p in judged.probes
        if p.name != DERIVED
        for r in p.readings
        if is_kernel_reading(k := r.key)
    ]
    assert probed == []
    assert not is_kernel_reading("host.kernel.release") and not is_kernel_reading("kernel.modules")


def test_a_failed_derivation_input_is_no_result() -> None:
    empty = derive({})
    assert empty.result.readings == () and empty.profile is None and empty.device_ids == ()
    bare = Snapshot(
        "n", "2026-01-01T00:00:00Z", "0", probes=(ProbeResult("x", ProbeStatus.OK, 0.0),)
    )
    assert [p.name for p in with_findings(bare, RULES).probes] == ["x"]


def test_a_saved_file_viewed_gets_its_derived_readings_and_keeps_its_findings(
    judged: Snapshot,
) -> None:
    old = load(FIXTURES / "schema-v1" / "demo-faulty-export.toml")
    viewed = ensure_derived(old)  # what `gpudiag view FILE` shows
    assert viewed.findings == old.findings  # as recorded: viewing judges nothing
    assert viewed.readings_by_key["node.profile"].value == "h100-sxm5"
    assert ensure_derived(judged) is judged


def test_gpudirect_is_not_needed_on_a_node_whose_bus_lists_no_device() -> None:
    """The PCIe probe ran and listed no device (a node without GPUs or adapters): no
    InfiniBand, so GPUDirect RDMA is not needed; said, never left for OS002 to call
    missing. Without PCIe readings at all (an nvidia-smi import) nothing is said."""
    ran = {"pcie.devices": Reading("pcie.devices", [], source="sysfs:bus/pci/devices")}
    (said,) = [r for r in topology_derive(ran).readings if r.key == "kernel.gpudirect_rdma"]
    assert said.value == "not needed"
    assert [r for r in topology_derive({}).readings if r.key == "kernel.gpudirect_rdma"] == []
