"""Issue 38: a fleet report an operator can gate on, on tests/fleetgen.py's operator fleet
(healthy nodes with a real fleet's spread and counters, sixteen faults planted on fifteen
nodes). At 1,000 nodes (run outside the suite, figures in the issue's report) the healthy
fleet exits 0 with no node listed and every fault is found; here the same fleet at 64
nodes, which is what the suite can afford."""

from __future__ import annotations

import json
import math
import random
import statistics
from dataclasses import replace
from pathlib import Path

import pytest

from gpudiag import shipped, tomlcompat
from gpudiag.catalog import Kind
from gpudiag.fleet.analysis import FleetReport, analyse
from gpudiag.fleet.baseline import NodeType, _node_floor, baseline
from gpudiag.fleet.load import load_fleet
from gpudiag.fleet.outliers import _tail
from gpudiag.fleet.report import report_json, report_text
from gpudiag.fleet.screen import sections, unreadable_title
from gpudiag.health import Slurm
from gpudiag.rulefile import load_rules
from gpudiag.session import with_findings

from conftest import run_cli
from fleetgen import (
    DRIVERS,
    FAULTS,
    base_snapshot,
    make_node,
    operator_spec,
    plant_fault,
    snapshot_of,
    vm_spec,
    write_operator_fleet,
    write_specs,
)

COUNT = 64


@pytest.fixture(scope="module")
def operator(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, list[str]]]:
    directory = tmp_path_factory.mktemp("operator")
    return directory, write_operator_fleet(directory, COUNT)


@pytest.fixture(scope="module")
def report(operator: tuple[Path, dict[str, list[str]]]) -> FleetReport:
    return analyse(load_fleet([operator[0]], workers=1))


def test_every_fault_is_found_on_its_node_and_no_healthy_node_is_listed(
    report: FleetReport, operator: tuple[Path, dict[str, list[str]]]
) -> None:
    _, planted = operator
    assert {fault: len(nodes) for fault, nodes in planted.items()} == dict(FAULTS)
    odd = set(report.odd_nodes())
    faulty = {n for nodes in planted.values() for n in nodes}
    assert odd <= faulty  # no healthy node listed anywhere
    for fault, nodes in planted.items():
        for node in nodes:
            if fault == "damaged":
                assert any(f"{node}.json" in bad for bad in report.bad)
            else:
                assert node in odd, (fault, node)
    # each where it belongs: slow nodes as nodes, the NUMA swap per position, the
    # uncorrectable count beyond the fleet's rate, the Gen4 links' link generation
    assert {n.node for n in report.slow_nodes} == set(planted["slow"])
    for n in report.slow_nodes:
        assert 0.07 < n.shortfall < 0.10 and n.shortfall_low <= n.shortfall <= n.shortfall_high
        assert n.gpus == 8 and n.low <= n.value <= n.high
    numa = {(o.node, o.device) for o in report.outliers if o.reading == "gpu.{gpu}.numa_node"}
    assert numa == {(planted["numa"][0], f"GPU {g}") for g in range(8)}
    assert {c.node for c in report.counters} == set(planted["uncorrectable"])
    gen = {o.node for o in report.outliers if o.reading == "gpu.{gpu}.pcie.link_gen"}
    assert gen == set(planted["gen4"])
    # needs a person and bad input: exit 1, both said
    assert report.exit_code() == 1
    verdict = report.verdict()
    assert verdict.startswith("exit 1: needs a person: 15 nodes") and "bad input: 1 file" in verdict
    assert verdict in report_text(report) and report_json(report)["exit_code"] == 1


def test_the_healthy_nodes_exit_0_and_a_bad_file_alone_exits_3(
    operator: tuple[Path, dict[str, list[str]]],
) -> None:
    directory, planted = operator
    faulty = {n for fault, nodes in planted.items() if fault != "damaged" for n in nodes}
    paths = [p for p in sorted(directory.glob("*.json")) if p.stem not in faulty]
    report = analyse(load_fleet(paths, workers=1))
    # counters on about a fifth of the GPUs, spread node to node and GPU to GPU: nothing
    # needs a person; the damaged file makes it exit 3, said
    assert report.odd_nodes() == [] and report.outliers == [] and report.counters == []
    assert report.exit_code() == 3 and report.verdict().startswith("exit 3: bad input: 1 file")
    damaged = [p for p in paths if p.stem in planted["damaged"]]
    healthy = analyse(load_fleet([p for p in paths if p not in damaged], workers=1))
    # the demo's findings on every node (GPU027 critical among them) are named, never
    # 'nothing needs a person' (a review), and leave the exit code at 0: no node differs
    assert healthy.exit_code() == 0 and healthy.verdict().startswith(
        "exit 0: no node differs from alike nodes; findings on every node of a type below: "
        "GPU027 (critical)"
    )


