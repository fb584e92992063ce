"""Right bounds for copies (issue 35): a peer copy is bounded by the link the node says
the pair has (topo.gpu.I.J), a two-way copy by both directions of it, and an NVLink-bridged
PCIe card by its bridge. One healthy figure near its bound per kind of copy (figures made
up as test input near published ones: 380 GB/s one way on H100 NVLink, NVIDIA/nccl issue
1264; no GPU figure is claimed here)."""

from __future__ import annotations

import pytest

from gpudiag.kernels.readings import impossible, kernel_readings, physical_bound
from gpudiag.kernels.stats import summarize
from gpudiag.model import KernelResult, ProbeStatus, Reading
from gpudiag.profiles import load_profiles

PROFILES = load_profiles()


def _copy(kernel: str, metric: str, gbs: float) -> KernelResult:
    samples = (gbs * 0.99, gbs, gbs * 1.01)
    return KernelResult(kernel, "gpu0", metric, "GB/s", ProbeStatus.OK, samples, summarize(samples))


# (profile, kernel, metric, the pair's link, a healthy figure, the bound it must be under)
HEALTHY = [
    ("h100-sxm5", "copy", "h2d.local", None, 55.0, 63.0),  # PCIe Gen5 x16, one way
    ("h100-sxm5", "copy", "d2h.local", None, 55.0, 63.0),
    ("h100-sxm5", "copy", "bidir.local", None, 100.0, 126.0),  # both ways at once
    ("h100-sxm5", "peer", "to.gpu1", "NV18", 380.0, 478.2),  # 18 NVLinks x 26.562
    ("h100-sxm5", "peer", "bidir.gpu1", "NV18", 740.0, 956.3),
    ("h100-sxm5", "peer", "to.gpu1", "SYS", 50.0, 63.0),  # a pair joined through PCIe
    ("h100-nvl", "peer", "to.gpu1", "NV12", 250.0, 300.0),  # its NVLink bridge
    ("h100-nvl", "peer", "bidir.gpu1", "NV12", 500.0, 600.0),
    ("a100-pcie-80gb", "peer", "to.gpu1", "NV12", 250.0, 300.0),
    ("b200", "peer", "to.gpu1", "NV18", 800.0, 956.3),  # 18 x 53.125, the line rate
]


@pytest.mark.parametrize(("model", "kernel", "metric", "link", "figure", "bound"), HEALTHY)
def test_a_healthy_copy_is_under_the_bound_of_its_own_link(
    model: str, kernel: str, metric: str, link: str | None, figure: float, bound: float
) -> None:
    peaks = PROFILES[model].values
    limit, what = physical_bound(kernel, metric, peaks, link)  # type: ignore[misc]
    assert limit == pytest.approx(bound, rel=2e-3), what
    assert figure < limit and figure > 0.75 * limit  # healthy, and near its bound
    assert impossible(_copy(kernel, metric, figure), peaks, link) == ""
    # well above the same bound cannot be true
    assert "timing inconsistent" in impossible(_copy(kernel, metric, limit * 1.2), peaks, link)


def test_a_pcie_pair_on_an_nvlink_model_is_bounded_by_pcie() -> None:
    peaks = PROFILES["h100-sxm5"].values
    reason = impossible(_copy("peer", "to.gpu1", 380.0), peaks, "SYS")
    assert "SYS: its PCIe link (Gen5 x16" in reason


def test_without_the_pairs_link_a_bridged_card_is_not_judged_by_pcie() -> None:
    """A PCIe card that may have an NVLink bridge, with no topology to say: no bound (the
    run itself judges nothing it cannot know; the snapshot's topo.gpu.I.J does)."""
    assert physical_bound("peer", "to.gpu1", PROFILES["h100-nvl"].values) is None
    assert physical_bound("peer", "to.gpu1", PROFILES["l40s"].values)[0] == pytest.approx(
        31.5, 0.01
    )


def test_the_snapshots_link_type_judges_a_bridged_pair() -> None:
    """A healthy 250 GB/s copy between two bridged H100 NVL (NV12) is a figure with its
    share among the pairs, not "timing inconsistent" (the PCIe bound, 63 GB/s, made it one)."""
    results = [
        KernelResult("peer", "gpu0", "to.gpu1", "GB/s", ProbeStatus.OK, s, summarize(s))
        for s in ((248.0, 250.0, 252.0),)
    ]
    topology = {"topo.gpu.0.1": Reading("topo.gpu.0.1", "NV12")}
    derived = {r.key: r for r in kernel_readings(results, topology, PROFILES["h100-nvl"].values)}
    assert derived["gpu.0.kernel.timing_consistent"].value is True
    assert derived["topo.gpu.0.1.copy_gbs"].value == 250.0
    pcie = {"topo.gpu.0.1": Reading("topo.gpu.0.1", "PXB")}
    derived = {r.key: r for r in kernel_readings(results, pcie, PROFILES["h100-nvl"].values)}
    assert derived["gpu.0.kernel.timing_consistent"].value is False
    # over a PCIe path 250 GB/s cannot be true: KRN013 cannot judge the pair, and says why
    share = derived["topo.gpu.0.1.copy_share_of_median"]
    assert not share.ok and share.reason.startswith("KRN022: timing inconsistent")
