"""Issue 36, point 9: a snapshot saved before round 3 (the real H100 VM, exported by the
code at ea3500d) checked by this version: what its producers now record is derived from
what it holds, and "no probe produced it" never reaches a user for a probe that ran."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from gpudiag.model import ReadingStatus, Severity
from gpudiag.rulefile import load_rules
from gpudiag.session import with_findings
from gpudiag.snapshot import load
from gpudiag.upgrade import upgraded

OLD = Path(__file__).parent / "fixtures" / "old-snapshots" / "h100-vm__ea3500d.json"


def _by_rule(snapshot) -> dict[str, list]:
    out: dict[str, list] = {}
    for finding in snapshot.findings:
        out.setdefault(finding.rule_id, []).append(finding)
    return out


def test_an_old_snapshot_is_judged_as_its_producers_now_record() -> None:
    snapshot = load(str(OLD))
    r = snapshot.readings_by_key
    # derived on load, as the producers now make them
    assert r["gpu.0.nvlink.active"].status is ReadingStatus.UNSUPPORTED  # count: NotSupported
    assert r["gpu.0.fabric.status"].status is ReadingStatus.UNSUPPORTED  # state not-supported
    assert r["pcie.0000:00:06.0.numa_node"].value == 0  # -1 on a one-node machine: node 0
    assert r["cpu.idle.C6.disabled"].status is ReadingStatus.UNSUPPORTED  # a VM's
    assert "older gpudiag" not in r["gpu.0.nvlink.count"].source  # what it held: as held
    # the margin to slowdown (GPU032), from the T.Limit margin 43 C and slowdown's -2 C
    assert r["gpu.0.temperature.slowdown_margin"].value == 45
    assert "derived on load" in r["gpu.0.temperature.slowdown_margin"].source
    assert r["gpu.0.temperature.slowdown"].value == 89  # NVML's own: kept
    judged = with_findings(snapshot, load_rules())
    assert not [f for f in judged.findings if "no probe produced it" in f.message]
    by_rule = _by_rule(judged)
    for rule in ("NVL006", "NVL009", "NVL011", "CPU003", "PCIE010", "CPU001", "MEM005"):
        assert {f.severity for f in by_rule.get(rule, [])} <= {Severity.NOT_APPLICABLE}, rule
    worst = {f.severity for f in judged.findings} - {Severity.NOT_APPLICABLE, Severity.INFO}
    assert not worst  # one healthy GPU, as the realdata README says


def test_an_absent_reading_of_a_probe_that_ran_says_so() -> None:
    snapshot = load(str(OLD))
    # edit: the gpu probe's NVLink count left out as well (nothing to derive the active
    # count from): the rules say which probe ran, never that none produced it
    probes = tuple(
        replace(p, readings=tuple(r for r in p.readings if "nvlink" not in r.key))
        if p.name == "gpu"
        else p
        for p in snapshot.probes
    )
    judged = with_findings(replace(snapshot, probes=probes), load_rules())
    (nvl006,) = _by_rule(judged)["NVL006"]
    assert nvl006.severity is Severity.UNKNOWN
    assert "not recorded by the gpu probe, which ran" in nvl006.message
    assert "no probe produced it" not in nvl006.message


def test_a_threshold_an_older_gpudiag_derived_from_t_limit_is_dropped() -> None:
    """Review #8: tests/golden/snapshot.toml's GPU 1 holds the slowdown threshold the probe
    made up as temperature + T.Limit margin + 2 C (89 C); the driver gave it only
    relative to T.Limit, and so it is now: unsupported, saying what was dropped."""
    r = load(str(Path(__file__).parent / "golden" / "snapshot.toml")).readings_by_key
    for name in ("slowdown", "shutdown", "gpu_max"):
        reading = r[f"gpu.1.temperature.{name}"]
        assert reading.status is ReadingStatus.UNSUPPORTED, reading
        assert "older gpudiag derived" in reading.reason
    assert "the 89 C an older gpudiag" in r["gpu.1.temperature.slowdown"].reason
    assert r["gpu.1.temperature.slowdown_tlimit"].value == -2  # as read
    assert r["gpu.1.temperature.slowdown_margin"].ok


def test_an_older_import_gains_the_margin_and_loses_the_derived_threshold() -> None:
    """An nvidia-smi -q import saved before review #8 (the H100 at 590.48.01, idle): its
    slowdown threshold was made up as 41 + 46 + 2 C and it had no margin to slowdown."""
    from gpudiag.importing import import_text
    from gpudiag.model import ProbeResult, ProbeStatus, Reading

    from conftest import realdata_dir

    name = "nvidia-smi-q/nvgpuexp__linux-x86_64__nvidia-h100-80gb-hbm3__590.48.01__idle.txt"
    kind, readings = import_text((realdata_dir() / name).read_text())
    made_up = "nvidia-smi-q:GPU 0/Temperature/GPU Current Temp+GPU T.Limit Temp+GPU Slowdown"
    old = tuple(
        Reading(r.key, 89, "C", made_up) if r.key == "gpu.0.temperature.slowdown" else r
        for r in readings
        if r.key != "gpu.0.temperature.slowdown_margin"
    )
    (probe,) = upgraded((ProbeResult(f"import-{kind}", ProbeStatus.OK, 0.0, old),))
    r = {reading.key: reading for reading in probe.readings}
    assert r["gpu.0.temperature.slowdown"].status is ReadingStatus.UNSUPPORTED
    assert r["gpu.0.temperature.slowdown_margin"].value == 46 + 2
    # an edited file's margin that is no number: nothing derived, no traceback
    edited = tuple(
        replace(r, value="hot") if r.key == "gpu.0.temperature.tlimit_margin" else r for r in old
    )
    (probe,) = upgraded((ProbeResult(f"import-{kind}", ProbeStatus.OK, 0.0, edited),))
    assert "gpu.0.temperature.slowdown_margin" not in {r.key for r in probe.readings}


def test_a_current_snapshot_is_left_as_it_is() -> None:
    from gpudiag.demo import demo_node

    snapshot = demo_node("healthy").snapshot()  # today's probes, replayed
    assert upgraded(snapshot.probes) is snapshot.probes


def test_cli_check_of_the_old_snapshot(tmp_path: Path) -> None:
    """End to end: `gpudiag check` of the snapshot exported at ea3500d, as a user runs it."""
    from conftest import run_cli

    result = run_cli("check", str(OLD))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no probe produced it" not in result.stdout
    judged = [line.split()[:2] for line in result.stdout.splitlines()[1:]]
    assert not [w for w in judged if w and w[0] in ("CRITICAL", "WARNING", "UNKNOWN")]
    assert ["INFO", "HOST001"] in judged  # the findings are there: it runs under a hypervisor