def test_a_lost_gpu_leaves_its_own_position_only(
    report: FleetReport, operator: tuple[Path, dict[str, list[str]]]
) -> None:
    _, planted = operator
    lost = planted["lost"][0]
    # before, one lost GPU 4-7 tipped the pooled NUMA median and every healthy GPU on the
    # other NUMA node was odd
    assert not [o for o in report.outliers if o.node == lost and "numa" in o.reading]
    assert len({o.node for o in report.outliers if o.reading == "gpu.{gpu}.numa_node"}) == 1


def test_the_counter_tail_is_the_poisson_and_negative_binomial_tail() -> None:
    # Poisson(1): P(X >= 2) = 1 - 2/e; P(X >= 1) = 1 - 1/e
    assert math.isclose(_tail(2, 1.0, 1.0), 1 - 2 / math.e, rel_tol=1e-9)
    assert math.isclose(_tail(1, 1.0, 0.5), 1 - 1 / math.e, rel_tol=1e-9)
    # negative binomial, mean 2 and variance 6: r = 1, a geometric with q = 1/3:
    # P(X >= k) = (2/3)^k
    assert math.isclose(_tail(3, 2.0, 6.0), (2 / 3) ** 3, rel_tol=1e-9)
    # beyond MAX_COUNT the tail at it bounds the rest (never an error, never 1)
    assert _tail(10**9, 0.1, 0.2) < 1e-12


# ------------------------------------------------------------------ baselines per node type

HGX, VMS = 16, 6
KIND = NodeType("0x2330", 8, "none")


