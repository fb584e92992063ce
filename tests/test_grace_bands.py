"""Grace nodes' kernel figures against published bands (issue 40): a Grace CPU's STREAM
triad against NVIDIA's Grace benchmarking guide (KRN026, profiles grace and grace-480gb)
and host copies over NVLink-C2C against the node's other C2C GPUs and the link's
datasheet peak (KRN027), on the made-up GB200 tray and GH200 of tests/rackscale_nodes.py.
The samples are made up as test input around the published figures; none was measured."""

from __future__ import annotations

import functools
from typing import Any

import pytest

from gpudiag.kernels.stats import summarize
from gpudiag.model import Finding, KernelResult, ProbeStatus, Severity, Snapshot
from gpudiag.nvml import Nvml, ReplayBackend
from gpudiag.probes import default_probes
from gpudiag.rulefile import load_rules
from gpudiag.session import LiveNode, with_kernel_results

import rackscale_nodes as nodes
from conftest import demo_on_host_basic

RULES = load_rules()


def _judged(host: dict[str, Any], replay: dict[str, Any]) -> Snapshot:
    return LiveNode(
        nodes.hostfs(host), Nvml(ReplayBackend(replay)), default_probes(), RULES
    ).snapshot()


def _gh200_replay() -> dict[str, Any]:
    device = nodes.demo.healthy_gpu(0)
    device["nvmlDeviceGetGpuFabricInfoV"]["state"] = 0  # no NVLink fabric
    device["nvmlDeviceGetC2cModeInfoV"] = {"isC2cEnabled": 1}
    return nodes.demo.replay("GH200 (made up)", [device])


@functools.cache
def gh200() -> Snapshot:
    """A GH200 480GB: one Grace (480 GiB on NUMA node 0), one GPU over NVLink-C2C."""
    return _judged(nodes.gh200_host(), _gh200_replay())


@functools.cache
def gb200() -> Snapshot:
    """A GB200 tray: two Graces of 480 GiB, two GPUs on each."""
    return _judged(nodes.gb200_host(), nodes.gb200_replay())


def triad(node: int, samples: list[float], engine: str = "numba") -> KernelResult:
    params = (("n", 120_000_000), ("dtype", "fp64"), ("trials", len(samples)), ("engine", engine))
    return KernelResult(
        "stream", f"cpu-numa{node}", "triad", "GB/s", ProbeStatus.OK, tuple(samples),
        summarize(samples), params,
    )  # fmt: skip


def findings(snapshot: Snapshot, rule_id: str) -> list[Finding]:
    return [f for f in snapshot.findings if f.rule_id == rule_id]


# Grace Hopper 480 GB: 288-342 GB/s (80-95% of 360), the guide's table
HEALTHY_480 = [318.0, 321.5, 320.2, 319.4, 322.0]


def test_a_grace_under_the_published_band_warns_naming_the_band_and_its_source() -> None:
    slow = [251.0, 254.2, 249.8, 252.6, 253.1]  # a memory channel down, say
    judged = with_kernel_results(gh200(), [triad(0, slow)], RULES)
    (finding,) = findings(judged, "KRN026")
    assert finding.severity is Severity.WARNING and finding.subject == "NUMA node 0"
    assert "249.8-254.2 GB/s against the band floor 288 GB/s of profile grace-480gb" in (
        finding.message
    )
    assert "0.8 x its 360 GB/s peak: NVIDIA's Grace CPU Benchmarking Guide" in finding.message


def test_a_healthy_grace_is_quiet_and_one_above_its_peak_is_unknown_not_a_pass() -> None:
    judged = with_kernel_results(gh200(), [triad(0, HEALTHY_480)], RULES)
    assert findings(judged, "KRN026") == []  # a rule that holds gives no finding
    assert judged.readings_by_key["numa.0.kernel.stream.triad.fp64.verdict"].value == "above"
    # 400 GB/s cannot be a 480 GB Grace's memory (peak 360): cache-resident arrays
    judged = with_kernel_results(gh200(), [triad(0, [398.0, 401.0, 400.5])], RULES)
    (finding,) = findings(judged, "KRN026")
    assert finding.severity is Severity.UNKNOWN
    assert "above the theoretical peak 360 GB/s of profile grace-480gb" in finding.message


