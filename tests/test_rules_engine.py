"""The rules engine beyond single rules: profiles, site overrides, scopes, lost GPUs,
the command line for rules, and the planted faults of the demo replays."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpudiag.model import Reading, ReadingStatus, Severity
from gpudiag.probes import default_probes
from gpudiag.profiles import detect_profile, load_profiles, parse_profiles
from gpudiag.rule_operators import RuleError
from gpudiag.ruleengine import evaluate
from gpudiag.rulefile import load_rules, parse_rules
from gpudiag.session import with_findings

from conftest import FIXTURES, REPO, realdata_dir, run_cli

FAULTY = REPO / "snapshots" / "demo-hgx-h100-faulty.toml"
HEALTHY = REPO / "snapshots" / "demo-hgx-h100-healthy.toml"
TREE = FIXTURES / "host-basic"
# the planted faults of the faulty replay: (rule id, subject)
PLANTED = {
    ("PCIE001", "GPU 3"),  # PCIe x8 of x16
    ("NVL001", "GPU 2 NVLink 5"),  # NVLink down
    ("NVL006", "GPU 2"),  # so 17 of the model's 18 links
    ("GPU004", "GPU 5"),  # persistence off
    ("GPU011", "GPU 1"),  # pending row remap
    ("GPU014", "GPU 6"),  # hardware slowdown
    ("GPU001", "GPU 7"),  # lost
}


def _by_key(*readings: Reading) -> dict[str, Reading]:
    return {r.key: r for r in readings}


def test_profiles_inherit_and_every_id_is_well_formed() -> None:
    profiles = load_profiles()
    assert len(profiles) >= 13
    h200 = profiles["h200-sxm"].values
    assert (h200["nvlink_count"], h200["memory_gb"], h200["max_mem_clock_mhz"]) == (18, 141, 3201)
    assert profiles["a100-sxm4-80gb"].values["nvlink_gbs"] == 25
    ids = [i for p in profiles.values() for i in p.device_ids]
    assert len(ids) == len(set(ids))


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("[profile.x]\ncolour = 1\n", "unknown key(s) colour"),
        ("[profile.x]\ndevice_ids = ['2330']\n", "device_ids are like '0x2330'"),
        ("[profile.x]\ninherits = 'y'\n[profile.y]\ninherits = 'x'\n", "inheritance loops"),
        ("[profile.x]\nmemory_gb = 'lots'\n", "memory_gb must be a number"),
        ("[other]\n", "holds [profile.NAME] tables only"),
    ],
)
def test_bad_profile_files(text: str, expected: str) -> None:
    with pytest.raises(RuleError, match=None) as error:
        parse_profiles(text, "p.toml")
    assert expected in str(error.value)


def test_profile_is_detected_by_device_id_and_unknown_models_say_so() -> None:
    profiles = load_profiles()
    readings = _by_key(
        Reading("gpu.0.pci.device_id", "0x2330"), Reading("gpu.1.pci.device_id", "0x2330")
    )
    assert detect_profile(readings, profiles)[0] is profiles["h100-sxm5"]
    unknown = _by_key(
        Reading("gpu.0.pci.device_id", "0x1234"), Reading("gpu.0.power.limit", 100.0, "W")
    )
    profile, ids = detect_profile(unknown, profiles)
    assert profile is None and ids == ["0x1234"]
    findings = evaluate(load_rules(), unknown, profile=None, device_ids=ids)
    prof = [f for f in findings if f.rule_id == "PROF001"]
    assert len(prof) == 1 and prof[0].severity is Severity.INFO
    assert "0x1234" in prof[0].message
    assert not [f for f in findings if f.rule_id == "GPU017"]  # needs a profile: skipped


def test_site_overrides_change_severity_and_disable(tmp_path: Path) -> None:
    (tmp_path / "site.toml").write_text(
        '[[override]]\nid = "GPU004"\nseverity = "critical"\n'
        '[[override]]\nid = "CPU001"\ndisabled = true\n'
    )
    rules = {r.id: r for r in load_rules([tmp_path])}
    assert rules["GPU004"].severity is Severity.CRITICAL
    assert rules["CPU001"].disabled
    findings = evaluate(
        list(rules.values()),
        _by_key(
            Reading("cpu.freq.governor", "powersave"), Reading("gpu.0.persistence_mode", False)
        ),
    )
    assert [(f.rule_id, f.severity) for f in findings if f.rule_id in ("GPU004", "CPU001")] == [
        ("GPU004", Severity.CRITICAL)
    ]
    (tmp_path / "bad.toml").write_text('[[override]]\nid = "NOPE001"\ndisabled = true\n')
    with pytest.raises(RuleError, match="override of unknown rule NOPE001"):
        load_rules([tmp_path])


RULE = """[[rule]]
id = "{id}"
severity = "warning"
title = "t"
applies_to = "{scope}"
reading = "{reading}"
expect = {expect}
why = "w"
fix = "f"
"""


def _one(scope: str, reading: str, expect: str) -> list:
    return parse_rules(RULE.format(id="TE001", scope=scope, reading=reading, expect=expect), "t")


def test_every_scope_finds_its_instances() -> None:
    readings = _by_key(
        Reading("topo.gpu.0.1", "NV18"),
        Reading("topo.gpu.1.0", "PIX"),
        Reading("numa.0.mem_total", 100),
        Reading("numa.1.mem_total", 10),
        Reading("pcie.0000:18:00.0.current_link_width", 8),
        Reading("pcie.0000:19:00.0.current_link_width", 16),
        Reading("gpu.0.nvlink.0.state", "active"),
        Reading("gpu.0.nvlink.1.state", "inactive"),
        Reading("gpu.0.nvlink.0.errors.replay", 0),
    )
    pairs = evaluate(_one("gpu_pair", "topo.gpu.{gpu}.{peer}", "{ in = ['NV18'] }"), readings)
    assert [f.subject for f in pairs] == ["GPU 1 - GPU 0"]
    nodes = evaluate(_one("numa_node", "numa.{node}.mem_total", "{ min = 50 }"), readings)
    assert [f.subject for f in nodes] == ["NUMA node 1"]
    devices = evaluate(
        _one("pcie_device", "pcie.{device}.current_link_width", "{ min = 16 }"), readings
    )
    assert [f.subject for f in devices] == ["PCIe 0000:18:00.0"]
    # the inactive link has no error counters: not an unknown, just not there to judge
    errors = evaluate(
        _one("nvlink", "gpu.{gpu}.nvlink.{link}.errors.replay", "{ max = 0 }"), readings
    )
    assert errors == []


def test_a_lost_gpu_is_reported_once_not_by_every_rule() -> None:
    readings = _by_key(
        Reading.failed("gpu.1.health", ReadingStatus.ERROR, "nvmlDeviceGetName: GpuIsLost"),
        Reading("gpu.0.health", "ok"),
        Reading("gpu.0.persistence_mode", True),
    )
    findings = evaluate(load_rules(), readings)
    assert [(f.rule_id, f.subject) for f in findings if f.subject == "GPU 1"] == [
        ("GPU001", "GPU 1")
    ]


def test_a_gpu_the_source_did_not_reach_cannot_be_checked_never_lost() -> None:
    """A GPU a cut paste never reaches (its health `not-reached`): GPU001 cannot check
    it, saying why, never critical (a GPU not read is not a GPU lost) and never ok; no
    other rule is asked of it ('no probe produced it' never reaches a user); where the
    GPUs read agree, a comparison across all GPUs cannot tell either."""
    from gpudiag import catalog

    why = "the file shows 2 of the 3 attached GPUs and not this one"
    readings = _by_key(
        *(Reading(f"gpu.{g}.health", "ok") for g in (0, 1)),
        *(Reading(f"gpu.{g}.vbios", "96.00.74.00.01") for g in (0, 1)),
        *(Reading(f"gpu.{g}.persistence_mode", True) for g in (0, 1)),
        Reading.failed("gpu.2.health", ReadingStatus.NOT_REACHED, why, "nvidia-smi-q"),
    )
    assert not catalog.is_lost(readings, 2) and catalog.lost_gpus(readings) == []
    findings = evaluate(load_rules(), readings)
    (lost,) = [f for f in findings if f.rule_id == "GPU001"]
    assert (lost.subject, lost.severity) == ("GPU 2", Severity.UNKNOWN)
    assert lost.message == f"cannot check: gpu.2.health is not-reached ({why})"
    assert [f.rule_id for f in findings if f.subject == "GPU 2"] == ["GPU001"]
    assert not [f.message for f in findings if "gpu.2." in f.message.replace("gpu.2.health", "")]
    (vbios,) = [f for f in findings if f.rule_id == "GPU019"]
    assert vbios.subject == "node" and vbios.severity is not Severity.CRITICAL
    assert "not-reached" in vbios.message and why in vbios.message
    differ = {**readings, "gpu.1.vbios": Reading("gpu.1.vbios", "96.00.99.00.01")}
    (vbios,) = [f for f in evaluate(load_rules(), differ) if f.rule_id == "GPU019"]
    assert "differ" in vbios.message  # what was read still disagrees: said as it is
    read = {
        **readings,
        "gpu.2.health": Reading("gpu.2.health", "ok"),
        "gpu.2.vbios": Reading("gpu.2.vbios", "96.00.74.00.01"),
    }
    assert not [f for f in evaluate(load_rules(), read) if f.rule_id in ("GPU001", "GPU019")]
    lost_now = {
        **readings,
        "gpu.2.health": Reading.failed("gpu.2.health", ReadingStatus.ERROR, "GpuIsLost"),
    }
    (gone,) = [f for f in evaluate(load_rules(), lost_now) if f.rule_id == "GPU001"]
    assert gone.severity is Severity.CRITICAL  # a lost one still is


def test_unsupported_readings_are_not_judged() -> None:
    readings = _by_key(Reading.failed("gpu.0.ecc.current", ReadingStatus.UNSUPPORTED, "N/A"))
    (finding,) = [f for f in evaluate(load_rules(), readings) if f.rule_id == "GPU005"]
    assert finding.severity is Severity.NOT_APPLICABLE  # counted apart, no exit code
    assert finding.message == "does not apply: gpu.0.ecc.current is unsupported (N/A)"


def _demo_snapshot(replay: Path, tmp_path: Path):
    target = tmp_path / f"{replay.stem}.toml"
    run_cli("--root", str(TREE), "--nvml-replay", str(replay), "--export", str(target))
    return target


def test_check_reports_every_planted_fault_with_its_id_and_fix(tmp_path: Path) -> None:
    target = _demo_snapshot(FAULTY, tmp_path)
    check = run_cli("check", str(target))
    assert check.returncode == 2
    from gpudiag.snapshot import load

    findings = {(f.rule_id, f.subject): f for f in load(target).findings}
    assert set(findings) >= PLANTED, PLANTED - set(findings)
    for key in PLANTED:
        assert findings[key].fix, key
        assert f"{key[0]:<8} {key[1]}:" in check.stdout
    healthy = {(f.rule_id, f.subject) for f in load(_demo_snapshot(HEALTHY, tmp_path)).findings}
    assert not PLANTED & healthy


def test_profile_option_after_check_and_unknown_profile(tmp_path: Path) -> None:
    target = _demo_snapshot(HEALTHY, tmp_path)
    as_own = run_cli("check", str(target))
    assert "GPU017" not in as_own.stdout  # judged by their own id (H100 SXM5): 700 W is right
    as_b200 = run_cli("check", str(target), "--profile", "b200")
    # judged as B200s (1,000 W, 180 GB), every H100's 700 W limit and 80 GB are too low
    assert as_b200.returncode == 2, as_b200.stderr
    limits = [line for line in as_b200.stdout.splitlines() if line.startswith("WARNING  GPU017")]
    assert len(limits) == 8 and all("the model's is 1000 W" in line for line in limits)
    assert as_b200.stdout.count("CRITICAL GPU025") == 8
    bad = run_cli("check", str(target), "--profile", "h900")
    assert bad.returncode == 3 and "--profile h900: no such profile" in bad.stderr


def test_with_findings_honours_an_explicit_profile(tmp_path: Path) -> None:
    from gpudiag.snapshot import load

    snapshot = load(_demo_snapshot(HEALTHY, tmp_path))
    as_b200 = with_findings(snapshot, load_rules(), "b200")
    # judged as B200s (1,000 W), the H100s' 700 W limit is too low on every GPU;
    # judged by their own id (H100 SXM5, 700 W), it is not
    assert len([f for f in as_b200.findings if f.rule_id == "GPU017"]) == 8
    assert not [f for f in with_findings(snapshot, load_rules()).findings if f.rule_id == "GPU017"]


def test_rules_command_line(tmp_path: Path) -> None:
    listing = run_cli("rules", "list")
    assert listing.returncode == 0
    assert len(listing.stdout.splitlines()) >= 50
    explain = run_cli("rules", "explain", "pcie001")
    for part in (
        "PCIE001 (warning, stable)",
        "What it checks:",
        "Why it matters:",
        "How to fix:",
        "Example that fires:",
        "Defined in: rules/pcie.toml",
    ):
        assert part in explain.stdout
    missing = run_cli("rules", "explain", "NOPE001")
    assert missing.returncode == 3 and missing.stderr.count("\n") == 1
    profiles = run_cli("rules", "profiles")
    assert "h100-sxm5" in profiles.stdout and "0x2330" in profiles.stdout


def test_rules_lint(tmp_path: Path) -> None:
    good = tmp_path / "good.toml"
    good.write_text(
        RULE.format(id="SITE001", scope="node", reading="cpu.logical", expect="{ min = 64 }")
    )
    hostile = tmp_path / "hostile.toml"
    hostile.write_text(
        RULE.format(
            id="SITE002",
            scope="node",
            reading="cpu.logical",
            expect='{ equal = \'__import__("os").system("id")\' }',
        )
    )
    clash = tmp_path / "clash.toml"
    clash.write_text(
        RULE.format(id="GPU004", scope="node", reading="cpu.logical", expect="{ min = 1 }")
    )
    ok = run_cli("rules", "lint", str(good), str(REPO / "rules" / "gpu.toml"))
    assert ok.returncode == 0, ok.stdout
    assert f"{good}: ok (1 rules, 0 overrides)" in ok.stdout
    result = run_cli("rules", "lint", str(good), str(hostile), str(clash))
    assert result.returncode == 3
    assert result.stdout.splitlines() == [f"{good}: ok (1 rules, 0 overrides)"]
    lines = result.stderr.splitlines()  # the errors, on standard error
    assert lines[0].startswith(f"gpudiag: {hostile}:1: rule SITE002: '__' is not allowed")
    assert "rule GPU004: duplicate id, first defined at rules/gpu.toml" in lines[1]
    assert "to change a shipped rule use [[override]]" in lines[1]


def test_the_quick_check_and_the_full_comparison_agree_on_every_operator() -> None:
    """Each operator is defined once (gpudiag/rule_operators.py): the plan's quick check
    passes exactly what the full comparison passes, and sends every value the full
    comparison refuses (a wrong type) to it."""
    from gpudiag.rule_operators import QUICK_OPERATORS, compare, quick_check

    operands = {
        "between": [0, 10],
        "in": ["a", 1],
        "not_in": ["a", 1],
        "subset_of": ["a", "b"],
        "excludes": ["a"],
        "contains_any": ["a"],
    }
    values = [0, 5, 11, 2.5, True, "a", "b", [], ["a"], ["a", "c"], None]
    checked = 0
    for operator in sorted(QUICK_OPERATORS - {"present"}):
        operand = operands.get(operator, 5)
        quick = quick_check(operator, operand)
        for value in values:
            try:
                full = compare(value, operator, operand)
            except TypeError:
                assert quick(value) is False, (operator, value)
                continue
            assert quick(value) == full, (operator, value)
            checked += 1
    assert checked > 40


@pytest.mark.parametrize(
    ("expect", "extra", "undeclared"),
    [
        ("{ min = 1 }", "", "gpu.{gpu}.no_such.reading"),
        ('{ max_reading = "gpu.{gpu}.no_such.limit" }', "", "gpu.{gpu}.no_such.limit"),
        ("{ min = 1 }", 'applies_if = { reading = "node.no_such_flag", equal = true }\n',
         "node.no_such_flag"),
    ],
)  # fmt: skip
def test_rules_lint_refuses_every_key_no_probe_declares(
    tmp_path: Path, expect: str, extra: str, undeclared: str
) -> None:
    """The reading, a reading compared with and a reading applies_if looks at: each must
    be one the catalog declares, or the rule never fires."""
    reading = undeclared if "no_such.reading" in undeclared else "gpu.{gpu}.power.draw"
    text = RULE.format(id="SITE009", scope="gpu", reading=reading, expect=expect) + extra
    path = tmp_path / "site.toml"
    path.write_text(text)
    result = run_cli("rules", "lint", str(path))
    assert result.returncode == 3, result.stderr
    assert f"reads {undeclared}, which no probe, importer or derivation declares" in result.stderr
    declared = text.replace(undeclared, "gpu.{gpu}.power.limit" if "gpu" in undeclared else "")
    declared = declared.replace('reading = "", ', 'reading = "nvml.init", ')
    path.write_text(declared)
    ok = run_cli("rules", "lint", str(path))
    assert ok.returncode == 0 and ": ok (1 rules, 0 overrides)" in ok.stdout, ok.stdout


def test_a_comparison_across_gpus_that_no_gpu_supports_does_not_apply() -> None:
    """GPU020 compares InfoROM images; on GeForce no GPU has one (NotSupported): it does
    not apply, never 'cannot check'. One GPU without it: the others are compared."""
    none = _by_key(
        *(
            Reading.failed(f"gpu.{g}.inforom.image", ReadingStatus.UNSUPPORTED, "N/A")
            for g in (0, 1)
        )
    )
    (finding,) = [f for f in evaluate(load_rules(), none) if f.rule_id == "GPU020"]
    assert finding.severity is Severity.NOT_APPLICABLE
    assert "inforom.image is unsupported" in finding.message
    some = _by_key(
        Reading.failed("gpu.0.inforom.image", ReadingStatus.UNSUPPORTED, "N/A"),
        Reading("gpu.1.inforom.image", "G520.0200.00.05"),
        Reading("gpu.2.inforom.image", "G520.0200.00.04"),
    )
    (finding,) = [f for f in evaluate(load_rules(), some) if f.rule_id == "GPU020"]
    assert finding.severity is Severity.INFO and "differ" in finding.message


@pytest.mark.parametrize("tree", ["host-basic", "empty"])
@pytest.mark.parametrize("replay", ["replay-no-driver.toml", "replay-2gpu.toml"])
def test_no_rule_is_told_no_probe_produced_it(tmp_path: Path, tree: str, replay: str) -> None:
    """Every probe says what it skipped and why, even on a sparse or empty host tree:
    'no probe produced it' never reaches a user for a reading whose producer ran."""
    from gpudiag.hostfs import HostFS
    from gpudiag.nvml import Nvml, ReplayBackend
    from gpudiag.probes import default_probes
    from gpudiag.session import LiveNode

    root = FIXTURES / tree if tree != "empty" else tmp_path
    nvml = Nvml(ReplayBackend.from_file(FIXTURES / replay))
    snapshot = LiveNode(HostFS(root), nvml, default_probes(), load_rules()).snapshot()
    said = [(f.rule_id, f.message) for f in snapshot.findings if "no probe produced" in f.message]
    assert said == []


def _both_ways(snapshot, profile_name: str | None = None) -> tuple[list, list]:
    """The findings of the rule plan's quick tests, and of the full evaluation of every
    instance (the straightforward engine), for one snapshot."""
    from gpudiag.derive import with_derived

    snapshot, derivation = with_derived(snapshot, profile_name)
    args = (RULES, snapshot.readings_by_key, snapshot.probes, derivation.profile)
    ids = derivation.device_ids
    return evaluate(*args, ids), evaluate(*args, ids, quick=False)


RULES = load_rules()


def _applies_if_flipped(snapshot):
    """The snapshot with every reading a rule's applies_if looks at made to differ from
    what the rule wants (a bool negated, anything else another word)."""
    import re
    from dataclasses import replace

    from gpudiag import catalog
    from gpudiag.model import ProbeResult

    wanted = [
        (re.compile(catalog.template_regex(name) + "$"), equal)
        for rule in RULES
        for kind, name, equal in rule.applies_if
        if kind == "reading"
    ]

    def flipped(reading: Reading) -> Reading:
        for pattern, equal in wanted:
            if reading.ok and pattern.match(reading.key):
                other = (not equal) if isinstance(equal, bool) else f"not {equal}"
                return replace(reading, value=other)
        return reading

    probes = tuple(
        ProbeResult(p.name, p.status, p.duration_s, tuple(map(flipped, p.readings)))
        for p in snapshot.probes
    )
    return replace(snapshot, probes=probes)


def test_the_quick_tests_give_exactly_the_full_evaluations_findings(tmp_path: Path) -> None:
    """The plan skips an instance only where its quick test says the full evaluation
    would find nothing: over the demo replays (judged by their own profile and by
    others', so the profile comparisons fail), a lost GPU, the real H100 capture and
    every real nvidia-smi output, the findings are the same, in the same order."""
    from gpudiag import capture
    from gpudiag.importing import ImportError_, import_files
    from gpudiag.session import LiveNode

    judged = 0
    for name in ("healthy", "faulty"):
        host, nvml, _ = capture.load(REPO / "snapshots" / f"demo-hgx-h100-{name}.capture.json")
        snapshot = LiveNode(host, nvml, default_probes(), RULES).snapshot()
        for profile_name in (None, "b200", "a100-sxm4-80gb", "geforce"):
            quick, full = _both_ways(snapshot, profile_name)
            assert quick == full, (name, profile_name)
            judged += 1
            assert any(f.rule_id == "GPU017" for f in quick) or profile_name != "b200"
        # every reading an applies_if looks at made to differ: the rules do not apply
        flipped = _applies_if_flipped(snapshot)
        quick, full = _both_ways(flipped)
        assert quick == full and quick != _both_ways(snapshot)[0]
    base = realdata_dir()
    host, nvml, _ = capture.load(base / "h100-vm" / "h100-vm.capture.json")
    quick, full = _both_ways(LiveNode(host, nvml, default_probes(), RULES).snapshot())
    assert quick == full and quick
    outputs = [p for d in ("nvidia-smi-q", "nvidia-smi-xml") for p in sorted((base / d).glob("*"))]
    assert len(outputs) > 20
    for path in outputs:
        try:
            snapshot = import_files([str(path)])
        except ImportError_:  # a file the importer refuses has nothing to judge
            continue
        quick, full = _both_ways(snapshot)
        assert quick == full, path.name
        judged += 1
    assert judged > 20


def test_the_all_at_once_tests_pass_only_lists_every_value_of_which_passes() -> None:
    """`all_pass` (the plan's test of a rule's values in one go) is True only where the
    one-at-a-time quick check passes every value; a value not taken (None) never passes."""
    from gpudiag.rule_operators import all_pass, quick_check

    cases = {
        "present": [True],
        "equal": [5, "a", True],
        "min": [5, 2.5],
        "max": [5, 0],
        "between": [[0, 10], [2.5, 5]],
    }
    values = [0, 5, 11, 2.5, 1.0, True, False, "a", "5", [], ["a"], None]
    checked = 0
    for operator, operands in cases.items():
        for operand in operands:
            every = all_pass(operator, operand)
            one = quick_check(operator, operand)
            assert every is not None
            for first in values:
                for second in values:
                    pair = [first, second]
                    if every(pair):
                        assert one(first) and one(second), (operator, operand, pair)
                        assert None not in pair
                        checked += 1
                    elif one(first) and one(second) and None not in pair:
                        assert operator != "present", pair  # it may only miss the C shortcut
    assert checked > 50


def test_a_message_gives_its_readings_unit() -> None:
    """'power limit 500 W, default 700 W', not 'power limit 500, default 700 W'."""
    from gpudiag.session import format_finding

    readings = {
        r.key: r
        for r in (
            Reading("gpu.0.power.limit", 500.0, "W", source="nvml:x"),
            Reading("gpu.0.power.default_limit", 700.0, "W", source="nvml:x"),
        )
    }
    (finding,) = [f for f in evaluate(load_rules(), readings) if f.rule_id == "GPU016"]
    assert format_finding(finding).endswith("GPU 0: power limit 500 W, default 700 W")