@pytest.fixture(scope="module")
def mixed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A good set of HGX nodes and VMs (the same GPUs, no NVLink in the VMs), and its
    baseline written in a site folder."""
    directory = tmp_path_factory.mktemp("mixed")
    specs = [operator_spec(f"hgx{n:03d}", n) for n in range(1, HGX + 1)]
    specs += [vm_spec(f"vm{n:02d}", 500 + n) for n in range(1, VMS + 1)]
    write_specs(directory, specs)
    site = tmp_path_factory.mktemp("site")
    found = baseline(load_fleet([directory], workers=1))
    (site / "baseline.toml").write_text(found.text)
    return directory, site


def _rules(site: Path) -> list[dict]:
    return tomlcompat.loads((site / "baseline.toml").read_text())["rule"]


def test_a_baseline_of_hgx_nodes_and_vms_keeps_the_hgx_rules(mixed: tuple[Path, Path]) -> None:
    _, site = mixed
    text = (site / "baseline.toml").read_text()
    bare = [
        r for r in _rules(site) if {"reading": "host.virt.vm", "equal": "none"} in r["applies_if"]
    ]
    vm = [r for r in _rules(site) if {"reading": "host.virt.vm", "equal": "kvm"} in r["applies_if"]]
    assert bare and vm and len(bare) + len(vm) == len(_rules(site))
    readings = {r["reading"] for r in bare}
    # the driver, the kernels (per GPU, and the node's median of its GPUs) and NVLink
    assert "nvml.driver_version" in readings
    assert {
        "gpu.{gpu}.kernel.stream.triad.fp64",
        "node.kernel.gpus_median.stream.triad.fp64",
    } <= readings
    assert "gpu.{gpu}.nvlink.{link}.state" in readings and "gpu.{gpu}.nvlink.active" in readings
    assert not any(".nvlink." in r["reading"] for r in vm)
    # per position: GPU 5's NUMA node is 1 on every node
    numa = next(r for r in bare if r["reading"] == "gpu.5.numa_node")
    assert numa["expect"] == {"equal": 1} and numa["applies_to"] == "node"
    # nothing dropped silently; no title with an empty value
    assert "# Left out (" in text and "numa.{node}.mem_free" not in text
    assert not [r["title"] for r in _rules(site) if r["title"].endswith("site's ")]
    assert "cpu.offline is not the site's (empty)" in text


def test_the_baseline_catches_another_driver_and_a_slow_node(mixed: tuple[Path, Path]) -> None:
    _, site = mixed
    rules = load_rules([site])
    other = operator_spec("hgx901", 901)
    other.driver = DRIVERS[1]
    slow = operator_spec("hgx902", 902)
    plant_fault(slow, "slow", random.Random(2))
    like = operator_spec("hgx903", 903)
    new = {}
    for spec in (other, slow, like):
        findings = with_findings(snapshot_of(spec), rules).findings
        new[spec.name] = {
            (f.rule_id, f.subject.split(":")[0], f.message.split(" is ")[0])
            for f in findings
            if f.rule_id.startswith("BASE") and f.severity.value == "warning"
        }
    assert {m for _, _, m in new["hgx901"]} == {"nvml.driver_version"}
    assert "node.kernel.gpus_median.stream.triad.fp64" in {m for _, _, m in new["hgx902"]}
    assert new["hgx903"] == set()


def test_rules_dir_fleet_judges_every_node_with_the_site_rules(
    mixed: tuple[Path, Path], tmp_path: Path
) -> None:
    directory, site = mixed
    other = operator_spec("hgx901", 901)
    other.driver = DRIVERS[1]
    for path in sorted(directory.glob("*.json"))[:6]:
        (tmp_path / path.name).write_bytes(path.read_bytes())
    write_specs(tmp_path, [other])
    args = ("fleet", str(tmp_path), "--format", "json", "--slow", "6.5")
    result = run_cli("--rules", str(site), *args)
    assert result.returncode == 1, result.stderr
    assert json.loads(result.stdout)["slow_pct"] == 6.5
    findings = json.loads(result.stdout)["findings"]
    base = [f for f in findings if f["rule_id"].startswith("BASE") and f["severity"] == "warning"]
    assert [(f["nodes"], f["count"]) for f in base] == [("hgx901", 1)]
    plain = json.loads(run_cli("fleet", str(tmp_path), "--format", "json").stdout)
    assert not [f for f in plain["findings"] if f["rule_id"].startswith("BASE")]


# ------------------------------------------------------------------ the link under load


def _pcie013(spec_changes: dict, kernels: bool = True) -> dict[str, tuple[str, str]]:
    spec = operator_spec("n1", 1)
    for key, per in spec_changes.items():
        spec.extra[key] = per
    snapshot = snapshot_of(spec)
    if not kernels:
        snapshot = with_findings(replace(snapshot, kernels=()), load_rules())
    return {
        f.subject: (f.severity.value, f.message)
        for f in snapshot.findings
        if f.rule_id == "PCIE013"
    }


def test_a_link_below_its_generation_fires_under_load_and_cannot_be_judged_idle() -> None:
    idle = dict.fromkeys(range(8), "P8")
    # in P0: the link's own generation is judged
    busy = _pcie013({"pcie.link_gen": {g: 4 if g == 3 else 5 for g in range(8)}})
    assert busy == {"GPU 3": ("warning", "GPU 3's PCIe link runs at Gen4 under load, of Gen5")}
    # idle, with the kernels' copy (55 GB/s over x16 needs Gen5): judged by the copy, even
    # though the idle link reads Gen1
    copied = _pcie013({"pstate": idle, "pcie.link_gen": dict.fromkeys(range(8), 1)})
    assert copied == {}  # passed: no finding
    # idle without kernels: cannot judge, never fires, never unknown (an idle node is not
    # a node with a problem)
    quiet = _pcie013({"pstate": idle, "pcie.link_gen": dict.fromkeys(range(8), 1)}, False)
    assert len(quiet) == 8 and {s for s, _ in quiet.values()} == {"not-applicable"}
    assert "cannot judge: GPU 0 is P8" in quiet["GPU 0"][1]


def test_the_fleet_screen_names_the_unreadable_file(
    report: FleetReport, operator: tuple[Path, dict[str, list[str]]]
) -> None:
    _, planted = operator
    name = f"{planted['damaged'][0]}.json"
    first = sections(report)["Why slow"].splitlines()
    assert first[0] == report.verdict()
    assert first[1] == "1 unreadable file, skipped:"
    assert name in first[2] and "not valid JSON" in first[2]
    assert unreadable_title(report) == f"1 unreadable: {name}"


# ------------------------------------------------------------------ Slurm


class _Shown(Slurm):
    """scontrol show node answering one line, as slurmctld 23-24 words it."""

    def __init__(self, answer: str) -> None:
        super().__init__("n1", "/nonexistent/scontrol", {})
        object.__setattr__(self, "answer", answer)

    def show(self) -> str:
        return self.answer


def test_a_comment_gpudiag_noted_is_not_read_as_the_drain_reason() -> None:
    # the Comment note_finding writes on someone else's drain follows the Reason and its
    # [user@time] in `scontrol show node --oneliner` (checked against slurmctld here)
    noted = "Comment=gpudiag: GPU001 GPU 0: GPU lost (service)"
    line = f"NodeName=n1 State=IDLE+DRAIN Reason=fan replaced [root@2026-11-28T06:41:24] {noted}"
    assert _Shown(line).state() == ("IDLE+DRAIN", "fan replaced")
    assert _Shown(line.removesuffix(f" {noted}")).state() == ("IDLE+DRAIN", "fan replaced")


def test_vms_are_compared_with_vms(mixed: tuple[Path, Path]) -> None:
    directory, _ = mixed
    report = analyse(load_fleet([directory], workers=1))
    # the VMs' copies through the IOMMU (90%) are not slow HGX nodes, their missing
    # NVLink and PCIe readings not odd configuration, the findings only the bare-metal
    # nodes have (all of them) not partial: nothing needs a person
    assert set(report.node_models.values()) == {"h100-sxm5 x8", "h100-sxm5 x8, virtual (kvm)"}
    assert report.odd_nodes() == [] and report.exit_code() == 0
    assert any(f.nodes == [f"hgx{n:03d}" for n in range(1, HGX + 1)] for f in report.findings)


def test_the_node_floor_catches_an_8_percent_node_at_a_2_5_percent_gpu_spread() -> None:
    # 500 healthy nodes whose 8 GPUs spread 2.5% (no node-to-node spread): their medians
    # spread about 1.05%, so the floor sits 4 of those (about 4.2%) below the median
    rng = random.Random(38)
    medians = [statistics.median(rng.gauss(3000, 75) for _ in range(8)) for _ in range(500)]
    rule = _node_floor("gpu.{gpu}.kernel.stream.triad.fp64", medians, "GB/s", KIND, 7.0)
    floor = rule["expect"]["min"]
    assert rule["reading"] == "node.kernel.gpus_median.stream.triad.fp64"
    assert 3000 * 0.92 * 1.01 < floor < 3000 * 0.97  # an 8% node, its own spread, under it
    assert sum(m < floor for m in medians) <= 1  # a healthy node rarely (1 in 3,000 measured)
    # at the 2% node-to-node spread of a real fleet the floor is the slow threshold, 7%
    wide = [m * rng.gauss(1, 0.02) for m in medians]
    assert _node_floor("x.{gpu}", wide, "GB/s", KIND, 7.0)["expect"]["min"] == pytest.approx(
        statistics.median(wide) * 0.93, rel=1e-3
    )


def test_each_reading_declares_its_kind() -> None:
    # declared where the reading is declared (probes/gpu.py, probes/pcie.py), read from the
    # compiled catalog as from the built one
    expected = {
        "gpu.3.numa_node": Kind.POSITIONAL,
        "gpu.3.cpu_affinity": Kind.POSITIONAL,
        "gpu.3.nvlink.5.remote_bus_id": Kind.POSITIONAL,
        "pcie.0000:18:00.0.numa_node": Kind.POSITIONAL,
        "gpu.3.ecc.aggregate.corrected": Kind.COUNTER,
        "gpu.3.pcie.replay_counter": Kind.COUNTER,
        "gpu.3.remapped_rows.correctable": Kind.COUNTER,
        "gpu.3.temperature.gpu": Kind.MEASUREMENT,
        "nvml.driver_version": Kind.CONFIGURATION,
        "gpu.3.pcie.link_gen": Kind.CONFIGURATION,
    }
    assert {key: shipped.kind_of(key) for key in expected} == expected
    built = shipped.built_catalog()
    assert {key: built.find(key).kind for key in expected} == expected


def test_the_counters_window_of_an_export_is_not_compared(tmp_path: Path) -> None:
    """An --export carries the GPUs' performance counters over the probing (the telemetry
    result): what the node was doing, not how it is. A node busy while it was probed is
    not odd, and its layout is the idle nodes' (fast path and loader alike)."""
    from gpudiag.catalog import COUNTERS
    from gpudiag.model import ProbeResult, ProbeStatus, Reading
    from gpudiag.snapshot import save

    base = base_snapshot()
    for number in range(1, 7):
        node = make_node(base, f"node{number}", number)
        busy = 0.97 if number == 6 else 0.0  # node6 ran a job while it was probed
        window = tuple(
            Reading(f"gpu.{gpu}.telemetry.sm_active", busy, source="nvml:nvmlGpmMetricsGet")
            for gpu in range(8)
        )
        counters = ProbeResult(COUNTERS, ProbeStatus.OK, 0.1, window)
        node = replace(node, probes=(*node.probes, counters))
        suffix = "toml" if number == 5 else "json"  # the loader's path beside the fast path's
        save(node, tmp_path / f"node{number}.{suffix}")
    loaded = load_fleet([tmp_path], workers=1)
    assert len(loaded.layouts) == 1  # the same layout, whichever path read the file
    assert not any(".telemetry." in key for key in loaded.layouts[0].keys)
    report = analyse(loaded)
    assert "node6" not in report.odd_nodes(), [o for o in report.outliers if o.node == "node6"]