def test_the_band_is_not_applied_where_no_row_is_published_or_the_figure_is_numpys() -> None:
    """A GB200's Grace (two GPUs on its node: no Grace Blackwell row in the guide) and a
    NumPy triad (two passes) are not judged against the band; KRN015 still compares the
    tray's two Graces."""
    judged = with_kernel_results(
        gb200(), [triad(0, [300.0, 302.0, 301.0]), triad(1, [190.0, 191.0, 189.0])], RULES
    )
    (band,) = {f.severity for f in findings(judged, "KRN026")}
    assert band is Severity.NOT_APPLICABLE
    assert "no STREAM band published for a Grace with 515 GB and 2 GPU(s)" in (
        findings(judged, "KRN026")[0].message
    )
    assert [f.subject for f in findings(judged, "KRN015") if f.severity is Severity.WARNING] == [
        "NUMA node 1"
    ]
    numpy = with_kernel_results(gh200(), [triad(0, [150.0, 151.0, 149.0], "numpy")], RULES)
    (finding,) = findings(numpy, "KRN026")
    assert finding.severity is Severity.NOT_APPLICABLE and "two passes" in finding.message


def test_a_cpu_that_is_not_grace_gets_no_band() -> None:
    """The demo HGX H100's Xeons (and the realdata H100 VM's): no verdict reading, so
    KRN026 does not apply and the node's findings do not change."""
    node = demo_on_host_basic()
    judged = with_kernel_results(node, [triad(0, [5.0, 5.1, 4.9])], RULES)
    assert not any(f.rule_id == "KRN026" and f.severity is not Severity.NOT_APPLICABLE
                   for f in judged.findings)  # fmt: skip
    assert "numa.0.kernel.stream.triad.fp64.verdict" not in judged.readings_by_key


@pytest.mark.parametrize(
    ("memory_gb", "gpus", "profile"),
    [(125, 1, "grace"), (251, 0, "grace"), (515, 1, "grace-480gb"), (515, 2, None), (64, 1, None)],
)
def test_the_cpu_profile_is_chosen_by_memory_and_gpus_per_grace(
    memory_gb: float, gpus: int, profile: str | None
) -> None:
    from gpudiag.profiles import cpu_profile, load_profiles

    found = cpu_profile(load_profiles(), "0xd4f", memory_gb, gpus)
    assert (found.name if found else None) == profile
    assert cpu_profile(load_profiles(), "0xd0c", memory_gb, gpus) is None  # not Grace


def test_a_cpu_profile_cannot_be_named_for_the_gpus() -> None:
    from gpudiag.derive import profile_readings
    from gpudiag.rule_operators import RuleError

    with pytest.raises(RuleError, match="a CPU's profile, not a GPU model's"):
        profile_readings({}, "grace")


def copies(gpu: int, h2d: float, d2h: float) -> list[KernelResult]:
    """A GPU's host copies from its own NUMA node (local), three samples around each."""
    out = []
    for direction, figure in (("h2d", h2d), ("d2h", d2h)):
        samples = [figure - 1.0, figure, figure + 1.0]
        params = (("bytes", 2**30), ("numa_node", 0))
        stats = summarize(samples)
        metric = f"{direction}.local"
        ok = ProbeStatus.OK
        out.append(
            KernelResult("copy", f"gpu{gpu}", metric, "GB/s", ok, tuple(samples), stats, params)
        )
    return out


def test_copies_over_nvlink_c2c_are_not_bounded_by_a_pcie_link() -> None:
    """A GH200's GPU copies over NVLink-C2C (450 GB/s a direction), not PCIe: 380 and 370
    GB/s are possible there, though far above any PCIe Gen5 x16 (63 GB/s). Before, the
    profile's PCIe link bounded them: 'timing inconsistent' (KRN022), and the copy rules
    unknown."""
    judged = with_kernel_results(gh200(), copies(0, 380.0, 370.0), RULES)
    by_key = judged.readings_by_key
    assert by_key["gpu.0.c2c.enabled"].value is True
    assert by_key["gpu.0.kernel.timing_consistent"].value is True
    assert by_key["gpu.0.kernel.copy.h2d.local"].value == 380.0
    assert not [f for f in judged.findings if f.rule_id == "KRN022"]
    # nor does a C2C copy say what PCIe generation an idle GPU's link trains to under load
    replay = _gh200_replay()
    replay["devices"][0]["nvmlDeviceGetPerformanceState"] = 8
    idle = with_kernel_results(_judged(nodes.gh200_host(), replay), copies(0, 380, 370), RULES)
    loaded = idle.readings_by_key["gpu.0.pcie.link_gen_loaded"]
    assert not loaded.ok and "its host copies go over NVLink-C2C" in loaded.reason


def test_a_copy_above_the_c2c_peak_cannot_be_true() -> None:
    """NVLink-C2C carries 900 GB/s both ways (NVIDIA's GH200 and GB200 datasheets): 450 a
    direction; 600 GB/s one way is a timing fault (KRN022), its copy rules unknown."""
    judged = with_kernel_results(gh200(), copies(0, 600.0, 370.0), RULES)
    (finding,) = [f for f in judged.findings if f.rule_id == "KRN022"]
    assert "its NVLink-C2C (450 GB/s a direction" in finding.message
    assert "copy h2d.local 600" in finding.message


def test_a_c2c_gpu_slower_than_its_trays_others_warns_and_pcie_s_rule_stays_off() -> None:
    """A GB200 tray's four GPUs over C2C: GPU 3's device-to-host copies at 0.6 of the
    others' median fire KRN027 for GPU 3 only; KRN011 (PCIe's) does not apply to C2C GPUs."""
    results = [r for gpu in range(3) for r in copies(gpu, 390.0 + gpu, 380.0 + gpu)]
    results += copies(3, 389.0, 229.0)
    judged = with_kernel_results(gb200(), results, RULES)
    fired = [f for f in judged.findings if f.rule_id == "KRN027" and f.severity is not
             Severity.NOT_APPLICABLE]  # fmt: skip
    assert [(f.subject, f.severity) for f in fired] == [("GPU 3", Severity.WARNING)]
    assert "d2h" in fired[0].message and "0.6" in fired[0].message
    krn011 = {f.severity for f in judged.findings if f.rule_id == "KRN011"}
    assert krn011 == {Severity.NOT_APPLICABLE}
    healthy = with_kernel_results(
        gb200(), [r for gpu in range(4) for r in copies(gpu, 390.0 + gpu, 380.0)], RULES
    )
    assert not [f for f in healthy.findings if f.rule_id == "KRN027" and f.severity is not
                Severity.NOT_APPLICABLE]  # fmt: skip
    assert healthy.readings_by_key["gpu.3.kernel.copy.c2c.share_of_median"].value > 0.99


class _BusIds:
    """The one CUDA call the run's own judgement makes: the GPU's PCI bus id."""

    def deviceGetPCIBusId(self, gpu: int) -> str:
        return nodes.demo.BUS_IDS[gpu].upper()


def test_the_runs_own_judgement_leaves_a_grace_nodes_host_copies_to_the_c2c_bound() -> None:
    """`gpudiag run` judges each figure against the GPU's profile as it ends; on a Grace
    node (cpu0's MIDR part 0xd4f) a host copy is no PCIe figure, so it is kept for the
    derived readings (c2c.enabled); elsewhere the PCIe bound still applies."""
    from gpudiag.kernels import device
    from gpudiag.kernels.plans import KernelPlan
    from gpudiag.kernels.runner import PlanRun

    previous = device.use(_BusIds())
    try:
        results = copies(0, 380.0, 370.0)
        on_grace = PlanRun(KernelPlan(("copy",)), nodes.hostfs(nodes.gh200_host()))
        assert on_grace._judged(results, [0]) == results
        on_xeon = PlanRun(KernelPlan(("copy",)), nodes.hostfs(nodes.demo_host()))
        refused = on_xeon._judged(results, [0])
        assert all(r.error.startswith("timing inconsistent") for r in refused)
    finally:
        device.use(previous)
